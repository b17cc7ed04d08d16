// The float ops around matmul, written to follow ggml's CPU ops closely (the
// golden tests compare log-probabilities with llama.cpp's to 1e-3).
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/float_order.h"
#include "kernels/kernels.h"

namespace cairn::kernels {

void rms_norm(const float* x, const float* weight, int64_t n, float eps, float* out) {
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

void rope(float* x, int64_t n_heads, int64_t head_dim, int64_t n_rot, int32_t pos, float base,
          float freq_scale, RopeStyle style) {
  n_rot = std::min(n_rot, head_dim);
  if (n_rot < 2) return;
  // ggml steps theta by repeated multiplication (not pow per pair); do the same
  // so angles at long positions agree to the last bit or so.
  const float theta_scale = std::pow(base, -2.0f / static_cast<float>(n_rot));
  float theta = static_cast<float>(pos);
  for (int64_t i = 0; i < n_rot / 2; ++i, theta *= theta_scale) {
    const float c = std::cos(freq_scale * theta), s = std::sin(freq_scale * theta);
    const int64_t a = style == RopeStyle::Norm ? 2 * i : i;
    const int64_t b = style == RopeStyle::Norm ? 2 * i + 1 : i + n_rot / 2;
    for (int64_t h = 0; h < n_heads; ++h) {
      float* v = x + h * head_dim;
      const float x0 = v[a], x1 = v[b];
      // The reference's C is built with FMA and GCC's default fp contraction,
      // which fuses the first product of each line (measured: the quantized
      // golden runs stay bit-exact for more steps this way than unfused).
      v[a] = std::fma(x0, c, -(x1 * s));
      v[b] = std::fma(x0, s, x1 * c);
    }
  }
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
void softmax(float* x, int64_t n) {
  if (n <= 0) return;
  float max = -INFINITY;
  for (int64_t i = 0; i < n; ++i) max = std::max(max, x[i]);
  double sum = 0.0;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int64_t l = 0; l < 16; ++l) x[i + l] = exp_ggml(x[i + l] - max);
    sum += static_cast<double>(order::reduce16(x + i));
  }
  for (; i < n; ++i) {
    x[i] = std::exp(x[i] - max);
    sum += x[i];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t k = 0; k < n; ++k) x[k] *= inv;
}

// silu as ggml_vec_silu_f32 with AVX-512, x / (1 + exp(-x)) with the
// vectorised exp, then the product with `up` as a separate rounding
// (ggml_mul). Measured: the vectorised exp on every element, the row's tail
// included, matches best (stories260K, n_ff = 172: 94.7% -> 98.3% of top-5
// log-probs within 1e-3 over expf for the last n % 16).
void silu_mul(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + exp_ggml(0.0f - gate[i])) * up[i];
}

void add(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

}  // namespace cairn::kernels
