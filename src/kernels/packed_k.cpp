// Packed Q4_K and Q6_K weights (layouts: packed.h, Q4_Kx16 and Q6_Kx16) and
// their AVX-512 VNNI matmuls: batches of tokens and single tokens alike.
//
// Why: the type table's K-quant dot products do one row against one token
// per call, rebuilding the activation block and unpacking the row's scales
// every time; TinyLlama-shaped models prefilled at 38 (Q4_K) and 37 (Q6_K)
// tok/s and decoded at 20 and 15 (Q4_0: ~300 and ~45) on the 2-core Intel host.
//
// Why the bits match the scalar q4_k_dot_q8_k (Q6_K: see below): per super-block (256 elements)
// each row takes the same two exact integers -- sum_q = sum over the eight
// sub-blocks of scale * (codes . activations), and sum_mins = sum of min *
// (sub-block sum of activation codes) -- and folds them into its float sum
// with the same two fma, scale products rounded first, in block order. Only
// the integers are formed differently (vpdpbusd over 4-byte runs of 16 rows,
// vpmulld by the scales, vpdpwssd for the mins), and integer sums are exact.
#include <algorithm>
#include <cfloat>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/cpu_features.h"
#include "core/quant.h"
#include "core/quant_blocks.h"
#include "core/simd.h"
#include "kernels/amx_tiles.h"
#include "kernels/packed.h"

#define CAIRN_VNNI CAIRN_SIMD_FN("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c")

namespace cairn::kernels {

namespace {

using quant::BlockQ4_K;
using quant::BlockQ8_K;
constexpr int kGroup = 16;
constexpr int64_t kQK = 256;  // elements per super-block

// One super-block of one 16-row group (kQ4KBlockBytes in all):
constexpr size_t kOffD = 0;        // 16 f16 d
constexpr size_t kOffDmin = 32;    // 16 f16 dmin
constexpr size_t kOffScales = 64;  // [8 sub-blocks][16 rows] u8 scales
constexpr size_t kOffMins = 192;   // [4 pairs][16 rows][2] u8: mins of sub-blocks 2i, 2i+1
constexpr size_t kOffCodes = 320;  // [4 runs j][8 chunks][16 rows][4 bytes]: qs[32j + 4c ..]
static_assert(kOffCodes + 4 * 8 * 64 == kQ4KBlockBytes, "packed.h names the block size");

// One Q6_K super-block of one group (kQ6KBlockBytes): 16 f16 d; the 16
// sub-block scales of each row in pairs ([pair][row][2] int8: one load gives
// both the int32 scales and vpdpwssd's pairs); the low 4 bits of the codes as
// 32 chunks (chunk c: elements 4c.. in the low nibbles, 128 + 4c.. in the
// high ones); their top 2 bits as 16 chunks (chunk c: elements 4c.., 64 + 4c..,
// 128 + 4c.., 192 + 4c.. in bit pairs 0-1, 2-3, 4-5, 6-7).
constexpr size_t kQ6OffD = 0, kQ6OffScales = 32, kQ6OffLow = 288, kQ6OffHigh = 288 + 32 * 64;
static_assert(kQ6OffHigh + 16 * 64 == kQ6KBlockBytes, "packed.h names the block size");

// Activations: each token's row quantized to Q8_K exactly as the type table
// does (quant::q8_k_from_float), one record per super-block: the 256 codes,
// d, and sums of codes as int16 (pairs of them feed vpdpwssd): Q4_K, the
// eight 32-element sub-blocks' sums; Q6_K, Q8_K's own sixteen bsums.
constexpr size_t kRecQs = 0, kRecD = 256, kRecSums = 260;
constexpr size_t kKRec = 320;  // 292 used at most, rounded to keep the codes 64-byte aligned

size_t k_act_stride(int64_t cols) { return kKRec * (size_t)(cols / kQK); }

// One Q8_K block into its record.
void store_k_record(bool q6, const BlockQ8_K& blk, uint8_t* rec) {
  std::memcpy(rec + kRecQs, blk.qs, kQK);
  std::memcpy(rec + kRecD, &blk.d, 4);
  if (q6) {
    std::memcpy(rec + kRecSums, blk.bsums, sizeof(blk.bsums));
    return;
  }
  int16_t sums[8];
  for (int s = 0; s < 8; ++s)
    sums[s] = (int16_t)(blk.bsums[2 * s] + blk.bsums[2 * s + 1]);  // |.| <= 32 * 128
  std::memcpy(rec + kRecSums, sums, sizeof(sums));
}

// quant::q8_k_from_float's arithmetic 16 lanes at a time: the same first
// element of largest magnitude (its sign is the scale's), the same float
// product rounded to nearest even, so the same record bit for bit. Blocks of
// zeros or with a NaN or infinity take the scalar function. In decode this
// runs on the caller while the workers wait: the scalar loop was ~3 % of a
// TinyLlama Q4_K token.
CAIRN_VNNI void quantize_k_act(bool q6, const float* x, int64_t cols, uint8_t* dst) {
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

// The end of a Q4_K super-block for NT tokens (records act + t * stride),
// given each token's sum_q: the mins' sum through the activation sums, then
// acc[t] += each row's two fma, as q4_k_dot_q8_k.
template <int NT>
CAIRN_VNNI inline void q4k_finish(const uint8_t* blk, const uint8_t* act, size_t stride,
                                  const __m512i* sum_q, __m512* acc) {
  __m512i sum_mins[NT];
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) sum_mins[t] = _mm512_setzero_si512();
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    const __m512i m = _mm512_cvtepu8_epi16(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kOffMins + 32 * i)));
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) {
      int32_t pair;
      std::memcpy(&pair, act + t * stride + kRecSums + 4 * i, 4);
      sum_mins[t] = _mm512_dpwssd_epi32(sum_mins[t], m, _mm512_set1_epi32(pair));
    }
  }
  const __m512 d =
      _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kOffD)));
  const __m512 dmin =
      _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kOffDmin)));
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) {
    float yd;
    std::memcpy(&yd, act + t * stride + kRecD, 4);
    const __m512 a =
        _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(yd), d), _mm512_cvtepi32_ps(sum_q[t]), acc[t]);
    acc[t] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(-yd), dmin),
                             _mm512_cvtepi32_ps(sum_mins[t]), a);
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

// ---- Q6_K ---------------------------------------------------------------------
//
// sum_q = sum over the 16 sub-blocks (16 elements) of scale * ((code - 32) .
// activations) = sum of scale * (code . activations) - 32 * sum of scale *
// bsum: vpdpbusd over the unsigned 6-bit codes, vpmulld by the scales, and the
// offset through Q8_K's bsums with vpdpwssd. The same exact integer as
// q6_k_dot_q8_k's, then its one fma.

// Four code vectors (element groups 4c, 64 + 4c, 128 + 4c, 192 + 4c) from
// high-bits chunk c and low chunks c and 16 + c.
struct Q6Codes {
  __m512i g[4];
};
CAIRN_VNNI inline Q6Codes q6_codes(const uint8_t* blk, int c) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i m30 = _mm512_set1_epi8(0x30);
  const __m512i h = _mm512_loadu_si512(blk + kQ6OffHigh + 64 * c);
  const __m512i l0 = _mm512_loadu_si512(blk + kQ6OffLow + 64 * c);
  const __m512i l1 = _mm512_loadu_si512(blk + kQ6OffLow + 64 * (16 + c));
  Q6Codes q;
  q.g[0] =
      _mm512_or_si512(_mm512_and_si512(l0, m4), _mm512_and_si512(_mm512_slli_epi16(h, 4), m30));
  q.g[1] =
      _mm512_or_si512(_mm512_and_si512(l1, m4), _mm512_and_si512(_mm512_slli_epi16(h, 2), m30));
  q.g[2] =
      _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l0, 4), m4), _mm512_and_si512(h, m30));
  q.g[3] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(l1, 4), m4),
                           _mm512_and_si512(_mm512_srli_epi16(h, 2), m30));
  return q;
}

// The codes as bytes, chunk e / 4 for elements e.. (64 chunks), for every
// tile of a token chunk.
CAIRN_VNNI void split_q6(const uint8_t* blk, uint8_t* codes) {
  for (int c = 0; c < 16; ++c) {
    const Q6Codes q = q6_codes(blk, c);
    for (int k = 0; k < 4; ++k) _mm512_store_si512(codes + 64 * (16 * k + c), q.g[k]);
  }
}

// Scales of sub-blocks 2i and 2i + 1 as int32 lanes, and the pairs as loaded.
struct Q6Scales {
  __m512i pairs, even, odd;
};
CAIRN_VNNI inline Q6Scales q6_scales(const uint8_t* blk, int i) {
  Q6Scales sc;
  sc.pairs = _mm512_cvtepi8_epi16(
      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kQ6OffScales + 32 * i)));
  sc.even = _mm512_srai_epi32(_mm512_slli_epi32(sc.pairs, 16), 16);
  sc.odd = _mm512_srai_epi32(sc.pairs, 16);
  return sc;
}

// sum_q - 32 * (scale . bsum), converted, into one fma as q6_k_dot_q8_k.
CAIRN_VNNI inline __m512 q6_accumulate(const uint8_t* blk, const uint8_t* a, __m512i sum_q,
                                       __m512i offset, __m512 acc) {
  float yd;
  std::memcpy(&yd, a + kRecD, 4);
  const __m512 d =
      _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk + kQ6OffD)));
  sum_q = _mm512_sub_epi32(sum_q, _mm512_slli_epi32(offset, 5));
  return _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(yd), d), _mm512_cvtepi32_ps(sum_q), acc);
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
// 17 (TinyLlama Q6_K decode, `bench-model -p 16 -n 64 --batch 1`, AMD Zen 5,
// alternating with CAIRN_GFNI=off: 59.2 / 57.3 / 51.6 -> 61.7 / 63.0 / 62.4
// tok/s, strict efficiency 68-70 -> 80-85 %).
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

// ---- drivers --------------------------------------------------------------------

// Group g's 16 outputs (fewer in a short last group).
CAIRN_VNNI inline void store_rows(const PackedMatrix& pm, int64_t g, float* out, __m512 acc) {
  const int64_t n_rows = std::min<int64_t>(kGroup, pm.rows - g * kGroup);
  const __mmask16 mask = n_rows >= kGroup ? (__mmask16)0xFFFF : (__mmask16)((1u << n_rows) - 1);
  _mm512_mask_storeu_ps(out, mask, acc);
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

// Batches of 2..kKFewTokens tokens take k_few. TinyLlama-shaped decode
// (`bench-model -p 32 -n 32`, AMD EPYC Zen 5, 2 threads, two rounds against
// the split-and-tile path, aggregate tok/s): Q4_K batch 2 97-104 -> 111-153,
// 4 150-183 -> 212-259, 8 199-210 -> 316-318, 16 262-277 -> 351-353; Q6_K
// batch 2 57-61 -> 119-129, 4 98-103 -> 195-198, 8 167-172 -> 273-283,
// 16 215-227 -> 267-291.
constexpr int kKFewTokens = 16;

// Longer batches (prompts) go by chunks of this many tokens: each thread
// keeps its groups for every chunk, their weights stay in its caches.
constexpr int64_t kKTokenChunk = 64;

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

// Q6_K prompt tiles: tokens per tile (registers: 5 per token). 6 against 4,
// alternating (TinyLlama shape, Intel): Q6_K prefill about +2 %.
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
// which over a 64-token chunk is slower (bench_matmul q6_k 5632x2048, 128
// tokens, one thread: 196-203 against 221-257 GMAC/s).
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

// ---- AMX tiles --------------------------------------------------------------
//
// Where AMX runs (amx_tiles.h), prompts take one tdpbssd per sub-block, group
// and 16 tokens: the 16 x 16 exact sums (codes . activations) of a sub-block
// that the VNNI tiles form with 8 (Q4_K) or 4 (Q6_K) vpdpbusd per token and
// group. The vector units keep the rest, the same integer and float
// operations as the VNNI kernels (scale products with vpmulld, the mins' or
// offset's sums with vpdpwssd, q4k_finish / q6_accumulate), so the bits do
// not change. Unmeasured: no host so far had AMX.
//
// Operands: A = 16 tokens' activation codes of one sub-block (32 or 16 bytes
// of each record); B = the sub-block's codes of one group, row k holding
// elements 4k..4k+3 of each of the 16 rows (tdpbssd reads them as signed
// bytes: the codes are 0..15 or 0..63, the same values). Each super-block's
// codes are split once into that form (Q4_K: nibbles masked; Q6_K: split_q6)
// for every tile of the token chunk.

// Q4_K super-block codes as B tiles: sub-block s at codes + 512 s, row c the
// low (even s) or high (odd s) nibbles of chunk c of run s / 2.
CAIRN_VNNI void split_q4k(const uint8_t* blk, uint8_t* codes) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  for (int j = 0; j < 4; ++j) {
    for (int c = 0; c < 8; ++c) {
      const __m512i q = _mm512_loadu_si512(blk + kOffCodes + 64 * (8 * j + c));
      _mm512_store_si512(codes + 512 * (2 * j) + 64 * c, _mm512_and_si512(q, m4));
      _mm512_store_si512(codes + 512 * (2 * j + 1) + 64 * c,
                         _mm512_and_si512(_mm512_srli_epi16(q, 4), m4));
    }
  }
}

// Groups g .. g + ng - 1 (ng: 1 or 2) of Q4_K or Q6_K weights against
// n_tokens tokens (a multiple of kAmxTokens, at most kKTokenChunk):
// out[t * out_stride + r].
template <class Tiles, bool kQ6>
CAIRN_VNNI void amx_k_groups(const PackedMatrix& pm, int64_t g, int ng, const uint8_t* act,
                             size_t stride, int64_t n_tokens, float* out, int64_t out_stride) {
  constexpr int kSubs = kQ6 ? 16 : 8;            // sub-blocks per super-block
  constexpr int kSubElems = kQ6 ? 16 : 32;       // their elements: A's bytes per token
  constexpr int kSubBytes = kSubElems / 4 * 64;  // a B tile: a row of 64 bytes per 4 elements
  alignas(64) static thread_local uint8_t codes[2][kSubs * kSubBytes];
  alignas(64) static thread_local int32_t sums[2][kAmxTokens * kGroup];
  constexpr int64_t kMaxTiles = kKTokenChunk / kAmxTokens;
  const int64_t n_tiles = n_tokens / kAmxTokens;
  __m512 acc[kMaxTiles][2][kAmxTokens];
  for (int64_t i = 0; i < n_tiles; ++i)
    for (int gi = 0; gi < ng; ++gi)
      for (__m512& a : acc[i][gi]) a = _mm512_setzero_ps();
  Tiles::begin(amx_config());
  for (int64_t b = 0; b < pm.n_blocks; ++b) {
    const uint8_t* blk[2];
    for (int gi = 0; gi < ng; ++gi) {
      blk[gi] = pm.slice(g + gi, 0) + (size_t)b * pm.block_bytes;
      // The next super-block, requested while the tiles compute (as k6_group).
      for (size_t line = 0; line < pm.block_bytes; line += 64)
        _mm_prefetch(reinterpret_cast<const char*>(blk[gi] + pm.block_bytes + line), _MM_HINT_T1);
      kQ6 ? split_q6(blk[gi], codes[gi]) : split_q4k(blk[gi], codes[gi]);
    }
    for (int64_t i = 0; i < n_tiles; ++i) {
      const uint8_t* at = act + (size_t)(i * kAmxTokens) * stride + kKRec * (size_t)b;
      __m512i sum_q[2][kAmxTokens];
      for (int gi = 0; gi < ng; ++gi)
        for (__m512i& s : sum_q[gi]) s = _mm512_setzero_si512();
      for (int s = 0; s < kSubs; ++s) {
        Tiles::template zero<0>();
        if (kQ6) {
          Tiles::template load<5>(at + kRecQs + kSubElems * s, stride);
          Tiles::template load<6>(codes[0] + kSubBytes * s, 64);
          Tiles::template dot<0, 5, 6>();
        } else {
          Tiles::template load<2>(at + kRecQs + kSubElems * s, stride);
          Tiles::template load<3>(codes[0] + kSubBytes * s, 64);
          Tiles::template dot<0, 2, 3>();
        }
        Tiles::template store<0>(sums[0], 64);
        if (ng > 1) {
          Tiles::template zero<1>();
          if (kQ6) {
            Tiles::template load<7>(codes[1] + kSubBytes * s, 64);
            Tiles::template dot<1, 5, 7>();
          } else {
            Tiles::template load<4>(codes[1] + kSubBytes * s, 64);
            Tiles::template dot<1, 2, 4>();
          }
          Tiles::template store<1>(sums[1], 64);
        }
        for (int gi = 0; gi < ng; ++gi) {
          __m512i sc;
          if constexpr (kQ6) {
            const Q6Scales pair = q6_scales(blk[gi], s / 2);
            sc = s % 2 ? pair.odd : pair.even;
          } else {
            sc = _mm512_cvtepu8_epi32(
                _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk[gi] + kOffScales + 16 * s)));
          }
#pragma GCC unroll 16
          for (int t = 0; t < kAmxTokens; ++t)
            sum_q[gi][t] = _mm512_add_epi32(
                sum_q[gi][t], _mm512_mullo_epi32(_mm512_load_si512(sums[gi] + kGroup * t), sc));
        }
      }
      for (int gi = 0; gi < ng; ++gi) {
        if constexpr (kQ6) {
          for (int t = 0; t < kAmxTokens; ++t) {
            const uint8_t* a = at + (size_t)t * stride;
            __m512i offset = _mm512_setzero_si512();
            for (int p = 0; p < 8; ++p) {
              int32_t pair;
              std::memcpy(&pair, a + kRecSums + 4 * p, 4);
              offset =
                  _mm512_dpwssd_epi32(offset, q6_scales(blk[gi], p).pairs, _mm512_set1_epi32(pair));
            }
            acc[i][gi][t] = q6_accumulate(blk[gi], a, sum_q[gi][t], offset, acc[i][gi][t]);
          }
        } else {
          q4k_finish<kAmxTokens>(blk[gi], at, stride, sum_q[gi], acc[i][gi]);
        }
      }
    }
  }
  Tiles::end();
  for (int64_t i = 0; i < n_tiles; ++i)
    for (int gi = 0; gi < ng; ++gi)
      for (int t = 0; t < kAmxTokens; ++t)
        store_rows(pm, g + gi, out + (i * kAmxTokens + t) * out_stride + (g + gi) * kGroup,
                   acc[i][gi][t]);
}

using AmxKFn = void (*)(const PackedMatrix&, int64_t, int, const uint8_t*, size_t, int64_t, float*,
                        int64_t);

// The tile kernel of the given mode for Q4_K or Q6_K, or null (off).
AmxKFn amx_k_fn(AmxMode mode, bool q6) {
  switch (mode) {
    case AmxMode::kHardware:
      return q6 ? amx_k_groups<AmxHardware, true> : amx_k_groups<AmxHardware, false>;
    case AmxMode::kEmulated:
      return q6 ? amx_k_groups<AmxEmulated, true> : amx_k_groups<AmxEmulated, false>;
    case AmxMode::kOff:
      break;
  }
  return nullptr;
}

// fn(job, first group, end group) for each job's share of the jobs' groups
// [g0, g1), taken as one range.
// ---- AVX2 (hosts without AVX-512 VNNI) ------------------------------------------
//
// The same packed blocks and records, 8 rows (half a group) per 256-bit
// register, the same exact integers and the same float operations as the
// kernels above, so again the scalar functions' bits. The integer dots use
// vpmaddubsw, whose 16-bit pair sums must not overflow: Q4_K codes (0..15)
// times activation codes (|a| <= 127) give at most 3810 per pair, so a
// sub-block's eight chunks add in 16 bits (30480); Q6_K's 6-bit codes give
// 16002 per pair, so two chunks at a time. vpmaddwd by the row's scale in
// both 16-bit halves then widens a pair sum and multiplies it in one step
// (where the VNNI kernels use vpmulld). Activations are quantized by the
// scalar q8_k_from_float.

#define CAIRN_AVX2 CAIRN_SIMD_FN("avx2,fma,f16c")

CAIRN_AVX2 inline __m256i bcast4_avx2(const uint8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return _mm256_set1_epi32(v);
}
CAIRN_AVX2 inline __m256i load32(const uint8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}
// 8 unsigned bytes as int32 lanes holding the byte in both 16-bit halves.
CAIRN_AVX2 inline __m256i scale_pairs_u8(const uint8_t* p) {
  const __m256i x = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
  return _mm256_or_si256(x, _mm256_slli_epi32(x, 16));
}
// 8 f16 at p as floats.
CAIRN_AVX2 inline __m256 halves8(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

// Rows 8h..8h+7 of one Q4_K super-block against NT tokens: acc[t] += as
// k_few_block() (sum_q by sub-block, the mins' sum, the two fma).
template <int NT>
CAIRN_AVX2 void q4k_half_avx2(const uint8_t* blk, int h, const uint8_t* act, size_t stride,
                              __m256* acc) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  __m256i sum_q[NT], sum_mins[NT];
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) sum_q[t] = sum_mins[t] = _mm256_setzero_si256();
#pragma GCC unroll 1
  for (int j = 0; j < 4; ++j) {  // run j: sub-blocks 2j (low nibbles) and 2j + 1 (high)
    __m256i lo[NT], hi[NT];
#pragma GCC unroll 8
    for (int c = 0; c < 8; ++c) {
      const __m256i q = load32(blk + kOffCodes + 64 * (8 * j + c) + 32 * h);
      const __m256i l = _mm256_and_si256(q, m4);
      const __m256i u = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
#pragma GCC unroll 8
      for (int t = 0; t < NT; ++t) {
        const uint8_t* a = act + t * stride + kRecQs + 64 * j + 4 * c;
        const __m256i pl = _mm256_maddubs_epi16(l, bcast4_avx2(a));
        const __m256i pu = _mm256_maddubs_epi16(u, bcast4_avx2(a + 32));
        lo[t] = c == 0 ? pl : _mm256_add_epi16(lo[t], pl);
        hi[t] = c == 0 ? pu : _mm256_add_epi16(hi[t], pu);
      }
    }
    const __m256i sc_lo = scale_pairs_u8(blk + kOffScales + 16 * (2 * j) + 8 * h);
    const __m256i sc_hi = scale_pairs_u8(blk + kOffScales + 16 * (2 * j + 1) + 8 * h);
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t)
      sum_q[t] = _mm256_add_epi32(sum_q[t], _mm256_add_epi32(_mm256_madd_epi16(lo[t], sc_lo),
                                                             _mm256_madd_epi16(hi[t], sc_hi)));
  }
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    const __m256i m = _mm256_cvtepu8_epi16(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + kOffMins + 32 * i + 16 * h)));
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t)
      sum_mins[t] = _mm256_add_epi32(
          sum_mins[t], _mm256_madd_epi16(m, bcast4_avx2(act + t * stride + kRecSums + 4 * i)));
  }
  const __m256 d = halves8(blk + kOffD + 16 * h), dmin = halves8(blk + kOffDmin + 16 * h);
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) {
    float yd;
    std::memcpy(&yd, act + t * stride + kRecD, 4);
    const __m256 a =
        _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(yd), d), _mm256_cvtepi32_ps(sum_q[t]), acc[t]);
    acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(-yd), dmin),
                             _mm256_cvtepi32_ps(sum_mins[t]), a);
  }
}

// Element group K (elements 64K + 4c..) of Q6_K chunk c, rows 8h.., as q6_group().
template <int K>
CAIRN_AVX2 inline __m256i q6_group_avx2(const uint8_t* blk, int c, int h) {
  const __m256i m4 = _mm256_set1_epi8(0x0F);
  const __m256i m30 = _mm256_set1_epi8(0x30);
  const __m256i hb = load32(blk + kQ6OffHigh + 64 * c + 32 * h);
  const __m256i l = load32(blk + kQ6OffLow + 64 * (K % 2 ? 16 + c : c) + 32 * h);
  const __m256i low =
      K < 2 ? _mm256_and_si256(l, m4) : _mm256_and_si256(_mm256_srli_epi16(l, 4), m4);
  const __m256i top = K == 0   ? _mm256_slli_epi16(hb, 4)
                      : K == 1 ? _mm256_slli_epi16(hb, 2)
                      : K == 2 ? hb
                               : _mm256_srli_epi16(hb, 2);
  return _mm256_or_si256(low, _mm256_and_si256(top, m30));
}

// Sub-blocks 4K + q of one Q6_K super-block, rows 8h.., for NT tokens:
// sum_q[t] += scale * (codes . activations), as k6_few_groups().
template <int K, int NT>
CAIRN_AVX2 inline void k6_groups_avx2(const uint8_t* blk, int h, const uint8_t* act, size_t stride,
                                      __m256i* sum_q) {
  const __m256i lo16 = _mm256_set1_epi32(0xFFFF);
#pragma GCC unroll 1
  for (int q = 0; q < 4; ++q) {
    __m256i d[2][NT];  // chunks 4q, 4q + 1 and 4q + 2, 4q + 3: 16-bit sums of two
#pragma GCC unroll 4
    for (int cc = 0; cc < 4; ++cc) {
      const int c = 4 * q + cc;
      const __m256i g = q6_group_avx2<K>(blk, c, h);
#pragma GCC unroll 8
      for (int t = 0; t < NT; ++t) {
        const __m256i p =
            _mm256_maddubs_epi16(g, bcast4_avx2(act + t * stride + kRecQs + 64 * K + 4 * c));
        d[cc / 2][t] = cc % 2 == 0 ? p : _mm256_add_epi16(d[cc / 2][t], p);
      }
    }
    const int sb = 4 * K + q;  // scales of sub-blocks 2i, 2i + 1 are pair i
    const __m256i pairs = _mm256_cvtepi8_epi16(_mm_loadu_si128(
        reinterpret_cast<const __m128i*>(blk + kQ6OffScales + 32 * (sb / 2) + 16 * h)));
    const __m256i sc =
        sb % 2 ? _mm256_or_si256(_mm256_srli_epi32(pairs, 16), _mm256_andnot_si256(lo16, pairs))
               : _mm256_or_si256(_mm256_and_si256(pairs, lo16), _mm256_slli_epi32(pairs, 16));
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t)
      sum_q[t] = _mm256_add_epi32(sum_q[t], _mm256_add_epi32(_mm256_madd_epi16(d[0][t], sc),
                                                             _mm256_madd_epi16(d[1][t], sc)));
  }
}

// Rows 8h..8h+7 of one Q6_K super-block against NT tokens: acc[t] += as
// k6_few_block().
template <int NT>
CAIRN_AVX2 void q6k_half_avx2(const uint8_t* blk, int h, const uint8_t* act, size_t stride,
                              __m256* acc) {
  __m256i sum_q[NT], offset[NT];
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) sum_q[t] = offset[t] = _mm256_setzero_si256();
  k6_groups_avx2<0, NT>(blk, h, act, stride, sum_q);
  k6_groups_avx2<1, NT>(blk, h, act, stride, sum_q);
  k6_groups_avx2<2, NT>(blk, h, act, stride, sum_q);
  k6_groups_avx2<3, NT>(blk, h, act, stride, sum_q);
#pragma GCC unroll 1
  for (int i = 0; i < 8; ++i) {
    const __m256i pairs = _mm256_cvtepi8_epi16(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + kQ6OffScales + 32 * i + 16 * h)));
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t)
      offset[t] = _mm256_add_epi32(
          offset[t], _mm256_madd_epi16(pairs, bcast4_avx2(act + t * stride + kRecSums + 4 * i)));
  }
  const __m256 d = halves8(blk + kQ6OffD + 16 * h);
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) {
    float yd;
    std::memcpy(&yd, act + t * stride + kRecD, 4);
    const __m256i q = _mm256_sub_epi32(sum_q[t], _mm256_slli_epi32(offset[t], 5));
    acc[t] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(yd), d), _mm256_cvtepi32_ps(q), acc[t]);
  }
}

// Tokens per call of the half kernels: their per-token sums fill the 16 registers.
constexpr int kKAvx2Tile = 4;
using KHalfFn = void (*)(const uint8_t*, int, const uint8_t*, size_t, __m256*);
constexpr KHalfFn kKHalves[2][kKAvx2Tile] = {
    {q4k_half_avx2<1>, q4k_half_avx2<2>, q4k_half_avx2<3>, q4k_half_avx2<4>},
    {q6k_half_avx2<1>, q6k_half_avx2<2>, q6k_half_avx2<3>, q6k_half_avx2<4>}};
static_assert(kKAvx2Tile == 4, "kKHalves names every tile size");

// Tokens [0, n) against groups [g0, g1): out[t * out_stride + r]. Each
// super-block serves both halves of every tile while in L1; weights requested
// `ahead` bytes before their loads.
CAIRN_AVX2 void k_groups_avx2(const PackedMatrix& pm, int64_t g0, int64_t g1, const uint8_t* act,
                              size_t stride, int64_t n, float* out, int64_t out_stride,
                              size_t ahead) {
  const auto& halves = kKHalves[pm.layout == PackedMatrix::Layout::Q6_Kx16];
  for (int64_t g = g0; g < g1; ++g) {
    const int64_t rows = pm.rows - g * kGroup;
    __m256 acc[2][kKTokenChunk];  // [half][token]: a tile's sums lie side by side
    for (int64_t t = 0; t < n; ++t) acc[0][t] = acc[1][t] = _mm256_setzero_ps();
    const uint8_t* blk = pm.slice(g, 0);
    const uint8_t* a = act;
    for (int64_t b = 0; b < pm.n_blocks; ++b, blk += pm.block_bytes, a += kKRec) {
      if (ahead != 0)  // may point past the weights: a prefetch never faults
        for (size_t line = 0; line < pm.block_bytes; line += 64)
          _mm_prefetch(reinterpret_cast<const char*>(blk + ahead + line), _MM_HINT_T1);
      for (int64_t t = 0; t < n; t += kKAvx2Tile) {
        const int64_t nt = std::min<int64_t>(kKAvx2Tile, n - t);
        for (int h = 0; h < 2 && rows > 8 * h; ++h)
          halves[nt - 1](blk, h, a + (size_t)t * stride, stride, acc[h] + t);
      }
    }
    for (int64_t t = 0; t < n; ++t) {
      float* o = out + t * out_stride + g * kGroup;
      alignas(32) float lanes[kGroup];
      _mm256_store_ps(lanes, acc[0][t]);
      _mm256_store_ps(lanes + 8, acc[1][t]);
      std::memcpy(o, lanes, (size_t)std::min<int64_t>(kGroup, rows) * sizeof(float));
    }
  }
}

// CAIRN_AVX2 int32 lanes summed.
CAIRN_AVX2 inline int hsum_epi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
  return _mm_cvtsi128_si32(s);
}

// quantize_k_act 8 lanes at a time (the same steps, so the same records as
// quant::q8_k_from_float, which still takes blocks of zeros or with a NaN or
// infinity). perf of a 512-token TinyLlama Q4_K_M prompt, CAIRN_ISA=avx2: the
// scalar loop 3.6 % of the samples, this 0.5 %.
CAIRN_AVX2 void quantize_k_act_avx2(bool q6, const float* x, int64_t cols, uint8_t* dst) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t b = 0; b < cols / kQK; ++b) {
    const float* src = x + kQK * b;
    uint8_t* rec = dst + kKRec * (size_t)b;
    __m256 amax8 = _mm256_setzero_ps(), odd = _mm256_setzero_ps();
    for (int i = 0; i < kQK / 8; ++i) {
      const __m256 a = _mm256_andnot_ps(sign, _mm256_loadu_ps(src + 8 * i));
      odd = _mm256_or_ps(odd, _mm256_cmp_ps(a, _mm256_set1_ps(FLT_MAX), _CMP_NLE_UQ));
      amax8 = _mm256_max_ps(amax8, a);
    }
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax8), _mm256_extractf128_ps(amax8, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    const float amax = _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
    int first = -1;
    const bool finite = _mm256_movemask_ps(odd) == 0;
    for (int i = 0; i < kQK / 8 && first < 0 && finite && amax != 0.0f; ++i) {
      const int hit = _mm256_movemask_ps(_mm256_cmp_ps(
          _mm256_andnot_ps(sign, _mm256_loadu_ps(src + 8 * i)), _mm256_set1_ps(amax), _CMP_EQ_OQ));
      if (hit != 0) first = 8 * i + __builtin_ctz((unsigned)hit);
    }
    BlockQ8_K blk;
    if (first < 0) {
      quant::q8_k_from_float(src, &blk, kQK);
      store_k_record(q6, blk, rec);
      continue;
    }
    const float iscale = -127.0f / src[first];
    const __m256 scale = _mm256_set1_ps(iscale);
    const __m256i top = _mm256_set1_epi32(127);
    for (int i = 0; i < kQK / 16; ++i) {
      const __m256i q0 = _mm256_min_epi32(
          top, _mm256_cvtps_epi32(_mm256_mul_ps(scale, _mm256_loadu_ps(src + 16 * i))));
      const __m256i q1 = _mm256_min_epi32(
          top, _mm256_cvtps_epi32(_mm256_mul_ps(scale, _mm256_loadu_ps(src + 16 * i + 8))));
      // packs works within 128-bit halves: put q0's eight then q1's in order.
      const __m256i w16 = _mm256_permute4x64_epi64(_mm256_packs_epi32(q0, q1), 0xD8);
      _mm_storeu_si128(
          reinterpret_cast<__m128i*>(blk.qs + 16 * i),
          _mm_packs_epi16(_mm256_castsi256_si128(w16), _mm256_extracti128_si256(w16, 1)));
      blk.bsums[i] = (int16_t)hsum_epi32(_mm256_add_epi32(q0, q1));
    }
    blk.d = 1.0f / iscale;
    store_k_record(q6, blk, rec);
  }
}

template <typename Fn>
void for_each_job_share(std::span<const PackedJob> jobs, int64_t g0, int64_t g1, const Fn& fn) {
  int64_t base = 0;
  for (const PackedJob& j : jobs) {
    const int64_t b = std::max(g0, base) - base;
    const int64_t e = std::min(g1, base + j.matrix->n_groups) - base;
    if (b < e) fn(j, b, e);
    base += j.matrix->n_groups;
  }
}

}  // namespace

namespace {

// Each row's super-blocks in their 16-row group's packed blocks: row(blk, r,
// block) writes row r of one (padding rows are left zero: scales 0).
template <typename Block, typename Row>
void pack_k_rows(const WeightMatrix& w, PackedMatrix& p, const Row& row_into) {
  const auto* src = static_cast<const uint8_t*>(w.data);
  for (int64_t g = 0; g < p.n_groups; ++g) {
    for (int64_t b = 0; b < p.n_blocks; ++b) {
      uint8_t* blk = p.data + ((size_t)g * (size_t)p.n_blocks + (size_t)b) * p.block_bytes;
      for (int r = 0; r < kGroup && g * kGroup + r < w.rows; ++r)
        row_into(blk, r,
                 reinterpret_cast<const Block*>(src + (size_t)(g * kGroup + r) * w.row_stride)[b]);
    }
  }
}

}  // namespace

void pack_q4_k_rows(const WeightMatrix& w, PackedMatrix& p) {
  pack_k_rows<BlockQ4_K>(w, p, [](uint8_t* blk, int r, const BlockQ4_K& x) {
    std::memcpy(blk + kOffD + 2 * r, &x.d, 2);
    std::memcpy(blk + kOffDmin + 2 * r, &x.dmin, 2);
    for (int s = 0; s < 8; ++s) {
      uint8_t sc, m;
      quant::q4k_scale_min(s, x.scales, &sc, &m);
      blk[kOffScales + 16 * s + r] = sc;
      blk[kOffMins + 32 * (s / 2) + 2 * r + s % 2] = m;
    }
    for (int j = 0; j < 4; ++j)
      for (int c = 0; c < 8; ++c)
        std::memcpy(blk + kOffCodes + 64 * (8 * j + c) + 4 * r, x.qs + 32 * j + 4 * c, 4);
  });
}

void pack_q6_k_rows(const WeightMatrix& w, PackedMatrix& p) {
  pack_k_rows<quant::BlockQ6_K>(w, p, [](uint8_t* blk, int r, const quant::BlockQ6_K& xb) {
    const quant::BlockQ6_K* x = &xb;  // one row's super-block
    std::memcpy(blk + kQ6OffD + 2 * r, &x->d, 2);
    for (int sb = 0; sb < 16; ++sb)
      blk[kQ6OffScales + 32 * (sb / 2) + 2 * r + sb % 2] = (uint8_t)x->scales[sb];
    uint8_t code[kQK];  // element e: 128h + 32k + l as q6_k_dot_q8_k reads it
    for (int e = 0; e < kQK; ++e) {
      const int h = e / 128, k = (e % 128) / 32, l = e % 32;
      const uint8_t* ql = x->ql + 64 * h;
      const uint8_t* qh = x->qh + 32 * h;
      const int low = ((k & 1 ? ql[l + 32] : ql[l]) >> (k & 2 ? 4 : 0)) & 0xF;
      code[e] = (uint8_t)(low | (((qh[l] >> (2 * k)) & 3) << 4));
    }
    for (int c = 0; c < 32; ++c)
      for (int i = 0; i < 4; ++i)
        blk[kQ6OffLow + 64 * c + 4 * r + i] =
            (uint8_t)((code[4 * c + i] & 0xF) | ((code[128 + 4 * c + i] & 0xF) << 4));
    for (int c = 0; c < 16; ++c)
      for (int i = 0; i < 4; ++i) {
        uint8_t hb = 0;
        for (int k = 0; k < 4; ++k) hb |= (uint8_t)((code[64 * k + 4 * c + i] >> 4) << (2 * k));
        blk[kQ6OffHigh + 64 * c + 4 * r + i] = hb;
      }
  });
}

bool amx_k_agrees_with_vnni(AmxMode mode) {
  // Three groups (a pair and a lone one, the last one short), two
  // super-blocks, two tiles of tokens.
  constexpr int64_t kRows = 44, kCols = 2 * kQK, kTokens = 2 * kAmxTokens;
  const std::vector<float> wf = amx_check_values((size_t)(kRows * kCols), 97531, 1.0f);
  const std::vector<float> x = amx_check_values((size_t)(kTokens * kCols), 86420, 3.0f);
  for (TensorType type : {TensorType::Q4_K, TensorType::Q6_K}) {
    const bool q6 = type == TensorType::Q6_K;
    const AmxKFn amx = amx_k_fn(mode, q6);
    const auto pm = amx_check_matrix(type, wf, kRows, kCols);
    if (!pm || !amx) return false;
    const size_t stride = k_act_stride(kCols);
    std::vector<uint8_t> act(stride * kTokens);
    for (int64_t t = 0; t < kTokens; ++t)
      quantize_k_act(q6, x.data() + t * kCols, kCols, act.data() + t * stride);
    std::vector<float> want((size_t)(kTokens * kRows)), got(want.size());
    for (int64_t g = 0; g < pm->n_groups; ++g) {
      if (q6)
        k6_group(*pm, g, act.data(), stride, kTokens, want.data() + g * kGroup, kRows);
      else
        k_few(*pm, g, g + 1, act.data(), stride, kTokens, want.data(), kRows, 0);
    }
    amx(*pm, 0, 2, act.data(), stride, kTokens, got.data(), kRows);
    amx(*pm, 2, 1, act.data(), stride, kTokens, got.data(), kRows);
    if (std::memcmp(want.data(), got.data(), want.size() * sizeof(float)) != 0) return false;
  }
  return true;
}

void packed_k_matmul_many(std::span<const PackedJob> jobs, const ActRows& in, int64_t n_tokens,
                          ThreadPool& pool, std::span<const PackedMatrix* const> next) {
  const int64_t cols = jobs[0].matrix->cols;
  const size_t stride = k_act_stride(cols);
  thread_local std::vector<uint8_t> scratch;
  scratch.resize(std::max(scratch.size(), stride * (size_t)n_tokens + 64));
  uint8_t* act = scratch.data();
  act += (64 - reinterpret_cast<uintptr_t>(act) % 64) % 64;
  const bool q6 = jobs[0].matrix->layout == PackedMatrix::Layout::Q6_Kx16;
  const bool vnni = isa_enabled(Isa::Avx512Vnni);  // else AVX2 (pack_matrix checked)
  pool.parallel_for(n_tokens, [&](int64_t b, int64_t e) {
    float* buf = in.maker ? made_row_buffer(cols) : nullptr;
    for (int64_t t = b; t < e; ++t)
      (vnni ? quantize_k_act : quantize_k_act_avx2)(q6, in.row(t, buf), cols, act + t * stride);
  });
  int64_t total = 0;
  for (const PackedJob& j : jobs) total += j.matrix->n_groups;
  if (!vnni) {
    // Decode and small batches balanced as below; prompts by token chunks.
    const auto groups = [&](int64_t g0, int64_t g1, int64_t t0, int64_t nt) {
      for_each_job_share(jobs, g0, g1, [&](const PackedJob& j, int64_t b, int64_t e) {
        const PackedMatrix& pm = *j.matrix;
        k_groups_avx2(pm, b, e, act + (size_t)t0 * stride, stride, nt, j.out + t0 * pm.rows,
                      pm.rows, nt <= kKFewTokens ? packed_stream_ahead(pm.layout) : pm.block_bytes);
      });
    };
    if (n_tokens <= kKFewTokens && pool.size() > 1) {
      run_groups_balanced(
          pool, total, [&](int64_t g0, int64_t g1) { groups(g0, g1, 0, n_tokens); }, next);
      return;
    }
    pool.parallel_for(total, [&](int64_t g0, int64_t g1) {
      for (int64_t t0 = 0; t0 < n_tokens; t0 += kKTokenChunk)
        groups(g0, g1, t0, std::min(kKTokenChunk, n_tokens - t0));
    });
    return;
  }
  // One token, or a batch of up to kKFewTokens (decode of several
  // sequences): one pass over the weights, so a share that finishes early
  // takes groups from a slower one, and workers warm the next call's weights
  // (as the Q4_0 decode does). With the static split the worker idled ~10 %
  // of a TinyLlama Q4_K token while the caller, which also quantizes, ran on.
  // Where AMX runs, batches of a whole tile of tokens go to it.
  const AmxKFn amx = amx_k_fn(amx_mode(), q6);
  const bool gfni = gfni_enabled();
  if (n_tokens <= kKFewTokens && !(amx && n_tokens >= kAmxTokens)) {
    const auto groups = [&](int64_t g0, int64_t g1) {
      for_each_job_share(jobs, g0, g1, [&](const PackedJob& j, int64_t b, int64_t e) {
        const PackedMatrix& pm = *j.matrix;
        const size_t ahead = packed_stream_ahead(pm.layout);
        if (n_tokens == 1)
          (q6 ? (gfni ? k_one<true, true> : k_one<true>) : k_one<false>)(pm, b, e, act, j.out,
                                                                         ahead);
        else
          k_few(pm, b, e, act, stride, n_tokens, j.out, pm.rows, ahead);
      });
    };
    if (pool.size() > 1)
      run_groups_balanced(pool, total, groups, next);
    else
      groups(0, total);
    return;
  }
  // Prompts: Q4_K through k_few too, each super-block's codes masked per tile
  // of 8 straight from memory (`bench-model -p 512`, TinyLlama shape, AMD EPYC
  // Zen 5, alternating against the split-and-tile path: 6 rounds, 5 faster,
  // 390-397 -> 421-424 tok/s in the quietest; bench_matmul q4_k 5632x2048, 128
  // tokens, 2 threads: 455-514 -> 503-537 GMAC/s). Q6_K through k6_group.
  // With AMX, whole tiles of 16 tokens through amx_k_groups, two groups at a
  // time (each tile of activations serves both).
  pool.parallel_for(total, [&](int64_t g0, int64_t g1) {
    for (int64_t t0 = 0; t0 < n_tokens; t0 += kKTokenChunk) {
      const int64_t n_chunk = std::min(kKTokenChunk, n_tokens - t0);
      const int64_t n_amx = amx ? n_chunk / kAmxTokens * kAmxTokens : 0;
      for_each_job_share(jobs, g0, g1, [&](const PackedJob& j, int64_t b, int64_t e) {
        const PackedMatrix& pm = *j.matrix;
        if (n_amx > 0)
          for (int64_t g = b; g < e; g += 2)
            amx(pm, g, (int)std::min<int64_t>(2, e - g), act + (size_t)t0 * stride, stride, n_amx,
                j.out + t0 * pm.rows, pm.rows);
        const int64_t t = t0 + n_amx, nt = n_chunk - n_amx;
        if (nt == 0) return;
        const uint8_t* chunk = act + (size_t)t * stride;
        float* out = j.out + t * pm.rows;
        if (!q6)  // ahead: the next super-block, as k6_group requests it
          return k_few(pm, b, e, chunk, stride, nt, out, pm.rows, pm.block_bytes);
        for (int64_t g = b; g < e; ++g)
          k6_group(pm, g, chunk, stride, nt, out + g * kGroup, pm.rows);
      });
    }
  });
}

}  // namespace cairn::kernels
