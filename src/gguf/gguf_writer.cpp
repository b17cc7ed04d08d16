// GGUF v3 writer. Values are encoded when set, so to_bytes() only lays out the
// header, the tensor infos and the aligned data section.
#include "gguf/gguf_writer.h"

#include <cstdio>
#include <cstring>

#include "gguf/gguf_internal.h"

namespace cairn::gguf {

namespace {

constexpr uint64_t kDefaultAlignment = 32;
constexpr size_t kMaxDims = 4;

template <typename T>
void put(std::vector<uint8_t>& out, T v) {
  uint8_t b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // little-endian host
  out.insert(out.end(), b, b + sizeof(T));
}

void put_str(std::vector<uint8_t>& out, std::string_view s) {
  put<uint64_t>(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

void put_type(std::vector<uint8_t>& out, ValueType t) {
  put<uint32_t>(out, static_cast<uint32_t>(t));
}

void pad_to(std::vector<uint8_t>& out, uint64_t align) {
  out.resize((out.size() + align - 1) / align * align, 0);
}

bool is_pow2(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

}  // namespace

// Encoded value bodies for each setter; the key's type id comes first.
void Writer::set_uint32(const std::string& key, uint32_t v) {
  std::vector<uint8_t> e;
  put_type(e, ValueType::UINT32);
  put(e, v);
  set_encoded(key, std::move(e));
}

void Writer::set_int32(const std::string& key, int32_t v) {
  std::vector<uint8_t> e;
  put_type(e, ValueType::INT32);
  put(e, v);
  set_encoded(key, std::move(e));
}

void Writer::set_uint64(const std::string& key, uint64_t v) {
  std::vector<uint8_t> e;
  put_type(e, ValueType::UINT64);
  put(e, v);
  set_encoded(key, std::move(e));
}

void Writer::set_float32(const std::string& key, float v) {
  std::vector<uint8_t> e;
  put_type(e, ValueType::FLOAT32);
  put(e, v);
  set_encoded(key, std::move(e));
}

void Writer::set_bool(const std::string& key, bool v) {
  std::vector<uint8_t> e;
  put_type(e, ValueType::BOOL);
  put<uint8_t>(e, v ? 1 : 0);
  set_encoded(key, std::move(e));
}

void Writer::set_string(const std::string& key, const std::string& v) {
  std::vector<uint8_t> e;
  put_type(e, ValueType::STRING);
  put_str(e, v);
  set_encoded(key, std::move(e));
}

void Writer::set_string_array(const std::string& key, const std::vector<std::string>& v) {
  std::vector<uint8_t> e;
  put_type(e, ValueType::ARRAY);
  put_type(e, ValueType::STRING);
  put<uint64_t>(e, v.size());
  for (const std::string& s : v) put_str(e, s);
  set_encoded(key, std::move(e));
}

void Writer::set_float32_array(const std::string& key, const std::vector<float>& v) {
  std::vector<uint8_t> e;
  put_type(e, ValueType::ARRAY);
  put_type(e, ValueType::FLOAT32);
  put<uint64_t>(e, v.size());
  for (float f : v) put(e, f);
  set_encoded(key, std::move(e));
}

void Writer::set_int32_array(const std::string& key, const std::vector<int32_t>& v) {
  std::vector<uint8_t> e;
  put_type(e, ValueType::ARRAY);
  put_type(e, ValueType::INT32);
  put<uint64_t>(e, v.size());
  for (int32_t x : v) put(e, x);
  set_encoded(key, std::move(e));
}

void Writer::copy_value(const std::string& key, const Value& v) {
  std::vector<uint8_t> e;
  put_type(e, v.type);
  const ValueTypeDesc* desc = value_type_desc(static_cast<uint32_t>(v.type));
  if (desc == nullptr) return;  // a Value from File::parse always has a known type
  if (desc->size > 0) {
    // Re-encode from the widened fields, which hold the value exactly.
    uint8_t b[8] = {};
    if (desc->kind == ValueKind::FLOAT && desc->size == 4) {
      const float f = static_cast<float>(v.f);
      std::memcpy(b, &f, 4);
    } else if (desc->kind == ValueKind::FLOAT) {
      std::memcpy(b, &v.f, 8);
    } else if (desc->kind == ValueKind::SIGNED) {
      std::memcpy(b, &v.i, desc->size);  // low bytes of the two's complement
    } else {
      std::memcpy(b, &v.u, desc->size);
    }
    e.insert(e.end(), b, b + desc->size);
  } else if (v.type == ValueType::STRING) {
    put_str(e, v.str);
  } else {
    put_type(e, v.elem_type);
    const ValueTypeDesc* elem = value_type_desc(static_cast<uint32_t>(v.elem_type));
    if (elem == nullptr) return;
    if (elem->size > 0) {
      put<uint64_t>(e, v.count);
      if (v.count > 0) e.insert(e.end(), v.array_data, v.array_data + v.count * elem->size);
    } else if (v.elem_type == ValueType::STRING) {
      put<uint64_t>(e, v.strings.size());
      for (std::string_view s : v.strings) put_str(e, s);
    } else {
      // Contents of nested arrays are not kept by the reader: written as empty.
      put<uint64_t>(e, 0);
    }
  }
  set_encoded(key, std::move(e));
}

void Writer::set_encoded(const std::string& key, std::vector<uint8_t> encoded) {
  for (auto& kv : kvs_) {
    if (kv.first == key) {
      kv.second = std::move(encoded);
      return;
    }
  }
  kvs_.emplace_back(key, std::move(encoded));
}

Result<uint64_t> Writer::check_tensor(const std::string& name, TensorType type,
                                      const std::vector<int64_t>& dims) const {
  const std::string where = "gguf writer: tensor '" + printable(name) + "'";
  for (const PendingTensor& t : tensors_) {
    if (t.name == name) return Status::error(where + " added twice");
  }
  if (dims.empty() || dims.size() > kMaxDims) {
    return Status::error(where + " has " + std::to_string(dims.size()) +
                         " dimensions (must be 1 to 4)");
  }
  uint64_t rows = 1;
  for (size_t d = 0; d < dims.size(); ++d) {
    if (dims[d] < 0) return Status::error(where + " has a negative dimension");
    if (d > 0 && __builtin_mul_overflow(rows, static_cast<uint64_t>(dims[d]), &rows)) {
      return Status::error(where + " dimensions " + dims_string(dims) + " overflow");
    }
  }
  const std::optional<size_t> row = row_bytes(type, dims[0]);
  if (!row) {
    return Status::error(where + " row length " + std::to_string(dims[0]) +
                         " is not a multiple of the block size of " +
                         std::string(type_info(type).name));
  }
  uint64_t bytes = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(*row), rows, &bytes)) {
    return Status::error(where + " dimensions " + dims_string(dims) + " overflow");
  }
  return bytes;
}

Status Writer::add_tensor(const std::string& name, TensorType type, std::vector<int64_t> dims,
                          std::vector<uint8_t> data) {
  Result<uint64_t> bytes = check_tensor(name, type, dims);
  if (!bytes) return bytes.status();
  if (*bytes != data.size()) {
    return Status::error("gguf writer: tensor '" + printable(name) + "' " + dims_string(dims) +
                         " of " + std::string(type_info(type).name) + " needs " +
                         std::to_string(*bytes) + " bytes, got " + std::to_string(data.size()));
  }
  tensors_.push_back({name, type, std::move(dims), std::move(data), *bytes});
  return Status::ok();
}

Status Writer::declare_tensor(const std::string& name, TensorType type, std::vector<int64_t> dims) {
  Result<uint64_t> bytes = check_tensor(name, type, dims);
  if (!bytes) return bytes.status();
  tensors_.push_back({name, type, std::move(dims), {}, *bytes});
  return Status::ok();
}

uint64_t Writer::tensor_padding(uint64_t bytes, uint64_t alignment) {
  return (alignment - bytes % alignment) % alignment;
}

std::vector<uint8_t> Writer::header_bytes(uint64_t alignment) const {
  // write() reports a bad alignment; here it falls back to the default.
  if (!is_pow2(alignment) || alignment > UINT32_MAX) alignment = kDefaultAlignment;
  // Readers assume 32 unless told otherwise, so another alignment must be stated.
  bool have_alignment_key = false;
  for (const auto& kv : kvs_) have_alignment_key |= kv.first == "general.alignment";
  const bool add_alignment_key = !have_alignment_key && alignment != kDefaultAlignment;

  std::vector<uint8_t> out;
  put<uint32_t>(out, 0x46554747);  // "GGUF"
  put<uint32_t>(out, 3);
  put<uint64_t>(out, tensors_.size());
  put<uint64_t>(out, kvs_.size() + (add_alignment_key ? 1 : 0));
  auto put_alignment = [&] {
    put_str(out, "general.alignment");
    put_type(out, ValueType::UINT32);
    put<uint32_t>(out, static_cast<uint32_t>(alignment));
  };
  for (const auto& [key, encoded] : kvs_) {
    if (key == "general.alignment") {
      put_alignment();  // the argument wins over a stale value set earlier
      continue;
    }
    put_str(out, key);
    out.insert(out.end(), encoded.begin(), encoded.end());
  }
  if (add_alignment_key) put_alignment();

  uint64_t offset = 0;
  for (const PendingTensor& t : tensors_) {
    put_str(out, t.name);
    put<uint32_t>(out, static_cast<uint32_t>(t.dims.size()));
    for (int64_t d : t.dims) put<int64_t>(out, d);
    put<uint32_t>(out, static_cast<uint32_t>(t.type));
    put<uint64_t>(out, offset);
    offset += t.n_bytes + tensor_padding(t.n_bytes, alignment);
  }
  if (!tensors_.empty()) pad_to(out, alignment);
  return out;
}

std::vector<uint8_t> Writer::to_bytes(uint64_t alignment) const {
  if (!is_pow2(alignment) || alignment > UINT32_MAX) alignment = kDefaultAlignment;
  std::vector<uint8_t> out = header_bytes(alignment);
  for (const PendingTensor& t : tensors_) {
    out.insert(out.end(), t.data.begin(), t.data.end());
    // Declared tensors have no bytes here; their space is zero-filled so the
    // layout stays what header_bytes() promised.
    out.resize(out.size() + (t.n_bytes - t.data.size()), 0);
    pad_to(out, alignment);  // data section starts aligned, so this aligns offsets too
  }
  return out;
}

Status Writer::write(const std::string& path, uint64_t alignment) const {
  if (!is_pow2(alignment) || alignment > UINT32_MAX) {
    return Status::error("gguf writer: alignment " + std::to_string(alignment) +
                         " is not a power of two that fits in uint32");
  }
  const std::vector<uint8_t> bytes = to_bytes(alignment);
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return Status::error("gguf writer: cannot create " + path);
  const bool wrote = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  const bool closed = std::fclose(f) == 0;
  if (!wrote || !closed) return Status::error("gguf writer: cannot write " + path);
  return Status::ok();
}

}  // namespace cairn::gguf
