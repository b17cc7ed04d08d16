// Malformed tokenizer metadata: each problem gives a one-line error that
// names it, never a crash or a tokenizer that misbehaves later.
#include <gtest/gtest.h>

#include "tiny_vocab.h"

namespace cairn {
namespace {

using test::Built;

void expect_error(const gguf::Writer& w, const std::string& needle) {
  Built b(w);
  ASSERT_FALSE(b.error.empty()) << "expected an error mentioning '" << needle << "'";
  EXPECT_NE(b.error.find(needle), std::string::npos) << b.error;
  EXPECT_EQ(b.error.find('\n'), std::string::npos) << "error is not one line: " << b.error;
}

TEST(Malformed, BaselinesAreValid) {
  Built spm(test::spm_writer(test::spm_spec()));
  EXPECT_TRUE(spm.error.empty()) << spm.error;
  Built bpe(test::bpe_writer(test::bpe_spec()));
  EXPECT_TRUE(bpe.error.empty()) << bpe.error;
}

TEST(Malformed, ModelKey) {
  gguf::Writer w = test::spm_writer(test::spm_spec());
  w.set_string("tokenizer.ggml.model", "t5");
  expect_error(w, "'t5' is not supported");
  w.set_uint32("tokenizer.ggml.model", 1);
  expect_error(w, "tokenizer.ggml.model");
  gguf::Writer none;
  none.set_string_array("tokenizer.ggml.tokens", {"a"});
  expect_error(none, "tokenizer.ggml.model is missing");
}

TEST(Malformed, TokenList) {
  test::SpmSpec s = test::spm_spec();
  gguf::Writer empty;
  empty.set_string("tokenizer.ggml.model", "llama");
  empty.set_string_array("tokenizer.ggml.tokens", {});
  expect_error(empty, "tokenizer.ggml.tokens is missing or empty");

  gguf::Writer missing;
  missing.set_string("tokenizer.ggml.model", "llama");
  expect_error(missing, "tokenizer.ggml.tokens is missing or empty");

  gguf::Writer wrong_type = test::spm_writer(s);
  wrong_type.set_int32_array("tokenizer.ggml.tokens", {1, 2, 3});
  expect_error(wrong_type, "tokenizer.ggml.tokens");

  s.tokens[261] = s.tokens[262];
  expect_error(test::spm_writer(s), "have the same text");
}

TEST(Malformed, ScoresAndTypesMustMatchTheTokenCount) {
  test::SpmSpec s = test::spm_spec();
  s.scores.pop_back();
  expect_error(test::spm_writer(s), "tokenizer.ggml.scores has");

  s = test::spm_spec();
  s.types.push_back(1);
  expect_error(test::spm_writer(s), "tokenizer.ggml.token_type has");

  s = test::spm_spec();
  s.types[5] = 9;
  expect_error(test::spm_writer(s), "token_type of token 5 is 9");

  s = test::spm_spec();
  s.types[260] = 6;  // a byte token must be spelled <0xNN>
  expect_error(test::spm_writer(s), "byte token 260");

  gguf::Writer strings = test::spm_writer(test::spm_spec());
  strings.set_string_array("tokenizer.ggml.scores", {"x"});
  expect_error(strings, "tokenizer.ggml.scores");
}

TEST(Malformed, SpecialIdsOutsideTheVocabulary) {
  const test::SpmSpec s = test::spm_spec();
  for (const char* key : {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                          "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.eot_token_id"}) {
    gguf::Writer w = test::spm_writer(s);
    w.set_uint32(key, static_cast<uint32_t>(s.tokens.size()));
    expect_error(w, key);
  }
  gguf::Writer neg = test::spm_writer(s);
  neg.set_int32("tokenizer.ggml.eos_token_id", -5);
  expect_error(neg, "tokenizer.ggml.eos_token_id");
  gguf::Writer str = test::spm_writer(s);
  str.set_string("tokenizer.ggml.bos_token_id", "1");
  expect_error(str, "tokenizer.ggml.bos_token_id");
  // -1 is "no token".
  gguf::Writer none = test::spm_writer(s);
  none.set_int32("tokenizer.ggml.bos_token_id", -1);
  Built b(none);
  ASSERT_TRUE(b.error.empty()) << b.error;
  EXPECT_EQ(b->bos(), -1);
  EXPECT_EQ(b->encode("hello", true).size(), b->encode("hello", false).size());
}

TEST(Malformed, Flags) {
  gguf::Writer w = test::spm_writer(test::spm_spec());
  w.set_string("tokenizer.ggml.add_bos_token", "yes");
  expect_error(w, "tokenizer.ggml.add_bos_token");
  gguf::Writer ok = test::spm_writer(test::spm_spec());
  ok.set_bool("tokenizer.ggml.add_bos_token", false);
  ok.set_bool("tokenizer.ggml.add_eos_token", true);
  Built b(ok);
  ASSERT_TRUE(b.error.empty()) << b.error;
  const std::vector<Token> ids = b->encode("hello", true);
  ASSERT_FALSE(ids.empty());
  EXPECT_NE(ids.front(), 1);
  EXPECT_EQ(ids.back(), 2);
}

TEST(Malformed, Merges) {
  test::BpeSpec s = test::bpe_spec();
  gguf::Writer missing;
  missing.set_string("tokenizer.ggml.model", "gpt2");
  missing.set_string_array("tokenizer.ggml.tokens", s.tokens);
  expect_error(missing, "tokenizer.ggml.merges is missing");

  s = test::bpe_spec();
  s.merges.push_back("nospace");
  expect_error(test::bpe_writer(s), "merge 12 has no space");

  s = test::bpe_spec();
  s.merges.push_back("h zz");
  expect_error(test::bpe_writer(s), "refers to 'zz'");

  s = test::bpe_spec();
  s.merges.push_back("w o");  // both parts exist, "wo" does not
  expect_error(test::bpe_writer(s), "refers to 'wo'");

  gguf::Writer ints = test::bpe_writer(test::bpe_spec());
  ints.set_int32_array("tokenizer.ggml.merges", {1});
  expect_error(ints, "tokenizer.ggml.merges");
}

TEST(Malformed, UnknownPreTokenizerFallsBackToDefault) {
  test::BpeSpec s = test::bpe_spec();
  s.pre = "no-such-pre";
  Built b(test::bpe_writer(s));
  ASSERT_TRUE(b.error.empty()) << b.error;
  EXPECT_EQ(b->decode(b->encode("hello world", false)), "hello world");
}

}  // namespace
}  // namespace cairn
