// The `cairn gguf` description: everything it promises appears, and nothing
// in it grows with the length of a value.
#include "gguf/gguf_dump.h"

#include <gtest/gtest.h>

#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "test_util.h"

namespace cairn::gguf {
namespace {

#define EXPECT_HAS(text, part) EXPECT_NE((text).find(part), std::string::npos) << (text)

TEST(GgufDump, DescribesMetadataAndTensors) {
  Writer w;
  w.set_string("general.architecture", "llama");
  w.set_string("general.long", std::string(5000, 'x'));
  w.set_uint32("llama.block_count", 4);
  w.set_int32("x.neg", -3);
  w.set_float32("x.eps", 1e-5f);
  w.set_bool("x.flag", false);
  std::vector<std::string> tokens;
  for (int k = 0; k < 1000; ++k) tokens.push_back("tok" + std::to_string(k));
  w.set_string_array("tokenizer.ggml.tokens", tokens);
  w.set_int32_array("x.ids", {1, 2, 3});
  ASSERT_TRUE(
      w.add_tensor("token_embd.weight", TensorType::F32, {8, 1000}, std::vector<uint8_t>(32000))
          .is_ok());
  ASSERT_TRUE(w.add_tensor("blk.0.q", TensorType::Q8_0, {32, 2}, std::vector<uint8_t>(68)).is_ok());
  auto f = File::parse(w.to_bytes());
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  const std::string d = describe(**f);

  EXPECT_HAS(d, "GGUF version 3");
  EXPECT_HAS(d, "alignment 32");
  EXPECT_HAS(d, "metadata: 8 keys");
  EXPECT_HAS(d, "general.architecture");
  EXPECT_HAS(d, "\"llama\"");
  EXPECT_HAS(d, "(5000 bytes)");
  EXPECT_HAS(d, "llama.block_count");
  EXPECT_HAS(d, "uint32");
  EXPECT_HAS(d, "-3");
  EXPECT_HAS(d, "1e-05");
  EXPECT_HAS(d, "false");
  EXPECT_HAS(d, "array[string]");
  EXPECT_HAS(d, "[\"tok0\", \"tok1\"");
  EXPECT_HAS(d, "(1000 elements)");
  EXPECT_HAS(d, "[1, 2, 3]");
  EXPECT_EQ(d.find("tok999"), std::string::npos) << "long arrays must be cut";
  EXPECT_EQ(d.find(std::string(100, 'x')), std::string::npos) << "long strings must be cut";
  EXPECT_HAS(d, "tensors: 2");
  EXPECT_HAS(d, "token_embd.weight");
  EXPECT_HAS(d, "[8, 1000]");
  EXPECT_HAS(d, "32,000");
  EXPECT_HAS(d, "q8_0");
  EXPECT_HAS(d, "total: 2 tensors, 8,064 elements, 32,068 bytes (f32: 1, q8_0: 1)");
  EXPECT_LT(d.size(), 3000u);
  EXPECT_EQ(d.find("computes"), std::string::npos);

  // With a judge of what can be computed: a column, and the verdict.
  const std::string c = describe(**f, [](const TensorInfo& t) { return t.type == TensorType::F32; });
  EXPECT_HAS(c, "  computes\n");
  EXPECT_HAS(c, "32,000  yes\n");
  EXPECT_HAS(c, "68  NO\n");
  EXPECT_HAS(c, "cairn cannot compute 1 of the tensors (marked NO): it will refuse this file");
  const std::string all = describe(**f, [](const TensorInfo&) { return true; });
  EXPECT_HAS(all, "cairn computes every tensor of this file");
}

TEST(GgufDump, DescribesEveryValueType) {
  Value v;
  v.type = ValueType::UINT64;
  v.u = 18446744073709551615ull;
  EXPECT_EQ(describe_value(v), "18446744073709551615");
  v.type = ValueType::BOOL;
  v.u = 1;
  EXPECT_EQ(describe_value(v), "true");
  v.type = ValueType::STRING;
  v.str = "a\nb\"";
  EXPECT_EQ(describe_value(v), "\"a\\x0ab\\\"\"");
}

TEST(GgufDump, DescribesASharedModel) {
  CAIRN_REQUIRE_SHARED("models/syn-llama-gqa-q4_k_m.gguf");
  auto f = File::open((*test::shared_dir() / "models/syn-llama-gqa-q4_k_m.gguf").string());
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  const std::string d = describe(**f);
  EXPECT_HAS(d, "q4_k");
  EXPECT_HAS(d, "blk.0.attn_q.weight");
  EXPECT_HAS(d, "tokenizer.ggml.tokens");
}

}  // namespace
}  // namespace cairn::gguf
