// Tokenizers on vocabularies the tests write themselves: SPM merges and byte
// fallback, BPE ranks, special tokens, decoding and streaming.
#include <gtest/gtest.h>

#include <thread>

#include "tiny_vocab.h"

namespace cairn {
namespace {

using test::Built;
using test::kSp;

struct Spm : ::testing::Test {
  Built b{test::spm_writer(test::spm_spec())};
  const Tokenizer& t() { return *b; }
  Token id(const std::string& s) {
    const Token x = b->find_token(s);
    EXPECT_GE(x, 0) << s;
    return x;
  }
  void SetUp() override { ASSERT_TRUE(b.tok) << b.error; }
};

TEST_F(Spm, MergesByScoreWithSpacePrefix) {
  EXPECT_EQ(t().encode("hello world", false),
            (std::vector<Token>{id(kSp + "hello"), id(kSp + "world")}));
  // A leading space in the text is kept: two U+2581, merged into one piece.
  EXPECT_EQ(t().encode(" hello", false),
            (std::vector<Token>{id(kSp + kSp), id("h"), id("e"), id("llo")}));
  EXPECT_TRUE(t().encode("", false).empty());
  EXPECT_EQ(t().encode("", true), (std::vector<Token>{1}));
}

TEST_F(Spm, TiesGoToTheLeftmostPair) {
  // "abc": "ab" and "bc" score the same; the leftmost merges first.
  EXPECT_EQ(t().encode("abc", false), (std::vector<Token>{id(kSp), id("ab"), id("c")}));
}

TEST_F(Spm, AddsBosAsFlagged) {
  const std::vector<Token> ids = t().encode("hello", true);
  ASSERT_EQ(ids.size(), 2u);
  EXPECT_EQ(ids[0], 1);
  EXPECT_TRUE(t().add_bos());
  EXPECT_FALSE(t().add_eos());
  EXPECT_EQ(t().bos(), 1);
  EXPECT_EQ(t().eos(), 2);
  EXPECT_TRUE(t().is_eog(2));
  EXPECT_TRUE(t().is_eog(id("<|end|>")));  // known end-of-turn text
  EXPECT_FALSE(t().is_eog(1));
}

TEST_F(Spm, UnknownCharactersFallBackToBytes) {
  // "é" is not a piece: its two UTF-8 bytes become <0xC3> <0xA9>.
  const std::vector<Token> ids = t().encode("h\xC3\xA9llo", false);
  EXPECT_EQ(ids, (std::vector<Token>{id(kSp + "h"), id("<0xC3>"), id("<0xA9>"), id("llo")}));
  EXPECT_EQ(t().token_to_piece(id("<0xC3>")), "\xC3");
  EXPECT_EQ(t().decode(ids), "h\xC3\xA9llo");
  EXPECT_EQ(t().attr(id("<0xC3>")), TokenAttr::Byte);
}

TEST_F(Spm, DecodeInvertsEncode) {
  for (const std::string s : {"hello world", " hello", "  two", "a\tb\nc", "", "\xF0\x9F\xA6\x99!",
                              "\xFF\xFEraw bytes", "trailing ", "<s> typed"}) {
    EXPECT_EQ(t().decode(t().encode(s, false, false)), s) << s;
    EXPECT_EQ(t().decode(t().encode(s, true, false)), s) << s;
  }
  // Pieces: U+2581 shows as a space; control tokens only when asked.
  EXPECT_EQ(t().token_to_piece(id(kSp + "world")), " world");
  EXPECT_EQ(t().token_to_piece(1), "");
  EXPECT_EQ(t().token_to_piece(1, true), "<s>");
  EXPECT_EQ(t().token_to_piece(id("[unused]"), true), "");
  EXPECT_EQ(t().token_to_piece(-1), "");
  EXPECT_EQ(t().token_to_piece(t().vocab_size()), "");
}

TEST_F(Spm, SpecialTokensAreMatchedWholeOnlyWhenAsked) {
  const Token end = id("<|end|>");
  const std::vector<Token> ids = t().encode("hello<|end|>world", false, true);
  EXPECT_EQ(ids, (std::vector<Token>{id(kSp + "hello"), end, id(kSp + "world")}));
  // Plain text never yields control tokens, even when it spells one.
  const std::vector<Token> plain = t().encode("hello<|end|>world", false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), end), 0);
  const std::vector<Token> s = t().encode("<s>", false, false);
  EXPECT_EQ(std::count(s.begin(), s.end(), 1), 0);
  EXPECT_EQ(t().decode(s), "<s>");
  // User-defined tokens are matched either way.
  const Token tool = id("<tool>");
  EXPECT_EQ(t().encode("<tool>", false, false), (std::vector<Token>{tool}));
  EXPECT_EQ(t().token_to_piece(tool), "<tool>");
  // Rendering control tokens gives the text back.
  EXPECT_EQ(t().decode(ids, true), "hello<|end|> world");  // SPM prefixes text after a special
}

TEST_F(Spm, StreamingHoldsSplitCharacters) {
  // "é" arrives as two byte tokens: nothing is emitted until it is whole.
  StreamingDetokenizer d(t());
  EXPECT_EQ(d.push(id(kSp + "h")), " h");  // a continuation keeps its space
  EXPECT_EQ(d.push(id("<0xC3>")), "");
  EXPECT_EQ(d.push(id("<0xA9>")), "\xC3\xA9");
  EXPECT_EQ(d.push(id("llo")), "llo");
  EXPECT_EQ(d.flush(), "");

  // A 4-byte emoji over four tokens.
  StreamingDetokenizer e(t());
  std::string out;
  for (const char* b : {"<0xF0>", "<0x9F>", "<0xA6>"}) {
    EXPECT_EQ(e.push(id(b)), "");
  }
  EXPECT_EQ(e.push(id("<0x99>")), "\xF0\x9F\xA6\x99");
}

TEST_F(Spm, StreamingAtStartStripsThePrefixSpace) {
  StreamingDetokenizer d(t(), false, /*at_start=*/true);
  std::string out;
  for (Token x : t().encode("hello world", true)) out += d.push(x);
  out += d.flush();
  EXPECT_EQ(out, "hello world");
  StreamingDetokenizer c(t(), false, /*at_start=*/false);
  EXPECT_EQ(c.push(id(kSp + "world")), " world");
}

TEST_F(Spm, StreamingReplacesInvalidBytes) {
  StreamingDetokenizer d(t());
  // 0xFF can never start a character: replaced at once, the rest flows.
  EXPECT_EQ(d.push(id("<0xFF>")), "\xEF\xBF\xBD");
  EXPECT_EQ(d.push(id("h")), "h");
  // A lead byte followed by a non-continuation: the lead alone is replaced.
  EXPECT_EQ(d.push(id("<0xC3>")), "");
  EXPECT_EQ(d.push(id("h")), "\xEF\xBF\xBDh");
  // An unfinished character at the end becomes U+FFFD on flush.
  EXPECT_EQ(d.push(id("<0xE2>")), "");
  EXPECT_EQ(d.push(id("<0x96>")), "");
  EXPECT_EQ(d.flush(), "\xEF\xBF\xBD");
  EXPECT_EQ(d.flush(), "");
}

TEST_F(Spm, LongInputIsNotQuadratic) {
  std::string s(200000, 'l');
  const std::vector<Token> ids = t().encode(s, false);
  EXPECT_EQ(t().decode(ids), s);
  EXPECT_LE(ids.size(), s.size() / 2 + 2);  // "ll" pieces
}

TEST_F(Spm, EncodeIsThreadSafe) {
  const std::vector<Token> want = t().encode("hello world <|end|> h\xC3\xA9llo", true);
  std::vector<std::thread> threads;
  std::atomic<int> bad{0};
  for (int k = 0; k < 4; ++k) {
    threads.emplace_back([&] {
      for (int i = 0; i < 200; ++i) {
        if (t().encode("hello world <|end|> h\xC3\xA9llo", true) != want) ++bad;
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(bad.load(), 0);
}

struct Bpe : ::testing::Test {
  Built b{test::bpe_writer(test::bpe_spec())};
  const Tokenizer& t() { return *b; }
  Token id(const std::string& s) {
    const Token x = b->find_token(s);
    EXPECT_GE(x, 0) << s;
    return x;
  }
  void SetUp() override { ASSERT_TRUE(b.tok) << b.error; }
};

TEST_F(Bpe, MergesByRankWithinWords) {
  const std::string G = test::byte_char(' ');
  EXPECT_EQ(t().encode("hello world", false), (std::vector<Token>{id("hello"), id(G + "world")}));
  // "o Ġ" is a merge, but the pre-tokenizer ends the word before the space.
  EXPECT_EQ(t().encode("o w", false), (std::vector<Token>{id("o"), id(G + "w")}));
  EXPECT_EQ(t().encode("123", false), (std::vector<Token>{id("123")}));
  EXPECT_FALSE(t().add_bos());
  EXPECT_FALSE(t().add_space_prefix());
  EXPECT_EQ(t().bos(), -1);
}

TEST(BpeRanks, LowerRankWins) {
  Built ab{test::bpe_writer(test::bpe_spec({"a b", "b c"}))};
  ASSERT_TRUE(ab.tok) << ab.error;
  EXPECT_EQ(ab->encode("abc", false),
            (std::vector<Token>{ab->find_token("ab"), ab->find_token("c")}));
  Built bc{test::bpe_writer(test::bpe_spec({"b c", "a b"}))};
  ASSERT_TRUE(bc.tok) << bc.error;
  EXPECT_EQ(bc->encode("abc", false),
            (std::vector<Token>{bc->find_token("a"), bc->find_token("bc")}));
}

TEST(BpeRanks, LongWordIsNotQuadratic) {
  Built b{test::bpe_writer(test::bpe_spec({"a a", "aa aa", "aaaa aaaa"}))};
  ASSERT_TRUE(b.tok) << b.error;
  const std::string s(200000, 'a');
  const std::vector<Token> ids = b->encode(s, false);
  EXPECT_EQ(ids.size(), s.size() / 8);
  EXPECT_EQ(b->decode(ids), s);
}

TEST_F(Bpe, ByteLevelIsLossless) {
  for (const std::string& s : std::vector<std::string>{
           "hello world", "  spaces  ", "\t\n\r\n", "\xFF\xFE\x80 invalid",
           "caf\xC3\xA9 \xE2\x82\xAC 12345", std::string("nul\0byte", 8), ""}) {
    EXPECT_EQ(t().decode(t().encode(s, false)), s);
    EXPECT_EQ(t().decode(t().encode(s, true)), s);
  }
  EXPECT_EQ(t().token_to_piece(id(test::byte_char(' ') + "world")), " world");
  EXPECT_EQ(t().token_to_piece(id(test::byte_char(0x0A))), "\n");
}

TEST_F(Bpe, SpecialTokens) {
  const Token eot = id("<|endoftext|>");
  EXPECT_EQ(t().eos(), eot);
  EXPECT_TRUE(t().is_eog(eot));
  const std::vector<Token> ids = t().encode("hello<|endoftext|> world", false, true);
  EXPECT_EQ(ids, (std::vector<Token>{id("hello"), eot, id(test::byte_char(' ') + "world")}));
  EXPECT_EQ(t().decode(ids, true), "hello<|endoftext|> world");
  EXPECT_EQ(t().decode(ids, false), "hello world");
  const std::vector<Token> plain = t().encode("hello<|endoftext|>", false, false);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), eot), 0);
  EXPECT_EQ(t().decode(plain), "hello<|endoftext|>");
  EXPECT_EQ(t().encode("x<tool>y", false, false)[1], id("<tool>"));
}

TEST(Specials, LongestTokenWinsAndOverlapsAreNotSplit) {
  test::BpeSpec s = test::bpe_spec();
  s.tokens.insert(s.tokens.end() - 2, {"<a>", "<a><b>"});
  s.types.insert(s.types.end() - 2, {3, 3});
  Built b{test::bpe_writer(s)};
  ASSERT_TRUE(b.tok) << b.error;
  const Token a = b->find_token("<a>"), ab = b->find_token("<a><b>");
  EXPECT_EQ(b->encode("<a><b><a>", false), (std::vector<Token>{ab, a}));
  const std::vector<Token> nested = b->encode("<a<a>>", false);
  EXPECT_EQ(std::count(nested.begin(), nested.end(), a), 1);
  EXPECT_EQ(b->decode(nested, true), "<a<a>>");
}

TEST(Streaming, ContinuationOfBpeText) {
  Built b{test::bpe_writer(test::bpe_spec())};
  ASSERT_TRUE(b.tok) << b.error;
  // "€" (E2 82 AC) is three byte tokens in this tiny vocabulary.
  const std::vector<Token> ids = b->encode(" \xE2\x82\xAC!", false);
  StreamingDetokenizer d(*b);
  std::vector<std::string> outs;
  for (Token x : ids) outs.push_back(d.push(x));
  ASSERT_EQ(outs.size(), 5u);
  EXPECT_EQ(outs[0], " ");
  EXPECT_EQ(outs[1], "");
  EXPECT_EQ(outs[2], "");
  EXPECT_EQ(outs[3], "\xE2\x82\xAC");
  EXPECT_EQ(outs[4], "!");
}

}  // namespace
}  // namespace cairn

namespace cairn {
namespace {

// WordPiece on a tiny BERT-style vocabulary: word-start pieces with U+2581,
// continuations bare, [CLS]/[SEP] from cls/seperator ids.
gguf::Writer wpm_writer(bool with_unk = true) {
  using test::kSp;
  gguf::Writer w;
  w.set_string("general.architecture", "bert");
  w.set_string("tokenizer.ggml.model", "bert");
  const std::vector<std::string> tokens = {
      "[PAD]", "[UNK]", "[CLS]", "[SEP]", kSp + "hello", kSp + "un", "aff", "able",
      kSp + ",", kSp + "!", kSp + "cafe", kSp + "\xE6\x9D\xB1", kSp + "x", "y"};
  w.set_string_array("tokenizer.ggml.tokens", tokens);
  std::vector<int32_t> types(tokens.size(), 1);
  for (int i = 0; i < 4; ++i) types[(size_t)i] = 3;
  w.set_int32_array("tokenizer.ggml.token_type", types);
  if (with_unk) w.set_uint32("tokenizer.ggml.unknown_token_id", 1);
  w.set_uint32("tokenizer.ggml.cls_token_id", 2);
  w.set_uint32("tokenizer.ggml.seperator_token_id", 3);
  w.set_uint32("tokenizer.ggml.padding_token_id", 0);
  return w;
}

TEST(WordPiece, BasicTokenizerThenLongestMatch) {
  Built b(wpm_writer());
  ASSERT_TRUE(b.tok) << b.error;
  const Tokenizer& t = *b;
  // Lowercased, accents stripped, punctuation split off, control characters dropped.
  EXPECT_EQ(t.encode("Hello,\x01 UNaffable!", false),
            (std::vector<Token>{4, 8, 5, 6, 7, 9}));
  EXPECT_EQ(t.encode("Caf\xC3\xA9", false), (std::vector<Token>{10}));
  // A CJK ideograph is a word of its own even inside a run of letters.
  EXPECT_EQ(t.encode("x\xE6\x9D\xB1y", false), (std::vector<Token>{12, 11, 1}));
  // A word without a complete cover is one [UNK]; "xy" is x + ##y.
  EXPECT_EQ(t.encode("unzz xy", false), (std::vector<Token>{1, 12, 13}));
  EXPECT_EQ(t.encode("hello", true), (std::vector<Token>{2, 4, 3}));
  EXPECT_EQ(t.bos(), 2);
  EXPECT_EQ(t.eos(), 3);
  EXPECT_EQ(t.decode({2, 4, 8, 5, 6, 7, 9, 3}), "hello , unaffable !");
  EXPECT_TRUE(t.encode(" \t\n", false).empty());
  // Invalid UTF-8, lone surrogates' bytes, a Hangul syllable (three code
  // points when decomposed) and an overlong form: no crash, words around kept.
  EXPECT_EQ(t.encode("hello \xFF\xFE\xED\xA0\x80 \xEA\xB0\x80 \xC0\xAF hello", false).front(), 4);
  // A pair as the reference's rerank builds it: [CLS] a [SEP] b.
  EXPECT_EQ(t.encode_pair("hello", "hello"), (std::vector<Token>{2, 4, 3, 4}));
}

TEST(WordPiece, CasedWhenTheNormalizerSaysSo) {
  gguf::Writer w = wpm_writer();
  w.set_bool("tokenizer.ggml.normalizer.lowercase", false);
  Built b(w);
  ASSERT_TRUE(b.tok) << b.error;
  EXPECT_EQ(b->encode("Hello hello", false), (std::vector<Token>{1, 4}));
}

TEST(WordPiece, NeedsAnUnknownToken) {
  gguf::Writer w = wpm_writer(false);
  w.set_uint32("tokenizer.ggml.unknown_token_id", 0xFFFFFFFFu);  // "none"
  Built b(w);
  ASSERT_FALSE(b.tok);
  EXPECT_NE(b.error.find("unknown token"), std::string::npos) << b.error;
}

}  // namespace
}  // namespace cairn
