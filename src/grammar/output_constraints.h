// grammar/output_constraints.h — a request's structured-output fields to one grammar.
// Owns the field names clients use to constrain an output (OpenAI's
// response_format; vLLM's guided_json, guided_regex, guided_choice,
// guided_grammar; llama.cpp's json_schema and grammar), the rule that at most
// one is given, and their translation to GBNF text that parse_gbnf accepts.
// Errors are InvalidArgument with the offending field as param. Shared by
// the OpenAI API and servables' LLM stages, so both read the fields alike.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/status.h"

namespace cairn::grammar {

// The GBNF the fields of `fields` (a request body, or any object holding
// some of those fields) ask for; empty when none does (or response_format is
// {"type": "text"}). A JSON schema may be given as an object or as its text.
Result<std::string> output_constraint_gbnf(const nlohmann::ordered_json& fields);

}  // namespace cairn::grammar
