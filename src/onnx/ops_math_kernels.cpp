// onnx/ops_math_kernels.cpp — the Scalar and Avx2 forms of the float32 loops
// declared in onnx/ops_math_kernels.h.
#include "onnx/ops_math_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/cpu_features.h"
#include "core/simd.h"

namespace cairn::onnx::mathk {

namespace {

constexpr float kSqrt1_2 = 0.70710678118654752f;
constexpr float kSqrt2OverPi = 0.79788456080286536f;

// ---- Scalar forms: the std:: functions, the reference the tests hold to -----

float scalar_unary(UnOp op, float x) {
  switch (op) {
    case UnOp::Neg:
      return -x;
    case UnOp::Abs:
      return std::fabs(x);
    case UnOp::Sqrt:
      return std::sqrt(x);
    case UnOp::Exp:
      return std::exp(x);
    case UnOp::Log:
      return std::log(x);
    case UnOp::Erf:
      return std::erf(x);
    case UnOp::Relu:
      return x < 0.0f ? 0.0f : x;  // NaN passes through
    case UnOp::Sigmoid:
      return 1.0f / (1.0f + std::exp(-x));
    case UnOp::Tanh:
      return std::tanh(x);
    // 1 + erf(u) as erfc(-u): no cancellation in the negative tail.
    // (in double: the float product x / sqrt(2) would cost 2 u^2 ulps there).
    case UnOp::GeluErf:
      return float(0.5 * double(x) * std::erfc(-double(x) * 0.70710678118654752));
    // 0.5 (1 + tanh(v)) = 1 / (1 + exp(-2v)): the same, without the
    // cancellation; in double, as exp(-2v) of a rounded v loses |2v| ulps.
    case UnOp::GeluTanh: {
      const double d = x;
      const double v = 0.79788456080286536 * (d + 0.044715 * d * d * d);
      return float(d / (1.0 + std::exp(-2.0 * v)));
    }
  }
  return x;
}

[[maybe_unused]] float scalar_binary(BinOp op, float a, float b) {
  switch (op) {
    case BinOp::Add:
      return a + b;
    case BinOp::Sub:
      return a - b;
    case BinOp::Mul:
      return a * b;
    case BinOp::Div:
      return a / b;
    case BinOp::Pow:
      return std::pow(a, b);
  }
  return a;
}

void binary_scalar(BinOp op, const float* a, int64_t sa, const float* b, int64_t sb, float* out,
                   int64_t n) {
  // Pow by a broadcast 2 (x^2 in exported variance and GELU graphs) is one
  // multiply: exact, as pow's correctly rounded square is.
  if (op == BinOp::Pow && sb == 0 && b[0] == 2.0f) {
    for (int64_t i = 0; i < n; ++i) out[i] = a[i * sa] * a[i * sa];
    return;
  }
  switch (op) {
    case BinOp::Add:
      for (int64_t i = 0; i < n; ++i) out[i] = a[i * sa] + b[i * sb];
      return;
    case BinOp::Sub:
      for (int64_t i = 0; i < n; ++i) out[i] = a[i * sa] - b[i * sb];
      return;
    case BinOp::Mul:
      for (int64_t i = 0; i < n; ++i) out[i] = a[i * sa] * b[i * sb];
      return;
    case BinOp::Div:
      for (int64_t i = 0; i < n; ++i) out[i] = a[i * sa] / b[i * sb];
      return;
    case BinOp::Pow:
      for (int64_t i = 0; i < n; ++i) out[i] = std::pow(a[i * sa], b[i * sb]);
      return;
  }
}

float row_max_scalar(const float* x, int64_t n) {
  float m = x[0];
  for (int64_t i = 1; i < n; ++i) m = std::max(m, x[i]);
  return m;
}

float exp_sub_sum_scalar(const float* x, float m, float* out, int64_t n) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    out[i] = std::exp(x[i] - m);
    sum += out[i];
  }
  return float(sum);
}

void affine_scalar(const float* x, float s, float t, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * s + t;
}

void layer_norm_scalar(const float* x, const float* scale, const float* bias, float eps, float* out,
                       int64_t n, float* mean_out, float* inv_out) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += x[i];
  const float mean = float(sum / double(n));
  double sq = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double d = double(x[i]) - mean;
    sq += d * d;
  }
  const float inv = float(1.0 / std::sqrt(sq / double(n) + double(eps)));
  for (int64_t i = 0; i < n; ++i) {
    const float y = (x[i] - mean) * inv * scale[i];
    out[i] = bias ? y + bias[i] : y;
  }
  *mean_out = mean;
  *inv_out = inv;
}

// ---- Avx2 forms ----------------------------------------------------------------

#if defined(__x86_64__)
#define CAIRN_AVX2 CAIRN_SIMD_FN("avx2,fma")

CAIRN_AVX2 inline __m256 abs8(__m256 x) {
  return _mm256_and_ps(x, _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)));
}

CAIRN_AVX2 inline __m256 copysign8(__m256 mag, __m256 sign_of) {
  const __m256 sign =
      _mm256_and_ps(sign_of, _mm256_castsi256_ps(_mm256_set1_epi32(int(0x80000000u))));
  return _mm256_or_ps(abs8(mag), sign);
}

// NaN lanes of x are returned as x (the approximations below clamp their
// arguments, which would turn a NaN into a number).
CAIRN_AVX2 inline __m256 keep_nan8(__m256 x, __m256 y) {
  return _mm256_blendv_ps(y, x, _mm256_cmp_ps(x, x, _CMP_UNORD_Q));
}

// exp(x): Cody-Waite reduction x = n ln2 + r (|r| <= ln2/2), Cephes' degree-6
// polynomial for exp(r), and 2^n applied as two halves so that n = 128 (x near
// ln(FLT_MAX)) and subnormal results both come out right. Below ln(2^-150)
// the result is 0 (as std::exp's rounds to); above ln(FLT_MAX) it is +inf.
// NaN lanes are not kept here (callers do).
constexpr float kExpUnder = -103.972077f;  // ln(2^-150)
CAIRN_AVX2 inline __m256 exp8(__m256 x) {
  const __m256 over = _mm256_cmp_ps(x, _mm256_set1_ps(88.72283935546875f), _CMP_GT_OQ);
  const __m256 under = _mm256_cmp_ps(x, _mm256_set1_ps(kExpUnder), _CMP_LT_OQ);
  x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(88.72283935546875f)),
                    _mm256_set1_ps(kExpUnder));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  const __m256 r2 = _mm256_mul_ps(r, r);
  const __m256 y = _mm256_add_ps(_mm256_fmadd_ps(p, r2, r), _mm256_set1_ps(1.0f));
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i n1 = _mm256_srai_epi32(ni, 1);
  const __m256i n2 = _mm256_sub_epi32(ni, n1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 s1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
  const __m256 s2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
  const __m256 res = _mm256_andnot_ps(under, _mm256_mul_ps(_mm256_mul_ps(y, s1), s2));
  return _mm256_blendv_ps(res, _mm256_set1_ps(std::numeric_limits<float>::infinity()), over);
}

// erfc(z) for z >= 0: Numerical Recipes' erfcc, a Chebyshev fit with relative
// error under 1.2e-7 in exact arithmetic.
// z2_hi + z2_lo is z^2 (the caller splits it exactly: a rounded z^2 would
// cost 2 z^2 ulps of relative error in the tail).
CAIRN_AVX2 inline __m256 erfc_pos8(__m256 z, __m256 z2_hi, __m256 z2_lo) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 t = _mm256_div_ps(one, _mm256_fmadd_ps(_mm256_set1_ps(0.5f), z, one));
  __m256 p = _mm256_set1_ps(0.17087277f);
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-0.82215223f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(1.48851587f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-1.13520398f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.27886807f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-0.18628806f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.09678418f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(0.37409196f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(1.00002368f));
  p = _mm256_fmadd_ps(p, t, _mm256_set1_ps(-1.26551223f));
  // exp(p - z^2): s = p - hi rounded loses up to ulp(80)/2 = 4e-6 of the
  // result in the tail, so the rounding error is kept (TwoSum) and applied
  // with lo to first order: exp(s + err - lo) = exp(s) (1 + err - lo).
  const __m256 a = _mm256_sub_ps(_mm256_setzero_ps(), z2_hi);
  const __m256 s = _mm256_add_ps(a, p);
  const __m256 bb = _mm256_sub_ps(s, a);
  const __m256 err = _mm256_add_ps(_mm256_sub_ps(a, _mm256_sub_ps(s, bb)), _mm256_sub_ps(p, bb));
  const __m256 e = exp8(s);
  const __m256 r =
      _mm256_mul_ps(_mm256_mul_ps(t, e), _mm256_add_ps(one, _mm256_sub_ps(err, z2_lo)));
  // erfc(10.5) is 1e-49, 0 in float; z = inf would make z2_lo a NaN.
  return _mm256_andnot_ps(_mm256_cmp_ps(z, _mm256_set1_ps(10.5f), _CMP_GT_OQ), r);
}

// erf(x) for |x| < 0.5: its Taylor series to x^15 (the next term is under
// 1e-9 of the value there).
CAIRN_AVX2 inline __m256 erf_small8(__m256 x) {
  const __m256 z = _mm256_mul_ps(x, x);
  __m256 p = _mm256_set1_ps(-1.492565036e-05f);
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(1.205533298e-04f));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-8.548327023e-04f));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(5.223977625e-03f));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-2.686617065e-02f));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(1.128379167e-01f));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-3.761263890e-01f));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(1.128379167e+00f));
  return _mm256_mul_ps(x, p);
}

CAIRN_AVX2 inline __m256 erf8(__m256 x) {
  const __m256 ax = abs8(x);
  const __m256 x2 = _mm256_mul_ps(x, x);
  const __m256 ec = erfc_pos8(ax, x2, _mm256_fmsub_ps(x, x, x2));
  const __m256 big = copysign8(_mm256_sub_ps(_mm256_set1_ps(1.0f), ec), x);
  const __m256 small = _mm256_cmp_ps(ax, _mm256_set1_ps(0.5f), _CMP_LT_OQ);
  return keep_nan8(x, _mm256_blendv_ps(big, erf_small8(x), small));
}

// tanh(x): its Taylor series to x^15 below |x| = 0.4 (next term under 3e-10
// relative), (1 - e) / (1 + e) with e = exp(-2|x|) above.
CAIRN_AVX2 inline __m256 tanh8(__m256 x) {
  const __m256 ax = abs8(x);
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 e = exp8(_mm256_mul_ps(ax, _mm256_set1_ps(-2.0f)));
  const __m256 big = copysign8(_mm256_div_ps(_mm256_sub_ps(one, e), _mm256_add_ps(one, e)), x);
  const __m256 z = _mm256_mul_ps(x, x);
  __m256 p = _mm256_set1_ps(-1.455834387e-03f);
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(3.592128037e-03f));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-8.863235530e-03f));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(2.186948854e-02f));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-5.396825397e-02f));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(1.333333333e-01f));
  p = _mm256_fmadd_ps(p, z, _mm256_set1_ps(-3.333333333e-01f));
  const __m256 small_v = _mm256_fmadd_ps(_mm256_mul_ps(p, z), x, x);
  const __m256 small = _mm256_cmp_ps(ax, _mm256_set1_ps(0.4f), _CMP_LT_OQ);
  return keep_nan8(x, _mm256_blendv_ps(big, small_v, small));
}

CAIRN_AVX2 inline __m256 sigmoid8(__m256 x) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), x));
  return keep_nan8(x, _mm256_div_ps(one, _mm256_add_ps(one, e)));
}

// 0.5 x (1 + erf(u)), u = x / sqrt(2), with 1 + erf(u) taken as 2 - erfc(u)
// for u >= 0.5, erfc(-u) for u <= -0.5 (no cancellation in the negative
// tail) and 1 + the series in between.
CAIRN_AVX2 inline __m256 gelu_erf8(__m256 x) {
  const __m256 u = _mm256_mul_ps(x, _mm256_set1_ps(kSqrt1_2));
  const __m256 au = abs8(u);
  // u^2 = x^2 / 2 from x, exactly split, not from the rounded u.
  const __m256 half = _mm256_set1_ps(0.5f);
  const __m256 x2 = _mm256_mul_ps(x, x);
  const __m256 ec =
      erfc_pos8(au, _mm256_mul_ps(x2, half), _mm256_mul_ps(_mm256_fmsub_ps(x, x, x2), half));
  const __m256 pos = _mm256_cmp_ps(u, _mm256_setzero_ps(), _CMP_GT_OQ);
  const __m256 big = _mm256_blendv_ps(ec, _mm256_sub_ps(_mm256_set1_ps(2.0f), ec), pos);
  const __m256 mid = _mm256_add_ps(_mm256_set1_ps(1.0f), erf_small8(u));
  const __m256 small = _mm256_cmp_ps(au, _mm256_set1_ps(0.5f), _CMP_LT_OQ);
  const __m256 g = _mm256_blendv_ps(big, mid, small);
  return keep_nan8(x, _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.5f), x), g));
}

// x / (1 + exp(-2v)), v = sqrt(2/pi) (x + 0.044715 x^3): 0.5 x (1 + tanh(v)).
CAIRN_AVX2 inline __m256 gelu_tanh8(__m256 x) {
  const __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
  const __m256 v = _mm256_mul_ps(_mm256_set1_ps(kSqrt2OverPi),
                                 _mm256_add_ps(x, _mm256_mul_ps(_mm256_set1_ps(0.044715f), x3)));
  const __m256 e = exp8(_mm256_mul_ps(v, _mm256_set1_ps(-2.0f)));
  return keep_nan8(x, _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e)));
}

// One instantiation per op, so the loop carries no switch.
template <UnOp Op>
CAIRN_AVX2 inline __m256 unary8(__m256 x) {
  switch (Op) {
    case UnOp::Neg:
      return _mm256_xor_ps(x, _mm256_set1_ps(-0.0f));
    case UnOp::Abs:
      return abs8(x);
    case UnOp::Sqrt:
      return _mm256_sqrt_ps(x);
    case UnOp::Exp:
      return keep_nan8(x, exp8(x));
    case UnOp::Relu:
      return _mm256_max_ps(_mm256_setzero_ps(), x);  // NaN (second operand) passes
    case UnOp::Erf:
      return erf8(x);
    case UnOp::Sigmoid:
      return sigmoid8(x);
    case UnOp::Tanh:
      return tanh8(x);
    case UnOp::GeluErf:
      return gelu_erf8(x);
    case UnOp::GeluTanh:
      return gelu_tanh8(x);
    case UnOp::Log:
      break;  // not vectorised: unary() runs it as Scalar
  }
  return x;
}

template <UnOp Op>
CAIRN_AVX2 void unary_loop(const float* x, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, unary8<Op>(_mm256_loadu_ps(x + i)));
  if (i < n) {  // the tail through a padded block: every element gets the same approximation
    alignas(32) float buf[8] = {};
    std::memcpy(buf, x + i, size_t(n - i) * sizeof(float));
    _mm256_store_ps(buf, unary8<Op>(_mm256_load_ps(buf)));
    std::memcpy(out + i, buf, size_t(n - i) * sizeof(float));
  }
}

void unary_avx2(UnOp op, const float* x, float* out, int64_t n) {
  switch (op) {
    case UnOp::Neg:
      return unary_loop<UnOp::Neg>(x, out, n);
    case UnOp::Abs:
      return unary_loop<UnOp::Abs>(x, out, n);
    case UnOp::Sqrt:
      return unary_loop<UnOp::Sqrt>(x, out, n);
    case UnOp::Exp:
      return unary_loop<UnOp::Exp>(x, out, n);
    case UnOp::Relu:
      return unary_loop<UnOp::Relu>(x, out, n);
    case UnOp::Erf:
      return unary_loop<UnOp::Erf>(x, out, n);
    case UnOp::Sigmoid:
      return unary_loop<UnOp::Sigmoid>(x, out, n);
    case UnOp::Tanh:
      return unary_loop<UnOp::Tanh>(x, out, n);
    case UnOp::GeluErf:
      return unary_loop<UnOp::GeluErf>(x, out, n);
    case UnOp::GeluTanh:
      return unary_loop<UnOp::GeluTanh>(x, out, n);
    case UnOp::Log:
      return;  // not vectorised: unary() runs it as Scalar
  }
}

template <BinOp Op>
CAIRN_AVX2 inline __m256 binary8(__m256 a, __m256 b) {
  switch (Op) {
    case BinOp::Add:
      return _mm256_add_ps(a, b);
    case BinOp::Sub:
      return _mm256_sub_ps(a, b);
    case BinOp::Mul:
      return _mm256_mul_ps(a, b);
    case BinOp::Div:
      return _mm256_div_ps(a, b);
    case BinOp::Pow:
      break;  // not vectorised: binary() runs it as Scalar
  }
  return a;
}

// Add/Sub/Mul/Div are single IEEE roundings, so these match the Scalar form bit
// for bit. One instantiation per op, so the loops carry no switch.
template <BinOp Op>
CAIRN_AVX2 void binary_loop(const float* a, int64_t sa, const float* b, int64_t sb, float* out,
                            int64_t n) {
  int64_t i = 0;
  if (sa && sb) {
    for (; i + 8 <= n; i += 8)
      _mm256_storeu_ps(out + i, binary8<Op>(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
  } else if (sa) {
    const __m256 vb = _mm256_set1_ps(b[0]);
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, binary8<Op>(_mm256_loadu_ps(a + i), vb));
  } else if (sb) {
    const __m256 va = _mm256_set1_ps(a[0]);
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, binary8<Op>(va, _mm256_loadu_ps(b + i)));
  }
  for (; i < n; ++i) out[i] = scalar_binary(Op, a[i * sa], b[i * sb]);
}

void binary_avx2(BinOp op, const float* a, int64_t sa, const float* b, int64_t sb, float* out,
                 int64_t n) {
  switch (op) {
    case BinOp::Add:
      return binary_loop<BinOp::Add>(a, sa, b, sb, out, n);
    case BinOp::Sub:
      return binary_loop<BinOp::Sub>(a, sa, b, sb, out, n);
    case BinOp::Mul:
      return binary_loop<BinOp::Mul>(a, sa, b, sb, out, n);
    case BinOp::Div:
      return binary_loop<BinOp::Div>(a, sa, b, sb, out, n);
    case BinOp::Pow:
      return;  // not vectorised: binary() runs it as Scalar
  }
}

CAIRN_AVX2 inline float hsum8(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

CAIRN_AVX2 float row_max_avx2(const float* x, int64_t n) {
  int64_t i = 0;
  float m = x[0];
  if (n >= 8) {
    __m256 vm = _mm256_loadu_ps(x);
    for (i = 8; i + 8 <= n; i += 8) vm = _mm256_max_ps(vm, _mm256_loadu_ps(x + i));
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, vm);
    for (float l : lanes) m = std::max(m, l);
  }
  for (; i < n; ++i) m = std::max(m, x[i]);
  return m;
}

// Sums go through float lanes in blocks of 512 elements and then into a
// double, so a long row keeps its precision.
constexpr int64_t kSumBlock = 512;

CAIRN_AVX2 float exp_sub_sum_avx2(const float* x, float m, float* out, int64_t n) {
  const __m256 vm = _mm256_set1_ps(m);
  double sum = 0.0;
  int64_t i = 0;
  while (i + 8 <= n) {
    const int64_t end = std::min(n, i + kSumBlock);
    __m256 acc = _mm256_setzero_ps();
    for (; i + 8 <= end; i += 8) {
      const __m256 e =
          keep_nan8(_mm256_loadu_ps(x + i), exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), vm)));
      _mm256_storeu_ps(out + i, e);
      acc = _mm256_add_ps(acc, e);
    }
    sum += hsum8(acc);
  }
  if (i < n) {
    alignas(32) float buf[8];
    for (int k = 0; k < 8; ++k) buf[k] = i + k < n ? x[i + k] - m : -200.0f;  // pad: exp is 0
    _mm256_store_ps(buf, exp8(_mm256_load_ps(buf)));
    for (int64_t k = 0; i + k < n; ++k) {
      out[i + k] = std::isnan(x[i + k]) ? x[i + k] : buf[k];
      sum += out[i + k];
    }
  }
  return float(sum);
}

CAIRN_AVX2 void affine_avx2(const float* x, float s, float t, float* out, int64_t n) {
  const __m256 vs = _mm256_set1_ps(s), vt = _mm256_set1_ps(t);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_add_ps(_mm256_mul_ps(_mm256_loadu_ps(x + i), vs), vt));
  for (; i < n; ++i) out[i] = x[i] * s + t;
}

CAIRN_AVX2 void layer_norm_avx2(const float* x, const float* scale, const float* bias, float eps,
                                float* out, int64_t n, float* mean_out, float* inv_out) {
  double sum = 0.0;
  int64_t i = 0;
  while (i + 8 <= n) {
    const int64_t end = std::min(n, i + kSumBlock);
    __m256 acc = _mm256_setzero_ps();
    for (; i + 8 <= end; i += 8) acc = _mm256_add_ps(acc, _mm256_loadu_ps(x + i));
    sum += hsum8(acc);
  }
  for (; i < n; ++i) sum += x[i];
  const float mean = float(sum / double(n));
  const __m256 vmean = _mm256_set1_ps(mean);
  double sq = 0.0;
  i = 0;
  while (i + 8 <= n) {
    const int64_t end = std::min(n, i + kSumBlock);
    __m256 acc = _mm256_setzero_ps();
    for (; i + 8 <= end; i += 8) {
      const __m256 d = _mm256_sub_ps(_mm256_loadu_ps(x + i), vmean);
      acc = _mm256_fmadd_ps(d, d, acc);
    }
    sq += hsum8(acc);
  }
  for (; i < n; ++i) {
    const double d = double(x[i]) - mean;
    sq += d * d;
  }
  const float inv = float(1.0 / std::sqrt(sq / double(n) + double(eps)));
  const __m256 vinv = _mm256_set1_ps(inv);
  i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 y =
        _mm256_mul_ps(_mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), vmean), vinv),
                      _mm256_loadu_ps(scale + i));
    _mm256_storeu_ps(out + i, bias ? _mm256_add_ps(y, _mm256_loadu_ps(bias + i)) : y);
  }
  for (; i < n; ++i) {
    const float y = (x[i] - mean) * inv * scale[i];
    out[i] = bias ? y + bias[i] : y;
  }
  *mean_out = mean;
  *inv_out = inv;
}
#endif  // __x86_64__

[[maybe_unused]] bool use_avx2(Path p) { return p == Path::Avx2 && supported(Path::Avx2); }

}  // namespace

Path best_path() { return supported(Path::Avx2) ? Path::Avx2 : Path::Scalar; }

bool supported(Path p) {
#if defined(__x86_64__)
  if (p == Path::Avx2) return isa_enabled(Isa::Avx2);
#endif
  return p == Path::Scalar;
}

void binary(Path p, BinOp op, const float* a, int64_t sa, const float* b, int64_t sb, float* out,
            int64_t n) {
#if defined(__x86_64__)
  if (use_avx2(p) && op != BinOp::Pow) return binary_avx2(op, a, sa, b, sb, out, n);
#endif
  (void)p;
  binary_scalar(op, a, sa, b, sb, out, n);
}

void unary(Path p, UnOp op, const float* x, float* out, int64_t n) {
#if defined(__x86_64__)
  if (use_avx2(p) && op != UnOp::Log) return unary_avx2(op, x, out, n);
#endif
  (void)p;
  for (int64_t i = 0; i < n; ++i) out[i] = scalar_unary(op, x[i]);
}

float row_max(Path p, const float* x, int64_t n) {
#if defined(__x86_64__)
  if (use_avx2(p)) return row_max_avx2(x, n);
#endif
  (void)p;
  return row_max_scalar(x, n);
}

float exp_sub_sum(Path p, const float* x, float m, float* out, int64_t n) {
#if defined(__x86_64__)
  if (use_avx2(p)) return exp_sub_sum_avx2(x, m, out, n);
#endif
  (void)p;
  return exp_sub_sum_scalar(x, m, out, n);
}

void affine(Path p, const float* x, float s, float t, float* out, int64_t n) {
#if defined(__x86_64__)
  if (use_avx2(p)) return affine_avx2(x, s, t, out, n);
#endif
  (void)p;
  affine_scalar(x, s, t, out, n);
}

void layer_norm_row(Path p, const float* x, const float* scale, const float* bias, float eps,
                    float* out, int64_t n, float* mean, float* inv_std) {
#if defined(__x86_64__)
  if (use_avx2(p)) return layer_norm_avx2(x, scale, bias, eps, out, n, mean, inv_std);
#endif
  (void)p;
  layer_norm_scalar(x, scale, bias, eps, out, n, mean, inv_std);
}

}  // namespace cairn::onnx::mathk
