// One hand-made file per way a GGUF file can be wrong: each must be rejected
// with a one-line message that names the problem.
#include <gtest/gtest.h>

#include <fstream>

#include "gguf/gguf.h"
#include "gguf_bytes.h"
#include "test_util.h"

namespace cairn::gguf {
namespace {

using namespace cairn::gguf::test;

// Parses `bytes`, expects failure, and returns the message.
std::string error_of(const std::vector<uint8_t>& bytes) {
  auto f = File::parse(bytes);
  EXPECT_FALSE(f.is_ok()) << "a malformed file was accepted";
  if (f.is_ok()) return "";
  const std::string& msg = f.status().message();
  EXPECT_EQ(msg.find('\n'), std::string::npos) << "message is not one line: " << msg;
  EXPECT_EQ(msg.rfind("gguf: ", 0), 0u) << msg;
  return msg;
}

#define EXPECT_HAS(msg, part) EXPECT_NE((msg).find(part), std::string::npos) << (msg)

TEST(GgufMalformed, SmallSpecIsValid) {
  const auto bytes = build(small_spec());
  auto f = File::parse(bytes);
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  EXPECT_EQ((*f)->tensors().size(), 2u);
  EXPECT_EQ((*f)->find_tensor("q")->n_bytes, 34u);
  EXPECT_EQ((*f)->find_tensor("q")->data + 34, bytes.data() + bytes.size());
}

TEST(GgufMalformed, BadMagic) {
  FileSpec s = small_spec();
  s.magic = 0x46554746;  // "FGUF"
  const std::string msg = error_of(build(s));
  EXPECT_HAS(msg, "bad magic 'FGUF'");
}

TEST(GgufMalformed, UnsupportedVersion) {
  for (uint32_t v : {0u, 1u, 4u, 0x03000000u}) {
    FileSpec s = small_spec();
    s.version = v;
    const std::string msg = error_of(build(s));
    EXPECT_HAS(msg, "unsupported version " + std::to_string(v));
  }
  FileSpec s = small_spec();
  s.version = 2;
  EXPECT_TRUE(File::parse(build(s)).is_ok());
}

TEST(GgufMalformed, EveryTruncationFailsCleanly) {
  const auto full = build(small_spec());
  for (size_t n = 0; n < full.size(); ++n) {
    SCOPED_TRACE("prefix of " + std::to_string(n) + " bytes");
    // A copy of exactly n bytes, so ASan sees any read past the prefix.
    const std::vector<uint8_t> prefix(full.begin(), full.begin() + n);
    const std::string msg = error_of(prefix);
    const bool named = msg.find("past end of file") != std::string::npos ||
                       msg.find("too short") != std::string::npos ||
                       msg.find("bytes left in the file") != std::string::npos;
    EXPECT_TRUE(named) << msg;
  }
}

TEST(GgufMalformed, StringRunsPastEnd) {
  FileSpec s = small_spec();
  s.kvs.push_back(Bytes().u64(0xFFFFFFFFu).b);  // key #3: length, then nothing
  const std::string msg = error_of(build(s));
  EXPECT_HAS(msg, "string length 4294967295 of key #3 runs past end of file (offset ");
}

TEST(GgufMalformed, StringValueRunsPastEnd) {
  FileSpec s = small_spec();
  s.kvs.push_back(Bytes().str("general.name").u32(T_STR).u64(1ull << 40).b);
  const std::string msg = error_of(build(s));
  EXPECT_HAS(msg, "string length 1099511627776 of value of key 'general.name' runs past end");
}

TEST(GgufMalformed, ArrayRunsPastEnd) {
  FileSpec s = small_spec();
  s.kvs.push_back(Bytes().str("x.arr").u32(T_ARR).u32(T_U32).u64(1000000).u32(1).b);
  const std::string msg = error_of(build(s));
  EXPECT_HAS(msg, "array of 1000000 uint32 elements of value of key 'x.arr' runs past end");
}

TEST(GgufMalformed, HugeStringArrayIsNotAllocated) {
  FileSpec s = small_spec();
  s.kvs.push_back(Bytes().str("x.strs").u32(T_ARR).u32(T_STR).u64(UINT64_MAX / 2).b);
  const std::string msg = error_of(build(s));
  EXPECT_HAS(msg, "array of 9223372036854775807 string elements");
  EXPECT_HAS(msg, "runs past end");
}

TEST(GgufMalformed, AbsurdTensorCount) {
  FileSpec s = small_spec();
  s.n_tensors = 1ull << 60;
  const std::string msg = error_of(build(s));
  EXPECT_HAS(msg, "tensor count 1152921504606846976 is more than the ");
}

TEST(GgufMalformed, AbsurdKvCount) {
  FileSpec s = small_spec();
  s.n_kv = UINT64_MAX;
  const std::string msg = error_of(build(s));
  EXPECT_HAS(msg, "metadata count 18446744073709551615 is more than the ");
}

TEST(GgufMalformed, DimensionProductOverflows) {
  FileSpec s = small_spec();
  s.tensors.push_back({"big", {1ll << 32, 1ll << 32}, 0, 128, {}});
  const std::string msg = error_of(build(s));
  EXPECT_HAS(msg, "tensor 'big' dimensions [4294967296, 4294967296] overflow");
}

TEST(GgufMalformed, RowCountOverflowsEvenWithZeroRowLength) {
  FileSpec s = small_spec();
  s.tensors.push_back({"big", {0, 1ll << 32, 1ll << 32}, 0, 128, {}});
  EXPECT_HAS(error_of(build(s)), "tensor 'big' dimensions [0, 4294967296, 4294967296] overflow");
}

TEST(GgufMalformed, ZeroSizedTensorIsAccepted) {
  // ggml allows empty dimensions (it only rejects negative ones).
  FileSpec s = small_spec();
  s.tensors.push_back({"empty", {0, 3}, 0, 96, {}});
  const auto bytes = build(s);
  auto f = File::parse(bytes);
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  EXPECT_EQ((*f)->find_tensor("empty")->n_bytes, 0u);
  EXPECT_EQ((*f)->find_tensor("empty")->rows(), 3);
}

TEST(GgufMalformed, ByteSizeOverflows) {
  FileSpec s = small_spec();
  // 2^62 elements fit int64, but 2^62 * 4 bytes does not fit uint64.
  s.tensors.push_back({"big", {1ll << 31, 1ll << 31}, 0, 128, {}});
  const std::string msg = error_of(build(s));
  EXPECT_HAS(msg, "tensor 'big' dimensions [2147483648, 2147483648] overflow a 64-bit byte size");
}

TEST(GgufMalformed, NegativeDimension) {
  FileSpec s = small_spec();
  s.tensors[0].dims = {8, -2};
  const std::string msg = error_of(build(s));
  EXPECT_HAS(msg, "tensor 'w' dimension 1 is -2, negative");
}

TEST(GgufMalformed, TooManyDimensions) {
  FileSpec s = small_spec();
  s.tensors[0].dims = {8, 2, 1, 1, 1};
  const std::string msg = error_of(build(s));
  EXPECT_HAS(msg, "tensor 'w' has 5 dimensions (must be 1 to 4)");
  s.tensors[0].dims = {};
  EXPECT_HAS(error_of(build(s)), "tensor 'w' has 0 dimensions");
}

TEST(GgufMalformed, TensorDataPastEnd) {
  FileSpec s = small_spec();
  s.tensors[1].offset = 96;  // 34 bytes from 96 > 98-byte data section
  const std::string msg = error_of(build(s));
  EXPECT_HAS(msg,
             "tensor 'q' data (offset 96, 34 bytes) runs past end of file (data section of 98");
  s.tensors[1].offset = UINT64_MAX - 31;  // aligned, and offset + size wraps
  EXPECT_HAS(error_of(build(s)),
             "tensor 'q' data (offset 18446744073709551584, 34 bytes) runs past");
}

TEST(GgufMalformed, UnknownTensorType) {
  FileSpec s = small_spec();
  s.tensors[0].type = 99;
  EXPECT_HAS(error_of(build(s)), "tensor 'w' has unknown tensor type id 99");
  s.tensors[0].type = 4;  // retired Q4_2
  EXPECT_HAS(error_of(build(s)), "tensor 'w' has unknown tensor type id 4");
}

TEST(GgufMalformed, RowNotMultipleOfBlock) {
  FileSpec s = small_spec();
  s.tensors[1].dims = {31};
  EXPECT_HAS(error_of(build(s)),
             "tensor 'q' row length 31 is not a multiple of the block size 32 of type q8_0");
}

TEST(GgufMalformed, DuplicateKey) {
  FileSpec s = small_spec();
  s.kvs.push_back(kv_str("general.architecture", "qwen2"));
  EXPECT_HAS(error_of(build(s)), "duplicate key 'general.architecture' (entries #0 and #3)");
}

TEST(GgufMalformed, DuplicateTensorName) {
  FileSpec s = small_spec();
  s.tensors[1].name = "w";
  EXPECT_HAS(error_of(build(s)), "duplicate tensor name 'w' (tensors #0 and #1)");
}

TEST(GgufMalformed, MisalignedTensorOffset) {
  FileSpec s = small_spec();
  s.tensors[1].offset = 48;
  EXPECT_HAS(error_of(build(s)), "tensor 'q' data offset 48 is not a multiple of the alignment 32");
}

TEST(GgufMalformed, BadAlignmentValue) {
  for (uint32_t a : {0u, 24u, 0xFFFFFFFFu}) {
    FileSpec s = small_spec();
    s.kvs.push_back(kv_u32("general.alignment", a));
    EXPECT_HAS(error_of(build(s)),
               "general.alignment " + std::to_string(a) + " is not a power of two");
  }
  FileSpec s = small_spec();
  s.kvs.push_back(kv_str("general.alignment", "32"));
  EXPECT_HAS(error_of(build(s)), "general.alignment has type string");
}

TEST(GgufMalformed, OtherAlignmentIsHonoured) {
  FileSpec s = small_spec();
  s.kvs.push_back(kv_u32("general.alignment", 64));
  s.align = 64;
  auto f = File::parse(build(s));
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  EXPECT_EQ((*f)->alignment(), 64u);
  EXPECT_EQ((*f)->data_offset() % 64, 0u);
  s.tensors[1].offset = 32;
  EXPECT_HAS(error_of(build(s)), "not a multiple of the alignment 64");
}

TEST(GgufMalformed, TokenIdOutsideVocabulary) {
  FileSpec s = small_spec();
  s.kvs.push_back(kv_u32("tokenizer.ggml.eos_token_id", 3));
  EXPECT_HAS(error_of(build(s)),
             "tokenizer.ggml.eos_token_id = 3 is outside the vocabulary of 3 tokens");
  s = small_spec();
  s.kvs.push_back(kv_i32("tokenizer.ggml.padding_token_id", -5));
  EXPECT_HAS(error_of(build(s)),
             "tokenizer.ggml.padding_token_id = -5 is outside the vocabulary of 3 tokens");
  s = small_spec();
  s.kvs.push_back(kv_str("tokenizer.ggml.eot_token_id", "2"));
  EXPECT_HAS(error_of(build(s)),
             "tokenizer.ggml.eot_token_id has type string, expected an integer");
}

TEST(GgufMalformed, NoTokenSentinelIsAccepted) {
  FileSpec s = small_spec();
  s.kvs.push_back(kv_u32("tokenizer.ggml.seperator_token_id", 0xFFFFFFFFu));
  s.kvs.push_back(kv_i32("tokenizer.ggml.padding_token_id", -1));
  s.kvs.push_back(kv_u32("tokenizer.ggml.eos_token_id", 2));
  EXPECT_TRUE(File::parse(build(s)).is_ok());
}

TEST(GgufMalformed, TokensMustBeStrings) {
  FileSpec s;
  s.kvs.push_back(Bytes().str("tokenizer.ggml.tokens").u32(T_ARR).u32(T_U32).u64(1).u32(7).b);
  EXPECT_HAS(error_of(build(s)),
             "tokenizer.ggml.tokens has type array[uint32], expected array[string]");
}

TEST(GgufMalformed, BoolNotZeroOrOne) {
  FileSpec s = small_spec();
  s.kvs.push_back(Bytes().str("x.flag").u32(T_BOOL).u8(2).b);
  EXPECT_HAS(error_of(build(s)), "bool value 2 of value of key 'x.flag' is neither 0 nor 1");
  s = small_spec();
  s.kvs.push_back(Bytes().str("x.flags").u32(T_ARR).u32(T_BOOL).u64(3).u8(0).u8(1).u8(9).b);
  EXPECT_HAS(error_of(build(s)), "bool element #2 of value of key 'x.flags' is 9");
}

TEST(GgufMalformed, UnknownValueType) {
  FileSpec s = small_spec();
  s.kvs.push_back(Bytes().str("x.odd").u32(13).u32(0).b);
  EXPECT_HAS(error_of(build(s)), "unknown value type 13 in value of key 'x.odd'");
  s = small_spec();
  s.kvs.push_back(Bytes().str("x.odd").u32(T_ARR).u32(77).u64(0).b);
  EXPECT_HAS(error_of(build(s)), "unknown array element type 77 in value of key 'x.odd'");
}

TEST(GgufMalformed, NestedArraysAreBounded) {
  FileSpec s = small_spec();
  Bytes deep;
  deep.str("x.deep").u32(T_ARR);
  for (int k = 0; k < 10; ++k) deep.u32(T_ARR).u64(1);
  deep.u32(T_U8).u64(0);
  s.kvs.push_back(deep.b);
  EXPECT_HAS(error_of(build(s)), "arrays nested more than 3 deep in value of key 'x.deep'");
  // Two levels are fine and parsed for bounds.
  s = small_spec();
  s.kvs.push_back(Bytes()
                      .str("x.nest")
                      .u32(T_ARR)
                      .u32(T_ARR)
                      .u64(2)
                      .u32(T_U8)
                      .u64(1)
                      .u8(5)
                      .u32(T_STR)
                      .u64(1)
                      .str("hi")
                      .b);
  auto f = File::parse(build(s));
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  EXPECT_EQ((*f)->find("x.nest")->count, 2u);
  // ...and a nested array running past the end is caught.
  s = small_spec();
  s.kvs.push_back(Bytes().str("x.nest").u32(T_ARR).u32(T_ARR).u64(1).u32(T_U32).u64(1ull << 50).b);
  EXPECT_HAS(error_of(build(s)),
             "array of 1125899906842624 uint32 elements of value of key 'x.nest' runs past end");
}

TEST(GgufMalformed, HostileNamesStayOnOneLine) {
  FileSpec s = small_spec();
  s.kvs.push_back(kv_str("line\nbreak", "v"));
  s.kvs.push_back(kv_str("line\nbreak", "v"));
  EXPECT_HAS(error_of(build(s)), "duplicate key 'line\\x0abreak'");
}

TEST(GgufMalformed, OpenRejectsMissingAndEmptyFiles) {
  auto missing = File::open("/nonexistent/dir/model.gguf");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_HAS(missing.status().message(), "cannot open /nonexistent/dir/model.gguf");
  const auto dir = cairn::test::temp_dir("gguf_open");
  const auto empty = dir / "empty.gguf";
  std::ofstream(empty).close();
  auto e = File::open(empty.string());
  ASSERT_FALSE(e.is_ok());
  EXPECT_HAS(e.status().message(), "too short");
  auto d = File::open(dir.string());
  ASSERT_FALSE(d.is_ok());
  EXPECT_HAS(d.status().message(), "not a regular file");
}

}  // namespace
}  // namespace cairn::gguf
