// gguf/gguf_internal.h — helpers shared by the GGUF reader, writer and dump.
// Owns the table of metadata value types (names, sizes) and scalar decoding.
// Not for use outside src/gguf.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/gguf.h"

namespace cairn::gguf {

enum class ValueKind : uint8_t { UNSIGNED, SIGNED, FLOAT, BOOL, STRING, ARRAY };

struct ValueTypeDesc {
  std::string_view name;  // as the GGUF spec names it: "uint32"
  uint8_t size;           // bytes of one element; 0 for STRING and ARRAY
  ValueKind kind;
};

// nullptr for an id the spec does not define.
const ValueTypeDesc* value_type_desc(uint32_t id);

inline bool is_integer(ValueType t) {
  const ValueTypeDesc* d = value_type_desc(static_cast<uint32_t>(t));
  return d != nullptr && (d->kind == ValueKind::UNSIGNED || d->kind == ValueKind::SIGNED);
}
inline bool is_signed(ValueType t) {
  const ValueTypeDesc* d = value_type_desc(static_cast<uint32_t>(t));
  return d != nullptr && d->kind == ValueKind::SIGNED;
}

// Widens one little-endian scalar of type `t` at `p` into v.u / v.i / v.f.
// `t` must be a fixed-size type.
void decode_scalar(ValueType t, const uint8_t* p, Value& v);

// A name or string made safe for a one-line message: control and non-ASCII
// bytes escaped, cut after `max` bytes.
std::string printable(std::string_view s, size_t max = 64);

// "[4096, 32000]"
std::string dims_string(const std::vector<int64_t>& dims);

}  // namespace cairn::gguf
