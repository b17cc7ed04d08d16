// The packed 16-bit float kernels. BF16 (AVX-512 BF16, or AVX2 without it)
// against the scalar BF16 dot product: equal up to float summation rounding;
// the bits of the layout's chain order on either path; the same bits for a
// token alone or anywhere in a batch. F16: the bits of the reference's
// tinyBLAS order, which the type table gives.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/cpu_features.h"
#include "core/half.h"
#include "core/quant.h"
#include "kernels/float_order.h"
#include "kernels/kernels.h"
#include "kernels/packed.h"
#include "test_util.h"

namespace cairn::kernels {
namespace {

using test::random_normal;

struct Bf16Matrix {
  std::vector<uint16_t> data;
  WeightMatrix w;
  Bf16Matrix(int64_t rows, int64_t cols, uint32_t seed) {
    const auto f = random_normal((size_t)(rows * cols), seed, 1.0f);
    data.resize(f.size());
    for (size_t i = 0; i < f.size(); ++i) data[i] = f32_to_bf16(f[i]);
    w = {TensorType::BF16, data.data(), rows, cols, (size_t)cols * 2, nullptr};
    prepare_weight(w);
  }
};

class PackedBf16 : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!isa_enabled(Isa::Avx2))
      GTEST_SKIP() << "packed BF16 needs AVX2 (absent here, or capped by CAIRN_ISA)";
  }
};

// Every output within float summation rounding of the scalar reference (which
// sums exact products in double), on short groups, widths of one and many
// blocks, and token counts that leave ragged tiles and token chunks.
TEST_F(PackedBf16, AgreesWithTheScalarDotToSummationRounding) {
  const TypeOps* ops = scalar_type_ops(TensorType::BF16);
  ThreadPool pool(2), three(3);
  struct Shape {
    int64_t rows, cols, tokens;
  };
  std::vector<Shape> shapes;
  for (int64_t rows : {1, 15, 16, 17, 40})
    for (int64_t cols : {32, 96, 2048})
      for (int64_t tokens : {1, 2, 5, 6, 7, 13}) shapes.push_back({rows, cols, tokens});
  shapes.push_back({100, 2048, 64});
  shapes.push_back({33, 5632, 70});
  for (const Shape& s : shapes) {
    Bf16Matrix m(s.rows, s.cols, 7 + (uint32_t)s.rows);
    ASSERT_NE(m.w.packed, nullptr);
    auto x = random_normal((size_t)(s.tokens * s.cols), 99 + (uint32_t)s.tokens, 3.0f);
    if (s.tokens > 1) std::fill(x.begin() + s.cols, x.begin() + 2 * s.cols, 0.0f);
    std::vector<float> got((size_t)(s.tokens * s.rows));
    matmul(m.w, x.data(), s.tokens, got.data(), s.rows % 2 ? three : pool);
    std::vector<uint16_t> act((size_t)s.cols);
    for (int64_t t = 0; t < s.tokens; ++t) {
      ops->from_float(x.data() + t * s.cols, act.data(), s.cols);
      for (int64_t r = 0; r < s.rows; ++r) {
        const uint16_t* row = m.data.data() + r * s.cols;
        double mag = 0;
        for (int64_t i = 0; i < s.cols; ++i)
          mag += std::fabs((double)bf16_to_f32(row[i]) * bf16_to_f32(act[(size_t)i]));
        const float want = ops->vec_dot(s.cols, row, act.data());
        // A float sum of n terms: within ~n * 2^-24 of their magnitude at worst.
        ASSERT_NEAR(got[(size_t)(t * s.rows + r)], want, 1e-6 * mag + 1e-30)
            << "rows " << s.rows << " cols " << s.cols << " tokens " << s.tokens << ": token " << t
            << " row " << r;
      }
    }
  }
}

// The packed kernels' float steps, one (row, token) at a time: four chains by
// column pair mod 4, each pair adding its odd product, then its even one
// (vdpbf16ps's order; exact products, so each add is an fma), then
// (c0 + c1) + (c2 + c3). Both the vdpbf16ps tiles and the AVX2 kernel must
// give exactly this (ctest runs the suite under CAIRN_ISA=avx2 too).
float chain_order_dot(const uint16_t* w, const uint16_t* a, int64_t cols) {
  float chain[4] = {};
  for (int64_t c = 0; c < cols / 2; ++c) {
    float& acc = chain[c % 4];
    acc = std::fma(bf16_to_f32(w[2 * c + 1]), bf16_to_f32(a[2 * c + 1]), acc);
    acc = std::fma(bf16_to_f32(w[2 * c]), bf16_to_f32(a[2 * c]), acc);
  }
  return (chain[0] + chain[1]) + (chain[2] + chain[3]);
}

TEST_F(PackedBf16, GivesTheChainOrderBits) {
  const TypeOps* ops = scalar_type_ops(TensorType::BF16);
  ThreadPool pool(2);
  for (int64_t rows : {5, 16, 37})
    for (int64_t cols : {32, 160, 2048})
      for (int64_t tokens : {1, 3, 70}) {
        Bf16Matrix m(rows, cols, 11 + (uint32_t)cols);
        ASSERT_NE(m.w.packed, nullptr);
        const auto x = random_normal((size_t)(tokens * cols), 5 + (uint32_t)tokens, 2.0f);
        std::vector<float> got((size_t)(tokens * rows));
        matmul(m.w, x.data(), tokens, got.data(), pool);
        std::vector<uint16_t> act((size_t)cols);
        for (int64_t t = 0; t < tokens; ++t) {
          ops->from_float(x.data() + t * cols, act.data(), cols);
          for (int64_t r = 0; r < rows; ++r) {
            const float want = chain_order_dot(m.data.data() + r * cols, act.data(), cols);
            const float have = got[(size_t)(t * rows + r)];
            ASSERT_EQ(0, std::memcmp(&want, &have, 4))
                << packed_bf16_tile_path() << ": rows " << rows << " cols " << cols << " tokens "
                << tokens << ": token " << t << " row " << r << " want " << want << " got " << have;
          }
        }
      }
}

TEST_F(PackedBf16, TokensGiveTheSameBitsAloneOrInABatch) {
  const int64_t rows = 37, cols = 640, tokens = 71;
  Bf16Matrix m(rows, cols, 3);
  const auto x = random_normal((size_t)(tokens * cols), 4, 1.0f);
  ThreadPool pool(2);
  std::vector<float> batch((size_t)(tokens * rows)), single((size_t)rows);
  matmul(m.w, x.data(), tokens, batch.data(), pool);
  for (int64_t t = 0; t < tokens; ++t) {
    matmul(m.w, x.data() + t * cols, 1, single.data(), pool);
    ASSERT_EQ(0, std::memcmp(single.data(), batch.data() + t * rows, rows * 4)) << "token " << t;
  }
}

// The activations are rounded to BF16 exactly as the scalar from_float does:
// with one weight of 1 in each row, the output is that activation's bf16 value
// (ties to even both ways, carries into the exponent, negative values).
TEST_F(PackedBf16, RoundsActivationsAsTheScalarConversion) {
  const int64_t rows = 32, cols = 64;
  std::vector<uint16_t> data((size_t)(rows * cols), 0);
  for (int64_t r = 0; r < rows; ++r) data[(size_t)(r * cols + r)] = f32_to_bf16(1.0f);
  WeightMatrix w{TensorType::BF16, data.data(), rows, cols, (size_t)cols * 2, nullptr};
  prepare_weight(w);
  ASSERT_NE(w.packed, nullptr);
  std::vector<float> x((size_t)cols);
  const uint32_t patterns[] = {0x3f808000u, 0x3f818000u, 0x3f80ffffu, 0x3f807fffu,
                               0xbf808000u, 0x3fffffffu, 0xc0490fdbu, 0x42f6e979u};
  for (int64_t i = 0; i < cols; ++i) {
    // The bf16 part varies with i, so ties meet odd and even last bits.
    const uint32_t bits = patterns[(size_t)i % std::size(patterns)] + ((uint32_t)(i / 8) << 16);
    std::memcpy(&x[(size_t)i], &bits, 4);
  }
  ThreadPool pool(1);
  std::vector<float> out((size_t)rows);
  matmul(w, x.data(), 1, out.data(), pool);
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_EQ(out[(size_t)r], bf16_to_f32(f32_to_bf16(x[(size_t)r]))) << r;
  }
}

// CAIRN_AMX=emulate: BF16 batches take the AMX-BF16 tile kernel with its tile
// operations in plain C++ (so the tests above check it), which must agree
// with the vdpbf16ps tiles bit for bit before it is used.
TEST_F(PackedBf16, TilePathFollowsCairnAmx) {
  const std::string path = packed_bf16_tile_path();
  const char* env = std::getenv("CAIRN_AMX");
  const std::string want = env ? env : "";
  if (!isa_enabled(Isa::Avx512Vnni) || !bf16_enabled()) {
    EXPECT_EQ(path, "avx2");
  } else if (want == "emulate") {
    EXPECT_EQ(path, "amx-emulated");
  } else if (want == "off" || !isa_enabled(Isa::Amx) || !cpu_features().amx_bf16) {
    EXPECT_EQ(path, "avx512bf16");
  } else {
    EXPECT_TRUE(path == "amx" || path == "avx512bf16") << path;
  }
}

// Every output of the packed F16 matmul is order::scalar::tiny_f16's bits, for
// one token (16-row tiles) and many (4-row tiles, ragged token tiles), on
// short groups and one- to many-block rows.
TEST(PackedF16, GivesTheTinyBlasOrderBits) {
  if (!isa_enabled(Isa::Avx2))
    GTEST_SKIP() << "packed F16 needs AVX2 (absent here, or capped by CAIRN_ISA)";
  ThreadPool pool(2), three(3);
  struct Shape {
    int64_t rows, cols, tokens;
  };
  std::vector<Shape> shapes;
  for (int64_t rows : {1, 3, 15, 16, 17, 40})
    for (int64_t cols : {32, 96, 2048})
      for (int64_t tokens : {1, 2, 5, 6, 7, 13}) shapes.push_back({rows, cols, tokens});
  shapes.push_back({100, 2048, 64});
  shapes.push_back({33, 5632, 70});
  for (const Shape& s : shapes) {
    const auto f = random_normal((size_t)(s.rows * s.cols), 5 + (uint32_t)s.rows, 1.0f);
    std::vector<uint16_t> data(f.size());
    for (size_t i = 0; i < f.size(); ++i) data[i] = f32_to_f16(f[i]);
    WeightMatrix w{TensorType::F16, data.data(), s.rows, s.cols, (size_t)s.cols * 2, nullptr};
    prepare_weight(w);
    ASSERT_NE(w.packed, nullptr);
    const auto x = random_normal((size_t)(s.tokens * s.cols), 77 + (uint32_t)s.tokens, 3.0f);
    std::vector<float> got((size_t)(s.tokens * s.rows));
    matmul(w, x.data(), s.tokens, got.data(), s.rows % 2 ? three : pool);
    for (int64_t t = 0; t < s.tokens; ++t) {
      for (int64_t r = 0; r < s.rows; ++r) {
        const float want =
            order::scalar::tiny_f16(data.data() + r * s.cols, x.data() + t * s.cols, s.cols);
        const float have = got[(size_t)(t * s.rows + r)];
        ASSERT_EQ(0, std::memcmp(&want, &have, 4))
            << "rows " << s.rows << " cols " << s.cols << " tokens " << s.tokens << ": token " << t
            << " row " << r << " want " << want << " got " << have;
      }
    }
  }
}

TEST(PackedBf16Choice, PackedWhereAvx2Runs) {
  std::vector<uint16_t> data(64 * 4);
  WeightMatrix w{TensorType::BF16, data.data(), 4, 64, 128, nullptr};
  EXPECT_EQ(pack_matrix(w) != nullptr, isa_enabled(Isa::Avx2));
  WeightMatrix ragged{TensorType::BF16, data.data(), 4, 48, 96, nullptr};  // not whole blocks
  EXPECT_EQ(pack_matrix(ragged), nullptr);
}

}  // namespace
}  // namespace cairn::kernels
