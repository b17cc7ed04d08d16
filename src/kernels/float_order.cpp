// Scalar and AVX2 forms of the reference's float dot-product orders. The AVX2
// form keeps 16 lanes as two 8-wide registers: fma is per lane, so the bits are
// the scalar form's; only the final reduction runs in scalar code in both.
#include "kernels/float_order.h"

#include <cmath>
#include <cstdlib>

#include "core/cpu_features.h"
#include "core/half.h"
#include "core/simd.h"

#define CAIRN_FMA_TARGET CAIRN_SIMD_FN("avx2,fma,f16c")

namespace cairn::kernels::order {
namespace {

const float* h2f_table() {
  static const float* t = [] {
    static float v[65536];
    for (uint32_t i = 0; i < 65536; ++i) v[i] = f16_to_f32((uint16_t)i);
    return v;
  }();
  return t;
}

// The four 16-lane accumulators of ggml_vec_dot: (a0 + a2) + (a1 + a3).
float reduce_arr(const float (*acc)[16]) {
  float l[16];
  for (int i = 0; i < 16; ++i) l[i] = (acc[0][i] + acc[2][i]) + (acc[1][i] + acc[3][i]);
  return reduce16(l);
}

float tiny_f32_scalar(const float* w, const float* x, int64_t k) {
  float acc[16] = {};
  for (int64_t i = 0; i < k; i += 16)
    for (int l = 0; l < 16; ++l) acc[l] = std::fma(w[i + l], x[i + l], acc[l]);
  return reduce16(acc);
}

float tiny_f16_scalar(const uint16_t* w, const float* x, int64_t k) {
  const float* h = h2f_table();
  float acc[16] = {};
  for (int64_t i = 0; i < k; i += 16)
    for (int l = 0; l < 16; ++l) acc[l] = std::fma(h[w[i + l]], x[i + l], acc[l]);
  return reduce16(acc);
}

float vec_f32_scalar(const float* w, const float* x, int64_t n) {
  const int64_t np = n & ~int64_t{63};
  float acc[4][16] = {};
  for (int64_t i = 0; i < np; i += 64)
    for (int j = 0; j < 4; ++j)
      for (int l = 0; l < 16; ++l)
        acc[j][l] = std::fma(w[i + 16 * j + l], x[i + 16 * j + l], acc[j][l]);
  return vec_f32_tail(w, x, np, n, reduce_arr(acc));
}

float vec_f16_scalar(const uint16_t* w, const uint16_t* x, int64_t n) {
  const float* h = h2f_table();
  const int64_t np = n & ~int64_t{63};
  float acc[4][16] = {};
  for (int64_t i = 0; i < np; i += 64)
    for (int j = 0; j < 4; ++j)
      for (int l = 0; l < 16; ++l)
        acc[j][l] = std::fma(h[w[i + 16 * j + l]], h[x[i + 16 * j + l]], acc[j][l]);
  double sum = reduce_arr(acc);
  for (int64_t i = np; i < n; ++i) sum += (double)(h[w[i]] * h[x[i]]);
  return (float)sum;
}

CAIRN_FMA_TARGET inline __m256 ld_h(const uint16_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i*)p));
}

CAIRN_FMA_TARGET float tiny_f32_avx2(const float* w, const float* x, int64_t k) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  for (int64_t i = 0; i < k; i += 16) {
    a0 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i), _mm256_loadu_ps(x + i), a0);
    a1 = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 8), _mm256_loadu_ps(x + i + 8), a1);
  }
  float l[16];
  _mm256_storeu_ps(l, a0);
  _mm256_storeu_ps(l + 8, a1);
  return reduce16(l);
}

CAIRN_FMA_TARGET float tiny_f16_avx2(const uint16_t* w, const float* x, int64_t k) {
  __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
  for (int64_t i = 0; i < k; i += 16) {
    a0 = _mm256_fmadd_ps(ld_h(w + i), _mm256_loadu_ps(x + i), a0);
    a1 = _mm256_fmadd_ps(ld_h(w + i + 8), _mm256_loadu_ps(x + i + 8), a1);
  }
  float l[16];
  _mm256_storeu_ps(l, a0);
  _mm256_storeu_ps(l + 8, a1);
  return reduce16(l);
}

CAIRN_FMA_TARGET void tiny_f16_x4_avx2(const uint16_t* w, int64_t stride, const float* x, int64_t k,
                                       float* out) {
  __m256 a[4][2];
#pragma GCC unroll 4
  for (auto& r : a) r[0] = r[1] = _mm256_setzero_ps();
  for (int64_t i = 0; i < k; i += 16) {
    const __m256 x0 = _mm256_loadu_ps(x + i), x1 = _mm256_loadu_ps(x + i + 8);
#pragma GCC unroll 4  // the accumulators stay in registers only unrolled (-O2)
    for (int r = 0; r < 4; ++r) {
      a[r][0] = _mm256_fmadd_ps(ld_h(w + r * stride + i), x0, a[r][0]);
      a[r][1] = _mm256_fmadd_ps(ld_h(w + r * stride + i + 8), x1, a[r][1]);
    }
  }
  for (int r = 0; r < 4; ++r) {
    float l[16];
    _mm256_storeu_ps(l, a[r][0]);
    _mm256_storeu_ps(l + 8, a[r][1]);
    out[r] = reduce16(l);
  }
}

CAIRN_FMA_TARGET float vec_f32_avx2(const float* w, const float* x, int64_t n) {
  const int64_t np = n & ~int64_t{63};
  __m256 a[8];
  for (__m256& r : a) r = _mm256_setzero_ps();
  for (int64_t i = 0; i < np; i += 64)
    for (int j = 0; j < 8; ++j)
      a[j] = _mm256_fmadd_ps(_mm256_loadu_ps(w + i + 8 * j), _mm256_loadu_ps(x + i + 8 * j), a[j]);
  float acc[4][16];
  for (int j = 0; j < 8; ++j) _mm256_storeu_ps(&acc[j / 2][(j % 2) * 8], a[j]);
  return vec_f32_tail(w, x, np, n, reduce_arr(acc));
}

CAIRN_FMA_TARGET float vec_f16_avx2(const uint16_t* w, const uint16_t* x, int64_t n) {
  const int64_t np = n & ~int64_t{63};
  __m256 a[8];
  for (__m256& r : a) r = _mm256_setzero_ps();
  for (int64_t i = 0; i < np; i += 64)
    for (int j = 0; j < 8; ++j)
      a[j] = _mm256_fmadd_ps(ld_h(w + i + 8 * j), ld_h(x + i + 8 * j), a[j]);
  float acc[4][16];
  for (int j = 0; j < 8; ++j) _mm256_storeu_ps(&acc[j / 2][(j % 2) * 8], a[j]);
  double sum = reduce_arr(acc);
  const float* h = h2f_table();
  for (int64_t i = np; i < n; ++i) sum += (double)(h[w[i]] * h[x[i]]);
  return (float)sum;
}

bool detect() { return isa_enabled(Isa::Avx2); }

const bool kSimd = detect();

}  // namespace

// The n % 64 leftovers of ggml_vec_dot_f32, `sumf += x[i]*y[i]`, in the code
// the golden files' reference build made of that loop: GCC with
// -march=native on a Sapphire Rapids host, whose tuning prefers 256-bit
// vectors. While at least 8 remain, a block of 8; then one block of 4 if at
// least 4 remain: each a vector multiply whose products are added to the sum
// one by one, in order; the last < 4 stay scalar, the multiply-add contracted
// to an fma. This order gives that build's intermediate tensors bit for bit
// (other orders differ by an ulp; docs/performance.md).
float vec_f32_tail(const float* w, const float* x, int64_t i, int64_t n, float sum) {
  const auto add_block = [&](int64_t width) {
    for (int64_t l = 0; l < width; ++l) {
      const float p = w[i + l] * x[i + l];
      sum += p;
    }
    i += width;
  };
  while (n - i >= 8) add_block(8);
  if (n - i >= 4) add_block(4);
  for (; i < n; ++i) sum = std::fma(w[i], x[i], sum);
  return sum;
}

bool simd_enabled() { return kSimd; }

float reduce16(const float* v) {
  float t[8], u[4];
  for (int i = 0; i < 8; ++i) t[i] = v[i + 8] + v[i];
  for (int i = 0; i < 4; ++i) u[i] = t[i + 4] + t[i];
  return (u[0] + u[2]) + (u[1] + u[3]);
}

namespace scalar {
float tiny_f32(const float* w, const float* x, int64_t k) { return tiny_f32_scalar(w, x, k); }
float tiny_f16(const uint16_t* w, const float* x, int64_t k) { return tiny_f16_scalar(w, x, k); }
float vec_f32(const float* w, const float* x, int64_t n) { return vec_f32_scalar(w, x, n); }
float vec_f16(const uint16_t* w, const uint16_t* x, int64_t n) { return vec_f16_scalar(w, x, n); }
}  // namespace scalar

float tiny_f32(const float* w, const float* x, int64_t k) {
  return kSimd ? tiny_f32_avx2(w, x, k) : tiny_f32_scalar(w, x, k);
}
float tiny_f16(const uint16_t* w, const float* x, int64_t k) {
  return kSimd ? tiny_f16_avx2(w, x, k) : tiny_f16_scalar(w, x, k);
}
void tiny_f16_x4(const uint16_t* w, int64_t stride, const float* x, int64_t k, float* out) {
  if (kSimd) return tiny_f16_x4_avx2(w, stride, x, k, out);
  for (int r = 0; r < 4; ++r) out[r] = tiny_f16_scalar(w + r * stride, x, k);
}
float vec_f32(const float* w, const float* x, int64_t n) {
  return kSimd ? vec_f32_avx2(w, x, n) : vec_f32_scalar(w, x, n);
}
float vec_f16(const uint16_t* w, const uint16_t* x, int64_t n) {
  return kSimd ? vec_f16_avx2(w, x, n) : vec_f16_scalar(w, x, n);
}

namespace {
thread_local bool g_one_token_order = false;
}  // namespace

bool OneTokenOrder::active() { return g_one_token_order; }
OneTokenOrder::Scope::Scope(bool on) : before_(g_one_token_order) { g_one_token_order = on; }
OneTokenOrder::Scope::~Scope() { g_one_token_order = before_; }

}  // namespace cairn::kernels::order
