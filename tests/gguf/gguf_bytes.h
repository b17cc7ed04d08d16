// tests/gguf/gguf_bytes.h — builds GGUF bytes by hand, so tests can make files
// that are wrong in exactly one way (the Writer only makes valid ones).
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cairn::gguf::test {

struct Bytes {
  std::vector<uint8_t> b;

  template <typename T>
  Bytes& put(T v) {
    uint8_t tmp[sizeof(T)];
    std::memcpy(tmp, &v, sizeof(T));
    b.insert(b.end(), tmp, tmp + sizeof(T));
    return *this;
  }
  Bytes& u8(uint8_t v) { return put(v); }
  Bytes& u32(uint32_t v) { return put(v); }
  Bytes& u64(uint64_t v) { return put(v); }
  Bytes& i64(int64_t v) { return put(v); }
  Bytes& str(std::string_view s) {
    u64(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  Bytes& append(const std::vector<uint8_t>& more) {
    b.insert(b.end(), more.begin(), more.end());
    return *this;
  }
  Bytes& pad(uint64_t align) {
    b.resize((b.size() + align - 1) / align * align, 0);
    return *this;
  }
};

// Value type ids of the spec.
enum : uint32_t {
  T_U8 = 0,
  T_I8 = 1,
  T_U32 = 4,
  T_I32 = 5,
  T_F32 = 6,
  T_BOOL = 7,
  T_STR = 8,
  T_ARR = 9,
  T_U64 = 10
};

inline std::vector<uint8_t> kv_u32(std::string_view key, uint32_t v) {
  return Bytes().str(key).u32(T_U32).u32(v).b;
}
inline std::vector<uint8_t> kv_i32(std::string_view key, int32_t v) {
  return Bytes().str(key).u32(T_I32).put<int32_t>(v).b;
}
inline std::vector<uint8_t> kv_str(std::string_view key, std::string_view v) {
  return Bytes().str(key).u32(T_STR).str(v).b;
}
inline std::vector<uint8_t> kv_strs(std::string_view key, const std::vector<std::string>& v) {
  Bytes out;
  out.str(key).u32(T_ARR).u32(T_STR).u64(v.size());
  for (const auto& s : v) out.str(s);
  return out.b;
}

struct TensorSpec {
  std::string name;
  std::vector<int64_t> dims;
  uint32_t type = 0;  // F32
  uint64_t offset = 0;
  std::optional<uint32_t> n_dims;  // overrides dims.size() in the header
};

struct FileSpec {
  uint32_t magic = 0x46554747;
  uint32_t version = 3;
  std::optional<uint64_t> n_tensors;  // override of tensors.size()
  std::optional<uint64_t> n_kv;       // override of kvs.size()
  std::vector<std::vector<uint8_t>> kvs;
  std::vector<TensorSpec> tensors;
  uint64_t align = 32;      // padding before the data section
  uint64_t data_bytes = 0;  // size of the data section (patterned bytes)
};

inline std::vector<uint8_t> build(const FileSpec& s) {
  Bytes out;
  out.u32(s.magic).u32(s.version);
  out.u64(s.n_tensors.value_or(s.tensors.size()));
  out.u64(s.n_kv.value_or(s.kvs.size()));
  for (const auto& kv : s.kvs) out.append(kv);
  for (const auto& t : s.tensors) {
    out.str(t.name).u32(t.n_dims.value_or(static_cast<uint32_t>(t.dims.size())));
    for (int64_t d : t.dims) out.i64(d);
    out.u32(t.type).u64(t.offset);
  }
  if (!s.tensors.empty() || s.data_bytes > 0) out.pad(s.align);
  for (uint64_t k = 0; k < s.data_bytes; ++k) out.u8(static_cast<uint8_t>(k * 7 + 1));
  return out.b;
}

// A small valid file: a vocabulary of 3 with a BOS id, an F32 [8, 2] tensor and
// a Q8_0 [32] tensor whose data ends exactly at the end of the file.
inline FileSpec small_spec() {
  FileSpec s;
  s.kvs.push_back(kv_str("general.architecture", "llama"));
  s.kvs.push_back(kv_strs("tokenizer.ggml.tokens", {"<s>", "a", "b"}));
  s.kvs.push_back(kv_u32("tokenizer.ggml.bos_token_id", 0));
  s.tensors.push_back({"w", {8, 2}, 0, 0, {}});
  s.tensors.push_back({"q", {32}, 8, 64, {}});
  s.data_bytes = 64 + 34;
  return s;
}

}  // namespace cairn::gguf::test
