// GGUF parsing. Every read goes through Parser, which knows how many bytes are
// left, so a hostile length or count is compared against the file before any
// allocation or pointer arithmetic depends on it.
#include "gguf/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <limits>
#include <utility>

#include "gguf/gguf_internal.h"

namespace cairn::gguf {

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as little-endian uint32
constexpr int kMaxDims = 4;              // GGML_MAX_DIMS
// Arrays of arrays are legal but unused in practice; the cap keeps recursion shallow.
constexpr int kMaxArrayDepth = 3;
// Smallest encodings, used to bound counts by the bytes left before allocating.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;  // empty key, type, one-byte value
constexpr uint64_t kMinTensorInfoBytes =
    8 + 4 + 8 + 4 + 8;  // empty name, n_dims, 1 dim, type, offset
constexpr uint64_t kMinStringBytes = 8;
constexpr uint64_t kMinArrayBytes = 4 + 8;
// Reserve no more than this up front; vectors grow with what is really parsed.
constexpr uint64_t kMaxReserve = 4096;

// Where in the file a read happens, rendered only when it fails.
struct Where {
  std::string_view kind;  // "key", "value of key", "name of tensor", "tensor"
  uint64_t index = 0;
  std::string_view name;  // used instead of the index once known

  std::string str() const {
    if (!name.empty()) return std::string(kind) + " '" + printable(name) + "'";
    return std::string(kind) + " #" + std::to_string(index);
  }
};

// llama.cpp's converters write "no such token" as -1, which lands in a uint32
// key as 0xFFFFFFFF; both spellings are accepted (see gguf.h).
bool is_no_token(const Value& v) {
  switch (v.type) {
    case ValueType::INT8:
    case ValueType::INT16:
    case ValueType::INT32:
    case ValueType::INT64:
      return v.i == -1;
    case ValueType::UINT32:
      return v.u == UINT32_MAX;
    case ValueType::UINT64:
      return v.u == UINT64_MAX;
    default:
      return false;
  }
}

bool is_pow2(uint64_t v) { return v != 0 && (v & (v - 1)) == 0; }

}  // namespace

class Parser {
 public:
  Parser(File& file, std::span<const uint8_t> bytes)
      : file_(file), base_(bytes.data()), size_(bytes.size()) {}

  Status run() {
    CAIRN_RETURN_IF_ERROR(read_header());
    CAIRN_RETURN_IF_ERROR(read_metadata());
    CAIRN_RETURN_IF_ERROR(check_metadata());
    CAIRN_RETURN_IF_ERROR(read_tensor_infos());
    return place_tensors();
  }

 private:
  uint64_t left() const { return size_ - pos_; }

  Status past_end(const std::string& what, const Where& w, uint64_t at) const {
    return Status::error("gguf: " + what + " of " + w.str() + " runs past end of file (offset " +
                         std::to_string(at) + ", size " + std::to_string(size_) + ")");
  }

  template <typename T>
  Status read(T& out, std::string_view what, const Where& w) {
    if (left() < sizeof(T)) return past_end(std::string(what), w, pos_);
    std::memcpy(&out, base_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return Status::ok();
  }

  Status read_string(std::string_view& out, const Where& w) {
    const uint64_t at = pos_;
    uint64_t len = 0;
    CAIRN_RETURN_IF_ERROR(read(len, "string length", w));
    if (len > left()) return past_end("string length " + std::to_string(len), w, at);
    out = std::string_view(reinterpret_cast<const char*>(base_ + pos_), len);
    pos_ += len;
    return Status::ok();
  }

  Status read_header() {
    file_.file_size_ = size_;
    if (size_ < 4) {
      return Status::error("gguf: file is " + std::to_string(size_) +
                           " bytes, too short to hold the GGUF magic");
    }
    uint32_t magic = 0;
    std::memcpy(&magic, base_, 4);
    pos_ = 4;
    if (magic != kMagic) {
      return Status::error("gguf: bad magic '" +
                           printable(std::string_view(reinterpret_cast<const char*>(base_), 4)) +
                           "' (expected 'GGUF'): not a GGUF file");
    }
    const Where header{"header", 0, "header"};
    uint32_t version = 0;
    CAIRN_RETURN_IF_ERROR(read(version, "version", header));
    if (version < 2 || version > 3) {
      return Status::error("gguf: unsupported version " + std::to_string(version) +
                           " (cairn reads GGUF versions 2 and 3)");
    }
    file_.version_ = version;
    CAIRN_RETURN_IF_ERROR(read(n_tensors_, "tensor count", header));
    CAIRN_RETURN_IF_ERROR(read(n_kv_, "metadata count", header));
    if (n_kv_ > left() / kMinKvBytes) {
      return Status::error("gguf: metadata count " + std::to_string(n_kv_) + " is more than the " +
                           std::to_string(left()) + " bytes left in the file could hold");
    }
    if (n_tensors_ > left() / kMinTensorInfoBytes) {
      return Status::error("gguf: tensor count " + std::to_string(n_tensors_) +
                           " is more than the " + std::to_string(left()) +
                           " bytes left in the file could hold");
    }
    return Status::ok();
  }

  Status read_value(ValueType type, Value& v, const Where& w, int depth) {
    v.type = type;
    const ValueTypeDesc* desc = value_type_desc(static_cast<uint32_t>(type));
    if (desc == nullptr) {
      return Status::error("gguf: unknown value type " +
                           std::to_string(static_cast<uint32_t>(type)) + " in " + w.str());
    }
    if (desc->size > 0) {
      const uint64_t at = pos_;
      if (left() < desc->size) {
        return past_end(std::string(desc->name) + " value", w, at);
      }
      decode_scalar(type, base_ + pos_, v);
      pos_ += desc->size;
      if (type == ValueType::BOOL && v.u > 1) {
        return Status::error("gguf: bool value " + std::to_string(v.u) + " of " + w.str() +
                             " is neither 0 nor 1 (offset " + std::to_string(at) + ")");
      }
      return Status::ok();
    }
    if (type == ValueType::STRING) return read_string(v.str, w);
    return read_array(v, w, depth);
  }

  Status read_array(Value& v, const Where& w, int depth) {
    const uint64_t at = pos_;
    uint32_t elem = 0;
    CAIRN_RETURN_IF_ERROR(read(elem, "array element type", w));
    CAIRN_RETURN_IF_ERROR(read(v.count, "array length", w));
    const ValueTypeDesc* desc = value_type_desc(elem);
    if (desc == nullptr) {
      return Status::error("gguf: unknown array element type " + std::to_string(elem) + " in " +
                           w.str());
    }
    v.elem_type = static_cast<ValueType>(elem);
    const std::string what =
        "array of " + std::to_string(v.count) + " " + std::string(desc->name) + " elements";
    if (desc->size > 0) {
      if (v.count > left() / desc->size) return past_end(what, w, at);
      v.array_data = base_ + pos_;
      if (v.elem_type == ValueType::BOOL) {
        for (uint64_t k = 0; k < v.count; ++k) {
          if (v.array_data[k] > 1) {
            return Status::error("gguf: bool element #" + std::to_string(k) + " of " + w.str() +
                                 " is " + std::to_string(v.array_data[k]) + ", neither 0 nor 1");
          }
        }
      }
      pos_ += v.count * desc->size;
      return Status::ok();
    }
    if (v.elem_type == ValueType::STRING) {
      if (v.count > left() / kMinStringBytes) return past_end(what, w, at);
      v.strings.reserve(v.count);  // bounded: each string takes at least 8 file bytes
      for (uint64_t k = 0; k < v.count; ++k) {
        std::string_view s;
        CAIRN_RETURN_IF_ERROR(read_string(s, w));
        v.strings.push_back(s);
      }
      return Status::ok();
    }
    // Array of arrays: walk for bounds, keep nothing.
    if (depth >= kMaxArrayDepth) {
      return Status::error("gguf: arrays nested more than " + std::to_string(kMaxArrayDepth) +
                           " deep in " + w.str());
    }
    if (v.count > left() / kMinArrayBytes) return past_end(what, w, at);
    for (uint64_t k = 0; k < v.count; ++k) {
      Value inner;
      CAIRN_RETURN_IF_ERROR(read_array(inner, w, depth + 1));
    }
    return Status::ok();
  }

  Status read_metadata() {
    file_.kvs_.reserve(std::min(n_kv_, kMaxReserve));
    file_.key_index_.reserve(std::min(n_kv_, kMaxReserve));
    for (uint64_t i = 0; i < n_kv_; ++i) {
      Where w{"key", i, {}};
      std::string_view key;
      CAIRN_RETURN_IF_ERROR(read_string(key, w));
      w = Where{"value of key", i, key};
      if (key.empty()) w.name = {};
      uint32_t type = 0;
      CAIRN_RETURN_IF_ERROR(read(type, "value type", w));
      KeyValue kv;
      CAIRN_RETURN_IF_ERROR(read_value(static_cast<ValueType>(type), kv.value, w, 0));
      auto [it, inserted] = file_.key_index_.emplace(key, file_.kvs_.size());
      if (!inserted) {
        return Status::error("gguf: duplicate key '" + printable(key) + "' (entries #" +
                             std::to_string(it->second) + " and #" + std::to_string(i) + ")");
      }
      kv.key = std::string(key);
      file_.kvs_.push_back(std::move(kv));
    }
    return Status::ok();
  }

  Status check_metadata() {
    if (const Value* a = file_.find("general.alignment")) {
      if (!is_integer(a->type)) {
        return Status::error("gguf: general.alignment has type " + value_type_string(*a) +
                             ", expected an unsigned integer");
      }
      if (a->type == ValueType::INT8 || a->type == ValueType::INT16 ||
          a->type == ValueType::INT32 || a->type == ValueType::INT64) {
        if (a->i <= 0) {
          return Status::error("gguf: general.alignment " + std::to_string(a->i) +
                               " is not a power of two");
        }
      }
      if (!is_pow2(a->u)) {
        return Status::error("gguf: general.alignment " + std::to_string(a->u) +
                             " is not a power of two");
      }
      file_.alignment_ = a->u;
    }
    return check_token_ids();
  }

  // Special token ids index the vocabulary later; an id past its end would be
  // an out-of-bounds read in whoever trusts it, so it is rejected here.
  Status check_token_ids() {
    const Value* tokens = file_.find("tokenizer.ggml.tokens");
    if (tokens == nullptr) return Status::ok();
    if (tokens->type != ValueType::ARRAY || tokens->elem_type != ValueType::STRING) {
      return Status::error("gguf: tokenizer.ggml.tokens has type " + value_type_string(*tokens) +
                           ", expected array[string]");
    }
    const uint64_t n = tokens->count;
    constexpr std::string_view prefix = "tokenizer.ggml.";
    constexpr std::string_view suffix = "_token_id";
    for (const KeyValue& kv : file_.kvs_) {
      const std::string_view key = kv.key;
      if (key.size() < prefix.size() + suffix.size() || !key.starts_with(prefix) ||
          !key.ends_with(suffix)) {
        continue;
      }
      const Value& v = kv.value;
      if (!is_integer(v.type)) {
        return Status::error("gguf: " + printable(key) + " has type " + value_type_string(v) +
                             ", expected an integer token id");
      }
      if (is_no_token(v)) continue;
      const bool negative = is_signed(v.type) && v.i < 0;
      if (negative || v.u >= n) {
        const std::string shown = negative ? std::to_string(v.i) : std::to_string(v.u);
        return Status::error("gguf: " + printable(key) + " = " + shown +
                             " is outside the vocabulary of " + std::to_string(n) + " tokens");
      }
    }
    return Status::ok();
  }

  Status read_tensor_infos() {
    auto& tensors = file_.tensors_;
    tensors.reserve(std::min(n_tensors_, kMaxReserve));
    file_.tensor_index_.reserve(std::min(n_tensors_, kMaxReserve));
    for (uint64_t i = 0; i < n_tensors_; ++i) {
      Where w{"name of tensor", i, {}};
      std::string_view name;
      CAIRN_RETURN_IF_ERROR(read_string(name, w));
      w = Where{"tensor", i, name};
      if (name.empty()) w.name = {};
      uint32_t n_dims = 0;
      CAIRN_RETURN_IF_ERROR(read(n_dims, "dimension count", w));
      if (n_dims < 1 || n_dims > kMaxDims) {
        return Status::error("gguf: " + w.str() + " has " + std::to_string(n_dims) +
                             " dimensions (must be 1 to " + std::to_string(kMaxDims) + ")");
      }
      TensorInfo t;
      t.dims.resize(n_dims);
      for (uint32_t d = 0; d < n_dims; ++d) {
        CAIRN_RETURN_IF_ERROR(read(t.dims[d], "dimension", w));
      }
      uint32_t type = 0;
      CAIRN_RETURN_IF_ERROR(read(type, "type id", w));
      CAIRN_RETURN_IF_ERROR(read(t.offset, "data offset", w));
      CAIRN_RETURN_IF_ERROR(size_tensor(t, type, w));
      auto [it, inserted] = file_.tensor_index_.emplace(name, tensors.size());
      if (!inserted) {
        return Status::error("gguf: duplicate tensor name '" + printable(name) + "' (tensors #" +
                             std::to_string(it->second) + " and #" + std::to_string(i) + ")");
      }
      t.name = std::string(name);
      tensors.push_back(std::move(t));
    }
    return Status::ok();
  }

  Status size_tensor(TensorInfo& t, uint32_t type, const Where& w) {
    const TypeInfo* info = type_info(type);
    if (info == nullptr) {
      return Status::error("gguf: " + w.str() + " has unknown tensor type id " +
                           std::to_string(type));
    }
    t.type = info->type;
    // The row count is checked on its own too: with a zero row length the
    // element count cannot overflow, but TensorInfo::rows() still must not.
    int64_t rows = 1;
    int64_t elems = 0;
    bool overflow = false;
    for (size_t d = 0; d < t.dims.size(); ++d) {
      if (t.dims[d] < 0) {
        return Status::error("gguf: " + w.str() + " dimension " + std::to_string(d) + " is " +
                             std::to_string(t.dims[d]) + ", negative");
      }
      if (d > 0) overflow = overflow || __builtin_mul_overflow(rows, t.dims[d], &rows);
    }
    overflow = overflow || __builtin_mul_overflow(t.dims[0], rows, &elems);
    if (overflow) {
      return Status::error("gguf: " + w.str() + " dimensions " + dims_string(t.dims) +
                           " overflow a 64-bit element count");
    }
    t.n_elements = static_cast<uint64_t>(elems);
    if (t.dims[0] % info->block_elems != 0) {
      return Status::error("gguf: " + w.str() + " row length " + std::to_string(t.dims[0]) +
                           " is not a multiple of the block size " +
                           std::to_string(info->block_elems) + " of type " +
                           std::string(info->name));
    }
    const std::optional<size_t> row = row_bytes(info->type, t.dims[0]);
    uint64_t bytes = 0;
    if (!row ||
        __builtin_mul_overflow(static_cast<uint64_t>(*row), static_cast<uint64_t>(rows), &bytes)) {
      return Status::error("gguf: " + w.str() + " dimensions " + dims_string(t.dims) +
                           " overflow a 64-bit byte size");
    }
    t.n_bytes = bytes;
    return Status::ok();
  }

  Status place_tensors() {
    const uint64_t align = file_.alignment_;
    // Overflow-safe round-up: pos_ <= size_ so the sum cannot wrap for sane alignments,
    // but a 2^63 alignment could; compare first.
    const uint64_t rem = pos_ % align;
    uint64_t data_start = pos_;
    if (rem != 0) {
      if (align - rem > std::numeric_limits<uint64_t>::max() - pos_)
        data_start = UINT64_MAX;
      else
        data_start = pos_ + (align - rem);
    }
    file_.data_offset_ = std::min<uint64_t>(data_start, size_);
    const uint64_t data_size = data_start <= size_ ? size_ - data_start : 0;
    for (size_t i = 0; i < file_.tensors_.size(); ++i) {
      TensorInfo& t = file_.tensors_[i];
      const Where w{"tensor", i, t.name};
      if (t.offset % align != 0) {
        return Status::error("gguf: " + w.str() + " data offset " + std::to_string(t.offset) +
                             " is not a multiple of the alignment " + std::to_string(align));
      }
      if (t.offset > data_size || t.n_bytes > data_size - t.offset) {
        return Status::error("gguf: " + w.str() + " data (offset " + std::to_string(t.offset) +
                             ", " + std::to_string(t.n_bytes) +
                             " bytes) runs past end of file (data section of " +
                             std::to_string(data_size) + " bytes at file offset " +
                             std::to_string(file_.data_offset_) + ")");
      }
      t.data = base_ + file_.data_offset_ + t.offset;
    }
    return Status::ok();
  }

  File& file_;
  const uint8_t* base_;
  uint64_t size_;
  uint64_t pos_ = 0;
  uint64_t n_tensors_ = 0;
  uint64_t n_kv_ = 0;
};

int64_t TensorInfo::rows() const {
  int64_t r = 1;
  for (size_t d = 1; d < dims.size(); ++d) r *= dims[d];
  return r;
}

Status File::parse_all(std::span<const uint8_t> bytes) {
  Parser parser(*this, bytes);
  return parser.run();
}

Result<std::unique_ptr<File>> File::parse(std::span<const uint8_t> bytes) {
  std::unique_ptr<File> f(new File());
  Status st = f->parse_all(bytes);
  if (!st) return st;
  return f;
}

Result<std::unique_ptr<File>> File::parse(std::vector<uint8_t>&& bytes) {
  std::unique_ptr<File> f(new File());
  f->owned_ = std::move(bytes);  // moving keeps the buffer where it is
  Status st = f->parse_all(f->owned_);
  if (!st) return st;
  return f;
}

Result<std::unique_ptr<File>> File::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::error("gguf: cannot open " + path + ": " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Status::error("gguf: " + path + " is not a regular file");
  }
  std::unique_ptr<File> f(new File());
  const size_t size = static_cast<size_t>(st.st_size);
  if (size > 0) {
    void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (map == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return Status::error("gguf: cannot map " + path + ": " + std::strerror(err));
    }
    f->map_ = map;
    f->map_size_ = size;
  }
  ::close(fd);
  Status s = f->parse_all({static_cast<const uint8_t*>(f->map_), size});
  if (!s) return s.with_context(path);
  return f;
}

namespace {

// The whole pages inside [data, data + n) when that range lies in the mapping.
std::pair<uintptr_t, uintptr_t> inner_pages(const void* map, size_t map_size, const void* data,
                                            size_t n) {
  if (map == nullptr || n == 0) return {0, 0};
  const auto begin = reinterpret_cast<uintptr_t>(map);
  const auto p = reinterpret_cast<uintptr_t>(data);
  if (p < begin || p - begin > map_size || n > map_size - (p - begin)) return {0, 0};
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  return {(p + page - 1) / page * page, (p + n) / page * page};
}

}  // namespace

void File::drop_pages(const void* data, size_t n) const {
  const auto [first, last] = inner_pages(map_, map_size_, data, n);
  if (last > first) ::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

void File::prefetch_pages(const void* data, size_t n) const {
  prefetched_.fetch_add(n, std::memory_order_relaxed);
  const auto [first, last] = inner_pages(map_, map_size_, data, n);
  if (last <= first) return;
  // MADV_POPULATE_READ (Linux 5.14) fills the page tables; older kernels
  // refuse it, and read-ahead is the next best thing.
  constexpr int kPopulateRead = 22;
  if (::madvise(reinterpret_cast<void*>(first), last - first, kPopulateRead) != 0)
    ::madvise(reinterpret_cast<void*>(first), last - first, MADV_WILLNEED);
}

File::~File() {
  if (map_ != nullptr) ::munmap(map_, map_size_);
}

}  // namespace cairn::gguf
