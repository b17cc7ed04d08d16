// chat/jinja_lexer.cpp — the lexer: text, tag and expression tokens with Jinja2's whitespace control.
#include "chat/jinja_lexer.h"

#include <algorithm>
#include <array>
#include <cstdlib>

#include "chat/jinja_value.h"
#include "core/utf8.h"

namespace cairn::chat::jinja {

void syntax_error(int line, int column, std::string_view what) {
  throw Failure{"template syntax error at line " + std::to_string(line) + ", column " +
                std::to_string(column) + ": " + std::string(what)};
}

namespace {

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || is_digit(c); }

// Operators, longest first so "//" wins over "/".
constexpr std::array<std::string_view, 27> kOperators = {
    "//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[", "]",
    "(",  ")",  "{",  "}",  ">",  "<",  "=", ".", ":", "|", ",", ";", "!"};

// Jinja2 turns \r\n and \r into \n everywhere and, without keep_trailing_newline,
// drops one final newline.
std::string normalize(std::string_view src) {
  std::string out;
  out.reserve(src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    if (src[i] == '\r') {
      out += '\n';
      if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
    } else {
      out += src[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}


int hex_value(char c) {
  if (is_digit(c)) return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class Lexer {
 public:
  Lexer(std::string_view source, const LexOptions& opt) : src_(normalize(source)), opt_(opt) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos < src_.size()) {
      size_t start = find_opener(pos);
      if (start == std::string::npos) {
        emit_text(src_.substr(pos), pos);
        break;
      }
      char kind = src_[start + 1];  // '{', '%' or '#'
      char sign = start + 2 < src_.size() && (src_[start + 2] == '-' || src_[start + 2] == '+')
                      ? src_[start + 2]
                      : 0;
      std::string text = src_.substr(pos, start - pos);
      strip_before(text, sign, kind != '{', line_starting);
      emit_text(std::move(text), pos);
      size_t inner = start + 2 + (sign ? 1 : 0);
      size_t raw_end = kind == '%' ? match_raw_begin(inner) : std::string::npos;
      if (raw_end != std::string::npos) {
        pos = lex_raw(raw_end, &line_starting);
      } else if (kind == '#') {
        pos = lex_comment(start, inner, &line_starting);
      } else {
        pos = lex_tag(start, inner, kind == '%', &line_starting);
      }
    }
    push(Tok::Eof, "", src_.size());
    return std::move(tokens_);
  }

 private:
  void position(size_t off, int* line, int* col) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), off);
    size_t idx = static_cast<size_t>(it - line_starts_.begin()) - 1;
    *line = static_cast<int>(idx + 1);
    *col = static_cast<int>(off - line_starts_[idx] + 1);
  }
  [[noreturn]] void error_at(size_t off, std::string_view what) const {
    int line, col;
    position(off, &line, &col);
    syntax_error(line, col, what);
  }

  Token& push(Tok type, std::string text, size_t off) {
    if (tokens_.size() >= opt_.max_tokens) error_at(off, "template has too many tokens");
    Token t;
    t.type = type;
    t.text = std::move(text);
    position(off, &t.line, &t.column);
    tokens_.push_back(std::move(t));
    return tokens_.back();
  }
  void emit_text(std::string text, size_t off) {
    if (!text.empty()) push(Tok::Text, std::move(text), off);
  }

  size_t find_opener(size_t pos) const {
    for (size_t i = src_.find('{', pos); i != std::string::npos; i = src_.find('{', i + 1)) {
      if (i + 1 < src_.size() && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#'))
        return i;
    }
    return std::string::npos;
  }

  // "-" strips all whitespace before a tag; lstrip_blocks strips the indentation of a
  // block or comment tag that starts its line (unless "+" says otherwise).
  void strip_before(std::string& text, char sign, bool block_like, bool line_starting) const {
    if (sign == '-') {
      size_t end = text.size();
      while (end > 0 && is_space(text[end - 1])) --end;
      text.resize(end);
    } else if (sign != '+' && opt_.lstrip_blocks && block_like) {
      size_t nl = text.rfind('\n');
      size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
      if ((l_pos > 0 || line_starting) && l_pos < text.size() &&
          std::all_of(text.begin() + static_cast<long>(l_pos), text.end(), is_space))
        text.resize(l_pos);
    }
  }

  // After "{%[-+]": matches "\s*raw\s*(-%}\s*|%})" and returns the offset after it.
  size_t match_raw_begin(size_t p) const {
    while (p < src_.size() && is_space(src_[p])) ++p;
    if (src_.compare(p, 3, "raw") != 0 || (p + 3 < src_.size() && is_name_char(src_[p + 3])))
      return std::string::npos;
    p += 3;
    while (p < src_.size() && is_space(src_[p])) ++p;
    if (src_.compare(p, 3, "-%}") == 0) {
      p += 3;
      while (p < src_.size() && is_space(src_[p])) ++p;
      return p;
    }
    if (src_.compare(p, 2, "%}") == 0) return p + 2;
    return std::string::npos;
  }

  // Consumes a tag end ("-%}" eats following whitespace, "%}" one newline with
  // trim_blocks, "+%}" nothing); returns the offset after it.
  size_t consume_end(size_t after_marker, bool minus, bool plus, bool trim) {
    size_t p = after_marker;
    if (minus) {
      while (p < src_.size() && is_space(src_[p])) ++p;
    } else if (!plus && trim && p < src_.size() && src_[p] == '\n') {
      ++p;
    }
    return p;
  }

  size_t lex_raw(size_t body, bool* line_starting) {
    for (size_t p = src_.find("{%", body); p != std::string::npos; p = src_.find("{%", p + 1)) {
      size_t q = p + 2;
      char sign = q < src_.size() && (src_[q] == '-' || src_[q] == '+') ? src_[q] : 0;
      if (sign) ++q;
      while (q < src_.size() && is_space(src_[q])) ++q;
      if (src_.compare(q, 6, "endraw") != 0) continue;
      q += 6;
      while (q < src_.size() && is_space(src_[q])) ++q;
      bool minus = src_.compare(q, 3, "-%}") == 0;
      bool plus = src_.compare(q, 3, "+%}") == 0;
      if (!minus && !plus && src_.compare(q, 2, "%}") != 0) continue;
      std::string text = src_.substr(body, p - body);
      strip_before(text, sign, true, false);
      emit_text(std::move(text), body);
      size_t end = consume_end(q + (minus || plus ? 3 : 2), minus, plus, opt_.trim_blocks);
      *line_starting = end > 0 && src_[end - 1] == '\n';
      return end;
    }
    error_at(body, "missing end of raw directive");
  }

  size_t lex_comment(size_t start, size_t inner, bool* line_starting) {
    size_t p = src_.find("#}", inner);
    if (p == std::string::npos) error_at(start, "missing end of comment tag");
    bool minus = p > inner && src_[p - 1] == '-';
    bool plus = p > inner && src_[p - 1] == '+';
    size_t end = consume_end(p + 2, minus, plus, opt_.trim_blocks);
    *line_starting = end > 0 && src_[end - 1] == '\n';
    return end;
  }

  size_t lex_tag(size_t start, size_t p, bool block, bool* line_starting) {
    push(block ? Tok::BlockBegin : Tok::VarBegin, "", start);
    std::vector<char> brackets;
    const char close = block ? '%' : '}';
    while (true) {
      while (p < src_.size() && is_space(src_[p])) ++p;
      if (p >= src_.size()) error_at(start, block ? "unclosed block tag" : "unclosed variable tag");
      if (brackets.empty()) {
        bool minus =
            src_[p] == '-' && p + 2 < src_.size() && src_[p + 1] == close && src_[p + 2] == '}';
        bool plus = block && src_[p] == '+' && p + 2 < src_.size() && src_[p + 1] == close &&
                    src_[p + 2] == '}';
        bool plain = src_[p] == close && p + 1 < src_.size() && src_[p + 1] == '}';
        if (minus || plus || plain) {
          push(block ? Tok::BlockEnd : Tok::VarEnd, "", p);
          size_t end = consume_end(p + (plain ? 2 : 3), minus, plus, block && opt_.trim_blocks);
          *line_starting = end > 0 && src_[end - 1] == '\n';
          return end;
        }
      }
      p = lex_token(p, &brackets);
    }
  }

  size_t lex_token(size_t p, std::vector<char>* brackets) {
    char c = src_[p];
    if (is_digit(c)) return lex_number(p);
    if (is_name_start(c)) {
      size_t q = p;
      while (q < src_.size() && is_name_char(src_[q])) ++q;
      push(Tok::Name, src_.substr(p, q - p), p);
      return q;
    }
    if (c == '\'' || c == '"') return lex_string(p);
    for (std::string_view op : kOperators) {
      if (src_.compare(p, op.size(), op) != 0) continue;
      if (op == "!") break;  // only "!=" is an operator
      if (op == "(" || op == "[" || op == "{") {
        brackets->push_back(op == "(" ? ')' : op == "[" ? ']' : '}');
      } else if (op == ")" || op == "]" || op == "}") {
        if (brackets->empty()) error_at(p, "unexpected '" + std::string(op) + "'");
        if (brackets->back() != op[0])
          error_at(p, "unexpected '" + std::string(op) + "', expected '" +
                          std::string(1, brackets->back()) + "'");
        brackets->pop_back();
      }
      push(Tok::Op, std::string(op), p);
      return p + op.size();
    }
    error_at(p, "unexpected char '" + std::string(1, c) + "'");
  }

  size_t scan_digits(size_t q) const {
    while (q < src_.size() &&
           (is_digit(src_[q]) || (src_[q] == '_' && q + 1 < src_.size() && is_digit(src_[q + 1]))))
      ++q;
    return q;
  }

  size_t lex_number(size_t p) {
    size_t q = scan_digits(p);
    bool is_float = false;
    bool after_dot = p > 0 && src_[p - 1] == '.';  // "a.0.1" is attribute access, not 0.1
    if (!after_dot && q + 1 < src_.size() && src_[q] == '.' && is_digit(src_[q + 1])) {
      q = scan_digits(q + 1);
      is_float = true;
    }
    if (!after_dot && q < src_.size() && (src_[q] == 'e' || src_[q] == 'E')) {
      size_t r = q + 1;
      if (r < src_.size() && (src_[r] == '+' || src_[r] == '-')) ++r;
      if (r < src_.size() && is_digit(src_[r])) {
        q = scan_digits(r);
        is_float = true;
      }
    }
    std::string digits;
    for (size_t i = p; i < q; ++i)
      if (src_[i] != '_') digits += src_[i];
    if (is_float) {
      push(Tok::Float, digits, p).float_value = std::strtod(digits.c_str(), nullptr);
    } else {
      if (digits.size() > 18) error_at(p, "integer literal too large");
      push(Tok::Int, digits, p).int_value = std::strtoll(digits.c_str(), nullptr, 10);
    }
    return q;
  }

  size_t lex_string(size_t p) {
    char quote = src_[p];
    std::string out;
    size_t q = p + 1;
    while (true) {
      if (q >= src_.size()) error_at(p, "unterminated string literal");
      char c = src_[q];
      if (c == quote) break;
      if (c != '\\' || q + 1 >= src_.size()) {
        out += c;
        ++q;
        continue;
      }
      q = decode_escape(q, &out);
    }
    push(Tok::String, std::move(out), p);
    return q + 1;
  }

  // Python's unicode-escape rules; unknown escapes stay as written.
  size_t decode_escape(size_t q, std::string* out) {
    char e = src_[q + 1];
    static constexpr std::string_view kSimple = "\\'\"abfnrtv\n";
    static constexpr std::string_view kValues = "\\'\"\a\b\f\n\r\t\v";
    if (size_t k = kSimple.find(e); k != std::string_view::npos) {
      if (e != '\n') *out += kValues[k];  // backslash-newline is a line continuation
      return q + 2;
    }
    if (e >= '0' && e <= '7') {
      uint32_t v = 0;
      size_t r = q + 1;
      for (int n = 0; n < 3 && r < src_.size() && src_[r] >= '0' && src_[r] <= '7'; ++n, ++r)
        v = v * 8 + static_cast<uint32_t>(src_[r] - '0');
      append_utf8(*out, v);
      return r;
    }
    int width = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
    if (width == 0) {
      *out += '\\';
      return q + 1;
    }
    uint32_t v = 0;
    for (int n = 0; n < width; ++n) {
      size_t r = q + 2 + static_cast<size_t>(n);
      int h = r < src_.size() ? hex_value(src_[r]) : -1;
      if (h < 0) error_at(q, "truncated \\" + std::string(1, e) + " escape in string");
      v = v * 16 + static_cast<uint32_t>(h);
    }
    if (v > 0x10ffff) error_at(q, "illegal Unicode character in string");
    append_utf8(*out, v);
    return q + 2 + static_cast<size_t>(width);
  }

  std::string src_;
  LexOptions opt_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> lex(std::string_view source, const LexOptions& options) {
  return Lexer(source, options).run();
}

}  // namespace cairn::chat::jinja
