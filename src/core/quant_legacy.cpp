// The 32-element block types Q4_0 and Q8_0 (Q8_0 is also the activation type
// both are multiplied with).
#include <algorithm>
#include <cmath>

#include "core/half.h"
#include "core/quant_blocks.h"

namespace cairn::quant {

void q4_0_to_float(const void* src, float* dst, int64_t n) {
  const BlockQ4_0* b = static_cast<const BlockQ4_0*>(src);
  for (int64_t i = 0; i < n / kQK4_0; ++i, dst += kQK4_0) {
    const float d = f16_lut(b[i].d);
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      dst[j] = static_cast<float>((b[i].qs[j] & 0xF) - 8) * d;
      dst[j + kQK4_0 / 2] = static_cast<float>((b[i].qs[j] >> 4) - 8) * d;
    }
  }
}

// The value of largest magnitude maps to -8 (the one code with no positive twin),
// which keeps one more level for it than a symmetric amax/7 scale would.
void q4_0_from_float(const float* src, void* dst, int64_t n) {
  BlockQ4_0* b = static_cast<BlockQ4_0*>(dst);
  for (int64_t i = 0; i < n / kQK4_0; ++i, src += kQK4_0) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < kQK4_0; ++j) {
      if (std::fabs(src[j]) > amax) {
        amax = std::fabs(src[j]);
        max = src[j];
      }
    }
    const float d = max / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = f32_to_f16(d);
    // floor(v + 8.5): ties round up, exactly as llama.cpp's reference quantizer.
    auto code = [id](float v) { return std::clamp(static_cast<int>(v * id + 8.5f), 0, 15); };
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      b[i].qs[j] = static_cast<uint8_t>(code(src[j]) | (code(src[j + kQK4_0 / 2]) << 4));
    }
  }
}

// Not the 8-lane order of Q8_0: the reference repacks Q4_0 weights at load
// (8 rows interleaved) and its AVX2 gemv/gemm for them takes each block's full
// integer sum, fma'd with the scale product into one float per row: this
// order keeps the golden Q4_0 run bit-exact longest (docs/performance.md).
float q4_0_dot_q8_0(int64_t n, const void* w, const void* act) {
  const BlockQ4_0* x = static_cast<const BlockQ4_0*>(w);
  const BlockQ8_0* y = static_cast<const BlockQ8_0*>(act);
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK4_0; ++i) {
    int sumi = 0;
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      sumi += ((x[i].qs[j] & 0xF) - 8) * y[i].qs[j];
      sumi += ((x[i].qs[j] >> 4) - 8) * y[i].qs[j + kQK4_0 / 2];
    }
    sum = fma_lane(static_cast<float>(sumi), f16_lut(x[i].d) * f16_lut(y[i].d), sum);
  }
  return sum;
}

void q8_0_to_float(const void* src, float* dst, int64_t n) {
  const BlockQ8_0* b = static_cast<const BlockQ8_0*>(src);
  for (int64_t i = 0; i < n / kQK8_0; ++i, dst += kQK8_0) {
    const float d = f16_lut(b[i].d);
    for (int j = 0; j < kQK8_0; ++j) dst[j] = static_cast<float>(b[i].qs[j]) * d;
  }
}

// As ggml's reference: d = amax/127 kept in float for the division, stored as f16;
// ties round away from zero (roundf).
void q8_0_from_float(const float* src, void* dst, int64_t n) {
  BlockQ8_0* b = static_cast<BlockQ8_0*>(dst);
  for (int64_t i = 0; i < n / kQK8_0; ++i, src += kQK8_0) {
    float amax = 0.0f;
    for (int j = 0; j < kQK8_0; ++j) amax = std::max(amax, std::fabs(src[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    b[i].d = f32_to_f16(d);
    for (int j = 0; j < kQK8_0; ++j) b[i].qs[j] = static_cast<int8_t>(std::roundf(src[j] * id));
  }
}

// The SIMD quantizer of the reference: ties to even, and the scale inverted
// as 127/amax rather than 1/d (they differ in the last bit for some amax).
void q8_0_from_float_act(const float* src, void* dst, int64_t n) {
  BlockQ8_0* b = static_cast<BlockQ8_0*>(dst);
  for (int64_t i = 0; i < n / kQK8_0; ++i, src += kQK8_0) {
    float amax = 0.0f;
    for (int j = 0; j < kQK8_0; ++j) amax = std::max(amax, std::fabs(src[j]));
    b[i].d = f32_to_f16(amax / 127.0f);
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    for (int j = 0; j < kQK8_0; ++j) b[i].qs[j] = static_cast<int8_t>(std::nearbyint(src[j] * id));
  }
}

// Each block's exact integer sum, fma'd with the scale product into one float
// per row — the order the reference's int8 kernels on its AVX-512 VNNI / AMX
// host take, as for Q4_0 and the K-quants; it gives the golden files' bits,
// ggml's AVX2 order does not (docs/performance.md).
float q8_0_dot_q8_0(int64_t n, const void* w, const void* act) {
  const BlockQ8_0* x = static_cast<const BlockQ8_0*>(w);
  const BlockQ8_0* y = static_cast<const BlockQ8_0*>(act);
  float sum = 0.0f;
  for (int64_t i = 0; i < n / kQK8_0; ++i) {
    int sumi = 0;
    for (int j = 0; j < kQK8_0; ++j) sumi += x[i].qs[j] * y[i].qs[j];
    sum = fma_lane(static_cast<float>(sumi), f16_lut(x[i].d) * f16_lut(y[i].d), sum);
  }
  return sum;
}

}  // namespace cairn::quant
