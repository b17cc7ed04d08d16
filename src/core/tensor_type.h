// core/tensor_type.h — the tensor element types of GGUF/ggml.
// Owns the type ids, names and block layouts (so any GGUF tensor can be sized
// and bounds-checked, even of a type cairn cannot compute with), and the
// per-type table of compute functions (core/quant.h) that SIMD variants fill.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace cairn {

// Values are ggml's type ids, as stored in GGUF tensor infos.
enum class TensorType : uint32_t {
  F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
  Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
  IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21,
  IQ2_S = 22, IQ4_XS = 23, I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28,
  IQ1_M = 29, BF16 = 30, TQ1_0 = 34, TQ2_0 = 35, MXFP4 = 39, NVFP4 = 40, Q1_0 = 41, Q2_0 = 42,
};

struct TypeInfo {
  TensorType type;
  std::string_view name;    // lower case, as llama.cpp prints it: "q4_k"
  int64_t block_elems;      // elements per block (1 for plain types)
  size_t block_bytes;       // bytes per block
};

// nullptr when `id` is not a known ggml type id.
const TypeInfo* type_info(uint32_t id);
const TypeInfo& type_info(TensorType t);
std::optional<TensorType> type_from_name(std::string_view name);

// Bytes of a row of n elements; nullopt if n is not a multiple of the block size
// or the product overflows.
std::optional<size_t> row_bytes(TensorType t, int64_t n);

}  // namespace cairn
