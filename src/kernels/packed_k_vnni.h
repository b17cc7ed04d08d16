// kernels/packed_k_vnni.h — internal to the K-quant kernels: the AVX-512
// VNNI building blocks that the VNNI kernels (packed_k_vnni.cpp) and the AMX
// ones (packed_k_amx.cpp) share, so both do the same integer and float
// operations per super-block (and give the same bits).
#pragma once

#include <algorithm>
#include <cstring>

#include "core/simd.h"
#include "kernels/packed_k.h"

#define CAIRN_VNNI CAIRN_SIMD_FN("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c")

namespace cairn::kernels {

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
CAIRN_VNNI inline void split_q6(const uint8_t* blk, uint8_t* codes) {
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

// Group g's 16 outputs (fewer in a short last group).
CAIRN_VNNI inline void store_rows(const PackedMatrix& pm, int64_t g, float* out, __m512 acc) {
  const int64_t n_rows = std::min<int64_t>(kGroup, pm.rows - g * kGroup);
  const __mmask16 mask = n_rows >= kGroup ? (__mmask16)0xFFFF : (__mmask16)((1u << n_rows) - 1);
  _mm512_mask_storeu_ps(out, mask, acc);
}

}  // namespace cairn::kernels
