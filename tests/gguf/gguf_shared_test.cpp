// Every GGUF file the team was given must parse, with its tensors inside the file.
#include <gtest/gtest.h>

#include <filesystem>
#include <vector>

#include "gguf/gguf.h"
#include "test_util.h"

namespace cairn::gguf {
namespace {

std::vector<std::filesystem::path> shared_ggufs() {
  std::vector<std::filesystem::path> out;
  auto shared = test::shared_dir();
  if (!shared) return out;
  for (const char* sub : {"models", "tokenizer"}) {
    const auto dir = *shared / sub;
    if (!std::filesystem::is_directory(dir)) continue;
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      if (e.path().extension() == ".gguf") out.push_back(e.path());
    }
  }
  return out;
}

TEST(GgufShared, EveryFileParses) {
  const auto files = shared_ggufs();
  if (files.empty())
    GTEST_SKIP() << "skipped: no .gguf under ../shared/models or ../shared/tokenizer";
  for (const auto& path : files) {
    SCOPED_TRACE(path.string());
    auto f = File::open(path.string());
    ASSERT_TRUE(f.is_ok()) << f.status().message();
    const File& file = **f;
    EXPECT_TRUE(file.version() == 2 || file.version() == 3);
    EXPECT_FALSE(file.metadata().empty());
    auto arch = file.get_string("general.architecture");
    ASSERT_TRUE(arch.is_ok()) << arch.status().message();
    EXPECT_TRUE(arch->has_value());
    for (const TensorInfo& t : file.tensors()) {
      EXPECT_NE(t.data, nullptr);
      EXPECT_EQ(file.find_tensor(t.name), &t);
      EXPECT_LE(t.offset + t.n_bytes + file.data_offset(), file.file_size());
    }
  }
}

TEST(GgufShared, Stories260KLooksRight) {
  CAIRN_REQUIRE_SHARED("models/stories260K.gguf");
  auto f = File::open((*test::shared_dir() / "models/stories260K.gguf").string());
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  const File& file = **f;
  auto tokens = file.get_string_array("tokenizer.ggml.tokens");
  ASSERT_TRUE(tokens.is_ok()) << tokens.status().message();
  ASSERT_TRUE(tokens->has_value());
  EXPECT_EQ((*tokens)->size(), 512u);
  auto scores = file.get_float_array("tokenizer.ggml.scores");
  ASSERT_TRUE(scores.is_ok()) << scores.status().message();
  ASSERT_TRUE(scores->has_value());
  EXPECT_EQ((*scores)->size(), 512u);
  const TensorInfo* emb = file.find_tensor("token_embd.weight");
  ASSERT_NE(emb, nullptr);
  EXPECT_EQ(emb->type, TensorType::F32);
  ASSERT_EQ(emb->dims.size(), 2u);
  EXPECT_EQ(emb->dims[1], 512);
  EXPECT_EQ(emb->n_bytes, static_cast<uint64_t>(emb->dims[0]) * 512 * 4);
  auto ctx = file.get_uint("llama.context_length");
  ASSERT_TRUE(ctx.is_ok()) << ctx.status().message();
  EXPECT_TRUE(ctx->has_value());
}

}  // namespace
}  // namespace cairn::gguf
