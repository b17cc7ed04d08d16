// Token masks walked over the state table equal the original walk (a copy of
// the recognizer per trie node) and trying every token alone, bit for bit,
// at every step of random generations under several grammars; with a fresh
// table, one shared across steps, one too small to hold a walk, and through
// the mask cache.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar/regex.h"
#include "grammar/token_mask.h"

namespace cairn::grammar {
namespace {

std::shared_ptr<const Grammar> compile(const std::string& text) {
  auto g = parse_gbnf(text);
  EXPECT_TRUE(g) << g.status().message() << "\n" << text;
  return g ? std::make_shared<const Grammar>(std::move(*g)) : nullptr;
}

struct Case {
  std::string name;
  std::shared_ptr<const Grammar> grammar;
  std::vector<std::string> samples;  // sentences whose pieces make up the vocabulary
};

std::vector<Case> cases() {
  std::vector<Case> out;
  const char* schema = R"({"type": "object", "properties": {
    "id": {"type": "integer", "minimum": 0}, "name": {"type": "string", "maxLength": 12},
    "email": {"type": "string", "format": "email"}, "active": {"type": "boolean"},
    "score": {"type": "number"}, "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
    "role": {"enum": ["admin", "user", "guest"]}, "created": {"type": "string", "format": "date-time"},
    "address": {"type": "object", "properties": {"city": {"type": "string"}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
                "required": ["city", "zip"]},
    "notes": {"type": ["string", "null"]}},
    "required": ["id", "name", "email", "active", "score", "tags", "role", "created", "address", "notes"]})";
  auto text = json_schema_to_gbnf(nlohmann::ordered_json::parse(schema));
  EXPECT_TRUE(text);
  out.push_back({"schema", compile(*text),
                 {R"({"id": 12, "name": "Ann é✓", "email": "a@b.c", "active": true, "score": -1.5e3, "tags": ["x", "\u00e9"], "role": "admin", "created": "2024-01-02T03:04:05Z", "address": {"city": "Zürich 😀", "zip": "12345"}, "notes": null})",
                  "{\n  \"id\": 0,\n  \"name\": \"\\\"q\\\\\"\n}"}});
  out.push_back({"json_object", compile(json_object_gbnf()),
                 {R"({"a": [1, 2.5, {"b": {"c": [[], {}]}}, "ü😀", null, false], "k\"ey": "v\n"})"}});
  auto re = regex_to_gbnf("[a-z]{2,5}-\\d{3}(é|✓|😀|[^\\x00-\\x7f])+(x|yz)?", RegexContext::Whole);
  EXPECT_TRUE(re);
  out.push_back({"regex", compile("root ::= " + *re), {"abc-123é✓😀ßx", "zz-999✓yz"}});
  out.push_back({"nested", compile(R"g(
root   ::= expr (";" expr)*
expr   ::= term (("+" | "-") term)*
term   ::= factor (("*" | "/") factor)*
factor ::= number | "(" expr ")" | "-" factor | name ("(" args? ")")?
args   ::= expr ("," expr)*
number ::= [0-9]+ ("." [0-9]+)?
name   ::= [a-zA-Zα-ω_] [a-zA-Z0-9α-ω_]*)g"),
                 {"f(1,(2+x)*-3);((y))/4.5", "αβ(γ(δ(1)))+-(-(2))"}});
  out.push_back({"ambiguous", compile(R"(
root ::= (a | b | "ab" "c"?)+ "!"?
a    ::= "a" | "a" "b"
b    ::= "b" | [^a!]
)"),
                 {"abcababc!", "ab✓b"}});
  return out;
}

// All 256 single bytes, byte substrings of the samples (so pieces start and
// end inside UTF-8 sequences and span several grammar symbols), an empty
// (control) token and two end tokens.
std::vector<std::string> vocabulary(const Case& c, std::mt19937& rng) {
  std::set<std::string> set;
  for (int b = 0; b < 256; ++b) set.insert(std::string(1, (char)b));
  for (const std::string& s : c.samples)
    for (int k = 0; k < 300; ++k) {
      const size_t at = rng() % s.size(), len = 1 + rng() % 8;
      set.insert(s.substr(at, len));
    }
  std::vector<std::string> pieces = {"", "", ""};  // 0, 1: end tokens; 2: control
  pieces.insert(pieces.end(), set.begin(), set.end());
  return pieces;
}

// Tries every token alone.
std::vector<uint8_t> brute_force(const Matcher& m, const std::vector<std::string>& pieces) {
  std::vector<uint8_t> mask(pieces.size(), 0);
  for (size_t id = 0; id < pieces.size(); ++id) {
    if (id < 2) {
      mask[id] = m.can_end();
    } else if (!pieces[id].empty()) {
      Matcher t = m;
      mask[id] = t.accept(pieces[id]);
    }
  }
  return mask;
}

TEST(TokenMask, TableWalkEqualsOriginalOnRandomGenerations) {
  std::mt19937 rng(17);
  for (const Case& c : cases()) {
    ASSERT_TRUE(c.grammar) << c.name;
    const std::vector<std::string> pieces = vocabulary(c, rng);
    TokenTrie trie(pieces, {0, 1});
    StateTable shared;
    StateTable tiny(4096);  // fills up inside most walks: the fallback runs
    MaskCache cache;
    int states = 0;
    for (int run = 0; run < 30; ++run) {
      Matcher m(c.grammar);
      std::string out;
      for (int step = 0; step < 40; ++step, ++states) {
        std::vector<uint8_t> ref, got;
        const int32_t n = trie.fill_mask_by_copying(m, ref);
        if (step % 3 == 0) {  // the reference itself, now and then (it is slow)
          ASSERT_EQ(ref, brute_force(m, pieces)) << c.name << " after '" << out << "'";
        }
        EXPECT_EQ(trie.fill_mask(m, got), n);
        ASSERT_EQ(got, ref) << c.name << " fresh table after '" << out << "'";
        EXPECT_EQ(trie.fill_mask(m, got, shared), n);
        ASSERT_EQ(got, ref) << c.name << " shared table after '" << out << "'";
        EXPECT_EQ(trie.fill_mask(m, got, tiny), n);
        ASSERT_EQ(got, ref) << c.name << " tiny table after '" << out << "'";
        EXPECT_EQ(trie.fill_mask(m, got, cache), n);
        ASSERT_EQ(got, ref) << c.name << " cache after '" << out << "'";
        std::vector<int32_t> ok;
        for (size_t i = 0; i < ref.size(); ++i)
          if (ref[i]) ok.push_back((int32_t)i);
        if (ok.empty()) break;
        // Mostly longer pieces, so generations get deep into the grammar.
        int32_t t = ok[rng() % ok.size()];
        for (int k = 0; k < 3 && pieces[(size_t)t].size() < 2; ++k) t = ok[rng() % ok.size()];
        if (t < 2) {
          EXPECT_TRUE(m.can_end());
          break;
        }
        ASSERT_TRUE(m.accept(pieces[(size_t)t]));
        out += pieces[(size_t)t];
      }
    }
    EXPECT_GT(states, 200) << c.name;
    EXPECT_GT(shared.size(), 10u) << c.name;
  }
}

// The end tokens come in exactly where the input may end; a finished
// sentence allows them alone; a code point left half-read allows neither
// end nor ASCII, only its continuation bytes.
TEST(TokenMask, EndStatesAndHalfReadCodePoints) {
  auto g = compile(R"(root ::= "a" [é✓]? | "b")");
  ASSERT_TRUE(g);
  const std::vector<std::string> pieces = {"", "a", "b", "é", "\xC3", "\xA9", "\xE2\x9C", "\x93",
                                           "\xE2", "a\xC3", "\xA9\xE2\x9C\x93", "ab", "\xC3\xA9x"};
  TokenTrie trie(pieces, {0});
  StateTable table;
  const auto mask = [&](const std::string& prefix) {
    Matcher m(g);
    EXPECT_TRUE(m.accept(prefix)) << prefix;
    std::vector<uint8_t> got, ref;
    trie.fill_mask_by_copying(m, ref);
    trie.fill_mask(m, got, table);
    EXPECT_EQ(got, ref) << prefix;
    std::string on;
    for (size_t i = 0; i < got.size(); ++i)
      if (got[i]) on += std::to_string(i) + " ";
    return on;
  };
  EXPECT_EQ(mask(""), "1 2 9 ");            // a, b, "a" + é's lead byte
  EXPECT_EQ(mask("a"), "0 3 4 6 8 ");       // end, é, its lead, ✓'s first two, its lead
  EXPECT_EQ(mask("a\xC3"), "5 ");           // é's last byte alone
  EXPECT_EQ(mask("a\xE2\x9C"), "7 ");       // ✓'s last byte
  EXPECT_EQ(mask("a\xC3\xA9"), "0 ");       // done: the end alone
  EXPECT_EQ(mask("b"), "0 ");
}

// Only well-formed UTF-8 passes, even where the grammar takes any character:
// overlong forms, encoded surrogates and bytes past U+10FFFF are refused by
// the matcher and by the table walk alike.
TEST(TokenMask, MalformedUtf8IsNeverAllowed) {
  auto g = compile(R"(root ::= [^"]*)");
  ASSERT_TRUE(g);
  const std::vector<std::string> pieces = {
      "\xE2\x82\xAC", "\xF0\x9F\x98\x80", "\xED\x9F\xBF",  // €, 😀, U+D7FF: fine
      "\xE0\x80\xB0", "\xC0\xB0", "\xED\xA0\x80", "\xF0\x80\x80\xB0", "\xF4\x90\x80\x80",
      "\xE0\x80", "\xED\xA0", "\xF0\x8F", "\xF4\x90", "\xF5"};
  for (size_t i = 0; i < pieces.size(); ++i) EXPECT_EQ(Matcher(g).accept(pieces[i]), i < 3) << i;
  TokenTrie trie(pieces, {});
  StateTable table;
  Matcher m(g);
  std::vector<uint8_t> got, ref;
  trie.fill_mask_by_copying(m, ref);
  trie.fill_mask(m, got, table);
  EXPECT_EQ(got, ref);
  for (size_t i = 0; i < pieces.size(); ++i) EXPECT_EQ(got[i] != 0, i < 3) << i;
}

// A table handed matchers of another grammar starts over (its states and
// code-point classes belong to one grammar), and its masks stay exact.
TEST(TokenMask, OneTableAcrossGrammars) {
  auto digits = compile("root ::= [0-9]+ \"é\"?");
  auto letters = compile("root ::= [a-zé]+");
  ASSERT_TRUE(digits && letters);
  const std::vector<std::string> pieces = {"", "1", "12", "a", "ab", "é", "\xC3", "1é", "aé"};
  TokenTrie trie(pieces, {0});
  StateTable table;
  for (int k = 0; k < 4; ++k)
    for (const auto& [g, prefix] : {std::pair{digits, "1"}, std::pair{letters, "a"}}) {
      Matcher m(g);
      ASSERT_TRUE(m.accept(prefix));
      std::vector<uint8_t> got, ref;
      trie.fill_mask_by_copying(m, ref);
      EXPECT_EQ(trie.fill_mask(m, got, table), std::count(ref.begin(), ref.end(), 1));
      EXPECT_EQ(got, ref) << prefix;
    }
}

}  // namespace
}  // namespace cairn::grammar
