// The pre-tokenizer regex lists on their own: where words are cut.
#include "tokenizer/pretokenizer.h"

#include <gtest/gtest.h>

#include "tokenizer/utf8.h"

namespace cairn::tok {
namespace {

std::vector<std::string> split(const std::string& pre, const std::string& text) {
  auto p = Pretokenizer::create(pre);
  EXPECT_TRUE(p) << p.status().message();
  if (!p) return {};
  std::vector<std::string> out;
  std::string joined;
  for (std::string_view w : (*p)->split(text)) {
    out.emplace_back(w);
    joined += w;
  }
  EXPECT_EQ(joined, text) << "pieces must cover the text exactly";
  return out;
}

using V = std::vector<std::string>;

TEST(Pretokenizer, Gpt2) {
  EXPECT_EQ(split("gpt-2", "Hello world"), (V{"Hello", " world"}));
  EXPECT_EQ(split("gpt-2", "I've 12 cats!!"), (V{"I", "'ve", " 12", " cats", "!!"}));
  // \s+(?!\S): the last space before a word goes with the word.
  EXPECT_EQ(split("gpt-2", "a   b"), (V{"a", "  ", " b"}));
  EXPECT_EQ(split("gpt-2", "end  "), (V{"end", "  "}));
  // Unicode letters and numbers (\p{L}, \p{N}), not just ASCII.
  EXPECT_EQ(split("gpt-2", "\xD0\xBD\xD0\xB5 \xD9\xA3\xD9\xA4"),  // "не ٣٤"
            (V{"\xD0\xBD\xD0\xB5", " \xD9\xA3\xD9\xA4"}));
}

TEST(Pretokenizer, Llama3) {
  EXPECT_EQ(split("llama-bpe", "12345"), (V{"123", "45"}));
  EXPECT_EQ(split("llama-bpe", "DON'T stop"), (V{"DON", "'T", " stop"}));
  EXPECT_EQ(split("llama-bpe", "x\n\n  y"), (V{"x", "\n\n", " ", " y"}));
  EXPECT_EQ(split("llama3", "12345"), split("llama-bpe", "12345"));  // an alias
}

TEST(Pretokenizer, Qwen2SplitsEveryDigit) {
  EXPECT_EQ(split("qwen2", "12345"), (V{"1", "2", "3", "4", "5"}));
  EXPECT_EQ(split("qwen2", "Hi!\n"), (V{"Hi", "!\n"}));
}

TEST(Pretokenizer, DeepseekAndOthers) {
  EXPECT_EQ(split("deepseek-coder", "ab 12"), (V{"ab", " ", "1", "2"}));
  EXPECT_EQ(split("deepseek-llm", "ab  "), (V{"ab", "  "}));
  EXPECT_EQ(split("falcon", "1234567"), (V{"123", "456", "7"}));
  EXPECT_EQ(split("starcoder", "x12"), (V{"x", "1", "2"}));
  EXPECT_EQ(split("default", "a+b=12345"), (V{"a", "+", "b", "=", "123", "45"}));
  EXPECT_EQ(split("", "a+b"), split("default", "a+b"));
}

TEST(Pretokenizer, NonAsciiWhitespaceCountsAsSpace) {
  // U+3000 (ideographic space) and U+0085 (next line) are White_Space: as
  // symbols they would stay together as one piece.
  EXPECT_EQ(split("gpt-2",
                  "a\xE3\x80\x80\xE3\x80\x80"
                  "b"),
            (V{"a", "\xE3\x80\x80", "\xE3\x80\x80", "b"}));
  EXPECT_EQ(split("gpt-2", "a\xC2\x85\xC2\x85"), (V{"a", "\xC2\x85\xC2\x85"}));
}

TEST(Pretokenizer, InvalidUtf8IsCoveredNotDropped) {
  for (const char* pre : {"gpt-2", "llama-bpe", "qwen2", "deepseek-llm", "deepseek-coder", "falcon",
                          "starcoder", "default", "gpt-4o", "tekken", "bloom"}) {
    const std::vector<std::string> w = split(pre, "ok \xFF\xC3 bad \xE2\x82 x\xF0\x9F\x98");
    EXPECT_FALSE(w.empty()) << pre;
  }
}

TEST(Pretokenizer, EveryListCompiles) {
  for (const char* pre : {"gpt-2", "llama-bpe", "qwen2", "deepseek-llm", "deepseek-coder", "falcon",
                          "starcoder", "default", "gpt-4o", "tekken", "bloom", "viking",
                          "seed-coder", "refact", "command-r", "stablelm2", "dbrx", "mpt"}) {
    std::string used;
    auto p = Pretokenizer::create(pre, &used);
    ASSERT_TRUE(p) << pre << ": " << p.status().message();
    EXPECT_FALSE(used.empty());
  }
}

TEST(Pretokenizer, LongWhitespaceRuns) {
  const std::string text = "a" + std::string(100000, ' ') + "b" + std::string(50000, '\n');
  for (const char* pre : {"gpt-2", "llama-bpe", "qwen2", "deepseek-llm"}) {
    const std::vector<std::string> w = split(pre, text);
    EXPECT_GE(w.size(), 3u) << pre;
  }
}

TEST(Utf8, Step) {
  EXPECT_EQ(utf8_step("a").kind, Utf8Scan::Complete);
  EXPECT_EQ(utf8_step("\xC3\xA9").len, 2u);
  EXPECT_EQ(utf8_step("\xC3").kind, Utf8Scan::Incomplete);
  EXPECT_EQ(utf8_step("\xE2\x82").kind, Utf8Scan::Incomplete);
  EXPECT_EQ(utf8_step("\xFF").kind, Utf8Scan::Invalid);
  EXPECT_EQ(utf8_step("\xC0\x80").kind, Utf8Scan::Invalid);          // overlong
  EXPECT_EQ(utf8_step("\xED\xA0\x80").kind, Utf8Scan::Invalid);      // surrogate
  EXPECT_EQ(utf8_step("\xF4\x90\x80\x80").kind, Utf8Scan::Invalid);  // past U+10FFFF
  const Utf8Step bad3 = utf8_step("\xE2\x82x");
  EXPECT_EQ(bad3.kind, Utf8Scan::Invalid);
  EXPECT_EQ(bad3.len, 2u);  // the maximal subpart, replaced by one U+FFFD
}

TEST(Utf8, ByteLevelRoundTrip) {
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  const std::string enc = byte_level_encode(all);
  EXPECT_EQ(byte_level_decode(enc), all);
  EXPECT_EQ(byte_level_encode(" "), "\xC4\xA0");   // "Ġ"
  EXPECT_EQ(byte_level_encode("\n"), "\xC4\x8A");  // "Ċ"
  EXPECT_EQ(byte_level_encode("A"), "A");
}

}  // namespace
}  // namespace cairn::tok
