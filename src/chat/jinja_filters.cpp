// Jinja2's built-in filters and tests, with Python's behaviour where templates can
// see it (generators from map/select/items are truthy, unserializable and have no
// len(); tojson is Hugging Face's json.dumps without HTML escaping).
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string_view>
#include <utility>

#include "chat/jinja_interp.h"
#include "chat/jinja_strings.h"

namespace cairn::chat::jinja {

namespace {

bool is_seq_list(const Value& v) { return v.is_list() && v.as_list().kind != ListKind::Generator; }

std::optional<std::string> opt_string(const Value& v) {
  if (v.is_undefined() || v.is_none()) return std::nullopt;
  return to_str(v);
}

int64_t int_arg(const Value& v, int64_t fallback, std::string_view what) {
  if (v.is_undefined() || v.is_none()) return fallback;
  if (v.is_int()) return v.as_int();
  if (v.is_bool()) return v.as_bool();
  fail("TypeError", std::string(what) + " must be an integer");
}

Value generator(std::vector<Value> items) {
  return Value::list(std::move(items), ListKind::Generator);
}

// Follows "a.b.0"-style attribute paths as Jinja's make_attrgetter does.
Value attr_path(Interpreter& in, const Value& item, const std::string& path) {
  Value v = item;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string part =
        path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool digits =
        !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit) && part.size() < 18;
    v = digits ? in.get_item(v, Value(static_cast<int64_t>(std::atoll(part.c_str()))))
               : in.get_item(v, Value(part));
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

Value sort_key(Value v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return Value(py_lower(v.as_string()));
  return v;
}

std::vector<Value> items_of(const Value& v) {
  if (v.is_none()) fail("TypeError", "'NoneType' object is not iterable");
  return iterate(v);
}

// --- filters ---
Value f_abs(Interpreter&, const Value& v, CallArgs&) {
  if (v.is_int())
    return v.as_int() == INT64_MIN ? Value(9.2233720368547758e18)
                                   : Value(static_cast<int64_t>(std::llabs(v.as_int())));
  if (v.is_bool()) return Value(static_cast<int64_t>(v.as_bool()));
  if (v.is_float()) return Value(std::fabs(v.as_float()));
  if (v.is_undefined()) v.raise_undefined();
  fail("TypeError", "bad operand type for abs(): '" + type_name(v) + "'");
}

Value f_attr(Interpreter& in, const Value& v, CallArgs& a) {
  return in.get_attr(v, to_str(arg(a, 0, "name")));
}

// Markup's own string methods return Markup; keep the flag through them.
Value same_kind(const Value& in, std::string s) {
  Value r(std::move(s));
  r.markup = in.is_string() && in.markup;
  return r;
}

Value f_capitalize(Interpreter&, const Value& v, CallArgs&) {
  return same_kind(v, py_capitalize(to_str(v)));
}

Value f_center(Interpreter& in, const Value& v, CallArgs& a) {
  std::string s = to_str(v);
  int64_t width = int_arg(arg(a, 0, "width"), 80, "width");
  int64_t len = static_cast<int64_t>(utf8_length(s));
  if (width <= len) return Value(s);
  in.check_size(static_cast<size_t>(width));
  int64_t pad = width - len, left = pad / 2 + (pad & width & 1);
  return Value(std::string(static_cast<size_t>(left), ' ') + s +
               std::string(static_cast<size_t>(pad - left), ' '));
}

Value f_default(Interpreter&, const Value& v, CallArgs& a) {
  Value dflt = arg(a, 0, "default_value", Value(""));
  bool boolean = truthy(arg(a, 1, "boolean", Value(false)));
  if (v.is_undefined() || (boolean && !truthy(v))) return dflt;
  return v;
}

Value f_dictsort(Interpreter& in, const Value& v, CallArgs& a) {
  if (!v.is_dict()) fail("TypeError", "dictsort() needs a mapping");
  bool cs = truthy(arg(a, 0, "case_sensitive", Value(false)));
  std::string by = to_str(arg(a, 1, "by", Value("key")));
  bool reverse = truthy(arg(a, 2, "reverse", Value(false)));
  if (by != "key" && by != "value")
    fail("FilterArgumentError", "You can only sort by either 'key' or 'value'");
  size_t pos = by == "key" ? 0 : 1;
  std::vector<Value> pairs;
  for (const auto& [k, val] : v.as_dict().entries)
    pairs.push_back(Value::list({k, val}, ListKind::Tuple));
  in.charge(pairs.size() * 4);
  std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& x, const Value& y) {
    int c =
        py_compare(sort_key(x.as_list().items[pos], cs), sort_key(y.as_list().items[pos], cs), "<");
    return reverse ? c > 0 : c < 0;
  });
  return Value::list(std::move(pairs));
}

Value f_escape(Interpreter&, const Value& v, CallArgs&) {
  if (v.is_string() && v.markup) return v;
  return Value::safe_string(html_escape(to_str(v)));
}

Value f_first(Interpreter&, const Value& v, CallArgs&) {
  std::vector<Value> items = items_of(v);
  if (items.empty()) return Value::undefined("UndefinedError: No first item, sequence was empty.");
  return items.front();
}

Value f_last(Interpreter&, const Value& v, CallArgs&) {
  if (v.is_list() && v.as_list().kind == ListKind::Generator)
    fail("TypeError", "'generator' object is not reversible");
  std::vector<Value> items = items_of(v);
  if (items.empty()) return Value::undefined("UndefinedError: No last item, sequence was empty.");
  return items.back();
}

std::optional<double> parse_float(std::string_view s) {
  std::string t = py_strip(s, std::nullopt, true, true);
  t.erase(std::remove(t.begin(), t.end(), '_'), t.end());
  if (t.empty()) return std::nullopt;
  char* end = nullptr;
  double d = std::strtod(t.c_str(), &end);
  if (end != t.c_str() + t.size()) return std::nullopt;
  return d;
}

Value f_float(Interpreter&, const Value& v, CallArgs& a) {
  Value dflt = arg(a, 0, "default", Value(0.0));
  if (v.is_number()) return Value(v.to_double());
  if (v.is_string())
    if (auto d = parse_float(v.as_string())) return Value(*d);
  return dflt;
}

Value f_int(Interpreter&, const Value& v, CallArgs& a) {
  Value dflt = arg(a, 0, "default", Value(0));
  int64_t base = int_arg(arg(a, 1, "base"), 10, "base");
  if (v.is_int()) return v;
  if (v.is_bool()) return Value(static_cast<int64_t>(v.as_bool()));
  if (v.is_float()) {
    double d = v.as_float();
    if (!std::isfinite(d) || std::fabs(d) >= 9.2e18) return dflt;
    return Value(static_cast<int64_t>(d));
  }
  if (v.is_string()) {
    std::string t = py_strip(v.as_string(), std::nullopt, true, true);
    t.erase(std::remove(t.begin(), t.end(), '_'), t.end());
    if (!t.empty() && base >= 2 && base <= 36) {
      errno = 0;
      char* end = nullptr;
      long long r = std::strtoll(t.c_str(), &end, static_cast<int>(base));
      if (errno == 0 && end == t.c_str() + t.size()) return Value(static_cast<int64_t>(r));
    }
    if (auto d = parse_float(v.as_string()))
      if (std::isfinite(*d) && std::fabs(*d) < 9.2e18) return Value(static_cast<int64_t>(*d));
  }
  return dflt;
}

Value f_format(Interpreter& in, const Value& v, CallArgs& a) {
  std::string fmt = to_str(v), out;
  size_t next = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    if (i + 1 < fmt.size() && fmt[i + 1] == '%') {
      out += '%';
      ++i;
      continue;
    }
    size_t j = i + 1;
    while (j < fmt.size() &&
           std::string_view("-+ #0123456789.").find(fmt[j]) != std::string_view::npos)
      ++j;
    if (j >= fmt.size()) fail("ValueError", "incomplete format");
    if (next >= a.positional.size()) fail("TypeError", "not enough arguments for format string");
    const Value& x = a.positional[next++];
    char conv = fmt[j];
    std::string spec = fmt.substr(i, j - i);
    char buf[128];
    if (conv == 's' || conv == 'r') {
      std::string text = conv == 's' ? to_str(x) : repr(x);
      size_t k = 1;
      bool left = false;
      while (k < spec.size() && (spec[k] == '-' || spec[k] == '0' || spec[k] == ' ' ||
                                 spec[k] == '+' || spec[k] == '#'))
        left = left || spec[k++] == '-';
      size_t width = std::strtoul(spec.c_str() + k, nullptr, 10);
      size_t len = utf8_length(text);
      in.check_size(out.size() + width);
      if (!left && width > len) out.append(width - len, ' ');
      out += text;
      if (left && width > len) out.append(width - len, ' ');
    } else if ((conv == 'd' || conv == 'i') && x.is_number() && spec.size() < 20) {
      std::snprintf(buf, sizeof buf, (spec + "lld").c_str(), static_cast<long long>(x.to_double()));
      out += buf;
    } else if ((conv == 'f' || conv == 'e' || conv == 'g') && x.is_number() && spec.size() < 20) {
      std::snprintf(buf, sizeof buf, (spec + conv).c_str(), x.to_double());
      out += buf;
    } else {
      fail("TypeError", "unsupported format character '" + std::string(1, conv) + "'");
    }
    in.check_size(out.size());
    i = j;
  }
  if (next < a.positional.size())
    fail("TypeError", "not all arguments converted during string formatting");
  return Value(std::move(out));
}

Value f_indent(Interpreter& in, const Value& v, CallArgs& a) {
  Value w = arg(a, 0, "width", Value(4));
  bool first = truthy(arg(a, 1, "first", Value(false)));
  bool blank = truthy(arg(a, 2, "blank", Value(false)));
  std::string ind =
      w.is_string()
          ? w.as_string()
          : std::string(
                static_cast<size_t>(std::clamp<int64_t>(int_arg(w, 4, "width"), 0, 1 << 16)), ' ');
  std::string s = to_str(v) + "\n";  // Jinja2's quirk for splitlines
  std::vector<std::string> lines = py_splitlines(s);
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) {
      out += '\n';
      if (blank || !lines[i].empty()) out += ind;
    }
    out += lines[i];
    in.check_size(out.size());
  }
  if (first) out = ind + out;
  return Value(std::move(out));
}

Value f_items(Interpreter&, const Value& v, CallArgs&) {
  if (v.is_undefined()) return generator({});
  if (!v.is_dict()) fail("TypeError", "Can only get item pairs from a mapping.");
  std::vector<Value> out;
  for (const auto& [k, val] : v.as_dict().entries)
    out.push_back(Value::list({k, val}, ListKind::Tuple));
  return generator(std::move(out));
}

Value f_join(Interpreter& in, const Value& v, CallArgs& a) {
  std::string sep = to_str(arg(a, 0, "d", Value("")));
  Value attribute = arg(a, 1, "attribute", Value(None{}));
  std::string out;
  bool first = true;
  for (const Value& item : items_of(v)) {
    if (!first) out += sep;
    first = false;
    out += to_str(attribute.is_none() ? item : attr_path(in, item, to_str(attribute)));
    in.check_size(out.size());
  }
  return Value(std::move(out));
}

Value f_length(Interpreter&, const Value& v, CallArgs&) {
  switch (v.kind()) {
    case Kind::Undefined:
      return Value(0);
    case Kind::String:
      return Value(static_cast<int64_t>(utf8_length(v.as_string())));
    case Kind::Dict:
      return Value(static_cast<int64_t>(v.as_dict().entries.size()));
    case Kind::List:
      if (v.as_list().kind != ListKind::Generator)
        return Value(static_cast<int64_t>(v.as_list().items.size()));
      [[fallthrough]];
    default:
      fail("TypeError", "object of type '" + type_name(v) + "' has no len()");
  }
}

Value f_list(Interpreter&, const Value& v, CallArgs&) { return Value::list(items_of(v)); }

Value f_lower(Interpreter&, const Value& v, CallArgs&) { return same_kind(v, py_lower(to_str(v))); }
Value f_upper(Interpreter&, const Value& v, CallArgs&) { return same_kind(v, py_upper(to_str(v))); }
Value f_title(Interpreter&, const Value& v, CallArgs&) { return same_kind(v, py_title(to_str(v))); }

Value f_map(Interpreter& in, const Value& v, CallArgs& a) {
  std::vector<Value> out;
  if (!truthy(v)) return generator({});  // Jinja2 maps over nothing for any falsy value
  Value attribute = arg(a, 99, "attribute");
  if (!attribute.is_undefined()) {
    Value dflt = arg(a, 99, "default");
    for (const Value& item : items_of(v)) {
      Value r = attr_path(in, item, to_str(attribute));
      out.push_back(r.is_undefined() && !dflt.is_undefined() ? dflt : r);
    }
    return generator(std::move(out));
  }
  if (a.positional.empty()) fail("FilterArgumentError", "map requires a filter argument");
  std::string name = to_str(a.positional[0]);
  CallArgs rest;
  rest.positional.assign(a.positional.begin() + 1, a.positional.end());
  rest.keyword = a.keyword;
  for (const Value& item : items_of(v)) {
    CallArgs copy = rest;
    out.push_back(in.apply_filter(name, item, copy));
  }
  return generator(std::move(out));
}

Value minmax(Interpreter& in, const Value& v, CallArgs& a, bool want_max) {
  bool cs = truthy(arg(a, 0, "case_sensitive", Value(false)));
  Value attribute = arg(a, 1, "attribute", Value(None{}));
  std::vector<Value> items = items_of(v);
  if (items.empty())
    return Value::undefined(std::string("UndefinedError: No aggregated item, sequence was empty."));
  size_t best = 0;
  auto key = [&](const Value& x) {
    return sort_key(attribute.is_none() ? x : attr_path(in, x, to_str(attribute)), cs);
  };
  for (size_t i = 1; i < items.size(); ++i) {
    int c = py_compare(key(items[i]), key(items[best]), "<");
    if (want_max ? c > 0 : c < 0) best = i;
  }
  return items[best];
}
Value f_max(Interpreter& in, const Value& v, CallArgs& a) { return minmax(in, v, a, true); }
Value f_min(Interpreter& in, const Value& v, CallArgs& a) { return minmax(in, v, a, false); }

Value f_pprint(Interpreter&, const Value& v, CallArgs&) { return Value(repr(v)); }

// select/reject (test on the item) and selectattr/rejectattr (test on an attribute).
Value select_impl(Interpreter& in, const Value& v, CallArgs& a, bool attr, bool keep) {
  size_t first_test = attr ? 1 : 0;
  std::string attribute = attr ? to_str(arg(a, 0, "attribute")) : "";
  std::vector<Value> out;
  if (!truthy(v)) return generator({});  // Jinja2 selects from nothing for any falsy value
  for (const Value& item : items_of(v)) {
    Value x = attr ? attr_path(in, item, attribute) : item;
    bool ok;
    if (a.positional.size() <= first_test) {
      ok = truthy(x);
    } else {
      CallArgs targs;
      targs.positional.assign(a.positional.begin() + static_cast<long>(first_test) + 1,
                              a.positional.end());
      ok = in.apply_test(to_str(a.positional[first_test]), x, targs);
    }
    if (ok == keep) out.push_back(item);
  }
  return generator(std::move(out));
}
Value f_select(Interpreter& in, const Value& v, CallArgs& a) {
  return select_impl(in, v, a, false, true);
}
Value f_reject(Interpreter& in, const Value& v, CallArgs& a) {
  return select_impl(in, v, a, false, false);
}
Value f_selectattr(Interpreter& in, const Value& v, CallArgs& a) {
  return select_impl(in, v, a, true, true);
}
Value f_rejectattr(Interpreter& in, const Value& v, CallArgs& a) {
  return select_impl(in, v, a, true, false);
}

Value f_replace(Interpreter& in, const Value& v, CallArgs& a) {
  std::string s = to_str(v);
  std::string old = to_str(arg(a, 0, "old")), repl = to_str(arg(a, 1, "new"));
  long long count = int_arg(arg(a, 2, "count", Value(None{})), -1, "count");
  size_t hits = old.empty() ? utf8_length(s) + 1 : 0;
  for (size_t p = old.empty() ? std::string::npos : s.find(old); p != std::string::npos;
       p = s.find(old, p + old.size()))
    ++hits;
  in.check_size(s.size() + hits * repl.size());
  return Value(py_replace(s, old, repl, count));
}

Value f_reverse(Interpreter&, const Value& v, CallArgs&) {
  if (v.is_string()) {
    std::vector<Value> chars = iterate(v);
    std::string out;
    for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += it->as_string();
    return Value(std::move(out));
  }
  std::vector<Value> items = items_of(v);
  std::reverse(items.begin(), items.end());
  return generator(std::move(items));
}

Value f_round(Interpreter&, const Value& v, CallArgs& a) {
  int64_t precision = int_arg(arg(a, 0, "precision", Value(0)), 0, "precision");
  std::string method = to_str(arg(a, 1, "method", Value("common")));
  if (v.is_undefined()) v.raise_undefined();
  if (!v.is_number())
    fail("TypeError", "type " + type_name(v) + " doesn't define __round__ method");
  if (method == "common" && !v.is_float()) return v.is_bool() ? Value(int64_t(v.as_bool())) : v;
  double scale = std::pow(10.0, static_cast<double>(std::clamp<int64_t>(precision, -308, 308)));
  double x = v.to_double() * scale;
  double r;
  if (method == "common")
    r = std::nearbyint(x);  // Python's round(): half to even
  else if (method == "ceil")
    r = std::ceil(x);
  else if (method == "floor")
    r = std::floor(x);
  else
    fail("FilterArgumentError", "method must be common, ceil or floor");
  return Value(r / scale);
}

Value f_safe(Interpreter&, const Value& v, CallArgs&) { return Value::safe_string(to_str(v)); }

Value f_sort(Interpreter& in, const Value& v, CallArgs& a) {
  bool reverse = truthy(arg(a, 0, "reverse", Value(false)));
  bool cs = truthy(arg(a, 1, "case_sensitive", Value(false)));
  Value attribute = arg(a, 2, "attribute", Value(None{}));
  std::vector<Value> items = items_of(v);
  in.charge(items.size() * 4);
  auto key = [&](const Value& x) {
    return sort_key(attribute.is_none() ? x : attr_path(in, x, to_str(attribute)), cs);
  };
  std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
    int c = py_compare(key(x), key(y), "<");
    return reverse ? c > 0 : c < 0;
  });
  return Value::list(std::move(items));
}

Value f_string(Interpreter&, const Value& v, CallArgs&) {
  return v.is_string() ? v : Value(to_str(v));
}

Value f_sum(Interpreter& in, const Value& v, CallArgs& a) {
  Value attribute = arg(a, 0, "attribute", Value(None{}));
  Value total = arg(a, 1, "start", Value(0));
  for (const Value& item : items_of(v))
    total = arithmetic(in, "+", total,
                       attribute.is_none() ? item : attr_path(in, item, to_str(attribute)));
  return total;
}

Value f_tojson(Interpreter& in, const Value& v, CallArgs& a) {
  check_args(a, "tojson", 1, {"indent", "ensure_ascii", "separators", "sort_keys"});
  JsonStyle st;
  Value indent = arg(a, 0, "indent", Value(None{}));
  if (!indent.is_none() && !indent.is_undefined()) {
    st.indented = true;
    st.item_sep = ",";
    st.indent = indent.is_string() ? indent.as_string()
                                   : std::string(static_cast<size_t>(std::clamp<int64_t>(
                                                     int_arg(indent, 0, "indent"), 0, 64)),
                                                 ' ');
  }
  Value seps = arg(a, 99, "separators", Value(None{}));
  if (seps.is_list() && seps.as_list().items.size() == 2) {
    st.item_sep = to_str(seps.as_list().items[0]);
    st.key_sep = to_str(seps.as_list().items[1]);
  }
  st.sort_keys = truthy(arg(a, 99, "sort_keys", Value(false)));
  st.ensure_ascii = truthy(arg(a, 99, "ensure_ascii", Value(false)));
  std::string out = to_json(v, st);
  in.check_size(out.size());
  return Value(std::move(out));
}

Value f_trim(Interpreter&, const Value& v, CallArgs& a) {
  return same_kind(v, py_strip(to_str(v), opt_string(arg(a, 0, "chars")), true, true));
}

Value f_truncate(Interpreter&, const Value& v, CallArgs& a) {
  std::string s = to_str(v);
  int64_t length = int_arg(arg(a, 0, "length", Value(255)), 255, "length");
  bool killwords = truthy(arg(a, 1, "killwords", Value(false)));
  std::string end = to_str(arg(a, 2, "end", Value("...")));
  int64_t leeway = int_arg(arg(a, 3, "leeway", Value(5)), 5, "leeway");
  std::vector<size_t> offs = utf8_offsets(s);
  int64_t n = static_cast<int64_t>(offs.size());
  if (n <= length + leeway) return Value(s);
  int64_t keep = std::max<int64_t>(0, length - static_cast<int64_t>(utf8_length(end)));
  std::string head = s.substr(0, keep < n ? offs[static_cast<size_t>(keep)] : s.size());
  if (!killwords) {
    size_t sp = head.rfind(' ');
    if (sp != std::string::npos) head.resize(sp);
  }
  return Value(head + end);
}

Value f_unique(Interpreter& in, const Value& v, CallArgs& a) {
  bool cs = truthy(arg(a, 0, "case_sensitive", Value(false)));
  Value attribute = arg(a, 1, "attribute", Value(None{}));
  std::vector<Value> out, seen;
  for (const Value& item : items_of(v)) {
    Value key = sort_key(attribute.is_none() ? item : attr_path(in, item, to_str(attribute)), cs);
    in.charge(seen.size() / 16);
    if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return py_equal(s, key); })) {
      seen.push_back(key);
      out.push_back(item);
    }
  }
  return generator(std::move(out));
}

Value f_wordcount(Interpreter&, const Value& v, CallArgs&) {
  return Value(static_cast<int64_t>(py_split(to_str(v), std::nullopt, -1).size()));
}

struct FilterEntry {
  std::string_view name;
  FilterFn fn;
};
constexpr FilterEntry kFilters[] = {
    {"abs", f_abs},
    {"attr", f_attr},
    {"capitalize", f_capitalize},
    {"center", f_center},
    {"count", f_length},
    {"d", f_default},
    {"default", f_default},
    {"dictsort", f_dictsort},
    {"e", f_escape},
    {"escape", f_escape},
    {"first", f_first},
    {"float", f_float},
    {"format", f_format},
    {"indent", f_indent},
    {"int", f_int},
    {"items", f_items},
    {"join", f_join},
    {"last", f_last},
    {"length", f_length},
    {"list", f_list},
    {"lower", f_lower},
    {"map", f_map},
    {"max", f_max},
    {"min", f_min},
    {"pprint", f_pprint},
    {"reject", f_reject},
    {"rejectattr", f_rejectattr},
    {"replace", f_replace},
    {"reverse", f_reverse},
    {"round", f_round},
    {"safe", f_safe},
    {"select", f_select},
    {"selectattr", f_selectattr},
    {"sort", f_sort},
    {"string", f_string},
    {"sum", f_sum},
    {"title", f_title},
    {"tojson", f_tojson},
    {"trim", f_trim},
    {"truncate", f_truncate},
    {"unique", f_unique},
    {"upper", f_upper},
    {"wordcount", f_wordcount},
};

// --- tests ---
const Value& test_arg(const CallArgs& a, std::string_view test) {
  if (a.positional.empty()) fail("TypeError", "test '" + std::string(test) + "' needs an argument");
  return a.positional[0];
}

bool t_defined(Interpreter&, const Value& v, CallArgs&) { return !v.is_undefined(); }
bool t_undefined(Interpreter&, const Value& v, CallArgs&) { return v.is_undefined(); }
bool t_none(Interpreter&, const Value& v, CallArgs&) { return v.is_none(); }
bool t_boolean(Interpreter&, const Value& v, CallArgs&) { return v.is_bool(); }
bool t_true(Interpreter&, const Value& v, CallArgs&) { return v.is_bool() && v.as_bool(); }
bool t_false(Interpreter&, const Value& v, CallArgs&) { return v.is_bool() && !v.as_bool(); }
bool t_integer(Interpreter&, const Value& v, CallArgs&) { return v.is_int(); }
bool t_float(Interpreter&, const Value& v, CallArgs&) { return v.is_float(); }
bool t_number(Interpreter&, const Value& v, CallArgs&) { return v.is_number(); }
bool t_string(Interpreter&, const Value& v, CallArgs&) { return v.is_string(); }
bool t_mapping(Interpreter&, const Value& v, CallArgs&) { return v.is_dict(); }
bool t_iterable(Interpreter&, const Value& v, CallArgs&) {
  return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
}
bool t_sequence(Interpreter&, const Value& v, CallArgs&) {
  return v.is_undefined() || v.is_string() || is_seq_list(v) || v.is_dict();
}
bool t_callable(Interpreter&, const Value& v, CallArgs&) { return v.is_callable(); }
bool t_escaped(Interpreter&, const Value&, CallArgs&) { return false; }
bool t_lower(Interpreter&, const Value& v, CallArgs&) {
  return v.is_string() && py_lower(v.as_string()) == v.as_string() &&
         py_upper(v.as_string()) != v.as_string();
}
bool t_upper(Interpreter&, const Value& v, CallArgs&) {
  return v.is_string() && py_upper(v.as_string()) == v.as_string() &&
         py_lower(v.as_string()) != v.as_string();
}
int64_t int_operand(const Value& v, std::string_view test) {
  if (v.is_undefined()) v.raise_undefined();
  if (v.is_int()) return v.as_int();
  if (v.is_bool()) return v.as_bool();
  if (v.is_float() && v.as_float() == std::floor(v.as_float()) && std::fabs(v.as_float()) < 9e18)
    return static_cast<int64_t>(v.as_float());
  fail("TypeError", "test '" + std::string(test) + "' needs a number, got " + type_name(v));
}
bool t_odd(Interpreter&, const Value& v, CallArgs&) { return int_operand(v, "odd") % 2 != 0; }
bool t_even(Interpreter&, const Value& v, CallArgs&) { return int_operand(v, "even") % 2 == 0; }
bool t_divisibleby(Interpreter&, const Value& v, CallArgs& a) {
  int64_t d = int_operand(test_arg(a, "divisibleby"), "divisibleby");
  if (d == 0) fail("ZeroDivisionError", "integer division or modulo by zero");
  return d == -1 || int_operand(v, "divisibleby") % d == 0;
}
bool t_eq(Interpreter&, const Value& v, CallArgs& a) { return py_equal(v, test_arg(a, "eq")); }
bool t_ne(Interpreter&, const Value& v, CallArgs& a) { return !py_equal(v, test_arg(a, "ne")); }
bool t_lt(Interpreter&, const Value& v, CallArgs& a) {
  return py_compare(v, test_arg(a, "lt"), "<") < 0;
}
bool t_le(Interpreter&, const Value& v, CallArgs& a) {
  return py_compare(v, test_arg(a, "le"), "<=") <= 0;
}
bool t_gt(Interpreter&, const Value& v, CallArgs& a) {
  return py_compare(v, test_arg(a, "gt"), ">") > 0;
}
bool t_ge(Interpreter&, const Value& v, CallArgs& a) {
  return py_compare(v, test_arg(a, "ge"), ">=") >= 0;
}
bool t_sameas(Interpreter&, const Value& v, CallArgs& a) {
  const Value& o = test_arg(a, "sameas");
  if (v.kind() != o.kind()) return false;
  switch (v.kind()) {
    case Kind::List:
      return &v.as_list() == &o.as_list();
    case Kind::Dict:
      return &v.as_dict() == &o.as_dict();
    case Kind::Callable:
      return &v.as_callable() == &o.as_callable();
    case Kind::Namespace:
      return &v.as_namespace() == &o.as_namespace();
    default:
      return py_equal(v, o);  // immutable scalars: identity is equality here
  }
}
bool t_in(Interpreter&, const Value& v, CallArgs& a) {
  const Value& seq = test_arg(a, "in");
  switch (seq.kind()) {
    case Kind::Undefined:
      return false;
    case Kind::String:
      if (!v.is_string())
        fail("TypeError", "'in <string>' requires string as left operand, not " + type_name(v));
      return seq.as_string().find(v.as_string()) != std::string::npos;
    case Kind::Dict:
      return seq.as_dict().find(v) != nullptr;
    case Kind::List:
      return std::any_of(seq.as_list().items.begin(), seq.as_list().items.end(),
                         [&](const Value& x) { return py_equal(x, v); });
    default:
      fail("TypeError", "argument of type '" + type_name(seq) + "' is not iterable");
  }
}

struct TestEntry {
  std::string_view name;
  TestFn fn;
};
constexpr TestEntry kTests[] = {
    {"defined", t_defined},
    {"undefined", t_undefined},
    {"none", t_none},
    {"boolean", t_boolean},
    {"true", t_true},
    {"false", t_false},
    {"integer", t_integer},
    {"float", t_float},
    {"number", t_number},
    {"string", t_string},
    {"mapping", t_mapping},
    {"iterable", t_iterable},
    {"sequence", t_sequence},
    {"callable", t_callable},
    {"escaped", t_escaped},
    {"lower", t_lower},
    {"upper", t_upper},
    {"odd", t_odd},
    {"even", t_even},
    {"divisibleby", t_divisibleby},
    {"eq", t_eq},
    {"equalto", t_eq},
    {"==", t_eq},
    {"ne", t_ne},
    {"!=", t_ne},
    {"lt", t_lt},
    {"lessthan", t_lt},
    {"<", t_lt},
    {"le", t_le},
    {"<=", t_le},
    {"gt", t_gt},
    {"greaterthan", t_gt},
    {">", t_gt},
    {"ge", t_ge},
    {">=", t_ge},
    {"sameas", t_sameas},
    {"in", t_in},
};

}  // namespace

FilterFn find_filter(std::string_view name) {
  for (const auto& f : kFilters)
    if (f.name == name) return f.fn;
  return nullptr;
}

TestFn find_test(std::string_view name) {
  for (const auto& t : kTests)
    if (t.name == name) return t.fn;
  return nullptr;
}

}  // namespace cairn::chat::jinja
