// Writer -> reader round trips, and the typed getters' conversions.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <numeric>

#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "test_util.h"

namespace cairn::gguf {
namespace {

std::vector<uint8_t> pattern(size_t n, uint8_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t k = 0; k < n; ++k) v[k] = static_cast<uint8_t>(seed + k * 13);
  return v;
}

Writer sample_writer() {
  Writer w;
  w.set_string("general.architecture", "llama");
  w.set_uint32("llama.block_count", 4);
  w.set_int32("x.neg", -7);
  w.set_uint64("x.big", 1ull << 40);
  w.set_float32("llama.rope.freq_base", 10000.5f);
  w.set_bool("x.flag", true);
  w.set_string_array("tokenizer.ggml.tokens", {"<s>", "</s>", "hello", ""});
  w.set_float32_array("tokenizer.ggml.scores", {0.f, -1.5f, 2.25f, 3.f});
  w.set_int32_array("tokenizer.ggml.token_type", {3, 3, 1, -2});
  w.set_uint32("tokenizer.ggml.bos_token_id", 0);
  return w;
}

void add_sample_tensors(Writer& w) {
  ASSERT_TRUE(w.add_tensor("a", TensorType::F32, {8, 3}, pattern(96, 1)).is_ok());
  ASSERT_TRUE(w.add_tensor("b", TensorType::Q8_0, {64, 2}, pattern(136, 2)).is_ok());
  ASSERT_TRUE(w.add_tensor("c", TensorType::Q4_K, {256}, pattern(144, 3)).is_ok());
  ASSERT_TRUE(w.add_tensor("d", TensorType::F16, {5}, pattern(10, 4)).is_ok());
}

void expect_sample(const File& f) {
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(*f.get_string("general.architecture").value(), "llama");
  EXPECT_EQ(*f.get_uint("llama.block_count").value(), 4u);
  EXPECT_EQ(*f.get_int("llama.block_count").value(), 4);
  EXPECT_EQ(*f.get_int("x.neg").value(), -7);
  EXPECT_EQ(*f.get_uint("x.big").value(), 1ull << 40);
  EXPECT_EQ(*f.get_float("llama.rope.freq_base").value(), 10000.5);
  EXPECT_EQ(*f.get_bool("x.flag").value(), true);
  const auto tokens = *f.get_string_array("tokenizer.ggml.tokens").value();
  EXPECT_EQ(tokens, (std::vector<std::string_view>{"<s>", "</s>", "hello", ""}));
  EXPECT_EQ(*f.get_float_array("tokenizer.ggml.scores").value(),
            (std::vector<float>{0.f, -1.5f, 2.25f, 3.f}));
  EXPECT_EQ(*f.get_int_array("tokenizer.ggml.token_type").value(),
            (std::vector<int64_t>{3, 3, 1, -2}));

  ASSERT_EQ(f.tensors().size(), 4u);
  const struct {
    const char* name;
    TensorType type;
    std::vector<int64_t> dims;
    size_t bytes;
    uint8_t seed;
  } want[] = {
      {"a", TensorType::F32, {8, 3}, 96, 1},
      {"b", TensorType::Q8_0, {64, 2}, 136, 2},
      {"c", TensorType::Q4_K, {256}, 144, 3},
      {"d", TensorType::F16, {5}, 10, 4},
  };
  for (const auto& w : want) {
    SCOPED_TRACE(w.name);
    const TensorInfo* t = f.find_tensor(w.name);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->type, w.type);
    EXPECT_EQ(t->dims, w.dims);
    EXPECT_EQ(t->n_bytes, w.bytes);
    EXPECT_EQ(t->offset % f.alignment(), 0u);
    EXPECT_EQ(std::vector<uint8_t>(t->data, t->data + t->n_bytes), pattern(w.bytes, w.seed));
  }
  EXPECT_EQ(f.find_tensor("a")->rows(), 3);
  EXPECT_EQ(f.find_tensor("b")->n_elements, 128u);
}

TEST(GgufRoundTrip, BytesParseBackIdentically) {
  Writer w = sample_writer();
  add_sample_tensors(w);
  const auto bytes = w.to_bytes();
  auto f = File::parse(bytes);
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  expect_sample(**f);
  EXPECT_EQ((*f)->alignment(), 32u);
  EXPECT_EQ((*f)->find("general.alignment"), nullptr);
  EXPECT_EQ(bytes.size() % 32, 0u);
}

TEST(GgufRoundTrip, OtherAlignmentIsWrittenAndHonoured) {
  Writer w = sample_writer();
  add_sample_tensors(w);
  const auto bytes = w.to_bytes(256);
  auto f = File::parse(bytes);
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  expect_sample(**f);
  EXPECT_EQ((*f)->alignment(), 256u);
  EXPECT_EQ(*(*f)->get_uint("general.alignment").value(), 256u);
  EXPECT_EQ((*f)->data_offset() % 256, 0u);
  for (const TensorInfo& t : (*f)->tensors()) {
    EXPECT_EQ((t.data - bytes.data()) % 256, 0);
  }
}

TEST(GgufRoundTrip, StaleAlignmentKeyIsOverridden) {
  Writer w = sample_writer();
  add_sample_tensors(w);
  w.set_uint32("general.alignment", 16);
  auto f = File::parse(w.to_bytes(64));
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  EXPECT_EQ((*f)->alignment(), 64u);
}

TEST(GgufRoundTrip, WriteAndOpenFromDisk) {
  Writer w = sample_writer();
  add_sample_tensors(w);
  const auto path = (cairn::test::temp_dir("gguf_rt") / "m.gguf").string();
  ASSERT_TRUE(w.write(path).is_ok());
  auto f = File::open(path);
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  expect_sample(**f);
  EXPECT_FALSE(w.write(path, 48).is_ok());
  EXPECT_FALSE(w.write("/nonexistent/dir/m.gguf").is_ok());
}

TEST(GgufRoundTrip, SettingAKeyTwiceReplacesIt) {
  Writer w;
  w.set_uint32("k", 1);
  w.set_string("k", "two");
  auto f = File::parse(w.to_bytes());
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  EXPECT_EQ((*f)->metadata().size(), 1u);
  EXPECT_EQ(*(*f)->get_string("k").value(), "two");
}

TEST(GgufRoundTrip, CopyValueReproducesEveryType) {
  Writer w = sample_writer();
  const auto src_bytes = w.to_bytes();
  auto src = File::parse(src_bytes);
  ASSERT_TRUE(src.is_ok()) << src.status().message();
  Writer copy;
  for (const KeyValue& kv : (*src)->metadata()) copy.copy_value(kv.key, kv.value);
  EXPECT_EQ(copy.to_bytes(), src_bytes);
}

TEST(GgufRoundTrip, AddTensorChecksItsArguments) {
  Writer w;
  EXPECT_FALSE(w.add_tensor("x", TensorType::F32, {4}, pattern(15, 0)).is_ok());
  EXPECT_FALSE(w.add_tensor("x", TensorType::Q8_0, {31}, pattern(34, 0)).is_ok());
  EXPECT_FALSE(w.add_tensor("x", TensorType::F32, {}, {}).is_ok());
  EXPECT_FALSE(w.add_tensor("x", TensorType::F32, {1, 1, 1, 1, 1}, pattern(4, 0)).is_ok());
  EXPECT_FALSE(w.add_tensor("x", TensorType::F32, {-4}, {}).is_ok());
  EXPECT_FALSE(w.add_tensor("x", TensorType::F32, {1ll << 40, 1ll << 40}, {}).is_ok());
  ASSERT_TRUE(w.add_tensor("x", TensorType::F32, {4}, pattern(16, 0)).is_ok());
  const Status dup = w.add_tensor("x", TensorType::F32, {4}, pattern(16, 0));
  ASSERT_FALSE(dup.is_ok());
  EXPECT_NE(dup.message().find("added twice"), std::string::npos) << dup.message();
}

TEST(GgufRoundTrip, EmptyFileHasNoDataSection) {
  Writer w;
  const auto bytes = w.to_bytes();
  EXPECT_EQ(bytes.size(), 24u);
  auto f = File::parse(bytes);
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  EXPECT_TRUE((*f)->metadata().empty());
  EXPECT_TRUE((*f)->tensors().empty());
}

TEST(GgufGetters, EmptyArraysReadBackEmpty) {
  Writer w;
  w.set_float32_array("x.f", {});
  w.set_int32_array("x.i", {});
  w.set_string_array("x.s", {});
  auto f = File::parse(w.to_bytes());
  ASSERT_TRUE(f.is_ok()) << f.status().message();
  EXPECT_TRUE((*f)->get_float_array("x.f").value()->empty());
  EXPECT_TRUE((*f)->get_int_array("x.i").value()->empty());
  EXPECT_TRUE((*f)->get_string_array("x.s").value()->empty());
  EXPECT_TRUE((*f)->get_float_array("x.i").value()->empty());
}

TEST(GgufGetters, MissingKeysAreEmptyNotErrors) {
  auto f = File::parse(Writer().to_bytes());
  ASSERT_TRUE(f.is_ok());
  const File& file = **f;
  EXPECT_FALSE(file.get_uint("nope").value().has_value());
  EXPECT_FALSE(file.get_int("nope").value().has_value());
  EXPECT_FALSE(file.get_float("nope").value().has_value());
  EXPECT_FALSE(file.get_bool("nope").value().has_value());
  EXPECT_FALSE(file.get_string("nope").value().has_value());
  EXPECT_FALSE(file.get_string_array("nope").value().has_value());
  EXPECT_FALSE(file.get_float_array("nope").value().has_value());
  EXPECT_FALSE(file.get_int_array("nope").value().has_value());
  EXPECT_EQ(file.find("nope"), nullptr);
  EXPECT_EQ(file.find_tensor("nope"), nullptr);
}

TEST(GgufGetters, ConversionsThatWouldLoseMeaningAreErrors) {
  Writer w = sample_writer();
  w.set_uint64("x.huge", UINT64_MAX);
  const auto bytes = w.to_bytes();
  auto f = File::parse(bytes);
  ASSERT_TRUE(f.is_ok());
  const File& file = **f;
  auto neg = file.get_uint("x.neg");
  ASSERT_FALSE(neg.is_ok());
  EXPECT_EQ(neg.status().message(), "gguf: key 'x.neg' is -7, expected a non-negative integer");
  auto huge = file.get_int("x.huge");
  ASSERT_FALSE(huge.is_ok());
  EXPECT_NE(huge.status().message().find("too large"), std::string::npos);
  auto str = file.get_uint("general.architecture");
  ASSERT_FALSE(str.is_ok());
  EXPECT_EQ(str.status().message(),
            "gguf: key 'general.architecture' has type string, expected an unsigned integer");
  EXPECT_FALSE(file.get_bool("llama.block_count").is_ok());
  EXPECT_FALSE(file.get_string("llama.block_count").is_ok());
  EXPECT_FALSE(file.get_float("general.architecture").is_ok());
  auto arr = file.get_string_array("tokenizer.ggml.scores");
  ASSERT_FALSE(arr.is_ok());
  EXPECT_NE(arr.status().message().find("array[float32], expected array[string]"),
            std::string::npos);
  EXPECT_FALSE(file.get_int_array("tokenizer.ggml.scores").is_ok());
  EXPECT_FALSE(file.get_float_array("tokenizer.ggml.tokens").is_ok());
  // Widening that keeps the value is allowed.
  EXPECT_EQ(*file.get_float("llama.block_count").value(), 4.0);
  EXPECT_EQ(*file.get_float_array("tokenizer.ggml.token_type").value(),
            (std::vector<float>{3, 3, 1, -2}));
  EXPECT_EQ(value_type_string(*file.find("tokenizer.ggml.scores")), "array[float32]");
  EXPECT_EQ(value_type_name(ValueType::UINT64), "uint64");
}

}  // namespace
}  // namespace cairn::gguf

// Streaming writes (declare, header, then data) give the same bytes as to_bytes().
TEST(GgufWriter, DeclaredTensorsStreamToTheSameLayout) {
  using cairn::gguf::Writer;
  std::vector<uint8_t> a(3 * 4), b(5 * 2);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<uint8_t>(i + 1);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(100 + i);

  Writer whole;
  whole.set_string("general.architecture", "llama");
  ASSERT_TRUE(whole.add_tensor("a", cairn::TensorType::F32, {3}, a).is_ok());
  ASSERT_TRUE(whole.add_tensor("b", cairn::TensorType::F16, {5}, b).is_ok());

  Writer streamed;
  streamed.set_string("general.architecture", "llama");
  ASSERT_TRUE(streamed.declare_tensor("a", cairn::TensorType::F32, {3}).is_ok());
  ASSERT_TRUE(streamed.declare_tensor("b", cairn::TensorType::F16, {5}).is_ok());
  EXPECT_FALSE(streamed.declare_tensor("b", cairn::TensorType::F16, {5}).is_ok());
  std::vector<uint8_t> out = streamed.header_bytes();
  for (const auto* t : {&a, &b}) {
    out.insert(out.end(), t->begin(), t->end());
    out.resize(out.size() + Writer::tensor_padding(t->size()), 0);
  }
  EXPECT_EQ(out, whole.to_bytes());
  auto file = cairn::gguf::File::parse(std::move(out));
  ASSERT_TRUE(file.is_ok()) << file.status().message();
  ASSERT_EQ((*file)->tensors().size(), 2u);
  EXPECT_EQ(std::memcmp((*file)->tensors()[1].data, b.data(), b.size()), 0);
}
