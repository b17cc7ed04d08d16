// kernels/vnni_int8.h — the AVX-512 VNNI building blocks the row dot products of
// row_dot_vnni_q.cpp and row_dot_vnni_k.cpp share: the target attribute,
// the folding of two 32-element runs onto 8 lanes, nibble and table decoding,
// and the float steps of core/quant_blocks.h's Lanes8 order.
// Internal to kernels/; only for functions compiled with CAIRN_VNNI.
#pragma once

#include <cstdint>

#include "core/simd.h"

// No fp contraction: every float operation below must round where the scalar
// reference rounds (it fmas explicitly and nowhere else).
#define CAIRN_VNNI CAIRN_SIMD_FN("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx2,fma,f16c")

namespace cairn::quant::vnni {

CAIRN_VNNI inline float f16(uint16_t h) { return _cvtsh_ss(h); }  // exact, as f16_lut

// a * b + c rounded once, as std::fma in the scalar reference.
CAIRN_VNNI inline float fma_ss(float a, float b, float c) {
  return _mm_cvtss_f32(_mm_fmadd_ss(_mm_set_ss(a), _mm_set_ss(b), _mm_set_ss(c)));
}

// 16 int32 lanes -> 8: lane L + lane L + 8. Where each half holds one 32-element
// run in element order, lane L of the result is Lanes8's lane L.
CAIRN_VNNI inline __m256i fold(__m512i v) {
  return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
}

CAIRN_VNNI inline int32_t hsum8(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

CAIRN_VNNI inline int32_t hsum4(__m128i s) {
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

// Lanes8: each float lane fma'd with the block's scale ...
CAIRN_VNNI inline __m256 lanes_fma(__m256i sums, float d, __m256 acc) {
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), _mm256_set1_ps(d), acc);
}

// ... and summed at the end as ((0+4)+(2+6))+((1+5)+(3+7)).
CAIRN_VNNI inline float lanes_sum(__m256 acc) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// The 4-bit codes of two 16-byte blocks as bytes 0..15: block a's 32 codes in
// the low half (element j: low nibble of byte j, element 16 + j: high
// nibble), block b's in the high half.
CAIRN_VNNI inline __m512i nibbles_2x32(const uint8_t* qa, const uint8_t* qb) {
  const __m256i a = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qa)));
  const __m256i b = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qb)));
  const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1);
  // 128-bit lanes 1 and 3 take the high nibbles.
  const __m512i shifted = _mm512_mask_mov_epi8(v, 0xFFFF0000FFFF0000ull, _mm512_srli_epi16(v, 4));
  return _mm512_and_si512(shifted, _mm512_set1_epi8(0xF));
}

// 16 int8 values looked up by 4-bit codes (each byte 0..15), in every 128-bit lane.
CAIRN_VNNI inline __m512i lookup_16(const int8_t* table, __m512i codes) {
  return _mm512_shuffle_epi8(_mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(table))), codes);
}

}  // namespace cairn::quant::vnni
