// kernels/row_dot_vnni_k.cpp — AVX-512 VNNI row dot products (row_dot.h) of the
// 256-element types Q2_K, Q3_K, Q5_K and IQ4_XS.
// A 512-bit step covers 64 elements, two 32-element runs in element order,
// one per 256-bit half; pairs of products (vpmaddubsw) are multiplied by
// their sub-block's scale and summed into int32 lanes with vpdpwssd, and the
// halves folded, so the 8 lanes hold Lanes8's exact integer sums. The float
// steps per super-block (one fma per lane, the K-quants' min term in a float of
// its own) are the scalar reference's (core/quant_k.cpp,
// quant_nonlinear.cpp): the same bits. A super-block's codes and scales are
// decoded once for up to kMaxDotTokens tokens.
#include <cstring>

#include "core/quant_blocks.h"
#include "kernels/row_dot.h"
#include "kernels/vnni_int8.h"

namespace cairn::quant::avx512vnni {
namespace {

using vnni::f16;
using vnni::fma_ss;
using vnni::fold;
using vnni::hsum8;
using vnni::lanes_fma;
using vnni::lanes_sum;

// vpermw indices spreading int16 scales over a step's 32 int16 lanes (two
// bytes each): lane i of step s takes scale stride * s + i / per, per = the
// sub-block's length in int16 lanes.
struct ScaleIdx {
  alignas(64) int16_t v[4][32];
  constexpr ScaleIdx(int stride, int per) : v{} {
    for (int s = 0; s < 4; ++s)
      for (int i = 0; i < 32; ++i) v[s][i] = static_cast<int16_t>(stride * s + i / per);
  }
};
constexpr ScaleIdx kIdx16(4, 8);   // 16-element sub-blocks (Q2_K, Q3_K): four per step
constexpr ScaleIdx kIdx32(2, 16);  // 32-element sub-blocks (IQ4_XS): two per step

CAIRN_VNNI inline __m512i load_idx(const int16_t* v) { return _mm512_load_si512(v); }

CAIRN_VNNI inline __m512i load_64(const void* p) { return _mm512_loadu_si512(p); }

// One byte per half: `lo` in bytes 0..31, `hi` in 32..63.
CAIRN_VNNI inline __m512i halves_epi8(int lo, int hi) {
  return _mm512_mask_blend_epi8(0xFFFFFFFF00000000ull, _mm512_set1_epi8(static_cast<char>(lo)),
                                _mm512_set1_epi8(static_cast<char>(hi)));
}
CAIRN_VNNI inline __m512i halves_epi16(int lo, int hi) {
  return _mm512_mask_blend_epi16(0xFFFF0000u, _mm512_set1_epi16(static_cast<short>(lo)),
                                 _mm512_set1_epi16(static_cast<short>(hi)));
}

CAIRN_VNNI inline const BlockQ8_K& act_block(const uint8_t* act, size_t stride, int t, int64_t i) {
  return reinterpret_cast<const BlockQ8_K*>(act + static_cast<size_t>(t) * stride)[i];
}

// Sum over j of bsums[j] * m[j] for 16 int16 mins.
CAIRN_VNNI inline int32_t bsums_dot(const int16_t* bsums, __m256i mins16) {
  return hsum8(_mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(bsums)), mins16));
}

// ---- Q2_K -------------------------------------------------------------------
// Element 32k + l of half h (k = 0..3) is bits 2k of qs[32h + l]: step s
// (elements 64s..64s + 63) is runs 2(s % 2) and 2(s % 2) + 1 of half s / 2.
template <int NT>
CAIRN_VNNI inline void q2_k_tokens(int64_t n, const BlockQ2_K* x, const uint8_t* act, size_t stride, float* out,
                                   size_t out_stride) {
  const __m512i three = _mm512_set1_epi8(3);
  const __m512i shift[2] = {halves_epi16(0, 2), halves_epi16(4, 6)};
  __m512i idx[4];
  for (int s = 0; s < 4; ++s) idx[s] = load_idx(kIdx16.v[s]);
  __m256 lanes[NT];
  float min_acc[NT];
  for (int t = 0; t < NT; ++t) {
    lanes[t] = _mm256_setzero_ps();
    min_acc[t] = 0.0f;
  }
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const __m128i sc_bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x[i].scales));
    const __m128i low4 = _mm_set1_epi8(0xF);
    const __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc_bytes, 4), low4));
    const __m512i sc = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(_mm_and_si128(sc_bytes, low4)));
    __m512i codes[4], scale[4];
    for (int s = 0; s < 4; ++s) {
      const __m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[i].qs + 32 * (s / 2))));
      codes[s] = _mm512_and_si512(_mm512_srlv_epi16(q, shift[s % 2]), three);
      scale[s] = _mm512_permutexvar_epi16(idx[s], sc);
    }
    const float dx = f16(x[i].d), dminx = f16(x[i].dmin);
    for (int t = 0; t < NT; ++t) {
      const BlockQ8_K& y = act_block(act, stride, t, i);
      __m512i acc = _mm512_setzero_si512();
      for (int s = 0; s < 4; ++s)
        acc = _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(codes[s], load_64(y.qs + 64 * s)), scale[s]);
      lanes[t] = lanes_fma(fold(acc), y.d * dx, lanes[t]);
      min_acc[t] = fma_ss(y.d * dminx, static_cast<float>(bsums_dot(y.bsums, mins)), min_acc[t]);
    }
  }
  for (int t = 0; t < NT; ++t) out[t * out_stride] = lanes_sum(lanes[t]) - min_acc[t];
}

// ---- Q3_K -------------------------------------------------------------------
// Q2_K's low bits; the high bit of element 32k + l (k = 0..7) is bit k of
// hmask[l]: step s takes bits 2s and 2s + 1. Value = code - 4 where the bit is
// clear, i.e. (low + 4 * bit) - 4.
// The 16 signed scales (q3k_scales) in general registers, handed over as one
// vector (bytes stored and reloaded would stall store forwarding).
CAIRN_VNNI inline __m128i q3k_scales_vec(const uint8_t* packed) {
  uint32_t a[3];
  std::memcpy(a, packed, 12);
  const uint32_t u0 = (a[0] & 0x0f0f0f0fu) | ((a[2] & 0x03030303u) << 4);
  const uint32_t u1 = (a[1] & 0x0f0f0f0fu) | (((a[2] >> 2) & 0x03030303u) << 4);
  const uint32_t u2 = ((a[0] >> 4) & 0x0f0f0f0fu) | (((a[2] >> 4) & 0x03030303u) << 4);
  const uint32_t u3 = ((a[1] >> 4) & 0x0f0f0f0fu) | (((a[2] >> 6) & 0x03030303u) << 4);
  return _mm_sub_epi8(_mm_set_epi32(static_cast<int>(u3), static_cast<int>(u2), static_cast<int>(u1),
                                    static_cast<int>(u0)),
                      _mm_set1_epi8(32));
}

template <int NT>
CAIRN_VNNI inline void q3_k_tokens(int64_t n, const BlockQ3_K* x, const uint8_t* act, size_t stride, float* out,
                                   size_t out_stride) {
  const __m512i three = _mm512_set1_epi8(3);
  const __m512i four = _mm512_set1_epi8(4);
  const __m512i shift[2] = {halves_epi16(0, 2), halves_epi16(4, 6)};
  __m512i idx[4], hbit[4];
  for (int s = 0; s < 4; ++s) {
    idx[s] = load_idx(kIdx16.v[s]);
    hbit[s] = halves_epi8(1 << (2 * s), 1 << (2 * s + 1));
  }
  __m256 lanes[NT];
  for (int t = 0; t < NT; ++t) lanes[t] = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    const __m512i sc = _mm512_castsi256_si512(_mm256_cvtepi8_epi16(q3k_scales_vec(x[i].scales)));
    const __m512i hm = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[i].hmask)));
    __m512i codes[4], scale[4];
    for (int s = 0; s < 4; ++s) {
      const __m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[i].qs + 32 * (s / 2))));
      const __m512i low = _mm512_and_si512(_mm512_srlv_epi16(q, shift[s % 2]), three);
      codes[s] = _mm512_mask_add_epi8(low, _mm512_test_epi8_mask(hm, hbit[s]), low, four);
      scale[s] = _mm512_permutexvar_epi16(idx[s], sc);
    }
    const float dx = f16(x[i].d);
    for (int t = 0; t < NT; ++t) {
      const BlockQ8_K& y = act_block(act, stride, t, i);
      __m512i acc = _mm512_setzero_si512();
      for (int s = 0; s < 4; ++s) {
        const __m512i q8 = load_64(y.qs + 64 * s);
        const __m512i p = _mm512_sub_epi16(_mm512_maddubs_epi16(codes[s], q8), _mm512_maddubs_epi16(four, q8));
        acc = _mm512_dpwssd_epi32(acc, p, scale[s]);
      }
      lanes[t] = lanes_fma(fold(acc), y.d * dx, lanes[t]);
    }
  }
  for (int t = 0; t < NT; ++t) out[t * out_stride] = lanes_sum(lanes[t]);
}

// ---- Q5_K -------------------------------------------------------------------
// Q4_K's nibbles and scales and a fifth bit: sub-blocks 2s and 2s + 1 are the
// low and high nibbles of qs[32s..32s + 31] (both halves of a register hold
// those bytes, so each step meets 64 contiguous activations), and bit b of
// qh[l] is element l of sub-block b.
template <int NT>
CAIRN_VNNI inline void q5_k_tokens(int64_t n, const BlockQ5_K* x, const uint8_t* act, size_t stride, float* out,
                                   size_t out_stride) {
  const __m512i low4 = _mm512_set1_epi8(0xF);
  const __m512i sixteen = _mm512_set1_epi8(16);
  const __m512i nibble_shift = halves_epi16(0, 4);
  __m512i idx[4], hbit[4];
  for (int s = 0; s < 4; ++s) {
    idx[s] = load_idx(kIdx32.v[s]);
    hbit[s] = halves_epi8(1 << (2 * s), 1 << (2 * s + 1));
  }
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
    const __m512i sm512 = _mm512_castsi256_si512(sm);
    const __m128i m8 = _mm256_extracti128_si256(sm, 1);
    const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[i].qh)));
    __m512i codes[4], scale[4];
    for (int s = 0; s < 4; ++s) {
      const __m512i w = _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[i].qs + 32 * s)));
      const __m512i nib = _mm512_and_si512(_mm512_srlv_epi16(w, nibble_shift), low4);
      codes[s] = _mm512_mask_add_epi8(nib, _mm512_test_epi8_mask(qh, hbit[s]), nib, sixteen);
      scale[s] = _mm512_permutexvar_epi16(idx[s], sm512);
    }
    const float dx = f16(x[i].d), dminx = f16(x[i].dmin);
    for (int t = 0; t < NT; ++t) {
      const BlockQ8_K& y = act_block(act, stride, t, i);
      __m512i acc = _mm512_setzero_si512();
      for (int s = 0; s < 4; ++s)
        acc = _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(codes[s], load_64(y.qs + 64 * s)), scale[s]);
      // The mins meet the 16 bsums summed in pairs (one per 32-element sub-block).
      const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(y.bsums));
      const __m128i pairs = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
      const __m128i mins = _mm_madd_epi16(m8, pairs);
      const int32_t sum_mins = vnni::hsum4(mins);
      lanes[t] = lanes_fma(fold(acc), y.d * dx, lanes[t]);
      min_acc[t] = fma_ss(y.d * dminx, static_cast<float>(sum_mins), min_acc[t]);
    }
  }
  for (int t = 0; t < NT; ++t) out[t * out_stride] = lanes_sum(lanes[t]) - min_acc[t];
}

// ---- IQ4_XS -----------------------------------------------------------------
// Step s is sub-blocks 2s and 2s + 1 (nibbles as Q4_0's, 16 bytes each). The
// table values are signed: their magnitudes meet activations carrying their
// signs (no value is -128), so pairs stay within int16.
template <int NT>
CAIRN_VNNI inline void iq4_xs_tokens(int64_t n, const BlockIQ4_XS* x, const uint8_t* act, size_t stride, float* out,
                                     size_t out_stride) {
  __m512i idx[2 * 2];
  for (int s = 0; s < 4; ++s) idx[s] = load_idx(kIdx32.v[s]);
  const __m128i high_shift = _mm_setr_epi16(0, 2, 4, 6, 8, 10, 12, 14);
  __m256 lanes[NT];
  for (int t = 0; t < NT; ++t) lanes[t] = _mm256_setzero_ps();
  for (int64_t i = 0; i < n / kQK_K; ++i) {
    // The 8 six-bit scales minus 32, as int16: low nibbles of scales_l
    // interleaved with their high nibbles, the two high bits from scales_h.
    uint32_t sl;
    std::memcpy(&sl, x[i].scales_l, 4);
    const __m128i b = _mm_cvtsi32_si128(static_cast<int>(sl));
    const __m128i lo = _mm_unpacklo_epi8(_mm_and_si128(b, _mm_set1_epi8(0xF)),
                                         _mm_and_si128(_mm_srli_epi16(b, 4), _mm_set1_epi8(0xF)));
    const __m128i hi = _mm_and_si128(_mm_srlv_epi16(_mm_set1_epi16(static_cast<short>(x[i].scales_h)), high_shift),
                                     _mm_set1_epi16(3));
    const __m128i ls = _mm_sub_epi16(_mm_or_si128(_mm_cvtepu8_epi16(lo), _mm_slli_epi16(hi, 4)), _mm_set1_epi16(32));
    const __m512i sc = _mm512_castsi128_si512(ls);
    __m512i mag[4], scale[4];
    __mmask64 neg[4];
    for (int s = 0; s < 4; ++s) {
      const __m512i v = vnni::lookup_16(kIq4nlValues, vnni::nibbles_2x32(x[i].qs + 32 * s, x[i].qs + 32 * s + 16));
      mag[s] = _mm512_abs_epi8(v);
      neg[s] = _mm512_movepi8_mask(v);
      scale[s] = _mm512_permutexvar_epi16(idx[s], sc);
    }
    const float dx = f16(x[i].d);
    for (int t = 0; t < NT; ++t) {
      const BlockQ8_K& y = act_block(act, stride, t, i);
      __m512i acc = _mm512_setzero_si512();
      for (int s = 0; s < 4; ++s) {
        const __m512i q8 = load_64(y.qs + 64 * s);
        const __m512i signed_q8 = _mm512_mask_sub_epi8(q8, neg[s], _mm512_setzero_si512(), q8);
        acc = _mm512_dpwssd_epi32(acc, _mm512_maddubs_epi16(mag[s], signed_q8), scale[s]);
      }
      lanes[t] = lanes_fma(fold(acc), y.d * dx, lanes[t]);
    }
  }
  for (int t = 0; t < NT; ++t) out[t * out_stride] = lanes_sum(lanes[t]);
}

}  // namespace

// The single dot is the one-token instance; vec_dot_tokens dispatches n_act;
// vec_dot_rows goes one row after another (as Q4_K's kernel: the integer work
// per super-block hides each row's fma chain, and one stream per row keeps
// the prefetchers on).
#define CAIRN_VNNI_K(prefix, impl, Block)                                                                          \
  CAIRN_VNNI float prefix##_dot_q8_k(int64_t n, const void* w, const void* act) {                                  \
    float out;                                                                                                     \
    impl<1>(n, static_cast<const Block*>(w), static_cast<const uint8_t*>(act), 0, &out, 1);                        \
    return out;                                                                                                    \
  }                                                                                                                \
  CAIRN_VNNI void prefix##_dot_rows(int64_t n, const void* w, size_t w_stride, int64_t n_rows, const void* act,   \
                                    float* out) {                                                                  \
    const auto* base = static_cast<const uint8_t*>(w);                                                             \
    for (int64_t r = 0; r < n_rows; ++r)                                                                           \
      impl<1>(n, reinterpret_cast<const Block*>(base + static_cast<size_t>(r) * w_stride),                         \
              static_cast<const uint8_t*>(act), 0, out + r, 1);                                                    \
  }                                                                                                                \
  CAIRN_VNNI void prefix##_dot_tokens(int64_t n, const void* w, const void* act, size_t act_stride, int64_t n_act, \
                                      float* out, size_t out_stride) {                                             \
    const auto* x = static_cast<const Block*>(w);                                                                  \
    const auto* a = static_cast<const uint8_t*>(act);                                                              \
    switch (n_act) {                                                                                               \
      case 1: return impl<1>(n, x, a, act_stride, out, out_stride);                                                \
      case 2: return impl<2>(n, x, a, act_stride, out, out_stride);                                                \
      case 3: return impl<3>(n, x, a, act_stride, out, out_stride);                                                \
      default: return impl<4>(n, x, a, act_stride, out, out_stride);                                               \
    }                                                                                                              \
  }

CAIRN_VNNI_K(q2_k, q2_k_tokens, BlockQ2_K)
CAIRN_VNNI_K(q3_k, q3_k_tokens, BlockQ3_K)
CAIRN_VNNI_K(q5_k, q5_k_tokens, BlockQ5_K)
CAIRN_VNNI_K(iq4_xs, iq4_xs_tokens, BlockIQ4_XS)
#undef CAIRN_VNNI_K

}  // namespace cairn::quant::avx512vnni
