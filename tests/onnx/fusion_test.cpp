// tests/onnx/fusion_test.cpp — the session's load-time fusions on the real
// operators: MatMul -> Add(constant bias) into the GEMM's epilogue and the
// exporters' five-node Erf GELU into one Gelu. Each fused graph must give the
// unfused numbers (a scalar reference here), and a graph whose intermediate
// is read elsewhere (so it must not be fused) must give them too.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "onnx/session.h"
#include "onnx_test_models.h"

namespace cairn::onnx {
namespace {

using test::floats;
using test::ModelBuilder;
using test::to_floats;

std::vector<float> random_floats(size_t n, float lo, float hi, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

std::vector<values::Tensor> run_model(const ModelBuilder& b, const values::Tensor& x) {
  auto s = Session::load_bytes(b.bytes(), "", SessionOptions{});
  EXPECT_TRUE(s.is_ok()) << s.status().message();
  if (!s) return {};
  const values::Tensor* in[] = {&x};
  auto out = (*s)->run(in);
  EXPECT_TRUE(out.is_ok()) << out.status().message();
  return out ? std::move(*out) : std::vector<values::Tensor>{};
}

// M×K · K×N (+ bias) in double, the reference for both MatMul tests.
std::vector<float> matmul_ref(const std::vector<float>& x, const std::vector<float>& w, const std::vector<float>& bias,
                              int m, int k, int n) {
  std::vector<float> y(size_t(m) * n);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double s = 0;
      for (int q = 0; q < k; ++q) s += double(x[size_t(i) * k + q]) * w[size_t(q) * n + j];
      y[size_t(i) * n + j] = float(s + (bias.empty() ? 0.0 : bias[size_t(j)]));
    }
  return y;
}

void expect_near_all(const std::vector<float>& got, const std::vector<float>& want, float tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * (1.0f + std::abs(want[i]))) << "at " << i;
}

// K = 700 spans two of sgemm's K blocks, so the bias meets a partial sum.
TEST(OnnxFusion, MatMulThenBiasAddGivesTheUnfusedNumbers) {
  const int m = 5, k = 700, n = 19;
  const auto x = random_floats(size_t(m) * k, -1, 1, 1), w = random_floats(size_t(k) * n, -1, 1, 2),
             bias = random_floats(n, -3, 3, 3);
  ModelBuilder b;
  b.input("x", {m, k}).output("z", {m, n});
  b.init("w", {k, n}, w);
  b.init("b", {n}, bias);
  b.node("MatMul", {"x", "w"}, {"y"}, "mm");
  b.node("Add", {"b", "y"}, {"z"}, "add");  // the bias first: either order fuses
  auto out = run_model(b, floats(x, {m, k}));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].shape, (std::vector<int64_t>{m, n}));
  expect_near_all(to_floats(out[0]), matmul_ref(x, w, bias, m, k, n), 1e-5f);
}

TEST(OnnxFusion, MatMulWhoseProductIsAlsoAnOutputIsNotFused) {
  const int m = 3, k = 8, n = 4;
  const auto x = random_floats(size_t(m) * k, -1, 1, 4), w = random_floats(size_t(k) * n, -1, 1, 5),
             bias = random_floats(n, -1, 1, 6);
  ModelBuilder b;
  b.input("x", {1, m, k}).output("z", {1, m, n}).output("y", {1, m, n});
  b.init("w", {k, n}, w);
  b.init("b", {n}, bias);
  b.node("MatMul", {"x", "w"}, {"y"}, "mm");
  b.node("Add", {"y", "b"}, {"z"}, "add");
  auto out = run_model(b, floats(x, {1, m, k}));
  ASSERT_EQ(out.size(), 2u);
  expect_near_all(to_floats(out[0]), matmul_ref(x, w, bias, m, k, n), 1e-5f);
  expect_near_all(to_floats(out[1]), matmul_ref(x, w, {}, m, k, n), 1e-5f);
}

// x·0.5·(1 + erf(x/√2)) as exporters write it, with Div or Mul by 1/√2.
void gelu_chain(ModelBuilder& b, bool by_div, bool erf_also_output) {
  const int n = 3 * 37;
  b.input("x", {3, 37}).output("g", {3, 37});
  if (erf_also_output) b.output("e", {3, 37});
  b.init("half", {}, {0.5f});
  b.init("one", {}, {1.0f});
  if (by_div) {
    b.init("sqrt2", {}, {1.4142135f});
    b.node("Div", {"x", "sqrt2"}, {"t"}, "div");
  } else {
    b.init("isqrt2", {}, {0.70710677f});
    b.node("Mul", {"isqrt2", "x"}, {"t"}, "scale");
  }
  b.node("Erf", {"t"}, {"e"}, "erf");
  b.node("Add", {"one", "e"}, {"e1"}, "add1");
  b.node("Mul", {"e1", "x"}, {"m"}, "mulx");
  b.node("Mul", {"m", "half"}, {"g"}, "half_mul");
  (void)n;
}

void check_gelu(bool by_div, bool erf_also_output) {
  const auto x = random_floats(3 * 37, -5, 5, 7);
  ModelBuilder b;
  gelu_chain(b, by_div, erf_also_output);
  auto out = run_model(b, floats(x, {3, 37}));
  ASSERT_EQ(out.size(), erf_also_output ? 2u : 1u);
  std::vector<float> want(x.size()), want_e(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    want_e[i] = float(std::erf(double(x[i]) / std::sqrt(2.0)));
    want[i] = float(0.5 * double(x[i]) * (1.0 + std::erf(double(x[i]) / std::sqrt(2.0))));
  }
  expect_near_all(to_floats(out[0]), want, 1e-5f);
  if (erf_also_output) expect_near_all(to_floats(out[1]), want_e, 1e-5f);
}

TEST(OnnxFusion, ErfGeluChainGivesGelu) {
  check_gelu(true, false);
  check_gelu(false, false);
}

TEST(OnnxFusion, ErfGeluChainWithAnIntermediateReadElsewhereIsNotFused) { check_gelu(true, true); }

}  // namespace
}  // namespace cairn::onnx
