// core/value.cpp — dtype names and sizes, checked tensor construction, descriptions.
#include "core/value.h"

#include <cstring>
#include <limits>

namespace cairn::values {

const char* dtype_name(DType t) {
  switch (t) {
    case DType::Bool: return "bool";
    case DType::Int8: return "int8";
    case DType::Int16: return "int16";
    case DType::Int32: return "int32";
    case DType::Int64: return "int64";
    case DType::UInt8: return "uint8";
    case DType::UInt16: return "uint16";
    case DType::UInt32: return "uint32";
    case DType::UInt64: return "uint64";
    case DType::Float16: return "float16";
    case DType::BFloat16: return "bfloat16";
    case DType::Float32: return "float32";
    case DType::Float64: return "float64";
  }
  return "?";
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (DType t : kAllDTypes)
    if (name == dtype_name(t)) return t;
  return std::nullopt;
}

size_t dtype_size(DType t) {
  switch (t) {
    case DType::Bool:
    case DType::Int8:
    case DType::UInt8: return 1;
    case DType::Int16:
    case DType::UInt16:
    case DType::Float16:
    case DType::BFloat16: return 2;
    case DType::Int32:
    case DType::UInt32:
    case DType::Float32: return 4;
    case DType::Int64:
    case DType::UInt64:
    case DType::Float64: return 8;
  }
  return 1;
}

Result<int64_t> Tensor::count_of(DType dtype, const std::vector<int64_t>& shape) {
  if (shape.size() > kMaxTensorRank)
    return Status::invalid_argument("a tensor has rank " + std::to_string(shape.size()) +
                                    ", at most " + std::to_string(kMaxTensorRank) +
                                    " is allowed");
  const uint64_t limit = kMaxTensorBytes / dtype_size(dtype);
  uint64_t count = 1;
  bool zero = false;
  for (int64_t d : shape) {
    if (d < 0) return Status::invalid_argument("a tensor has a negative dimension");
    if (d == 0) zero = true;
  }
  if (zero) return int64_t(0);
  for (int64_t d : shape) {
    if (static_cast<uint64_t>(d) > limit || count > limit / static_cast<uint64_t>(d))
      return Status::invalid_argument("a tensor is larger than " +
                                      std::to_string(kMaxTensorBytes >> 20) + " MiB");
    count *= static_cast<uint64_t>(d);
  }
  return static_cast<int64_t>(count);
}

Result<Tensor> Tensor::make(DType dtype, std::vector<int64_t> shape, std::string data) {
  auto count = count_of(dtype, shape);
  if (!count.is_ok()) return count.status();
  const uint64_t want = static_cast<uint64_t>(*count) * dtype_size(dtype);
  if (data.size() != want)
    return Status::invalid_argument("a " + std::string(dtype_name(dtype)) + " tensor of " +
                                    std::to_string(*count) + " elements needs " +
                                    std::to_string(want) + " bytes, got " +
                                    std::to_string(data.size()));
  Tensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.data = std::move(data);
  return t;
}

int64_t Tensor::element_count() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string describe(const Value& v) {
  struct Visitor {
    std::string operator()(const Tensor& t) const {
      std::string s = std::string(dtype_name(t.dtype)) + " tensor [";
      for (size_t i = 0; i < t.shape.size(); ++i) s += (i ? ", " : "") + std::to_string(t.shape[i]);
      return s + "]";
    }
    std::string operator()(const std::string&) const { return "str"; }
    std::string operator()(const Bytes&) const { return "bytes"; }
    std::string operator()(bool) const { return "bool"; }
    std::string operator()(int64_t) const { return "int"; }
    std::string operator()(double) const { return "float"; }
  };
  return std::visit(Visitor{}, v);
}

namespace {
template <typename T>
Tensor tensor_of(DType dtype, const std::vector<T>& data, std::vector<int64_t> shape) {
  std::string bytes(data.size() * sizeof(T), '\0');
  if (!data.empty()) std::memcpy(bytes.data(), data.data(), bytes.size());
  Tensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.data = std::move(bytes);
  return t;
}
}  // namespace

Tensor make_tensor(const std::vector<float>& data, std::vector<int64_t> shape) {
  return tensor_of(DType::Float32, data, std::move(shape));
}
Tensor make_tensor(const std::vector<int32_t>& data, std::vector<int64_t> shape) {
  return tensor_of(DType::Int32, data, std::move(shape));
}
Tensor make_tensor(const std::vector<int64_t>& data, std::vector<int64_t> shape) {
  return tensor_of(DType::Int64, data, std::move(shape));
}

}  // namespace cairn::values
