// kernels/packed_k_vnni.cpp — AVX-512 VNNI kernels of Q4_Kx16 / Q6_Kx16 (packed_k.h).
// Packed Q4_K and Q6_K weights (layouts: packed.h, Q4_Kx16 and Q6_Kx16) and
// their AVX-512 VNNI matmuls: batches of tokens and single tokens alike.
//
// Why: the type table's K-quant dot products do one row against one token
// per call, rebuilding the activation block and unpacking the row's scales
// every time, far slower than the packed Q4_0 kernels.
//
// Why the bits match the scalar q4_k_dot_q8_k (Q6_K: see below): per super-block (256 elements)
// each row takes the same two exact integers -- sum_q = sum over the eight
// sub-blocks of scale * (codes . activations), and sum_mins = sum of min *
// (sub-block sum of activation codes) -- and folds them into its float sum
// with the same two fma, scale products rounded first, in block order. Only
// the integers are formed differently (vpdpbusd over 4-byte runs of 16 rows,
// vpmulld by the scales, vpdpwssd for the mins), and integer sums are exact.
#include "kernels/packed_k_vnni.h"

#include <algorithm>
#include <cfloat>
#include <cstdint>
#include <cstring>

#include "core/quant_blocks.h"
#include "core/simd.h"
#include "kernels/packed_k.h"

namespace cairn::kernels {

namespace {

using quant::BlockQ4_K;
using quant::BlockQ8_K;

// quant::q8_k_from_float's arithmetic 16 lanes at a time: the same first
// element of largest magnitude (its sign is the scale's), the same float
// product rounded to nearest even, so the same record bit for bit. Blocks of
// zeros or with a NaN or infinity take the scalar function. In decode this
// runs on the caller while the workers wait, so it is vectorised.
CAIRN_VNNI void quantize_k_act_vnni(bool q6, const float* x, int64_t cols, uint8_t* dst) {
  const int64_t nb = cols / kQK;
  const __m512 sign = _mm512_set1_ps(-0.0f);
  for (int64_t b = 0; b < nb; ++b) {
    const float* src = x + kQK * b;
    uint8_t* rec = dst + kKRec * (size_t)b;
    __m512 amax16 = _mm512_setzero_ps();
    __mmask16 odd = 0;  // lanes that saw a NaN or an infinity
    for (int i = 0; i < 16; ++i) {
      const __m512 a = _mm512_andnot_ps(sign, _mm512_loadu_ps(src + 16 * i));
      odd |= _mm512_cmp_ps_mask(a, _mm512_set1_ps(FLT_MAX), _CMP_NLE_UQ);
      amax16 = _mm512_max_ps(amax16, a);
    }
    const float amax = _mm512_reduce_max_ps(amax16);
    int first = -1;
    for (int i = 0; i < 16 && first < 0 && odd == 0 && amax != 0.0f; ++i) {
      const __mmask16 hit = _mm512_cmp_ps_mask(
          _mm512_andnot_ps(sign, _mm512_loadu_ps(src + 16 * i)), _mm512_set1_ps(amax), _CMP_EQ_OQ);
      if (hit != 0) first = 16 * i + __builtin_ctz(hit);
    }
    BlockQ8_K blk;
    if (first < 0) {
      quant::q8_k_from_float(src, &blk, kQK);
      store_k_record(q6, blk, rec);
      continue;
    }
    const float iscale = -127.0f / src[first];
    const __m512 scale = _mm512_set1_ps(iscale);
    const __m512i top = _mm512_set1_epi32(127);
    for (int i = 0; i < 16; ++i) {
      const __m512i q = _mm512_min_epi32(
          top, _mm512_cvtps_epi32(_mm512_mul_ps(scale, _mm512_loadu_ps(src + 16 * i))));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(blk.qs + 16 * i), _mm512_cvtsepi32_epi8(q));
      blk.bsums[i] = (int16_t)_mm512_reduce_add_epi32(q);
    }
    blk.d = 1.0f / iscale;
    store_k_record(q6, blk, rec);
  }
}

// acc += dpbusd(w, the 4 activation bytes at p broadcast to every lane).
CAIRN_VNNI inline __m512i dpbusd_bcast(__m512i acc, __m512i w, const uint8_t* p) {
  asm("vpdpbusd %2%{1to16%}, %1, %0"
      : "+v"(acc)
      : "v"(w), "m"(*reinterpret_cast<const int32_t*>(p)));
  return acc;
}

// For NT tokens, the dots of split Q6_K chunks base + k (into even[t]) and
// base + 4 + k (into odd[t]), k < 4: two sub-blocks, two chains per token.
// Chunk j holds elements 4j.. of each row, so its activations are codes 4j...
template <int NT>
CAIRN_VNNI inline void chunk_dots(const uint8_t* codes, int base, const uint8_t* act, size_t stride,
                                  __m512i* even, __m512i* odd) {
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) even[t] = odd[t] = _mm512_setzero_si512();
#pragma GCC unroll 4
  for (int k = 0; k < 4; ++k) {
    const int e = base + k, o = e + 4;
    const __m512i w0 = _mm512_load_si512(codes + 64 * e);
    const __m512i w1 = _mm512_load_si512(codes + 64 * o);
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) {
      const uint8_t* a = act + t * stride + kRecQs;
      even[t] = dpbusd_bcast(even[t], w0, a + 4 * e);
      odd[t] = dpbusd_bcast(odd[t], w1, a + 4 * o);
    }
  }
}

// One token against one super-block of a group (decode): no split copy, the
// codes go from memory straight into the dots. High nibbles are masked in
// place (16x their value) and their sum shifted back, exact as every term is
// a multiple of 16 (as the Q4_0 one-token kernel does).
CAIRN_VNNI inline __m512 k_one_block(const uint8_t* blk, const uint8_t* a, __m512 acc) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i mf0 = _mm512_set1_epi8((char)0xF0);
  __m512i sum_q = _mm512_setzero_si512();
#pragma GCC unroll 4
  for (int j = 0; j < 4; ++j) {
    __m512i lo = _mm512_setzero_si512(), hi = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) {
      const __m512i q = _mm512_loadu_si512(blk + kOffCodes + 64 * (8 * j + c));
      lo = dpbusd_bcast(lo, _mm512_and_si512(q, m4), a + kRecQs + 64 * j + 4 * c);
      hi = dpbusd_bcast(hi, _mm512_and_si512(q, mf0), a + kRecQs + 64 * j + 32 + 4 * c);
    }
    const __m512i sc_lo = _mm512_cvtepu8_epi32(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + kOffScales + 16 * (2 * j))));
    const __m512i sc_hi = _mm512_cvtepu8_epi32(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + kOffScales + 16 * (2 * j + 1))));
    sum_q = _mm512_add_epi32(sum_q, _mm512_mullo_epi32(lo, sc_lo));
    sum_q = _mm512_add_epi32(sum_q, _mm512_mullo_epi32(_mm512_srai_epi32(hi, 4), sc_hi));
  }
  __m512i sum_mins = _mm512_setzero_si512();
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    const __m512i m = _mm512_cvtepu8_epi16(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kOffMins + 32 * i)));
    int32_t pair;
    std::memcpy(&pair, a + kRecSums + 4 * i, 4);
    sum_mins = _mm512_dpwssd_epi32(sum_mins, m, _mm512_set1_epi32(pair));
  }
  float yd;
  std::memcpy(&yd, a + kRecD, 4);
  const __m512 d =
      _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kOffD)));
  const __m512 dmin =
      _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kOffDmin)));
  acc = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(yd), d), _mm512_cvtepi32_ps(sum_q), acc);
  return _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(-yd), dmin), _mm512_cvtepi32_ps(sum_mins),
                         acc);
}

// NT tokens against one Q4_K super-block of a group, as k_one_block() does
// for one: each chunk of codes is loaded and masked once and feeds every
// token's dots (splitting the codes into a copy first, as Q6_K's prompt tiles
// do, cost about as much as the dots at a few tokens).
template <int NT>
CAIRN_VNNI inline void k_few_block(const uint8_t* blk, const uint8_t* act, size_t stride,
                                   __m512* acc) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i mf0 = _mm512_set1_epi8((char)0xF0);
  __m512i sum_q[NT];
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) sum_q[t] = _mm512_setzero_si512();
// Not unrolled: with the four runs interleaved the sums no longer fit in
// registers.
#pragma GCC unroll 1
  for (int j = 0; j < 4; ++j) {
    __m512i lo[NT], hi[NT];
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) lo[t] = hi[t] = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) {
      const __m512i q = _mm512_loadu_si512(blk + kOffCodes + 64 * (8 * j + c));
      const __m512i l = _mm512_and_si512(q, m4), h = _mm512_and_si512(q, mf0);
#pragma GCC unroll 8
      for (int t = 0; t < NT; ++t) {
        const uint8_t* a = act + t * stride + kRecQs + 64 * j + 4 * c;
        lo[t] = dpbusd_bcast(lo[t], l, a);
        hi[t] = dpbusd_bcast(hi[t], h, a + 32);
      }
    }
    const __m512i sc_lo = _mm512_cvtepu8_epi32(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + kOffScales + 16 * (2 * j))));
    const __m512i sc_hi = _mm512_cvtepu8_epi32(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + kOffScales + 16 * (2 * j + 1))));
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) {
      sum_q[t] = _mm512_add_epi32(sum_q[t], _mm512_mullo_epi32(lo[t], sc_lo));
      sum_q[t] = _mm512_add_epi32(sum_q[t], _mm512_mullo_epi32(_mm512_srai_epi32(hi[t], 4), sc_hi));
    }
  }
  q4k_finish<NT>(blk, act, stride, sum_q, acc);
}

template <int NT>
[[gnu::noinline]] CAIRN_VNNI void k6_tile(const uint8_t* blk, const uint8_t* codes,
                                          const uint8_t* act, size_t stride, __m512* acc_io) {
  __m512i sum_q[NT], offset[NT];
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) sum_q[t] = offset[t] = _mm512_setzero_si512();
  for (int i = 0; i < 8; ++i) {  // sub-blocks 2i (chunks 8i..8i+3) and 2i + 1
    const Q6Scales sc = q6_scales(blk, i);
    __m512i even[NT], odd[NT];
    chunk_dots<NT>(codes, 8 * i, act, stride, even, odd);
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) {
      sum_q[t] = _mm512_add_epi32(sum_q[t], _mm512_mullo_epi32(even[t], sc.even));
      sum_q[t] = _mm512_add_epi32(sum_q[t], _mm512_mullo_epi32(odd[t], sc.odd));
      int32_t pair;
      std::memcpy(&pair, act + t * stride + kRecSums + 4 * i, 4);
      offset[t] = _mm512_dpwssd_epi32(offset[t], sc.pairs, _mm512_set1_epi32(pair));
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t)
    acc_io[t] = q6_accumulate(blk, act + t * stride, sum_q[t], offset[t], acc_io[t]);
}

// vgf2p8affineqb (GFNI): each byte of x through the 8 x 8 bit matrix m
// (output bit i = parity of m's byte 7 - i AND the byte). Through asm, so the
// kernels' target stays without GFNI (the compiler never uses it on its own)
// and only callers that checked gfni_enabled() reach it.
CAIRN_VNNI inline __m512i gf2p8affine(__m512i x, __m512i m) {
  __m512i r;
  asm("vgf2p8affineqb $0, %2, %1, %0" : "=v"(r) : "v"(x), "v"(m));
  return r;
}

// q6_codes with GFNI bit moves: 9 operations for the four vectors instead of
// 17, which speeds up Q6_K decode.
CAIRN_VNNI inline Q6Codes q6_codes_gfni(const uint8_t* blk, int c) {
  const __m512i h = _mm512_loadu_si512(blk + kQ6OffHigh + 64 * c);
  const __m512i l0 = _mm512_loadu_si512(blk + kQ6OffLow + 64 * c);
  const __m512i l1 = _mm512_loadu_si512(blk + kQ6OffLow + 64 * (16 + c));
  const __m512i hi_to_lo = _mm512_set1_epi64(0x1020408000000000);  // bits 4-7 -> 0-3
  const __m512i b01 = _mm512_set1_epi64(0x0000000001020000);       // bits 0-1 -> 4-5
  const __m512i b23 = _mm512_set1_epi64(0x0000000004080000);       // bits 2-3 -> 4-5
  const __m512i b67 = _mm512_set1_epi64(0x0000000040800000);       // bits 6-7 -> 4-5
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i m30 = _mm512_set1_epi8(0x30);
  constexpr int kAndOr = 0xEA;  // (a & b) | c
  Q6Codes q;
  q.g[0] = _mm512_ternarylogic_epi32(l0, m4, gf2p8affine(h, b01), kAndOr);
  q.g[1] = _mm512_ternarylogic_epi32(l1, m4, gf2p8affine(h, b23), kAndOr);
  q.g[2] = _mm512_ternarylogic_epi32(h, m30, gf2p8affine(l0, hi_to_lo), kAndOr);
  q.g[3] = _mm512_or_si512(gf2p8affine(l1, hi_to_lo), gf2p8affine(h, b67));
  return q;
}

// One token against one super-block of a group (decode), codes built in
// registers (kGfni: by q6_codes_gfni).
template <bool kGfni>
CAIRN_VNNI inline __m512 k6_one_block(const uint8_t* blk, const uint8_t* a, __m512 acc) {
  // Sub-block s = 4k + q gets element groups 64k + 16q + 4c' for c' < 4:
  // high-bits chunks 4q..4q+3 serve sub-blocks q, 4 + q, 8 + q, 12 + q.
  __m512i dots[16];
#pragma GCC unroll 4
  for (int q = 0; q < 4; ++q) {
    __m512i d4[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(),
                     _mm512_setzero_si512()};
#pragma GCC unroll 4
    for (int cc = 0; cc < 4; ++cc) {
      const int c = 4 * q + cc;
      const Q6Codes codes = kGfni ? q6_codes_gfni(blk, c) : q6_codes(blk, c);
#pragma GCC unroll 4
      for (int k = 0; k < 4; ++k)
        d4[k] = dpbusd_bcast(d4[k], codes.g[k], a + kRecQs + 64 * k + 4 * c);
    }
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) dots[4 * k + q] = d4[k];
  }
  __m512i sum_q = _mm512_setzero_si512(), offset = _mm512_setzero_si512();
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    const Q6Scales sc = q6_scales(blk, i);
    sum_q = _mm512_add_epi32(sum_q, _mm512_mullo_epi32(dots[2 * i], sc.even));
    sum_q = _mm512_add_epi32(sum_q, _mm512_mullo_epi32(dots[2 * i + 1], sc.odd));
    int32_t pair;
    std::memcpy(&pair, a + kRecSums + 4 * i, 4);
    offset = _mm512_dpwssd_epi32(offset, sc.pairs, _mm512_set1_epi32(pair));
  }
  return q6_accumulate(blk, a, sum_q, offset, acc);
}

// Element group k (0..3: elements 64k + 4c..) of Q6_K chunk c, as q6_codes()
// builds all four: one group at a time keeps fewer vectors live.
template <int K>
CAIRN_VNNI inline __m512i q6_group(const uint8_t* blk, int c) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i m30 = _mm512_set1_epi8(0x30);
  const __m512i h = _mm512_loadu_si512(blk + kQ6OffHigh + 64 * c);
  const __m512i l = _mm512_loadu_si512(blk + kQ6OffLow + 64 * (K % 2 ? 16 + c : c));
  const __m512i low =
      K < 2 ? _mm512_and_si512(l, m4) : _mm512_and_si512(_mm512_srli_epi16(l, 4), m4);
  const __m512i top = K == 0   ? _mm512_slli_epi16(h, 4)
                      : K == 1 ? _mm512_slli_epi16(h, 2)
                      : K == 2 ? h
                               : _mm512_srli_epi16(h, 2);
  return _mm512_or_si512(low, _mm512_and_si512(top, m30));
}

// Sub-blocks 4K + q (q = 0..3) of one Q6_K super-block for NT tokens:
// sum_q[t] += scale * (codes . activations), as k6_one_block() forms them.
template <int K, int NT>
CAIRN_VNNI inline void k6_few_groups(const uint8_t* blk, const uint8_t* act, size_t stride,
                                     __m512i* sum_q) {
#pragma GCC unroll 1
  for (int q = 0; q < 4; ++q) {
    __m512i d[NT];
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) d[t] = _mm512_setzero_si512();
#pragma GCC unroll 4
    for (int cc = 0; cc < 4; ++cc) {
      const int c = 4 * q + cc;
      const __m512i g = q6_group<K>(blk, c);
#pragma GCC unroll 8
      for (int t = 0; t < NT; ++t)
        d[t] = dpbusd_bcast(d[t], g, act + t * stride + kRecQs + 64 * K + 4 * c);
    }
    const int sb = 4 * K + q;  // scales of sub-blocks 2i, 2i + 1 are pair i
    const __m512i pairs = _mm512_cvtepi8_epi16(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kQ6OffScales + 32 * (sb / 2))));
    const __m512i sc =
        sb % 2 ? _mm512_srai_epi32(pairs, 16) : _mm512_srai_epi32(_mm512_slli_epi32(pairs, 16), 16);
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t)
      sum_q[t] = _mm512_add_epi32(sum_q[t], _mm512_mullo_epi32(d[t], sc));
  }
}

// NT tokens against one Q6_K super-block of a group (k_few_block's Q6_K
// counterpart): codes built once per chunk and element group for every
// token, the offset through the bsums as k6_one_block() does, its one fma.
template <int NT>
CAIRN_VNNI inline void k6_few_block(const uint8_t* blk, const uint8_t* act, size_t stride,
                                    __m512* acc) {
  __m512i sum_q[NT], offset[NT];
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) sum_q[t] = offset[t] = _mm512_setzero_si512();
  k6_few_groups<0, NT>(blk, act, stride, sum_q);
  k6_few_groups<1, NT>(blk, act, stride, sum_q);
  k6_few_groups<2, NT>(blk, act, stride, sum_q);
  k6_few_groups<3, NT>(blk, act, stride, sum_q);
#pragma GCC unroll 1
  for (int i = 0; i < 8; ++i) {
    const __m512i pairs = _mm512_cvtepi8_epi16(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kQ6OffScales + 32 * i)));
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) {
      int32_t pair;
      std::memcpy(&pair, act + t * stride + kRecSums + 4 * i, 4);
      offset[t] = _mm512_dpwssd_epi32(offset[t], pairs, _mm512_set1_epi32(pair));
    }
  }
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t)
    acc[t] = q6_accumulate(blk, act + t * stride, sum_q[t], offset[t], acc[t]);
}

// One token against groups [g0, g1), super-block by super-block, weights
// requested `ahead` bytes before their loads (decode streams them from memory).
template <bool kQ6, bool kGfni = false>
CAIRN_VNNI void k_one(const PackedMatrix& pm, int64_t g0, int64_t g1, const uint8_t* act,
                      float* out, size_t ahead) {
  for (int64_t g = g0; g < g1; ++g) {
    __m512 acc = _mm512_setzero_ps();
    const uint8_t* blk = pm.slice(g, 0);
    const uint8_t* a = act;
    for (int64_t b = 0; b < pm.n_blocks; ++b, blk += pm.block_bytes, a += kKRec) {
      if (ahead != 0)  // may point past the weights: a prefetch never faults
        for (size_t line = 0; line < pm.block_bytes; line += 64)
          _mm_prefetch(reinterpret_cast<const char*>(blk + ahead + line), _MM_HINT_T1);
      acc = kQ6 ? k6_one_block<kGfni>(blk, a, acc) : k_one_block(blk, a, acc);
    }
    store_rows(pm, g, out + g * kGroup, acc);
  }
}

// k_few_block (Q4_K) and k6_few_block (Q6_K) for 1..kKFewTile tokens. Tiles
// of 8: 3 x 8 sums, the weights and masks nearly fill the 32 vector registers.
constexpr int kKFewTile = 8;
using KFewBlockFn = void (*)(const uint8_t*, const uint8_t*, size_t, __m512*);
constexpr KFewBlockFn kKFewBlocks[2][kKFewTile] = {
    {k_few_block<1>, k_few_block<2>, k_few_block<3>, k_few_block<4>, k_few_block<5>, k_few_block<6>,
     k_few_block<7>, k_few_block<8>},
    {k6_few_block<1>, k6_few_block<2>, k6_few_block<3>, k6_few_block<4>, k6_few_block<5>,
     k6_few_block<6>, k6_few_block<7>, k6_few_block<8>}};
static_assert(kKFewTile == 8, "kKFewBlocks names every tile size");

// Tokens [0, n) (n <= kKTokenChunk) against groups [g0, g1) of Q4_K or Q6_K
// weights: out[t * out_stride + r]. Each super-block serves every tile of up
// to kKFewTile tokens while in L1; weights requested `ahead` bytes before
// their loads.
CAIRN_VNNI void k_few(const PackedMatrix& pm, int64_t g0, int64_t g1, const uint8_t* act,
                      size_t stride, int64_t n, float* out, int64_t out_stride, size_t ahead) {
  const bool q6 = pm.layout == PackedMatrix::Layout::Q6_Kx16;
  for (int64_t g = g0; g < g1; ++g) {
    __m512 acc[kKTokenChunk];
    for (int64_t t = 0; t < n; ++t) acc[t] = _mm512_setzero_ps();
    const uint8_t* blk = pm.slice(g, 0);
    const uint8_t* a = act;
    for (int64_t b = 0; b < pm.n_blocks; ++b, blk += pm.block_bytes, a += kKRec) {
      if (ahead != 0)  // may point past the weights: a prefetch never faults
        for (size_t line = 0; line < pm.block_bytes; line += 64)
          _mm_prefetch(reinterpret_cast<const char*>(blk + ahead + line), _MM_HINT_T1);
      for (int64_t t = 0; t < n; t += kKFewTile)
        kKFewBlocks[q6][std::min<int64_t>(kKFewTile, n - t) - 1](blk, a + (size_t)t * stride,
                                                                 stride, acc + t);
    }
    for (int64_t t = 0; t < n; ++t) store_rows(pm, g, out + t * out_stride + g * kGroup, acc[t]);
  }
}

// Q6_K prompt tiles: tokens per tile (registers: 5 per token; 6 prefilled
// a little faster than 4).
constexpr int kKTile = 6;

// The Q6_K tile kernel for nt (1..kKTile) tokens.
CAIRN_VNNI void k6_tile_n(int nt, const uint8_t* blk, const uint8_t* codes, const uint8_t* act,
                          size_t stride, __m512* acc) {
  switch (nt) {
    case 1:
      return k6_tile<1>(blk, codes, act, stride, acc);
    case 2:
      return k6_tile<2>(blk, codes, act, stride, acc);
    case 3:
      return k6_tile<3>(blk, codes, act, stride, acc);
    case 4:
      return k6_tile<4>(blk, codes, act, stride, acc);
    case 5:
      return k6_tile<5>(blk, codes, act, stride, acc);
    default:
      return k6_tile<kKTile>(blk, codes, act, stride, acc);
  }
}
static_assert(kKTile == 6, "k6_tile_n names every tile size");

// Q6_K group g against tokens [0, n_tokens) (at most kKTokenChunk):
// out[t * out_stride + r]. The codes of each super-block are split once into
// a copy for every tile: k6_few_block rebuilds them per tile of 8 tokens,
// which over a 64-token chunk is slower.
CAIRN_VNNI void k6_group(const PackedMatrix& pm, int64_t g, const uint8_t* act, size_t stride,
                         int64_t n_tokens, float* out, int64_t out_stride) {
  alignas(64) static thread_local uint8_t codes[64 * 64];
  __m512 acc[kKTokenChunk];
  for (int64_t t = 0; t < n_tokens; ++t) acc[t] = _mm512_setzero_ps();
  const uint8_t* blk = pm.slice(g, 0);
  for (int64_t b = 0; b < pm.n_blocks; ++b, blk += pm.block_bytes) {
    // The next super-block (of this group or the next), requested while the
    // tiles compute: without it the memory idles meanwhile, and the split
    // then waits for it.
    for (size_t line = 0; line < pm.block_bytes; line += 64)
      _mm_prefetch(reinterpret_cast<const char*>(blk + pm.block_bytes + line), _MM_HINT_T1);
    split_q6(blk, codes);
    for (int64_t t = 0; t < n_tokens; t += kKTile) {
      const int nt = (int)std::min<int64_t>(kKTile, n_tokens - t);
      k6_tile_n(nt, blk, codes, act + (size_t)t * stride + kKRec * (size_t)b, stride, acc + t);
    }
  }
  for (int64_t t = 0; t < n_tokens; ++t) store_rows(pm, g, out + t * out_stride, acc[t]);
}

}  // namespace

void vnni_quantize_k_act(bool q6, const float* x, int64_t cols, uint8_t* dst) {
  quantize_k_act_vnni(q6, x, cols, dst);
}

void vnni_k_one(const PackedMatrix& pm, int64_t g0, int64_t g1, const uint8_t* act, float* out,
                size_t ahead, bool gfni) {
  const bool q6 = pm.layout == PackedMatrix::Layout::Q6_Kx16;
  (q6 ? (gfni ? k_one<true, true> : k_one<true>) : k_one<false>)(pm, g0, g1, act, out, ahead);
}

void vnni_k_few(const PackedMatrix& pm, int64_t g0, int64_t g1, const uint8_t* act, size_t stride,
                int64_t n, float* out, int64_t out_stride, size_t ahead) {
  k_few(pm, g0, g1, act, stride, n, out, out_stride, ahead);
}

void vnni_k6_group(const PackedMatrix& pm, int64_t g, const uint8_t* act, size_t stride,
                   int64_t n_tokens, float* out, int64_t out_stride) {
  k6_group(pm, g, act, stride, n_tokens, out, out_stride);
}

}  // namespace cairn::kernels
