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

// ---- one loop for one or many tokens ---------------------------------------------
// Each type's block decoding as a policy: its codes as bytes (signed: dot_i8;
// unsigned: dot_u8_lanes), its scale, and for the offset types the min that
// meets the activations' d * sum(q); the loop below decodes each block once
// for up to kMaxDotTokens tokens (TypeOps::vec_dot_tokens); with one token it
// is the single dot.
namespace {

struct Q4_1Policy {
  using W = BlockQ4_1;
  using A = BlockQ8_1;
  static constexpr bool kSigned = false, kOffset = true;
  CAIRN_AVX2 static __m256i codes(const W& b) { return nibbles_32(b.qs); }
  CAIRN_AVX2 static float scale(const W& b) { return f16(b.d); }
  CAIRN_AVX2 static float act_scale(const A& y) { return f16(y.d); }
  CAIRN_AVX2 static float min(const W& b) { return f16(b.m); }
};
struct Q5_0Policy {
  using W = BlockQ5_0;
  using A = BlockQ8_0;
  static constexpr bool kSigned = true, kOffset = false;
  CAIRN_AVX2 static __m256i codes(const W& b) {
    const __m256i high = bits_to_bytes(load_u32(b.qh));
    return _mm256_sub_epi8(nibbles_32(b.qs), _mm256_andnot_si256(high, _mm256_set1_epi8(16)));
  }
  CAIRN_AVX2 static float scale(const W& b) { return f16(b.d); }
  CAIRN_AVX2 static float act_scale(const A& y) { return f16(y.d); }
  CAIRN_AVX2 static float min(const W&) { return 0.0f; }
};
struct Q5_1Policy {
  using W = BlockQ5_1;
  using A = BlockQ8_1;
  static constexpr bool kSigned = false, kOffset = true;
  CAIRN_AVX2 static __m256i codes(const W& b) {
    const __m256i high = bits_to_bytes(load_u32(b.qh));
    return _mm256_or_si256(nibbles_32(b.qs), _mm256_and_si256(high, _mm256_set1_epi8(16)));
  }
  CAIRN_AVX2 static float scale(const W& b) { return f16(b.d); }
  CAIRN_AVX2 static float act_scale(const A& y) { return f16(y.d); }
  CAIRN_AVX2 static float min(const W& b) { return f16(b.m); }
};
struct Iq4NlPolicy {
  using W = BlockIQ4_NL;
  using A = BlockQ8_0;
  static constexpr bool kSigned = true, kOffset = false;
  CAIRN_AVX2 static __m256i codes(const W& b) { return lookup_16(kIq4nlValues, nibbles_32(b.qs)); }
  CAIRN_AVX2 static float scale(const W& b) { return f16(b.d); }
  CAIRN_AVX2 static float act_scale(const A& y) { return f16(y.d); }
  CAIRN_AVX2 static float min(const W&) { return 0.0f; }
};
struct Mxfp4Policy {
  using W = BlockMXFP4;
  using A = BlockQ8_0;
  static constexpr bool kSigned = true, kOffset = false;
  CAIRN_AVX2 static __m256i codes(const W& b) { return lookup_16(kFp4Values, nibbles_32(b.qs)); }
  CAIRN_AVX2 static float scale(const W& b) { return e8m0_half(b.e); }
  CAIRN_AVX2 static float act_scale(const A& y) { return f16(y.d); }
  CAIRN_AVX2 static float min(const W&) { return 0.0f; }
};

template <class P, int NT>
CAIRN_AVX2 inline void tokens_32(int64_t n, const typename P::W* x, const uint8_t* act, size_t stride, float* out,
                                 size_t out_stride) {
  __m256 acc[NT];
  float offsets[NT];
  for (int t = 0; t < NT; ++t) {
    acc[t] = _mm256_setzero_ps();
    offsets[t] = 0.0f;
  }
  for (int64_t i = 0; i < n / kQK4_0; ++i) {
    const __m256i q = P::codes(x[i]);
    const float dx = P::scale(x[i]);
    for (int t = 0; t < NT; ++t) {
      const typename P::A& y = reinterpret_cast<const typename P::A*>(act + t * stride)[i];
      const __m256i yq = load_32(y.qs);
      const __m256i p = P::kSigned ? dot_i8(q, yq) : dot_u8_lanes(q, yq);
      acc[t] = lanes_fma(p, dx * P::act_scale(y), acc[t]);
      if constexpr (P::kOffset) offsets[t] = fma_ss(P::min(x[i]), f16(y.s), offsets[t]);
    }
  }
  for (int t = 0; t < NT; ++t) out[t * out_stride] = P::kOffset ? lanes_sum(acc[t]) + offsets[t] : lanes_sum(acc[t]);
}

template <class P>
CAIRN_AVX2 void dot_tokens_32(int64_t n, const void* w, const void* act, size_t act_stride, int64_t n_act,
                              float* out, size_t out_stride) {
  const auto* x = static_cast<const typename P::W*>(w);
  const auto* a = static_cast<const uint8_t*>(act);
  switch (n_act) {
    case 1: return tokens_32<P, 1>(n, x, a, act_stride, out, out_stride);
    case 2: return tokens_32<P, 2>(n, x, a, act_stride, out, out_stride);
    case 3: return tokens_32<P, 3>(n, x, a, act_stride, out, out_stride);
    default: return tokens_32<P, 4>(n, x, a, act_stride, out, out_stride);
  }
}

// Two weight rows against one token: two independent accumulator chains, the
// activation block loaded once; each row's bits as its single dot.
template <class P>
CAIRN_AVX2 inline void rows2_32(int64_t n, const typename P::W* x0, const typename P::W* x1, const typename P::A* y,
                                float* out) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  float off0 = 0.0f, off1 = 0.0f;
  for (int64_t i = 0; i < n / kQK4_0; ++i) {
    const __m256i yq = load_32(y[i].qs);
    const float dy = P::act_scale(y[i]);
    const __m256i q0 = P::codes(x0[i]), q1 = P::codes(x1[i]);
    const __m256i p0 = P::kSigned ? dot_i8(q0, yq) : dot_u8_lanes(q0, yq);
    const __m256i p1 = P::kSigned ? dot_i8(q1, yq) : dot_u8_lanes(q1, yq);
    acc0 = lanes_fma(p0, P::scale(x0[i]) * dy, acc0);
    acc1 = lanes_fma(p1, P::scale(x1[i]) * dy, acc1);
    if constexpr (P::kOffset) {
      off0 = fma_ss(P::min(x0[i]), f16(y[i].s), off0);
      off1 = fma_ss(P::min(x1[i]), f16(y[i].s), off1);
    }
  }
  out[0] = P::kOffset ? lanes_sum(acc0) + off0 : lanes_sum(acc0);
  out[1] = P::kOffset ? lanes_sum(acc1) + off1 : lanes_sum(acc1);
}

template <class P>
CAIRN_AVX2 void dot_rows_32(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* act, float* out) {
  const auto* base = static_cast<const uint8_t*>(w);
  const auto* y = static_cast<const typename P::A*>(act);
  int64_t r = 0;
  for (; r + 2 <= n_rows; r += 2)
    rows2_32<P>(n, reinterpret_cast<const typename P::W*>(base + r * w_stride),
                reinterpret_cast<const typename P::W*>(base + (r + 1) * w_stride), y, out + r);
  if (r < n_rows) tokens_32<P, 1>(n, reinterpret_cast<const typename P::W*>(base + r * w_stride),
                                  static_cast<const uint8_t*>(act), 0, out + r, 1);
}

template <class P>
CAIRN_AVX2 float dot_one_32(int64_t n, const void* w, const void* act) {
  float out;
  tokens_32<P, 1>(n, static_cast<const typename P::W*>(w), static_cast<const uint8_t*>(act), 0, &out, 1);
  return out;
}

}  // namespace

CAIRN_AVX2 float q4_1_dot_q8_1(int64_t n, const void* w, const void* act) { return dot_one_32<Q4_1Policy>(n, w, act); }
CAIRN_AVX2 float q5_0_dot_q8_0(int64_t n, const void* w, const void* act) { return dot_one_32<Q5_0Policy>(n, w, act); }
CAIRN_AVX2 float q5_1_dot_q8_1(int64_t n, const void* w, const void* act) { return dot_one_32<Q5_1Policy>(n, w, act); }
CAIRN_AVX2 float iq4_nl_dot_q8_0(int64_t n, const void* w, const void* act) {
  return dot_one_32<Iq4NlPolicy>(n, w, act);
}
CAIRN_AVX2 float mxfp4_dot_q8_0(int64_t n, const void* w, const void* act) {
  return dot_one_32<Mxfp4Policy>(n, w, act);
}

CAIRN_AVX2 void q4_1_dot_rows(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* act, float* out) {
  dot_rows_32<Q4_1Policy>(n, w, w_stride, n_rows, act, out);
}
CAIRN_AVX2 void q5_0_dot_rows(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* act, float* out) {
  dot_rows_32<Q5_0Policy>(n, w, w_stride, n_rows, act, out);
}
CAIRN_AVX2 void q5_1_dot_rows(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* act, float* out) {
  dot_rows_32<Q5_1Policy>(n, w, w_stride, n_rows, act, out);
}
CAIRN_AVX2 void iq4_nl_dot_rows(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* act,
                                float* out) {
  dot_rows_32<Iq4NlPolicy>(n, w, w_stride, n_rows, act, out);
}
CAIRN_AVX2 void mxfp4_dot_rows(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* act,
                               float* out) {
  dot_rows_32<Mxfp4Policy>(n, w, w_stride, n_rows, act, out);
}

CAIRN_AVX2 void q4_1_dot_tokens(int64_t n, const void* w, const void* act, size_t act_stride, int64_t n_act,
                                float* out, size_t out_stride) {
  dot_tokens_32<Q4_1Policy>(n, w, act, act_stride, n_act, out, out_stride);
}
CAIRN_AVX2 void q5_0_dot_tokens(int64_t n, const void* w, const void* act, size_t act_stride, int64_t n_act,
                                float* out, size_t out_stride) {
  dot_tokens_32<Q5_0Policy>(n, w, act, act_stride, n_act, out, out_stride);
}
CAIRN_AVX2 void q5_1_dot_tokens(int64_t n, const void* w, const void* act, size_t act_stride, int64_t n_act,
                                float* out, size_t out_stride) {
  dot_tokens_32<Q5_1Policy>(n, w, act, act_stride, n_act, out, out_stride);
}
CAIRN_AVX2 void iq4_nl_dot_tokens(int64_t n, const void* w, const void* act, size_t act_stride, int64_t n_act,
                                  float* out, size_t out_stride) {
  dot_tokens_32<Iq4NlPolicy>(n, w, act, act_stride, n_act, out, out_stride);
}
CAIRN_AVX2 void mxfp4_dot_tokens(int64_t n, const void* w, const void* act, size_t act_stride, int64_t n_act,
                                 float* out, size_t out_stride) {
  dot_tokens_32<Mxfp4Policy>(n, w, act, act_stride, n_act, out, out_stride);
}

}  // namespace cairn::quant::avx2
