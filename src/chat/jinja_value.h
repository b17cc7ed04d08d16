// chat/jinja_value.h — the template engine's values and their Python semantics.
// Owns Value (undefined, none, bool, int, float, string, list/tuple/generator, dict,
// callable, namespace), truthiness, str()/repr(), equality and ordering, UTF-8 code
// point indexing, and conversion to and from JSON. Never throws anything but
// jinja::Failure (caught at the ChatTemplate edge); lists and dicts are immutable
// once built (the sandbox forbids mutation), only namespaces change in place.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace cairn::chat::jinja {

// A render or parse error; `message` reads like Jinja2's ("UndefinedError: ...").
struct Failure {
  std::string message;
  int line = 0;  // template line of the innermost statement, once known
};
[[noreturn]] void fail(std::string_view type, std::string_view message);

struct Value;
class Interpreter;

enum class ListKind { List, Tuple, Generator };

struct ListData {
  std::vector<Value> items;
  ListKind kind = ListKind::List;
};

struct DictData {
  std::vector<std::pair<Value, Value>> entries;  // insertion order, like Python 3.7+
  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
  void set(Value key, Value value);
};

struct NamespaceData {
  DictData attrs;
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

using NativeFn = std::function<Value(Interpreter&, CallArgs&)>;
struct Callable {
  std::string name;
  NativeFn fn;
};

// Python's Undefined: falsy, prints empty, fails with `message` when used further.
struct Undefined {
  std::string message;  // full, e.g. "UndefinedError: 'x' is undefined"
};
struct None {};

enum class Kind { Undefined, None, Bool, Int, Float, String, List, Dict, Callable, Namespace };

struct Value {
  using Storage = std::variant<Undefined, None, bool, int64_t, double, std::string,
                               std::shared_ptr<const ListData>, std::shared_ptr<const DictData>,
                               std::shared_ptr<const Callable>, std::shared_ptr<NamespaceData>>;
  Storage v;
  // A string marked safe (Python's markupsafe.Markup, from |safe or |escape): adding a
  // plain string to it HTML-escapes that string, as Jinja2 does even without autoescape.
  bool markup = false;

  Value() : v(Undefined{"UndefinedError: value is undefined"}) {}
  Value(None) : v(None{}) {}                        // NOLINT
  Value(bool b) : v(b) {}                           // NOLINT
  Value(int64_t i) : v(i) {}                        // NOLINT
  Value(int i) : v(int64_t{i}) {}                   // NOLINT
  Value(double d) : v(d) {}                         // NOLINT
  Value(std::string s) : v(std::move(s)) {}         // NOLINT
  Value(const char* s) : v(std::string(s)) {}       // NOLINT
  Value(std::string_view s) : v(std::string(s)) {}  // NOLINT
  Value(Undefined u) : v(std::move(u)) {}           // NOLINT

  static Value safe_string(std::string s) {
    Value r(std::move(s));
    r.markup = true;
    return r;
  }
  static Value undefined(std::string message) { return Value(Undefined{std::move(message)}); }
  static Value list(std::vector<Value> items, ListKind kind = ListKind::List);
  static Value dict(DictData data);
  static Value callable(std::string name, NativeFn fn);
  static Value ns(DictData attrs);

  Kind kind() const { return static_cast<Kind>(v.index()); }
  bool is_undefined() const { return kind() == Kind::Undefined; }
  bool is_none() const { return kind() == Kind::None; }
  bool is_bool() const { return kind() == Kind::Bool; }
  bool is_int() const { return kind() == Kind::Int; }
  bool is_float() const { return kind() == Kind::Float; }
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return kind() == Kind::String; }
  bool is_list() const { return kind() == Kind::List; }
  bool is_dict() const { return kind() == Kind::Dict; }
  bool is_callable() const { return kind() == Kind::Callable; }
  bool is_namespace() const { return kind() == Kind::Namespace; }

  bool as_bool() const { return std::get<bool>(v); }
  int64_t as_int() const { return std::get<int64_t>(v); }
  double as_float() const { return std::get<double>(v); }
  const std::string& as_string() const { return std::get<std::string>(v); }
  const ListData& as_list() const { return *std::get<std::shared_ptr<const ListData>>(v); }
  const DictData& as_dict() const { return *std::get<std::shared_ptr<const DictData>>(v); }
  const Callable& as_callable() const { return *std::get<std::shared_ptr<const Callable>>(v); }
  NamespaceData& as_namespace() const { return *std::get<std::shared_ptr<NamespaceData>>(v); }
  const std::string& undefined_message() const { return std::get<Undefined>(v).message; }
  // Number as double (bool and int widen), for mixed arithmetic.
  double to_double() const;

  // Fails with the undefined's own message; call before using an undefined further.
  [[noreturn]] void raise_undefined() const;
};

// Python's type name: "dict", "str", "NoneType", "generator"...
std::string type_name(const Value& v);
// Jinja's object_type_repr for error messages: "dict object", "None".
std::string object_type_repr(const Value& v);

bool truthy(const Value& v);
std::string to_str(const Value& v);   // Python str(); undefined prints empty
std::string repr(const Value& v);     // Python repr()
std::string py_float_repr(double d);  // Python repr(float), shortest round trip
std::string py_string_repr(std::string_view s);

bool py_equal(const Value& a, const Value& b);
// Python ordering (<0, 0, >0); fails with TypeError for unorderable pairs.
int py_compare(const Value& a, const Value& b, std::string_view op);

// Items a for-loop sees: list items, dict keys, string characters; undefined is empty.
std::vector<Value> iterate(const Value& v);

// UTF-8 code point start offsets (invalid bytes count as one code point each).
std::vector<size_t> utf8_offsets(std::string_view s);
size_t utf8_length(std::string_view s);

// JSON in (objects keep key order) and out (json.dumps with ensure_ascii=False).
Value from_json(const nlohmann::ordered_json& j, int depth = 0);
struct JsonStyle {
  bool indented = false;
  std::string indent;  // per level, when indented
  std::string item_sep = ", ";
  std::string key_sep = ": ";
  bool sort_keys = false;
  bool ensure_ascii = false;  // true: non-ASCII as \uXXXX escapes, as json.dumps does
};
std::string to_json(const Value& v, const JsonStyle& style);

}  // namespace cairn::chat::jinja
