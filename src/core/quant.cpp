// core/quant.cpp — the scalar per-type table, and the plain float types (F32, F16, BF16).
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

constexpr std::array<TypeOps, 8> kScalarOps = {{
    {TensorType::F32, f32_to_float, f32_from_float, TensorType::F32, f32_dot},
    {TensorType::F16, f16_to_float, f16_from_float, TensorType::F32, f16_dot},
    {TensorType::BF16, bf16_to_float, bf16_from_float, TensorType::BF16, bf16_dot},
    {TensorType::Q8_0, q8_0_to_float, q8_0_from_float, TensorType::Q8_0, q8_0_dot_q8_0,
     q8_0_from_float_act},
    {TensorType::Q4_0, q4_0_to_float, q4_0_from_float, TensorType::Q8_0, q4_0_dot_q8_0},
    {TensorType::Q4_K, q4_k_to_float, q4_k_from_float, TensorType::Q8_K, q4_k_dot_q8_k},
    {TensorType::Q6_K, q6_k_to_float, q6_k_from_float, TensorType::Q8_K, q6_k_dot_q8_k},
    // Activation-only type: no weight is ever stored as Q8_K, so no vec_dot.
    {TensorType::Q8_K, q8_k_to_float, q8_k_from_float, TensorType::Q8_K, nullptr},
}};

const TypeOps* find(const std::array<TypeOps, 8>& table, TensorType t) {
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
