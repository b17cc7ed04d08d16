// Operators and lookups with Python's semantics: arithmetic, attribute and item
// access (Jinja2 tries an attribute first for `a.b` and an item first for `a[b]`),
// and slicing by code point.
#include <cmath>

#include "chat/jinja_interp.h"
#include "chat/jinja_strings.h"

namespace cairn::chat::jinja {

namespace {

int64_t as_int64(const Value& v) { return v.is_bool() ? int64_t(v.as_bool()) : v.as_int(); }

[[noreturn]] void unsupported(std::string_view op, const Value& a, const Value& b) {
  if (a.is_undefined()) a.raise_undefined();
  if (b.is_undefined()) b.raise_undefined();
  if (op == "+" && a.is_string())
    fail("TypeError", "can only concatenate str (not \"" + type_name(b) + "\") to str");
  if (op == "+" && a.is_list())
    fail("TypeError", "can only concatenate " + type_name(a) + " (not \"" + type_name(b) +
                          "\") to " + type_name(a));
  fail("TypeError", "unsupported operand type(s) for " + std::string(op) + ": '" + type_name(a) +
                        "' and '" + type_name(b) + "'");
}

Value repeat(Interpreter& in, const Value& seq, int64_t n) {
  if (n <= 0) return seq.is_string() ? Value("") : Value::list({}, seq.as_list().kind);
  if (seq.is_string()) {
    const std::string& s = seq.as_string();
    if (!s.empty()) in.check_size(s.size() * static_cast<size_t>(std::min<int64_t>(n, 1ll << 40)));
    std::string out;
    out.reserve(s.size() * static_cast<size_t>(n));
    for (int64_t i = 0; i < n && !s.empty(); ++i) out += s;
    in.charge(out.size() / 256);
    Value r(std::move(out));
    r.markup = seq.markup;
    return r;
  }
  const auto& items = seq.as_list().items;
  if (!items.empty())
    in.check_size(items.size() * static_cast<size_t>(std::min<int64_t>(n, 1ll << 40)));
  std::vector<Value> out;
  for (int64_t i = 0; i < n && !items.empty(); ++i)
    out.insert(out.end(), items.begin(), items.end());
  in.charge(out.size());
  return Value::list(std::move(out), seq.as_list().kind);
}

double py_fmod(double a, double b) {
  double m = std::fmod(a, b);
  if (m != 0 && ((m < 0) != (b < 0))) m += b;
  return m;
}

}  // namespace

Value arithmetic(Interpreter& in, std::string_view op, const Value& a, const Value& b) {
  const bool nums = a.is_number() && b.is_number();
  const bool ints = nums && !a.is_float() && !b.is_float();
  if (op == "+") {
    if (ints) {
      int64_t r;
      if (__builtin_add_overflow(as_int64(a), as_int64(b), &r))
        fail("OverflowError", "integer overflow");
      return Value(r);
    }
    if (nums) return Value(a.to_double() + b.to_double());
    if (a.is_string() && b.is_string() && (a.markup || b.markup)) {
      std::string l = a.markup ? a.as_string() : html_escape(a.as_string());
      std::string r = b.markup ? b.as_string() : html_escape(b.as_string());
      in.check_size(l.size() + r.size());
      return Value::safe_string(l + r);
    }
    if (a.is_string() && b.is_string()) {
      in.check_size(a.as_string().size() + b.as_string().size());
      in.charge((a.as_string().size() + b.as_string().size()) / 256);
      return Value(a.as_string() + b.as_string());
    }
    if (a.is_list() && b.is_list() && a.as_list().kind == b.as_list().kind &&
        a.as_list().kind != ListKind::Generator) {
      in.check_size(a.as_list().items.size() + b.as_list().items.size());
      std::vector<Value> items = a.as_list().items;
      items.insert(items.end(), b.as_list().items.begin(), b.as_list().items.end());
      in.charge(items.size() / 16);
      return Value::list(std::move(items), a.as_list().kind);
    }
    unsupported(op, a, b);
  }
  if (op == "-") {
    if (ints) {
      int64_t r;
      if (__builtin_sub_overflow(as_int64(a), as_int64(b), &r))
        fail("OverflowError", "integer overflow");
      return Value(r);
    }
    if (nums) return Value(a.to_double() - b.to_double());
    unsupported(op, a, b);
  }
  if (op == "*") {
    if (ints) {
      int64_t r;
      if (__builtin_mul_overflow(as_int64(a), as_int64(b), &r))
        fail("OverflowError", "integer overflow");
      return Value(r);
    }
    if (nums) return Value(a.to_double() * b.to_double());
    bool a_seq = a.is_string() || (a.is_list() && a.as_list().kind != ListKind::Generator);
    bool b_seq = b.is_string() || (b.is_list() && b.as_list().kind != ListKind::Generator);
    if (a_seq && (b.is_int() || b.is_bool())) return repeat(in, a, as_int64(b));
    if (b_seq && (a.is_int() || a.is_bool())) return repeat(in, b, as_int64(a));
    unsupported(op, a, b);
  }
  if (!nums) {
    if (op == "%" && a.is_string()) {
      CallArgs args;
      if (b.is_list() && b.as_list().kind == ListKind::Tuple)
        args.positional = b.as_list().items;
      else
        args.positional.push_back(b);
      return in.apply_filter("format", a, args);
    }
    unsupported(op == "**" ? "** or pow()" : op, a, b);
  }
  if (op == "/") {
    if (b.to_double() == 0) fail("ZeroDivisionError", "division by zero");
    return Value(a.to_double() / b.to_double());
  }
  if (op == "//" || op == "%") {
    if (b.to_double() == 0)
      fail("ZeroDivisionError",
           op == "%" ? "integer modulo by zero" : "integer division or modulo by zero");
    if (ints) {
      int64_t x = as_int64(a), y = as_int64(b);
      if (x == INT64_MIN && y == -1) fail("OverflowError", "integer overflow");
      int64_t q = x / y, r = x % y;
      if (r != 0 && ((r < 0) != (y < 0))) {
        q -= 1;
        r += y;
      }
      return op == "//" ? Value(q) : Value(r);
    }
    double x = a.to_double(), y = b.to_double();
    return op == "//" ? Value(std::floor(x / y)) : Value(py_fmod(x, y));
  }
  if (op == "**") {
    if (ints && as_int64(b) >= 0) {
      int64_t base = as_int64(a), e = as_int64(b), r = 1;
      while (e > 0) {
        if ((e & 1) && __builtin_mul_overflow(r, base, &r))
          fail("OverflowError", "integer overflow");
        e >>= 1;
        if (e > 0 && __builtin_mul_overflow(base, base, &base))
          fail("OverflowError", "integer overflow");
      }
      return Value(r);
    }
    return Value(std::pow(a.to_double(), b.to_double()));
  }
  fail("TemplateRuntimeError", "unknown operator " + std::string(op));
}

Value Interpreter::get_attr(const Value& obj, const std::string& name) {
  if (obj.is_undefined()) obj.raise_undefined();
  if (std::optional<Value> m = find_method(obj, name)) return *m;
  if (obj.is_dict()) {
    if (const Value* v = obj.as_dict().find(std::string_view(name))) return *v;
  } else if (obj.is_namespace()) {
    if (const Value* v = obj.as_namespace().attrs.find(std::string_view(name))) return *v;
  }
  return Value::undefined("UndefinedError: " + py_string_repr(object_type_repr(obj)) +
                          " has no attribute " + py_string_repr(name));
}

Value Interpreter::get_item(const Value& obj, const Value& key) {
  if (obj.is_undefined()) obj.raise_undefined();
  if (obj.is_dict()) {
    if (const Value* v = obj.as_dict().find(key)) return *v;
  } else if ((obj.is_list() && obj.as_list().kind != ListKind::Generator) || obj.is_string()) {
    if (key.is_int() || key.is_bool()) {
      int64_t i = as_int64(key);
      if (obj.is_list()) {
        const auto& items = obj.as_list().items;
        int64_t n = static_cast<int64_t>(items.size());
        if (i < 0) i += n;
        if (i >= 0 && i < n) return items[static_cast<size_t>(i)];
      } else {
        const std::string& s = obj.as_string();
        std::vector<size_t> offs = utf8_offsets(s);
        int64_t n = static_cast<int64_t>(offs.size());
        if (i < 0) i += n;
        if (i >= 0 && i < n) {
          size_t b = offs[static_cast<size_t>(i)];
          size_t e = static_cast<size_t>(i) + 1 < offs.size() ? offs[static_cast<size_t>(i) + 1]
                                                              : s.size();
          return Value(s.substr(b, e - b));
        }
      }
    }
  } else if (obj.is_namespace() && key.is_string()) {
    if (const Value* v = obj.as_namespace().attrs.find(std::string_view(key.as_string())))
      return *v;
  }
  if (key.is_string()) {
    if (std::optional<Value> m = find_method(obj, key.as_string())) return *m;
    return Value::undefined("UndefinedError: " + py_string_repr(object_type_repr(obj)) +
                            " has no attribute " + py_string_repr(key.as_string()));
  }
  return Value::undefined("UndefinedError: " + object_type_repr(obj) + " has no element " +
                          repr(key));
}

Value Interpreter::eval_slice(const Expr& e) {
  Value obj = eval(*e.a);
  Value parts[3];
  for (int i = 0; i < 3; ++i) parts[i] = e.args[i] ? eval(*e.args[i]) : Value(None{});
  if (obj.is_undefined()) obj.raise_undefined();
  for (const Value& p : parts)
    if (!p.is_none() && !p.is_int() && !p.is_bool())
      fail("TypeError", "slice indices must be integers or None");
  int64_t step = parts[2].is_none() ? 1 : as_int64(parts[2]);
  if (step == 0) fail("ValueError", "slice step cannot be zero");
  bool is_str = obj.is_string();
  if (!is_str && !(obj.is_list() && obj.as_list().kind != ListKind::Generator))
    fail("TypeError", "'" + type_name(obj) + "' object is not subscriptable");
  std::vector<size_t> offs;
  int64_t n;
  if (is_str) {
    offs = utf8_offsets(obj.as_string());
    n = static_cast<int64_t>(offs.size());
  } else {
    n = static_cast<int64_t>(obj.as_list().items.size());
  }
  // Python's slice.indices().
  auto clamp = [&](const Value& v, int64_t dflt) -> int64_t {
    if (v.is_none()) return dflt;
    int64_t i = as_int64(v);
    if (i < 0) {
      i += n;
      if (i < 0) i = step < 0 ? -1 : 0;
    } else if (i >= n) {
      i = step < 0 ? n - 1 : n;
    }
    return i;
  };
  int64_t start = clamp(parts[0], step < 0 ? n - 1 : 0);
  int64_t stop = clamp(parts[1], step < 0 ? -1 : n);
  std::vector<int64_t> idx;
  for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) idx.push_back(i);
  charge(idx.size() / 16);
  if (is_str) {
    const std::string& s = obj.as_string();
    std::string out;
    for (int64_t i : idx) {
      size_t b = offs[static_cast<size_t>(i)];
      size_t en =
          static_cast<size_t>(i) + 1 < offs.size() ? offs[static_cast<size_t>(i) + 1] : s.size();
      out.append(s, b, en - b);
    }
    return Value(std::move(out));
  }
  std::vector<Value> out;
  out.reserve(idx.size());
  for (int64_t i : idx) out.push_back(obj.as_list().items[static_cast<size_t>(i)]);
  return Value::list(std::move(out), obj.as_list().kind);
}

}  // namespace cairn::chat::jinja
