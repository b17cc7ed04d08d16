// Text form of a GGUF file. Output size is bounded by the number of keys and
// tensors, never by the length of a value.
#include "gguf/gguf_dump.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <map>

#include "gguf/gguf_internal.h"

namespace cairn::gguf {

namespace {

constexpr size_t kMaxStringShown = 60;
constexpr uint64_t kMaxElementsShown = 8;

std::string quoted(std::string_view s) {
  std::string out = "\"";
  for (char c : printable(s, kMaxStringShown)) {
    if (c == '"') out += '\\';  // so the closing quote stays unambiguous
    out += c;
  }
  out += "\"";
  if (s.size() > kMaxStringShown) out += " (" + std::to_string(s.size()) + " bytes)";
  return out;
}

// Fewest digits that read back as the same value: 1e-05, not 9.99999975e-06.
std::string shortest(double f, bool is_float32) {
  char buf[40];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buf, sizeof buf, "%.*g", precision, f);
    const double back = std::strtod(buf, nullptr);
    if (is_float32 ? static_cast<float>(back) == static_cast<float>(f) : back == f) break;
  }
  return buf;  // NaN never compares equal: it ends as "nan" at 17 digits
}

std::string scalar(const Value& v) {
  switch (value_type_desc(static_cast<uint32_t>(v.type))->kind) {
    case ValueKind::UNSIGNED:
      return std::to_string(v.u);
    case ValueKind::SIGNED:
      return std::to_string(v.i);
    case ValueKind::BOOL:
      return v.u != 0 ? "true" : "false";
    case ValueKind::FLOAT:
      return shortest(v.f, v.type == ValueType::FLOAT32);
    case ValueKind::STRING:
      return quoted(v.str);
    case ValueKind::ARRAY:
      break;
  }
  return "?";
}

std::string array(const Value& v) {
  const ValueTypeDesc* elem = value_type_desc(static_cast<uint32_t>(v.elem_type));
  std::string out = "[";
  const uint64_t shown = std::min(v.count, kMaxElementsShown);
  for (uint64_t k = 0; k < shown; ++k) {
    if (k > 0) out += ", ";
    if (elem->size > 0) {
      Value e;
      decode_scalar(v.elem_type, v.array_data + k * elem->size, e);
      out += scalar(e);
    } else if (v.elem_type == ValueType::STRING) {
      out += quoted(v.strings[k]);
    } else {
      out += "[...]";  // nested array contents are not kept
    }
  }
  if (v.count > shown) out += ", ...";
  out += "]";
  if (v.count > shown) out += " (" + std::to_string(v.count) + " elements)";
  return out;
}

// 1234567 -> "1,234,567"
std::string grouped(uint64_t n) {
  std::string digits = std::to_string(n);
  std::string out;
  for (size_t k = 0; k < digits.size(); ++k) {
    if (k > 0 && (digits.size() - k) % 3 == 0) out += ',';
    out += digits[k];
  }
  return out;
}

std::string pad(std::string s, size_t width) {
  if (s.size() < width) s.append(width - s.size(), ' ');
  return s;
}

std::string lpad(const std::string& s, size_t width) {
  return s.size() < width ? std::string(width - s.size(), ' ') + s : s;
}

}  // namespace

std::string describe_value(const Value& v) {
  return v.type == ValueType::ARRAY ? array(v) : scalar(v);
}

std::string describe(const File& file, const std::function<bool(const TensorInfo&)>& computes) {
  std::string out;
  out += "GGUF version " + std::to_string(file.version()) + ", " + grouped(file.file_size()) +
         " bytes, alignment " + std::to_string(file.alignment()) + ", data section at offset " +
         grouped(file.data_offset()) + "\n";

  out += "\nmetadata: " + std::to_string(file.metadata().size()) + " keys\n";
  size_t key_width = 0;
  size_t type_width = 0;
  for (const KeyValue& kv : file.metadata()) {
    key_width = std::max(key_width, std::min<size_t>(printable(kv.key).size(), 48));
    type_width = std::max(type_width, value_type_string(kv.value).size());
  }
  for (const KeyValue& kv : file.metadata()) {
    out += "  " + pad(printable(kv.key), key_width) + "  " +
           pad(value_type_string(kv.value), type_width) + "  " + describe_value(kv.value) + "\n";
  }

  out += "\ntensors: " + std::to_string(file.tensors().size()) + "\n";
  size_t name_width = 4;
  for (const TensorInfo& t : file.tensors()) {
    name_width = std::max(name_width, std::min<size_t>(printable(t.name).size(), 48));
  }
  if (!file.tensors().empty()) {
    out += "  " + pad("name", name_width) + "  " + pad("type", 8) + "  " + pad("dims", 22) + "  " +
           lpad("offset", 14) + "  " + lpad("bytes", 14) + (computes ? "  computes" : "") + "\n";
  }
  uint64_t not_computed = 0;
  uint64_t total_bytes = 0;
  uint64_t total_elements = 0;
  std::map<std::string, uint64_t> per_type;  // sorted, so the summary is stable
  for (const TensorInfo& t : file.tensors()) {
    const std::string type(type_info(t.type).name);
    out += "  " + pad(printable(t.name), name_width) + "  " + pad(type, 8) + "  " +
           pad(dims_string(t.dims), 22) + "  " + lpad(grouped(t.offset), 14) + "  " +
           lpad(grouped(t.n_bytes), 14);
    if (computes) {
      const bool ok = computes(t);
      out += ok ? "  yes" : "  NO";
      not_computed += !ok;
    }
    out += "\n";
    total_bytes += t.n_bytes;  // each at most the file size, so no realistic overflow
    total_elements += t.n_elements;
    ++per_type[type];
  }
  out += "\ntotal: " + std::to_string(file.tensors().size()) + " tensors, " +
         grouped(total_elements) + " elements, " + grouped(total_bytes) + " bytes";
  if (!per_type.empty()) {
    out += " (";
    bool first = true;
    for (const auto& [type, n] : per_type) {
      out += (first ? "" : ", ") + type + ": " + std::to_string(n);
      first = false;
    }
    out += ")";
  }
  out += "\n";
  if (computes) {
    out += not_computed == 0 ? "cairn computes every tensor of this file\n"
                             : "cairn cannot compute " + std::to_string(not_computed) +
                                   " of the tensors (marked NO): it will refuse this file\n";
  }
  return out;
}

}  // namespace cairn::gguf
