// Packed Q4_K weights (layout: packed.h, Q4_Kx16) and their AVX-512 VNNI
// matmul: batches of tokens and single tokens alike.
//
// Why: the type table's Q4_K dot product does one row against one token per
// call, rebuilding the activation block and unpacking the row's scales every
// time; a TinyLlama-shaped Q4_K model prefilled at 38 tok/s and decoded at 20
// (Q4_0: ~300 and ~45) on the 2-core Intel host.
//
// Why the bits match the scalar q4_k_dot_q8_k: per super-block (256 elements)
// each row takes the same two exact integers -- sum_q = sum over the eight
// sub-blocks of scale * (codes . activations), and sum_mins = sum of min *
// (sub-block sum of activation codes) -- and folds them into its float sum
// with the same two fma, scale products rounded first, in block order. Only
// the integers are formed differently (vpdpbusd over 4-byte runs of 16 rows,
// vpmulld by the scales, vpdpwssd for the mins), and integer sums are exact.
#include <algorithm>
#include <cstring>

#include "core/cpu_features.h"
#include "core/quant.h"
#include "core/quant_blocks.h"
#include "core/simd.h"
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

// Activations: each token's row quantized to Q8_K exactly as the type table
// does (quant::q8_k_from_float), one record per super-block: the 256 codes,
// d, and the eight sub-block sums of codes as int16 (pairs feed vpdpwssd).
constexpr size_t kRecQs = 0, kRecD = 256, kRecSums = 260;
constexpr size_t kKRec = 288;  // 276 used, rounded to keep the codes 32-byte aligned

size_t k_act_stride(int64_t cols) { return kKRec * (size_t)(cols / kQK); }

void quantize_k_act(const float* x, int64_t cols, uint8_t* dst) {
  const int64_t nb = cols / kQK;
  BlockQ8_K blk[1];
  for (int64_t b = 0; b < nb; ++b) {
    quant::q8_k_from_float(x + kQK * b, blk, kQK);
    uint8_t* rec = dst + kKRec * (size_t)b;
    std::memcpy(rec + kRecQs, blk[0].qs, kQK);
    std::memcpy(rec + kRecD, &blk[0].d, 4);
    int16_t sums[8];
    for (int s = 0; s < 8; ++s)
      sums[s] = (int16_t)(blk[0].bsums[2 * s] + blk[0].bsums[2 * s + 1]);  // |.| <= 32 * 128
    std::memcpy(rec + kRecSums, sums, sizeof(sums));
  }
}

// The super-block's 32-element sub-blocks as bytes, [8][8 chunks][64]: chunk
// c of sub-block s holds elements 4c..4c+3 of each row (Q4_K keeps sub-block
// 2j in the low nibbles of qs[32j..32j+31] and 2j + 1 in the high ones).
// Split once per super-block for every tile of a token chunk.
CAIRN_VNNI void split_codes(const uint8_t* blk, uint8_t* codes) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  for (int j = 0; j < 4; ++j) {
    for (int c = 0; c < 8; ++c) {
      const __m512i q = _mm512_loadu_si512(blk + kOffCodes + 64 * (8 * j + c));
      _mm512_store_si512(codes + 64 * (8 * (2 * j) + c), _mm512_and_si512(q, m4));
      _mm512_store_si512(codes + 64 * (8 * (2 * j + 1) + c),
                         _mm512_and_si512(_mm512_srli_epi16(q, 4), m4));
    }
  }
}

// acc += dpbusd(w, the 4 activation bytes at p broadcast to every lane).
CAIRN_VNNI inline __m512i dpbusd_bcast(__m512i acc, __m512i w, const uint8_t* p) {
  asm("vpdpbusd %2%{1to16%}, %1, %0"
      : "+v"(acc)
      : "v"(w), "m"(*reinterpret_cast<const int32_t*>(p)));
  return acc;
}

// NT tokens against one super-block of a group (its header at blk, its codes
// split at codes): acc[t] += each row's two fma, as q4_k_dot_q8_k.
template <int NT>
[[gnu::noinline]] CAIRN_VNNI void k_tile(const uint8_t* blk, const uint8_t* codes,
                                         const uint8_t* act, size_t stride, __m512* acc_io) {
  __m512i sum_q[NT];
#pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) sum_q[t] = _mm512_setzero_si512();
  for (int s = 0; s < 8; ++s) {
    const __m512i sc = _mm512_cvtepu8_epi32(
        _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk + kOffScales + 16 * s)));
    __m512i even[NT], odd[NT];  // two chains per token
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) even[t] = odd[t] = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int c = 0; c < 8; c += 2) {
      const __m512i w0 = _mm512_load_si512(codes + 64 * (8 * s + c));
      const __m512i w1 = _mm512_load_si512(codes + 64 * (8 * s + c + 1));
#pragma GCC unroll 8
      for (int t = 0; t < NT; ++t) {
        const uint8_t* a = act + t * stride + kRecQs + 32 * s + 4 * c;
        even[t] = dpbusd_bcast(even[t], w0, a);
        odd[t] = dpbusd_bcast(odd[t], w1, a + 4);
      }
    }
#pragma GCC unroll 8
    for (int t = 0; t < NT; ++t)
      sum_q[t] =
          _mm512_add_epi32(sum_q[t], _mm512_mullo_epi32(_mm512_add_epi32(even[t], odd[t]), sc));
  }
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
    __m512 a = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(yd), d), _mm512_cvtepi32_ps(sum_q[t]),
                               acc_io[t]);
    a = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(-yd), dmin), _mm512_cvtepi32_ps(sum_mins[t]),
                        a);
    acc_io[t] = a;
  }
}

// One token against groups [g0, g1) (decode): no split copy, the codes go
// from memory straight into the dots. High nibbles are masked in place (16x
// their value) and their sum shifted back, exact as every term is a multiple
// of 16 (as the Q4_0 one-token kernel does); weights are requested `ahead`
// bytes before their loads.
CAIRN_VNNI void k_one(const PackedMatrix& pm, int64_t g0, int64_t g1, const uint8_t* act,
                      float* out, size_t ahead) {
  const __m512i m4 = _mm512_set1_epi8(0x0F);
  const __m512i mf0 = _mm512_set1_epi8((char)0xF0);
  for (int64_t g = g0; g < g1; ++g) {
    __m512 acc = _mm512_setzero_ps();
    const uint8_t* blk = pm.slice(g, 0);
    const uint8_t* a = act;
    for (int64_t b = 0; b < pm.n_blocks; ++b, blk += pm.block_bytes, a += kKRec) {
      if (ahead != 0)  // may point past the weights: a prefetch never faults
        for (size_t line = 0; line < kQ4KBlockBytes; line += 64)
          _mm_prefetch(reinterpret_cast<const char*>(blk + ahead + line), _MM_HINT_T1);
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
      acc = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(-yd), dmin), _mm512_cvtepi32_ps(sum_mins),
                            acc);
    }
    const int64_t n_rows = std::min<int64_t>(kGroup, pm.rows - g * kGroup);
    const __mmask16 mask = n_rows >= kGroup ? (__mmask16)0xFFFF : (__mmask16)((1u << n_rows) - 1);
    _mm512_mask_storeu_ps(out + g * kGroup, mask, acc);
  }
}

constexpr int kKTile = 4;  // tokens per tile (registers: 5 per token)
constexpr int64_t kKTokenChunk = 64;

CAIRN_VNNI void k_tile_n(int nt, const uint8_t* blk, const uint8_t* codes, const uint8_t* act,
                         size_t stride, __m512* acc) {
  switch (nt) {
    case 1:
      return k_tile<1>(blk, codes, act, stride, acc);
    case 2:
      return k_tile<2>(blk, codes, act, stride, acc);
    case 3:
      return k_tile<3>(blk, codes, act, stride, acc);
    default:
      return k_tile<kKTile>(blk, codes, act, stride, acc);
  }
}
static_assert(kKTile == 4, "k_tile_n names every tile size");

// Group g against tokens [0, n_tokens) (at most kKTokenChunk): out[t * out_stride + r].
CAIRN_VNNI void k_group(const PackedMatrix& pm, int64_t g, const uint8_t* act, size_t stride,
                        int64_t n_tokens, float* out, int64_t out_stride) {
  alignas(64) static thread_local uint8_t codes[8 * 8 * 64];
  __m512 acc[kKTokenChunk];
  for (int64_t t = 0; t < n_tokens; ++t) acc[t] = _mm512_setzero_ps();
  const uint8_t* blk = pm.slice(g, 0);
  for (int64_t b = 0; b < pm.n_blocks; ++b, blk += pm.block_bytes) {
    split_codes(blk, codes);
    for (int64_t t = 0; t < n_tokens; t += kKTile) {
      const int nt = (int)std::min<int64_t>(kKTile, n_tokens - t);
      k_tile_n(nt, blk, codes, act + (size_t)t * stride + kKRec * (size_t)b, stride, acc + t);
    }
  }
  const int64_t n_rows = std::min<int64_t>(kGroup, pm.rows - g * kGroup);
  const __mmask16 mask = n_rows >= kGroup ? (__mmask16)0xFFFF : (__mmask16)((1u << n_rows) - 1);
  for (int64_t t = 0; t < n_tokens; ++t) _mm512_mask_storeu_ps(out + t * out_stride, mask, acc[t]);
}

}  // namespace

void pack_q4_k_rows(const WeightMatrix& w, PackedMatrix& p) {
  const auto* src = static_cast<const uint8_t*>(w.data);
  for (int64_t g = 0; g < p.n_groups; ++g) {
    for (int64_t b = 0; b < p.n_blocks; ++b) {
      uint8_t* blk = p.data + ((size_t)g * (size_t)p.n_blocks + (size_t)b) * p.block_bytes;
      for (int r = 0; r < kGroup; ++r) {
        const int64_t row = g * kGroup + r;
        if (row >= w.rows) break;  // padding rows stay zero (d and dmin 0)
        const auto* x = reinterpret_cast<const BlockQ4_K*>(src + (size_t)row * w.row_stride) + b;
        std::memcpy(blk + kOffD + 2 * r, &x->d, 2);
        std::memcpy(blk + kOffDmin + 2 * r, &x->dmin, 2);
        for (int s = 0; s < 8; ++s) {
          uint8_t sc, m;
          quant::q4k_scale_min(s, x->scales, &sc, &m);
          blk[kOffScales + 16 * s + r] = sc;
          blk[kOffMins + 32 * (s / 2) + 2 * r + s % 2] = m;
        }
        for (int j = 0; j < 4; ++j)
          for (int c = 0; c < 8; ++c)
            std::memcpy(blk + kOffCodes + 64 * (8 * j + c) + 4 * r, x->qs + 32 * j + 4 * c, 4);
      }
    }
  }
}

void packed_k_matmul_many(std::span<const PackedJob> jobs, const float* x, int64_t n_tokens,
                          ThreadPool& pool) {
  const int64_t cols = jobs[0].matrix->cols;
  const size_t stride = k_act_stride(cols);
  thread_local std::vector<uint8_t> scratch;
  scratch.resize(std::max(scratch.size(), stride * (size_t)n_tokens + 64));
  uint8_t* act = scratch.data();
  act += (64 - reinterpret_cast<uintptr_t>(act) % 64) % 64;
  pool.parallel_for(n_tokens, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) quantize_k_act(x + t * cols, cols, act + t * stride);
  });
  int64_t total = 0;
  for (const PackedJob& j : jobs) total += j.matrix->n_groups;
  // The jobs' groups as one range; each thread keeps its groups for every
  // chunk of tokens (their weights stay in its caches across chunks).
  pool.parallel_for(total, [&](int64_t g0, int64_t g1) {
    if (n_tokens == 1) {
      int64_t base = 0;
      for (const PackedJob& j : jobs) {
        const PackedMatrix& pm = *j.matrix;
        const int64_t b = std::max(g0, base), e = std::min(g1, base + pm.n_groups);
        if (b < e) k_one(pm, b - base, e - base, act, j.out, packed_stream_ahead());
        base += pm.n_groups;
      }
      return;
    }
    for (int64_t t0 = 0; t0 < n_tokens; t0 += kKTokenChunk) {
      const int64_t nt = std::min(kKTokenChunk, n_tokens - t0);
      int64_t base = 0;
      for (const PackedJob& j : jobs) {
        const PackedMatrix& pm = *j.matrix;
        for (int64_t g = std::max(g0, base); g < std::min(g1, base + pm.n_groups); ++g)
          k_group(pm, g - base, act + (size_t)t0 * stride, stride, nt,
                  j.out + t0 * pm.rows + (g - base) * kGroup, pm.rows);
        base += pm.n_groups;
      }
    }
  });
}

}  // namespace cairn::kernels
