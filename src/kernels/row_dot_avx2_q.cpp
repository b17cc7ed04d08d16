// kernels/row_dot_avx2_q.cpp — AVX2 row dot products (row_dot.h) of the
// 32-element block types downloaded files mix in: Q4_1, Q5_0, Q5_1 (llama.cpp's
// fallbacks for rows that are not whole K-quant blocks), IQ4_NL and MXFP4.
// The exact integer sums of each block's 8 groups of 4 in vector lanes, the
// float lanes accumulated as core/quant_blocks.h's Lanes8 (the scalar
// reference's order): the same bits.
#include <cstring>

#include "core/quant_blocks.h"
#include "kernels/avx2_int8.h"
#include "kernels/row_dot.h"

namespace cairn::quant::avx2 {
namespace {

CAIRN_AVX2 inline __m256i load_32(const int8_t* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// Products of u (unsigned, 0..31) and y (signed) as 8 int32 lanes of 4.
CAIRN_AVX2 inline __m256i dot_u8_lanes(__m256i u, __m256i y) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, y), _mm256_set1_epi16(1));
}

CAIRN_AVX2 inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

}  // namespace

CAIRN_AVX2 float q4_1_dot_q8_1(int64_t n, const void* w, const void* act) {
  const BlockQ4_1* x = static_cast<const BlockQ4_1*>(w);
  const BlockQ8_1* y = static_cast<const BlockQ8_1*>(act);
  __m256 acc = _mm256_setzero_ps();
  float offsets = 0.0f;
  for (int64_t i = 0; i < n / kQK4_0; ++i) {
    acc = lanes_fma(dot_u8_lanes(nibbles_32(x[i].qs), load_32(y[i].qs)), f16(x[i].d) * f16(y[i].d), acc);
    offsets = fma_ss(f16(x[i].m), f16(y[i].s), offsets);
  }
  return lanes_sum(acc) + offsets;
}

// code - 16 = nibble - (bit 4 clear ? 16 : 0), as signed bytes.
CAIRN_AVX2 float q5_0_dot_q8_0(int64_t n, const void* w, const void* act) {
  const BlockQ5_0* x = static_cast<const BlockQ5_0*>(w);
  const BlockQ8_0* y = static_cast<const BlockQ8_0*>(act);
  const __m256i sixteen = _mm256_set1_epi8(16);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQK4_0; ++i) {
    const __m256i high = bits_to_bytes(load_u32(x[i].qh));
    const __m256i qx = _mm256_sub_epi8(nibbles_32(x[i].qs), _mm256_andnot_si256(high, sixteen));
    acc = lanes_fma(dot_i8(qx, load_32(y[i].qs)), f16(x[i].d) * f16(y[i].d), acc);
  }
  return lanes_sum(acc);
}

// Q5_0 against up to 4 tokens: each block decoded once.
template <int NT>
CAIRN_AVX2 inline void q5_0_tokens(int64_t n, const BlockQ5_0* x, const uint8_t* act, size_t stride, float* out,
                                   size_t out_stride) {
  const __m256i sixteen = _mm256_set1_epi8(16);
  __m256 acc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQK4_0; ++i) {
    const __m256i high = bits_to_bytes(load_u32(x[i].qh));
    const __m256i qx = _mm256_sub_epi8(nibbles_32(x[i].qs), _mm256_andnot_si256(high, sixteen));
    const float dx = f16(x[i].d);
    for (int t = 0; t < NT; ++t) {
      const BlockQ8_0& y = reinterpret_cast<const BlockQ8_0*>(act + t * stride)[i];
      acc[t] = lanes_fma(dot_i8(qx, load_32(y.qs)), dx * f16(y.d), acc[t]);
    }
  }
  for (int t = 0; t < NT; ++t) out[t * out_stride] = lanes_sum(acc[t]);
}

CAIRN_AVX2 void q5_0_dot_tokens(int64_t n, const void* w, const void* act, size_t act_stride, int64_t n_act,
                                float* out, size_t out_stride) {
  const auto* x = static_cast<const BlockQ5_0*>(w);
  const auto* a = static_cast<const uint8_t*>(act);
  switch (n_act) {
    case 1: return q5_0_tokens<1>(n, x, a, act_stride, out, out_stride);
    case 2: return q5_0_tokens<2>(n, x, a, act_stride, out, out_stride);
    case 3: return q5_0_tokens<3>(n, x, a, act_stride, out, out_stride);
    default: return q5_0_tokens<4>(n, x, a, act_stride, out, out_stride);
  }
}

CAIRN_AVX2 float q5_1_dot_q8_1(int64_t n, const void* w, const void* act) {
  const BlockQ5_1* x = static_cast<const BlockQ5_1*>(w);
  const BlockQ8_1* y = static_cast<const BlockQ8_1*>(act);
  const __m256i sixteen = _mm256_set1_epi8(16);
  __m256 acc = _mm256_setzero_ps();
  float offsets = 0.0f;
  for (int64_t i = 0; i < n / kQK4_0; ++i) {
    const __m256i high = bits_to_bytes(load_u32(x[i].qh));
    const __m256i qx = _mm256_or_si256(nibbles_32(x[i].qs), _mm256_and_si256(high, sixteen));
    acc = lanes_fma(dot_u8_lanes(qx, load_32(y[i].qs)), f16(x[i].d) * f16(y[i].d), acc);
    offsets = fma_ss(f16(x[i].m), f16(y[i].s), offsets);
  }
  return lanes_sum(acc) + offsets;
}

CAIRN_AVX2 float iq4_nl_dot_q8_0(int64_t n, const void* w, const void* act) {
  const BlockIQ4_NL* x = static_cast<const BlockIQ4_NL*>(w);
  const BlockQ8_0* y = static_cast<const BlockQ8_0*>(act);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQK4_0; ++i) {
    const __m256i qx = lookup_16(kIq4nlValues, nibbles_32(x[i].qs));
    acc = lanes_fma(dot_i8(qx, load_32(y[i].qs)), f16(x[i].d) * f16(y[i].d), acc);
  }
  return lanes_sum(acc);
}

CAIRN_AVX2 float mxfp4_dot_q8_0(int64_t n, const void* w, const void* act) {
  const BlockMXFP4* x = static_cast<const BlockMXFP4*>(w);
  const BlockQ8_0* y = static_cast<const BlockQ8_0*>(act);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQK4_0; ++i) {
    const __m256i qx = lookup_16(kFp4Values, nibbles_32(x[i].qs));
    acc = lanes_fma(dot_i8(qx, load_32(y[i].qs)), f16(y[i].d) * e8m0_half(x[i].e), acc);
  }
  return lanes_sum(acc);
}

}  // namespace cairn::quant::avx2
