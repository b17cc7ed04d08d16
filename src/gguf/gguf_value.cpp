// Metadata values: the type table, scalar decoding, and File's lookups and
// typed getters (which refuse conversions that would change a value).
#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <new>

#include "gguf/gguf.h"
#include "gguf/gguf_internal.h"

namespace cairn::gguf {

namespace {

// Indexed by the spec's type id.
constexpr std::array<ValueTypeDesc, 13> kValueTypes = {{
    {"uint8", 1, ValueKind::UNSIGNED},
    {"int8", 1, ValueKind::SIGNED},
    {"uint16", 2, ValueKind::UNSIGNED},
    {"int16", 2, ValueKind::SIGNED},
    {"uint32", 4, ValueKind::UNSIGNED},
    {"int32", 4, ValueKind::SIGNED},
    {"float32", 4, ValueKind::FLOAT},
    {"bool", 1, ValueKind::BOOL},
    {"string", 0, ValueKind::STRING},
    {"array", 0, ValueKind::ARRAY},
    {"uint64", 8, ValueKind::UNSIGNED},
    {"int64", 8, ValueKind::SIGNED},
    {"float64", 8, ValueKind::FLOAT},
}};

Status wrong_type(std::string_view key, const Value& v, std::string_view expected) {
  return Status::error("gguf: key '" + printable(key) + "' has type " + value_type_string(v) +
                       ", expected " + std::string(expected));
}

ValueKind kind_of(ValueType t) {
  const ValueTypeDesc* d = value_type_desc(static_cast<uint32_t>(t));
  return d == nullptr ? ValueKind::ARRAY : d->kind;
}

bool is_numeric_kind(ValueKind k) {
  return k == ValueKind::UNSIGNED || k == ValueKind::SIGNED || k == ValueKind::FLOAT;
}

// Element k of a numeric array, decoded.
Value element(const Value& arr, uint64_t k) {
  Value e;
  const uint8_t size = value_type_desc(static_cast<uint32_t>(arr.elem_type))->size;
  decode_scalar(arr.elem_type, arr.array_data + k * size, e);
  return e;
}

}  // namespace

const ValueTypeDesc* value_type_desc(uint32_t id) {
  return id < kValueTypes.size() ? &kValueTypes[id] : nullptr;
}

void decode_scalar(ValueType t, const uint8_t* p, Value& v) {
  const ValueTypeDesc& d = *value_type_desc(static_cast<uint32_t>(t));
  uint64_t raw = 0;
  std::memcpy(&raw, p, d.size);  // little-endian host: low bytes first
  v.type = t;
  switch (d.kind) {
    case ValueKind::UNSIGNED:
    case ValueKind::BOOL:
      v.u = raw;
      v.i = raw <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())
                ? static_cast<int64_t>(raw)
                : 0;
      v.f = static_cast<double>(raw);
      break;
    case ValueKind::SIGNED: {
      const int shift = 64 - 8 * d.size;
      v.i = static_cast<int64_t>(raw << shift) >> shift;  // sign-extend
      v.u = v.i >= 0 ? static_cast<uint64_t>(v.i) : 0;
      v.f = static_cast<double>(v.i);
      break;
    }
    case ValueKind::FLOAT:
      if (d.size == 4) {
        float f;
        std::memcpy(&f, p, 4);
        v.f = f;
      } else {
        std::memcpy(&v.f, p, 8);
      }
      break;
    case ValueKind::STRING:
    case ValueKind::ARRAY:
      break;
  }
}

std::string printable(std::string_view s, size_t max) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (size_t k = 0; k < s.size() && k < max; ++k) {
    const auto c = static_cast<unsigned char>(s[k]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  if (s.size() > max) out += "...";
  return out;
}

std::string dims_string(const std::vector<int64_t>& dims) {
  std::string out = "[";
  for (size_t d = 0; d < dims.size(); ++d) {
    if (d > 0) out += ", ";
    out += std::to_string(dims[d]);
  }
  return out + "]";
}

std::string_view value_type_name(ValueType t) {
  const ValueTypeDesc* d = value_type_desc(static_cast<uint32_t>(t));
  return d == nullptr ? std::string_view("unknown") : d->name;
}

std::string value_type_string(const Value& v) {
  if (v.type != ValueType::ARRAY) return std::string(value_type_name(v.type));
  return "array[" + std::string(value_type_name(v.elem_type)) + "]";
}

const Value* File::find(std::string_view key) const {
  auto it = key_index_.find(key);
  return it == key_index_.end() ? nullptr : &kvs_[it->second].value;
}

const TensorInfo* File::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

void File::AlignedFree::operator()(uint8_t* p) const { ::operator delete[](p, std::align_val_t(64)); }

Status File::replace_tensor_data(std::string_view name, std::span<const uint8_t> bytes) {
  const auto it = tensor_index_.find(name);
  if (it == tensor_index_.end()) return Status::error("tensor '" + std::string(name) + "' is missing");
  TensorInfo& t = tensors_[it->second];
  if (bytes.size() != t.n_bytes)
    return Status::error("tensor '" + t.name + "': replacement of " + std::to_string(bytes.size()) +
                         " bytes for a tensor of " + std::to_string(t.n_bytes));
  std::unique_ptr<uint8_t[], AlignedFree> copy(
      static_cast<uint8_t*>(::operator new[](std::max<size_t>(bytes.size(), 1), std::align_val_t(64))));
  std::copy(bytes.begin(), bytes.end(), copy.get());
  t.data = copy.get();
  replaced_.push_back(std::move(copy));
  return Status::ok();
}

Result<std::optional<uint64_t>> File::get_uint(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return std::optional<uint64_t>();
  const ValueKind k = kind_of(v->type);
  if (k == ValueKind::UNSIGNED) return std::optional<uint64_t>(v->u);
  if (k == ValueKind::SIGNED) {
    if (v->i < 0) {
      return Status::error("gguf: key '" + printable(key) + "' is " + std::to_string(v->i) +
                           ", expected a non-negative integer");
    }
    return std::optional<uint64_t>(static_cast<uint64_t>(v->i));
  }
  return wrong_type(key, *v, "an unsigned integer");
}

Result<std::optional<int64_t>> File::get_int(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return std::optional<int64_t>();
  const ValueKind k = kind_of(v->type);
  if (k == ValueKind::SIGNED) return std::optional<int64_t>(v->i);
  if (k == ValueKind::UNSIGNED) {
    if (v->u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Status::error("gguf: key '" + printable(key) + "' is " + std::to_string(v->u) +
                           ", too large for a signed 64-bit integer");
    }
    return std::optional<int64_t>(v->i);
  }
  return wrong_type(key, *v, "an integer");
}

Result<std::optional<double>> File::get_float(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return std::optional<double>();
  if (is_numeric_kind(kind_of(v->type))) return std::optional<double>(v->f);
  return wrong_type(key, *v, "a number");
}

Result<std::optional<bool>> File::get_bool(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return std::optional<bool>();
  if (v->type == ValueType::BOOL) return std::optional<bool>(v->u != 0);
  return wrong_type(key, *v, "a bool");
}

Result<std::optional<std::string_view>> File::get_string(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return std::optional<std::string_view>();
  if (v->type == ValueType::STRING) return std::optional<std::string_view>(v->str);
  return wrong_type(key, *v, "a string");
}

Result<std::optional<std::vector<std::string_view>>> File::get_string_array(
    std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return std::optional<std::vector<std::string_view>>();
  if (v->type == ValueType::ARRAY && v->elem_type == ValueType::STRING) {
    return std::optional<std::vector<std::string_view>>(v->strings);
  }
  return wrong_type(key, *v, "array[string]");
}

Result<std::optional<std::vector<float>>> File::get_float_array(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return std::optional<std::vector<float>>();
  if (v->type != ValueType::ARRAY || !is_numeric_kind(kind_of(v->elem_type))) {
    return wrong_type(key, *v, "an array of numbers");
  }
  std::vector<float> out(v->count);
  if (v->elem_type == ValueType::FLOAT32 && v->count > 0) {  // memcpy from null is UB
    std::memcpy(out.data(), v->array_data, v->count * sizeof(float));
  } else {
    for (uint64_t k = 0; k < v->count; ++k) out[k] = static_cast<float>(element(*v, k).f);
  }
  return std::optional<std::vector<float>>(std::move(out));
}

Result<std::optional<std::vector<int64_t>>> File::get_int_array(std::string_view key) const {
  const Value* v = find(key);
  if (v == nullptr) return std::optional<std::vector<int64_t>>();
  const ValueKind k = v->type == ValueType::ARRAY ? kind_of(v->elem_type) : ValueKind::STRING;
  if (k != ValueKind::SIGNED && k != ValueKind::UNSIGNED) {
    return wrong_type(key, *v, "an array of integers");
  }
  std::vector<int64_t> out(v->count);
  for (uint64_t n = 0; n < v->count; ++n) {
    const Value e = element(*v, n);
    if (k == ValueKind::UNSIGNED &&
        e.u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return Status::error("gguf: element #" + std::to_string(n) + " of key '" + printable(key) +
                           "' is " + std::to_string(e.u) + ", too large for int64");
    }
    out[n] = e.i;
  }
  return std::optional<std::vector<int64_t>>(std::move(out));
}

}  // namespace cairn::gguf
