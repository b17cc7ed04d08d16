// grammar/regex.cpp — a recursive-descent translator from regex to GBNF.
#include "grammar/regex.h"

#include "grammar/grammar.h"
#include "grammar/text.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <utility>
#include <vector>

namespace cairn::grammar {
namespace {

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;
constexpr uint32_t kMaxCp = 0x10FFFF;

Ranges normalized(Ranges r) {
  std::sort(r.begin(), r.end());
  Ranges out;
  for (const auto& x : r) {
    if (!out.empty() && x.first <= out.back().second + 1)
      out.back().second = std::max(out.back().second, x.second);
    else
      out.push_back(x);
  }
  return out;
}

Ranges complement(const Ranges& r) {
  Ranges out;
  uint32_t next = 0;
  for (const auto& [a, b] : normalized(r)) {
    if (a > next) out.emplace_back(next, a - 1);
    next = b + 1;
  }
  if (next <= kMaxCp) out.emplace_back(next, kMaxCp);
  return out;
}

Ranges minus(const Ranges& r, const Ranges& cut) { return normalized(complement(normalized([&] {
  Ranges all = complement(r);
  all.insert(all.end(), cut.begin(), cut.end());
  return all;
}()))); }

const Ranges kDigit = {{'0', '9'}};
const Ranges kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const Ranges kSpace = {{'\t', '\r'}, {' ', ' '}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A},
                       {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000},
                       {0xFEFF, 0xFEFF}};
// What the content of a JSON string cannot hold unescaped.
const Ranges kJsonExcluded = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}};

std::string class_text(const Ranges& r) {
  std::string out = "[";
  char buf[32];
  for (const auto& [a, b] : r) {
    std::snprintf(buf, sizeof buf, "\\U%08X", a);
    out += buf;
    if (b != a) {
      std::snprintf(buf, sizeof buf, "-\\U%08X", b);
      out += buf;
    }
  }
  return out + "]";
}

class Translator {
 public:
  Translator(std::string_view p, RegexContext c) : p_(p), ctx_(c) {}

  Result<std::string> run() {
    bool anchored_start = false, anchored_end = false;
    if (!p_.empty() && p_[0] == '^') {
      anchored_start = true;
      ++i_;
    }
    auto body = alternation();
    if (!body) return body.status();
    if (i_ < p_.size() && p_[i_] == '$') {
      anchored_end = true;
      ++i_;
    }
    if (i_ < p_.size()) return error(std::string("unexpected '") + p_[i_] + "'");
    std::string out = "( " + *body + " )";
    if (ctx_ == RegexContext::JsonString) {
      const std::string any = class_text(allowed(complement({}))) + "*";
      if (!anchored_start) out = any + " " + out;
      if (!anchored_end) out += " " + any;
    }
    return out;
  }

 private:
  Status error(const std::string& what) const {
    return Status::invalid_argument("regular expression at offset " + std::to_string(i_) + ": " + what);
  }

  Ranges allowed(const Ranges& r) const {
    return ctx_ == RegexContext::JsonString ? minus(r, kJsonExcluded) : normalized(r);
  }

  Result<std::string> chars(const Ranges& r) {
    const Ranges a = allowed(r);
    if (a.empty()) return error("a character class that matches nothing here");
    return class_text(a);
  }

  Result<std::string> alternation() {
    std::vector<std::string> alts;
    for (;;) {
      auto seq = sequence();
      if (!seq) return seq.status();
      alts.push_back(seq->empty() ? "\"\"" : *seq);
      if (i_ < p_.size() && p_[i_] == '|') {
        ++i_;
        continue;
      }
      break;
    }
    if (alts.size() == 1) return alts[0];
    std::string out = "(";
    for (size_t k = 0; k < alts.size(); ++k) out += (k ? " | " : " ") + alts[k];
    return out + " )";
  }

  Result<std::string> sequence() {
    std::string out;
    while (i_ < p_.size() && p_[i_] != '|' && p_[i_] != ')') {
      if (p_[i_] == '$' && i_ + 1 == p_.size()) break;  // the end anchor
      auto atom_r = atom();
      if (!atom_r) return atom_r.status();
      std::string a = *atom_r;
      auto q = quantifier();
      if (!q) return q.status();
      if (!q->empty()) a = "( " + a + " )" + *q;
      out += (out.empty() ? "" : " ") + a;
    }
    return out;
  }

  Result<std::string> quantifier() {
    if (i_ >= p_.size()) return std::string();
    const char c = p_[i_];
    std::string q;
    if (c == '*' || c == '+' || c == '?') {
      q = std::string(1, c);
      ++i_;
    } else if (c == '{') {
      const size_t start = i_;
      ++i_;
      const auto number = [&](uint32_t& v) {
        const size_t b = i_;
        v = 0;
        while (i_ < p_.size() && p_[i_] >= '0' && p_[i_] <= '9' && v <= 10000) v = v * 10 + (uint32_t)(p_[i_++] - '0');
        return i_ > b;
      };
      uint32_t m = 0, n = 0;
      if (!number(m)) {  // not a quantifier: a literal '{'
        i_ = start;
        return std::string();
      }
      q = "{" + std::to_string(m);
      if (i_ < p_.size() && p_[i_] == ',') {
        ++i_;
        q += ",";
        if (number(n)) {
          if (n < m) return error("a quantifier {m,n} with n below m");
          q += std::to_string(n);
        }
      }
      if (i_ >= p_.size() || p_[i_] != '}') return error("an unterminated quantifier");
      ++i_;
      if (m > 10000 || n > 10000) return error("a repetition count above 10000");
      q += "}";
    } else {
      return std::string();
    }
    if (i_ < p_.size() && p_[i_] == '?') ++i_;  // lazy: the same strings
    const bool brace = i_ + 1 < p_.size() && p_[i_] == '{' && p_[i_ + 1] >= '0' && p_[i_ + 1] <= '9';
    if (i_ < p_.size() && (p_[i_] == '*' || p_[i_] == '+' || p_[i_] == '?' || brace))
      return error("a quantifier after a quantifier");
    return q;
  }

  Result<std::string> atom() {
    const char c = p_[i_];
    if (c == '(') {
      ++i_;
      if (i_ < p_.size() && p_[i_] == '?') {
        if (i_ + 1 < p_.size() && p_[i_ + 1] == ':') {
          i_ += 2;
        } else {
          return error("lookaround and named groups ('(?') are not supported");
        }
      }
      if (++depth_ > 100) return error("groups nested deeper than 100");
      auto inner = alternation();
      if (!inner) return inner.status();
      --depth_;
      if (i_ >= p_.size() || p_[i_] != ')') return error("a group without ')'");
      ++i_;
      return "( " + *inner + " )";
    }
    if (c == '[') return char_class();
    if (c == '.') {
      ++i_;
      return chars(complement({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}));
    }
    if (c == '^' || c == '$') return error(std::string("'") + c + "' inside the expression (anchors only at its ends)");
    if (c == '*' || c == '+' || c == '?') return error(std::string("'") + c + "' with nothing to repeat");
    if (c == ')') return error("')' without '('");
    if (c == '\\') {
      auto r = escape(false);
      if (!r) return r.status();
      return chars(*r);
    }
    const uint32_t cp = next_code_point();
    return chars({{cp, cp}});
  }

  uint32_t next_code_point() {
    const unsigned char c = (unsigned char)p_[i_];
    const int len = std::max(1, utf8_length(c));
    uint32_t cp = len == 1 ? c : c & (0x7F >> len);
    for (int k = 1; k < len && i_ + (size_t)k < p_.size(); ++k) cp = (cp << 6) | ((unsigned char)p_[i_ + (size_t)k] & 0x3F);
    i_ += (size_t)len;
    return std::min(cp, kMaxCp);
  }

  Result<uint32_t> hex(int n) {
    const auto v = read_hex(p_, i_, n);
    if (!v) return error("an unfinished escape or a bad hex digit");
    return *v;
  }

  // After a backslash: the characters it stands for.
  Result<Ranges> escape(bool in_class) {
    ++i_;
    if (i_ >= p_.size()) return error("a trailing backslash");
    const char c = p_[i_++];
    switch (c) {
      case 'd': return kDigit;
      case 'D': return complement(kDigit);
      case 'w': return kWord;
      case 'W': return complement(kWord);
      case 's': return kSpace;
      case 'S': return complement(kSpace);
      case 't': return Ranges{{'\t', '\t'}};
      case 'n': return Ranges{{'\n', '\n'}};
      case 'r': return Ranges{{'\r', '\r'}};
      case 'f': return Ranges{{'\f', '\f'}};
      case 'v': return Ranges{{'\v', '\v'}};
      case '0': return Ranges{{0, 0}};
      case 'x': {
        auto v = hex(2);
        if (!v) return v.status();
        return Ranges{{*v, *v}};
      }
      case 'u': {
        auto v = hex(4);
        if (!v) return v.status();
        uint32_t cp = *v;
        // UTF-16 escapes: a high surrogate and the low one after it are one
        // character; a surrogate alone is not a character at all.
        if (cp >= 0xD800 && cp <= 0xDBFF && i_ + 1 < p_.size() && p_[i_] == '\\' && p_[i_ + 1] == 'u') {
          const size_t back = i_;
          i_ += 2;
          auto low = hex(4);
          if (low && *low >= 0xDC00 && *low <= 0xDFFF)
            cp = 0x10000 + ((cp - 0xD800) << 10) + (*low - 0xDC00);
          else
            i_ = back;
        }
        if (cp >= 0xD800 && cp <= 0xDFFF) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "%04x", static_cast<unsigned>(cp));
          return error(std::string("a lone UTF-16 surrogate ('\\u") + buf + "') is not a character");
        }
        return Ranges{{cp, cp}};
      }
      case 'b':
        if (in_class) return Ranges{{'\b', '\b'}};
        return error("'\\b' (word boundaries) is not supported");
      case 'B': return error("'\\B' is not supported");
      default:
        if (c >= '1' && c <= '9') return error("backreferences are not supported");
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
          return error(std::string("the escape '\\") + c + "' is not supported");
        return Ranges{{(uint32_t)(unsigned char)c, (uint32_t)(unsigned char)c}};
    }
  }

  Result<std::string> char_class() {
    ++i_;  // '['
    bool negated = false;
    if (i_ < p_.size() && p_[i_] == '^') {
      negated = true;
      ++i_;
    }
    Ranges r;
    bool first = true;
    while (i_ < p_.size() && (p_[i_] != ']' || first)) {
      first = false;
      Ranges lo_set;
      uint32_t lo = 0;
      bool single = true;
      if (p_[i_] == '\\') {
        auto e = escape(true);
        if (!e) return e.status();
        lo_set = *e;
        single = lo_set.size() == 1 && lo_set[0].first == lo_set[0].second;
        lo = lo_set[0].first;
      } else {
        lo = next_code_point();
        lo_set = {{lo, lo}};
      }
      if (single && i_ + 1 < p_.size() && p_[i_] == '-' && p_[i_ + 1] != ']') {
        ++i_;
        uint32_t hi = 0;
        if (p_[i_] == '\\') {
          auto e = escape(true);
          if (!e) return e.status();
          if (e->size() != 1 || (*e)[0].first != (*e)[0].second) return error("a class range ending in a class");
          hi = (*e)[0].first;
        } else {
          hi = next_code_point();
        }
        if (hi < lo) return error("a class range with its end before its start");
        r.emplace_back(lo, hi);
      } else {
        r.insert(r.end(), lo_set.begin(), lo_set.end());
      }
    }
    if (i_ >= p_.size()) return error("a class without ']'");
    ++i_;
    return chars(negated ? complement(r) : r);
  }

  std::string_view p_;
  RegexContext ctx_;
  size_t i_ = 0;
  int depth_ = 0;
};

}  // namespace

Result<std::string> regex_to_gbnf(std::string_view pattern, RegexContext context) {
  if (!valid_utf8(pattern)) return Status::invalid_argument("the regular expression is not valid UTF-8");
  auto expr = Translator(pattern, context).run();
  if (!expr) return expr;
  // What the grammar parser refuses (an empty group repeated, say) is this
  // expression's problem, said here rather than as a grammar error later.
  auto g = parse_gbnf("root ::= " + *expr + "\n");
  if (!g) return Status::invalid_argument("the regular expression cannot be compiled (" + g.status().message() + ")");
  return expr;
}

}  // namespace cairn::grammar
