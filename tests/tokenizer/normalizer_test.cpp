// The normalizer before pre-tokenization: NFC from utf8proc, which families
// get it, and that Qwen's vocabulary tokenizes decomposed text as composed.
#include "tokenizer/normalizer.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "gguf/gguf.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace cairn::tok {
namespace {

TEST(Normalizer, NfcComposesCombiningMarks) {
  EXPECT_EQ(nfc("e\xCC\x81"), "\xC3\xA9");                 // e + U+0301 -> é
  EXPECT_EQ(nfc("caf" "e\xCC\x81!"), "caf\xC3\xA9!");
  // Canonical reordering: dot below (ccc 220) before dot above (ccc 230).
  EXPECT_EQ(nfc("q\xCC\x87\xCC\xA3"), "q\xCC\xA3\xCC\x87");
  // Ångström sign U+212B is a singleton: NFC maps it to Å U+00C5.
  EXPECT_EQ(nfc("\xE2\x84\xAB"), "\xC3\x85");
}

TEST(Normalizer, NfcComposesHangulJamo) {
  // U+1100 U+1161 U+11A8 (leading, vowel, trailing jamo) -> U+AC01 각.
  EXPECT_EQ(nfc("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8"), "\xEA\xB0\x81");
  EXPECT_EQ(nfc("\xE1\x84\x80\xE1\x85\xA1"), "\xEA\xB0\x80");  // 가
}

TEST(Normalizer, NfcLeavesComposedAndAsciiTextAlone) {
  for (const std::string& s : {std::string("plain ASCII, 1 2 3\n\t"), std::string("\xC3\xA9t\xC3\xA9"),
                              std::string("\xE4\xBD\xA0\xE5\xA5\xBD"),  // 你好
                              std::string("\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD"),  // 👍🏽
                              std::string("\xEA\xB0\x81"), std::string()}) {
    EXPECT_EQ(nfc(s), s);
  }
  // Compatibility characters stay (NFC, not NFKC): ﬁ U+FB01, ² U+00B2.
  EXPECT_EQ(nfc("\xEF\xAC\x81\xC2\xB2"), "\xEF\xAC\x81\xC2\xB2");
  EXPECT_TRUE(is_ascii("abc"));
  EXPECT_FALSE(is_ascii("\xC3\xA9"));
}

TEST(Normalizer, InvalidUtf8IsKeptByteForByte) {
  EXPECT_EQ(nfc("e\xCC\x81\xFF" "e\xCC\x81"), "\xC3\xA9\xFF\xC3\xA9");
  EXPECT_EQ(nfc("\xC3"), "\xC3");                 // truncated at the end
  EXPECT_EQ(nfc("a\xED\xA0\x80z"), "a\xED\xA0\x80z");  // a surrogate's bytes
}

TEST(Normalizer, FamiliesThatDeclareNfc) {
  EXPECT_EQ(bpe_normalization("qwen2"), Normalization::Nfc);
  for (const char* pre : {"llama-bpe", "gpt-2", "deepseek-llm", "deepseek-coder", "falcon",
                          "starcoder", "", "default"}) {
    EXPECT_EQ(bpe_normalization(pre), Normalization::None) << pre;
  }
}

std::unique_ptr<Tokenizer> shared_vocab(const std::string& name) {
  const auto path = *test::shared_dir() / "tokenizer" / name;
  auto file = gguf::File::open(path.string());
  EXPECT_TRUE(file) << file.status().message();
  if (!file) return nullptr;
  auto tok = Tokenizer::from_gguf(**file);
  EXPECT_TRUE(tok) << tok.status().message();
  return tok ? std::move(tok.value()) : nullptr;
}

TEST(Normalizer, QwenTokenizesDecomposedTextAsComposed) {
  CAIRN_REQUIRE_SHARED("tokenizer/ggml-vocab-qwen2.gguf");
  auto t = shared_vocab("ggml-vocab-qwen2.gguf");
  ASSERT_TRUE(t);
  const std::string composed = "caf\xC3\xA9 \xEA\xB0\x81";
  const std::string decomposed = "cafe\xCC\x81 \xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8";
  EXPECT_EQ(t->encode(decomposed, false), t->encode(composed, false));
  EXPECT_EQ(t->decode(t->encode(decomposed, false)), composed);
  // Never across a special token: the mark after <|im_start|> stays on its own.
  const auto ids = t->encode("e<|im_start|>\xCC\x81", false, true);
  ASSERT_GE(ids.size(), 3u);
  EXPECT_EQ(t->decode(ids, true), "e<|im_start|>\xCC\x81");
}

TEST(Normalizer, Llama3DoesNotNormalize) {
  CAIRN_REQUIRE_SHARED("tokenizer/ggml-vocab-llama-bpe.gguf");
  auto t = shared_vocab("ggml-vocab-llama-bpe.gguf");
  ASSERT_TRUE(t);
  const std::string decomposed = "cafe\xCC\x81";
  EXPECT_NE(t->encode(decomposed, false), t->encode("caf\xC3\xA9", false));
  EXPECT_EQ(t->decode(t->encode(decomposed, false)), decomposed);
}

}  // namespace
}  // namespace cairn::tok
