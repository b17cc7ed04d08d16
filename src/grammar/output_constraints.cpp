// grammar/output_constraints.cpp — structured-output fields to GBNF.
#include "grammar/output_constraints.h"

#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/regex.h"

namespace cairn::grammar {
namespace {

using json = nlohmann::ordered_json;

Status bad_request(std::string message, std::string param) {
  return Status::invalid_argument(std::move(message), std::move(param));
}

Status type_error(const char* name, const char* expected) {
  return bad_request(std::string("'") + name + "' must be " + expected, name);
}

// A field that is absent or null counts as not given.
const json* field(const json& body, const char* name) {
  auto it = body.find(name);
  return it == body.end() || it->is_null() ? nullptr : &*it;
}

// The grammar a JSON schema (an object, or its text) compiles to; errors
// name `param`.
Result<std::string> schema_grammar(const json& v, const char* param) {
  nlohmann::ordered_json schema;
  if (v.is_string()) {
    schema = nlohmann::ordered_json::parse(v.get_ref<const std::string&>(), nullptr, false);
    if (schema.is_discarded()) return bad_request(std::string("'") + param + "' is not JSON", param);
  } else if (v.is_object() || v.is_boolean()) {
    schema = v;
  } else {
    return type_error(param, "a JSON schema object");
  }
  auto g = json_schema_to_gbnf(schema);
  if (!g) return bad_request(g.status().message(), param);
  return *g;
}

// At most one field; the GBNF text is checked here, so a bad one is refused.
Result<std::string> constraint(const json& body) {
  std::string gbnf;
  const char* given = nullptr;
  const auto take = [&](const char* name, std::string text) -> Status {
    if (given)
      return bad_request(std::string("'") + name + "' and '" + given +
                             "' both constrain the output: give one",
                         name);
    given = name;
    gbnf = std::move(text);
    return Status::ok();
  };
  if (const json* rf = field(body, "response_format")) {
    if (!rf->is_object()) return type_error("response_format", "an object");
    const json* t = field(*rf, "type");
    if (!t || !t->is_string())
      return bad_request("'response_format' needs a 'type'", "response_format");
    const std::string& type = t->get_ref<const std::string&>();
    if (type == "json_object") {
      CAIRN_RETURN_IF_ERROR(take("response_format", json_object_gbnf()));
    } else if (type == "json_schema") {
      const json* js = field(*rf, "json_schema");
      if (!js || !js->is_object())
        return bad_request("'response_format' of type json_schema needs a 'json_schema' object",
                           "response_format");
      const json* schema = field(*js, "schema");
      // OpenAI's default for a missing schema is any JSON object.
      std::string text = json_object_gbnf();
      if (schema) {
        CAIRN_ASSIGN_OR_RETURN(text, schema_grammar(*schema, "response_format"));
      }
      CAIRN_RETURN_IF_ERROR(take("response_format", std::move(text)));
    } else if (type != "text") {
      return bad_request("'response_format' type '" + type.substr(0, 64) +
                             "' is not one of text, json_object, json_schema",
                         "response_format");
    }
  }
  for (const char* name : {"guided_json", "json_schema"}) {
    if (const json* v = field(body, name)) {
      CAIRN_ASSIGN_OR_RETURN(std::string text, schema_grammar(*v, name));
      CAIRN_RETURN_IF_ERROR(take(name, std::move(text)));
    }
  }
  if (const json* v = field(body, "guided_regex")) {
    if (!v->is_string()) return type_error("guided_regex", "a string");
    auto re = regex_to_gbnf(v->get_ref<const std::string&>(), RegexContext::Whole);
    if (!re) return bad_request(re.status().message(), "guided_regex");
    CAIRN_RETURN_IF_ERROR(take("guided_regex", "root ::= " + *re + "\n"));
  }
  if (const json* v = field(body, "guided_choice")) {
    if (!v->is_array() || v->empty()) return type_error("guided_choice", "a non-empty list of strings");
    std::string root = "root ::= ";
    for (size_t i = 0; i < v->size(); ++i) {
      if (!(*v)[i].is_string()) return type_error("guided_choice", "a non-empty list of strings");
      const json& lit = (*v)[i];
      // A GBNF literal: the JSON string form escapes what GBNF escapes alike.
      root += (i ? " | " : "") + lit.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    }
    CAIRN_RETURN_IF_ERROR(take("guided_choice", root + "\n"));
  }
  for (const char* name : {"guided_grammar", "grammar"}) {
    if (const json* v = field(body, name)) {
      if (!v->is_string()) return type_error(name, "a string of GBNF");
      CAIRN_RETURN_IF_ERROR(take(name, v->get<std::string>()));
    }
  }
  if (given && !gbnf.empty()) {
    auto g = parse_gbnf(gbnf);
    if (!g) return bad_request(g.status().message(), given);
  }
  return gbnf;
}

}  // namespace

Result<std::string> output_constraint_gbnf(const nlohmann::ordered_json& fields) {
  if (!fields.is_object()) return std::string();
  return constraint(fields);
}

}  // namespace cairn::grammar
