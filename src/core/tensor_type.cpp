// core/tensor_type.cpp — the GGUF tensor type table: names, block sizes and byte sizes.
#include "core/tensor_type.h"

#include <array>

namespace cairn {
namespace {

// Block layouts of every ggml type (ids 4, 5 and 31-33, 36-38 were retired upstream).
constexpr std::array<TypeInfo, 35> kTypes = {{
    {TensorType::F32, "f32", 1, 4},
    {TensorType::F16, "f16", 1, 2},
    {TensorType::Q4_0, "q4_0", 32, 18},
    {TensorType::Q4_1, "q4_1", 32, 20},
    {TensorType::Q5_0, "q5_0", 32, 22},
    {TensorType::Q5_1, "q5_1", 32, 24},
    {TensorType::Q8_0, "q8_0", 32, 34},
    {TensorType::Q8_1, "q8_1", 32, 36},
    {TensorType::Q2_K, "q2_k", 256, 84},
    {TensorType::Q3_K, "q3_k", 256, 110},
    {TensorType::Q4_K, "q4_k", 256, 144},
    {TensorType::Q5_K, "q5_k", 256, 176},
    {TensorType::Q6_K, "q6_k", 256, 210},
    {TensorType::Q8_K, "q8_k", 256, 292},
    {TensorType::IQ2_XXS, "iq2_xxs", 256, 66},
    {TensorType::IQ2_XS, "iq2_xs", 256, 74},
    {TensorType::IQ3_XXS, "iq3_xxs", 256, 98},
    {TensorType::IQ1_S, "iq1_s", 256, 50},
    {TensorType::IQ4_NL, "iq4_nl", 32, 18},
    {TensorType::IQ3_S, "iq3_s", 256, 110},
    {TensorType::IQ2_S, "iq2_s", 256, 82},
    {TensorType::IQ4_XS, "iq4_xs", 256, 136},
    {TensorType::I8, "i8", 1, 1},
    {TensorType::I16, "i16", 1, 2},
    {TensorType::I32, "i32", 1, 4},
    {TensorType::I64, "i64", 1, 8},
    {TensorType::F64, "f64", 1, 8},
    {TensorType::IQ1_M, "iq1_m", 256, 56},
    {TensorType::BF16, "bf16", 1, 2},
    {TensorType::TQ1_0, "tq1_0", 256, 54},
    {TensorType::TQ2_0, "tq2_0", 256, 66},
    {TensorType::MXFP4, "mxfp4", 32, 17},
    {TensorType::NVFP4, "nvfp4", 64, 36},
    {TensorType::Q1_0, "q1_0", 128, 18},
    {TensorType::Q2_0, "q2_0", 64, 18},
}};

}  // namespace

const TypeInfo* type_info(uint32_t id) {
  for (const TypeInfo& t : kTypes) {
    if (static_cast<uint32_t>(t.type) == id) return &t;
  }
  return nullptr;
}

const TypeInfo& type_info(TensorType t) { return *type_info(static_cast<uint32_t>(t)); }

std::optional<TensorType> type_from_name(std::string_view name) {
  for (const TypeInfo& t : kTypes) {
    if (t.name == name) return t.type;
  }
  return std::nullopt;
}

std::optional<size_t> row_bytes(TensorType t, int64_t n) {
  const TypeInfo& info = type_info(t);
  if (n < 0 || n % info.block_elems != 0) return std::nullopt;
  const uint64_t blocks = static_cast<uint64_t>(n / info.block_elems);
  if (blocks > UINT64_MAX / info.block_bytes) return std::nullopt;
  return static_cast<size_t>(blocks * info.block_bytes);
}

}  // namespace cairn
