// The float ops around matmul, written to follow ggml's CPU ops closely (the
// golden tests compare log-probabilities with llama.cpp's to 1e-3).

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "core/cpu_features.h"
#include "core/simd.h"
#include "kernels/float_order.h"
#include "kernels/kernels.h"
#include "kernels/ops_paths.h"

namespace cairn::kernels {
namespace {

void rms_norm_scalar(const float* x, const float* weight, int64_t n, float eps, float* out) {
  // Squares rounded to float, summed in double, in order: ggml's exact arithmetic.
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i] * x[i]);
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  const float scale = 1.0f / std::sqrt(mean + eps);
  // ggml normalises, then multiplies by the weight as a separate op: two roundings.
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale;
  if (weight) {
    for (int64_t i = 0; i < n; ++i) out[i] *= weight[i];
  }
}

}  // namespace

namespace {

// Rotates pair i >= from of every head by (c[i], s[i]).
inline void rotate_pairs(float* x, int64_t n_heads, int64_t head_dim, int64_t n_rot, const float* c,
                         const float* s, RopeStyle style, int64_t from = 0) {
  for (int64_t i = from; i < n_rot / 2; ++i) {
    const int64_t a = style == RopeStyle::Norm ? 2 * i : i;
    const int64_t b = style == RopeStyle::Norm ? 2 * i + 1 : i + n_rot / 2;
    for (int64_t h = 0; h < n_heads; ++h) {
      float* v = x + h * head_dim;
      const float x0 = v[a], x1 = v[b];
      // The reference's C is built with FMA and GCC's default fp contraction,
      // which fuses the first product of each line.
      v[a] = std::fma(x0, c[i], -(x1 * s[i]));
      v[b] = std::fma(x0, s[i], x1 * c[i]);
    }
  }
}

// Angles for up to this many rotated dimensions live on the stack.
constexpr int64_t kMaxStackRot = 512;

}  // namespace

int64_t rope_pairs(int64_t head_dim, int64_t n_rot) {
  const int64_t r = std::min(n_rot, head_dim);
  return r < 2 ? 0 : r / 2;
}

void rope_angles(int64_t head_dim, int64_t n_rot, int32_t pos, float base, float freq_scale,
                 float* c, float* s, const float* freq_factors) {
  const int64_t pairs = rope_pairs(head_dim, n_rot);
  if (pairs == 0) return;
  // ggml steps theta by repeated multiplication (not pow per pair); do the same
  // so angles at long positions agree to the last bit or so.
  const float theta_scale = std::pow(base, -2.0f / static_cast<float>(2 * pairs));
  float theta = static_cast<float>(pos);
  for (int64_t i = 0; i < pairs; ++i, theta *= theta_scale) {
    // The factor divides the unscaled angle, then the scale applies (ggml's
    // order; a factor of 1 gives the same bits as none).
    const float t = freq_factors ? theta / freq_factors[i] : theta;
    c[i] = std::cos(freq_scale * t);
    s[i] = std::sin(freq_scale * t);
  }
}

void rope_yarn_corr_dims(int64_t n_dims, int64_t n_ctx_orig, float base, float beta_fast,
                         float beta_slow, float& low, float& high) {
  // The pair whose wavelength fits n_ctx_orig / beta times; float as ggml.
  const auto dim = [&](float beta) {
    return (float)n_dims * std::log((float)n_ctx_orig / (beta * 2.0f * (float)M_PI)) /
           (2.0f * std::log(base));
  };
  low = std::max(0.0f, std::floor(dim(beta_fast)));
  high = std::min((float)(n_dims - 1), std::ceil(dim(beta_slow)));
}

void rope_angles_yarn(int64_t head_dim, int64_t n_rot, int32_t pos, float base, float freq_scale,
                      const RopeYarn& y, float* c, float* s, const float* freq_factors) {
  const int64_t pairs = rope_pairs(head_dim, n_rot);
  if (pairs == 0) return;
  float mscale = y.attn_factor;
  // The reference's C fuses a * b + c into one FMA (see rotate_pairs above).
  if (y.ext_factor != 0.0f) mscale *= std::fma(0.1f, std::log(1.0f / freq_scale), 1.0f);
  const float theta_scale = std::pow(base, -2.0f / static_cast<float>(2 * pairs));
  float theta = static_cast<float>(pos);
  for (int64_t i = 0; i < pairs; ++i, theta *= theta_scale) {
    const float extrap = freq_factors ? theta / freq_factors[i] : theta;
    const float interp = freq_scale * extrap;
    float t = interp;
    if (y.ext_factor != 0.0f) {
      const float r = ((float)i - y.corr_low) / std::max(0.001f, y.corr_high - y.corr_low);
      const float mix = (1.0f - std::min(1.0f, std::max(0.0f, r))) * y.ext_factor;
      t = std::fma(interp, 1.0f - mix, extrap * mix);
    }
    c[i] = std::cos(t) * mscale;
    s[i] = std::sin(t) * mscale;
  }
}

void rope(float* x, int64_t n_heads, int64_t head_dim, int64_t n_rot, int32_t pos, float base,
          float freq_scale, RopeStyle style, const float* freq_factors) {
  rope_qk(x, n_heads, nullptr, 0, head_dim, n_rot, pos, base, freq_scale, style, freq_factors);
}

void rope_qk(float* q, int64_t n_head_q, float* k, int64_t n_head_k, int64_t head_dim,
             int64_t n_rot, int32_t pos, float base, float freq_scale, RopeStyle style,
             const float* freq_factors) {
  const int64_t pairs = rope_pairs(head_dim, n_rot);
  if (pairs == 0) return;
  float cs_stack[kMaxStackRot];
  std::vector<float> cs_heap;
  float* cs = cs_stack;
  if (2 * pairs > kMaxStackRot) {
    cs_heap.resize((size_t)(2 * pairs));
    cs = cs_heap.data();
  }
  rope_angles(head_dim, n_rot, pos, base, freq_scale, cs, cs + pairs, freq_factors);
  rope_qk_angles(q, n_head_q, k, n_head_k, head_dim, n_rot, cs, cs + pairs, style);
}

float exp_ggml(float x) {
  // ggml_v_expf for AVX-512 (the polynomial of ARM's optimized routines),
  // lane by lane: fma as the FMA instructions, 2^n applied by scalef (exact
  // here, so ldexp), and |n| > 192 sent to 0 or inf as its blend does.
  const float r = 0x1.8p23f;
  const float z = std::fma(x, 0x1.715476p+0f, r);
  const float n = z - r;
  if (!(std::fabs(n) <= 192.0f)) return n <= 0.0f ? 0.0f : INFINITY;
  const float b = std::fma(-n, 0x1.7f7d1cp-20f, std::fma(-n, 0x1.62e4p-1f, x));
  const float u = b * b;
  const float j = std::fma(std::fma(std::fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u,
                                    std::fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                           u, std::fma(0x1.ffffecp-1f, b, 1.0f));
  return std::ldexp(j, static_cast<int>(n));
}

// ggml_vec_soft_max_f32 with AVX-512: exps in groups of 16 from the row start,
// each group's _mm512_reduce_add_ps added in double; a tail shorter than 16
// with expf (attention pads its rows to 32, so it has none).
namespace {

float max_scalar(const float* x, int64_t n) {
  float max = -INFINITY;
  for (int64_t i = 0; i < n; ++i) max = std::max(max, x[i]);
  return max;
}

// out[i] = exp(x[i] - max) (out may be x); returns their sum, grouped as above.
double exps_scalar(const float* x, int64_t n, float max, float* out) {
  double sum = 0.0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int64_t l = 0; l < 16; ++l) out[i + l] = exp_ggml(x[i + l] - max);
    sum += static_cast<double>(order::reduce16(out + i));
  }
  for (; i < n; ++i) {
    out[i] = std::exp(x[i] - max);
    sum += out[i];
  }
  return sum;
}

void softmax_scalar(float* x, int64_t n) {
  if (n <= 0) return;
  const double sum = exps_scalar(x, n, max_scalar(x, n), x);
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t k = 0; k < n; ++k) x[k] *= inv;
}

// silu as ggml_vec_silu_f32 with AVX-512: x / (1 + exp(-x)) with the
// vectorised exp in blocks of 16 from the row start, and with libm's expf
// (ggml_silu_f32) on the last n % 16; then the product with `up` as a separate
// rounding (ggml_mul). Checked against the reference's own build
// (scripts/reference-oracle, intermediate tensors dumped): bit-identical rows,
// where the vectorised exp on the tail differed by an ulp in 15 of 860 values
// of stories260K's first FFN.
void silu_mul_tail(const float* gate, const float* up, int64_t from, int64_t n, float* out) {
  for (int64_t i = from; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void silu_mul_scalar(const float* gate, const float* up, int64_t n, float* out) {
  const int64_t n16 = n & ~int64_t{15};
  for (int64_t i = 0; i < n16; ++i) out[i] = gate[i] / (1.0f + exp_ggml(0.0f - gate[i])) * up[i];
  silu_mul_tail(gate, up, n16, n, out);
}

// ---- SIMD forms: the scalar forms' lanes, same bits ---------------------------
// Only lane-wise operations (no reassociation) and reduce16's fixed tree; no
// contraction, so a product feeding a sum stays two roundings as above.

#define CAIRN_AVX512 CAIRN_SIMD_FN("avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")
#define CAIRN_AVX2 CAIRN_SIMD_FN("avx2,fma,f16c")

// exp_ggml on 16 lanes: scalef is the ldexp of the scalar form.
CAIRN_AVX512 inline __m512 exp16(__m512 x) {
  const __m512 r = _mm512_set1_ps(0x1.8p23f);
  const __m512 z = _mm512_fmadd_ps(x, _mm512_set1_ps(0x1.715476p+0f), r);
  const __m512 n = _mm512_sub_ps(z, r);
  const __m512 b = _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.7f7d1cp-20f),
                                    _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.62e4p-1f), x));
  const __m512 u = _mm512_mul_ps(b, b);
  const __m512 j = _mm512_fmadd_ps(
      _mm512_fmadd_ps(
          _mm512_fmadd_ps(_mm512_set1_ps(0x1.0e4020p-7f), b, _mm512_set1_ps(0x1.573e2ep-5f)), u,
          _mm512_fmadd_ps(_mm512_set1_ps(0x1.555e66p-3f), b, _mm512_set1_ps(0x1.fffdb6p-2f))),
      u, _mm512_fmadd_ps(_mm512_set1_ps(0x1.ffffecp-1f), b, _mm512_set1_ps(1.0f)));
  const __m512 res = _mm512_scalef_ps(j, n);
  const __mmask16 ok = _mm512_cmp_ps_mask(
      _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(n), _mm512_set1_epi32(0x7fffffff))),
      _mm512_set1_ps(192.0f), _CMP_LE_OQ);
  if (ok == 0xffff) return res;
  const __mmask16 low = _mm512_cmp_ps_mask(n, _mm512_setzero_ps(), _CMP_LE_OQ);
  const __m512 special = _mm512_mask_blend_ps(low, _mm512_set1_ps(INFINITY), _mm512_setzero_ps());
  return _mm512_mask_blend_ps(ok, special, res);
}

CAIRN_AVX512 inline float hsum16(__m512 v) {  // order::reduce16's tree
  const __m256 t = _mm256_add_ps(_mm512_extractf32x8_ps(v, 1), _mm512_castps512_ps256(v));
  const __m128 u = _mm_add_ps(_mm256_extractf128_ps(t, 1), _mm256_castps256_ps128(t));
  const __m128 s = _mm_add_ps(u, _mm_movehl_ps(u, u));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

// std::max's rule per lane (keep the running max unless it is < x), so NaNs
// are skipped as the scalar loop skips them.
CAIRN_AVX512 float max_avx512(const float* x, int64_t n) {
  __m512 m = _mm512_set1_ps(-INFINITY);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    m = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(m, v, _CMP_LT_OQ), m, v);
  }
  float lanes[16];
  _mm512_storeu_ps(lanes, m);
  float max = -INFINITY;
  for (float l : lanes) max = std::max(max, l);
  for (; i < n; ++i) max = std::max(max, x[i]);
  return max;
}

CAIRN_AVX512 double exps_avx512(const float* x, int64_t n, float max, float* out) {
  const __m512 vmax = _mm512_set1_ps(max);
  double sum = 0.0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), vmax));
    _mm512_storeu_ps(out + i, e);
    sum += static_cast<double>(hsum16(e));
  }
  for (; i < n; ++i) {
    out[i] = std::exp(x[i] - max);
    sum += out[i];
  }
  return sum;
}

CAIRN_AVX512 void softmax_avx512(float* x, int64_t n) {
  if (n <= 0) return;
  const double sum = exps_avx512(x, n, max_avx512(x, n), x);
  const __m512 inv = _mm512_set1_ps(static_cast<float>(1.0 / sum));
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) _mm512_storeu_ps(x + k, _mm512_mul_ps(_mm512_loadu_ps(x + k), inv));
  if (k < n) {
    const __mmask16 m = (__mmask16)((1u << (n - k)) - 1);
    _mm512_mask_storeu_ps(x + k, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + k), inv));
  }
}

CAIRN_AVX512 inline __m512 silu_mul16(__m512 g, __m512 u) {
  const __m512 e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), g));
  return _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), e)), u);
}

CAIRN_AVX512 void silu_mul_avx512(const float* gate, const float* up, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(out + i, silu_mul16(_mm512_loadu_ps(gate + i), _mm512_loadu_ps(up + i)));
  silu_mul_tail(gate, up, i, n, out);
}

// The sum of squares is one chain of double adds in order (that order is the
// reference's); only the two scaling passes are vectorized, fused into one.
CAIRN_AVX512 void rms_norm_avx512(const float* x, const float* weight, int64_t n, float eps,
                                  float* out) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i] * x[i]);
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  const float scale = 1.0f / std::sqrt(mean + eps);
  const __m512 vs = _mm512_set1_ps(scale);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m512 y = _mm512_mul_ps(_mm512_loadu_ps(x + i), vs);
    if (weight) y = _mm512_mul_ps(y, _mm512_loadu_ps(weight + i));
    _mm512_storeu_ps(out + i, y);
  }
  for (; i < n; ++i) out[i] = weight ? (x[i] * scale) * weight[i] : x[i] * scale;
}

// exp_ggml on 8 lanes without scalef: 2^n as two exact powers of two (each
// |half| <= 96, so both are normal floats); the second product is the only
// rounding, as in ldexp.
CAIRN_AVX2 inline __m256 exp8(__m256 x) {
  const __m256 r = _mm256_set1_ps(0x1.8p23f);
  const __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), r);
  const __m256 n = _mm256_sub_ps(z, r);
  const __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f),
                                    _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x));
  const __m256 u = _mm256_mul_ps(b, b);
  const __m256 j = _mm256_fmadd_ps(
      _mm256_fmadd_ps(
          _mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b, _mm256_set1_ps(0x1.573e2ep-5f)), u,
          _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b, _mm256_set1_ps(0x1.fffdb6p-2f))),
      u, _mm256_fmadd_ps(_mm256_set1_ps(0x1.ffffecp-1f), b, _mm256_set1_ps(1.0f)));
  const __m256 abs_n = _mm256_and_ps(n, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)));
  const __m256 ok = _mm256_cmp_ps(abs_n, _mm256_set1_ps(192.0f), _CMP_LE_OQ);
  const __m256i ni = _mm256_cvtps_epi32(_mm256_and_ps(n, ok));  // 0 where not ok
  const __m256i n1 = _mm256_srai_epi32(ni, 1);
  const __m256i n2 = _mm256_sub_epi32(ni, n1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 p1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
  const __m256 p2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
  const __m256 res = _mm256_mul_ps(_mm256_mul_ps(j, p1), p2);
  if (_mm256_movemask_ps(ok) == 0xff) return res;
  const __m256 low = _mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_LE_OQ);
  const __m256 special = _mm256_blendv_ps(_mm256_set1_ps(INFINITY), _mm256_setzero_ps(), low);
  return _mm256_blendv_ps(special, res, ok);
}

CAIRN_AVX2 inline float hsum16(__m256 lo, __m256 hi) {
  const __m256 t = _mm256_add_ps(hi, lo);
  const __m128 u = _mm_add_ps(_mm256_extractf128_ps(t, 1), _mm256_castps256_ps128(t));
  const __m128 s = _mm_add_ps(u, _mm_movehl_ps(u, u));
  return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
}

CAIRN_AVX2 float max_avx2(const float* x, int64_t n) {
  __m256 m = _mm256_set1_ps(-INFINITY);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    m = _mm256_blendv_ps(m, v, _mm256_cmp_ps(m, v, _CMP_LT_OQ));
  }
  float lanes[8];
  _mm256_storeu_ps(lanes, m);
  float max = -INFINITY;
  for (float l : lanes) max = std::max(max, l);
  for (; i < n; ++i) max = std::max(max, x[i]);
  return max;
}

CAIRN_AVX2 double exps_avx2(const float* x, int64_t n, float max, float* out) {
  const __m256 vmax = _mm256_set1_ps(max);
  double sum = 0.0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m256 lo = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vmax));
    const __m256 hi = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i + 8), vmax));
    _mm256_storeu_ps(out + i, lo);
    _mm256_storeu_ps(out + i + 8, hi);
    sum += static_cast<double>(hsum16(lo, hi));
  }
  for (; i < n; ++i) {
    out[i] = std::exp(x[i] - max);
    sum += out[i];
  }
  return sum;
}

CAIRN_AVX2 void softmax_avx2(float* x, int64_t n) {
  if (n <= 0) return;
  const double sum = exps_avx2(x, n, max_avx2(x, n), x);
  const float inv = static_cast<float>(1.0 / sum);
  const __m256 vinv = _mm256_set1_ps(inv);
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) _mm256_storeu_ps(x + k, _mm256_mul_ps(_mm256_loadu_ps(x + k), vinv));
  for (; k < n; ++k) x[k] *= inv;
}

CAIRN_AVX2 void silu_mul_avx2(const float* gate, const float* up, int64_t n, float* out) {
  const int64_t n16 = n & ~int64_t{15};
  int64_t i = 0;
  for (; i < n16; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), g));
    _mm256_storeu_ps(out + i,
                     _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)),
                                   _mm256_loadu_ps(up + i)));
  }
  silu_mul_tail(gate, up, n16, n, out);
}

CAIRN_AVX2 void rms_norm_avx2(const float* x, const float* weight, int64_t n, float eps,
                              float* out) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i] * x[i]);
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  const float scale = 1.0f / std::sqrt(mean + eps);
  const __m256 vs = _mm256_set1_ps(scale);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 y = _mm256_mul_ps(_mm256_loadu_ps(x + i), vs);
    if (weight) y = _mm256_mul_ps(y, _mm256_loadu_ps(weight + i));
    _mm256_storeu_ps(out + i, y);
  }
  for (; i < n; ++i) out[i] = weight ? (x[i] * scale) * weight[i] : x[i] * scale;
}

// rotate_pairs() on 16 lanes, the same two roundings per element: the product
// that is subtracted (added) is rounded, then one fma. Pairs are adjacent
// (Norm: the partner is the neighbouring lane, c/s duplicated per pair) or
// half a rotation apart (Neox: partners in two vectors). Pairs past the last
// whole vector go through the scalar loop.
CAIRN_AVX512 void rotate_avx512(float* x, int64_t n_heads, int64_t head_dim, int64_t n_rot,
                                const float* c, const float* s, RopeStyle style) {
  const int64_t pairs = n_rot / 2;
  if (style == RopeStyle::Norm) {
    const int64_t n16 = (2 * pairs) & ~int64_t{15};
    const __m512i dup = _mm512_set_epi32(7, 7, 6, 6, 5, 5, 4, 4, 3, 3, 2, 2, 1, 1, 0, 0);
    for (int64_t j = 0; j < n16; j += 16) {
      const __m512 cd =
          _mm512_permutexvar_ps(dup, _mm512_castps256_ps512(_mm256_loadu_ps(c + j / 2)));
      const __m512 sd =
          _mm512_permutexvar_ps(dup, _mm512_castps256_ps512(_mm256_loadu_ps(s + j / 2)));
      for (int64_t h = 0; h < n_heads; ++h) {
        float* v = x + h * head_dim + j;
        const __m512 a = _mm512_loadu_ps(v);
        const __m512 b = _mm512_permute_ps(a, 0xB1);  // each lane's partner
        const __m512 first = _mm512_fmsub_ps(a, cd, _mm512_mul_ps(b, sd));
        const __m512 second = _mm512_fmadd_ps(b, sd, _mm512_mul_ps(a, cd));
        _mm512_storeu_ps(v, _mm512_mask_blend_ps(0xAAAA, first, second));
      }
    }
    if (n16 / 2 < pairs) rotate_pairs(x, n_heads, head_dim, n_rot, c, s, style, n16 / 2);
    return;
  }
  const int64_t n16 = pairs & ~int64_t{15};
  for (int64_t i = 0; i < n16; i += 16) {
    const __m512 cv = _mm512_loadu_ps(c + i), sv = _mm512_loadu_ps(s + i);
    for (int64_t h = 0; h < n_heads; ++h) {
      float* v = x + h * head_dim;
      const __m512 a = _mm512_loadu_ps(v + i), b = _mm512_loadu_ps(v + i + pairs);
      _mm512_storeu_ps(v + i, _mm512_fmsub_ps(a, cv, _mm512_mul_ps(b, sv)));
      _mm512_storeu_ps(v + i + pairs, _mm512_fmadd_ps(a, sv, _mm512_mul_ps(b, cv)));
    }
  }
  if (n16 < pairs) rotate_pairs(x, n_heads, head_dim, n_rot, c, s, style, n16);
}

// The scalar loop with FMA enabled, so std::fma is one instruction rather than
// a libm call per element; the pairs stay scalar (a second vector form would
// only repeat the AVX-512 one at half width for hosts that rarely serve).
CAIRN_AVX2 void rotate_avx2(float* x, int64_t n_heads, int64_t head_dim, int64_t n_rot,
                            const float* c, const float* s, RopeStyle style) {
  rotate_pairs(x, n_heads, head_dim, n_rot, c, s, style);
}

ops::Path best_path() {
  static const ops::Path p = isa_enabled(Isa::Avx512) ? ops::Path::Avx512
                             : isa_enabled(Isa::Avx2) ? ops::Path::Avx2
                                                      : ops::Path::Scalar;
  return p;
}

ops::Path usable(ops::Path p) { return ops::supported(p) ? p : ops::Path::Scalar; }

}  // namespace

namespace ops {

bool supported(Path p) {
  switch (p) {
    case Path::Scalar:
      return true;
    case Path::Avx2:
      return isa_enabled(Isa::Avx2);
    case Path::Avx512:
      return isa_enabled(Isa::Avx512);
  }
  return false;
}

void rms_norm(Path p, const float* x, const float* weight, int64_t n, float eps, float* out) {
  switch (usable(p)) {
    case Path::Avx512:
      return rms_norm_avx512(x, weight, n, eps, out);
    case Path::Avx2:
      return rms_norm_avx2(x, weight, n, eps, out);
    case Path::Scalar:
      return rms_norm_scalar(x, weight, n, eps, out);
  }
}

void softmax(Path p, float* x, int64_t n) {
  switch (usable(p)) {
    case Path::Avx512:
      return softmax_avx512(x, n);
    case Path::Avx2:
      return softmax_avx2(x, n);
    case Path::Scalar:
      return softmax_scalar(x, n);
  }
}

double log_sum_exp(Path p, const float* x, int64_t n, float* out) {
  const Path q = usable(p);
  const float max = q == Path::Avx512 ? max_avx512(x, n)
                    : q == Path::Avx2 ? max_avx2(x, n)
                                      : max_scalar(x, n);
  if (n <= 0 || max == -INFINITY) {
    std::fill(out, out + std::max<int64_t>(n, 0), 0.0f);
    return -INFINITY;
  }
  const double sum = q == Path::Avx512 ? exps_avx512(x, n, max, out)
                     : q == Path::Avx2 ? exps_avx2(x, n, max, out)
                                       : exps_scalar(x, n, max, out);
  return static_cast<double>(max) + std::log(sum);
}

void silu_mul(Path p, const float* gate, const float* up, int64_t n, float* out) {
  switch (usable(p)) {
    case Path::Avx512:
      return silu_mul_avx512(gate, up, n, out);
    case Path::Avx2:
      return silu_mul_avx2(gate, up, n, out);
    case Path::Scalar:
      return silu_mul_scalar(gate, up, n, out);
  }
}

void rope_rotate(Path p, float* x, int64_t n_heads, int64_t head_dim, int64_t n_rot, const float* c,
                 const float* s, RopeStyle style) {
  switch (usable(p)) {
    case Path::Avx512:
      return rotate_avx512(x, n_heads, head_dim, n_rot, c, s, style);
    case Path::Avx2:
      return rotate_avx2(x, n_heads, head_dim, n_rot, c, s, style);
    case Path::Scalar:
      return rotate_pairs(x, n_heads, head_dim, n_rot, c, s, style);
  }
}

}  // namespace ops

void rope_qk_angles(float* q, int64_t n_head_q, float* k, int64_t n_head_k, int64_t head_dim,
                    int64_t n_rot, const float* c, const float* s, RopeStyle style) {
  const int64_t pairs = rope_pairs(head_dim, n_rot);
  if (pairs == 0) return;
  if (q) ops::rope_rotate(best_path(), q, n_head_q, head_dim, 2 * pairs, c, s, style);
  if (k) ops::rope_rotate(best_path(), k, n_head_k, head_dim, 2 * pairs, c, s, style);
}

void rms_norm(const float* x, const float* weight, int64_t n, float eps, float* out) {
  ops::rms_norm(best_path(), x, weight, n, eps, out);
}

void softmax(float* x, int64_t n) { ops::softmax(best_path(), x, n); }

void softmax_with_sink(float* x, int64_t n, float sink) {
  const ops::Path q = usable(best_path());
  float max = q == ops::Path::Avx512 ? max_avx512(x, n)
              : q == ops::Path::Avx2 ? max_avx2(x, n)
                                     : max_scalar(x, n);
  max = std::max(max, sink);
  double sum = q == ops::Path::Avx512 ? exps_avx512(x, n, max, x)
               : q == ops::Path::Avx2 ? exps_avx2(x, n, max, x)
                                      : exps_scalar(x, n, max, x);
  sum += (double)std::exp(sink - max);
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t k = 0; k < n; ++k) x[k] *= inv;
}

double log_sum_exp(const float* x, int64_t n, float* out) {
  return ops::log_sum_exp(best_path(), x, n, out);
}

void silu_mul(const float* gate, const float* up, int64_t n, float* out) {
  ops::silu_mul(best_path(), gate, up, n, out);
}

void add(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

void NormedRows::make(int64_t t, float* row) const {
  rms_norm(x_ + t * n_, weight_, n_, eps_, row);
}

void SwigluRows::make(int64_t t, float* row) const {
  silu_mul(gate_ + t * n_, up_ + t * n_, n_, row);
}

}  // namespace cairn::kernels
