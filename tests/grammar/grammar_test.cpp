// The grammar layer: GBNF text to rules (and its errors), the byte-level
// recognizer (repetitions, classes, UTF-8 split across bytes, ends), and
// token masks equal to trying every token one by one.
#include <gtest/gtest.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/matcher.h"
#include "grammar/token_mask.h"

namespace cairn::grammar {
namespace {

std::shared_ptr<const Grammar> compile(const std::string& text) {
  auto g = parse_gbnf(text);
  EXPECT_TRUE(g) << g.status().message();
  return g ? std::make_shared<const Grammar>(std::move(*g)) : nullptr;
}

// Whether the whole of `s` is a sentence of `g`.
bool full(const std::shared_ptr<const Grammar>& g, const std::string& s) {
  Matcher m(g);
  return m.accept(s) && m.can_end();
}

// A JSON grammar written from RFC 8259.
const char* kJson = R"(
root   ::= ws value ws
value  ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ws ( member ( ws "," ws member )* )? ws "}"
member ::= string ws ":" ws value
array  ::= "[" ws ( value ( ws "," ws value )* )? ws "]"
string ::= "\"" ( [^"\\\x00-\x1f] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\""
number ::= "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )?
ws     ::= [ \t\n\r]*
)";

TEST(Gbnf, ParsesAndRecognizesJson) {
  auto g = compile(kJson);
  ASSERT_TRUE(g);
  for (const char* ok : {"{}", "[]", " {\"a\": [1, -2.5e3, true, null, \"x\\\"y\"]} ", "\"\\u00e9\"",
                         "0", "[[[]]]", "{\"k\":{\"k\":{}}}", "\"é ✓ 😀\""})
    EXPECT_TRUE(full(g, ok)) << ok;
  for (const char* bad : {"{", "[1,]", "01", "\"\\x\"", "{\"a\" 1}", "tru", "\"a\nb\"", "1.e5", "--1"})
    EXPECT_FALSE(full(g, bad)) << bad;
}

TEST(Gbnf, RepetitionsAndClasses) {
  auto g = compile("root ::= \"a\"{2,3} [x-z]+ \"b\"? \"cd\"{2} [^0-9]{1,} .");
  ASSERT_TRUE(g);
  EXPECT_TRUE(full(g, "aaxcdcd!?"));
  EXPECT_TRUE(full(g, "aaazzbcdcdQ7"));
  EXPECT_FALSE(full(g, "axcdcd!?"));      // one a
  EXPECT_FALSE(full(g, "aaaaxcdcd!?"));   // four
  EXPECT_FALSE(full(g, "aaxcdcd7?"));     // a digit where none may be
  EXPECT_FALSE(full(g, "aaxcd!?"));       // cd once
  // Multi-line rules, comments, groups, alternatives across lines.
  auto h = compile("# numbers\nroot ::= item (\",\" item)*  # a list\nitem ::= (\n  \"one\" |\n  \"two\"\n)\n");
  ASSERT_TRUE(h);
  EXPECT_TRUE(full(h, "one,two,one"));
  EXPECT_FALSE(full(h, "one,"));
}

TEST(Gbnf, Utf8SplitAcrossBytes) {
  auto g = compile("root ::= [α-ω]+ \"✓\"");
  ASSERT_TRUE(g);
  Matcher m(g);
  const std::string s = "αβ✓";
  // Every prefix is accepted byte by byte, the end only after the last byte.
  for (size_t i = 0; i < s.size(); ++i) {
    ASSERT_TRUE(m.accept_byte((uint8_t)s[i])) << i;
    EXPECT_EQ(m.can_end(), i + 1 == s.size()) << i;
  }
  Matcher n(g);
  EXPECT_FALSE(n.accept_byte(0xC3));  // é's lead byte: no code point of [α-ω] starts so
  EXPECT_TRUE(n.accept_byte(0xCE));   // α's lead byte
  EXPECT_FALSE(n.accept_byte('a'));   // not a continuation byte
  EXPECT_FALSE(Matcher(g).accept_byte(0xFF));
}

TEST(Gbnf, ErrorsNameWhatIsWrong) {
  const auto error = [](const std::string& text) {
    auto g = parse_gbnf(text);
    EXPECT_FALSE(g) << text;
    return g ? std::string() : g.status().message();
  };
  EXPECT_NE(error("root ::= missing").find("'missing' is not defined"), std::string::npos);
  EXPECT_NE(error("root ::= \"abc").find("unterminated string"), std::string::npos);
  EXPECT_NE(error("root ::= x\nx ::= x \"a\" | \"b\"").find("left-recursive"), std::string::npos);
  EXPECT_NE(error("root ::= (\"a\"?)*").find("left-recursive"), std::string::npos);
  EXPECT_NE(error("root ::= \"a\"\nroot ::= \"b\"").find("defined twice"), std::string::npos);
  EXPECT_NE(error("root ::= [z-a]").find("end before its start"), std::string::npos);
  EXPECT_NE(error("root ::= \"\\q\"").find("unknown escape"), std::string::npos);
  EXPECT_NE(error("root ::= \"a\" )").find("line 1, column 14"), std::string::npos);
  EXPECT_NE(error("root ::= \"a\"{3,2}").find("count"), std::string::npos);
  EXPECT_NE(error("other ::= \"a\"").find("no rule named 'root'"), std::string::npos);
  EXPECT_NE(error("root ::= * \"a\"").find("nothing before it"), std::string::npos);
}

TEST(TokenMask, EqualsTryingEveryToken) {
  auto g = compile(kJson);
  ASSERT_TRUE(g);
  // A vocabulary of JSON-ish pieces, single bytes, UTF-8 fragments and an
  // end token (id 0, no bytes).
  std::vector<std::string> pieces = {"", "{", "}", "[", "]", "\"", ",", ":", " ", "\n", "true", "fal",
                                     "se", "null", "0", "1", "23", "-", ".", "e+", "\"a\"", "\"k\":",
                                     "\\", "\\u", "00e9", "é", "\xC3", "\xA9", "😀", "\xF0\x9F", "{\"",
                                     "\"}", "],", "x", "0.", "tru"};
  TokenTrie trie(pieces, {0});
  std::mt19937 rng(5);
  for (const std::string& prefix :
       {std::string(), std::string("{"), std::string("{\"k\": [1, "), std::string("\"\xC3"),
        std::string("[true"), std::string("{\"a\":\"x\"}"), std::string("-"), std::string("\"\\")}) {
    Matcher m(g);
    ASSERT_TRUE(m.accept(prefix)) << prefix;
    std::vector<uint8_t> mask;
    const int32_t n = trie.fill_mask(m, mask);
    int32_t want_n = 0;
    for (size_t id = 0; id < pieces.size(); ++id) {
      Matcher t = m;
      const bool want = id == 0 ? m.can_end() : t.accept(pieces[id]);
      EXPECT_EQ(mask[id] != 0, want) << "prefix '" << prefix << "' token '" << pieces[id] << "'";
      want_n += want;
    }
    EXPECT_EQ(n, want_n);
  }
}

// Generation as the engine will run it: at every step a random allowed
// token, until only the end is allowed or the end is drawn; every finished
// output is a sentence.
TEST(TokenMask, RandomWalksStayInTheLanguage) {
  auto g = compile(R"(root ::= "{" ws "\"n\":" ws [0-9]{1,3} ws "," ws "\"s\":" ws "\"" [a-z ]{0,8} "\"" ws "}"
ws ::= " "?)");
  ASSERT_TRUE(g);
  std::vector<std::string> pieces = {""};
  for (int c = 32; c < 127; ++c) pieces.push_back(std::string(1, (char)c));
  for (const char* p : {"\"n\":", "\"s\":", " \"", "\"}", "12", "345", "abc", " x", "{\""})
    pieces.push_back(p);
  TokenTrie trie(pieces, {0});
  std::mt19937 rng(9);
  for (int run = 0; run < 200; ++run) {
    Matcher m(g);
    std::string out;
    for (int step = 0; step < 64; ++step) {
      std::vector<uint8_t> mask;
      ASSERT_GT(trie.fill_mask(m, mask), 0) << out;
      std::vector<int32_t> ok;
      for (size_t i = 0; i < mask.size(); ++i)
        if (mask[i]) ok.push_back((int32_t)i);
      const int32_t t = ok[rng() % ok.size()];
      if (t == 0) break;
      ASSERT_TRUE(m.accept(pieces[(size_t)t]));
      out += pieces[(size_t)t];
    }
    EXPECT_TRUE(full(g, out)) << out;
  }
}

}  // namespace
}  // namespace cairn::grammar

namespace cairn::grammar {
namespace {

// A state seen before gets the mask it had; a state is the whole parse, so
// two outputs that leave the recognizer alike share a mask; the cache keeps
// to its byte bound.
TEST(TokenMask, CachedMasksEqualFreshOnes) {
  auto g = compile(kJson);
  ASSERT_TRUE(g);
  std::vector<std::string> pieces = {"", "{", "}", "\"", "a", "b", "ab", ":", " ", "1", "\\", "\\n", "é"};
  TokenTrie trie(pieces, {0});
  MaskCache cache;
  std::vector<uint8_t> fresh, cached;
  for (const char* prefix : {"{\"", "{\"a", "{\"ab", "[\"b", "{\"a\": \"", "{\"a\": \"é"}) {
    Matcher m(g);
    ASSERT_TRUE(m.accept(prefix)) << prefix;
    const int32_t n = trie.fill_mask(m, fresh);
    EXPECT_EQ(trie.fill_mask(m, cached, cache), n);
    EXPECT_EQ(cached, fresh) << prefix;
    EXPECT_EQ(trie.fill_mask(m, cached, cache), n);  // now from the cache
    EXPECT_EQ(cached, fresh) << prefix;
  }
  // Inside an object key, every character returns to the same state.
  Matcher a(g), b(g);
  ASSERT_TRUE(a.accept("{\"a"));
  ASSERT_TRUE(b.accept("{\"abba"));
  EXPECT_EQ(a.state_key(), b.state_key());
  MaskCache small(3 * pieces.size());
  for (const char* prefix : {"{", "[", "{\"", "[1", "\"x"}) {
    Matcher m(g);
    ASSERT_TRUE(m.accept(prefix));
    trie.fill_mask(m, cached, small);
  }
  EXPECT_LE(small.size(), 2u);
}

}  // namespace
}  // namespace cairn::grammar
