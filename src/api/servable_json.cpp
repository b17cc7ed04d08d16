// api/servable_json.cpp — MindSpore Serving's REST JSON <-> values, paths, base64.
#include "api/servable_json.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "api/openai_request.h"
#include "core/half.h"

namespace cairn::api {

using nlohmann::json;
using values::DType;
using values::Tensor;
using values::Value;

namespace {

// A name from the request, quoted and cut short for an error message.
std::string shown(std::string_view s) {
  constexpr size_t kMax = 64;
  std::string out = "'";
  out += s.size() > kMax ? std::string(s.substr(0, kMax)) + "..." : std::string(s);
  return out + "'";
}

Status bad(std::string message) { return Status::invalid_argument(std::move(message)); }

bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    size_t n;
    uint32_t cp;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xe0) == 0xc0) {
      n = 1, cp = c & 0x1f;
    } else if ((c & 0xf0) == 0xe0) {
      n = 2, cp = c & 0x0f;
    } else if ((c & 0xf8) == 0xf0) {
      n = 3, cp = c & 0x07;
    } else {
      return false;
    }
    if (i + n >= s.size()) return false;  // truncated sequence
    for (size_t k = 1; k <= n; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xc0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3f);
    }
    // Overlong forms, surrogates and values past U+10FFFF are not UTF-8.
    static constexpr uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (cp < kMin[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
    i += n + 1;
  }
  return true;
}

// MindSpore's dtype names next to numpy's; "str" and "bytes" are not tensors.
struct TypeName {
  bool is_tensor = true;
  bool is_str = false;
  DType dtype = DType::Float32;
};
std::optional<TypeName> type_from_name(const std::string& name) {
  if (name == "str") return TypeName{false, true, DType::UInt8};
  if (name == "bytes") return TypeName{false, false, DType::UInt8};
  if (name == "fp16") return TypeName{true, false, DType::Float16};
  if (name == "fp32") return TypeName{true, false, DType::Float32};
  if (name == "fp64") return TypeName{true, false, DType::Float64};
  if (auto t = values::dtype_from_name(name)) return TypeName{true, false, *t};
  return std::nullopt;
}

Result<Value> b64_object(const json& j, const std::string& name) {
  const json* b64 = nullptr;
  const json* type = nullptr;
  const json* shape = nullptr;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "b64")
      b64 = &it.value();
    else if (it.key() == "type")
      type = &it.value();
    else if (it.key() == "shape")
      shape = &it.value();
    else
      return bad("input " + shown(name) + ": unknown key " + shown(it.key()) +
                 " in an object value (allowed: b64, type, shape)");
  }
  if (!b64) return bad("input " + shown(name) + ": an object value needs a 'b64' string");
  if (!b64->is_string()) return bad("input " + shown(name) + ": 'b64' must be a string");
  TypeName tn{false, false, DType::UInt8};  // no type: bytes
  if (type) {
    if (!type->is_string()) return bad("input " + shown(name) + ": 'type' must be a string");
    auto t = type_from_name(type->get<std::string>());
    if (!t)
      return bad("input " + shown(name) + ": unknown type " + shown(type->get<std::string>()) +
                 " (bool, int8..int64, uint8..uint64, float16, bfloat16, float32, float64, "
                 "str, bytes)");
    tn = *t;
  }
  std::vector<int64_t> dims;
  if (shape) {
    if (!shape->is_array())
      return bad("input " + shown(name) + ": 'shape' must be a list of non-negative integers");
    if (shape->size() > values::kMaxTensorRank)
      return bad("input " + shown(name) + ": 'shape' has " + std::to_string(shape->size()) +
                 " dimensions, at most " + std::to_string(values::kMaxTensorRank) + " are allowed");
    for (const json& d : *shape) {
      if (!d.is_number_integer() || (!d.is_number_unsigned() && d.get<int64_t>() < 0) ||
          (d.is_number_unsigned() && d.get<uint64_t>() > uint64_t(INT64_MAX)))
        return bad("input " + shown(name) + ": 'shape' must be a list of non-negative integers");
      dims.push_back(d.get<int64_t>());
    }
  }
  auto count = Tensor::count_of(tn.is_tensor ? tn.dtype : DType::UInt8, dims);
  if (!count.is_ok()) return count.status().with_context("input " + shown(name));
  if (!tn.is_tensor && *count != 1)
    return bad("input " + shown(name) +
               ": a str or bytes value has one element; its 'shape' must describe one");
  auto data = base64_decode(b64->get_ref<const std::string&>());
  if (!data.is_ok()) return data.status().with_context("input " + shown(name));
  if (!tn.is_tensor) {
    if (!tn.is_str) return Value(values::Bytes{std::move(*data)});
    if (!valid_utf8(*data))
      return bad("input " + shown(name) + ": the b64 data of a str is not valid UTF-8");
    return Value(std::move(*data));
  }
  const uint64_t want = static_cast<uint64_t>(*count) * values::dtype_size(tn.dtype);
  if (data->size() != want)
    return bad("input " + shown(name) + ": the b64 data has " + std::to_string(data->size()) +
               " bytes, but a " + values::dtype_name(tn.dtype) + " tensor of " +
               std::to_string(*count) + " elements needs " + std::to_string(want));
  auto t = Tensor::make(tn.dtype, std::move(dims), std::move(*data));
  if (!t.is_ok()) return t.status().with_context("input " + shown(name));
  return Value(std::move(*t));
}

// Visits the leaves of a list in row-major order, checking that every
// sub-list at depth d has shape[d] items and that leaves sit at full depth.
// Recursion depth is bounded by the shape's rank, which the caller limited.
template <typename F>
Status walk(const json& node, const std::vector<int64_t>& shape, size_t depth,
            const std::string& name, F& leaf) {
  if (depth == shape.size()) {
    if (node.is_array()) return bad("input " + shown(name) + " is not a rectangular list");
    return leaf(node);
  }
  if (!node.is_array() || node.size() != static_cast<size_t>(shape[depth]))
    return bad("input " + shown(name) + " is not a rectangular list");
  for (const json& child : node) CAIRN_RETURN_IF_ERROR(walk(child, shape, depth + 1, name, leaf));
  return Status::ok();
}

Result<Value> list_value(const json& j, const std::string& name, const ServableJsonLimits& limits) {
  // The shape follows the first item at each level, as MindSpore does.
  std::vector<int64_t> shape;
  const json* cur = &j;
  while (cur->is_array()) {
    if (shape.size() >= limits.max_depth)
      return bad("input " + shown(name) + " is nested deeper than " +
                 std::to_string(limits.max_depth) + " levels");
    shape.push_back(static_cast<int64_t>(cur->size()));
    if (cur->empty()) break;
    cur = &(*cur)[0];
  }
  uint64_t count = 1;
  for (int64_t d : shape) {
    if (d == 0) {
      count = 0;
      break;
    }
  }
  for (int64_t d : shape) {
    if (count == 0) break;
    if (static_cast<uint64_t>(d) > limits.max_elements / count)
      return bad("input " + shown(name) + " has more than " + std::to_string(limits.max_elements) +
                 " elements");
    count *= static_cast<uint64_t>(d);
  }

  // First pass: shape and the kinds of the leaves.
  size_t n_bool = 0, n_int = 0, n_float = 0, n_text = 0;
  bool wide = false;  // an int outside int32's range
  const json* first = nullptr;
  auto classify = [&](const json& v) -> Status {
    if (!first) first = &v;
    if (v.is_boolean()) {
      ++n_bool;
    } else if (v.is_number_unsigned()) {
      if (v.get<uint64_t>() > uint64_t(INT64_MAX))
        return bad("input " + shown(name) + ": " + std::to_string(v.get<uint64_t>()) +
                   " is outside int64's range");
      if (v.get<uint64_t>() > uint64_t(INT32_MAX)) wide = true;
      ++n_int;
    } else if (v.is_number_integer()) {
      const int64_t x = v.get<int64_t>();
      if (x < INT32_MIN || x > INT32_MAX) wide = true;
      ++n_int;
    } else if (v.is_number_float()) {
      const double x = v.get<double>();
      if (!(std::fabs(x) <= double(std::numeric_limits<float>::max())))
        return bad("input " + shown(name) + ": " + json(x).dump() + " is outside float32's range");
      ++n_float;
    } else if (v.is_string() || v.is_object()) {
      ++n_text;
    } else {
      return bad("input " + shown(name) + " holds a null or another unsupported item");
    }
    return Status::ok();
  };
  CAIRN_RETURN_IF_ERROR(walk(j, shape, 0, name, classify));

  if (n_text > 0) {
    // MindSpore takes a list of one string or {"b64"} object as that value.
    if (count != 1)
      return bad("input " + shown(name) +
                 ": a list of strings or objects is not supported; send one str or bytes "
                 "value per input");
    if (first->is_string()) return Value(first->get<std::string>());
    auto v = b64_object(*first, name);
    if (v.is_ok() && std::holds_alternative<Tensor>(*v))
      return bad("input " + shown(name) + ": an object in a list must be of type str or bytes");
    return v;
  }
  if (n_bool > 0 && n_int + n_float > 0)
    return bad("input " + shown(name) + " mixes booleans and numbers");
  const DType dtype = n_bool > 0                  ? DType::Bool
                      : n_float > 0 || count == 0 ? DType::Float32
                      : wide                      ? DType::Int64
                                                  : DType::Int32;
  auto checked = Tensor::count_of(dtype, shape);
  if (!checked.is_ok()) return checked.status().with_context("input " + shown(name));

  // Second pass: the data, now that its size is known to be sane.
  std::string data(static_cast<size_t>(count) * values::dtype_size(dtype), '\0');
  char* out = data.data();
  auto fill = [&](const json& v) -> Status {
    switch (dtype) {
      case DType::Bool:
        *out++ = v.get<bool>() ? 1 : 0;
        break;
      case DType::Float32: {
        const float f = static_cast<float>(v.get<double>());
        std::memcpy(out, &f, 4);
        out += 4;
        break;
      }
      case DType::Int32: {
        const int32_t x = static_cast<int32_t>(v.get<int64_t>());
        std::memcpy(out, &x, 4);
        out += 4;
        break;
      }
      default: {  // Int64
        const int64_t x = v.get<int64_t>();
        std::memcpy(out, &x, 8);
        out += 8;
        break;
      }
    }
    return Status::ok();
  };
  CAIRN_RETURN_IF_ERROR(walk(j, shape, 0, name, fill));
  auto t = Tensor::make(dtype, std::move(shape), std::move(data));
  if (!t.is_ok()) return t.status().with_context("input " + shown(name));
  return Value(std::move(*t));
}

// float32 as the shortest decimal that reads back as the same float, so 0.1f
// prints as 0.1 rather than 0.10000000149011612.
json float_json(float f) {
  if (!std::isfinite(f)) return nullptr;
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, f);
  *r.ptr = '\0';
  return std::strtod(buf, nullptr);
}

// A 16-bit float as the shortest decimal that converts back to the same bits.
template <typename ToF32, typename FromF32>
json half_json(uint16_t bits, ToF32 to_f32, FromF32 from_f32) {
  const float f = to_f32(bits);
  if (!std::isfinite(f)) return nullptr;
  char buf[64];
  for (int p = 1; p <= 9; ++p) {
    std::snprintf(buf, sizeof buf, "%.*g", p, double(f));
    const double d = std::strtod(buf, nullptr);
    if (from_f32(static_cast<float>(d)) == bits) return d;
  }
  return double(f);
}

template <typename T>
T load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

json element_json(DType dtype, const char* p) {
  switch (dtype) {
    case DType::Bool:
      return *p != 0;
    case DType::Int8:
      return load<int8_t>(p);
    case DType::Int16:
      return load<int16_t>(p);
    case DType::Int32:
      return load<int32_t>(p);
    case DType::Int64:
      return load<int64_t>(p);
    case DType::UInt8:
      return load<uint8_t>(p);
    case DType::UInt16:
      return load<uint16_t>(p);
    case DType::UInt32:
      return load<uint32_t>(p);
    case DType::UInt64:
      return load<uint64_t>(p);
    case DType::Float16:
      return half_json(load<uint16_t>(p), f16_to_f32, f32_to_f16);
    case DType::BFloat16:
      return half_json(load<uint16_t>(p), bf16_to_f32, f32_to_bf16);
    case DType::Float32:
      return float_json(load<float>(p));
    case DType::Float64: {
      const double d = load<double>(p);
      return std::isfinite(d) ? json(d) : json(nullptr);
    }
  }
  return nullptr;
}

json nested_json(const Tensor& t, size_t depth, const char*& p, size_t elem) {
  json arr = json::array();
  const int64_t n = t.shape[depth];
  for (int64_t i = 0; i < n; ++i) {
    if (depth + 1 == t.shape.size()) {
      arr.push_back(element_json(t.dtype, p));
      p += elem;
    } else {
      arr.push_back(nested_json(t, depth + 1, p, elem));
    }
  }
  return arr;
}

// True when the tensor's data matches its dtype and shape (a runtime's
// outputs are trusted only this far).
bool well_formed(const Tensor& t) {
  auto count = Tensor::count_of(t.dtype, t.shape);
  return count.is_ok() &&
         t.data.size() == static_cast<uint64_t>(*count) * values::dtype_size(t.dtype);
}

}  // namespace

Result<ModelPath> parse_model_path(std::string_view path) {
  static constexpr std::string_view kPrefix = "/model/";
  static constexpr const char* kShape = "; expected /model/<servable>[/version/<n>]:<method>";
  if (path.substr(0, kPrefix.size()) != kPrefix) return bad(std::string("malformed path") + kShape);
  std::string_view rest = path.substr(kPrefix.size());
  const size_t colon = rest.rfind(':');
  if (colon == std::string_view::npos)
    return bad("the path names no method (':<method>')" + std::string(kShape));
  ModelPath out;
  out.method = std::string(rest.substr(colon + 1));
  std::string_view head = rest.substr(0, colon);
  if (out.method.empty()) return bad("the method name is empty" + std::string(kShape));
  if (out.method.find('/') != std::string::npos)
    return bad("malformed method name " + shown(out.method) + kShape);
  static constexpr std::string_view kVersion = "/version/";
  const size_t v = head.find(kVersion);
  if (v != std::string_view::npos) {
    const std::string_view digits = head.substr(v + kVersion.size());
    head = head.substr(0, v);
    bool ok = !digits.empty() && digits.size() <= 19;
    for (char c : digits) ok = ok && c >= '0' && c <= '9';
    if (!ok)
      return bad("bad version number " + shown(digits) + " (a non-negative integer)" + kShape);
    out.version = std::strtoull(std::string(digits).c_str(), nullptr, 10);
  }
  out.servable = std::string(head);
  if (out.servable.empty()) return bad("the servable name is empty" + std::string(kShape));
  if (out.servable.find('/') != std::string::npos)
    return bad("malformed servable name " + shown(out.servable) + kShape);
  return out;
}

Result<Value> value_from_json(const json& j, const std::string& name,
                              const ServableJsonLimits& limits) {
  switch (j.type()) {
    case json::value_t::string:
      return Value(j.get<std::string>());
    case json::value_t::boolean:
      return Value(j.get<bool>());
    case json::value_t::number_unsigned:
      if (j.get<uint64_t>() > uint64_t(INT64_MAX))
        return bad("input " + shown(name) + ": " + j.dump() + " is outside int64's range");
      return Value(j.get<int64_t>());
    case json::value_t::number_integer:
      return Value(j.get<int64_t>());
    case json::value_t::number_float:
      return Value(j.get<double>());
    case json::value_t::object:
      return b64_object(j, name);
    case json::value_t::array:
      return list_value(j, name, limits);
    default:
      return bad("input " + shown(name) + " is null or of an unsupported kind");
  }
}

Result<PredictBody> parse_predict_json(const json& body, const ServableJsonLimits& limits) {
  if (!body.is_object()) return bad("request body must be a JSON object");
  PredictBody out;
  if (auto s = body.find("stream"); s != body.end() && !s->is_null()) {
    if (!s->is_boolean()) return bad("'stream' must be a boolean");
    out.stream = s->get<bool>();
  }
  auto it = body.find("instances");
  if (it == body.end())
    return bad("the body needs 'instances': a list of instances, each an object of named inputs");
  const json& inst = *it;
  std::vector<const json*> items;
  if (inst.is_object()) {
    items.push_back(&inst);  // one instance, as MindSpore allows
  } else if (inst.is_array()) {
    if (inst.empty()) return bad("'instances' is empty");
    if (inst.size() > limits.max_instances)
      return bad("'instances' has " + std::to_string(inst.size()) + " instances, at most " +
                 std::to_string(limits.max_instances) + " are allowed");
    for (const json& i : inst) items.push_back(&i);
  } else {
    return bad("'instances' must be a list of objects (or one object)");
  }
  out.instances.reserve(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    const json& obj = *items[i];
    const std::string where = "instance " + std::to_string(i);
    if (!obj.is_object()) return bad(where + " is not an object of named inputs");
    if (obj.empty()) return bad(where + " has no inputs");
    values::Instance instance;
    for (auto kv = obj.begin(); kv != obj.end(); ++kv) {
      if (kv.key().empty()) return bad(where + ": an input name is empty");
      auto v = value_from_json(kv.value(), kv.key(), limits);
      if (!v.is_ok()) return v.status().with_context(where);
      instance.emplace(kv.key(), std::move(*v));
    }
    out.instances.push_back(std::move(instance));
  }
  return out;
}

Result<PredictBody> parse_predict_body(std::string_view body, const ServableJsonLimits& limits) {
  CAIRN_ASSIGN_OR_RETURN(const json j, parse_json_object<json>(body));
  return parse_predict_json(j, limits);
}

json tensor_to_json(const Tensor& t) {
  if (!well_formed(t)) return nullptr;
  if (t.shape.empty()) return element_json(t.dtype, t.data.data());
  const char* p = t.data.data();
  return nested_json(t, 0, p, values::dtype_size(t.dtype));
}

json value_to_json(const Value& v) {
  struct Visit {
    json operator()(const Tensor& t) const { return tensor_to_json(t); }
    json operator()(const std::string& s) const { return s; }
    json operator()(const values::Bytes& b) const { return {{"b64", base64_encode(b.data)}}; }
    json operator()(bool b) const { return b; }
    json operator()(int64_t i) const { return i; }
    json operator()(double d) const { return std::isfinite(d) ? json(d) : json(nullptr); }
  };
  return std::visit(Visit{}, v);
}

json predict_reply_json(const std::vector<servable::InstanceResult>& results) {
  json instances = json::array();
  for (const auto& r : results) {
    if (!r.is_ok()) {
      instances.push_back({{"error_msg", r.status().message()}});
      continue;
    }
    json obj = json::object();
    std::string malformed;
    for (const auto& [name, value] : *r) {
      if (const auto* t = std::get_if<Tensor>(&value); t && !well_formed(*t)) {
        malformed = name;
        break;
      }
      obj[name] = value_to_json(value);
    }
    if (!malformed.empty())
      obj = {{"error_msg", "output " + shown(malformed) + " is a malformed tensor"}};
    instances.push_back(std::move(obj));
  }
  return {{"instances", std::move(instances)}};
}

json servable_error_json(const Status& status) { return {{"error_msg", status.message()}}; }

json stream_text_json(size_t instance, const std::string& output, const std::string& text) {
  return {{"instance", instance}, {"output", output}, {"text", text}};
}

std::string base64_encode(std::string_view data) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((data.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 3 <= data.size(); i += 3) {
    const uint32_t v = uint32_t(uint8_t(data[i])) << 16 | uint32_t(uint8_t(data[i + 1])) << 8 |
                       uint32_t(uint8_t(data[i + 2]));
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63];
    out += kAlphabet[v & 63];
  }
  const size_t rem = data.size() - i;
  if (rem > 0) {
    uint32_t v = uint32_t(uint8_t(data[i])) << 16;
    if (rem == 2) v |= uint32_t(uint8_t(data[i + 1])) << 8;
    out += kAlphabet[v >> 18];
    out += kAlphabet[(v >> 12) & 63];
    out += rem == 2 ? kAlphabet[(v >> 6) & 63] : '=';
    out += '=';
  }
  return out;
}

Result<std::string> base64_decode(std::string_view text) {
  auto sextet = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  size_t n = text.size();
  size_t pad = 0;
  while (n > 0 && pad < 2 && text[n - 1] == '=') --n, ++pad;
  if ((pad > 0 && text.size() % 4 != 0) || n % 4 == 1)
    return bad("'b64' is not valid base64 (its length is wrong)");
  std::string out;
  out.reserve(n / 4 * 3 + 2);
  uint32_t acc = 0;
  int bits = 0;
  for (size_t i = 0; i < n; ++i) {
    const int s = sextet(text[i]);
    if (s < 0) return bad("'b64' is not valid base64 (character " + std::to_string(i) + ")");
    acc = (acc << 6) | uint32_t(s);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((acc >> bits) & 0xff);
    }
  }
  return out;
}

}  // namespace cairn::api
