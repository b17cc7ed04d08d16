// Regular expressions to grammar: whole-output expressions (guided_regex)
// and a schema's unanchored pattern inside a JSON string; refusals by name.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar/regex.h"

namespace cairn::grammar {
namespace {

std::shared_ptr<const Grammar> whole(const std::string& re) {
  auto expr = regex_to_gbnf(re, RegexContext::Whole);
  EXPECT_TRUE(expr) << re << ": " << expr.status().message();
  if (!expr) return nullptr;
  auto g = parse_gbnf("root ::= " + *expr);
  EXPECT_TRUE(g) << g.status().message() << "\n" << *expr;
  return g ? std::make_shared<const Grammar>(std::move(*g)) : nullptr;
}

bool accepts(const std::shared_ptr<const Grammar>& g, const std::string& s) {
  Matcher m(g);
  return m.accept(s) && m.can_end();
}

TEST(Regex, WholeOutputs) {
  struct Case {
    const char* re;
    std::vector<const char*> good, bad;
  };
  const std::vector<Case> cases = {
      {R"(\d{3}-\d{4})", {"555-1234"}, {"5551234", "55-1234", "555-12345"}},
      {R"((cat|dog)s?)", {"cat", "dogs"}, {"cow", "catss"}},
      {R"([A-Z][a-z]*( [A-Z][a-z]*)*)", {"Ann", "Ann Lee", "A B"}, {"ann", "Ann  Lee", "Ann "}},
      {R"(^[^aeiou\s]+$)", {"xyz", "B2"}, {"xa", "x y", ""}},
      {R"(a.c)", {"abc", "a c", "aéc"}, {"a\nc", "ac"}},
      {R"(\w+@\w+\.(com|org))", {"me@site.com", "a_1@b.org"}, {"me@site.net", "@site.com"}},
      {R"(x{2,}y{0,1}z{1})", {"xxz", "xxxxyz"}, {"xz", "xxyyz"}},
      {R"(\u00e9\x41\.\\\[)", {"éA.\\["}, {"eA.\\["}},
      {R"([\d.-]+)", {"-1.5", "3"}, {"+1", ""}},
      {R"((?:ab)+?)", {"ab", "abab"}, {"aba"}},
      {R"(a{2}{)", {"aa{"}, {"aa"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.re);
    auto g = whole(c.re);
    ASSERT_TRUE(g);
    for (const char* s : c.good) EXPECT_TRUE(accepts(g, s)) << "should accept '" << s << "'";
    for (const char* s : c.bad) EXPECT_FALSE(accepts(g, s)) << "should refuse '" << s << "'";
  }
}

TEST(Regex, SchemaPatternsAreUnanchoredAndJsonSafe) {
  const auto compile = [](const std::string& schema) {
    auto text = json_schema_to_gbnf(nlohmann::ordered_json::parse(schema));
    EXPECT_TRUE(text) << text.status().message();
    auto g = parse_gbnf(text ? *text : "");
    EXPECT_TRUE(g) << g.status().message();
    return g ? std::make_shared<const Grammar>(std::move(*g)) : nullptr;
  };
  auto anchored = compile(R"({"type": "string", "pattern": "^[a-z]{2}[0-9]$"})");
  ASSERT_TRUE(anchored);
  EXPECT_TRUE(accepts(anchored, R"("ab1")"));
  EXPECT_FALSE(accepts(anchored, R"("xab1")"));
  EXPECT_FALSE(accepts(anchored, R"("ab12")"));
  auto loose = compile(R"({"type": "string", "pattern": "[0-9]{3}"})");
  ASSERT_TRUE(loose);
  EXPECT_TRUE(accepts(loose, R"("id 123 ok")"));
  EXPECT_FALSE(accepts(loose, R"("id 12 ok")"));
  // A quote, a backslash or a control character cannot come out unescaped.
  auto any = compile(R"({"type": "string", "pattern": "^.+$"})");
  ASSERT_TRUE(any);
  EXPECT_TRUE(accepts(any, R"("a b")"));
  EXPECT_FALSE(accepts(any, "\"a\"b\""));
  EXPECT_FALSE(accepts(any, "\"a\tb\""));
}

TEST(Regex, UnsupportedSyntaxIsNamed) {
  const auto error = [](const std::string& re) {
    auto r = regex_to_gbnf(re, RegexContext::Whole);
    EXPECT_FALSE(r) << re;
    return r ? std::string() : r.status().message();
  };
  EXPECT_NE(error(R"((a)\1)").find("backreferences"), std::string::npos);
  EXPECT_NE(error(R"(a(?=b))").find("lookaround"), std::string::npos);
  EXPECT_NE(error(R"(\bword)").find("word boundaries"), std::string::npos);
  EXPECT_NE(error(R"(a**)").find("quantifier after a quantifier"), std::string::npos);
  EXPECT_NE(error(R"(a{3,2})").find("n below m"), std::string::npos);
  EXPECT_NE(error(R"([z-a])").find("end before its start"), std::string::npos);
  EXPECT_NE(error(R"((ab)").find("without ')'"), std::string::npos);
  EXPECT_NE(error(R"(\p{L})").find("'\\p'"), std::string::npos);
  EXPECT_NE(error(R"(a^b)").find("anchors only at its ends"), std::string::npos);
  EXPECT_NE(error(R"(x\ud800)").find("lone UTF-16 surrogate"), std::string::npos);
  EXPECT_NE(error("a\xED\xA0\x80").find("not valid UTF-8"), std::string::npos);  // an encoded surrogate
  EXPECT_NE(error("\xC0\xB0").find("not valid UTF-8"), std::string::npos);        // an overlong '0'
  EXPECT_NE(error("()* \nB").find("cannot be compiled"), std::string::npos);        // found by schema_regex_fuzz
  EXPECT_NE(error(R"([\ud800-\udfff])").find("lone UTF-16 surrogate"), std::string::npos);
}

// UTF-16 escapes of a character beyond the BMP are that one character.
TEST(Regex, SurrogatePairsAreOneCharacter) {
  auto g = whole(R"(\ud83d\ude00+)");
  ASSERT_TRUE(g);
  EXPECT_TRUE(accepts(g, "\xF0\x9F\x98\x80"));
  EXPECT_TRUE(accepts(g, "\xF0\x9F\x98\x80\xF0\x9F\x98\x80"));
  EXPECT_FALSE(accepts(g, "\xED\xA0\xBD\xED\xB8\x80"));  // the surrogates' own bytes
  EXPECT_FALSE(parse_gbnf("root ::= \"\xE0\x80\xB0\""));  // overlong
  auto gbnf = parse_gbnf(R"(root ::= [\U0000D800-\U0000DFFF])");
  ASSERT_FALSE(gbnf);
  EXPECT_NE(gbnf.status().message().find("surrogate"), std::string::npos);
}

}  // namespace
}  // namespace cairn::grammar
