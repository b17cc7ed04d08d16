// tests/onnx/fusion_test.cpp — the session's load-time fusions on the real
// operators: MatMul -> Add(constant bias) into the GEMM's epilogue, the
// exporters' five-node Erf GELU into one Gelu, and an activation after a
// MatMul, Gemm or Conv into that GEMM. Each fused graph must give the
// unfused numbers (a scalar reference here), and a graph whose intermediate
// is read elsewhere (so it must not be fused) must give them too.
#include <gtest/gtest.h>

#include <cmath>

#include "onnx/session.h"
#include "onnx_test_models.h"

namespace cairn::onnx {
namespace {

using test::floats;
using test::ModelBuilder;
using test::random_floats;
using test::to_floats;

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

// ---- an activation fused into the GEMM before it

struct Activation {
  const char* op;
  const char* approximate;  // Gelu's attribute, or null
  double (*ref)(double);
};

const Activation kActivations[] = {
    {"Relu", nullptr, [](double v) { return v > 0 ? v : 0.0; }},
    {"Sigmoid", nullptr, [](double v) { return 1.0 / (1.0 + std::exp(-v)); }},
    {"Tanh", nullptr, [](double v) { return std::tanh(v); }},
    {"Gelu", "none", [](double v) { return 0.5 * v * (1.0 + std::erf(v / std::sqrt(2.0))); }},
    {"Gelu", "tanh",
     [](double v) { return 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v))); }},
};

std::unique_ptr<Session> load(const ModelBuilder& b) {
  auto s = Session::load_bytes(b.bytes(), "", SessionOptions{});
  EXPECT_TRUE(s.is_ok()) << s.status().message();
  return s ? std::move(*s) : nullptr;
}

// `producer` adds nodes making "y" from "x" (and its initializers). Model
// plain ends at y; model fused adds act(y) -> "z". The fused model must lose
// the activation node (fused into the producer) and give act(plain's y).
template <class Producer>
void check_fused_activation(const Producer& producer, std::vector<int64_t> x_dims, std::vector<int64_t> y_dims,
                            const std::vector<float>& x) {
  for (const Activation& act : kActivations) {
    SCOPED_TRACE(std::string(act.op) + (act.approximate ? std::string(" ") + act.approximate : ""));
    ModelBuilder plain(20), fused(20);
    plain.input("x", x_dims).output("y", y_dims);
    fused.input("x", x_dims).output("z", y_dims);
    producer(plain);
    producer(fused);
    auto& n = fused.node(act.op, {"y"}, {"z"}, "act");
    if (act.approximate) {
      auto* a = n.add_attribute();
      a->set_name("approximate");
      a->set_type(::onnx::AttributeProto::STRING);
      a->set_s(act.approximate);
    }
    auto sp = load(plain), sf = load(fused);
    ASSERT_TRUE(sp && sf);
    EXPECT_EQ(sf->node_count(), sp->node_count()) << "the activation was not fused";
    const values::Tensor xt = floats(x, x_dims);
    const values::Tensor* in[] = {&xt};
    auto yp = sp->run(in), yf = sf->run(in);
    ASSERT_TRUE(yp.is_ok()) << yp.status().message();
    ASSERT_TRUE(yf.is_ok()) << yf.status().message();
    EXPECT_EQ((*yf)[0].shape, y_dims);
    std::vector<float> want = to_floats((*yp)[0]);
    for (float& v : want) v = float(act.ref(double(v)));
    expect_near_all(to_floats((*yf)[0]), want, 2e-6f);
  }
}

// K = 700: two K blocks, so the activation must wait for the last one.
TEST(OnnxFusion, ActivationAfterMatMulWithBiasIsFused) {
  const int m = 13, k = 700, n = 37;
  const auto w = random_floats(size_t(k) * n, -0.1f, 0.1f, 11), bias = random_floats(n, -1, 1, 12);
  check_fused_activation(
      [&](ModelBuilder& b) {
        b.init("w", {k, n}, w);
        b.init("b", {n}, bias);
        b.node("MatMul", {"x", "w"}, {"p"}, "mm");
        b.node("Add", {"p", "b"}, {"y"}, "bias");
      },
      {m, k}, {m, n}, random_floats(size_t(m) * k, -1, 1, 13));
}

// A B per batch: packed at run time, one GEMM per batch.
TEST(OnnxFusion, ActivationAfterBatchedMatMulIsFused) {
  const auto w = random_floats(3 * 9 * 21, -1, 1, 14);
  check_fused_activation(
      [&](ModelBuilder& b) {
        b.init("w", {3, 9, 21}, w);
        b.node("MatMul", {"x", "w"}, {"y"}, "mm");
      },
      {3, 5, 9}, {3, 5, 21}, random_floats(3 * 5 * 9, -1, 1, 15));
}

TEST(OnnxFusion, ActivationAfterGemmIsFused) {
  const auto w = random_floats(19 * 40, -0.3f, 0.3f, 16), c = random_floats(19, -1, 1, 17);
  check_fused_activation(
      [&](ModelBuilder& b) {
        b.init("w", {19, 40}, w);
        b.init("c", {19}, c);
        auto& g = b.node("Gemm", {"x", "w", "c"}, {"y"}, "gemm");
        auto* a = g.add_attribute();
        a->set_name("transB");
        a->set_type(::onnx::AttributeProto::INT);
        a->set_i(1);
      },
      {6, 40}, {6, 19}, random_floats(6 * 40, -1, 1, 18));
}

// group 1 (a GEMM over the im2col) and depthwise (the direct loop).
TEST(OnnxFusion, ActivationAfterConvIsFused) {
  for (int64_t group : {1, 4}) {
    SCOPED_TRACE("group " + std::to_string(group));
    const int64_t cin_per_group = 4 / group;
    const auto w = random_floats(size_t(8 * cin_per_group * 9), -0.5f, 0.5f, 19), bias = random_floats(8, -1, 1, 20);
    check_fused_activation(
        [&](ModelBuilder& b) {
          b.init("w", {8, cin_per_group, 3, 3}, w);
          b.init("b", {8}, bias);
          auto& c = b.node("Conv", {"x", "w", "b"}, {"y"}, "conv");
          auto* pads = c.add_attribute();
          pads->set_name("pads");
          pads->set_type(::onnx::AttributeProto::INTS);
          for (int i = 0; i < 4; ++i) pads->add_ints(1);
          auto* g = c.add_attribute();
          g->set_name("group");
          g->set_type(::onnx::AttributeProto::INT);
          g->set_i(group);
        },
        {2, 4, 7, 6}, {2, 8, 7, 6}, random_floats(2 * 4 * 7 * 6, -1, 1, 21));
  }
}

// MatMul -> Add bias -> the five-node Erf GELU: all of it one MatMul.
TEST(OnnxFusion, ErfGeluChainAfterMatMulFusesIntoIt) {
  const int m = 4, k = 30, n = 37;
  const auto x = random_floats(size_t(m) * k, -1, 1, 22), w = random_floats(size_t(k) * n, -1, 1, 23);
  ModelBuilder b;
  b.init("w", {k, n}, w);
  b.input("a", {m, k});
  b.node("MatMul", {"a", "w"}, {"x"}, "mm");
  gelu_chain(b, true, false);
  // gelu_chain declares input x [3, 37]: drop it, x is the product now.
  b.g().mutable_input()->DeleteSubrange(1, 1);
  b.g().mutable_output(0)->mutable_type()->mutable_tensor_type()->mutable_shape()->mutable_dim(0)->set_dim_value(m);
  auto s = load(b);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->node_count(), 1u);
  const values::Tensor xt = floats(x, {m, k});
  const values::Tensor* in[] = {&xt};
  auto out = s->run(in);
  ASSERT_TRUE(out.is_ok()) << out.status().message();
  std::vector<float> want = matmul_ref(x, w, {}, m, k, n);
  for (float& v : want) v = float(0.5 * double(v) * (1.0 + std::erf(double(v) / std::sqrt(2.0))));
  expect_near_all(to_floats((*out)[0]), want, 1e-5f);
}

TEST(OnnxFusion, ActivationWhoseInputIsAlsoAnOutputIsNotFused) {
  const int m = 3, k = 8, n = 5;
  const auto x = random_floats(size_t(m) * k, -1, 1, 24), w = random_floats(size_t(k) * n, -1, 1, 25);
  ModelBuilder b;
  b.input("x", {m, k}).output("z", {m, n}).output("y", {m, n});
  b.init("w", {k, n}, w);
  b.node("MatMul", {"x", "w"}, {"y"}, "mm");
  b.node("Relu", {"y"}, {"z"}, "relu");
  auto s = load(b);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->node_count(), 2u);
  const values::Tensor xt = floats(x, {m, k});
  const values::Tensor* in[] = {&xt};
  auto out = s->run(in);
  ASSERT_TRUE(out.is_ok()) << out.status().message();
  const std::vector<float> y = matmul_ref(x, w, {}, m, k, n);
  std::vector<float> z = y;
  for (float& v : z) v = std::max(v, 0.0f);
  expect_near_all(to_floats((*out)[0]), z, 1e-5f);
  expect_near_all(to_floats((*out)[1]), y, 1e-5f);
}

}  // namespace
}  // namespace cairn::onnx
