// Methods templates call on values ("x".startswith(...), d.items(), d.get(...)) and
// the globals Hugging Face provides (raise_exception, strftime_now) plus Jinja2's
// own (range, namespace, dict, joiner). Mutating methods are refused the way
// Jinja2's ImmutableSandboxedEnvironment refuses them.
#include <algorithm>
#include <cstring>
#include <ctime>

#include "chat/jinja_interp.h"
#include "chat/jinja_strings.h"

namespace cairn::chat::jinja {

namespace {

// Python's sandboxed range() refuses more than this many items.
constexpr int64_t kMaxRange = 100000;

using Method = Value (*)(Interpreter&, const Value& self, CallArgs&);

std::optional<std::string> opt_str(const Value& v) {
  if (v.is_undefined() || v.is_none()) return std::nullopt;
  if (!v.is_string()) fail("TypeError", "expected a string or None, got " + type_name(v));
  return v.as_string();
}

long long opt_int(const Value& v, long long fallback) {
  if (v.is_undefined() || v.is_none()) return fallback;
  if (v.is_int()) return v.as_int();
  if (v.is_bool()) return v.as_bool();
  fail("TypeError", "expected an integer, got " + type_name(v));
}

Value strings_to_list(const std::vector<std::string>& parts) {
  std::vector<Value> out;
  out.reserve(parts.size());
  for (const auto& p : parts) out.emplace_back(p);
  return Value::list(std::move(out));
}

const std::string& self_str(const Value& self) { return self.as_string(); }

// Markup's methods return Markup.
Value keep(const Value& self, std::string r) {
  Value v(std::move(r));
  v.markup = self.markup;
  return v;
}

Value m_strip(Interpreter&, const Value& s, CallArgs& a) {
  return keep(s, py_strip(self_str(s), opt_str(arg(a, 0, "chars")), true, true));
}
Value m_lstrip(Interpreter&, const Value& s, CallArgs& a) {
  return keep(s, py_strip(self_str(s), opt_str(arg(a, 0, "chars")), true, false));
}
Value m_rstrip(Interpreter&, const Value& s, CallArgs& a) {
  return keep(s, py_strip(self_str(s), opt_str(arg(a, 0, "chars")), false, true));
}
Value split_impl(const Value& s, CallArgs& a, bool right) {
  std::optional<std::string> sep = opt_str(arg(a, 0, "sep"));
  if (sep && sep->empty()) fail("ValueError", "empty separator");
  long long maxsplit = opt_int(arg(a, 1, "maxsplit"), -1);
  return strings_to_list(right ? py_rsplit(self_str(s), sep, maxsplit)
                               : py_split(self_str(s), sep, maxsplit));
}
Value m_split(Interpreter&, const Value& s, CallArgs& a) { return split_impl(s, a, false); }
Value m_rsplit(Interpreter&, const Value& s, CallArgs& a) { return split_impl(s, a, true); }
Value m_splitlines(Interpreter&, const Value& s, CallArgs&) {
  return strings_to_list(py_splitlines(self_str(s)));
}

Value affix_impl(const Value& s, CallArgs& a, bool prefix) {
  Value what = arg(a, 0, prefix ? "prefix" : "suffix");
  std::vector<Value> options = what.is_list() && what.as_list().kind == ListKind::Tuple
                                   ? what.as_list().items
                                   : std::vector<Value>{what};
  const std::string& str = self_str(s);
  for (const Value& o : options) {
    if (!o.is_string())
      fail("TypeError", std::string(prefix ? "startswith" : "endswith") +
                            " first arg must be str or a tuple of str, not " + type_name(o));
    const std::string& x = o.as_string();
    if (x.size() <= str.size() && (prefix ? str.compare(0, x.size(), x) == 0
                                          : str.compare(str.size() - x.size(), x.size(), x) == 0))
      return Value(true);
  }
  return Value(false);
}
Value m_startswith(Interpreter&, const Value& s, CallArgs& a) { return affix_impl(s, a, true); }
Value m_endswith(Interpreter&, const Value& s, CallArgs& a) { return affix_impl(s, a, false); }

Value m_upper(Interpreter&, const Value& s, CallArgs&) { return keep(s, py_upper(self_str(s))); }
Value m_lower(Interpreter&, const Value& s, CallArgs&) { return keep(s, py_lower(self_str(s))); }
Value m_title(Interpreter&, const Value& s, CallArgs&) { return keep(s, py_title(self_str(s))); }
Value m_capitalize(Interpreter&, const Value& s, CallArgs&) {
  return keep(s, py_capitalize(self_str(s)));
}

Value m_replace(Interpreter& in, const Value& s, CallArgs& a) {
  Value old = arg(a, 0, "old"), repl = arg(a, 1, "new");
  if (!old.is_string() || !repl.is_string()) fail("TypeError", "replace() arguments must be str");
  CallArgs fa;
  fa.positional = {old, repl, arg(a, 2, "count", Value(None{}))};
  return in.apply_filter("replace", s, fa);
}

Value find_impl(const Value& s, CallArgs& a, bool reverse) {
  Value sub = arg(a, 0, "sub");
  if (!sub.is_string()) fail("TypeError", "must be str, not " + type_name(sub));
  const std::string& str = self_str(s);
  size_t p = reverse ? str.rfind(sub.as_string()) : str.find(sub.as_string());
  if (p == std::string::npos) return Value(-1);
  return Value(static_cast<int64_t>(utf8_length(std::string_view(str).substr(0, p))));
}
Value m_find(Interpreter&, const Value& s, CallArgs& a) { return find_impl(s, a, false); }
Value m_rfind(Interpreter&, const Value& s, CallArgs& a) { return find_impl(s, a, true); }

Value m_count_str(Interpreter&, const Value& s, CallArgs& a) {
  Value sub = arg(a, 0, "sub");
  if (!sub.is_string()) fail("TypeError", "must be str, not " + type_name(sub));
  const std::string& str = self_str(s);
  const std::string& x = sub.as_string();
  if (x.empty()) return Value(static_cast<int64_t>(utf8_length(str) + 1));
  int64_t n = 0;
  for (size_t p = str.find(x); p != std::string::npos; p = str.find(x, p + x.size())) ++n;
  return Value(n);
}

Value m_join(Interpreter& in, const Value& s, CallArgs& a) {
  std::string out;
  bool first = true;
  for (const Value& item : iterate(arg(a, 0, "iterable"))) {
    if (!item.is_string())
      fail("TypeError", "sequence item: expected str instance, " + type_name(item) + " found");
    if (!first) out += self_str(s);
    first = false;
    out += item.as_string();
    in.check_size(out.size());
  }
  return Value(std::move(out));
}

template <bool (*Pred)(unsigned char)>
Value char_class(Interpreter&, const Value& s, CallArgs&) {
  const std::string& str = self_str(s);
  return Value(!str.empty() && std::all_of(str.begin(), str.end(), [](char c) {
    return Pred(static_cast<unsigned char>(c));
  }));
}
bool digit(unsigned char c) { return c >= '0' && c <= '9'; }
bool alpha(unsigned char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c >= 0x80;
}
bool alnum(unsigned char c) { return digit(c) || alpha(c); }
bool space(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

// str.format with automatic or explicit field numbers and keyword names (no specs).
Value m_format(Interpreter& in, const Value& s, CallArgs& a) {
  const std::string& f = self_str(s);
  std::string out;
  size_t auto_index = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    char c = f[i];
    if ((c == '{' || c == '}') && i + 1 < f.size() && f[i + 1] == c) {
      out += c;
      ++i;
      continue;
    }
    if (c == '}') fail("ValueError", "Single '}' encountered in format string");
    if (c != '{') {
      out += c;
      continue;
    }
    size_t close = f.find('}', i);
    if (close == std::string::npos) fail("ValueError", "Single '{' encountered in format string");
    std::string field = f.substr(i + 1, close - i - 1);
    if (field.find_first_of(":!") != std::string::npos)
      fail("ValueError", "format specs are not supported in templates");
    Value v;
    if (field.empty() || std::all_of(field.begin(), field.end(), ::isdigit)) {
      size_t idx = field.empty() ? auto_index++ : std::strtoull(field.c_str(), nullptr, 10);
      if (idx >= a.positional.size())
        fail("IndexError", "Replacement index " + std::to_string(idx) +
                               " out of range for positional args tuple");
      v = a.positional[idx];
    } else {
      v = arg(a, SIZE_MAX, field);
      if (v.is_undefined()) fail("KeyError", py_string_repr(field));
    }
    out += to_str(v);
    in.check_size(out.size());
    i = close;
  }
  return Value(std::move(out));
}

Value m_items(Interpreter&, const Value& d, CallArgs&) {
  std::vector<Value> out;
  for (const auto& [k, v] : d.as_dict().entries)
    out.push_back(Value::list({k, v}, ListKind::Tuple));
  return Value::list(std::move(out));
}
Value m_keys(Interpreter&, const Value& d, CallArgs&) { return Value::list(iterate(d)); }
Value m_values(Interpreter&, const Value& d, CallArgs&) {
  std::vector<Value> out;
  for (const auto& kv : d.as_dict().entries) out.push_back(kv.second);
  return Value::list(std::move(out));
}
Value m_get(Interpreter&, const Value& d, CallArgs& a) {
  if (a.positional.empty()) fail("TypeError", "get expected at least 1 argument, got 0");
  if (const Value* v = d.as_dict().find(a.positional[0])) return *v;
  return arg(a, 1, "default", Value(None{}));
}

Value m_list_count(Interpreter&, const Value& l, CallArgs& a) {
  Value x = arg(a, 0, "value");
  return Value(
      static_cast<int64_t>(std::count_if(l.as_list().items.begin(), l.as_list().items.end(),
                                         [&](const Value& y) { return py_equal(x, y); })));
}
Value m_list_index(Interpreter&, const Value& l, CallArgs& a) {
  Value x = arg(a, 0, "value");
  const auto& items = l.as_list().items;
  for (size_t i = 0; i < items.size(); ++i)
    if (py_equal(items[i], x)) return Value(static_cast<int64_t>(i));
  fail("ValueError", repr(x) + " is not in list");
}

struct MethodEntry {
  Kind kind;
  std::string_view name;
  Method fn;
};
constexpr MethodEntry kMethods[] = {
    {Kind::String, "strip", m_strip},
    {Kind::String, "lstrip", m_lstrip},
    {Kind::String, "rstrip", m_rstrip},
    {Kind::String, "split", m_split},
    {Kind::String, "rsplit", m_rsplit},
    {Kind::String, "splitlines", m_splitlines},
    {Kind::String, "startswith", m_startswith},
    {Kind::String, "endswith", m_endswith},
    {Kind::String, "upper", m_upper},
    {Kind::String, "lower", m_lower},
    {Kind::String, "title", m_title},
    {Kind::String, "capitalize", m_capitalize},
    {Kind::String, "replace", m_replace},
    {Kind::String, "find", m_find},
    {Kind::String, "rfind", m_rfind},
    {Kind::String, "count", m_count_str},
    {Kind::String, "join", m_join},
    {Kind::String, "format", m_format},
    {Kind::String, "isdigit", char_class<digit>},
    {Kind::String, "isalpha", char_class<alpha>},
    {Kind::String, "isalnum", char_class<alnum>},
    {Kind::String, "isspace", char_class<space>},
    {Kind::Dict, "items", m_items},
    {Kind::Dict, "keys", m_keys},
    {Kind::Dict, "values", m_values},
    {Kind::Dict, "get", m_get},
    {Kind::List, "count", m_list_count},
    {Kind::List, "index", m_list_index},
};

constexpr std::string_view kMutators[] = {"append", "extend",     "insert", "pop",
                                          "remove", "clear",      "sort",   "reverse",
                                          "update", "setdefault", "popitem"};

Value g_range(Interpreter& in, CallArgs& a) {
  check_args(a, "range", 3, {});
  if (a.positional.empty()) fail("TypeError", "range expected at least 1 argument, got 0");
  for (const Value& v : a.positional)
    if (!v.is_int() && !v.is_bool())
      fail("TypeError", "'" + type_name(v) + "' object cannot be interpreted as an integer");
  auto n = [&](size_t i) {
    return a.positional[i].is_bool() ? int64_t(a.positional[i].as_bool())
                                     : a.positional[i].as_int();
  };
  int64_t start = a.positional.size() == 1 ? 0 : n(0);
  int64_t stop = a.positional.size() == 1 ? n(0) : n(1);
  int64_t step = a.positional.size() == 3 ? n(2) : 1;
  if (step == 0) fail("ValueError", "range() arg 3 must not be zero");
  // Count without overflow, then refuse big ranges before building them.
  long double span = step > 0 ? (long double)stop - start : (long double)start - stop;
  long double count =
      span <= 0 ? 0 : (span + std::abs((long double)step) - 1) / std::abs((long double)step);
  if (count > kMaxRange)
    fail("OverflowError",
         "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  std::vector<Value> out;
  for (int64_t i = 0, v = start; i < static_cast<int64_t>(count); ++i, v += step)
    out.emplace_back(v);
  in.charge(out.size() / 16);
  return Value::list(std::move(out));
}

Value g_namespace(Interpreter& in, CallArgs& a) {
  DictData d;
  for (const Value& p : a.positional) {
    if (!p.is_dict()) fail("TypeError", "namespace() positional argument must be a mapping");
    for (const auto& [k, v] : p.as_dict().entries) d.set(k, v);
  }
  for (const auto& [k, v] : a.keyword) d.set(Value(k), v);
  return in.make_namespace(std::move(d));
}

Value g_dict(Interpreter&, CallArgs& a) {
  DictData d;
  for (const Value& p : a.positional) {
    if (!p.is_dict()) fail("TypeError", "dict() positional argument must be a mapping");
    for (const auto& [k, v] : p.as_dict().entries) d.set(k, v);
  }
  for (const auto& [k, v] : a.keyword) d.set(Value(k), v);
  return Value::dict(std::move(d));
}

Value g_raise_exception(Interpreter&, CallArgs& a) {
  fail("TemplateError", to_str(arg(a, 0, "message")));
}

Value g_strftime_now(Interpreter& in, CallArgs& a) {
  Value f = arg(a, 0, "format");
  if (!f.is_string()) fail("TypeError", "strftime_now() needs a format string");
  if (f.as_string().size() > 256) fail("ValueError", "strftime format too long");
  char buf[1024];
  size_t n = std::strftime(buf, sizeof buf, f.as_string().c_str(), &in.now());
  return Value(std::string(buf, n));
}

Value g_joiner(Interpreter&, CallArgs& a) {
  std::string sep = to_str(arg(a, 0, "sep", Value(", ")));
  auto used = std::make_shared<bool>(false);
  return Value::callable("joiner", [sep, used](Interpreter&, CallArgs&) -> Value {
    if (!*used) {
      *used = true;
      return Value("");
    }
    return Value(sep);
  });
}

}  // namespace

std::optional<Value> find_method(const Value& obj, std::string_view name) {
  Kind k = obj.kind();
  if (k == Kind::List && obj.as_list().kind == ListKind::Generator) return std::nullopt;
  for (const auto& m : kMethods) {
    if (m.kind != k || m.name != name) continue;
    Method fn = m.fn;
    Value self = obj;
    return Value::callable(std::string(name),
                           [fn, self](Interpreter& in, CallArgs& a) { return fn(in, self, a); });
  }
  if (k == Kind::List || k == Kind::Dict) {
    for (std::string_view mut : kMutators)
      if (mut == name)
        return Value::undefined("SecurityError: access to attribute '" + std::string(name) +
                                "' of '" + type_name(obj) + "' object is unsafe.");
  }
  return std::nullopt;
}

void install_globals(DictData& globals) {
  globals.set(Value("range"), Value::callable("range", g_range));
  globals.set(Value("namespace"), Value::callable("namespace", g_namespace));
  globals.set(Value("dict"), Value::callable("dict", g_dict));
  globals.set(Value("raise_exception"), Value::callable("raise_exception", g_raise_exception));
  globals.set(Value("strftime_now"), Value::callable("strftime_now", g_strftime_now));
  globals.set(Value("joiner"), Value::callable("joiner", g_joiner));
}

}  // namespace cairn::chat::jinja
