// chat/jinja_lexer.h — splits template source into text and tag tokens.
// Owns Jinja2's whitespace rules as Hugging Face configures them: trim_blocks,
// lstrip_blocks, "-"/"+" modifiers, newline normalization, dropping one trailing
// newline, comments and raw blocks. Knows nothing of statements or expressions.
// Never throws anything but jinja::Failure (a syntax error naming line and column).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace cairn::chat::jinja {

enum class Tok { Text, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, Eof };

struct Token {
  Tok type;
  std::string text;  // text, name, decoded string literal, or operator
  int64_t int_value = 0;
  double float_value = 0;
  int line = 1;
  int column = 1;
};

struct LexOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
  size_t max_tokens = 1u << 20;
};

std::vector<Token> lex(std::string_view source, const LexOptions& options = {});

// "template syntax error at line L, column C: what" — a jinja::Failure.
[[noreturn]] void syntax_error(int line, int column, std::string_view what);

}  // namespace cairn::chat::jinja
