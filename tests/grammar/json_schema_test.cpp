// JSON Schema to grammar: for each schema, texts its instances and its
// non-instances, checked against the compiled grammar; the keywords it
// refuses, by name and place.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"

namespace cairn::grammar {
namespace {

using Json = nlohmann::ordered_json;

std::shared_ptr<const Grammar> compile(const std::string& schema) {
  auto text = json_schema_to_gbnf(Json::parse(schema));
  EXPECT_TRUE(text) << text.status().message();
  if (!text) return nullptr;
  auto g = parse_gbnf(*text);
  EXPECT_TRUE(g) << g.status().message() << "\n" << *text;
  return g ? std::make_shared<const Grammar>(std::move(*g)) : nullptr;
}

bool accepts(const std::shared_ptr<const Grammar>& g, const std::string& s) {
  Matcher m(g);
  return m.accept(s) && m.can_end();
}

struct Case {
  const char* schema;
  std::vector<const char*> good, bad;
};

// Each schema compiles, takes its instances and refuses its non-instances.
void check_cases(const std::vector<Case>& cases) {
  for (const Case& c : cases) {
    SCOPED_TRACE(c.schema);
    auto g = compile(c.schema);
    ASSERT_TRUE(g);
    for (const char* s : c.good) EXPECT_TRUE(accepts(g, s)) << "should accept " << s;
    for (const char* s : c.bad) EXPECT_FALSE(accepts(g, s)) << "should refuse " << s;
  }
}

TEST(JsonSchema, InstancesAndNonInstances) {
  const std::vector<Case> cases = {
      {R"({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
           "required": ["name"]})",
       {R"({"name": "Ann"})", R"({"name": "Ann", "age": 31})", R"( { "name" : "", "age" : -2 } )"},
       {R"({"age": 3})", R"({"name": 1})", R"({"name": "a", "extra": 1})", R"({"age": 3, "name": "a"})", "{}"}},
      {R"({"type": "object", "properties": {"a": {"type": "boolean"}}, "additionalProperties": true})",
       {"{}", R"({"a": true})", R"({"a": false, "b": [1, {"c": null}]})", R"({"z": 1})", R"({"aa": 1})",
        R"({"": 0, "é": 1})"},
       {R"({"a": 1})", "[]", R"({"a": true, "a": 2})"}},
      {R"({"type": "object", "additionalProperties": {"type": "number"}})",
       {"{}", R"({"x": 1.5, "y": -2e3})"},
       {R"({"x": "1"})"}},
      {R"({"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3})",
       {R"(["a"])", R"(["a", "b", "c"])"},
       {"[]", R"(["a", "b", "c", "d"])", "[1]"}},
      {R"({"type": "array", "prefixItems": [{"type": "integer"}, {"type": "string"}]})",
       {R"([1, "x"])", "[1]", "[]"},  // prefixItems alone requires none of them
       {R"([1, "x", 2])", R"(["x", 1])"}},
      {R"({"type": "array", "prefixItems": [{"type": "integer"}], "items": {"type": "boolean"}})",
       {"[1]", "[1, true, false]"},
       {"[true]", "[1, 2]"}},
      {R"({"enum": ["red", "green", 3, null]})",
       {R"("red")", R"("green")", "3", "null"},
       {R"("blue")", "4", R"("Red")"}},
      {R"({"const": {"k": [1, 2]}})", {R"({"k":[1,2]})"}, {R"({"k": [1, 2]})", R"({"k":[2,1]})"}},
      {R"({"anyOf": [{"type": "integer"}, {"type": "object", "properties": {"t": {"const": "x"}}, "required": ["t"]}]})",
       {"12", R"({"t": "x"})"},
       {R"({"t": "y"})", "1.5"}},
      {R"({"oneOf": [{"type": "string"}, {"type": "null"}]})", {R"("s")", "null"}, {"0"}},
      {R"({"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                      {"properties": {"b": {"type": "string"}}, "required": ["b"]}]})",
       {R"({"a": 1, "b": "x"})"},
       {R"({"a": 1})", R"({"b": "x"})"}},
      {R"({"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
           "next": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]}}, "required": ["v", "next"]}},
           "$ref": "#/$defs/node"})",
       {R"({"v": 1, "next": null})", R"({"v": 1, "next": {"v": 2, "next": {"v": 3, "next": null}}})"},
       {R"({"v": 1})", R"({"v": 1, "next": {"v": 2}})"}},
      {R"({"type": "string", "minLength": 2, "maxLength": 4})",
       {R"("ab")", R"("abcd")", R"("é✓")", R"("\n\t")"},
       {R"("a")", R"("abcde")"}},
      {R"({"type": "string", "format": "date"})", {R"("2026-12-04")"}, {R"("2026-13-01")", R"("26-12-04")"}},
      {R"({"type": "string", "format": "date-time"})",
       {R"("2026-12-04T13:05:00Z")", R"("2026-12-04T13:05:00.123+01:00")"},
       {R"("2026-12-04 13:05:00Z")", R"("2026-12-04T25:00:00Z")"}},
      {R"({"type": "string", "format": "time"})", {R"("23:59:59Z")"}, {R"("24:00:00Z")"}},
      {R"({"type": "string", "format": "uuid"})",
       {R"("123e4567-e89b-12d3-a456-426614174000")"},
       {R"("123e4567e89b12d3a456426614174000")"}},
      {R"({"type": "string", "format": "email"})", {R"("a.b+c@ex-ample.co.uk")"}, {R"("ab@example")", R"("@x.y")"}},
      {R"({"type": "integer", "minimum": -15, "maximum": 230})",
       {"-15", "-9", "0", "7", "99", "100", "230", "199"},
       {"-16", "231", "300", "1000", "-0", "05"}},
      {R"({"type": "integer", "exclusiveMinimum": 9})", {"10", "11", "99999999"}, {"9", "0", "-3"}},
      {R"({"type": "integer", "maximum": 0})", {"0", "-1", "-123456"}, {"1", "17"}},
      {R"({"type": ["string", "null"]})", {R"("x")", "null"}, {"1", "true"}},
      {R"({"type": "number"})", {"1", "-0.5", "3e10", "2.25E-3"}, {"+1", ".5", "1."}},
      {R"({})", {"1", R"({"a": [null]})", R"("s")"}, {"nul"}},
      {R"({"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "integer"},
           "z": {"type": "integer"}}, "required": ["y"]})",
       {R"({"y": 1})", R"({"x": 0, "y": 1})", R"({"y": 1, "z": 2})", R"({"x": 0, "y": 1, "z": 2})"},
       {R"({"x": 0})", R"({"x": 0, "z": 2})", R"({"y": 1,})", R"({, "y": 1})"}},
  };
  check_cases(cases);
}

TEST(JsonSchema, UnsupportedKeywordsAreNamed) {
  const auto error = [](const std::string& schema) {
    auto r = json_schema_to_gbnf(Json::parse(schema));
    EXPECT_FALSE(r) << schema;
    return r ? std::string() : r.status().message();
  };
  EXPECT_NE(error(R"({"type": "object", "properties": {"a": {"type": "string", "contentEncoding": "base64"}}})")
                .find("'#/properties/a/contentEncoding'"),
            std::string::npos);
  EXPECT_NE(error(R"({"type": "string", "format": "hostname"})").find("format 'hostname'"), std::string::npos);
  EXPECT_NE(error(R"({"$ref": "#/$defs/missing"})").find("names nothing"), std::string::npos);
  EXPECT_NE(error(R"({"$ref": "https://example.com/s.json"})").find("only #"), std::string::npos);
  EXPECT_NE(error(R"({"type": "number", "minimum": 1e20})").find("beyond 1e15"), std::string::npos);
  EXPECT_NE(error(R"({"type": "number", "minimum": 2.5, "exclusiveMaximum": 2.5})").find("no number"), std::string::npos);
  EXPECT_NE(error(R"({"not": {"type": "string"}})").find("'not'"), std::string::npos);
  EXPECT_NE(error(R"({"type": "object", "required": ["a"]})").find("without a schema"), std::string::npos);
  EXPECT_NE(error(R"({"type": "integer", "minimum": 5, "maximum": 4})").find("no integer"), std::string::npos);
  EXPECT_NE(error(R"({"type": "frog"})").find("type 'frog'"), std::string::npos);
}

// Keywords beside anyOf/allOf/enum, keywords without a type, oneOf, and
// formats as strict as their definitions: outputs never relax the schema.
TEST(JsonSchema, CombinedKeywordsAreHonoured) {
  const std::vector<Case> cases = {
      {R"({"maxLength": 3})", {R"("abc")", R"("")"}, {R"("abcd")", "1"}},
      {R"({"minimum": 5, "maximum": 9})", {"5", "9"}, {"4", "10", "0.5", R"("x")"}},
      {R"({"type": "string", "enum": ["ok", "too long", 1]})", {R"("ok")", R"("too long")"}, {"1"}},
      {R"({"type": "object", "properties": {"top": {"type": "boolean"}}, "required": ["top"],
           "allOf": [{"properties": {"a": {"type": "integer", "minimum": 0, "maximum": 9}}, "required": ["a"]}]})",
       {R"({"top": true, "a": 3})"},
       {R"({"a": 3})", R"({"top": true})", R"({"top": true, "a": 10})"}},
      {R"({"allOf": [{"type": "object", "properties": {"n": {"type": "integer", "minimum": 10}}, "required": ["n"]},
                     {"properties": {"n": {"type": "integer", "maximum": 20}}}]})",
       {R"({"n": 10})", R"({"n": 20})"},
       {R"({"n": 9})", R"({"n": 21})", R"({"n": -300})"}},
      {R"({"type": "object", "properties": {"id": {"type": "integer"}}, "required": ["id"],
           "anyOf": [{"properties": {"a": {"type": "boolean"}}, "required": ["a"]},
                     {"properties": {"b": {"type": "null"}}, "required": ["b"]}]})",
       {R"({"id": 1, "a": false})", R"({"id": 2, "b": null})"},
       {R"({"a": false})", R"({"b": null})", R"({"id": 1})"}},
      {R"({"oneOf": [{"type": "integer", "minimum": 0, "maximum": 4}, {"type": "integer", "minimum": 5, "maximum": 20}]})",
       {"0", "4", "5", "20"}, {"21", "-1"}},
      {R"({"oneOf": [{"type": "object", "properties": {"kind": {"const": "circle"}, "r": {"type": "number"}}, "required": ["kind", "r"]},
                     {"type": "object", "properties": {"kind": {"const": "square"}, "side": {"type": "number"}}, "required": ["kind", "side"]}]})",
       {R"({"kind": "circle", "r": 1})", R"({"kind": "square", "side": 2})"},
       {R"({"kind": "circle", "side": 1})"}},
      {R"({"type": "string", "format": "date"})",
       {R"("2024-02-29")", R"("2000-02-29")", R"("1999-12-31")", R"("2023-04-30")"},
       {R"("1000-02-30")", R"("2023-02-29")", R"("1900-02-29")", R"("2023-04-31")", R"("2023-13-01")"}},
      {R"({"type": "string", "format": "email"})",
       {R"("first.last@mail.example.org")", R"("a_b+c@x-y.io")"},
       {R"("a..b@x.io")", R"(".a@x.io")", R"("a.@x.io")", R"("a@-x.io")", R"("a@x-.io")", R"("a@x..io")"}},
  };
  check_cases(cases);
  const auto error = [](const std::string& schema) {
    auto r = json_schema_to_gbnf(Json::parse(schema));
    EXPECT_FALSE(r) << schema;
    return r ? std::string() : r.status().message();
  };
  EXPECT_NE(error(R"({"$defs": {"s": {"type": "string"}}, "$ref": "#/$defs/s", "maxLength": 3})").find("beside '$ref'"),
            std::string::npos);
  EXPECT_NE(error(R"({"type": "string", "enum": ["a", "bc"], "maxLength": 1})").find("beside 'enum'"), std::string::npos);
  EXPECT_NE(error(R"({"oneOf": [{"type": "integer", "maximum": 9}, {"type": "integer", "minimum": 5}]})").find("may both match"),
            std::string::npos);
  EXPECT_NE(error(R"({"minLength": 1, "minimum": 2})").find("without a 'type'"), std::string::npos);
  EXPECT_NE(error(R"({"allOf": [{"type": "string"}, {"type": "integer"}]})").find("share no type"), std::string::npos);
  EXPECT_NE(error(R"({"allOf": [{"type": "object", "properties": {"a": {}}, "additionalProperties": false},
                                {"properties": {"b": {}}, "required": ["b"]}]})")
                .find("'b' is not allowed"),
            std::string::npos);
}

// Number bounds: decimals without an exponent, exactly the values in range.
TEST(JsonSchema, NumberBounds) {
  const std::vector<Case> cases = {
      {R"({"type": "number", "minimum": 0, "maximum": 1})",
       {"0", "1", "0.5", "0.999", "1.0", "1.000", "0.0"},
       {"1.01", "-0.1", "2", "1e0", "-0", "01"}},
      {R"({"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 1})",
       {"0.5", "0.001", "0.999"},
       {"0", "0.0", "1", "1.0", "1.5"}},
      {R"({"type": "number", "minimum": -2.5, "maximum": 3.25})",
       {"-2.5", "-2.49", "-2", "-0.1", "0", "3", "3.25", "3.2", "3.250", "1.75"},
       {"-2.51", "-3", "3.26", "3.3", "4", "-2.500001"}},
      {R"({"type": "number", "minimum": 10.05})",
       {"10.05", "10.1", "10.050", "11", "123456.5"},
       {"10", "10.04", "10.049", "9.99", "-11"}},
      {R"({"type": "number", "exclusiveMaximum": -0.5})",
       {"-0.6", "-1", "-12.25"},
       {"-0.5", "-0.50", "-0.4", "0", "1"}},
      {R"({"type": "number", "minimum": 1.5, "maximum": 1.75})",
       {"1.5", "1.6", "1.75", "1.7499", "1.50"},
       {"1", "2", "1.49", "1.751", "1.8"}},
  };
  check_cases(cases);
  // > 0.1 and <= 0.1 (the tighter of each pair holds): no number at all.
  EXPECT_FALSE(json_schema_to_gbnf(Json::parse(
      R"({"type": "number", "minimum": 0.1, "exclusiveMinimum": 0.1, "maximum": 1e-1, "exclusiveMaximum": 5})")));
}

TEST(JsonSchema, JsonObjectMode) {
  auto g = parse_gbnf(json_object_gbnf());
  ASSERT_TRUE(g) << g.status().message();
  auto gp = std::make_shared<const Grammar>(std::move(*g));
  EXPECT_TRUE(accepts(gp, R"({"a": [1, {"b": null}], "c": "d"})"));
  EXPECT_FALSE(accepts(gp, "[1]"));
  EXPECT_FALSE(accepts(gp, R"("s")"));
}

// Two schemas' rules under their own prefixes combine into one grammar; each
// keeps its own constraints, including recursive $refs named alike in both.
TEST(JsonSchema, PrefixedRulesCombine) {
  const char* a = R"({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]})";
  const char* b = R"({"$defs": {"node": {"type": "object", "properties": {"next": {"$ref": "#/$defs/node"}}}},
                      "$ref": "#/$defs/node"})";
  auto ra = json_schema_rules(Json::parse(a), "t0-");
  auto rb = json_schema_rules(Json::parse(b), "t1-");
  ASSERT_TRUE(ra) << ra.status().message();
  ASSERT_TRUE(rb) << rb.status().message();
  const std::string text = "root ::= \"a=\" t0-value | \"b=\" t1-value\n" + *ra + *rb + json_primitives_gbnf();
  auto g = parse_gbnf(text);
  ASSERT_TRUE(g) << g.status().message() << "\n" << text;
  auto gp = std::make_shared<const Grammar>(std::move(*g));
  EXPECT_TRUE(accepts(gp, R"(a={"n": 3})"));
  EXPECT_FALSE(accepts(gp, R"(a={"n": "x"})"));
  EXPECT_FALSE(accepts(gp, R"(a= {"n": 3})"));  // no padding around a value rule
  EXPECT_TRUE(accepts(gp, R"(b={"next": {"next": {}}})"));
  EXPECT_FALSE(accepts(gp, R"(b={"n": 3})"));
  // The plain form is unchanged: its root still pads with whitespace.
  EXPECT_TRUE(compile(a) && accepts(compile(a), R"( {"n": 1} )"));
  EXPECT_FALSE(json_schema_rules(Json::parse(a), "bad prefix"));
  EXPECT_FALSE(json_schema_rules(Json::parse(a), ""));
}

}  // namespace
}  // namespace cairn::grammar
