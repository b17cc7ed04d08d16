// chat/jinja_parser.h — builds the AST from tokens, following Jinja2's grammar and
// operator precedence. Owns syntax checking and the nesting bound that keeps later
// tree walks shallow. Never evaluates anything; never throws anything but
// jinja::Failure ("template syntax error at line L, column C: ...").
#pragma once

#include <memory>
#include <string_view>

#include "chat/jinja_ast.h"

namespace cairn::chat::jinja {

// Deepest nesting of blocks and parenthesised expressions a template may use.
inline constexpr int kMaxParseDepth = 100;

std::unique_ptr<Program> parse_template(std::string_view source);

}  // namespace cairn::chat::jinja
