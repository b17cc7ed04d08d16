// kernels/row_dot_vnni_q.cpp — AVX-512 VNNI row dot products (row_dot.h) of the
// 32-element block types Q4_1, Q5_0, Q5_1, IQ4_NL and MXFP4.
// Every code becomes an unsigned byte u (the signed types biased: value =
// u - bias), so one vpdpbusd gives Lanes8's exact sums of four products per
// int32 lane; the bias comes off as bias * (sum of those four activations),
// another vpdpbusd. A 512-bit register holds two blocks (single dots and
// tokens: blocks i and i + 1 of one row, their float steps still one block
// after the other) or one block of two rows (vec_dot_rows: each half its own
// accumulator chain). The float steps are the scalar reference's
// (core/quant_legacy.cpp, quant_nonlinear.cpp): the same bits.
#include <cstring>

#include "core/quant_blocks.h"
#include "kernels/row_dot.h"
#include "kernels/vnni_int8.h"

namespace cairn::quant::avx512vnni {
namespace {

using vnni::f16;
using vnni::fma_ss;
using vnni::join;
using vnni::lanes_sum;
using vnni::lookup_16;
using vnni::nibbles_2x32;

CAIRN_VNNI inline uint64_t qh_pair(const uint8_t* a, const uint8_t* b) {
  uint32_t lo, hi;
  std::memcpy(&lo, a, 4);
  std::memcpy(&hi, b, 4);
  return static_cast<uint64_t>(lo) | static_cast<uint64_t>(hi) << 32;
}

// A 16-entry int8 table plus 128, as unsigned bytes (vpdpbusd's unsigned side).
struct Biased16 {
  int8_t v[16];
  constexpr explicit Biased16(const int8_t* t) : v{} {
    for (int i = 0; i < 16; ++i) v[i] = static_cast<int8_t>(static_cast<uint8_t>(t[i] + 128));
  }
};
constexpr Biased16 kIq4nlBiased(kIq4nlValues);
constexpr Biased16 kFp4Biased(kFp4Values);

// Each type's decoding: codes2(a, b) gives block a's unsigned codes in the low
// half and block b's in the high half; kBias is what they carry over the value.
struct Q4_1Policy {
  using W = BlockQ4_1;
  using A = BlockQ8_1;
  static constexpr int kBias = 0;
  static constexpr bool kOffset = true;
  CAIRN_VNNI static __m512i codes2(const W& a, const W& b) { return nibbles_2x32(a.qs, b.qs); }
  CAIRN_VNNI static float scale(const W& b) { return f16(b.d); }
  CAIRN_VNNI static float min(const W& b) { return f16(b.m); }
};
struct Q5_0Policy {
  using W = BlockQ5_0;
  using A = BlockQ8_0;
  static constexpr int kBias = 16;
  static constexpr bool kOffset = false;
  CAIRN_VNNI static __m512i codes2(const W& a, const W& b) {
    // The fifth bit of element j in bit j of qh: one mask bit per byte.
    const __m512i low = nibbles_2x32(a.qs, b.qs);
    return _mm512_mask_add_epi8(low, qh_pair(a.qh, b.qh), low, _mm512_set1_epi8(16));
  }
  CAIRN_VNNI static float scale(const W& b) { return f16(b.d); }
  CAIRN_VNNI static float min(const W&) { return 0.0f; }
};
struct Q5_1Policy {
  using W = BlockQ5_1;
  using A = BlockQ8_1;
  static constexpr int kBias = 0;
  static constexpr bool kOffset = true;
  CAIRN_VNNI static __m512i codes2(const W& a, const W& b) {
    const __m512i low = nibbles_2x32(a.qs, b.qs);
    return _mm512_mask_add_epi8(low, qh_pair(a.qh, b.qh), low, _mm512_set1_epi8(16));
  }
  CAIRN_VNNI static float scale(const W& b) { return f16(b.d); }
  CAIRN_VNNI static float min(const W& b) { return f16(b.m); }
};
struct Iq4NlPolicy {
  using W = BlockIQ4_NL;
  using A = BlockQ8_0;
  static constexpr int kBias = 128;
  static constexpr bool kOffset = false;
  CAIRN_VNNI static __m512i codes2(const W& a, const W& b) {
    return lookup_16(kIq4nlBiased.v, nibbles_2x32(a.qs, b.qs));
  }
  CAIRN_VNNI static float scale(const W& b) { return f16(b.d); }
  CAIRN_VNNI static float min(const W&) { return 0.0f; }
};
struct Mxfp4Policy {
  using W = BlockMXFP4;
  using A = BlockQ8_0;
  static constexpr int kBias = 128;
  static constexpr bool kOffset = false;
  CAIRN_VNNI static __m512i codes2(const W& a, const W& b) {
    return lookup_16(kFp4Biased.v, nibbles_2x32(a.qs, b.qs));
  }
  CAIRN_VNNI static float scale(const W& b) { return e8m0_half(b.e); }
  CAIRN_VNNI static float min(const W&) { return 0.0f; }
};

// Exact sums of (u - bias) * y over each group of four bytes: Lanes8's lanes
// of the block in each half. |u * y| sums stay far inside int32.
template <class P>
CAIRN_VNNI inline __m512i block_sums(__m512i u, __m512i y) {
  if constexpr (P::kBias == 0) {
    return _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, y);
  } else {
    const __m512i bias = _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(static_cast<char>(P::kBias)), y);
    return _mm512_dpbusd_epi32(_mm512_sub_epi32(_mm512_setzero_si512(), bias), u, y);
  }
}

template <class P>
CAIRN_VNNI inline const typename P::A* act_row(const uint8_t* act, size_t stride, int t) {
  return reinterpret_cast<const typename P::A*>(act + static_cast<size_t>(t) * stride);
}

// One row against NT tokens: two blocks decoded per step, each token's float
// lanes take block i's fma, then block i + 1's, as the scalar loop does.
template <class P, int NT>
CAIRN_VNNI inline void tokens_32(int64_t n, const typename P::W* x, const uint8_t* act, size_t stride, float* out,
                                 size_t out_stride) {
  __m256 acc[NT];
  float off[NT];
  for (int t = 0; t < NT; ++t) {
    acc[t] = _mm256_setzero_ps();
    off[t] = 0.0f;
  }
  const int64_t nb = n / kQK4_0;
  int64_t i = 0;
  for (; i + 2 <= nb; i += 2) {
    const __m512i u = P::codes2(x[i], x[i + 1]);
    const float d0 = P::scale(x[i]), d1 = P::scale(x[i + 1]);
    for (int t = 0; t < NT; ++t) {
      const typename P::A* y = act_row<P>(act, stride, t);
      const __m512 f = _mm512_cvtepi32_ps(block_sums<P>(u, join(y[i].qs, y[i + 1].qs)));
      acc[t] = _mm256_fmadd_ps(_mm512_castps512_ps256(f), _mm256_set1_ps(d0 * f16(y[i].d)), acc[t]);
      acc[t] = _mm256_fmadd_ps(_mm512_extractf32x8_ps(f, 1), _mm256_set1_ps(d1 * f16(y[i + 1].d)), acc[t]);
      if constexpr (P::kOffset) {
        off[t] = fma_ss(P::min(x[i]), f16(y[i].s), off[t]);
        off[t] = fma_ss(P::min(x[i + 1]), f16(y[i + 1].s), off[t]);
      }
    }
  }
  if (i < nb) {  // an odd last block: the low half only
    const __m512i u = P::codes2(x[i], x[i]);
    const float d0 = P::scale(x[i]);
    for (int t = 0; t < NT; ++t) {
      const typename P::A* y = act_row<P>(act, stride, t);
      const __m512 f = _mm512_cvtepi32_ps(block_sums<P>(u, join(y[i].qs, y[i].qs)));
      acc[t] = _mm256_fmadd_ps(_mm512_castps512_ps256(f), _mm256_set1_ps(d0 * f16(y[i].d)), acc[t]);
      if constexpr (P::kOffset) off[t] = fma_ss(P::min(x[i]), f16(y[i].s), off[t]);
    }
  }
  for (int t = 0; t < NT; ++t) out[t * out_stride] = P::kOffset ? lanes_sum(acc[t]) + off[t] : lanes_sum(acc[t]);
}

template <class P>
CAIRN_VNNI void dot_tokens_32(int64_t n, const void* w, const void* act, size_t act_stride, int64_t n_act,
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

// NP pairs of rows against one token: each register holds block i of two
// rows (the activation block in both halves, its bias term shared), each half
// its own chain of fmas; the offsets of both rows in two float lanes.
template <class P, int NP>
CAIRN_VNNI inline void row_pairs_32(int64_t n, const typename P::W* const* x, const typename P::A* y, float* out) {
  __m512 acc[NP];
  __m128 off[NP];
  for (int p = 0; p < NP; ++p) {
    acc[p] = _mm512_setzero_ps();
    off[p] = _mm_setzero_ps();
  }
  for (int64_t i = 0; i < n / kQK4_0; ++i) {
    const __m512i yq = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(y[i].qs)));
    const float dy = f16(y[i].d);
    __m512i bias = _mm512_setzero_si512();
    if constexpr (P::kBias != 0)
      bias = _mm512_sub_epi32(bias, _mm512_dpbusd_epi32(bias, _mm512_set1_epi8(static_cast<char>(P::kBias)), yq));
    for (int p = 0; p < NP; ++p) {
      const typename P::W& a = x[2 * p][i];
      const typename P::W& b = x[2 * p + 1][i];
      const __m512 f = _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(bias, P::codes2(a, b), yq));
      const __m512 d = _mm512_insertf32x8(_mm512_set1_ps(P::scale(a) * dy), _mm256_set1_ps(P::scale(b) * dy), 1);
      acc[p] = _mm512_fmadd_ps(f, d, acc[p]);
      if constexpr (P::kOffset)
        off[p] = _mm_fmadd_ps(_mm_set_ps(0.0f, 0.0f, P::min(b), P::min(a)), _mm_set1_ps(f16(y[i].s)), off[p]);
    }
  }
  for (int p = 0; p < NP; ++p) {
    const float s0 = lanes_sum(_mm512_castps512_ps256(acc[p]));
    const float s1 = lanes_sum(_mm512_extractf32x8_ps(acc[p], 1));
    out[2 * p] = P::kOffset ? s0 + _mm_cvtss_f32(off[p]) : s0;
    out[2 * p + 1] = P::kOffset ? s1 + _mm_cvtss_f32(_mm_movehdup_ps(off[p])) : s1;
  }
}

template <class P>
CAIRN_VNNI void dot_rows_32(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* act, float* out) {
  const auto* base = static_cast<const uint8_t*>(w);
  const auto* y = static_cast<const typename P::A*>(act);
  auto row = [&](int64_t r) { return reinterpret_cast<const typename P::W*>(base + static_cast<size_t>(r) * w_stride); };
  int64_t r = 0;
  for (; r + 2 <= n_rows; r += 2) {
    const typename P::W* rows[2] = {row(r), row(r + 1)};
    row_pairs_32<P, 1>(n, rows, y, out + r);
  }
  if (r < n_rows) tokens_32<P, 1>(n, row(r), static_cast<const uint8_t*>(act), 0, out + r, 1);
}

template <class P>
CAIRN_VNNI float dot_one_32(int64_t n, const void* w, const void* act) {
  float out;
  tokens_32<P, 1>(n, static_cast<const typename P::W*>(w), static_cast<const uint8_t*>(act), 0, &out, 1);
  return out;
}

}  // namespace

#define CAIRN_VNNI_32(prefix, act_name, Policy)                                                                     \
  CAIRN_VNNI float prefix##_dot_##act_name(int64_t n, const void* w, const void* act) {                            \
    return dot_one_32<Policy>(n, w, act);                                                                           \
  }                                                                                                                 \
  CAIRN_VNNI void prefix##_dot_rows(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* act,    \
                                    float* out) {                                                                   \
    dot_rows_32<Policy>(n, w, w_stride, n_rows, act, out);                                                          \
  }                                                                                                                 \
  CAIRN_VNNI void prefix##_dot_tokens(int64_t n, const void* w, const void* act, size_t act_stride, int64_t n_act, \
                                      float* out, size_t out_stride) {                                              \
    dot_tokens_32<Policy>(n, w, act, act_stride, n_act, out, out_stride);                                           \
  }

CAIRN_VNNI_32(q4_1, q8_1, Q4_1Policy)
CAIRN_VNNI_32(q5_0, q8_0, Q5_0Policy)
CAIRN_VNNI_32(q5_1, q8_1, Q5_1Policy)
CAIRN_VNNI_32(iq4_nl, q8_0, Iq4NlPolicy)
CAIRN_VNNI_32(mxfp4, q8_0, Mxfp4Policy)
#undef CAIRN_VNNI_32

}  // namespace cairn::quant::avx512vnni
