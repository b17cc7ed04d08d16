// kernels/attention_simd.cpp — AVX-512 and AVX2 forms of the attention kernel.
// AVX-512 and AVX2 forms of the attention kernel (attention_simd.inc). Each
// namespace supplies a 16-lane vector: one zmm, or two ymm for AVX2. Only
// per-lane operations and the fixed reduction tree of reduce16 are used, so
// both give the scalar path's bits. Contraction is off: a mul feeding an add
// must stay two roundings, as the scalar code has them.
#include "kernels/attention_simd.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/half.h"
#include "core/simd.h"
#include "kernels/float_order.h"
#include "kernels/kernels.h"

namespace cairn::kernels::attn_simd {

namespace avx512 {

#define CAIRN_SIMD_TARGET CAIRN_SIMD_FN("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")

using V = __m512;
constexpr int kMaxHeads = 8;  // 8 heads x 2 chunks of accumulators: 16 of 32 registers
constexpr bool kWideChunks = true;
constexpr bool kPairBlocks = true;  // scores_kt: two K blocks of head_dim 64, 16 registers

CAIRN_SIMD_TARGET inline V zero() { return _mm512_setzero_ps(); }
CAIRN_SIMD_TARGET inline V ld(const float* p) { return _mm512_loadu_ps(p); }
CAIRN_SIMD_TARGET inline V ldh(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i*)p));
}
CAIRN_SIMD_TARGET inline V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
CAIRN_SIMD_TARGET inline V add(V a, V b) { return _mm512_add_ps(a, b); }
CAIRN_SIMD_TARGET inline V mul(V a, V b) { return _mm512_mul_ps(a, b); }
CAIRN_SIMD_TARGET inline V bcast(float x) { return _mm512_set1_ps(x); }
CAIRN_SIMD_TARGET inline void st(float* p, V v) { _mm512_storeu_ps(p, v); }
CAIRN_SIMD_TARGET inline V round_h(V v) {
  return _mm512_cvtph_ps(_mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}
// out[p] = reduce16(v[p]) for 16 vectors at once: the same pairs are added
// (halves, quarters, then (u0 + u2) + (u1 + u3)), only in a transposed layout,
// which leaves result p at 4 * (p % 4) + p / 4 until the final permute.
CAIRN_SIMD_TARGET inline void hsum16x16(const V* v, float* out) {
  V w[8], x[4], y[2];
#pragma GCC unroll 8
  for (int m = 0; m < 8; ++m)  // t = lo8 + hi8, two vectors per register
    w[m] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * m], v[2 * m + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_f32x4(v[2 * m], v[2 * m + 1], _MM_SHUFFLE(3, 2, 3, 2)));
#pragma GCC unroll 8
  for (int m = 0; m < 4; ++m)  // u = t.lo4 + t.hi4, four vectors per register
    x[m] = _mm512_add_ps(_mm512_shuffle_f32x4(w[2 * m], w[2 * m + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_f32x4(w[2 * m], w[2 * m + 1], _MM_SHUFFLE(3, 1, 3, 1)));
#pragma GCC unroll 8
  for (int m = 0; m < 2; ++m)  // (u0 + u2), (u1 + u3)
    y[m] = _mm512_add_ps(_mm512_shuffle_ps(x[2 * m], x[2 * m + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                         _mm512_shuffle_ps(x[2 * m], x[2 * m + 1], _MM_SHUFFLE(3, 2, 3, 2)));
  const V z = _mm512_add_ps(_mm512_shuffle_ps(y[0], y[1], _MM_SHUFFLE(2, 0, 2, 0)),
                            _mm512_shuffle_ps(y[0], y[1], _MM_SHUFFLE(3, 1, 3, 1)));
  const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
  _mm512_storeu_ps(out, _mm512_permutexvar_ps(order, z));
}
// tail[i] += (double)(v[i] * w[i]): the product rounded to float first.
CAIRN_SIMD_TARGET inline void tail_acc(double* tail, V v, V w) {
  const __m512 p = _mm512_mul_ps(v, w);
  _mm512_storeu_pd(
      tail, _mm512_add_pd(_mm512_loadu_pd(tail), _mm512_cvtps_pd(_mm512_castps512_ps256(p))));
  _mm512_storeu_pd(tail + 8, _mm512_add_pd(_mm512_loadu_pd(tail + 8),
                                           _mm512_cvtps_pd(_mm512_extractf32x8_ps(p, 1))));
}
// out[i] = (float)((double)red[i] + tail[i])
CAIRN_SIMD_TARGET inline void st_finish(float* out, V red, const double* tail) {
  const __m512d lo =
      _mm512_add_pd(_mm512_cvtps_pd(_mm512_castps512_ps256(red)), _mm512_loadu_pd(tail));
  const __m512d hi =
      _mm512_add_pd(_mm512_cvtps_pd(_mm512_extractf32x8_ps(red, 1)), _mm512_loadu_pd(tail + 8));
  _mm256_storeu_ps(out, _mm512_cvtpd_ps(lo));
  _mm256_storeu_ps(out + 8, _mm512_cvtpd_ps(hi));
}

#include "kernels/attention_simd.inc"

#undef CAIRN_SIMD_TARGET
}  // namespace avx512

namespace avx2 {

#define CAIRN_SIMD_TARGET CAIRN_SIMD_FN("avx2,fma,f16c")

struct V {
  __m256 lo, hi;  // lanes 0-7 and 8-15
};
constexpr int kMaxHeads = 4;  // 4 heads x 2 ymm of accumulators: 8 of 16 registers
constexpr bool kWideChunks = false;
constexpr bool kPairBlocks = false;  // two K blocks would take all 16 ymm twice over

CAIRN_SIMD_TARGET inline V zero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
CAIRN_SIMD_TARGET inline V ld(const float* p) {
  return {_mm256_loadu_ps(p), _mm256_loadu_ps(p + 8)};
}
CAIRN_SIMD_TARGET inline __m256 ldh8(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)p));
}
CAIRN_SIMD_TARGET inline V ldh(const uint16_t* p) { return {ldh8(p), ldh8(p + 8)}; }
CAIRN_SIMD_TARGET inline V fma(V a, V b, V c) {
  return {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)};
}
CAIRN_SIMD_TARGET inline V add(V a, V b) {
  return {_mm256_add_ps(a.lo, b.lo), _mm256_add_ps(a.hi, b.hi)};
}
CAIRN_SIMD_TARGET inline V mul(V a, V b) {
  return {_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)};
}
CAIRN_SIMD_TARGET inline V bcast(float x) { return {_mm256_set1_ps(x), _mm256_set1_ps(x)}; }
CAIRN_SIMD_TARGET inline void st(float* p, V v) {
  _mm256_storeu_ps(p, v.lo);
  _mm256_storeu_ps(p + 8, v.hi);
}
CAIRN_SIMD_TARGET inline __m256 round_h8(__m256 v) {
  return _mm256_cvtph_ps(_mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
}
CAIRN_SIMD_TARGET inline V round_h(V v) { return {round_h8(v.lo), round_h8(v.hi)}; }
// reduce16 of each of 16 vectors: halves, quarters, then (u0 + u2) + (u1 + u3).
CAIRN_SIMD_TARGET inline void hsum16x16(const V* v, float* out) {
  for (int p = 0; p < 16; ++p) {
    const __m256 t = _mm256_add_ps(v[p].hi, v[p].lo);
    const __m128 u = _mm_add_ps(_mm256_extractf128_ps(t, 1), _mm256_castps256_ps128(t));
    const __m128 s = _mm_add_ps(u, _mm_movehl_ps(u, u));
    out[p] = _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
  }
}
CAIRN_SIMD_TARGET inline void tail_acc8(double* tail, __m256 p) {
  _mm256_storeu_pd(
      tail, _mm256_add_pd(_mm256_loadu_pd(tail), _mm256_cvtps_pd(_mm256_castps256_ps128(p))));
  _mm256_storeu_pd(tail + 4, _mm256_add_pd(_mm256_loadu_pd(tail + 4),
                                           _mm256_cvtps_pd(_mm256_extractf128_ps(p, 1))));
}
CAIRN_SIMD_TARGET inline void tail_acc(double* tail, V v, V w) {
  tail_acc8(tail, _mm256_mul_ps(v.lo, w.lo));
  tail_acc8(tail + 8, _mm256_mul_ps(v.hi, w.hi));
}
CAIRN_SIMD_TARGET inline void st_finish8(float* out, __m256 red, const double* tail) {
  const __m256d lo =
      _mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(red)), _mm256_loadu_pd(tail));
  const __m256d hi =
      _mm256_add_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(red, 1)), _mm256_loadu_pd(tail + 4));
  _mm_storeu_ps(out, _mm256_cvtpd_ps(lo));
  _mm_storeu_ps(out + 4, _mm256_cvtpd_ps(hi));
}
CAIRN_SIMD_TARGET inline void st_finish(float* out, V red, const double* tail) {
  st_finish8(out, red.lo, tail);
  st_finish8(out + 8, red.hi, tail + 8);
}

#include "kernels/attention_simd.inc"

#undef CAIRN_SIMD_TARGET
}  // namespace avx2

void attend_group_avx512(const GroupJob& job, Scratch& s) { avx512::attend_group(job, s); }
void attend_group_avx2(const GroupJob& job, Scratch& s) { avx2::attend_group(job, s); }
void transpose_rows_avx512(const uint8_t* const* rows, int np, int64_t hd, bool f16, float* dst) {
  avx512::transpose_rows(rows, np, hd, f16, dst);
}
void transpose_rows_avx2(const uint8_t* const* rows, int np, int64_t hd, bool f16, float* dst) {
  avx2::transpose_rows(rows, np, hd, f16, dst);
}

}  // namespace cairn::kernels::attn_simd
