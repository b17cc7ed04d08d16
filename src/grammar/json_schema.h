// grammar/json_schema.h — JSON Schema to GBNF: the grammar of the JSON texts a schema accepts.
// Owns the translation of the keywords OpenAI's structured outputs and
// llama.cpp's json_schema field use (type, properties, required,
// additionalProperties, items, prefixItems, minItems, maxItems, enum, const,
// anyOf, oneOf, allOf of objects, $ref into $defs/definitions, string
// minLength/maxLength/format/pattern, integer and number bounds) into GBNF text that
// parse_gbnf() compiles. A keyword it cannot honour is an error naming it
// and where it is (a JSON pointer), never silently dropped; keywords that
// only annotate (title, description, examples, default, $schema, $id,
// $comment, strict) are ignored.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "core/status.h"

namespace cairn::grammar {

// The GBNF of every JSON text `schema` accepts (root rule `root`), with
// optional whitespace between tokens. Properties come in the schema's order;
// an object without additionalProperties allows no other keys.
Result<std::string> json_schema_to_gbnf(const nlohmann::ordered_json& schema);

// The rules of `schema`'s grammar alone, for combining several schemas into
// one grammar (chat/tool_calls.h: one per tool): every rule is named
// `<prefix>…`, the schema's value is the rule `<prefix>value` (no whitespace
// around it), and the shared rules it uses (ws, json-*) are left out: append
// json_primitives_gbnf() once. `prefix` is letters, digits and dashes.
Result<std::string> json_schema_rules(const nlohmann::ordered_json& schema, const std::string& prefix);
std::string json_primitives_gbnf();

// The GBNF of any JSON object (response_format {"type": "json_object"}).
std::string json_object_gbnf();

}  // namespace cairn::grammar
