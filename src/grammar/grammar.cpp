// grammar/grammar.cpp — the compiled grammar's checks and the GBNF parser.
#include "grammar/grammar.h"

#include "grammar/text.h"

#include <algorithm>
#include <functional>
#include <map>

namespace cairn::grammar {

bool Element::matches(uint32_t cp) const {
  bool in = false;
  for (size_t i = 0; i + 1 < ranges.size(); i += 2)
    if (cp >= ranges[i] && cp <= ranges[i + 1]) {
      in = true;
      break;
    }
  return in != negated;
}

bool Element::matches_any(uint32_t lo, uint32_t hi) const {
  if (!negated) {
    for (size_t i = 0; i + 1 < ranges.size(); i += 2)
      if (ranges[i] <= hi && ranges[i + 1] >= lo) return true;
    return false;
  }
  // Negated: some point of [lo, hi] outside every range. Walk the ranges
  // sorted by start, covering [lo, ...) as far as they reach.
  std::vector<std::pair<uint32_t, uint32_t>> r;
  for (size_t i = 0; i + 1 < ranges.size(); i += 2) r.emplace_back(ranges[i], ranges[i + 1]);
  std::sort(r.begin(), r.end());
  uint64_t next = lo;  // the first point not yet known to be covered
  for (const auto& [a, b] : r) {
    if (a > next) break;
    if ((uint64_t)b + 1 > next) next = (uint64_t)b + 1;
    if (next > hi) return false;
  }
  return next <= hi;
}

Result<Grammar> Grammar::make(std::vector<Rule> rules, uint32_t root) {
  if (root >= rules.size()) return Status::invalid_argument("grammar: the root rule is missing");
  for (const Rule& r : rules) {
    if (r.alternatives.empty())
      return Status::invalid_argument("grammar: rule '" + r.name + "' is not defined");
    for (const auto& alt : r.alternatives) {
      if (alt.empty() || alt.back().kind != Element::Kind::End)
        return Status::internal("grammar: rule '" + r.name + "' has an unterminated alternative");
      for (const Element& e : alt)
        if (e.kind == Element::Kind::Rule && e.rule >= rules.size())
          return Status::invalid_argument("grammar: rule '" + r.name + "' refers to a missing rule");
    }
  }
  Grammar g;
  g.root_ = root;
  // Nullable rules, to a fixed point.
  g.nullable_.assign(rules.size(), 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = 0; i < rules.size(); ++i) {
      if (g.nullable_[i]) continue;
      for (const auto& alt : rules[i].alternatives) {
        bool all = true;
        for (const Element& e : alt) {
          if (e.kind == Element::Kind::End) break;
          if (e.kind == Element::Kind::Chars || !g.nullable_[e.rule]) {
            all = false;
            break;
          }
        }
        if (all) {
          g.nullable_[i] = 1;
          changed = true;
          break;
        }
      }
    }
  }
  // Left recursion: a rule reaching itself through references that may
  // start its input (each after only nullable ones).
  std::vector<std::vector<uint32_t>> first(rules.size());
  for (size_t i = 0; i < rules.size(); ++i)
    for (const auto& alt : rules[i].alternatives)
      for (const Element& e : alt) {
        if (e.kind != Element::Kind::Rule) break;
        first[i].push_back(e.rule);
        if (!g.nullable_[e.rule]) break;
      }
  std::vector<uint8_t> state(rules.size(), 0);  // 0 new, 1 on the path, 2 done
  std::string cycle;
  std::function<bool(uint32_t)> visit = [&](uint32_t r) {
    state[r] = 1;
    for (uint32_t n : first[r]) {
      if (state[n] == 1) {
        cycle = rules[n].name;
        return false;
      }
      if (state[n] == 0 && !visit(n)) return false;
    }
    state[r] = 2;
    return true;
  };
  for (uint32_t r = 0; r < rules.size(); ++r)
    if (state[r] == 0 && !visit(r))
      return Status::invalid_argument("grammar: rule '" + cycle +
                                      "' is left-recursive (it can reach itself without "
                                      "consuming input)");
  g.rules_ = std::move(rules);
  return g;
}

namespace {

// GBNF text to rules. Positions are tracked for errors.
class GbnfParser {
 public:
  explicit GbnfParser(std::string_view text) : t_(text) {}

  Result<Grammar> parse(std::string_view root) {
    skip_space(true);
    while (i_ < t_.size()) {
      std::string name = parse_name();
      if (name.empty()) return error("expected a rule name");
      skip_space(false);
      if (t_.substr(i_, 3) != "::=") return error("expected '::=' after '" + name + "'");
      i_ += 3;
      skip_space(true);
      const uint32_t id = rule_id(name);
      if (defined_[id]) return error("rule '" + name + "' is defined twice");
      defined_[id] = 1;
      auto alts = parse_alternatives(false);
      if (!alts) return alts.status();
      rules_[id].alternatives = std::move(*alts);
      skip_space(true);
    }
    for (size_t i = 0; i < rules_.size(); ++i)
      if (!defined_[i]) return Status::invalid_argument("grammar: rule '" + rules_[i].name + "' is not defined");
    const auto it = ids_.find(std::string(root));
    if (it == ids_.end())
      return Status::invalid_argument("grammar: no rule named '" + std::string(root) + "'");
    return Grammar::make(std::move(rules_), it->second);
  }

 private:
  using Seq = std::vector<Element>;

  Status error(const std::string& what) const {
    size_t line = 1, col = 1;
    for (size_t k = 0; k < i_ && k < t_.size(); ++k) {
      if (t_[k] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    return Status::invalid_argument("grammar: line " + std::to_string(line) + ", column " +
                                    std::to_string(col) + ": " + what);
  }

  void skip_space(bool newlines) {
    while (i_ < t_.size()) {
      const char c = t_[i_];
      if (c == '#') {
        while (i_ < t_.size() && t_[i_] != '\n') ++i_;
      } else if (c == ' ' || c == '\t' || c == '\r' || (newlines && c == '\n')) {
        ++i_;
      } else {
        break;
      }
    }
  }

  static bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '_';
  }

  std::string parse_name() {
    const size_t b = i_;
    while (i_ < t_.size() && name_char(t_[i_])) ++i_;
    return std::string(t_.substr(b, i_ - b));
  }

  uint32_t rule_id(const std::string& name) {
    const auto [it, fresh] = ids_.emplace(name, (uint32_t)rules_.size());
    if (fresh) {
      rules_.push_back(Rule{name, {}});
      defined_.push_back(0);
    }
    return it->second;
  }

  uint32_t new_rule(const std::string& base, std::vector<Seq> alts) {
    const uint32_t id = (uint32_t)rules_.size();
    rules_.push_back(Rule{base + "_" + std::to_string(id), std::move(alts)});
    defined_.push_back(1);
    return id;
  }

  static Element ref(uint32_t r) {
    Element e;
    e.kind = Element::Kind::Rule;
    e.rule = r;
    return e;
  }
  static Element end() { return Element{}; }
  static Seq terminated(Seq s) {
    s.push_back(end());
    return s;
  }

  // One UTF-8 code point of the source, or an escape inside quotes/classes.
  Result<uint32_t> parse_char() {
    if (i_ >= t_.size()) return error("unexpected end of grammar");
    const unsigned char c = (unsigned char)t_[i_];
    if (c == '\\') {
      if (i_ + 1 >= t_.size()) return error("unfinished escape");
      const char e = t_[i_ + 1];
      i_ += 2;
      switch (e) {
        case 'n': return uint32_t{'\n'};
        case 't': return uint32_t{'\t'};
        case 'r': return uint32_t{'\r'};
        case '\\': return uint32_t{'\\'};
        case '"': return uint32_t{'"'};
        case '\'': return uint32_t{'\''};
        case '[': return uint32_t{'['};
        case ']': return uint32_t{']'};
        case '-': return uint32_t{'-'};
        case '^': return uint32_t{'^'};
        case 'x': return parse_hex(2);
        case 'u': return parse_hex(4);
        case 'U': return parse_hex(8);
        default: return error(std::string("unknown escape '\\") + e + "'");
      }
    }
    // UTF-8 decode.
    const int len = utf8_length(c);
    if (len == 0 || i_ + (size_t)len > t_.size()) return error("invalid UTF-8 in the grammar");
    uint32_t cp = len == 1 ? c : c & (0x7F >> len);
    for (int k = 1; k < len; ++k) {
      const unsigned char cc = (unsigned char)t_[i_ + (size_t)k];
      if ((cc & 0xC0) != 0x80) return error("invalid UTF-8 in the grammar");
      cp = (cp << 6) | (cc & 0x3F);
    }
    i_ += (size_t)len;
    return cp;
  }

  Result<uint32_t> parse_hex(int n) {
    const auto v = read_hex(t_, i_, n);
    if (!v) return error("unfinished hex escape or bad hex digit");
    if (*v > 0x10FFFF) return error("code point beyond U+10FFFF");
    if (*v >= 0xD800 && *v <= 0xDFFF) return error("a surrogate code point (U+D800..U+DFFF) is not a character");
    return *v;
  }

  // Alternatives up to ')' (nested) or the end of the rule.
  Result<std::vector<Seq>> parse_alternatives(bool nested) {
    std::vector<Seq> alts;
    for (;;) {
      auto seq = parse_sequence(nested);
      if (!seq) return seq.status();
      alts.push_back(terminated(std::move(*seq)));
      skip_space(nested);
      if (i_ < t_.size() && t_[i_] == '|') {
        ++i_;
        skip_space(true);
        continue;
      }
      return alts;
    }
  }

  Result<Seq> parse_sequence(bool nested) {
    Seq seq;
    size_t last_start = 0;  // where the last item's elements begin in seq
    for (;;) {
      skip_space(nested);
      if (i_ >= t_.size()) break;
      const char c = t_[i_];
      if (c == '\n' || c == '|' || c == ')') break;
      if (c == '"') {
        ++i_;
        last_start = seq.size();
        while (i_ < t_.size() && t_[i_] != '"') {
          auto cp = parse_char();
          if (!cp) return cp.status();
          Element e;
          e.kind = Element::Kind::Chars;
          e.ranges = {*cp, *cp};
          seq.push_back(std::move(e));
        }
        if (i_ >= t_.size()) return error("unterminated string literal");
        ++i_;
      } else if (c == '[') {
        ++i_;
        Element e;
        e.kind = Element::Kind::Chars;
        if (i_ < t_.size() && t_[i_] == '^') {
          e.negated = true;
          ++i_;
        }
        while (i_ < t_.size() && t_[i_] != ']') {
          auto lo = parse_char();
          if (!lo) return lo.status();
          uint32_t hi = *lo;
          if (i_ + 1 < t_.size() && t_[i_] == '-' && t_[i_ + 1] != ']') {
            ++i_;
            auto h = parse_char();
            if (!h) return h.status();
            hi = *h;
            if (hi < *lo) return error("character range with its end before its start");
          }
          e.ranges.push_back(*lo);
          e.ranges.push_back(hi);
        }
        if (i_ >= t_.size()) return error("unterminated character class");
        ++i_;
        last_start = seq.size();
        seq.push_back(std::move(e));
      } else if (c == '.') {
        ++i_;
        Element e;
        e.kind = Element::Kind::Chars;
        e.negated = true;  // any code point but none: everything
        last_start = seq.size();
        seq.push_back(std::move(e));
      } else if (c == '(') {
        if (++depth_ > kMaxDepth) return error("groups nested deeper than " + std::to_string(kMaxDepth));
        ++i_;
        skip_space(true);
        auto alts = parse_alternatives(true);
        if (!alts) return alts.status();
        skip_space(true);
        if (i_ >= t_.size() || t_[i_] != ')') return error("expected ')'");
        ++i_;
        --depth_;
        last_start = seq.size();
        seq.push_back(ref(new_rule("group", std::move(*alts))));
      } else if (name_char(c)) {
        const std::string name = parse_name();
        last_start = seq.size();
        seq.push_back(ref(rule_id(name)));
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (seq.empty()) return error(std::string("'") + c + "' with nothing before it");
        // The repeated item: its elements (a literal's several) as one rule.
        Seq item(seq.begin() + (long)last_start, seq.end());
        seq.resize(last_start);
        uint32_t min = 0, max = 0;
        bool unbounded = false;
        if (c == '{') {
          auto m = parse_bounds(min, max, unbounded);
          if (!m.is_ok()) return m;
        } else {
          ++i_;
          min = c == '+' ? 1 : 0;
          max = c == '?' ? 1 : 0;
          unbounded = c != '?';
        }
        const uint32_t x = item.size() == 1 && item[0].kind == Element::Kind::Rule
                               ? item[0].rule
                               : new_rule("item", {terminated(item)});
        for (uint32_t k = 0; k < min; ++k) seq.push_back(ref(x));
        if (unbounded) {
          // star ::= x star | (empty)
          const uint32_t star = new_rule("star", {});
          rules_[star].alternatives = {terminated({ref(x), ref(star)}), terminated({})};
          seq.push_back(ref(star));
        } else if (max > min) {
          // opt_k ::= x opt_{k-1} | (empty): up to max - min more
          uint32_t opt = new_rule("opt", {terminated({ref(x)}), terminated({})});
          for (uint32_t k = 1; k < max - min; ++k)
            opt = new_rule("opt", {terminated({ref(x), ref(opt)}), terminated({})});
          seq.push_back(ref(opt));
        }
        last_start = seq.size();  // a repetition is not repeated again
      } else {
        return error(std::string("unexpected '") + c + "'");
      }
    }
    return seq;
  }

  Status parse_bounds(uint32_t& min, uint32_t& max, bool& unbounded) {
    ++i_;  // '{'
    const auto number = [&](uint32_t& v) {
      const size_t b = i_;
      v = 0;
      while (i_ < t_.size() && t_[i_] >= '0' && t_[i_] <= '9') {
        v = v * 10 + (uint32_t)(t_[i_] - '0');
        if (v > kMaxRepeat) return false;
        ++i_;
      }
      return i_ > b;
    };
    skip_space(false);
    if (!number(min)) return error("expected a count after '{' (at most " + std::to_string(kMaxRepeat) + ")");
    skip_space(false);
    unbounded = false;
    max = min;
    if (i_ < t_.size() && t_[i_] == ',') {
      ++i_;
      skip_space(false);
      if (i_ < t_.size() && t_[i_] == '}') {
        unbounded = true;
      } else if (!number(max) || max < min) {
        return error("expected a count not below the minimum after ','");
      }
      skip_space(false);
    }
    if (i_ >= t_.size() || t_[i_] != '}') return error("expected '}'");
    ++i_;
    return Status::ok();
  }

  static constexpr uint32_t kMaxRepeat = 10000;
  static constexpr int kMaxDepth = 256;
  int depth_ = 0;
  std::string_view t_;
  size_t i_ = 0;
  std::vector<Rule> rules_;
  std::vector<uint8_t> defined_;
  std::map<std::string, uint32_t> ids_;
};

}  // namespace

std::string gbnf_literal(std::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += (char)c;
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20) {
      const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += (char)c;
    }
  }
  return out + "\"";
}

Result<Grammar> parse_gbnf(std::string_view text, std::string_view root) {
  if (!valid_utf8(text)) return Status::invalid_argument("the grammar is not valid UTF-8");
  return GbnfParser(text).parse(root);
}

}  // namespace cairn::grammar
