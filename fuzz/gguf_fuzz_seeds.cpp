// Writes seed files for fuzz_gguf_reader into the directory given as argv[1]:
// small valid files covering every value type, several tensor types, another
// alignment and the token-id checks, plus a nested array the Writer cannot make.
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "gguf/gguf_writer.h"

namespace {

using cairn::TensorType;
using cairn::gguf::Writer;

bool save(const std::string& dir, const std::string& name, const std::vector<uint8_t>& bytes) {
  const std::string path = dir + "/" + name;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return false;
  const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  return std::fclose(f) == 0 && ok;
}

Writer vocab_writer() {
  Writer w;
  w.set_string("general.architecture", "llama");
  w.set_string_array("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "a", "b"});
  w.set_float32_array("tokenizer.ggml.scores", {0, 0, 0, -1, -2});
  w.set_int32_array("tokenizer.ggml.token_type", {2, 3, 3, 1, 1});
  w.set_uint32("tokenizer.ggml.bos_token_id", 1);
  w.set_uint32("tokenizer.ggml.eos_token_id", 2);
  w.set_uint32("tokenizer.ggml.padding_token_id", 0xFFFFFFFFu);
  return w;
}

std::vector<uint8_t> nested_array_file() {
  std::vector<uint8_t> b;
  auto u32 = [&](uint32_t v) { b.insert(b.end(), (uint8_t*)&v, (uint8_t*)&v + 4); };
  auto u64 = [&](uint64_t v) { b.insert(b.end(), (uint8_t*)&v, (uint8_t*)&v + 8); };
  auto str = [&](const std::string& s) {
    u64(s.size());
    b.insert(b.end(), s.begin(), s.end());
  };
  u32(0x46554747);
  u32(3);
  u64(0);
  u64(1);
  str("x.nested");
  u32(9);  // array of
  u32(9);  // arrays
  u64(2);
  u32(0);  // [uint8 x1]
  u64(1);
  b.push_back(7);
  u32(8);  // [string x1]
  u64(1);
  str("hi");
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUT_DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  bool ok = save(dir, "empty.gguf", Writer().to_bytes());

  Writer scalars;
  scalars.set_uint32("a.u32", 7);
  scalars.set_int32("a.i32", -7);
  scalars.set_uint64("a.u64", 1ull << 40);
  scalars.set_float32("a.f32", 0.5f);
  scalars.set_bool("a.bool", true);
  scalars.set_string("a.str", "hello");
  scalars.set_float32_array("a.empty", {});
  ok = ok && save(dir, "scalars.gguf", scalars.to_bytes());

  ok = ok && save(dir, "vocab.gguf", vocab_writer().to_bytes());

  Writer model = vocab_writer();
  model.set_uint32("llama.block_count", 1);
  ok = ok && model.add_tensor("f32", TensorType::F32, {4, 2}, std::vector<uint8_t>(32, 1)).is_ok();
  ok = ok && model.add_tensor("f16", TensorType::F16, {3}, std::vector<uint8_t>(6, 2)).is_ok();
  ok = ok && model.add_tensor("q8", TensorType::Q8_0, {32}, std::vector<uint8_t>(34, 3)).is_ok();
  ok = ok && model.add_tensor("q4k", TensorType::Q4_K, {256}, std::vector<uint8_t>(144, 4)).is_ok();
  ok = ok && save(dir, "model.gguf", model.to_bytes());
  ok = ok && save(dir, "model-align64.gguf", model.to_bytes(64));

  ok = ok && save(dir, "nested.gguf", nested_array_file());
  if (!ok) {
    std::fprintf(stderr, "gguf_fuzz_seeds: cannot write seeds into %s\n", dir.c_str());
    return 1;
  }
  return 0;
}
