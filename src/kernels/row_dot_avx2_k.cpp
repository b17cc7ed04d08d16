// kernels/row_dot_avx2_k.cpp — AVX2 row dot products (row_dot.h) of the
// 256-element types beyond Q4_K/Q6_K: Q2_K, Q3_K, Q5_K and IQ4_XS. Exact
// integer sums per super-block in vector lanes (scaled per sub-block with
// madd), the float lanes accumulated as core/quant_blocks.h's Lanes8 (the
// scalar reference's order): the same bits.
#include <cstring>

#include "core/quant_blocks.h"
#include "kernels/avx2_int8.h"
#include "kernels/row_dot.h"

namespace cairn::quant::avx2 {
namespace {

CAIRN_AVX2 inline __m256i load_256(const void* p) {
  return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
}

// 16 sub-block scales as int16 (from 16 signed bytes), kept in registers:
// pair(h, k) gives lanes 0-7 scale 8h + 2k and lanes 8-15 scale 8h + 2k + 1
// (a run of 32 codes covers two 16-element sub-blocks), with shuffles rather
// than byte loads of a just-stored array (which stall store forwarding).
struct Scales16 {
  __m256i halves[2];  // scales 0-7 in both 128-bit lanes; scales 8-15 in both
  CAIRN_AVX2 explicit Scales16(__m128i bytes) {
    const __m256i v = _mm256_cvtepi8_epi16(bytes);
    halves[0] = _mm256_permute2x128_si256(v, v, 0x00);
    halves[1] = _mm256_permute2x128_si256(v, v, 0x11);
  }
  CAIRN_AVX2 __m256i pair(int h, int k) const {
    return _mm256_shuffle_epi8(halves[h], _mm256_load_si256(reinterpret_cast<const __m256i*>(kPick[k])));
  }
  // Byte pairs of int16 2k (lanes 0-7) and 2k + 1 (lanes 8-15), repeated.
  alignas(32) static constexpr int8_t kPick[4][32] = {
      {0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3},
      {4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7},
      {8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11},
      {12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13,
       14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15},
  };
};

// Shuffle masks that broadcast int16 lane s (of each 128-bit lane) everywhere.
alignas(32) constexpr int8_t kBroadcast16[8][32] = {
#define CAIRN_B16(s) {2 * s, 2 * s + 1, 2 * s, 2 * s + 1, 2 * s, 2 * s + 1, 2 * s, 2 * s + 1, \
                      2 * s, 2 * s + 1, 2 * s, 2 * s + 1, 2 * s, 2 * s + 1, 2 * s, 2 * s + 1, \
                      2 * s, 2 * s + 1, 2 * s, 2 * s + 1, 2 * s, 2 * s + 1, 2 * s, 2 * s + 1, \
                      2 * s, 2 * s + 1, 2 * s, 2 * s + 1, 2 * s, 2 * s + 1, 2 * s, 2 * s + 1}
    CAIRN_B16(0), CAIRN_B16(1), CAIRN_B16(2), CAIRN_B16(3), CAIRN_B16(4), CAIRN_B16(5), CAIRN_B16(6), CAIRN_B16(7),
#undef CAIRN_B16
};

// The 16 signed 6-bit scales of a Q3_K block (q3k_scales), computed in
// general registers and handed over as one vector.
CAIRN_AVX2 inline __m128i q3k_scales_vec(const uint8_t* packed) {
  uint32_t a[3];
  std::memcpy(a, packed, 12);
  const uint32_t u0 = (a[0] & 0x0f0f0f0fu) | ((a[2] & 0x03030303u) << 4);
  const uint32_t u1 = (a[1] & 0x0f0f0f0fu) | (((a[2] >> 2) & 0x03030303u) << 4);
  const uint32_t u2 = ((a[0] >> 4) & 0x0f0f0f0fu) | (((a[2] >> 4) & 0x03030303u) << 4);
  const uint32_t u3 = ((a[1] >> 4) & 0x0f0f0f0fu) | (((a[2] >> 6) & 0x03030303u) << 4);
  return _mm_sub_epi8(_mm_set_epi32((int)u3, (int)u2, (int)u1, (int)u0), _mm_set1_epi8(32));
}

// Sum over j of bsums[j] * m[j] for 16 int16 mins.
CAIRN_AVX2 inline int32_t bsums_dot(const int16_t* bsums, __m256i mins16) {
  return hsum_epi32(_mm256_madd_epi16(load_256(bsums), mins16));
}

// Each kernel takes one to kMaxDotTokens tokens (TypeOps::vec_dot_tokens; one
// token is the single dot): a super-block's scales and codes decoded once.
// Q5_K: Q4_K's scales and mins, a fifth code bit from qh.
template <int NT>
CAIRN_AVX2 inline void q5_k_tokens(int64_t n, const BlockQ5_K* x, const uint8_t* act, size_t stride, float* out,
                                   size_t out_stride) {
  const __m256i low4 = _mm256_set1_epi8(0xF);
  const __m256i one = _mm256_set1_epi8(1);
  __m256 lanes[NT];
  float min_acc[NT];
  for (int t = 0; t < NT; ++t) {
    lanes[t] = _mm256_setzero_ps();
    min_acc[t] = 0.0f;
  }
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    uint32_t u[4];
    q4k_scales_mins(x[i].scales, u);
    const __m256i sm = _mm256_cvtepu8_epi16(
        _mm_set_epi32(static_cast<int>(u[3]), static_cast<int>(u[2]), static_cast<int>(u[1]), static_cast<int>(u[0])));
    const __m256i sc2 = _mm256_permute2x128_si256(sm, sm, 0x00);
    const __m128i m8 = _mm256_extracti128_si256(sm, 1);
    const float dx = f16(x[i].d), dminx = f16(x[i].dmin);
    const __m256i qh = load_256(x[i].qh);
    __m256i acc[NT];
    for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_si256();
    for (int j = 0; j < kQK_K / 64; ++j) {
      const __m256i bytes = load_256(x[i].qs + 32 * j);
      const __m256i hlo = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * j), one), 4);
      const __m256i hhi = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * j + 1), one), 4);
      const __m256i lo = _mm256_or_si256(_mm256_and_si256(bytes, low4), hlo);
      const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(bytes, 4), low4), hhi);
      const __m256i slo = _mm256_shuffle_epi8(sc2, load_256(kBroadcast16[2 * j]));
      const __m256i shi = _mm256_shuffle_epi8(sc2, load_256(kBroadcast16[2 * j + 1]));
      for (int t = 0; t < NT; ++t) {
        const BlockQ8_K& y = reinterpret_cast<const BlockQ8_K*>(act + t * stride)[i];
        const __m256i plo = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, load_256(y.qs + 64 * j)), slo);
        const __m256i phi = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, load_256(y.qs + 64 * j + 32)), shi);
        acc[t] = _mm256_add_epi32(acc[t], _mm256_add_epi32(plo, phi));
      }
    }
    for (int t = 0; t < NT; ++t) {
      const BlockQ8_K& y = reinterpret_cast<const BlockQ8_K*>(act + t * stride)[i];
      const __m256i bs = load_256(y.bsums);
      const __m128i pairs = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
      __m128i mins = _mm_madd_epi16(m8, pairs);
      mins = _mm_add_epi32(mins, _mm_shuffle_epi32(mins, _MM_SHUFFLE(1, 0, 3, 2)));
      mins = _mm_add_epi32(mins, _mm_shuffle_epi32(mins, _MM_SHUFFLE(2, 3, 0, 1)));
      lanes[t] = lanes_fma(acc[t], y.d * dx, lanes[t]);
      min_acc[t] = fma_ss(y.d * dminx, static_cast<float>(_mm_cvtsi128_si32(mins)), min_acc[t]);
    }
  }
  for (int t = 0; t < NT; ++t) out[t * out_stride] = lanes_sum(lanes[t]) - min_acc[t];
}

// Q2_K, Q3_K, IQ4_XS: the 32-code runs decoded one at a time, each met by every token.
template <int NT>
CAIRN_AVX2 inline void q2_k_tokens(int64_t n, const BlockQ2_K* x, const uint8_t* act, size_t stride, float* out,
                                   size_t out_stride) {
  const __m256i three = _mm256_set1_epi8(3);
  const __m128i low4 = _mm_set1_epi8(0xF);
  __m256 lanes[NT];
  float min_acc[NT];
  for (int t = 0; t < NT; ++t) {
    lanes[t] = _mm256_setzero_ps();
    min_acc[t] = 0.0f;
  }
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const __m128i sc_bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x[i].scales));
    const __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc_bytes, 4), low4));
    const Scales16 scales(_mm_and_si128(sc_bytes, low4));
    const float dx = f16(x[i].d), dminx = f16(x[i].dmin);
    __m256i acc[NT];
    for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i q = load_256(x[i].qs + 32 * h);
      for (int k = 0; k < 4; ++k) {
        const __m256i codes = _mm256_and_si256(_mm256_srli_epi16(q, 2 * k), three);
        const __m256i sc = scales.pair(h, k);
        for (int t = 0; t < NT; ++t) {
          const BlockQ8_K& y = reinterpret_cast<const BlockQ8_K*>(act + t * stride)[i];
          acc[t] = _mm256_add_epi32(
              acc[t], _mm256_madd_epi16(_mm256_maddubs_epi16(codes, load_256(y.qs + 128 * h + 32 * k)), sc));
        }
      }
    }
    for (int t = 0; t < NT; ++t) {
      const BlockQ8_K& y = reinterpret_cast<const BlockQ8_K*>(act + t * stride)[i];
      lanes[t] = lanes_fma(acc[t], y.d * dx, lanes[t]);
      min_acc[t] = fma_ss(y.d * dminx, static_cast<float>(bsums_dot(y.bsums, mins)), min_acc[t]);
    }
  }
  for (int t = 0; t < NT; ++t) out[t * out_stride] = lanes_sum(lanes[t]) - min_acc[t];
}

template <int NT>
CAIRN_AVX2 inline void q3_k_tokens(int64_t n, const BlockQ3_K* x, const uint8_t* act, size_t stride, float* out,
                                   size_t out_stride) {
  const __m256i three = _mm256_set1_epi8(3);
  const __m256i one = _mm256_set1_epi8(1);
  const __m256i four = _mm256_set1_epi8(4);
  __m256 lanes[NT];
  for (int t = 0; t < NT; ++t) lanes[t] = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const Scales16 scales(q3k_scales_vec(x[i].scales));
    const __m256i hm = load_256(x[i].hmask);
    const float dx = f16(x[i].d);
    __m256i acc[NT];
    for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_si256();
    for (int h = 0; h < 2; ++h) {
      const __m256i q = load_256(x[i].qs + 32 * h);
      for (int k = 0; k < 4; ++k) {
        const __m256i low = _mm256_and_si256(_mm256_srli_epi16(q, 2 * k), three);
        const __m256i high = _mm256_and_si256(_mm256_srli_epi16(hm, 4 * h + k), one);
        const __m256i codes = _mm256_or_si256(low, _mm256_slli_epi16(high, 2));
        const __m256i sc = scales.pair(h, k);
        for (int t = 0; t < NT; ++t) {
          const BlockQ8_K& y = reinterpret_cast<const BlockQ8_K*>(act + t * stride)[i];
          const __m256i q8 = load_256(y.qs + 128 * h + 32 * k);
          const __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(codes, q8), _mm256_maddubs_epi16(four, q8));
          acc[t] = _mm256_add_epi32(acc[t], _mm256_madd_epi16(p, sc));
        }
      }
    }
    for (int t = 0; t < NT; ++t) {
      const BlockQ8_K& y = reinterpret_cast<const BlockQ8_K*>(act + t * stride)[i];
      lanes[t] = lanes_fma(acc[t], y.d * dx, lanes[t]);
    }
  }
  for (int t = 0; t < NT; ++t) out[t * out_stride] = lanes_sum(lanes[t]);
}

template <int NT>
CAIRN_AVX2 inline void iq4_xs_tokens(int64_t n, const BlockIQ4_XS* x, const uint8_t* act, size_t stride, float* out,
                                     size_t out_stride) {
  __m256 lanes[NT];
  for (int t = 0; t < NT; ++t) lanes[t] = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const float dx = f16(x[i].d);
    __m256i acc[NT];
    for (int t = 0; t < NT; ++t) acc[t] = _mm256_setzero_si256();
    for (int ib = 0; ib < kQK_K / 32; ++ib) {
      const int ls = (((x[i].scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((x[i].scales_h >> (2 * ib)) & 3) << 4)) - 32;
      const __m256i qx = lookup_16(kIq4nlValues, nibbles_32(x[i].qs + 16 * ib));
      const __m256i ax = _mm256_sign_epi8(qx, qx);
      const __m256i scale = _mm256_set1_epi16(static_cast<int16_t>(ls));
      for (int t = 0; t < NT; ++t) {
        const BlockQ8_K& y = reinterpret_cast<const BlockQ8_K*>(act + t * stride)[i];
        const __m256i sy = _mm256_sign_epi8(load_256(y.qs + 32 * ib), qx);
        acc[t] = _mm256_add_epi32(acc[t], _mm256_madd_epi16(_mm256_maddubs_epi16(ax, sy), scale));
      }
    }
    for (int t = 0; t < NT; ++t) {
      const BlockQ8_K& y = reinterpret_cast<const BlockQ8_K*>(act + t * stride)[i];
      lanes[t] = lanes_fma(acc[t], y.d * dx, lanes[t]);
    }
  }
  for (int t = 0; t < NT; ++t) out[t * out_stride] = lanes_sum(lanes[t]);
}

// The single dot is the one-token instance; vec_dot_tokens dispatches n_act.
#define CAIRN_ONE_ENTRY(name, impl, Block)                                     \
  CAIRN_AVX2 float name(int64_t n, const void* w, const void* act) {           \
    float out;                                                                  \
    impl<1>(n, static_cast<const Block*>(w), static_cast<const uint8_t*>(act), 0, &out, 1); \
    return out;                                                                 \
  }
#define CAIRN_TOKENS_ENTRY(name, impl, Block)                                                                  \
  CAIRN_AVX2 void name(int64_t n, const void* w, const void* act, size_t act_stride, int64_t n_act, float* out, \
                       size_t out_stride) {                                                                    \
    const auto* x = static_cast<const Block*>(w);                                                              \
    const auto* a = static_cast<const uint8_t*>(act);                                                          \
    switch (n_act) {                                                                                           \
      case 1: return impl<1>(n, x, a, act_stride, out, out_stride);                                            \
      case 2: return impl<2>(n, x, a, act_stride, out, out_stride);                                            \
      case 3: return impl<3>(n, x, a, act_stride, out, out_stride);                                            \
      default: return impl<4>(n, x, a, act_stride, out, out_stride);                                           \
    }                                                                                                          \
  }

}  // namespace

CAIRN_ONE_ENTRY(q2_k_dot_q8_k, q2_k_tokens, BlockQ2_K)
CAIRN_ONE_ENTRY(q3_k_dot_q8_k, q3_k_tokens, BlockQ3_K)
CAIRN_ONE_ENTRY(q5_k_dot_q8_k, q5_k_tokens, BlockQ5_K)
CAIRN_ONE_ENTRY(iq4_xs_dot_q8_k, iq4_xs_tokens, BlockIQ4_XS)
CAIRN_TOKENS_ENTRY(q5_k_dot_tokens, q5_k_tokens, BlockQ5_K)
CAIRN_TOKENS_ENTRY(q2_k_dot_tokens, q2_k_tokens, BlockQ2_K)
CAIRN_TOKENS_ENTRY(q3_k_dot_tokens, q3_k_tokens, BlockQ3_K)
CAIRN_TOKENS_ENTRY(iq4_xs_dot_tokens, iq4_xs_tokens, BlockIQ4_XS)
#undef CAIRN_TOKENS_ENTRY
#undef CAIRN_ONE_ENTRY

}  // namespace cairn::quant::avx2
