// The float ops around matmul, written to follow ggml's CPU ops closely (the
// golden tests compare log-probabilities with llama.cpp's to 1e-3).
#include <algorithm>
#include <cmath>

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
      v[a] = x0 * c - x1 * s;
      v[b] = x0 * s + x1 * c;
    }
  }
}

void softmax(float* x, int64_t n) {
  if (n <= 0) return;
  float max = x[0];
  for (int64_t i = 1; i < n; ++i) max = std::max(max, x[i]);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max);
    sum += x[i];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void silu_mul(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void add(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

}  // namespace cairn::kernels
