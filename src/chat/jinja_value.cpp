// chat/jinja_value.cpp — Value: construction, truthiness, comparison, printing and JSON conversion.
#include "chat/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace cairn::chat::jinja {

namespace {
// repr() of self-containing namespaces would recurse forever; Python prints "..." there.
constexpr int kMaxReprDepth = 200;
}  // namespace

void fail(std::string_view type, std::string_view message) {
  std::string m(type);
  m += ": ";
  m += message;
  throw Failure{std::move(m)};
}

const Value* DictData::find(const Value& key) const {
  if (key.is_string()) return find(std::string_view(key.as_string()));
  for (const auto& [k, v] : entries)
    if (py_equal(k, key)) return &v;
  return nullptr;
}

const Value* DictData::find(std::string_view key) const {
  for (const auto& [k, v] : entries)
    if (k.is_string() && k.as_string() == key) return &v;
  return nullptr;
}

void DictData::set(Value key, Value value) {
  for (auto& [k, v] : entries) {
    if (py_equal(k, key)) {
      v = std::move(value);
      return;
    }
  }
  entries.emplace_back(std::move(key), std::move(value));
}

Value Value::list(std::vector<Value> items, ListKind kind) {
  Value r;
  r.v = std::make_shared<const ListData>(ListData{std::move(items), kind});
  return r;
}
Value Value::dict(DictData data) {
  Value r;
  r.v = std::make_shared<const DictData>(std::move(data));
  return r;
}
Value Value::callable(std::string name, NativeFn fn) {
  Value r;
  r.v = std::make_shared<const Callable>(Callable{std::move(name), std::move(fn)});
  return r;
}
Value Value::ns(DictData attrs) {
  Value r;
  r.v = std::make_shared<NamespaceData>(NamespaceData{std::move(attrs)});
  return r;
}

double Value::to_double() const {
  switch (kind()) {
    case Kind::Bool:
      return as_bool() ? 1.0 : 0.0;
    case Kind::Int:
      return static_cast<double>(as_int());
    case Kind::Float:
      return as_float();
    default:
      return 0.0;
  }
}

void Value::raise_undefined() const { throw Failure{undefined_message()}; }

std::string type_name(const Value& v) {
  static constexpr const char* kNames[] = {"Undefined", "NoneType", "bool", "int",
                                           "float",     "str",      "list", "dict",
                                           "function",  "Namespace"};
  if (v.is_list()) {
    static constexpr const char* kListNames[] = {"list", "tuple", "generator"};
    return kListNames[static_cast<int>(v.as_list().kind)];
  }
  return kNames[static_cast<int>(v.kind())];
}

std::string object_type_repr(const Value& v) {
  if (v.is_none()) return "None";
  return type_name(v) + " object";
}

bool truthy(const Value& v) {
  switch (v.kind()) {
    case Kind::Undefined:
    case Kind::None:
      return false;
    case Kind::Bool:
      return v.as_bool();
    case Kind::Int:
      return v.as_int() != 0;
    case Kind::Float:
      return v.as_float() != 0.0;
    case Kind::String:
      return !v.as_string().empty();
    case Kind::List:
      // A generator is an object, and objects are true whatever they would yield.
      return v.as_list().kind == ListKind::Generator || !v.as_list().items.empty();
    case Kind::Dict:
      return !v.as_dict().entries.empty();
    default:
      return true;
  }
}

std::string py_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  // sci: [-]D[.DDD]e[+-]XX
  bool neg = sci[0] == '-';
  if (neg) sci.erase(0, 1);
  size_t e = sci.find('e');
  std::string digits = sci.substr(0, e);
  int exp = std::atoi(sci.c_str() + e + 1);
  digits.erase(std::remove(digits.begin(), digits.end(), '.'), digits.end());
  std::string out = neg ? "-" : "";
  if (exp >= -5 + 1 && exp < 16) {
    if (exp >= 0) {
      std::string ip = digits.substr(0, std::min(digits.size(), size_t(exp) + 1));
      while (ip.size() < size_t(exp) + 1) ip += '0';
      std::string fp = digits.size() > size_t(exp) + 1 ? digits.substr(exp + 1) : "0";
      out += ip + "." + fp;
    } else {
      out += "0." + std::string(size_t(-exp - 1), '0') + digits;
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char eb[16];
  std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
  return out + eb;
}

namespace {

// Decodes one UTF-8 sequence at s[i]; returns its length (1 for an invalid byte).
size_t utf8_decode(std::string_view s, size_t i, char32_t* cp) {
  unsigned char c = static_cast<unsigned char>(s[i]);
  size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (len == 0 || i + len > s.size()) {
    *cp = c;
    return 1;
  }
  char32_t v = len == 1 ? c : len == 2 ? (c & 0x1f) : len == 3 ? (c & 0x0f) : (c & 0x07);
  for (size_t k = 1; k < len; ++k) {
    unsigned char cc = static_cast<unsigned char>(s[i + k]);
    if ((cc & 0xc0) != 0x80) {
      *cp = c;
      return 1;
    }
    v = (v << 6) | (cc & 0x3f);
  }
  *cp = v;
  return len;
}

// Code points Python's str.isprintable() rejects (controls, separators, format chars).
bool py_unprintable(char32_t cp) {
  if (cp < 0x20 || (cp >= 0x7f && cp <= 0xa0) || cp == 0xad) return true;
  if (cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200f) || (cp >= 0x2028 && cp <= 0x202f)) return true;
  if ((cp >= 0x205f && cp <= 0x2064) || cp == 0x3000 || cp == 0xfeff) return true;
  return false;
}

void append_escape(std::string& out, char32_t cp) {
  char buf[16];
  if (cp < 0x100)
    std::snprintf(buf, sizeof buf, "\\x%02x", unsigned(cp));
  else if (cp < 0x10000)
    std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(cp));
  else
    std::snprintf(buf, sizeof buf, "\\U%08x", unsigned(cp));
  out += buf;
}

void repr_into(std::string& out, const Value& v, int depth);

void repr_items(std::string& out, const std::vector<Value>& items, int depth) {
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += ", ";
    repr_into(out, items[i], depth + 1);
  }
}

void repr_dict(std::string& out, const DictData& d, int depth) {
  out += '{';
  bool first = true;
  for (const auto& [k, val] : d.entries) {
    if (!first) out += ", ";
    first = false;
    repr_into(out, k, depth + 1);
    out += ": ";
    repr_into(out, val, depth + 1);
  }
  out += '}';
}

void repr_into(std::string& out, const Value& v, int depth) {
  if (depth > kMaxReprDepth) fail("RecursionError", "maximum recursion depth exceeded in repr");
  switch (v.kind()) {
    case Kind::Undefined:
      out += "Undefined";
      return;
    case Kind::String:
      out += py_string_repr(v.as_string());
      return;
    case Kind::List: {
      const ListData& l = v.as_list();
      if (l.kind == ListKind::Generator) {
        out += "<generator object>";
      } else if (l.kind == ListKind::Tuple) {
        out += '(';
        repr_items(out, l.items, depth);
        if (l.items.size() == 1) out += ',';
        out += ')';
      } else {
        out += '[';
        repr_items(out, l.items, depth);
        out += ']';
      }
      return;
    }
    case Kind::Dict:
      repr_dict(out, v.as_dict(), depth);
      return;
    case Kind::Namespace:
      out += "<Namespace ";
      repr_dict(out, v.as_namespace().attrs, depth);
      out += '>';
      return;
    default:
      out += to_str(v);
      return;
  }
}

}  // namespace

std::string py_string_repr(std::string_view s) {
  bool has_single = s.find('\'') != std::string_view::npos;
  bool has_double = s.find('"') != std::string_view::npos;
  char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (size_t i = 0; i < s.size();) {
    char32_t cp;
    size_t n = utf8_decode(s, i, &cp);
    if (cp == static_cast<char32_t>(quote) || cp == '\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (cp == '\t') {
      out += "\\t";
    } else if (py_unprintable(cp)) {
      append_escape(out, cp);
    } else {
      out.append(s.substr(i, n));
    }
    i += n;
  }
  out += quote;
  return out;
}

std::string to_str(const Value& v) {
  switch (v.kind()) {
    case Kind::Undefined:
      return "";
    case Kind::None:
      return "None";
    case Kind::Bool:
      return v.as_bool() ? "True" : "False";
    case Kind::Int:
      return std::to_string(v.as_int());
    case Kind::Float:
      return py_float_repr(v.as_float());
    case Kind::String:
      return v.as_string();
    case Kind::Callable:
      return "<function " + v.as_callable().name + ">";
    default: {
      std::string out;
      repr_into(out, v, 0);
      return out;
    }
  }
}

std::string repr(const Value& v) {
  std::string out;
  repr_into(out, v, 0);
  return out;
}

bool py_equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.to_double() == b.to_double();
    auto as_i = [](const Value& x) { return x.is_bool() ? int64_t(x.as_bool()) : x.as_int(); };
    return as_i(a) == as_i(b);
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Kind::Undefined:
    case Kind::None:
      return true;
    case Kind::String:
      return a.as_string() == b.as_string();
    case Kind::List: {
      const ListData& x = a.as_list();
      const ListData& y = b.as_list();
      if (x.kind == ListKind::Generator || y.kind == ListKind::Generator) return &x == &y;
      if (x.kind != y.kind || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i)
        if (!py_equal(x.items[i], y.items[i])) return false;
      return true;
    }
    case Kind::Dict: {
      const DictData& x = a.as_dict();
      const DictData& y = b.as_dict();
      if (x.entries.size() != y.entries.size()) return false;
      for (const auto& [k, val] : x.entries) {
        const Value* other = y.find(k);
        if (!other || !py_equal(val, *other)) return false;
      }
      return true;
    }
    case Kind::Callable:
      return &a.as_callable() == &b.as_callable();
    case Kind::Namespace:
      return &a.as_namespace() == &b.as_namespace();
    default:
      return false;
  }
}

int py_compare(const Value& a, const Value& b, std::string_view op) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      double x = a.to_double(), y = b.to_double();
      return x < y ? -1 : x > y ? 1 : 0;
    }
    int64_t x = a.is_bool() ? a.as_bool() : a.as_int();
    int64_t y = b.is_bool() ? b.as_bool() : b.as_int();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    int c = a.as_string().compare(b.as_string());  // byte order == code point order in UTF-8
    return c < 0 ? -1 : c > 0 ? 1 : 0;
  }
  if (a.is_list() && b.is_list() && a.as_list().kind == b.as_list().kind &&
      a.as_list().kind != ListKind::Generator) {
    const auto& x = a.as_list().items;
    const auto& y = b.as_list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (py_equal(x[i], y[i])) continue;
      return py_compare(x[i], y[i], op);
    }
    return x.size() < y.size() ? -1 : x.size() > y.size() ? 1 : 0;
  }
  if (a.is_undefined()) a.raise_undefined();
  if (b.is_undefined()) b.raise_undefined();
  fail("TypeError", "'" + std::string(op) + "' not supported between instances of '" +
                        type_name(a) + "' and '" + type_name(b) + "'");
}

std::vector<size_t> utf8_offsets(std::string_view s) {
  std::vector<size_t> offs;
  offs.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    offs.push_back(i);
    char32_t cp;
    i += utf8_decode(s, i, &cp);
  }
  return offs;
}

size_t utf8_length(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); ++n) {
    char32_t cp;
    i += utf8_decode(s, i, &cp);
  }
  return n;
}

std::vector<Value> iterate(const Value& v) {
  switch (v.kind()) {
    case Kind::Undefined:
      return {};
    case Kind::List:
      return v.as_list().items;
    case Kind::Dict: {
      std::vector<Value> keys;
      keys.reserve(v.as_dict().entries.size());
      for (const auto& kv : v.as_dict().entries) keys.push_back(kv.first);
      return keys;
    }
    case Kind::String: {
      const std::string& s = v.as_string();
      std::vector<size_t> offs = utf8_offsets(s);
      std::vector<Value> chars;
      chars.reserve(offs.size());
      for (size_t i = 0; i < offs.size(); ++i) {
        size_t end = i + 1 < offs.size() ? offs[i + 1] : s.size();
        chars.emplace_back(s.substr(offs[i], end - offs[i]));
      }
      return chars;
    }
    default:
      fail("TypeError", "'" + type_name(v) + "' object is not iterable");
  }
}

Value from_json(const nlohmann::ordered_json& j, int depth) {
  if (depth > 256) fail("ValueError", "context JSON nested too deeply");
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value(None{});
    case nlohmann::ordered_json::value_t::boolean:
      return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value(j.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      uint64_t u = j.get<uint64_t>();
      if (u > static_cast<uint64_t>(INT64_MAX)) return Value(static_cast<double>(u));
      return Value(static_cast<int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(j.size());
      for (const auto& e : j) items.push_back(from_json(e, depth + 1));
      return Value::list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      DictData d;
      d.entries.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) {
        Value key(it.key());
        Value value = from_json(it.value(), depth + 1);
        d.entries.emplace_back(std::move(key), std::move(value));
      }
      return Value::dict(std::move(d));
    }
    default:
      fail("ValueError", "unsupported JSON value in context");
  }
}

namespace {

void json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  for (size_t i = 0; i < s.size(); ++i) {
    char ch = s[i];
    unsigned char c = static_cast<unsigned char>(ch);
    if (ensure_ascii && c >= 0x80) {
      char32_t cp;
      i += utf8_decode(s, i, &cp) - 1;
      char buf[16];
      if (cp >= 0x10000) {
        cp -= 0x10000;
        std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", unsigned(0xd800 + (cp >> 10)),
                      unsigned(0xdc00 + (cp & 0x3ff)));
      } else {
        std::snprintf(buf, sizeof buf, "\\u%04x", unsigned(cp));
      }
      out += buf;
      continue;
    }
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

std::string json_key(const Value& k) {
  switch (k.kind()) {
    case Kind::String:
      return k.as_string();
    case Kind::None:
      return "null";
    case Kind::Bool:
      return k.as_bool() ? "true" : "false";
    case Kind::Int:
      return std::to_string(k.as_int());
    case Kind::Float:
      return py_float_repr(k.as_float());
    default:
      fail("TypeError", "keys must be str, int, float, bool or None, not " + type_name(k));
  }
}

void json_into(std::string& out, const Value& v, const JsonStyle& st, int level) {
  if (level > kMaxReprDepth) fail("RecursionError", "maximum recursion depth exceeded in tojson");
  auto newline = [&](int lvl) {
    out += '\n';
    for (int i = 0; i < lvl; ++i) out += st.indent;
  };
  switch (v.kind()) {
    case Kind::None:
      out += "null";
      return;
    case Kind::Bool:
      out += v.as_bool() ? "true" : "false";
      return;
    case Kind::Int:
      out += std::to_string(v.as_int());
      return;
    case Kind::Float: {
      double d = v.as_float();
      if (std::isnan(d))
        out += "NaN";
      else if (std::isinf(d))
        out += d < 0 ? "-Infinity" : "Infinity";
      else
        out += py_float_repr(d);
      return;
    }
    case Kind::String:
      json_string(out, v.as_string(), st.ensure_ascii);
      return;
    case Kind::List: {
      const ListData& l = v.as_list();
      if (l.kind == ListKind::Generator)
        fail("TypeError", "Object of type generator is not JSON serializable");
      if (l.items.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < l.items.size(); ++i) {
        if (i) out += st.item_sep;
        if (st.indented) newline(level + 1);
        json_into(out, l.items[i], st, level + 1);
      }
      if (st.indented) newline(level);
      out += ']';
      return;
    }
    case Kind::Dict: {
      std::vector<std::pair<std::string, const Value*>> entries;
      for (const auto& [k, val] : v.as_dict().entries) entries.emplace_back(json_key(k), &val);
      if (st.sort_keys)
        std::stable_sort(entries.begin(), entries.end(),
                         [](const auto& a, const auto& b) { return a.first < b.first; });
      if (entries.empty()) {
        out += "{}";
        return;
      }
      out += '{';
      for (size_t i = 0; i < entries.size(); ++i) {
        if (i) out += st.item_sep;
        if (st.indented) newline(level + 1);
        json_string(out, entries[i].first, st.ensure_ascii);
        out += st.key_sep;
        json_into(out, *entries[i].second, st, level + 1);
      }
      if (st.indented) newline(level);
      out += '}';
      return;
    }
    default:
      fail("TypeError", "Object of type " + type_name(v) + " is not JSON serializable");
  }
}

}  // namespace

std::string to_json(const Value& v, const JsonStyle& style) {
  std::string out;
  json_into(out, v, style, 0);
  return out;
}

}  // namespace cairn::chat::jinja
