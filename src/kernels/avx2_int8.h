// kernels/avx2_int8.h — the AVX2 integer building blocks the row dot products
// share (row_dot_avx2*.cpp): exact int8 dot products per block and the one
// scalar fma that folds a block's sum into the row's float.
// Internal to kernels/; only for functions compiled with CAIRN_AVX2.
#pragma once

#include <cstdint>

#include "core/simd.h"

// No fp contraction: with FMA enabled the compiler would fuse the per-block
// `sum += d * sumi` into an fma, which the scalar reference (built without FMA)
// cannot match.
#define CAIRN_AVX2 CAIRN_SIMD_FN("avx2,fma,f16c")

namespace cairn::quant::avx2 {

CAIRN_AVX2 inline int32_t hsum_epi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

// Sum of x[i]*y[i] over 32 signed bytes, pairs of int16 products times
// `scale` (int16 lanes), as 8 int32 lanes. maddubs wants one unsigned operand:
// move x's sign onto y. Neither side is ever -128 (the quantizers clamp to
// +-127; weight codes and table values stay within +-127).
CAIRN_AVX2 inline __m256i dot_i8_scaled(__m256i x, __m256i y, __m256i scale) {
  const __m256i ax = _mm256_sign_epi8(x, x);
  const __m256i sy = _mm256_sign_epi8(y, x);
  return _mm256_madd_epi16(_mm256_maddubs_epi16(ax, sy), scale);
}
CAIRN_AVX2 inline __m256i dot_i8(__m256i x, __m256i y) {
  return dot_i8_scaled(x, y, _mm256_set1_epi16(1));
}

// Lanes8 (core/quant_blocks.h): 8 int32 lanes of a block's products, each
// fma'd with the block's scale into its own float lane; summed at the end.
CAIRN_AVX2 inline __m256 lanes_fma(__m256i sums, float d, __m256 acc) {
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), _mm256_set1_ps(d), acc);
}

CAIRN_AVX2 inline float lanes_sum(__m256 acc) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));  // (0+4) (1+5) (2+6) (3+7)
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));                                            // ((0+4)+(2+6)) ((1+5)+(3+7))
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// An f16 scale as float with F16C: exact, as core's f16_lut, but inline (a
// call per block spills every vector register around it).
CAIRN_AVX2 inline float f16(uint16_t h) { return _cvtsh_ss(h); }

// a * b + c rounded once, as std::fma in the scalar reference.
CAIRN_AVX2 inline float fma_ss(float a, float b, float c) {
  return _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(a), _mm_set_ss(b), _mm_set_ss(c)));
}

// The 32 4-bit codes of a 16-byte block as bytes: element j's low nibble of
// byte j (j < 16), element 16 + j's high nibble.
CAIRN_AVX2 inline __m256i nibbles_32(const uint8_t* qs) {
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i low4 = _mm_set1_epi8(0xF);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(bytes, 4), low4), _mm_and_si128(bytes, low4));
}

// Bit j of `bits` as byte j: 0xFF where set, 0 where clear.
CAIRN_AVX2 inline __m256i bits_to_bytes(uint32_t bits) {
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int>(bits)),
      _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0));
  const __m256i mask = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  return _mm256_cmpeq_epi8(_mm256_and_si256(spread, mask), mask);
}

// 16 int8 values looked up by 4-bit codes (each byte of `codes` 0..15).
CAIRN_AVX2 inline __m256i lookup_16(const int8_t* table, __m256i codes) {
  const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(table));
  return _mm256_shuffle_epi8(_mm256_set_m128i(t, t), codes);
}

}  // namespace cairn::quant::avx2
