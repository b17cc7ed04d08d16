// The float ops around matmul, written to follow ggml's CPU ops closely (the
// golden tests compare log-probabilities with llama.cpp's to 1e-3).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

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
  // The polynomial of ggml's vectorised expf (from ARM's optimized routines),
  // lane by lane; fma as the FMA instructions the reference ran.
  const float r = 0x1.8p23f;
  const float z = std::fma(x, 0x1.715476p+0f, r);
  const float n = z - r;
  const float b = std::fma(-n, 0x1.7f7d1cp-20f, std::fma(-n, 0x1.62e4p-1f, x));
  const uint32_t e = std::bit_cast<uint32_t>(z) << 23;
  const float k = std::bit_cast<float>(e + std::bit_cast<uint32_t>(1.0f));
  const float u = b * b;
  const float j = std::fma(std::fma(std::fma(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u,
                                    std::fma(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)),
                           u, 0x1.ffffecp-1f * b);
  if (!(std::fabs(n) > 126.0f)) return std::fma(j, k, k);
  const uint32_t g = n <= 0.0f ? 0x82000000u : 0u;
  const float s1 = std::bit_cast<float>(g + 0x7f000000u);
  const float s2 = std::bit_cast<float>(e - g);
  if (std::fabs(n) > 192.0f) return s1 * s1;
  return std::fma(s2, j, s2) * s1;
}

// ggml_vec_soft_max_f32 on AVX2: exps in groups of 8 from the row start, each
// group's sum (hsum order) added in double; a tail shorter than 8 with expf.
void softmax(float* x, int64_t n) {
  if (n <= 0) return;
  float max = -INFINITY;
  for (int64_t i = 0; i < n; ++i) max = std::max(max, x[i]);
  double sum = 0.0;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int64_t l = 0; l < 8; ++l) x[i + l] = exp_ggml(x[i + l] - max);
    const float s0 = x[i + 4] + x[i], s1 = x[i + 5] + x[i + 1], s2 = x[i + 6] + x[i + 2],
                s3 = x[i + 7] + x[i + 3];
    sum += static_cast<double>((s0 + s2) + (s1 + s3));
  }
  for (; i < n; ++i) {
    x[i] = std::exp(x[i] - max);
    sum += x[i];
  }
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t k = 0; k < n; ++k) x[k] *= inv;
}

// silu as ggml_vec_silu_f32, then the product with `up` as a separate rounding
// (ggml_mul). The vectorised exp covers groups of 16 of the row and expf the
// tail: the reference's AVX-512 build steps silu by 16 (measured: stories260K
// 97.3% -> 97.6% of top-5 log-probs within 1e-3 over groups of 8), while its
// softmax measures best with the 8-wide grouping above.
void silu_mul(const float* gate, const float* up, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int64_t l = i; l < i + 16; ++l) out[l] = gate[l] / (1.0f + exp_ggml(0.0f - gate[l])) * up[l];
  }
  for (; i < n; ++i) {
    const float g = gate[i];
    out[i] = g / (1.0f + std::exp(-g)) * up[i];
  }
}

void add(float* y, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}

}  // namespace cairn::kernels
