// core/value.h — the typed values a servable's methods take and return.
// Owns the vocabulary shared by every front-end and the servable runtime:
// tensors (dtype, shape, little-endian row-major bytes), strings, bytes and
// scalars, and one instance as a map of named values. Checks sizes once, in
// Tensor::make, so later code can trust them. Knows nothing of JSON,
// protobuf, numpy or Python; those conversions live where those formats do.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "core/status.h"

namespace cairn::values {

enum class DType : uint8_t {
  Bool,
  Int8,
  Int16,
  Int32,
  Int64,
  UInt8,
  UInt16,
  UInt32,
  UInt64,
  Float16,
  BFloat16,
  Float32,
  Float64,
};

// Limits on what a request or a file may describe; beyond them a tensor is
// refused before anything is allocated.
inline constexpr size_t kMaxTensorRank = 32;
inline constexpr uint64_t kMaxTensorBytes = uint64_t(1) << 31;

// numpy's names ("bool", "int8" ... "uint64", "float16", "float32",
// "float64") and "bfloat16".
const char* dtype_name(DType t);
std::optional<DType> dtype_from_name(std::string_view name);
size_t dtype_size(DType t);
inline constexpr DType kAllDTypes[] = {
    DType::Bool,   DType::Int8,    DType::Int16,    DType::Int32,   DType::Int64,
    DType::UInt8,  DType::UInt16,  DType::UInt32,   DType::UInt64,  DType::Float16,
    DType::BFloat16, DType::Float32, DType::Float64};

struct Tensor {
  DType dtype = DType::Float32;
  std::vector<int64_t> shape;  // empty: a 0-d tensor (one element)
  std::string data;            // row-major, little-endian; element_count() * dtype_size bytes

  // The one way to build a tensor from outside data: refuses a negative
  // dimension, a rank over kMaxTensorRank, a size over kMaxTensorBytes (no
  // overflow on the way) and data whose length does not match.
  static Result<Tensor> make(DType dtype, std::vector<int64_t> shape, std::string data);
  // The element count a shape describes, or an error naming the problem.
  static Result<int64_t> count_of(DType dtype, const std::vector<int64_t>& shape);

  int64_t element_count() const;  // of a tensor made by make()
  template <typename T>
  const T* as() const {
    return reinterpret_cast<const T*>(data.data());
  }
  bool operator==(const Tensor& o) const {
    return dtype == o.dtype && shape == o.shape && data == o.data;
  }
};

// Raw bytes (numpy's bytes object, REST's {"b64": ...}), kept apart from
// str, which is UTF-8 text.
struct Bytes {
  std::string data;
  bool operator==(const Bytes& o) const { return data == o.data; }
};

using Value = std::variant<Tensor, std::string, Bytes, bool, int64_t, double>;
using Instance = std::map<std::string, Value>;

// What a value is, for error messages: "float32 tensor [2, 3]", "str",
// "bytes", "bool", "int", "float".
std::string describe(const Value& v);

// Builds tensors from C++ data (tests, the CLI).
Tensor make_tensor(const std::vector<float>& data, std::vector<int64_t> shape);
Tensor make_tensor(const std::vector<int32_t>& data, std::vector<int64_t> shape);
Tensor make_tensor(const std::vector<int64_t>& data, std::vector<int64_t> shape);

}  // namespace cairn::values
