// gguf/gguf.h — reading GGUF files (versions 2 and 3).
// Owns parsing and validation: the file is memory-mapped and every count,
// string length, array length, dimension product, type id, alignment and
// tensor offset/size is checked against the file before it is used. A
// malformed file yields a one-line error naming the problem; never a crash,
// an unbounded allocation or a hang. Knows nothing of models or tokenizers,
// with one exception: when `tokenizer.ggml.tokens` is present, every
// `tokenizer.ggml.*_token_id` must be an integer below the token count, or the
// "no token" sentinel -1 (0xFFFFFFFF in a uint32 key, as llama.cpp writes it),
// which readers must treat as absent.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "core/tensor_type.h"

namespace cairn::gguf {

enum class ValueType : uint32_t {
  UINT8 = 0, INT8 = 1, UINT16 = 2, INT16 = 3, UINT32 = 4, INT32 = 5, FLOAT32 = 6,
  BOOL = 7, STRING = 8, ARRAY = 9, UINT64 = 10, INT64 = 11, FLOAT64 = 12,
};
std::string_view value_type_name(ValueType t);

// One metadata value. Scalars are widened into the fields below; arrays keep a
// pointer into the mapping (numeric) or views of their strings.
struct Value {
  ValueType type = ValueType::UINT8;
  uint64_t u = 0;        // unsigned ints and bool
  int64_t i = 0;         // signed ints (also filled for unsigned that fit)
  double f = 0;          // floats
  std::string_view str;  // STRING
  // ARRAY
  ValueType elem_type = ValueType::UINT8;
  uint64_t count = 0;
  const uint8_t* array_data = nullptr;        // numeric arrays: raw little-endian elements
  std::vector<std::string_view> strings;      // string arrays
  // Arrays of arrays are parsed for bounds but their contents are not kept.
};

// Name of a value's type as the dump prints it: "uint32", "array[string]".
std::string value_type_string(const Value& v);

struct KeyValue {
  std::string key;
  Value value;
};

struct TensorInfo {
  std::string name;
  TensorType type;
  std::vector<int64_t> dims;  // dims[0] is the row length (innermost), as in ggml
  uint64_t offset = 0;        // relative to the data section
  uint64_t n_elements = 0;
  uint64_t n_bytes = 0;
  const uint8_t* data = nullptr;  // into the mapping, aligned

  int64_t rows() const;  // product of dims[1..]
};

class File {
 public:
  // Maps and validates the file. The error message is one line.
  static Result<std::unique_ptr<File>> open(const std::string& path);
  // Parses a buffer the caller keeps alive (tests, fuzzing): names, strings and
  // tensor data point into it.
  static Result<std::unique_ptr<File>> parse(std::span<const uint8_t> bytes);
  // Takes ownership of the bytes, so parsing a temporary (Writer::to_bytes())
  // cannot leave the File pointing into freed memory.
  static Result<std::unique_ptr<File>> parse(std::vector<uint8_t>&& bytes);
  ~File();
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  const std::vector<KeyValue>& metadata() const { return kvs_; }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  // Where the tensor data section starts, and the whole file's size.
  uint64_t data_offset() const { return data_offset_; }
  uint64_t file_size() const { return file_size_; }

  // Tells the kernel that the mapped pages wholly inside [data, data + n) will
  // not be read soon (a model that keeps a repacked copy), so they leave the
  // process's resident memory; a later read maps them back in from the file.
  // A no-op for buffers that are not a file mapping.
  void drop_pages(const void* data, size_t n) const;
  // Maps the pages of [data, data + n) in with one call before a pass reads
  // them all (a page fault per 4 KiB costs more than the reading).
  void prefetch_pages(const void* data, size_t n) const;
  // Bytes passed to prefetch_pages so far, from any thread: how far a load
  // that prefetches each matrix before building it has come (progress bars).
  uint64_t prefetched_bytes() const { return prefetched_.load(std::memory_order_relaxed); }

  const Value* find(std::string_view key) const;
  const TensorInfo* find_tensor(std::string_view name) const;

  // Points tensor `name` at `bytes` instead of the file's data (a LoRA
  // adapter merged at load): same name, type and shape, so `bytes` must be
  // exactly the tensor's n_bytes. The File owns the bytes from here on, at a
  // 64-byte aligned address. Errors name the tensor.
  Status replace_tensor_data(std::string_view name, std::span<const uint8_t> bytes);

  // Typed getters: nullopt when absent; an error when present with a type that
  // does not convert (a negative number asked as unsigned, a string as a number...).
  Result<std::optional<uint64_t>> get_uint(std::string_view key) const;
  Result<std::optional<int64_t>> get_int(std::string_view key) const;
  Result<std::optional<double>> get_float(std::string_view key) const;
  Result<std::optional<bool>> get_bool(std::string_view key) const;
  Result<std::optional<std::string_view>> get_string(std::string_view key) const;
  // Arrays: error if absent is not an error (empty optional); wrong element type is.
  Result<std::optional<std::vector<std::string_view>>> get_string_array(std::string_view key) const;
  Result<std::optional<std::vector<float>>> get_float_array(std::string_view key) const;
  Result<std::optional<std::vector<int64_t>>> get_int_array(std::string_view key) const;

 private:
  File() = default;
  Status parse_all(std::span<const uint8_t> bytes);
  friend class Parser;

  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  std::vector<KeyValue> kvs_;
  std::vector<TensorInfo> tensors_;
  uint64_t data_offset_ = 0;
  uint64_t file_size_ = 0;
  // Keys and names are views into the mapping, which lives as long as the File.
  std::unordered_map<std::string_view, size_t> key_index_;
  std::unordered_map<std::string_view, size_t> tensor_index_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  std::vector<uint8_t> owned_;  // the bytes, when parsed from an owned buffer
  struct AlignedFree {
    void operator()(uint8_t* p) const;
  };
  std::vector<std::unique_ptr<uint8_t[], AlignedFree>> replaced_;  // replace_tensor_data's bytes
  mutable std::atomic<uint64_t> prefetched_{0};
};

}  // namespace cairn::gguf
