// core/quant.cpp — the scalar per-type table, and the plain float types (F32, F16, BF16).
// The quantized types' row functions: quant_legacy.cpp (32-element blocks),
// quant_k.cpp (K-quants), quant_nonlinear.cpp (table-valued IQ4_NL, IQ4_XS, MXFP4).
#include "core/quant.h"

#include <array>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "core/half.h"
#include "core/quant_blocks.h"

namespace cairn {
namespace quant {
namespace {

// Built once at load time so the hot loops never branch on subnormals.
struct F16Table {
  std::unique_ptr<float[]> v{new float[65536]};
  F16Table() {
    for (uint32_t i = 0; i < 65536; ++i) v[i] = f16_to_f32(static_cast<uint16_t>(i));
  }
};
const F16Table kF16Table;

void f32_to_float(const void* src, float* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}
void f32_from_float(const float* src, void* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}
// Products summed in double, as ggml's scalar vec_dot_f32 does.
float f32_dot(int64_t n, const void* w, const void* act) {
  const float* a = static_cast<const float*>(w);
  const float* b = static_cast<const float*>(act);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(a[i] * b[i]);
  return static_cast<float>(sum);
}

void f16_to_float(const void* src, float* dst, int64_t n) {
  const uint16_t* s = static_cast<const uint16_t*>(src);
  const float* t = kF16Table.v.get();
  for (int64_t i = 0; i < n; ++i) dst[i] = t[s[i]];
}
void f16_from_float(const float* src, void* dst, int64_t n) {
  uint16_t* d = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) d[i] = f32_to_f16(src[i]);
}
// F16 weights meet float activations unrounded: the golden log-probabilities of
// llama.cpp for F16 models agree with this to ~1e-5 and miss by ~1e-2 when the
// activations are first rounded to F16.
float f16_dot(int64_t n, const void* w, const void* act) {
  const uint16_t* a = static_cast<const uint16_t*>(w);
  const float* b = static_cast<const float*>(act);
  const float* t = kF16Table.v.get();
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(t[a[i]] * b[i]);
  return static_cast<float>(sum);
}

void bf16_to_float(const void* src, float* dst, int64_t n) {
  const uint16_t* s = static_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
}
void bf16_from_float(const float* src, void* dst, int64_t n) {
  uint16_t* d = static_cast<uint16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) d[i] = f32_to_bf16(src[i]);
}
float bf16_dot(int64_t n, const void* w, const void* act) {
  const uint16_t* a = static_cast<const uint16_t*>(w);
  const uint16_t* b = static_cast<const uint16_t*>(act);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(bf16_to_f32(a[i]) * bf16_to_f32(b[i]));
  return static_cast<float>(sum);
}

constexpr std::array<TypeOps, 18> kScalarOps = {{
    {TensorType::F32, f32_to_float, f32_from_float, TensorType::F32, f32_dot},
    {TensorType::F16, f16_to_float, f16_from_float, TensorType::F32, f16_dot},
    {TensorType::BF16, bf16_to_float, bf16_from_float, TensorType::BF16, bf16_dot},
    {TensorType::Q8_0, q8_0_to_float, q8_0_from_float, TensorType::Q8_0, q8_0_dot_q8_0,
     q8_0_from_float_act},
    {TensorType::Q4_0, q4_0_to_float, q4_0_from_float, TensorType::Q8_0, q4_0_dot_q8_0},
    {TensorType::Q4_K, q4_k_to_float, q4_k_from_float, TensorType::Q8_K, q4_k_dot_q8_k},
    {TensorType::Q6_K, q6_k_to_float, q6_k_from_float, TensorType::Q8_K, q6_k_dot_q8_k},
    {TensorType::Q4_1, q4_1_to_float, q4_1_from_float, TensorType::Q8_1, q4_1_dot_q8_1},
    {TensorType::Q5_0, q5_0_to_float, q5_0_from_float, TensorType::Q8_0, q5_0_dot_q8_0},
    {TensorType::Q5_1, q5_1_to_float, q5_1_from_float, TensorType::Q8_1, q5_1_dot_q8_1},
    {TensorType::IQ4_NL, iq4_nl_to_float, iq4_nl_from_float, TensorType::Q8_0, iq4_nl_dot_q8_0},
    {TensorType::MXFP4, mxfp4_to_float, mxfp4_from_float, TensorType::Q8_0, mxfp4_dot_q8_0},
    {TensorType::Q2_K, q2_k_to_float, q2_k_from_float, TensorType::Q8_K, q2_k_dot_q8_k},
    {TensorType::Q3_K, q3_k_to_float, q3_k_from_float, TensorType::Q8_K, q3_k_dot_q8_k},
    {TensorType::Q5_K, q5_k_to_float, q5_k_from_float, TensorType::Q8_K, q5_k_dot_q8_k},
    {TensorType::IQ4_XS, iq4_xs_to_float, iq4_xs_from_float, TensorType::Q8_K, iq4_xs_dot_q8_k},
    // Activation-only types: cairn never multiplies weights stored as Q8_K or Q8_1.
    {TensorType::Q8_K, q8_k_to_float, q8_k_from_float, TensorType::Q8_K, nullptr},
    {TensorType::Q8_1, q8_1_to_float, q8_1_from_float, TensorType::Q8_1, nullptr},
}};

const TypeOps* find(const std::array<TypeOps, 18>& table, TensorType t) {
  for (const TypeOps& ops : table) {
    if (ops.type == t) return &ops;
  }
  return nullptr;
}

}  // namespace

float f16_lut(uint16_t h) { return kF16Table.v[h]; }

}  // namespace quant

const TypeOps* scalar_type_ops(TensorType t) { return quant::find(quant::kScalarOps, t); }

std::span<const TypeOps> scalar_type_table() { return quant::kScalarOps; }

}  // namespace cairn
