// matmul over weights in their stored type, against the float matmul of what
// it multiplies, for every type (kernels/kernels.h).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "core/quant.h"
#include "kernels/kernels.h"
#include "kernels/type_ops.h"

namespace cairn::kernels {
namespace {

std::vector<float> random_vec(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

struct Quantized {
  std::vector<unsigned char> bytes;
  WeightMatrix w;
  std::vector<float> dequant;  // what the stored weights really are
};

Quantized make_weights(TensorType t, int64_t rows, int64_t cols, uint32_t seed) {
  const TypeOps* ops = type_ops(t);
  const size_t rb = *row_bytes(t, cols);
  Quantized q;
  const auto f = random_vec(size_t(rows * cols), seed);
  q.bytes.resize(rb * rows);
  q.dequant.resize(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r) {
    ops->from_float(f.data() + r * cols, q.bytes.data() + r * rb, cols);
    ops->to_float(q.bytes.data() + r * rb, q.dequant.data() + r * cols, cols);
  }
  q.w = {t, q.bytes.data(), rows, cols, rb, nullptr};
  return q;
}

// Naive float matmul of the dequantized weights with the activations rounded
// through the type's vec_dot_type: the error left is that of the activation.
void check_matmul(TensorType t, int64_t n_tokens, double rel_tol) {
  const int64_t rows = 37, cols = 512;
  Quantized q = make_weights(t, rows, cols, 11);
  const auto x = random_vec(size_t(n_tokens * cols), 12);
  std::vector<float> out(size_t(n_tokens * rows));
  ThreadPool pool(3);
  matmul(q.w, x.data(), n_tokens, out.data(), pool);
  for (int64_t tk = 0; tk < n_tokens; ++tk) {
    for (int64_t r = 0; r < rows; ++r) {
      double ref = 0, mag = 0;
      for (int64_t c = 0; c < cols; ++c) {
        ref += double(q.dequant[r * cols + c]) * x[tk * cols + c];
        mag += std::fabs(double(q.dequant[r * cols + c]) * x[tk * cols + c]);
      }
      ASSERT_NEAR(out[tk * rows + r], ref, rel_tol * mag)
          << type_info(t).name << " token " << tk << " row " << r;
    }
  }
}

// One case per weight type: its tolerance against the naive float matmul, for
// one token and for three.
struct MatmulCase {
  const char* name;
  TensorType type;
  double rel_tol;
};

class MatmulTypes : public ::testing::TestWithParam<MatmulCase> {};

TEST_P(MatmulTypes, AgreesWithTheFloatMatmulOfWhatItMultiplies) {
  const MatmulCase& c = GetParam();
  check_matmul(c.type, 1, c.rel_tol);
  check_matmul(c.type, 3, c.rel_tol);
}

INSTANTIATE_TEST_SUITE_P(
    Types, MatmulTypes,
    ::testing::Values(
        // F32 is exact to rounding; F16's activations stay float (only
        // summation rounding is left); the others round their activations.
        MatmulCase{"F32", TensorType::F32, 1e-6}, MatmulCase{"F16", TensorType::F16, 1e-6},
        MatmulCase{"BF16", TensorType::BF16, 1e-2}, MatmulCase{"Q8_0", TensorType::Q8_0, 1e-2},
        MatmulCase{"Q4_0", TensorType::Q4_0, 1e-2}, MatmulCase{"Q4_K", TensorType::Q4_K, 1e-2},
        MatmulCase{"Q6_K", TensorType::Q6_K, 1e-2}),
    [](const ::testing::TestParamInfo<MatmulCase>& info) { return std::string(info.param.name); });

TEST(Matmul, TokensAreIndependentRowsOfTheBatch) {
  // 37 tokens: more than one token tile, and a ragged last one.
  const int64_t T = 37, rows = 5;
  Quantized q = make_weights(TensorType::Q4_K, rows, 256, 3);
  const auto x = random_vec(size_t(T * 256), 4);
  ThreadPool pool(2);
  std::vector<float> batch(static_cast<size_t>(T * rows)), single(static_cast<size_t>(rows));
  matmul(q.w, x.data(), T, batch.data(), pool);
  for (int64_t t = 0; t < T; ++t) {
    matmul(q.w, x.data() + t * 256, 1, single.data(), pool);
    for (int64_t r = 0; r < rows; ++r) ASSERT_EQ(batch[size_t(t * rows + r)], single[size_t(r)]) << t << " " << r;
  }
}

TEST(Matmul, RowStrideIsHonoured) {
  // Rows padded to 2x their size: the padding holds garbage that must be skipped.
  const int64_t rows = 4, cols = 64;
  std::vector<float> data(size_t(rows * cols * 2), 1e30f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) data[r * cols * 2 + c] = float(r + 1);
  WeightMatrix w{TensorType::F32, data.data(), rows, cols, size_t(cols * 2 * 4), nullptr};
  std::vector<float> x(cols, 1.0f), out(rows);
  ThreadPool pool(2);
  matmul(w, x.data(), 1, out.data(), pool);
  for (int64_t r = 0; r < rows; ++r) EXPECT_EQ(out[r], float((r + 1) * cols));
}

TEST(Matmul, UnsupportedTypeGivesNaN) {
  EXPECT_FALSE(matmul_supported(TensorType::IQ2_XS));
  EXPECT_FALSE(matmul_supported(TensorType::Q8_K));
  EXPECT_FALSE(matmul_supported(TensorType::Q8_1));
  EXPECT_TRUE(matmul_supported(TensorType::Q6_K));
  EXPECT_TRUE(matmul_supported(TensorType::Q5_K));
  std::vector<unsigned char> data(74);
  WeightMatrix w{TensorType::IQ2_XS, data.data(), 1, 256, 74, nullptr};
  std::vector<float> x(256, 1.0f), out(1, 0.0f);
  ThreadPool pool(1);
  matmul(w, x.data(), 1, out.data(), pool);
  EXPECT_TRUE(std::isnan(out[0]));
}

TEST(GetRow, DequantizesTheRequestedRow) {
  for (TensorType t : {TensorType::F32, TensorType::F16, TensorType::Q4_0, TensorType::Q6_K}) {
    Quantized q = make_weights(t, 3, 256, 7);
    std::vector<float> row(256);
    get_row(q.w, 2, row.data());
    for (int c = 0; c < 256; ++c) ASSERT_EQ(row[c], q.dequant[2 * 256 + c]) << type_info(t).name;
  }
}

}  // namespace
}  // namespace cairn::kernels
