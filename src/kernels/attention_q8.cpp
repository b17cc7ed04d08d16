// kernels/attention_q8.cpp — attention over Q8_0 K/V rows: scalar, AVX2, AVX-512.
// One pass of K.q over the group's positions (a K row dequantized into L1 once
// for all the heads that share it), the softmax of each head's row, then V.w
// a block column at a time with the sums in registers. q is quantized to
// Q8_0 first, as the reference's attention over a Q8_0 cache does, so the
// K.q dots are integer ones; docs/performance.md has the speed and accuracy.
#include "kernels/attention_q8.h"

#include <algorithm>
#include <cmath>

#include "core/half.h"
#include "core/quant_blocks.h"
#include "core/simd.h"
#include "kernels/kernels.h"

namespace cairn::kernels::attn_q8 {
namespace {

using quant::BlockQ8_0;
using quant::kQK8_0;

// Each head's scores from `first` on: soft-cap, scale, softmax (with its sink).
void softmax_heads(const Job& j, Scratch& s) {
  const int64_t n = j.n_pos, m = n - j.first;
  const float cap = j.softcap, inv_cap = cap > 0 ? 1.0f / cap : 0.0f;
  for (int h = 0; h < j.nh; ++h) {
    float* row = s.scores.data() + h * n + j.first;
    for (int64_t p = 0; p < m; ++p) {
      float x = row[p];
      if (cap > 0) x = std::tanh(x * inv_cap) * cap;
      row[p] = x * j.scale;
    }
    if (j.sinks)
      kernels::softmax_with_sink(row, m, j.sinks[h]);
    else
      kernels::softmax(row, m);
  }
}

// q of each head as Q8_0 blocks with the reference's activation rounding; their
// scales (F16-rounded, as the dot reads them) as floats.
void quantize_q(const Job& j, Scratch& s) {
  const int64_t nb = j.head_dim / kQK8_0;
  s.qb.resize((size_t)(j.nh * nb));
  s.qd.resize(s.qb.size());
  for (int h = 0; h < j.nh; ++h) quant::q8_0_from_float_act(j.q + h * j.head_dim, &s.qb[(size_t)(h * nb)], j.head_dim);
  for (size_t i = 0; i < s.qb.size(); ++i) s.qd[i] = f16_to_f32(s.qb[i].d);
}

// Elements [off, off + n) of a row of Q8_0 blocks as floats.
void dequant_slice(const uint8_t* row, int64_t off, int64_t n, float* dst) {
  const BlockQ8_0* b = reinterpret_cast<const BlockQ8_0*>(row);
  for (int64_t d = 0; d < n;) {
    const int64_t e = off + d, blk = e / kQK8_0;
    const float scale = f16_to_f32(b[blk].d);
    for (int64_t i = e % kQK8_0; i < kQK8_0 && d < n; ++i, ++d)
      dst[d] = (float)b[blk].qs[i] * scale;
  }
}

}  // namespace

void attend_scalar(const Job& j, Scratch& s) {
  const int64_t hd = j.head_dim, n = j.n_pos;
  const int nh = j.nh;
  s.scores.resize((size_t)(nh * n));
  s.kf.resize((size_t)hd);
  s.acc.assign((size_t)(nh * hd), 0.0f);
  const bool on_blocks = hd % kQK8_0 == 0 && j.offset % kQK8_0 == 0;
  if (on_blocks) quantize_q(j, s);
  const int64_t nb = hd / kQK8_0;
  for (int64_t p = j.first; p < n; ++p) {
    if (on_blocks) {
      const BlockQ8_0* k = reinterpret_cast<const BlockQ8_0*>(j.krow[p]) + j.offset / kQK8_0;
      for (int h = 0; h < nh; ++h) {
        float dot = 0.0f;
        for (int64_t b = 0; b < nb; ++b) {
          const BlockQ8_0& qb = s.qb[(size_t)(h * nb + b)];
          int32_t sum = 0;
          for (int i = 0; i < kQK8_0; ++i) sum += k[b].qs[i] * qb.qs[i];
          dot = std::fma((float)sum, f16_to_f32(k[b].d) * s.qd[(size_t)(h * nb + b)], dot);
        }
        s.scores[(size_t)(h * n + p)] = dot;
      }
      continue;
    }
    dequant_slice(j.krow[p], j.offset, hd, s.kf.data());
    for (int h = 0; h < nh; ++h) {
      const float* q = j.q + h * hd;
      float dot = 0.0f;
      for (int64_t d = 0; d < hd; ++d) dot += s.kf[(size_t)d] * q[d];
      s.scores[(size_t)(h * n + p)] = dot;
    }
  }
  softmax_heads(j, s);
  for (int64_t p = j.first; p < n; ++p) {
    dequant_slice(j.vrow[p], j.offset, hd, s.kf.data());
    for (int h = 0; h < nh; ++h) {
      const float w = s.scores[(size_t)(h * n + p)];
      float* a = s.acc.data() + h * hd;
      for (int64_t d = 0; d < hd; ++d) a[d] += w * s.kf[(size_t)d];
    }
  }
  std::copy(s.acc.begin(), s.acc.end(), j.out);
}

namespace avx512 {
namespace {

#define CAIRN_SIMD_TARGET CAIRN_SIMD_FN("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")

using V = __m512;
constexpr int kMaxHeads = 8;  // 8 heads x 2 zmm of V.w sums: 16 of 32 registers
CAIRN_SIMD_TARGET inline V zero() { return _mm512_setzero_ps(); }
CAIRN_SIMD_TARGET inline void st(float* p, V v) { _mm512_storeu_ps(p, v); }
CAIRN_SIMD_TARGET inline V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
CAIRN_SIMD_TARGET inline V mul(V a, V b) { return _mm512_mul_ps(a, b); }
CAIRN_SIMD_TARGET inline V bcast(float x) { return _mm512_set1_ps(x); }
CAIRN_SIMD_TARGET inline V ldq(const int8_t* p) {
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i*)p)));
}

#include "kernels/attention_q8.inc"

#undef CAIRN_SIMD_TARGET
}  // namespace
}  // namespace avx512

namespace avx2 {
namespace {

#define CAIRN_SIMD_TARGET CAIRN_SIMD_FN("avx2,fma,f16c")

struct V {
  __m256 lo, hi;
};
constexpr int kMaxHeads = 2;  // 2 heads x 4 ymm of V.w sums: 8 of 16 registers
CAIRN_SIMD_TARGET inline V zero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
CAIRN_SIMD_TARGET inline void st(float* p, V v) {
  _mm256_storeu_ps(p, v.lo);
  _mm256_storeu_ps(p + 8, v.hi);
}
CAIRN_SIMD_TARGET inline V fma(V a, V b, V c) {
  return {_mm256_fmadd_ps(a.lo, b.lo, c.lo), _mm256_fmadd_ps(a.hi, b.hi, c.hi)};
}
CAIRN_SIMD_TARGET inline V mul(V a, V b) {
  return {_mm256_mul_ps(a.lo, b.lo), _mm256_mul_ps(a.hi, b.hi)};
}
CAIRN_SIMD_TARGET inline V bcast(float x) { return {_mm256_set1_ps(x), _mm256_set1_ps(x)}; }
CAIRN_SIMD_TARGET inline V ldq(const int8_t* p) {
  const __m128i x = _mm_loadu_si128((const __m128i*)p);
  return {_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(x)),
          _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(x, 8)))};
}

#include "kernels/attention_q8.inc"

#undef CAIRN_SIMD_TARGET
}  // namespace
}  // namespace avx2

void attend_avx512(const Job& j, Scratch& s) { avx512::attend(j, s); }
void attend_avx2(const Job& j, Scratch& s) { avx2::attend(j, s); }

}  // namespace cairn::kernels::attn_q8
