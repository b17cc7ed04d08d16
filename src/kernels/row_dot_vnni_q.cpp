// kernels/row_dot_vnni_q.cpp — AVX-512 VNNI row dot products (row_dot.h) of the
// 32-element block types Q4_1, Q5_0, Q5_1, IQ4_NL and MXFP4.
// The AVX2 kernels' loops (row_dot_avx2_q.cpp) on 256-bit registers, with
// VNNI's instructions where they save work: every code becomes an unsigned
// byte u (the signed types biased: value = u - bias), so one vpdpbusd gives
// Lanes8's exact sums of four products per int32 lane, and the bias comes off
// as bias * (sum of those four activations), another vpdpbusd (once per
// activation block for a pair of rows); Q5's fifth bits go in as a byte mask.
// 512-bit steps (two blocks, or one block of two rows, per register) were
// slower than AVX2 in bench_matmul (Q4_1: 18 % for one token, 47 % for 128):
// 512-bit integer work issues on two ports to 256-bit's three, and each block
// still takes its own fma per 8 lanes.
// The float steps are the scalar reference's (core/quant_legacy.cpp,
// quant_nonlinear.cpp): the same bits.
#include <cstring>

#include "core/quant_blocks.h"
#include "kernels/row_dot.h"
#include "kernels/vnni_int8.h"

namespace cairn::quant::avx512vnni {
namespace {

using vnni::f16;
using vnni::fma_ss;
using vnni::lanes_fma;
using vnni::lanes_sum;

CAIRN_VNNI inline uint32_t load_qh(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

CAIRN_VNNI inline __m256i load_32(const int8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }

// The 32 4-bit codes of a 16-byte block as bytes: element j's low nibble of
// byte j (j < 16), element 16 + j's high nibble.
CAIRN_VNNI inline __m256i nibbles_32(const uint8_t* qs) {
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i low4 = _mm_set1_epi8(0xF);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(bytes, 4), low4), _mm_and_si128(bytes, low4));
}

// 16 unsigned bytes looked up by 4-bit codes.
CAIRN_VNNI inline __m256i lookup_16(const int8_t* table, __m256i codes) {
  return _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(table))),
                             codes);
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

// Each type's decoding: codes(b) gives the block's unsigned codes; kBias is
// what they carry over the value; the offset types add min * s per block.
struct Q4_1Policy {
  using W = BlockQ4_1;
  using A = BlockQ8_1;
  static constexpr int kBias = 0;
  static constexpr bool kOffset = true;
  CAIRN_VNNI static __m256i codes(const W& b) { return nibbles_32(b.qs); }
  CAIRN_VNNI static float scale(const W& b) { return f16(b.d); }
  CAIRN_VNNI static float min(const W& b) { return f16(b.m); }
};
// The fifth bit of element j is bit j of qh: one mask bit per byte.
struct Q5_0Policy {
  using W = BlockQ5_0;
  using A = BlockQ8_0;
  static constexpr int kBias = 16;
  static constexpr bool kOffset = false;
  CAIRN_VNNI static __m256i codes(const W& b) {
    const __m256i low = nibbles_32(b.qs);
    return _mm256_mask_add_epi8(low, load_qh(b.qh), low, _mm256_set1_epi8(16));
  }
  CAIRN_VNNI static float scale(const W& b) { return f16(b.d); }
  CAIRN_VNNI static float min(const W&) { return 0.0f; }
};
struct Q5_1Policy {
  using W = BlockQ5_1;
  using A = BlockQ8_1;
  static constexpr int kBias = 0;
  static constexpr bool kOffset = true;
  CAIRN_VNNI static __m256i codes(const W& b) {
    const __m256i low = nibbles_32(b.qs);
    return _mm256_mask_add_epi8(low, load_qh(b.qh), low, _mm256_set1_epi8(16));
  }
  CAIRN_VNNI static float scale(const W& b) { return f16(b.d); }
  CAIRN_VNNI static float min(const W& b) { return f16(b.m); }
};
struct Iq4NlPolicy {
  using W = BlockIQ4_NL;
  using A = BlockQ8_0;
  static constexpr int kBias = 128;
  static constexpr bool kOffset = false;
  CAIRN_VNNI static __m256i codes(const W& b) { return lookup_16(kIq4nlBiased.v, nibbles_32(b.qs)); }
  CAIRN_VNNI static float scale(const W& b) { return f16(b.d); }
  CAIRN_VNNI static float min(const W&) { return 0.0f; }
};
struct Mxfp4Policy {
  using W = BlockMXFP4;
  using A = BlockQ8_0;
  static constexpr int kBias = 128;
  static constexpr bool kOffset = false;
  CAIRN_VNNI static __m256i codes(const W& b) { return lookup_16(kFp4Biased.v, nibbles_32(b.qs)); }
  CAIRN_VNNI static float scale(const W& b) { return e8m0_half(b.e); }
  CAIRN_VNNI static float min(const W&) { return 0.0f; }
};

// Minus bias * (sum of each four activations): the start of a block's lanes.
// Exact: |sums| stay far inside int32.
template <class P>
CAIRN_VNNI inline __m256i bias_start(__m256i y) {
  if constexpr (P::kBias == 0) {
    return _mm256_setzero_si256();
  } else {
    const __m256i b = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(static_cast<char>(P::kBias)), y);
    return _mm256_sub_epi32(_mm256_setzero_si256(), b);
  }
}

template <class P>
CAIRN_VNNI inline const typename P::A* act_row(const uint8_t* act, size_t stride, int t) {
  return reinterpret_cast<const typename P::A*>(act + static_cast<size_t>(t) * stride);
}

// One row against NT tokens, each block decoded once.
template <class P, int NT>
CAIRN_VNNI inline void tokens_32(int64_t n, const typename P::W* x, const uint8_t* act, size_t stride, float* out,
                                 size_t out_stride) {
  __m256 acc[NT];
  float off[NT];
  for (int t = 0; t < NT; ++t) {
    acc[t] = _mm256_setzero_ps();
    off[t] = 0.0f;
  }
  for (int64_t i = 0; i < n / kQK4_0; ++i) {
    __m256i u = P::codes(x[i]);
    // The table types against several tokens: magnitudes |v| (no value is
    // -128) meet activations carrying v's sign, two instructions per token
    // where the bias takes three.
    __mmask32 neg = 0;
    if constexpr (P::kBias == 128 && NT > 1) {
      const __m256i v = _mm256_xor_si256(u, _mm256_set1_epi8(static_cast<char>(0x80)));
      neg = _mm256_movepi8_mask(v);
      u = _mm256_abs_epi8(v);
    }
    const float dx = P::scale(x[i]);
    for (int t = 0; t < NT; ++t) {
      const typename P::A& y = act_row<P>(act, stride, t)[i];
      const __m256i yq = load_32(y.qs);
      __m256i sums;
      if constexpr (P::kBias == 128 && NT > 1) {
        sums = _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, _mm256_mask_sub_epi8(yq, neg, _mm256_setzero_si256(), yq));
      } else {
        sums = _mm256_dpbusd_epi32(bias_start<P>(yq), u, yq);
      }
      acc[t] = lanes_fma(sums, dx * f16(y.d), acc[t]);
      if constexpr (P::kOffset) off[t] = fma_ss(P::min(x[i]), f16(y.s), off[t]);
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

// Two rows against one token: two accumulator chains, the activation block
// and its bias term shared.
template <class P>
CAIRN_VNNI inline void rows2_32(int64_t n, const typename P::W* x0, const typename P::W* x1, const typename P::A* y,
                                float* out) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  float off0 = 0.0f, off1 = 0.0f;
  for (int64_t i = 0; i < n / kQK4_0; ++i) {
    const __m256i yq = load_32(y[i].qs);
    const __m256i start = bias_start<P>(yq);
    const float dy = f16(y[i].d);
    acc0 = lanes_fma(_mm256_dpbusd_epi32(start, P::codes(x0[i]), yq), P::scale(x0[i]) * dy, acc0);
    acc1 = lanes_fma(_mm256_dpbusd_epi32(start, P::codes(x1[i]), yq), P::scale(x1[i]) * dy, acc1);
    if constexpr (P::kOffset) {
      off0 = fma_ss(P::min(x0[i]), f16(y[i].s), off0);
      off1 = fma_ss(P::min(x1[i]), f16(y[i].s), off1);
    }
  }
  out[0] = P::kOffset ? lanes_sum(acc0) + off0 : lanes_sum(acc0);
  out[1] = P::kOffset ? lanes_sum(acc1) + off1 : lanes_sum(acc1);
}

template <class P>
CAIRN_VNNI void dot_rows_32(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* act, float* out) {
  const auto* base = static_cast<const uint8_t*>(w);
  const auto* y = static_cast<const typename P::A*>(act);
  auto row = [&](int64_t r) { return reinterpret_cast<const typename P::W*>(base + static_cast<size_t>(r) * w_stride); };
  int64_t r = 0;
  for (; r + 2 <= n_rows; r += 2) rows2_32<P>(n, row(r), row(r + 1), y, out + r);
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
