// core/npy.cpp — .npy reading (v1.0–3.0, strict header dict) and writing (v1.0).
// The header is a Python dict literal; only the three keys numpy writes are
// accepted, with a small hand-written parser (no eval, no regex): anything
// else is refused with a one-line error naming what was wrong.
#include "core/npy.h"

#include <bit>
#include <cstring>
#include <fstream>
#include <limits>
#include <vector>

#include "core/half.h"

namespace cairn::values {

static_assert(std::endian::native == std::endian::little,
              "tensors are little-endian in memory; '=' in a descr means little-endian");

namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;
// numpy itself refuses headers over 10000 bytes unless told otherwise; a
// little more room costs nothing and no real file comes near it.
constexpr size_t kMaxHeaderLen = 65536;

Status bad(const std::string& what) {
  return Status::invalid_argument("not a valid .npy file: " + what);
}

// The header dict, parsed: a cursor over the header text.
class DictParser {
 public:
  explicit DictParser(std::string_view s) : s_(s) {}

  void skip_ws() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t')) ++pos_;
  }
  bool eat(char c) {
    skip_ws();
    if (pos_ < s_.size() && s_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool peek(char c) {
    skip_ws();
    return pos_ < s_.size() && s_[pos_] == c;
  }
  // A quoted string without escapes (numpy never writes any in these keys).
  Result<std::string> string() {
    skip_ws();
    if (pos_ >= s_.size() || (s_[pos_] != '\'' && s_[pos_] != '"'))
      return bad("the header has no quoted string where one is expected");
    const char q = s_[pos_++];
    const size_t end = s_.find(q, pos_);
    if (end == std::string_view::npos) return bad("the header has an unterminated string");
    std::string out(s_.substr(pos_, end - pos_));
    if (out.find('\\') != std::string::npos) return bad("the header has an escaped string");
    pos_ = end + 1;
    return out;
  }
  Result<bool> boolean() {
    skip_ws();
    if (s_.substr(pos_, 4) == "True") {
      pos_ += 4;
      return true;
    }
    if (s_.substr(pos_, 5) == "False") {
      pos_ += 5;
      return false;
    }
    return bad("'fortran_order' is not True or False");
  }
  // "()", "(3,)", "(2, 3)", "(2, 3,)"; numpy may write "3L" in old files.
  Result<std::vector<int64_t>> shape() {
    std::vector<int64_t> dims;
    if (!eat('(')) return bad("'shape' is not a tuple");
    if (eat(')')) return dims;
    while (true) {
      skip_ws();
      if (pos_ >= s_.size() || s_[pos_] < '0' || s_[pos_] > '9')
        return bad("'shape' holds something other than a non-negative integer");
      uint64_t v = 0;
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
        const uint64_t digit = static_cast<uint64_t>(s_[pos_] - '0');
        if (v > (uint64_t(std::numeric_limits<int64_t>::max()) - digit) / 10)
          return bad("a dimension of 'shape' is too large");
        v = v * 10 + digit;
        ++pos_;
      }
      if (pos_ < s_.size() && s_[pos_] == 'L') ++pos_;
      if (dims.size() >= kMaxTensorRank)
        return bad("'shape' has more than " + std::to_string(kMaxTensorRank) + " dimensions");
      dims.push_back(static_cast<int64_t>(v));
      const bool comma = eat(',');
      if (eat(')')) {
        // Python needs the comma in a one-element tuple: "(3)" is just 3.
        if (dims.size() == 1 && !comma) return bad("'shape' (n) is not a tuple; numpy writes (n,)");
        return dims;
      }
      if (!comma) return bad("'shape' is not a tuple of integers");
    }
  }
  bool at_end() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n')) ++pos_;
    return pos_ == s_.size();
  }

 private:
  std::string_view s_;
  size_t pos_ = 0;
};

struct Descr {
  DType dtype;
  bool swap;  // big-endian data: bytes to be swapped to little-endian
};

// numpy's type strings: a byte-order character, a kind and a size.
Result<Descr> parse_descr(const std::string& d) {
  const std::string shown = "'" + d.substr(0, 32) + "'";
  if (d.size() >= 2 && d[1] == 'O')
    return bad("object arrays (dtype " + shown + ") are not supported");
  if (d.size() < 3) return bad("unsupported dtype " + shown);
  const char order = d[0];
  const char kind = d[1];
  const std::string size = d.substr(2);
  if (order != '<' && order != '>' && order != '=' && order != '|')
    return bad("dtype " + shown + " has no byte-order character");
  std::optional<DType> t;
  if (kind == 'b' && size == "1") t = DType::Bool;
  if (kind == 'i') {
    if (size == "1") t = DType::Int8;
    if (size == "2") t = DType::Int16;
    if (size == "4") t = DType::Int32;
    if (size == "8") t = DType::Int64;
  }
  if (kind == 'u') {
    if (size == "1") t = DType::UInt8;
    if (size == "2") t = DType::UInt16;
    if (size == "4") t = DType::UInt32;
    if (size == "8") t = DType::UInt64;
  }
  if (kind == 'f') {
    if (size == "2") t = DType::Float16;
    if (size == "4") t = DType::Float32;
    if (size == "8") t = DType::Float64;
  }
  if (!t) {
    return bad("unsupported dtype " + shown +
               " (supported: bool, int8..int64, uint8..uint64, float16, float32, float64)");
  }
  const size_t width = dtype_size(*t);
  if (order == '|' && width != 1) return bad("dtype " + shown + " needs a byte order");
  return Descr{*t, order == '>' && width > 1};
}

void swap_bytes(std::string& data, size_t width) {
  for (size_t i = 0; i + width <= data.size(); i += width)
    for (size_t a = i, b = i + width - 1; a < b; ++a, --b) std::swap(data[a], data[b]);
}

const char* descr_of(DType t) {
  switch (t) {
    case DType::Bool:
      return "|b1";
    case DType::Int8:
      return "|i1";
    case DType::Int16:
      return "<i2";
    case DType::Int32:
      return "<i4";
    case DType::Int64:
      return "<i8";
    case DType::UInt8:
      return "|u1";
    case DType::UInt16:
      return "<u2";
    case DType::UInt32:
      return "<u4";
    case DType::UInt64:
      return "<u8";
    case DType::Float16:
      return "<f2";
    case DType::BFloat16:  // written widened to float32 (see to_npy)
    case DType::Float32:
      return "<f4";
    case DType::Float64:
      return "<f8";
  }
  return "<f4";
}

}  // namespace

Result<Tensor> parse_npy(const std::string& bytes) {
  if (bytes.size() < kMagicLen + 2 || std::memcmp(bytes.data(), kMagic, kMagicLen) != 0)
    return bad("the magic string \\x93NUMPY is missing");
  const int major = static_cast<unsigned char>(bytes[6]);
  const int minor = static_cast<unsigned char>(bytes[7]);
  if (major < 1 || major > 3 || minor != 0)
    return bad("format version " + std::to_string(major) + "." + std::to_string(minor) +
               " is not supported (1.0, 2.0 or 3.0)");
  const size_t len_bytes = major == 1 ? 2 : 4;
  const size_t prefix = kMagicLen + 2 + len_bytes;
  if (bytes.size() < prefix) return bad("the file ends inside the header length");
  size_t header_len = 0;
  for (size_t i = 0; i < len_bytes; ++i)
    header_len |= size_t(static_cast<unsigned char>(bytes[8 + i])) << (8 * i);
  if (header_len > kMaxHeaderLen)
    return bad("the header is " + std::to_string(header_len) + " bytes, at most " +
               std::to_string(kMaxHeaderLen) + " are allowed");
  if (bytes.size() - prefix < header_len) return bad("the file ends inside the header");
  const std::string_view header(bytes.data() + prefix, header_len);
  if (header.empty() || header.back() != '\n') return bad("the header does not end in a newline");

  DictParser p(header);
  if (!p.eat('{')) return bad("the header is not a dict");
  std::optional<std::string> descr;
  std::optional<bool> fortran;
  std::optional<std::vector<int64_t>> shape;
  while (!p.eat('}')) {
    auto key = p.string();
    if (!key.is_ok()) return key.status();
    if (!p.eat(':')) return bad("the header dict has no ':' after a key");
    if (*key == "descr") {
      if (descr) return bad("the header repeats 'descr'");
      auto v = p.string();
      if (!v.is_ok()) {
        if (p.peek('[')) return bad("structured dtypes are not supported");
        return v.status();
      }
      descr = std::move(*v);
    } else if (*key == "fortran_order") {
      if (fortran) return bad("the header repeats 'fortran_order'");
      auto v = p.boolean();
      if (!v.is_ok()) return v.status();
      fortran = *v;
    } else if (*key == "shape") {
      if (shape) return bad("the header repeats 'shape'");
      auto v = p.shape();
      if (!v.is_ok()) return v.status();
      shape = std::move(*v);
    } else {
      return bad("the header has an unknown key '" + key->substr(0, 32) + "'");
    }
    if (!p.eat(',')) {
      if (!p.eat('}')) return bad("the header dict is malformed");
      break;
    }
  }
  if (!p.at_end()) return bad("the header has text after its dict");
  if (!descr || !fortran || !shape)
    return bad("the header lacks 'descr', 'fortran_order' or 'shape'");
  if (*fortran)
    return Status::invalid_argument(
        ".npy arrays in Fortran order are not supported (save with np.ascontiguousarray)");
  auto d = parse_descr(*descr);
  if (!d.is_ok()) return d.status();
  auto count = Tensor::count_of(d->dtype, *shape);
  if (!count.is_ok()) return count.status();
  const uint64_t want = static_cast<uint64_t>(*count) * dtype_size(d->dtype);
  const uint64_t have = bytes.size() - prefix - header_len;
  if (have != want)
    return bad("the header describes " + std::to_string(want) + " bytes of data, the file holds " +
               std::to_string(have));
  std::string data = bytes.substr(prefix + header_len);
  if (d->swap) swap_bytes(data, dtype_size(d->dtype));
  return Tensor::make(d->dtype, std::move(*shape), std::move(data));
}

std::string to_npy(const Tensor& t) {
  std::string data = t.data;
  if (t.dtype == DType::BFloat16) {
    // numpy has no bfloat16: widen to float32, which holds every value exactly.
    std::string wide;
    wide.reserve(data.size() * 2);
    for (size_t i = 0; i + 2 <= data.size(); i += 2) {
      uint16_t h;
      std::memcpy(&h, data.data() + i, 2);
      const float f = bf16_to_f32(h);
      char b[4];
      std::memcpy(b, &f, 4);
      wide.append(b, 4);
    }
    data = std::move(wide);
  }
  std::string header =
      std::string("{'descr': '") + descr_of(t.dtype) + "', 'fortran_order': False, 'shape': (";
  for (size_t i = 0; i < t.shape.size(); ++i)
    header += (i ? ", " : "") + std::to_string(t.shape[i]);
  if (t.shape.size() == 1) header += ",";
  header += "), }";
  // magic (6) + version (2) + length (2) + header + '\n', padded to 64.
  const size_t total = kMagicLen + 4 + header.size() + 1;
  header.append((64 - total % 64) % 64, ' ');
  header += '\n';
  std::string out(kMagic, kMagicLen);
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>((header.size() >> 8) & 0xff);
  out += header;
  out += data;
  return out;
}

Result<Tensor> read_npy_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return Status::invalid_argument("cannot open " + path);
  const std::streamoff size = in.tellg();
  if (size < 0) return Status::invalid_argument("cannot read " + path);
  if (static_cast<uint64_t>(size) > kMaxTensorBytes + kMaxHeaderLen + 16)
    return Status::invalid_argument(path + " is larger than a tensor may be (" +
                                    std::to_string(kMaxTensorBytes >> 20) + " MiB)");
  std::string bytes(static_cast<size_t>(size), '\0');
  in.seekg(0);
  if (!in.read(bytes.data(), size)) return Status::invalid_argument("cannot read " + path);
  auto t = parse_npy(bytes);
  if (!t.is_ok()) return t.status().with_context(path);
  return t;
}

Status write_npy_file(const std::string& path, const Tensor& t) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return Status::error("cannot write " + path);
  const std::string bytes = to_npy(t);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) return Status::error("cannot write " + path);
  return Status::ok();
}

}  // namespace cairn::values
