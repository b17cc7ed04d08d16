// grammar/regex.h — regular expressions as GBNF expressions.
// Owns the translation of the ECMAScript syntax that JSON Schema's `pattern`
// and vLLM's guided_regex use: literals and escapes (\d \w \s and their
// negations, \t \n \r \f \v \0, \xHH, \uHHHH, escaped punctuation), classes
// with ranges and negation, `.`, groups (capturing or (?:...)), `|`, and the
// quantifiers * + ? {m} {m,} {m,n} (lazy forms match the same language).
// Backreferences, lookaround, word boundaries and flags are refused by name.
#pragma once

#include <string>
#include <string_view>

#include "core/status.h"

namespace cairn::grammar {

enum class RegexContext {
  Whole,       // the expression is the whole output (guided_regex): ^ and $ are implied
  JsonString,  // the content of a JSON string (a schema's pattern): unanchored
               // sides match anything, and no character a JSON string must
               // escape (quote, backslash, controls) is produced
};

// One GBNF expression (no rules of its own) for the strings `pattern` matches.
Result<std::string> regex_to_gbnf(std::string_view pattern, RegexContext context);

}  // namespace cairn::grammar
