// gguf/gguf_writer.h — writing GGUF version 3 files.
// Used by tests (models they make themselves) and by `cairn make-model`.
// Owns the byte layout only; never validates model semantics. Setting a key
// twice replaces its value, so a written file never has duplicate keys.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor_type.h"
#include "gguf/gguf.h"

namespace cairn::gguf {

class Writer {
 public:
  void set_uint32(const std::string& key, uint32_t v);
  void set_int32(const std::string& key, int32_t v);
  void set_uint64(const std::string& key, uint64_t v);
  void set_float32(const std::string& key, float v);
  void set_bool(const std::string& key, bool v);
  void set_string(const std::string& key, const std::string& v);
  void set_string_array(const std::string& key, const std::vector<std::string>& v);
  void set_float32_array(const std::string& key, const std::vector<float>& v);
  void set_int32_array(const std::string& key, const std::vector<int32_t>& v);
  // Copies a metadata entry from another file (make-model copies a vocabulary).
  void copy_value(const std::string& key, const Value& v);

  // `dims[0]` is the row length; `data` must be exactly the tensor's byte size.
  Status add_tensor(const std::string& name, TensorType type, std::vector<int64_t> dims,
                    std::vector<uint8_t> data);

  // Streaming, for files too large to hold in memory (make-model of real
  // shapes): declare every tensor without data, write header_bytes(), then each
  // tensor's bytes in declaration order, each followed by padding to the
  // alignment (tensor_padding). A writer mixes either declared or added tensors.
  Status declare_tensor(const std::string& name, TensorType type, std::vector<int64_t> dims);
  // Magic, version, counts, metadata and tensor infos, padded to the data section.
  std::vector<uint8_t> header_bytes(uint64_t alignment = 32) const;
  // Zero bytes to write after a tensor of `bytes` bytes so the next one is aligned.
  static uint64_t tensor_padding(uint64_t bytes, uint64_t alignment = 32);

  // `alignment` must be a power of two below 2^32 (else 32 is used; write()
  // reports it as an error). Anything but 32 is recorded as general.alignment.
  std::vector<uint8_t> to_bytes(uint64_t alignment = 32) const;
  Status write(const std::string& path, uint64_t alignment = 32) const;

 private:
  void set_encoded(const std::string& key, std::vector<uint8_t> encoded);
  // Validates a new tensor and returns its byte size.
  Result<uint64_t> check_tensor(const std::string& name, TensorType type,
                                const std::vector<int64_t>& dims) const;
  std::vector<std::pair<std::string, std::vector<uint8_t>>> kvs_;  // key, encoded type+value
  struct PendingTensor {
    std::string name;
    TensorType type;
    std::vector<int64_t> dims;
    std::vector<uint8_t> data;  // empty for declared tensors
    uint64_t n_bytes = 0;
  };
  std::vector<PendingTensor> tensors_;
};

}  // namespace cairn::gguf
