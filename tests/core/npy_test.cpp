// tests/core/npy_test.cpp — .npy files: round trips of every dtype, files numpy wrote (and numpy
// reading ours, when /usr/bin/python3 has numpy), malformed and truncated headers, size mismatches.
#include "core/npy.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/half.h"
#include "test_util.h"

namespace cairn::values {
namespace {

// A tensor of `dtype` whose bytes are 0, 1, 2, ... (bool: 0, 1, 0, ...).
Tensor counting(DType dtype, std::vector<int64_t> shape) {
  auto count = Tensor::count_of(dtype, shape);
  EXPECT_TRUE(count.is_ok());
  std::string data(static_cast<size_t>(*count) * dtype_size(dtype), '\0');
  for (size_t i = 0; i < data.size(); ++i)
    data[i] = static_cast<char>(dtype == DType::Bool ? i % 2 : i * 7 + 1);
  auto t = Tensor::make(dtype, std::move(shape), std::move(data));
  EXPECT_TRUE(t.is_ok());
  return *t;
}

// A v1.0 file with a hand-written header (padded to 64 like numpy's).
std::string npy_with_header(std::string dict, const std::string& data, int major = 1) {
  const size_t len_bytes = major == 1 ? 2 : 4;
  const size_t total = 8 + len_bytes + dict.size() + 1;
  dict.append((64 - total % 64) % 64, ' ');
  dict += '\n';
  std::string out("\x93NUMPY", 6);
  out += static_cast<char>(major);
  out += '\0';
  for (size_t i = 0; i < len_bytes; ++i) out += static_cast<char>((dict.size() >> (8 * i)) & 0xff);
  return out + dict + data;
}

std::string error_of(const std::string& bytes) {
  auto t = parse_npy(bytes);
  return t.is_ok() ? "<parsed>" : t.status().message();
}

TEST(Npy, EveryDtypeAndRankRoundTrips) {
  for (DType dt : kAllDTypes) {
    if (dt == DType::BFloat16) continue;  // widened on write; checked below
    for (auto shape : std::vector<std::vector<int64_t>>{{}, {5}, {2, 3}, {2, 1, 3}, {0, 4}}) {
      Tensor t = counting(dt, shape);
      std::string bytes = to_npy(t);
      // The header is padded so the data starts on a 64-byte boundary.
      const size_t header_len = static_cast<unsigned char>(bytes[8]) |
                                (size_t(static_cast<unsigned char>(bytes[9])) << 8);
      EXPECT_EQ((10 + header_len) % 64, 0u);
      EXPECT_EQ(bytes[10 + header_len - 1], '\n');
      auto back = parse_npy(bytes);
      ASSERT_TRUE(back.is_ok()) << dtype_name(dt) << ": " << back.status().message();
      EXPECT_EQ(*back, t) << dtype_name(dt);
    }
  }
}

TEST(Npy, BFloat16IsWrittenAsExactFloat32) {
  const float vals[] = {1.0f, -2.5f, 0.15625f, 3.0e38f};
  std::string data;
  for (float f : vals) {
    uint16_t h = f32_to_bf16(f);
    data.append(reinterpret_cast<const char*>(&h), 2);
  }
  auto t = Tensor::make(DType::BFloat16, {4}, data);
  ASSERT_TRUE(t.is_ok());
  auto back = parse_npy(to_npy(*t));
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back->dtype, DType::Float32);
  ASSERT_EQ(back->shape, std::vector<int64_t>{4});
  for (int i = 0; i < 4; ++i) {
    uint16_t h;
    std::memcpy(&h, data.data() + 2 * i, 2);
    EXPECT_EQ(back->as<float>()[i], bf16_to_f32(h));
  }
}

TEST(Npy, HandWrittenHeadersInNumpysVariants) {
  const std::string four_i32("\x01\x00\x00\x00\x02\x00\x00\x00\x03\x00\x00\x00\x04\x00\x00\x00",
                             16);
  // Double quotes, no trailing comma, '=' byte order, version 2.0.
  auto t = parse_npy(npy_with_header(
      "{\"descr\": \"=i4\", \"shape\": (2, 2), \"fortran_order\": False}", four_i32, 2));
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  EXPECT_EQ(t->dtype, DType::Int32);
  EXPECT_EQ(t->shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(t->as<int32_t>()[3], 4);
  // Version 3.0 and a trailing comma inside the shape.
  t = parse_npy(
      npy_with_header("{'descr': '<i4', 'fortran_order': False, 'shape': (4,), }", four_i32, 3));
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  EXPECT_EQ(t->shape, std::vector<int64_t>{4});
  // Big-endian data is swapped to little-endian.
  const std::string be("\x00\x00\x00\x01\x00\x00\x00\x02", 8);
  t = parse_npy(npy_with_header("{'descr': '>i4', 'fortran_order': False, 'shape': (2,), }", be));
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  EXPECT_EQ(t->as<int32_t>()[0], 1);
  EXPECT_EQ(t->as<int32_t>()[1], 2);
  // A big-endian byte type needs no swap.
  t = parse_npy(npy_with_header("{'descr': '>u1', 'fortran_order': False, 'shape': (2,), }",
                                std::string("\x07\x09", 2)));
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  EXPECT_EQ(t->data, std::string("\x07\x09", 2));
}

TEST(Npy, MalformedHeadersAreOneClearError) {
  const std::string data(8, '\0');
  const std::string ok_dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }";
  ASSERT_TRUE(parse_npy(npy_with_header(ok_dict, data)).is_ok());

  struct Case {
    std::string bytes;
    std::string expect;
  };
  const Case cases[] = {
      {"", "magic"},
      {"\x93NUMPX\x01\x00", "magic"},
      {npy_with_header(ok_dict, data).substr(0, 9), "header length"},
      {npy_with_header(ok_dict, data).substr(0, 40), "ends inside the header"},
      {std::string("\x93NUMPY\x04\x00\x10\x00", 10) + std::string(16, ' '), "version 4.0"},
      {std::string("\x93NUMPY\x02\x00\xff\xff\xff\x7f", 12), "at most"},
      {npy_with_header("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", data),
       "Fortran order"},
      {npy_with_header("{'descr': '|O', 'fortran_order': False, 'shape': (1,), }", data),
       "object arrays"},
      {npy_with_header("{'descr': '|O8', 'fortran_order': False, 'shape': (1,), }", data),
       "object arrays"},
      {npy_with_header("{'descr': '<c8', 'fortran_order': False, 'shape': (1,), }", data),
       "unsupported dtype"},
      {npy_with_header("{'descr': '<U3', 'fortran_order': False, 'shape': (1,), }", data),
       "unsupported dtype"},
      {npy_with_header("{'descr': '|f4', 'fortran_order': False, 'shape': (2,), }", data),
       "byte order"},
      {npy_with_header("{'descr': 'f4', 'fortran_order': False, 'shape': (2,), }", data),
       "unsupported dtype"},
      {npy_with_header("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }", data),
       "structured"},
      {npy_with_header("{'descr': '<f4', 'shape': (2,), }", data), "lacks"},
      {npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}", data),
       "unknown key"},
      {npy_with_header("{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}",
                       data),
       "repeats"},
      {npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2), }", data),
       "not a tuple"},
      {npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }", data),
       "non-negative"},
      {npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': [2], }", data),
       "not a tuple"},
      {npy_with_header("{'descr': '<f4', 'fortran_order': 0, 'shape': (2,), }", data),
       "True or False"},
      {npy_with_header("{'descr': '<f4, 'fortran_order': False, 'shape': (2,), }", data), "header"},
      {npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), } x", data),
       "after its dict"},
      {npy_with_header("[1, 2]", data), "not a dict"},
      {npy_with_header(
           "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", data),
       "too large"},
      {npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (65536, 65536), }", data),
       "larger than"},
      {npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (1,1,1,1,1,1,1,1,1,1,1,"
                       "1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1), }",
                       data),
       "dimensions"},
      // Size mismatches both ways.
      {npy_with_header("{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }", data),
       "describes 12 bytes of data, the file holds 8"},
      {npy_with_header(ok_dict, data + "x"), "the file holds 9"},
      {npy_with_header(ok_dict, data.substr(0, 7)), "the file holds 7"},
  };
  for (const auto& c : cases) {
    const std::string err = error_of(c.bytes);
    EXPECT_NE(err.find(c.expect), std::string::npos) << "expected '" << c.expect << "' in: " << err;
    EXPECT_EQ(err.find('\n'), std::string::npos) << err;
  }
  // A header without its closing newline.
  std::string no_newline = npy_with_header(ok_dict, data);
  const size_t hl = static_cast<unsigned char>(no_newline[8]);
  no_newline[10 + hl - 1] = ' ';
  EXPECT_NE(error_of(no_newline).find("newline"), std::string::npos);
}

TEST(Npy, FilesRoundTripAndMissingFilesAreErrors) {
  auto dir = test::temp_dir("npy_files");
  Tensor t = make_tensor(std::vector<float>{1, 2, 3, 4, 5, 6}, {2, 3});
  const std::string path = (dir / "a.npy").string();
  ASSERT_TRUE(write_npy_file(path, t).is_ok());
  auto back = read_npy_file(path);
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(*back, t);
  auto missing = read_npy_file((dir / "none.npy").string());
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.status().message().find("cannot open"), std::string::npos);
  EXPECT_FALSE(write_npy_file((dir / "no" / "such" / "dir.npy").string(), t).is_ok());
  // A bad file's error names it.
  std::ofstream((dir / "bad.npy").string()) << "hello";
  auto bad = read_npy_file((dir / "bad.npy").string());
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("bad.npy"), std::string::npos);
}

bool have_numpy() {
  return std::filesystem::exists("/usr/bin/python3") &&
         std::system("/usr/bin/python3 -c 'import numpy' >/dev/null 2>&1") == 0;
}

// Files numpy wrote (every dtype, big-endian, version 2.0, 0-d, empty) read
// here; and files written here read by numpy with the same values.
TEST(Npy, AgreesWithNumpy) {
  if (!have_numpy()) GTEST_SKIP() << "skipped: /usr/bin/python3 with numpy is not available";
  auto dir = test::temp_dir("npy_numpy");
  const std::string script = (dir / "gen.py").string();
  std::ofstream(script) << R"(import sys, numpy as np
d = sys.argv[1]
names = ['bool','int8','int16','int32','int64','uint8','uint16','uint32','uint64','float16','float32','float64']
for n in names:
    a = (np.arange(12) % (2 if n == 'bool' else 100)).astype(n).reshape(3, 4)
    np.save(f'{d}/{n}.npy', a)
np.save(f'{d}/be.npy', np.arange(6, dtype='>f8').reshape(2, 3))
np.save(f'{d}/scalar.npy', np.float32(2.5))
np.save(f'{d}/empty.npy', np.zeros((0, 3), np.int16))
with open(f'{d}/v2.npy', 'wb') as f:
    np.lib.format.write_array(f, np.arange(5, dtype=np.int64), version=(2, 0))
np.save(f'{d}/fortran.npy', np.asfortranarray(np.arange(6, dtype=np.float32).reshape(2, 3)))
np.save(f'{d}/object.npy', np.array([1, 'a'], dtype=object), allow_pickle=True)
)";
  ASSERT_EQ(std::system(("/usr/bin/python3 " + script + " " + dir.string()).c_str()), 0);
  const char* names[] = {"bool",   "int8",   "int16",  "int32",   "int64",   "uint8",
                         "uint16", "uint32", "uint64", "float16", "float32", "float64"};
  for (const char* n : names) {
    auto t = read_npy_file((dir / (std::string(n) + ".npy")).string());
    ASSERT_TRUE(t.is_ok()) << n << ": " << t.status().message();
    EXPECT_STREQ(dtype_name(t->dtype), n);
    EXPECT_EQ(t->shape, (std::vector<int64_t>{3, 4}));
    // Element 7 is 7 (bool: 1) in every dtype.
    const char* e = t->data.data() + 7 * dtype_size(t->dtype);
    if (t->dtype == DType::Float32) {
      EXPECT_EQ(*reinterpret_cast<const float*>(e), 7.0f);
    } else if (t->dtype == DType::Float16) {
      uint16_t h;
      std::memcpy(&h, e, 2);
      EXPECT_EQ(f16_to_f32(h), 7.0f);
    } else if (t->dtype == DType::Float64) {
      EXPECT_EQ(*reinterpret_cast<const double*>(e), 7.0);
    } else {
      EXPECT_EQ(static_cast<int>(*e), t->dtype == DType::Bool ? 1 : 7) << n;
    }
  }
  auto be = read_npy_file((dir / "be.npy").string());
  ASSERT_TRUE(be.is_ok()) << be.status().message();
  EXPECT_EQ(be->dtype, DType::Float64);
  EXPECT_EQ(be->as<double>()[5], 5.0);
  auto scalar = read_npy_file((dir / "scalar.npy").string());
  ASSERT_TRUE(scalar.is_ok()) << scalar.status().message();
  EXPECT_TRUE(scalar->shape.empty());
  EXPECT_EQ(scalar->as<float>()[0], 2.5f);
  auto empty = read_npy_file((dir / "empty.npy").string());
  ASSERT_TRUE(empty.is_ok()) << empty.status().message();
  EXPECT_EQ(empty->shape, (std::vector<int64_t>{0, 3}));
  EXPECT_TRUE(empty->data.empty());
  auto v2 = read_npy_file((dir / "v2.npy").string());
  ASSERT_TRUE(v2.is_ok()) << v2.status().message();
  EXPECT_EQ(v2->as<int64_t>()[4], 4);
  auto fortran = read_npy_file((dir / "fortran.npy").string());
  ASSERT_FALSE(fortran.is_ok());
  EXPECT_NE(fortran.status().message().find("Fortran"), std::string::npos);
  auto object = read_npy_file((dir / "object.npy").string());
  ASSERT_FALSE(object.is_ok());
  EXPECT_NE(object.status().message().find("object"), std::string::npos);

  // Ours, read by numpy: every dtype, and bfloat16 as float32.
  for (DType dt : kAllDTypes) {
    if (dt == DType::BFloat16) continue;
    ASSERT_TRUE(write_npy_file((dir / (std::string("ours_") + dtype_name(dt) + ".npy")).string(),
                               counting(dt, {2, 3}))
                    .is_ok());
  }
  const std::string check = (dir / "check.py").string();
  std::ofstream(check) << R"(import sys, numpy as np
d = sys.argv[1]
names = ['bool','int8','int16','int32','int64','uint8','uint16','uint32','uint64','float16','float32','float64']
for n in names:
    a = np.load(f'{d}/ours_{n}.npy')
    assert a.dtype == np.dtype(n), (n, a.dtype)
    assert a.shape == (2, 3), (n, a.shape)
    raw = bytes((i % 2) if n == 'bool' else ((i * 7 + 1) & 0xff) for i in range(6 * a.itemsize))
    assert a.astype(a.dtype.newbyteorder('<')).tobytes() == raw, n
print('ok')
)";
  EXPECT_EQ(std::system(("/usr/bin/python3 " + check + " " + dir.string()).c_str()), 0);
}

}  // namespace
}  // namespace cairn::values
