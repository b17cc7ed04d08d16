// grammar/json_schema.cpp — JSON Schema to GBNF.
#include "grammar/json_schema.h"

#include "grammar/grammar.h"
#include "grammar/regex.h"
#include "grammar/text.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <vector>

namespace cairn::grammar {
namespace {

using Json = nlohmann::ordered_json;

// The rules every schema's grammar may use. Whitespace between tokens is one
// space or a line break and its indent, so a model cannot pad forever;
// strings hold any JSON string character.
const char* kPrimitives = R"(ws ::= ( " " | "\n" [ \t]{0,20} )?
json-char ::= [^"\\\x00-\x1f] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} )
json-string ::= "\"" json-char* "\""
json-int ::= "-"? ( "0" | [1-9] [0-9]{0,15} )
json-number ::= json-int ( "." [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,3} )?
json-boolean ::= "true" | "false"
json-null ::= "null"
json-value ::= json-object | json-array | json-string | json-number | json-boolean | json-null
json-object ::= "{" ws ( json-string ws ":" ws json-value ( ws "," ws json-string ws ":" ws json-value )* )? ws "}"
json-array ::= "[" ws ( json-value ( ws "," ws json-value )* )? ws "]"
)";

std::string literal(const std::string& s) { return gbnf_literal(s); }

// Decimal integers in [lo, hi] (both non-negative, as strings of equal length).
std::string digits_between(const std::string& lo, const std::string& hi) {
  if (lo.empty()) return "";
  if (lo[0] == hi[0]) {
    const std::string rest = digits_between(lo.substr(1), hi.substr(1));
    return literal(std::string(1, lo[0])) + (rest.empty() ? "" : " " + rest);
  }
  const size_t n = lo.size() - 1;
  const std::string any = n == 0 ? "" : " [0-9]{" + std::to_string(n) + "}";
  std::vector<std::string> alts;
  const bool lo_full = lo.substr(1) == std::string(n, '0');
  const bool hi_full = hi.substr(1) == std::string(n, '9');
  const char a = lo_full ? lo[0] : (char)(lo[0] + 1);
  const char b = hi_full ? hi[0] : (char)(hi[0] - 1);
  if (!lo_full) {
    const std::string rest = digits_between(lo.substr(1), std::string(n, '9'));
    alts.push_back(literal(std::string(1, lo[0])) + " " + rest);
  }
  if (a <= b) alts.push_back("[" + std::string(1, a) + "-" + std::string(1, b) + "]" + any);
  if (!hi_full) {
    const std::string rest = digits_between(std::string(n, '0'), hi.substr(1));
    alts.push_back(literal(std::string(1, hi[0])) + " " + rest);
  }
  std::string out = "(";
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
  return out + ")";
}

constexpr uint64_t kUnbounded = std::numeric_limits<uint64_t>::max();

// Non-negative integers in [lo, hi] (hi kUnbounded: no bound), no leading zeros.
std::string naturals(uint64_t lo, uint64_t hi) {
  std::vector<std::string> alts;
  const bool bounded = hi != kUnbounded;
  const std::string los = std::to_string(lo);
  const size_t max_len = bounded ? std::to_string(hi).size() : 20;
  for (size_t len = los.size(); len <= max_len; ++len) {
    const std::string first = len == los.size() ? los : "1" + std::string(len - 1, '0');
    std::string last = std::string(len, '9');
    if (bounded && len == max_len) last = std::to_string(hi);
    if (!bounded && len == max_len) {  // every longer number: no upper bound
      alts.push_back("[1-9] [0-9]{" + std::to_string(len - 1) + ",}");
      break;
    }
    if (len == 1 && first == "0") {
      alts.push_back(digits_between(first, last));
      continue;
    }
    alts.push_back(digits_between(first, last));
  }
  std::string out = "(";
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
  return out + ")";
}

// A non-negative decimal as digit strings: the integer part without leading
// zeros ("0" for none), the fraction without trailing zeros.
struct Decimal {
  std::string whole = "0", frac;
};

// A bound from JSON as an exact decimal of its shortest text (1e-05 too),
// or nullopt beyond what a grammar here spells (|x| >= 1e15, more than 15
// fraction digits).
std::optional<std::pair<bool, Decimal>> to_decimal(const nlohmann::ordered_json& v) {
  std::string t = v.dump();
  bool negative = false;
  if (!t.empty() && t[0] == '-') {
    negative = true;
    t.erase(0, 1);
  }
  int exp = 0;
  if (const size_t e = t.find_first_of("eE"); e != std::string::npos) {
    exp = std::atoi(t.c_str() + e + 1);
    t.erase(e);
  }
  std::string digits = t;
  int point = (int)digits.size();
  if (const size_t dot = digits.find('.'); dot != std::string::npos) {
    point = (int)dot;
    digits.erase(dot, 1);
  }
  point += exp;
  if (point > 15 || (int)digits.size() - point > 15) return std::nullopt;
  while (point < 0) {
    digits.insert(0, "0");
    ++point;
  }
  while ((int)digits.size() < point) digits += '0';
  Decimal d;
  d.whole = digits.substr(0, (size_t)point);
  d.frac = digits.substr((size_t)point);
  d.whole.erase(0, std::min(d.whole.find_first_not_of('0'), d.whole.size()));
  if (d.whole.empty()) d.whole = "0";
  while (!d.frac.empty() && d.frac.back() == '0') d.frac.pop_back();
  if (d.whole == "0" && d.frac.empty()) negative = false;
  return std::pair<bool, Decimal>(negative, d);
}

std::string alternatives(const std::vector<std::string>& alts) {
  if (alts.empty()) return "";
  if (alts.size() == 1) return alts[0];
  std::string out = "(";
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
  return out + ")";
}

std::string quoted(const std::string& digits) { return "\"" + digits + "\""; }

const char* kAnyDigits = "[0-9]{0,14}";
const char* kNonZeroDigits = "[0-9]{0,13} [1-9] [0-9]{0,13}";  // some digit is not 0

std::string drop_trailing_zeros(std::string s) {
  while (!s.empty() && s.back() == '0') s.pop_back();
  return s;
}

// Non-empty fraction digit strings d with 0.d >= 0.b (> when strict); b has
// no trailing zeros.
std::string fraction_at_least(const std::string& b, bool strict) {
  if (b.empty()) return strict ? kNonZeroDigits : "[0-9]{1,15}";
  std::vector<std::string> alts;
  if (b[0] < '9') alts.push_back("[" + std::string(1, (char)(b[0] + 1)) + "-9] " + kAnyDigits);
  const std::string rest = b.substr(1);
  alts.push_back(quoted(b.substr(0, 1)) + " " +
                 (rest.empty() ? (strict ? kNonZeroDigits : kAnyDigits) : fraction_at_least(rest, strict)));
  return alternatives(alts);
}

// Non-empty fraction digit strings d with 0.d <= 0.c (< when strict); c has
// no trailing zeros. Empty when there is none.
std::string fraction_at_most(const std::string& c, bool strict) {
  if (c.empty()) return strict ? "" : "\"0\"{1,15}";
  std::vector<std::string> alts;
  if (c[0] > '0') alts.push_back("[0-" + std::string(1, (char)(c[0] - 1)) + "] " + kAnyDigits);
  const std::string rest = c.substr(1);
  if (rest.empty()) {
    if (!strict) alts.push_back(quoted(c) + " \"0\"{0,14}");  // c itself
  } else {
    const std::string tail = fraction_at_most(rest, strict);
    alts.push_back(quoted(c.substr(0, 1)) + (tail.empty() ? "" : " ( " + tail + " )?"));
  }
  return alternatives(alts);
}

// Non-empty fraction digit strings between 0.b and 0.c (b < c; each end
// inclusive or strict).
std::string fraction_between(std::string b, bool b_strict, std::string c, bool c_strict) {
  const size_t n = std::max(b.size(), c.size());
  b.resize(n, '0');
  c.resize(n, '0');
  size_t k = 0;
  while (k < n && b[k] == c[k]) ++k;
  if (k == n) return (b_strict || c_strict) ? "" : quoted(drop_trailing_zeros(b)) + " \"0\"{0,14}";
  std::vector<std::string> alts;
  if (c[k] - b[k] > 1)
    alts.push_back("[" + std::string(1, (char)(b[k] + 1)) + "-" + std::string(1, (char)(c[k] - 1)) + "] " + kAnyDigits);
  const std::string brest = drop_trailing_zeros(b.substr(k + 1));
  alts.push_back(quoted(b.substr(k, 1)) + " " +
                 (brest.empty() ? (b_strict ? kNonZeroDigits : kAnyDigits) : fraction_at_least(brest, b_strict)));
  const std::string crest = drop_trailing_zeros(c.substr(k + 1));
  if (crest.empty()) {
    if (!c_strict) alts.push_back(quoted(c.substr(k, 1)) + " \"0\"{0,14}");
  } else {
    const std::string tail = fraction_at_most(crest, c_strict);
    alts.push_back(quoted(c.substr(k, 1)) + (tail.empty() ? "" : " ( " + tail + " )?"));
  }
  const std::string prefix = b.substr(0, k);
  return (prefix.empty() ? "" : quoted(prefix) + " ") + alternatives(alts);
}

// A whole part followed by an optional fraction: `bare` says whether the
// whole number itself is in range, `fraction` the allowed digits ("" none).
std::string with_fraction(const std::string& whole, bool bare, const std::string& fraction) {
  if (fraction.empty()) return bare ? whole : "";
  const std::string f = "\".\" " + fraction;
  return whole + (bare ? " ( " + f + " )?" : " " + f);
}

// Non-negative decimals (no sign, no exponent) in [lo, hi], hi absent:
// unbounded; "" when there is none.
std::string decimals_between(const Decimal& lo, bool lo_strict, const std::optional<Decimal>& hi, bool hi_strict) {
  // The whole number n = lo.whole is >= lo when lo has no fraction (and the
  // end is inclusive); n = hi.whole is <= hi unless hi == n and strict.
  const bool lo_bare = lo.frac.empty() && !lo_strict;
  std::vector<std::string> alts;
  if (hi && hi->whole == lo.whole) {
    const bool bare = lo_bare && !(hi->frac.empty() && hi_strict);
    return with_fraction(quoted(lo.whole), bare, fraction_between(lo.frac, lo_strict, hi->frac, hi_strict));
  }
  alts.push_back(with_fraction(quoted(lo.whole), lo_bare, fraction_at_least(lo.frac, lo_strict)));
  const uint64_t nlo = std::stoull(lo.whole);
  const uint64_t nhi = hi ? std::stoull(hi->whole) : kUnbounded;
  if (!hi || nhi > nlo + 1)
    alts.push_back(naturals(nlo + 1, hi ? nhi - 1 : kUnbounded) + " ( \".\" [0-9]{1,15} )?");
  if (hi) {
    const std::string s = with_fraction(quoted(hi->whole), !(hi->frac.empty() && hi_strict),
                                        fraction_at_most(hi->frac, hi_strict));
    if (!s.empty()) alts.push_back(s);
  }
  std::erase(alts, std::string());
  return alternatives(alts);
}

class Compiler {
 public:
  explicit Compiler(const Json& root, std::string prefix = {}) : root_(root), prefix_(std::move(prefix)) {}

  Result<std::string> run() {
    CAIRN_ASSIGN_OR_RETURN(const std::string rules, run_rules("root"));
    return rules + kPrimitives;
  }

  // The schema's own rules, its value as `value_rule` (no whitespace around
  // it when named otherwise than root, whose text keeps its padding).
  Result<std::string> run_rules(const std::string& value_rule) {
    auto r = visit(root_, "root", "");
    if (!r) return r.status();
    std::string out = value_rule == "root" ? "root ::= ws " + *r + " ws\n" : value_rule + " ::= " + *r + "\n";
    for (const auto& [name, body] : rules_) out += name + " ::= " + body + "\n";
    return out;
  }

 private:
  static Status unsupported(const std::string& path, const std::string& what) {
    return Status::invalid_argument("JSON schema at '" + (path.empty() ? "#" : "#" + path) +
                                    "': " + what + " is not supported");
  }

  // A fresh rule name from a hint (letters, digits, dashes).
  std::string name_for(const std::string& hint) {
    std::string base;
    for (char c : hint) base += (std::isalnum((unsigned char)c) ? (char)std::tolower(c) : '-');
    if (base.empty()) base = "r";
    std::string name = prefix_ + "s-" + base;
    for (int k = 2; rules_.count(name) || reserved_.count(name); ++k)
      name = prefix_ + "s-" + base + "-" + std::to_string(k);
    reserved_.insert(name);
    return name;
  }

  // Keywords that only hold for one type's values.
  static inline const std::vector<std::pair<std::string, std::vector<const char*>>> kTypeKeywords = {
      {"object", {"properties", "additionalProperties", "required"}},
      {"array", {"items", "prefixItems", "minItems", "maxItems"}},
      {"string", {"minLength", "maxLength", "pattern", "format"}},
      {"integer", {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}},
  };

  static bool is_annotation(const std::string& k) {
    static const std::set<std::string> kAnnotations = {"title", "description", "examples", "default", "$schema",
                                                       "$id", "$comment", "strict", "$defs", "definitions",
                                                       "readOnly", "writeOnly", "deprecated"};
    return kAnnotations.count(k) > 0;
  }

  // Whether `s` (an object) has a keyword that constrains values.
  static bool has_validation(const Json& s) {
    for (const auto& [k, v] : s.items())
      if (!is_annotation(k)) return true;
    return false;
  }

  // `s` with a top-level $ref replaced by its target (a chain followed).
  Result<Json> inline_refs(Json s, const std::string& path) {
    for (int hops = 0; s.is_object() && s.contains("$ref"); ++hops) {
      if (hops > 16) return unsupported(path, "a $ref chain longer than 16");
      for (const auto& [k, v] : s.items())
        if (k != "$ref" && !is_annotation(k))
          return unsupported(path + "/" + k, "the keyword '" + k + "' beside '$ref' (wrap both in an allOf)");
      CAIRN_ASSIGN_OR_RETURN(s, resolve(s["$ref"], path));
    }
    return s;
  }

  // The types a schema's values may have ("integer" within "number").
  static std::set<std::string> json_types_of(const Json& v) {
    if (v.is_null()) return {"null"};
    if (v.is_boolean()) return {"boolean"};
    if (v.is_number_integer() || (v.is_number_float() && std::floor(v.get<double>()) == v.get<double>()))
      return {"integer", "number"};
    if (v.is_number()) return {"number"};
    if (v.is_string()) return {"string"};
    if (v.is_array()) return {"array"};
    return {"object"};
  }

  // The schema that holds exactly where both `a` and `b` hold, for the
  // keywords where that is simple (bounds tighten, types and enums
  // intersect, required names join, properties merge one by one); any other
  // disagreement is refused, naming the keyword.
  Result<Json> merge(const Json& a, const Json& b, const std::string& path) {
    if (b.is_boolean()) {
      if (b.get<bool>()) return a;
      return Result<Json>(unsupported(path, "the schema 'false' in an allOf"));
    }
    if (a.is_boolean()) return merge(b, a, path);
    if (!a.is_object() || !b.is_object()) return Result<Json>(unsupported(path, "a schema that is not an object"));
    Json out = a;
    for (const auto& [k, v] : b.items()) {
      if (is_annotation(k)) continue;
      if (!out.contains(k)) {
        out[k] = v;
        continue;
      }
      Json& mine = out[k];
      if (mine == v) continue;
      if (k == "minimum" || k == "exclusiveMinimum" || k == "minLength" || k == "minItems") {
        if (!mine.is_number() || !v.is_number()) return Result<Json>(unsupported(path + "/" + k, "'" + k + "' that is not a number"));
        if (v.get<double>() > mine.get<double>()) mine = v;
      } else if (k == "maximum" || k == "exclusiveMaximum" || k == "maxLength" || k == "maxItems") {
        if (!mine.is_number() || !v.is_number()) return Result<Json>(unsupported(path + "/" + k, "'" + k + "' that is not a number"));
        if (v.get<double>() < mine.get<double>()) mine = v;
      } else if (k == "required") {
        if (!mine.is_array() || !v.is_array()) return Result<Json>(unsupported(path + "/required", "'required' that is not a list"));
        for (const auto& r : v)
          if (std::find(mine.begin(), mine.end(), r) == mine.end()) mine.push_back(r);
      } else if (k == "type") {
        const auto list = [](const Json& t) {
          std::vector<std::string> out;
          if (t.is_string()) out.push_back(t.get<std::string>());
          if (t.is_array())
            for (const auto& x : t)
              if (x.is_string()) out.push_back(x.get<std::string>());
          return out;
        };
        Json both = Json::array();
        for (const std::string& x : list(mine))
          for (const std::string& y : list(v)) {
            std::string t = x == y ? x : (x == "integer" && y == "number") || (x == "number" && y == "integer") ? "integer" : "";
            if (!t.empty() && std::find(both.begin(), both.end(), Json(t)) == both.end()) both.push_back(t);
          }
        if (both.empty()) return Result<Json>(unsupported(path + "/type", "an allOf whose parts share no type"));
        mine = both.size() == 1 ? both[0] : both;
      } else if (k == "enum" || k == "const") {
        return Result<Json>(unsupported(path + "/" + k, "an allOf whose parts both restrict '" + k + "'"));
      } else if (k == "properties") {
        if (!mine.is_object() || !v.is_object()) return Result<Json>(unsupported(path + "/properties", "'properties' that is not an object"));
        for (const auto& [p, ps] : v.items())
          mine[p] = mine.contains(p) ? Json{{"allOf", Json::array({mine[p], ps})}} : ps;
      } else if (k == "items") {
        mine = Json{{"allOf", Json::array({mine, v})}};
      } else {
        return Result<Json>(unsupported(path + "/" + k, "an allOf whose parts disagree on '" + k + "'"));
      }
    }
    // A part that allows no other keys must declare every merged property.
    for (const Json* part : {&a, &b}) {
      if (!part->contains("additionalProperties") || (*part)["additionalProperties"] != false || !out.contains("properties")) continue;
      for (const auto& [p, ps] : out["properties"].items())
        if (!part->contains("properties") || !(*part)["properties"].contains(p))
          return Result<Json>(unsupported(path, "an allOf where the property '" + p + "' is not allowed by a part with additionalProperties false"));
    }
    return out;
  }

  // Whether no value can match both `a` and `b` (as compiled here), by their
  // types, integer ranges, or for objects a required key the other does
  // not declare.
  Result<bool> disjoint(const Json& a0, const Json& b0, const std::string& path) {
    CAIRN_ASSIGN_OR_RETURN(const Json a, inline_refs(a0, path));
    CAIRN_ASSIGN_OR_RETURN(const Json b, inline_refs(b0, path));
    const auto types = [&](const Json& s) -> std::set<std::string> {
      if (!s.is_object()) return {};
      std::set<std::string> out;
      if (s.contains("const")) return json_types_of(s["const"]);
      if (s.contains("enum") && s["enum"].is_array()) {
        for (const auto& v : s["enum"])
          for (const auto& t : json_types_of(v)) out.insert(t);
        return out;
      }
      if (s.contains("type")) {
        const Json& t = s["type"];
        for (const Json& x : t.is_array() ? t : Json::array({t}))
          if (x.is_string()) {
            out.insert(x.get<std::string>());
            if (x == "integer") out.insert("number");
          }
        return out;
      }
      for (const auto& [t, keys] : kTypeKeywords)
        for (const char* key : keys)
          if (s.contains(key)) out.insert(t == "integer" ? "number" : t);
      if (out.empty() || s.contains("anyOf") || s.contains("oneOf") || s.contains("allOf"))
        return {"null", "boolean", "number", "integer", "string", "array", "object"};
      return out;
    };
    std::set<std::string> common;
    const auto ta = types(a), tb = types(b);
    std::set_intersection(ta.begin(), ta.end(), tb.begin(), tb.end(), std::inserter(common, common.begin()));
    if (common.empty()) return true;
    const bool plain = !a.contains("enum") && !b.contains("enum") && !a.contains("const") && !b.contains("const");
    if (a.contains("const") && b.contains("const")) return a["const"] != b["const"];
    if (plain && common == std::set<std::string>{"integer", "number"} && a.value("type", Json()) == "integer" &&
        b.value("type", Json()) == "integer") {
      const auto range = [](const Json& s) {
        double lo = -1e300, hi = 1e300;
        if (s.contains("minimum") && s["minimum"].is_number()) lo = std::max(lo, s["minimum"].get<double>());
        if (s.contains("exclusiveMinimum") && s["exclusiveMinimum"].is_number()) lo = std::max(lo, std::floor(s["exclusiveMinimum"].get<double>()) + 1);
        if (s.contains("maximum") && s["maximum"].is_number()) hi = std::min(hi, s["maximum"].get<double>());
        if (s.contains("exclusiveMaximum") && s["exclusiveMaximum"].is_number()) hi = std::min(hi, std::ceil(s["exclusiveMaximum"].get<double>()) - 1);
        return std::pair<double, double>(std::ceil(lo), std::floor(hi));
      };
      const auto [alo, ahi] = range(a);
      const auto [blo, bhi] = range(b);
      return ahi < blo || bhi < alo;
    }
    if (plain && common == std::set<std::string>{"object"}) {
      // Each must require a key the other does not declare (outputs hold
      // only declared keys unless additionalProperties allows more).
      const auto needs_foreign = [](const Json& x, const Json& y) {
        if (y.contains("additionalProperties") && y["additionalProperties"] != false) return false;
        if (!x.contains("required") || !x["required"].is_array()) return false;
        for (const auto& r : x["required"])
          if (r.is_string() && !(y.contains("properties") && y["properties"].is_object() && y["properties"].contains(r.get<std::string>())))
            return true;
        return false;
      };
      if (needs_foreign(a, b) && needs_foreign(b, a)) return true;
      // Or a discriminator: a key required by both whose const values differ.
      if (a.contains("properties") && b.contains("properties") && a.contains("required") && b.contains("required"))
        for (const auto& r : a["required"]) {
          if (!r.is_string() || std::find(b["required"].begin(), b["required"].end(), r) == b["required"].end()) continue;
          const std::string key = r.get<std::string>();
          if (!a["properties"].contains(key) || !b["properties"].contains(key)) continue;
          const Json& pa = a["properties"][key];
          const Json& pb = b["properties"][key];
          if (pa.is_object() && pb.is_object() && (pa.contains("const") || pa.contains("enum")) &&
              (pb.contains("const") || pb.contains("enum"))) {
            CAIRN_ASSIGN_OR_RETURN(const bool apart, disjoint(pa, pb, path));
            if (apart) return true;
          }
        }
      return false;
    }
    if (a.contains("enum") || a.contains("const") || b.contains("enum") || b.contains("const")) {
      // Values listed on one side (or both) against the other's types.
      const auto values = [](const Json& s) {
        return s.contains("const") ? Json::array({s["const"]}) : s.contains("enum") ? s["enum"] : Json();
      };
      const Json va = values(a), vb = values(b);
      if (va.is_array() && vb.is_array()) {
        for (const auto& x : va)
          if (std::find(vb.begin(), vb.end(), x) != vb.end()) return false;
        return true;
      }
    }
    return false;
  }

  // const / enum: the listed values, those of them the schema's type allows;
  // other keywords beside them are refused, not ignored.
  Result<std::string> enumeration(const Json& s, const std::string& path) {
    for (const auto& [k, v] : s.items())
      if (k != "const" && k != "enum" && k != "type" && !is_annotation(k))
        return unsupported(path + "/" + k, "the keyword '" + k + "' beside 'enum' or 'const'");
    Json values = Json::array();
    if (s.contains("const")) {
      if (s.contains("enum")) return unsupported(path, "'const' and 'enum' together");
      values.push_back(s["const"]);
    } else {
      if (!s["enum"].is_array() || s["enum"].empty()) return unsupported(path + "/enum", "an enum that is not a non-empty list");
      values = s["enum"];
    }
    std::set<std::string> allowed;
    if (s.contains("type")) {
      const Json& t = s["type"];
      for (const Json& x : t.is_array() ? t : Json::array({t}))
        if (x.is_string()) allowed.insert(x.get<std::string>());
    }
    std::string out = "(";
    bool first = true;
    for (const auto& v : values) {
      if (!allowed.empty()) {
        bool ok = false;
        for (const auto& t : json_types_of(v)) ok = ok || allowed.count(t);
        if (!ok) continue;
      }
      out += (first ? "" : " | ") + literal(v.dump());
      first = false;
    }
    if (first) return unsupported(path, "an enum none of whose values has the schema's type");
    return out + ")";
  }

  // The grammar expression for `s` (a rule name or an inline expression).
  Result<std::string> visit(const Json& s, const std::string& hint, const std::string& path) {
    if (++depth_ > 64) return unsupported(path, "nesting deeper than 64 levels");
    struct Leave {
      int& d;
      ~Leave() { --d; }
    } leave{depth_};
    if (s.is_boolean()) return s.get<bool>() ? std::string("json-value") : Result<std::string>(unsupported(path, "the schema 'false'"));
    if (!s.is_object()) return unsupported(path, "a schema that is not an object");
    static const std::set<std::string> kIgnored = {"title", "description", "examples", "default",
                                                   "$schema", "$id", "$comment", "strict",
                                                   "$defs", "definitions", "readOnly", "writeOnly",
                                                   "deprecated"};
    static const std::set<std::string> kKnown = {
        "type", "properties", "required", "additionalProperties", "items", "prefixItems",
        "minItems", "maxItems", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "minLength",
        "maxLength", "format", "pattern", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
    for (const auto& [k, v] : s.items())
      if (!kIgnored.count(k) && !kKnown.count(k)) return unsupported(path + "/" + k, "the keyword '" + k + "'");

    if (s.contains("$ref")) {
      // Keywords beside a $ref apply too; merging them into a possibly
      // recursive target is not done, so they are refused, not dropped.
      for (const auto& [k, v] : s.items())
        if (k != "$ref" && !kIgnored.count(k))
          return unsupported(path + "/" + k, "the keyword '" + k + "' beside '$ref' (wrap both in an allOf)");
      return ref(s, path);
    }
    if (s.contains("allOf")) return all_of(s, hint, path);
    for (const char* k : {"anyOf", "oneOf"}) {
      if (!s.contains(k)) continue;
      if (!s[k].is_array() || s[k].empty()) return unsupported(path + "/" + k, std::string("'") + k + "' that is not a non-empty list");
      // The keywords beside the list hold for every branch: each branch is
      // compiled merged with them.
      Json rest = s;
      rest.erase(k);
      const bool shared = has_validation(rest);
      std::vector<Json> branches;
      for (size_t i = 0; i < s[k].size(); ++i) {
        const std::string p = path + "/" + k + "/" + std::to_string(i);
        if (!shared) {
          branches.push_back(s[k][i]);
          continue;
        }
        CAIRN_ASSIGN_OR_RETURN(Json b, inline_refs(s[k][i], p));
        CAIRN_ASSIGN_OR_RETURN(Json m, merge(rest, b, p));
        branches.push_back(std::move(m));
      }
      // oneOf: exactly one branch may match. A grammar cannot count matches,
      // so the branches must be provably disjoint; otherwise it is refused.
      if (std::string(k) == "oneOf")
        for (size_t i = 0; i < branches.size(); ++i)
          for (size_t j = i + 1; j < branches.size(); ++j) {
            CAIRN_ASSIGN_OR_RETURN(const bool apart, disjoint(branches[i], branches[j], path));
            if (!apart)
              return unsupported(path + "/oneOf", "'oneOf' whose branches " + std::to_string(i) + " and " + std::to_string(j) +
                                                      " may both match (cairn cannot ensure only one does; use anyOf)");
          }
      std::string out = "(";
      for (size_t i = 0; i < branches.size(); ++i) {
        CAIRN_ASSIGN_OR_RETURN(const std::string alt, visit(branches[i], hint + "-" + std::to_string(i), path + "/" + k + "/" + std::to_string(i)));
        out += (i ? " | " : "") + alt;
      }
      return out + ")";
    }
    if (s.contains("const") || s.contains("enum")) return enumeration(s, path);

    std::vector<std::string> types;
    if (s.contains("type")) {
      if (s["type"].is_string()) {
        types.push_back(s["type"].get<std::string>());
      } else if (s["type"].is_array()) {
        for (const auto& t : s["type"]) {
          if (!t.is_string()) return unsupported(path + "/type", "a type that is not a string");
          types.push_back(t.get<std::string>());
        }
      } else {
        return unsupported(path + "/type", "a type that is not a string or a list");
      }
    } else {
      // Without a type, a keyword of one type's holds only for values of
      // that type: outputs keep to that type (a subset of what the schema
      // accepts); keywords of several types at once are refused.
      std::string inferred;
      for (const auto& [t, keys] : kTypeKeywords)
        for (const char* key : keys)
          if (s.contains(key) && inferred != t) {
            if (!inferred.empty())
              return unsupported(path, "keywords of both " + inferred + "s and " + t + "s without a 'type'");
            inferred = t;
          }
      if (inferred.empty()) return std::string("json-value");
      types.push_back(inferred);
    }
    std::string out = types.size() > 1 ? "(" : "";
    for (size_t i = 0; i < types.size(); ++i) {
      CAIRN_ASSIGN_OR_RETURN(const std::string one, typed(s, types[i], hint, path));
      out += (i ? " | " : "") + one;
    }
    return types.size() > 1 ? out + ")" : out;
  }

  Result<std::string> typed(const Json& s, const std::string& type, const std::string& hint,
                            const std::string& path) {
    if (type == "null") return std::string("json-null");
    if (type == "boolean") return std::string("json-boolean");
    if (type == "string") return string(s, hint, path);
    if (type == "integer") return integer(s, path);
    if (type == "number") return number(s, path);
    if (type == "object") return object(s, hint, path);
    if (type == "array") return array(s, hint, path);
    return unsupported(path + "/type", "the type '" + type + "'");
  }

  Result<std::string> string(const Json& s, const std::string& hint, const std::string& path) {
    if (s.contains("pattern")) {
      if (!s["pattern"].is_string()) return unsupported(path + "/pattern", "a pattern that is not a string");
      if (s.contains("format") || s.contains("minLength") || s.contains("maxLength"))
        return unsupported(path, "a pattern together with a format or a length bound");
      auto re = regex_to_gbnf(s["pattern"].get<std::string>(), RegexContext::JsonString);
      if (!re) return unsupported(path + "/pattern", re.status().message() + ", in the pattern");
      const std::string name = name_for(hint + "-pattern");
      rules_[name] = "\"\\\"\" " + *re + " \"\\\"\"";
      return name;
    }
    if (s.contains("format")) {
      const std::string f = s["format"].is_string() ? s["format"].get<std::string>() : "";
      // Days as each month has them; 29 February only in leap years
      // (divisible by 4, centuries only by 400).
      const std::string day28 = "( \"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8] )";
      const std::string date =
          "( [0-9]{4} \"-\" ( ( \"0\" [13578] | \"1\" [02] ) \"-\" ( " + day28 + " | \"29\" | \"3\" [01] ) | "
          "( \"0\" [469] | \"11\" ) \"-\" ( " + day28 + " | \"29\" | \"30\" ) | \"02-\" " + day28 + " ) | "
          "( [0-9]{2} ( [02468] [48] | [2468] \"0\" | [13579] [26] ) | ( [02468] [048] | [13579] [26] ) \"00\" ) \"-02-29\" )";
      const std::string time = "( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]{1,9} )? ( \"Z\" | [+-] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )";
      std::string body;
      if (f == "date") body = date;
      else if (f == "time") body = time;
      else if (f == "date-time") body = date + " \"T\" " + time;
      else if (f == "uuid") body = "[0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{12}";
      else if (f == "email") {
        // Dot-separated atoms before the @; a domain of labels that start
        // and end with a letter or digit, at least two of them.
        const std::string atom = "[a-zA-Z0-9!#$%&'*+/=?^_`{|}~-]{1,32}";
        const std::string label = "[a-zA-Z0-9] ( [a-zA-Z0-9-]{0,30} [a-zA-Z0-9] )?";
        body = atom + " ( \".\" " + atom + " ){0,4} \"@\" " + label + " ( \".\" " + label + " ){1,4}";
      }
      else return unsupported(path + "/format", "the string format '" + f + "'");
      if (s.contains("minLength") || s.contains("maxLength"))
        return unsupported(path, "a length bound together with a format");
      const std::string name = name_for(hint + "-" + f);
      rules_[name] = "\"\\\"\" " + body + " \"\\\"\"";
      return name;
    }
    int64_t lo = 0, hi = -1;
    if (s.contains("minLength")) {
      if (!s["minLength"].is_number_unsigned()) return unsupported(path + "/minLength", "a minLength that is not a non-negative integer");
      lo = s["minLength"].get<int64_t>();
    }
    if (s.contains("maxLength")) {
      if (!s["maxLength"].is_number_unsigned()) return unsupported(path + "/maxLength", "a maxLength that is not a non-negative integer");
      hi = s["maxLength"].get<int64_t>();
    }
    if (lo > 10000 || hi > 10000) return unsupported(path, "a string length bound beyond 10000");
    if (hi >= 0 && hi < lo) return unsupported(path, "maxLength below minLength");
    if (lo == 0 && hi < 0) return std::string("json-string");
    return std::string("( \"\\\"\" json-char{" + std::to_string(lo) + "," + (hi >= 0 ? std::to_string(hi) : "") + "} \"\\\"\" )");
  }

  Result<std::string> integer(const Json& s, const std::string& path) {
    std::optional<int64_t> lo, hi;
    const auto bound = [&](const char* k, int64_t shift, std::optional<int64_t>& out, bool is_min) -> Status {
      if (!s.contains(k)) return Status::ok();
      const Json& v = s[k];
      if (!v.is_number()) return unsupported(path + "/" + k, std::string("'") + k + "' that is not a number");
      const double d = v.get<double>();
      if (!(d > -9e15 && d < 9e15)) return unsupported(path + "/" + k, std::string("'") + k + "' beyond 9e15");
      // The integers past a fractional bound start at its ceiling (floor for a maximum).
      int64_t b = is_min ? (int64_t)std::ceil(d) : (int64_t)std::floor(d);
      if (shift != 0 && (double)b == d) b += shift;
      if (!out || (is_min ? b > *out : b < *out)) out = b;
      return Status::ok();
    };
    CAIRN_RETURN_IF_ERROR(bound("minimum", 0, lo, true));
    CAIRN_RETURN_IF_ERROR(bound("exclusiveMinimum", 1, lo, true));
    CAIRN_RETURN_IF_ERROR(bound("maximum", 0, hi, false));
    CAIRN_RETURN_IF_ERROR(bound("exclusiveMaximum", -1, hi, false));
    if (!lo && !hi) return std::string("json-int");
    if (lo && hi && *lo > *hi) return unsupported(path, "integer bounds with no integer between them");
    std::vector<std::string> alts;
    // Negative part: -[max(1, -hi), -lo].
    if (!lo || *lo < 0) {
      const uint64_t nlo = hi && *hi < 0 ? (uint64_t)(-*hi) : 1;
      const uint64_t nhi = lo ? (uint64_t)(-*lo) : kUnbounded;
      alts.push_back("\"-\" " + naturals(nlo, nhi));
    }
    if (!hi || *hi >= 0) {
      const uint64_t plo = lo && *lo > 0 ? (uint64_t)*lo : 0;
      const uint64_t phi = hi ? (uint64_t)*hi : kUnbounded;
      alts.push_back(naturals(plo, phi));
    }
    std::string out = "(";
    for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
    return out + ")";
  }

  // Bounded numbers are written as decimals without an exponent (up to 15
  // digits each side of the point), which covers every value in range.
  Result<std::string> number(const Json& s, const std::string& path) {
    struct End {
      bool set = false, strict = false, negative = false;
      Decimal d;
      double v = 0;
    };
    End lo, hi;
    const auto bound = [&](const char* k, bool strict, End& end, bool is_min) -> Status {
      if (!s.contains(k)) return Status::ok();
      if (!s[k].is_number()) return unsupported(path + "/" + k, std::string("'") + k + "' that is not a number");
      const auto d = to_decimal(s[k]);
      if (!d) return unsupported(path + "/" + k, std::string("'") + k + "' beyond 1e15 or with more than 15 decimals");
      const double v = s[k].get<double>();
      // Both forms given: the tighter one holds.
      if (end.set && (is_min ? !(v > end.v || (v == end.v && strict)) : !(v < end.v || (v == end.v && strict))))
        return Status::ok();
      end = End{true, strict, d->first, d->second, v};
      return Status::ok();
    };
    CAIRN_RETURN_IF_ERROR(bound("minimum", false, lo, true));
    CAIRN_RETURN_IF_ERROR(bound("exclusiveMinimum", true, lo, true));
    CAIRN_RETURN_IF_ERROR(bound("maximum", false, hi, false));
    CAIRN_RETURN_IF_ERROR(bound("exclusiveMaximum", true, hi, false));
    if (!lo.set && !hi.set) return std::string("json-number");
    if (lo.set && hi.set && (lo.v > hi.v || (lo.v == hi.v && (lo.strict || hi.strict))))
      return unsupported(path, "number bounds with no number between them");
    std::vector<std::string> alts;
    // Negative values: "-" and their magnitude, which is above 0 and at most
    // -lo; at least -hi when hi is negative.
    if (!lo.set || lo.negative) {
      Decimal mag_lo;  // 0, strictly
      bool mag_lo_strict = true;
      if (hi.set && hi.negative) {
        mag_lo = hi.d;
        mag_lo_strict = hi.strict;
      }
      std::optional<Decimal> mag_hi;
      if (lo.set) mag_hi = lo.d;
      const std::string neg = decimals_between(mag_lo, mag_lo_strict, mag_hi, lo.set && lo.strict);
      if (!neg.empty()) alts.push_back("\"-\" " + neg);
    }
    // Values from 0 (or lo when it is not negative) up to hi.
    if (!hi.set || !hi.negative) {
      const bool from_lo = lo.set && !lo.negative;
      std::optional<Decimal> top;
      if (hi.set) top = hi.d;
      const std::string pos = decimals_between(from_lo ? lo.d : Decimal{}, from_lo && lo.strict, top, hi.set && hi.strict);
      if (!pos.empty()) alts.push_back(pos);
    }
    if (alts.empty()) return unsupported(path, "number bounds with no number between them");
    std::string out = "(";
    for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
    return out + ")";
  }

  Result<std::string> object(const Json& s, const std::string& hint, const std::string& path) {
    std::vector<std::pair<std::string, std::string>> props;  // key literal, value expression
    std::set<std::string> required;
    if (s.contains("required")) {
      if (!s["required"].is_array()) return unsupported(path + "/required", "'required' that is not a list");
      for (const auto& r : s["required"]) {
        if (!r.is_string()) return unsupported(path + "/required", "a required name that is not a string");
        required.insert(r.get<std::string>());
      }
    }
    std::vector<bool> is_required;
    if (s.contains("properties")) {
      if (!s["properties"].is_object()) return unsupported(path + "/properties", "'properties' that is not an object");
      for (const auto& [k, v] : s["properties"].items()) {
        CAIRN_ASSIGN_OR_RETURN(const std::string value, visit(v, hint + "-" + k, path + "/properties/" + k));
        props.emplace_back(literal(Json(k).dump()), value);
        is_required.push_back(required.count(k) > 0);
      }
    }
    for (const std::string& r : required)
      if (!s.contains("properties") || !s["properties"].contains(r))
        return unsupported(path + "/required", "a required property '" + r + "' without a schema in 'properties'");
    // Extra keys: only when additionalProperties says so (true or a schema);
    // absent counts as false once properties are listed, so outputs hold
    // exactly the declared keys.
    std::string extra;
    if (s.contains("additionalProperties")) {
      const Json& a = s["additionalProperties"];
      if (a.is_boolean()) {
        if (a.get<bool>()) extra = "json-value";
      } else {
        CAIRN_ASSIGN_OR_RETURN(extra, visit(a, hint + "-extra", path + "/additionalProperties"));
      }
    } else if (props.empty()) {
      extra = "json-value";
    }
    const std::string name = name_for(hint);
    const size_t n = props.size();
    std::string extra_key = "json-string";
    if (!extra.empty() && n > 0) {
      std::vector<std::string> keys;
      for (const auto& [k, v] : s["properties"].items()) keys.push_back(k);
      extra_key = key_not_in(keys, name);
    }
    // after[i]: properties i.. once something was written (each with a
    // leading comma); first[i]: the same when nothing was written yet.
    std::vector<std::string> after(n + 1), first(n + 1);
    const std::string extra_kv = extra.empty() ? "" : extra_key + " ws \":\" ws " + extra;
    const std::string tail_name = name + "-tail";
    rules_[tail_name] = extra.empty() ? "\"\"" : "( ws \",\" ws " + extra_kv + " )*";
    reserved_.insert(tail_name);
    after[n] = tail_name;
    first[n] = extra.empty() ? "\"\"" : "( " + extra_kv + " " + tail_name + " )?";
    for (size_t i = n; i-- > 0;) {
      const std::string kv = props[i].first + " ws \":\" ws " + props[i].second;
      const std::string a = name + "-a" + std::to_string(i), f = name + "-f" + std::to_string(i);
      reserved_.insert(a);
      reserved_.insert(f);
      if (is_required[i]) {
        rules_[a] = "ws \",\" ws " + kv + " " + after[i + 1];
        rules_[f] = kv + " " + after[i + 1];
      } else {
        rules_[a] = "( ws \",\" ws " + kv + " )? " + after[i + 1];
        rules_[f] = kv + " " + after[i + 1] + " | " + first[i + 1];
      }
      after[i] = a;
      first[i] = f;
    }
    rules_[name] = "\"{\" ws " + first[0] + " ws \"}\"";
    return name;
  }

  // A JSON string that is none of `keys` (an additional property must not
  // repeat a declared one with another schema): a trie of the keys' code
  // points, where leaving the trie frees the rest. Escapes are left out of
  // such keys, so "\u0061" cannot stand in for "a".
  std::string key_not_in(const std::vector<std::string>& keys, const std::string& base) {
    struct Node {
      std::map<uint32_t, size_t> next;
      bool terminal = false;
    };
    std::vector<Node> trie(1);
    for (const std::string& k : keys) {
      size_t n = 0;
      for (size_t i = 0; i < k.size();) {
        const unsigned char c = (unsigned char)k[i];
        const int len = std::max(1, utf8_length(c));
        uint32_t cp = len == 1 ? c : c & (0x7F >> len);
        for (int j = 1; j < len && i + (size_t)j < k.size(); ++j) cp = (cp << 6) | ((unsigned char)k[i + (size_t)j] & 0x3F);
        i += (size_t)len;
        const auto it = trie[n].next.find(cp);
        if (it != trie[n].next.end()) {
          n = it->second;
        } else {
          trie.push_back({});
          trie[n].next[cp] = trie.size() - 1;
          n = trie.size() - 1;
        }
      }
      trie[n].terminal = true;
    }
    const std::string free = base + "-key-rest";
    rules_[free] = "[^\"\\\\\\x00-\\x1f]* \"\\\"\"";
    reserved_.insert(free);
    const auto hex = [](uint32_t cp) {
      char buf[16];
      std::snprintf(buf, sizeof buf, "\\U%08X", cp);
      return std::string(buf);
    };
    for (size_t i = trie.size(); i-- > 0;) {
      const std::string rule = base + "-key" + std::to_string(i);
      reserved_.insert(rule);
      std::string alts, others = "[^\"\\\\\\x00-\\x1f";
      if (!trie[i].terminal) alts = "\"\\\"\"";
      for (const auto& [cp, child] : trie[i].next) {
        alts += (alts.empty() ? "" : " | ") + std::string("[") + hex(cp) + "] " + base + "-key" + std::to_string(child);
        others += hex(cp);
      }
      alts += (alts.empty() ? "" : " | ") + others + "] " + free;
      rules_[rule] = alts;
    }
    return "\"\\\"\" " + base + "-key0";
  }

  Result<std::string> array(const Json& s, const std::string& hint, const std::string& path) {
    std::vector<std::string> prefix;
    if (s.contains("prefixItems")) {
      if (!s["prefixItems"].is_array()) return unsupported(path + "/prefixItems", "'prefixItems' that is not a list");
      for (size_t i = 0; i < s["prefixItems"].size(); ++i) {
        CAIRN_ASSIGN_OR_RETURN(const std::string e, visit(s["prefixItems"][i], hint + "-" + std::to_string(i), path + "/prefixItems/" + std::to_string(i)));
        prefix.push_back(e);
      }
    }
    std::string item = "json-value";
    bool more = true;
    if (s.contains("items")) {
      if (s["items"].is_boolean() && !s["items"].get<bool>()) {
        more = false;
      } else {
        CAIRN_ASSIGN_OR_RETURN(item, visit(s["items"], hint + "-item", path + "/items"));
      }
    } else if (!prefix.empty()) {
      more = false;  // a tuple: exactly its items unless items says otherwise
    }
    int64_t lo = 0, hi = -1;
    if (s.contains("minItems")) {
      if (!s["minItems"].is_number_unsigned()) return unsupported(path + "/minItems", "a minItems that is not a non-negative integer");
      lo = s["minItems"].get<int64_t>();
    }
    if (s.contains("maxItems")) {
      if (!s["maxItems"].is_number_unsigned()) return unsupported(path + "/maxItems", "a maxItems that is not a non-negative integer");
      hi = s["maxItems"].get<int64_t>();
    }
    if (lo > 1000 || hi > 1000) return unsupported(path, "an item count bound beyond 1000");
    if (hi >= 0 && hi < lo) return unsupported(path, "maxItems below minItems");
    const int64_t np = (int64_t)prefix.size();
    if (!more && lo > np) return unsupported(path, "minItems above the tuple's length");
    const std::string name = name_for(hint);
    // The prefix items in order, each but the first after a comma, then the
    // rest: enough to reach minItems, at most maxItems.
    std::string body;
    const int64_t fixed = hi >= 0 ? std::min(np, hi) : np;
    for (int64_t i = 0; i < fixed; ++i) {
      // Prefix item i is optional once minItems is met.
      if (i < lo)
        body += (i ? " ws \",\" ws " : "") + prefix[(size_t)i];
      else
        body += (i ? " ( ws \",\" ws " : " ( ") + prefix[(size_t)i];
    }
    std::string closes;
    for (int64_t i = lo; i < fixed; ++i) closes += " )?";
    std::string rest;
    if (more && (hi < 0 || hi > fixed)) {
      const int64_t min_rest = std::max<int64_t>(0, lo - fixed);
      const std::string reps = "{" + std::to_string(min_rest) + "," + (hi >= 0 ? std::to_string(hi - fixed) : "") + "}";
      if (fixed == 0) {
        if (min_rest == 0)
          rest = "( " + item + " ( ws \",\" ws " + item + " )" + (hi >= 0 ? "{0," + std::to_string(hi - 1) + "}" : "*") + " )?";
        else
          rest = item + " ( ws \",\" ws " + item + " ){" + std::to_string(min_rest - 1) + "," + (hi >= 0 ? std::to_string(hi - 1) : "") + "}";
      } else {
        rest = "( ws \",\" ws " + item + " )" + reps;
      }
    }
    // The optional prefix items close after the rest may follow the last of them.
    std::string inner = body;
    if (!rest.empty()) inner += (inner.empty() ? "" : " ") + rest;
    inner += closes;
    rules_[name] = "\"[\" ws " + (inner.empty() ? std::string("\"\"") : inner) + " ws \"]\"";
    return name;
  }

  // Every part (and the keywords beside the list) merged into one schema.
  Result<std::string> all_of(const Json& s, const std::string& hint, const std::string& path) {
    if (!s["allOf"].is_array() || s["allOf"].empty()) return unsupported(path + "/allOf", "'allOf' that is not a non-empty list");
    Json merged = s;
    merged.erase("allOf");
    for (size_t i = 0; i < s["allOf"].size(); ++i) {
      const std::string p = path + "/allOf/" + std::to_string(i);
      CAIRN_ASSIGN_OR_RETURN(const Json part, inline_refs(s["allOf"][i], p));
      CAIRN_ASSIGN_OR_RETURN(merged, merge(merged, part, p));
    }
    return visit(merged, hint, path);
  }

  Result<Json> resolve(const Json& r, const std::string& path) {
    if (!r.is_string()) return unsupported(path + "/$ref", "a $ref that is not a string");
    const std::string ref = r.get<std::string>();
    for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
      const std::string p = prefix;
      if (ref.compare(0, p.size(), p) != 0) continue;
      const std::string key = ref.substr(2, p.size() - 3);
      const std::string name = ref.substr(p.size());
      if (!root_.contains(key) || !root_[key].contains(name))
        return unsupported(path + "/$ref", "the reference '" + ref + "', which names nothing");
      return root_[key][name];
    }
    if (ref == "#") return root_;
    return unsupported(path + "/$ref", "the reference '" + ref + "' (only #, #/$defs/… and #/definitions/…)");
  }

  Result<std::string> ref(const Json& s, const std::string& path) {
    if (!s["$ref"].is_string()) return unsupported(path + "/$ref", "a $ref that is not a string");
    const std::string ref = s["$ref"].get<std::string>();
    if (const auto it = refs_.find(ref); it != refs_.end()) return it->second;
    CAIRN_ASSIGN_OR_RETURN(const Json target, resolve(s["$ref"], path));
    // Named before it is compiled, so a recursive reference finds the rule.
    const std::string name = name_for(ref == "#" ? "self" : ref.substr(ref.rfind('/') + 1));
    refs_[ref] = name;
    CAIRN_ASSIGN_OR_RETURN(const std::string body, visit(target, name, path + "/$ref"));
    rules_[name] = body;
    return name;
  }

  const Json& root_;
  const std::string prefix_;  // before every rule name: several schemas share one grammar
  std::map<std::string, std::string> rules_;
  std::set<std::string> reserved_;
  std::map<std::string, std::string> refs_;
  int depth_ = 0;
};

}  // namespace

Result<std::string> json_schema_to_gbnf(const nlohmann::ordered_json& schema) {
  return Compiler(schema).run();
}

Result<std::string> json_schema_rules(const nlohmann::ordered_json& schema, const std::string& prefix) {
  // GBNF names are letters, digits and dashes; a prefix must keep them so.
  if (prefix.empty()) return Status::invalid_argument("json_schema_rules: the rule prefix is empty");
  for (char c : prefix)
    if (!std::isalnum((unsigned char)c) && c != '-')
      return Status::invalid_argument("json_schema_rules: the rule prefix '" + prefix + "' is not letters, digits and dashes");
  return Compiler(schema, prefix).run_rules(prefix + "value");
}

std::string json_primitives_gbnf() { return kPrimitives; }

std::string json_object_gbnf() { return std::string("root ::= ws json-object ws\n") + kPrimitives; }

}  // namespace cairn::grammar
