// tests/onnx/ops_math_test.cpp — the elementwise, activation and
// normalisation operators (onnx/ops_math*.cpp) against scalar references
// computed here in double with std:: functions; the float loops' Scalar and
// Avx2 paths held to the stated error bounds; every refused shape, dtype and
// attribute refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "onnx/op.h"
#include "onnx/ops_math_kernels.h"
#include "op_harness.h"

namespace cairn::onnx {
namespace {

using mathk::Path;

// ---- helpers ----------------------------------------------------------------------

struct Buf {
  DType dtype = DType::Float32;
  Shape shape;
  std::vector<uint64_t> store;  // 8-byte aligned bytes
  TensorView view;

  Buf() = default;
  Buf(DType t, Shape s) : dtype(t), shape(std::move(s)) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    store.assign((size_t(n) * values::dtype_size(t) + 7) / 8 + 1, 0);
    view = TensorView{dtype, shape, store.data()};
  }
  Buf(const Buf& o) : Buf(o.dtype, o.shape) {
    store = o.store;
    view.data = store.data();
  }
  Buf& operator=(const Buf& o) {
    dtype = o.dtype;
    shape = o.shape;
    store = o.store;
    view = TensorView{dtype, shape, store.data()};
    return *this;
  }
  int64_t count() const { return view.count(); }
  template <typename T>
  T* as() {
    return reinterpret_cast<T*>(store.data());
  }
  template <typename T>
  const T* as() const {
    return reinterpret_cast<const T*>(store.data());
  }
};

Buf f32(Shape s, const std::vector<float>& v) {
  Buf b(DType::Float32, std::move(s));
  EXPECT_EQ(size_t(b.count()), v.size());
  std::memcpy(b.as<float>(), v.data(), v.size() * sizeof(float));
  return b;
}
template <typename T>
Buf ints(DType t, Shape s, const std::vector<T>& v) {
  Buf b(t, std::move(s));
  EXPECT_EQ(size_t(b.count()), v.size());
  std::memcpy(b.as<T>(), v.data(), v.size() * sizeof(T));
  return b;
}
Buf i64(Shape s, const std::vector<int64_t>& v) { return ints(DType::Int64, std::move(s), v); }
Buf i32(Shape s, const std::vector<int32_t>& v) { return ints(DType::Int32, std::move(s), v); }
Buf boolean(Shape s, const std::vector<uint8_t>& v) { return ints(DType::Bool, std::move(s), v); }

Buf random_f32(Shape s, uint32_t seed, float lo = -3.0f, float hi = 3.0f) {
  Buf b(DType::Float32, std::move(s));
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  for (int64_t i = 0; i < b.count(); ++i) b.as<float>()[i] = d(rng);
  return b;
}

using harness::attr_float;
using harness::attr_int;
using harness::attr_string;
using harness::make_node;

// The harness's run, on Bufs (null: an omitted input).
Result<std::vector<Buf>> run_node(const Node& node, const std::vector<const Buf*>& inputs) {
  std::vector<harness::OpInput> in(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) in[i].view = inputs[i] ? &inputs[i]->view : nullptr;
  CAIRN_ASSIGN_OR_RETURN(std::vector<values::Tensor> outs, harness::run_op_node(node, in));
  std::vector<Buf> results;
  for (const auto& o : outs) {
    results.emplace_back(o.dtype, o.shape);
    if (!o.data.empty()) std::memcpy(results.back().store.data(), o.data.data(), o.data.size());
  }
  return results;
}

Buf run1(const Node& node, const std::vector<const Buf*>& inputs) {
  auto r = run_node(node, inputs);
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  if (!r.is_ok()) return Buf();
  return std::move(r).value()[0];
}

std::string error_of(const Node& node, const std::vector<const Buf*>& inputs) {
  auto r = run_node(node, inputs);
  return r.is_ok() ? std::string("(no error)") : r.status().message();
}

// numpy broadcasting by index arithmetic: the element of `in` that output
// index `o` (of shape `out`) reads.
int64_t bcast_index(const Shape& out, const Shape& in, int64_t o) {
  int64_t idx = 0, stride = 1;
  for (int i = int(out.size()) - 1; i >= 0; --i) {
    const int64_t c = o % out[size_t(i)];
    o /= out[size_t(i)];
    const int j = i - int(out.size() - in.size());
    if (j < 0) continue;
    if (in[size_t(j)] != 1) idx += c * stride;
    stride *= in[size_t(j)];
  }
  return idx;
}

double ref_binary(const std::string& op, double a, double b) {
  if (op == "Add") return a + b;
  if (op == "Sub") return a - b;
  if (op == "Mul") return a * b;
  if (op == "Div") return a / b;
  return std::pow(a, b);
}

// |got - want| / |want| (absolute below `floor`).
double rel_err(double got, double want, double floor = 1e-30) {
  if (std::isnan(want)) return std::isnan(got) ? 0.0 : INFINITY;
  if (std::isinf(want)) return got == want ? 0.0 : INFINITY;
  return std::fabs(got - want) / std::max(std::fabs(want), floor);
}

// ---- binary float ops with broadcasting -----------------------------------------------

void check_binary(const std::string& op, const Shape& sa, const Shape& sb, uint32_t seed) {
  SCOPED_TRACE(op + " " + shape_string(sa) + " with " + shape_string(sb));
  Buf a = random_f32(sa, seed, op == "Pow" ? 0.1f : -3.0f, 3.0f);
  Buf b = random_f32(sb, seed + 1, op == "Pow" ? -2.0f : 0.5f, 3.0f);
  Buf out = run1(make_node(op, 2), {&a, &b});
  auto shape = broadcast_shapes(sa, sb);
  ASSERT_TRUE(shape.is_ok());
  ASSERT_EQ(out.shape, *shape);
  double worst = 0;
  for (int64_t o = 0; o < out.count(); ++o) {
    const float x = a.as<float>()[bcast_index(out.shape, sa, o)];
    const float y = b.as<float>()[bcast_index(out.shape, sb, o)];
    // Add..Div are one IEEE rounding of the exact result: float arithmetic
    // must match exactly; Pow within 2 ulp of the double result.
    if (op == "Pow") {
      worst = std::max(worst, rel_err(out.as<float>()[o], ref_binary(op, x, y)));
    } else {
      ASSERT_EQ(out.as<float>()[o], float(ref_binary(op, x, y))) << "at " << o;
    }
  }
  EXPECT_LE(worst, 2.4e-7);
}

TEST(OnnxMathBinary, BroadcastShapesAgainstIndexReference) {
  const std::vector<std::pair<Shape, Shape>> cases = {
      {{2, 3}, {2, 3}},           // same shape
      {{2, 3}, {}},               // scalar
      {{}, {2, 3}},               // scalar first
      {{1}, {5, 7}},              // one-element
      {{4, 33}, {33}},            // row: a [.., H] bias
      {{4, 33}, {4, 1}},          // column
      {{4, 1}, {1, 33}},          // outer product
      {{2, 3, 4, 5}, {5}},        // 4-D vs 1-D
      {{2, 3, 4, 5}, {3, 1, 1}},  // per channel
      {{2, 1, 4, 1}, {3, 1, 5}},  // both broadcast
      {{1, 1, 1}, {1}},           // all ones
      {{3, 0, 2}, {2}},           // empty
      {{2, 70000}, {70000}},      // long rows split over the pool
      {{300, 257}, {300, 257}},   // many rows over the pool
      {{70001}, {1}},             // long scalar broadcast
  };
  uint32_t seed = 1;
  for (const char* op : {"Add", "Sub", "Mul", "Div", "Pow"})
    for (const auto& [sa, sb] : cases) check_binary(op, sa, sb, seed++);
}

// Random shapes of rank up to 5 (dims 1 to 4, some dropped or set to 1 on
// one side): every merge of plan() against the index reference, for a
// binary op and for Where's three inputs.
TEST(OnnxMathBinary, RandomBroadcastShapes) {
  std::mt19937 rng(42);
  auto rnd = [&](int n) { return int(rng() % uint32_t(n)); };
  for (int iter = 0; iter < 300; ++iter) {
    const int rank = rnd(6);
    Shape full(static_cast<size_t>(rank));
    for (auto& d : full) d = 1 + rnd(4);
    auto variant = [&]() {
      Shape s = full;
      for (auto& d : s)
        if (rnd(3) == 0) d = 1;
      const int drop = rnd(int(s.size()) + 1);
      return Shape(s.begin() + drop, s.end());
    };
    const Shape sa = variant(), sb = variant(), sc = variant();
    SCOPED_TRACE(shape_string(sa) + " " + shape_string(sb) + " " + shape_string(sc));
    Buf a = random_f32(sa, uint32_t(iter)), b = random_f32(sb, uint32_t(iter) + 1000);
    Buf sub = run1(make_node("Sub", 2), {&a, &b});
    for (int64_t o = 0; o < sub.count(); ++o)
      ASSERT_EQ(sub.as<float>()[o], a.as<float>()[bcast_index(sub.shape, sa, o)] -
                                        b.as<float>()[bcast_index(sub.shape, sb, o)]);
    Buf c(DType::Bool, sc);
    for (int64_t i = 0; i < c.count(); ++i) c.as<uint8_t>()[i] = uint8_t(rng() & 1);
    Buf w = run1(make_node("Where", 3), {&c, &a, &b});
    for (int64_t o = 0; o < w.count(); ++o) {
      const bool cond = c.as<uint8_t>()[bcast_index(w.shape, sc, o)];
      ASSERT_EQ(w.as<float>()[o], cond ? a.as<float>()[bcast_index(w.shape, sa, o)]
                                       : b.as<float>()[bcast_index(w.shape, sb, o)]);
    }
  }
}

TEST(OnnxMathBinary, PowSquareIsExact) {
  Buf a = random_f32({1000}, 7);
  Buf two = f32({}, {2.0f});
  Buf out = run1(make_node("Pow", 2), {&a, &two});
  for (int64_t i = 0; i < a.count(); ++i)
    ASSERT_EQ(out.as<float>()[i], a.as<float>()[i] * a.as<float>()[i]);
  Buf half = f32({1}, {0.5f});
  out = run1(make_node("Pow", 2), {&a, &half});
  EXPECT_TRUE(std::isnan(out.as<float>()[0]) == (a.as<float>()[0] < 0));
}

TEST(OnnxMathBinary, RefusesMismatchedShapesAndDtypes) {
  Buf a = random_f32({2, 3}, 1), b = random_f32({4}, 2), c = random_f32({3, 2}, 3);
  EXPECT_NE(error_of(make_node("Add", 2), {&a, &b}).find("do not broadcast"), std::string::npos);
  EXPECT_NE(error_of(make_node("Mul", 2), {&a, &c}).find("do not broadcast"), std::string::npos);
  Buf n = i64({3}, {1, 2, 3});
  EXPECT_NE(error_of(make_node("Add", 2), {&a, &n}).find("different dtypes"), std::string::npos);
  Buf m = i64({3}, {1, 2, 3});
  EXPECT_NE(error_of(make_node("Pow", 2), {&n, &m}).find("Pow takes float32"), std::string::npos);
  Buf t = boolean({2}, {1, 0});
  EXPECT_NE(error_of(make_node("Add", 2), {&t, &t}).find("takes float32, int64 or int32"),
            std::string::npos);
  EXPECT_NE(error_of(make_node("Add", 1), {&a}).find("takes 2 inputs"), std::string::npos);
  EXPECT_NE(error_of(make_node("Add", 2, 2), {&a, &a}).find("at most 1 outputs"),
            std::string::npos);
  EXPECT_NE(
      error_of(make_node("Add", 2, 1, {{"broadcast", attr_int(1)}}), {&a, &a}).find("'broadcast'"),
      std::string::npos);
}

// ---- integer ops ---------------------------------------------------------------------

TEST(OnnxMathInt, ArithmeticTruncatesAndWraps) {
  const int64_t mn = std::numeric_limits<int64_t>::min(), mx = std::numeric_limits<int64_t>::max();
  Buf a = i64({6}, {7, -7, 7, -7, mn, mx});
  Buf b = i64({6}, {2, 2, -2, -2, -1, 1});
  Buf d = run1(make_node("Div", 2), {&a, &b});
  const std::vector<int64_t> want_div = {3, -3, -3, 3, mn, mx};
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(d.as<int64_t>()[i], want_div[i]) << i;
  Buf s = run1(make_node("Add", 2), {&a, &b});
  EXPECT_EQ(s.as<int64_t>()[0], 9);
  EXPECT_EQ(s.as<int64_t>()[5], mn);  // max + 1 wraps
  Buf m = run1(make_node("Mul", 2), {&a, &b});
  EXPECT_EQ(m.as<int64_t>()[3], 14);
  Buf sub = run1(make_node("Sub", 2), {&a, &b});
  EXPECT_EQ(sub.as<int64_t>()[1], -9);

  // Shape arithmetic as exported graphs do it: int32 with a broadcast scalar.
  Buf x = i32({2, 3}, {1, 2, 3, 4, 5, -6});
  Buf k = i32({}, {4});
  Buf q = run1(make_node("Div", 2), {&x, &k});
  const std::vector<int32_t> want_q = {0, 0, 0, 1, 1, -1};
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(q.as<int32_t>()[i], want_q[i]) << i;
  Buf p = run1(make_node("Mul", 2), {&k, &x});
  EXPECT_EQ(p.as<int32_t>()[5], -24);
}

TEST(OnnxMathInt, DivisionByZeroIsARunError) {
  Buf a = i64({3}, {1, 2, 3});
  Buf z = i64({3}, {1, 0, 1});
  EXPECT_NE(error_of(make_node("Div", 2), {&a, &z}).find("division by zero"), std::string::npos);
  Buf a32 = i32({2}, {1, 2});
  Buf z32 = i32({}, {0});
  EXPECT_NE(error_of(make_node("Div", 2), {&a32, &z32}).find("division by zero"),
            std::string::npos);
  // A float division by zero is IEEE's infinity, no error.
  Buf f = f32({1}, {1.0f}), fz = f32({1}, {0.0f});
  EXPECT_TRUE(std::isinf(run1(make_node("Div", 2), {&f, &fz}).as<float>()[0]));
}

TEST(OnnxMathInt, NegAndAbs) {
  const int32_t mn = std::numeric_limits<int32_t>::min();
  Buf a = i32({4}, {3, -4, 0, mn});
  Buf n = run1(make_node("Neg", 1), {&a});
  Buf ab = run1(make_node("Abs", 1), {&a});
  const std::vector<int32_t> want_n = {-3, 4, 0, mn}, want_a = {3, 4, 0, mn};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(n.as<int32_t>()[i], want_n[i]);
    EXPECT_EQ(ab.as<int32_t>()[i], want_a[i]);
  }
  Buf b = i64({2}, {-9, 9});
  EXPECT_EQ(run1(make_node("Abs", 1), {&b}).as<int64_t>()[0], 9);
  EXPECT_EQ(run1(make_node("Neg", 1), {&b}).as<int64_t>()[1], -9);
  EXPECT_NE(error_of(make_node("Sqrt", 1), {&b}).find("takes float32 input"), std::string::npos);
  EXPECT_NE(error_of(make_node("Exp", 1), {&a}).find("got int32"), std::string::npos);
}

// ---- Equal, Where ----------------------------------------------------------------------

TEST(OnnxMathEqual, DtypesAndBroadcast) {
  Buf a = f32({2, 3}, {1, 2, NAN, 4, 5, 6});
  Buf b = f32({3}, {1, 5, NAN});
  Buf e = run1(make_node("Equal", 2), {&a, &b});
  ASSERT_EQ(e.dtype, DType::Bool);
  ASSERT_EQ(e.shape, (Shape{2, 3}));
  const std::vector<uint8_t> want = {1, 0, 0, 0, 1, 0};  // NaN equals nothing
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(e.as<uint8_t>()[i], want[i]) << i;

  Buf x = i64({3, 1}, {1, 2, 3});
  Buf y = i64({1, 2}, {2, 3});
  Buf e2 = run1(make_node("Equal", 2), {&x, &y});
  ASSERT_EQ(e2.shape, (Shape{3, 2}));
  const std::vector<uint8_t> want2 = {0, 0, 1, 0, 0, 1};
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(e2.as<uint8_t>()[i], want2[i]) << i;

  Buf p = i32({2}, {7, 8}), q = i32({}, {8});
  Buf e3 = run1(make_node("Equal", 2), {&p, &q});
  EXPECT_EQ(e3.as<uint8_t>()[0], 0);
  EXPECT_EQ(e3.as<uint8_t>()[1], 1);

  Buf t = boolean({3}, {1, 0, 1}), u = boolean({3}, {1, 1, 0});
  Buf e4 = run1(make_node("Equal", 2), {&t, &u});
  EXPECT_EQ(e4.as<uint8_t>()[0], 1);
  EXPECT_EQ(e4.as<uint8_t>()[1], 0);
  EXPECT_NE(error_of(make_node("Equal", 2), {&t, &x}).find("different dtypes"), std::string::npos);
}

TEST(OnnxMathWhere, ThreeWayBroadcast) {
  Buf c = boolean({2, 1, 3}, {1, 0, 1, 0, 1, 0});
  Buf x = f32({1, 4, 1}, {10, 20, 30, 40});
  Buf y = f32({3}, {-1, -2, -3});
  Buf w = run1(make_node("Where", 3), {&c, &x, &y});
  ASSERT_EQ(w.shape, (Shape{2, 4, 3}));
  for (int64_t o = 0; o < w.count(); ++o) {
    const bool cond = c.as<uint8_t>()[bcast_index(w.shape, c.shape, o)];
    const float want = cond ? x.as<float>()[bcast_index(w.shape, x.shape, o)]
                            : y.as<float>()[bcast_index(w.shape, y.shape, o)];
    ASSERT_EQ(w.as<float>()[o], want) << o;
  }
  // int64 values (masks over indices), a scalar condition.
  Buf t = boolean({}, {0});
  Buf a = i64({2}, {5, 6}), b = i64({2, 1}, {7, 8});
  Buf w2 = run1(make_node("Where", 3), {&t, &a, &b});
  ASSERT_EQ(w2.shape, (Shape{2, 2}));
  const std::vector<int64_t> want2 = {7, 7, 8, 8};
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(w2.as<int64_t>()[i], want2[i]);
  // Bool values.
  Buf bt = boolean({2}, {1, 1}), bf = boolean({2}, {0, 0}), sel = boolean({2}, {1, 0});
  Buf w3 = run1(make_node("Where", 3), {&sel, &bt, &bf});
  EXPECT_EQ(w3.as<uint8_t>()[0], 1);
  EXPECT_EQ(w3.as<uint8_t>()[1], 0);
  // Large enough to split over the pool.
  Buf big_c(DType::Bool, {100, 1000});
  for (int64_t i = 0; i < big_c.count(); ++i) big_c.as<uint8_t>()[i] = (i * 7) % 3 == 0;
  Buf big_x = random_f32({1000}, 3), big_y = random_f32({100, 1}, 4);
  Buf w4 = run1(make_node("Where", 3), {&big_c, &big_x, &big_y});
  for (int64_t o = 0; o < w4.count(); ++o)
    ASSERT_EQ(w4.as<float>()[o],
              big_c.as<uint8_t>()[o] ? big_x.as<float>()[o % 1000] : big_y.as<float>()[o / 1000]);

  Buf fc = f32({2}, {1, 0});
  EXPECT_NE(error_of(make_node("Where", 3), {&fc, &x, &y}).find("condition must be bool"),
            std::string::npos);
  EXPECT_NE(error_of(make_node("Where", 3), {&c, &x, &a}).find("different dtypes"),
            std::string::npos);
  Buf y5 = f32({5}, {1, 2, 3, 4, 5});
  EXPECT_NE(error_of(make_node("Where", 3), {&c, &x, &y5}).find("do not broadcast"),
            std::string::npos);
  EXPECT_NE(error_of(make_node("Where", 2), {&c, &x}).find("takes 3 inputs"), std::string::npos);
}

// ---- the float loops: both paths against std:: in double ------------------------------

std::vector<Path> paths() {
  std::vector<Path> p = {Path::Scalar};
  if (mathk::supported(Path::Avx2)) p.push_back(Path::Avx2);
  return p;
}
const char* path_name(Path p) { return p == Path::Avx2 ? "avx2" : "scalar"; }

std::vector<float> grid(float lo, float hi, int n) {
  std::vector<float> v;
  for (int i = 0; i <= n; ++i) v.push_back(lo + (hi - lo) * float(i) / float(n));
  for (float s :
       {0.0f, -0.0f, 1e-30f, -1e-30f, 1e-8f, -1e-8f, 0.39999f, 0.4f, 0.5f, -0.5f, 0.7071f})
    v.push_back(s);
  return v;
}

// The worst relative error of `op` on `xs` (absolute where |want| < floor).
double worst_error(Path p, mathk::UnOp op, const std::vector<float>& xs, double (*ref)(double),
                   double floor) {
  std::vector<float> out(xs.size());
  mathk::unary(p, op, xs.data(), out.data(), int64_t(xs.size()));
  double worst = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const double e = rel_err(out[i], ref(xs[i]), floor);
    if (e > worst) worst = e;
  }
  return worst;
}

double ref_exp(double x) { return std::exp(x); }
double ref_erf(double x) { return std::erf(x); }
double ref_tanh(double x) { return std::tanh(x); }
double ref_sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double ref_gelu(double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }
// 0.5 x (1 + tanh(v)) as x / (1 + exp(-2v)): the same, without double's
// cancellation to 0 in the negative tail.
double ref_gelu_tanh(double x) {
  return x / (1.0 + std::exp(-2.0 * std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}
double ref_log(double x) { return std::log(x); }
double ref_sqrt(double x) { return std::sqrt(x); }

// Stated bounds (relative error against the double reference; absolute
// below the floor), for every path:
//   Exp      2.5e-7 (2 ulp) for results >= FLT_MIN; 0 or within 2e-45 below
//   Erf      3e-7 relative over the whole line
//   Tanh     3e-7
//   Sigmoid  3e-7 for results >= FLT_MIN
//   Gelu     5e-7 relative (approximate="none"), absolute 1e-37 for tiny results
//   Gelu     1.5e-6 relative (approximate="tanh") where |result| >= 1e-3,
//            1.5e-9 absolute below: exp(-2v) of a float v loses |2v| ulps
//   (the Scalar path computes both Gelus in double: under 1e-7 there)
TEST(OnnxMathKernels, ApproximationErrorBounds) {
  struct Case {
    const char* name;
    mathk::UnOp op;
    double (*ref)(double);
    float lo, hi;
    double floor, bound;
  };
  const Case cases[] = {
      {"Exp", mathk::UnOp::Exp, ref_exp, -87.0f, 88.7f, 1.2e-38, 2.5e-7},
      {"Erf", mathk::UnOp::Erf, ref_erf, -6.0f, 6.0f, 1e-38, 3e-7},
      {"Tanh", mathk::UnOp::Tanh, ref_tanh, -12.0f, 12.0f, 1e-38, 3e-7},
      {"Sigmoid", mathk::UnOp::Sigmoid, ref_sigmoid, -87.0f, 30.0f, 1.2e-38, 3e-7},
      {"Gelu", mathk::UnOp::GeluErf, ref_gelu, -13.0f, 10.0f, 1e-37, 5e-7},
      {"GeluTanh", mathk::UnOp::GeluTanh, ref_gelu_tanh, -9.0f, 10.0f, 1e-3, 1.5e-6},
      {"Log", mathk::UnOp::Log, ref_log, 1e-6f, 1e6f, 1e-38, 1.2e-7},
      {"Sqrt", mathk::UnOp::Sqrt, ref_sqrt, 0.0f, 1e6f, 1e-38, 6e-8},
  };
  for (Path p : paths()) {
    for (const Case& c : cases) {
      const double worst = worst_error(p, c.op, grid(c.lo, c.hi, 200003), c.ref, c.floor);
      std::printf("  %-6s %-8s max error %.3g (bound %.3g)\n", path_name(p), c.name, worst,
                  c.bound);
      EXPECT_LE(worst, c.bound) << c.name << " on " << path_name(p);
    }
  }
}

TEST(OnnxMathKernels, EdgeValues) {
  const float inf = std::numeric_limits<float>::infinity();
  for (Path p : paths()) {
    SCOPED_TRACE(path_name(p));
    auto one = [&](mathk::UnOp op, float x) {
      float y;
      mathk::unary(p, op, &x, &y, 1);
      return y;
    };
    EXPECT_EQ(one(mathk::UnOp::Exp, 89.0f), inf);
    EXPECT_EQ(one(mathk::UnOp::Exp, -inf), 0.0f);
    EXPECT_LE(one(mathk::UnOp::Exp, -104.5f), 2e-45f);
    EXPECT_EQ(one(mathk::UnOp::Exp, 0.0f), 1.0f);
    EXPECT_NEAR(one(mathk::UnOp::Exp, 88.7f), std::exp(88.7f), std::exp(88.7f) * 3e-7f);
    EXPECT_TRUE(std::isnan(one(mathk::UnOp::Exp, NAN)));
    EXPECT_TRUE(std::isnan(one(mathk::UnOp::Erf, NAN)));
    EXPECT_TRUE(std::isnan(one(mathk::UnOp::Tanh, NAN)));
    EXPECT_TRUE(std::isnan(one(mathk::UnOp::Sigmoid, NAN)));
    EXPECT_TRUE(std::isnan(one(mathk::UnOp::GeluErf, NAN)));
    EXPECT_TRUE(std::isnan(one(mathk::UnOp::Relu, NAN)));
    EXPECT_EQ(one(mathk::UnOp::Erf, inf), 1.0f);
    EXPECT_EQ(one(mathk::UnOp::Erf, -inf), -1.0f);
    EXPECT_EQ(one(mathk::UnOp::Tanh, inf), 1.0f);
    EXPECT_EQ(one(mathk::UnOp::Tanh, -30.0f), -1.0f);
    EXPECT_EQ(one(mathk::UnOp::Sigmoid, -inf), 0.0f);
    EXPECT_EQ(one(mathk::UnOp::Sigmoid, inf), 1.0f);
    EXPECT_EQ(one(mathk::UnOp::GeluErf, inf), inf);
    EXPECT_EQ(one(mathk::UnOp::GeluErf, -30.0f), 0.0f);
    EXPECT_EQ(one(mathk::UnOp::Relu, -2.0f), 0.0f);
    EXPECT_EQ(one(mathk::UnOp::Relu, 2.5f), 2.5f);
    EXPECT_EQ(one(mathk::UnOp::Abs, -2.5f), 2.5f);
    EXPECT_EQ(one(mathk::UnOp::Neg, 2.5f), -2.5f);
    EXPECT_TRUE(std::isnan(one(mathk::UnOp::Sqrt, -1.0f)));
    EXPECT_EQ(one(mathk::UnOp::Log, 0.0f), -inf);
  }
}

TEST(OnnxMathKernels, BinaryPathsMatchBitForBit) {
  Buf a = random_f32({1037}, 11), b = random_f32({1037}, 12, 0.5f, 2.0f);
  for (mathk::BinOp op : {mathk::BinOp::Add, mathk::BinOp::Sub, mathk::BinOp::Mul,
                          mathk::BinOp::Div, mathk::BinOp::Pow}) {
    for (int64_t sa : {0, 1})
      for (int64_t sb : {0, 1})
        for (int64_t n : {0, 1, 7, 8, 9, 1037}) {
          std::vector<float> x(size_t(n) + 1), y(size_t(n) + 1);
          for (Path p : paths()) {
            std::vector<float>& o = p == Path::Scalar ? x : y;
            mathk::binary(p, op, a.as<float>(), sa, b.as<float>(), sb, o.data(), n);
          }
          if (paths().size() == 2) {
            for (int64_t i = 0; i < n; ++i)
              ASSERT_EQ(std::memcmp(&x[size_t(i)], &y[size_t(i)], 4), 0) << int(op) << " " << i;
          }
        }
  }
}

TEST(OnnxMathKernels, Rows) {
  for (Path p : paths()) {
    SCOPED_TRACE(path_name(p));
    for (int64_t n : {1, 5, 8, 13, 768, 3001}) {
      Buf x = random_f32({n}, uint32_t(n), -20.0f, 20.0f);
      const float* xs = x.as<float>();
      double m = -INFINITY;
      for (int64_t i = 0; i < n; ++i) m = std::max<double>(m, xs[i]);
      EXPECT_EQ(mathk::row_max(p, xs, n), float(m));
      std::vector<float> e(static_cast<size_t>(n));
      const float s = mathk::exp_sub_sum(p, xs, float(m), e.data(), n);
      double want_s = 0;
      for (int64_t i = 0; i < n; ++i) {
        const double w = std::exp(double(xs[i] - float(m)));  // the kernels' float difference
        want_s += w;
        ASSERT_LE(rel_err(e[size_t(i)], w, 1e-38), 3e-7) << i;
      }
      EXPECT_LE(rel_err(s, want_s), 1e-6);
    }
  }
}

// ---- unary ops -------------------------------------------------------------------------

TEST(OnnxMathUnary, OpsAgainstStd) {
  struct Case {
    const char* op;
    double (*ref)(double);
    float lo, hi;
    double bound;
  };
  static double (*const neg)(double) = [](double x) { return -x; };
  static double (*const abs)(double) = [](double x) { return std::fabs(x); };
  static double (*const relu)(double) = [](double x) { return x < 0 ? 0.0 : x; };
  const Case cases[] = {
      {"Neg", neg, -5, 5, 0},
      {"Abs", abs, -5, 5, 0},
      {"Relu", relu, -5, 5, 0},
      {"Sqrt", ref_sqrt, 0, 100, 6e-8},
      {"Exp", ref_exp, -20, 20, 2.5e-7},
      {"Log", ref_log, 1e-3f, 100, 1.2e-7},
      {"Erf", ref_erf, -4, 4, 3e-7},
      {"Sigmoid", ref_sigmoid, -20, 20, 3e-7},
      {"Tanh", ref_tanh, -6, 6, 3e-7},
      {"Gelu", ref_gelu, -8, 8, 5e-7},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.op);
    // 3-D, odd length (a vector tail), and large enough for the pool.
    Buf x = random_f32({3, 101, 97}, 5, c.lo, c.hi);
    Buf y = run1(make_node(c.op, 1), {&x});
    ASSERT_EQ(y.shape, x.shape);
    for (int64_t i = 0; i < x.count(); ++i)
      ASSERT_LE(rel_err(y.as<float>()[i], c.ref(x.as<float>()[i]), 1e-30), c.bound) << i;
  }
  Buf x = random_f32({1000}, 6, -8, 8);
  Buf y = run1(make_node("Gelu", 1, 1, {{"approximate", attr_string("tanh")}}, 20), {&x});
  for (int64_t i = 0; i < x.count(); ++i)
    ASSERT_LE(rel_err(y.as<float>()[i], ref_gelu_tanh(x.as<float>()[i]), 1e-3), 1.5e-6) << i;
  Buf y2 = run1(make_node("Gelu", 1, 1, {{"approximate", attr_string("none")}}, 20), {&x});
  for (int64_t i = 0; i < x.count(); ++i)
    ASSERT_LE(rel_err(y2.as<float>()[i], ref_gelu(x.as<float>()[i]), 1e-30), 5e-7) << i;
  Buf e(DType::Float32, {0, 3});
  EXPECT_EQ(run1(make_node("Exp", 1), {&e}).shape, (Shape{0, 3}));
}

TEST(OnnxMathUnary, RefusedAttributes) {
  Buf x = random_f32({4}, 1);
  EXPECT_NE(error_of(make_node("Gelu", 1, 1, {{"approximate", attr_string("bad")}}, 20), {&x})
                .find("'approximate' is \"bad\""),
            std::string::npos);
  EXPECT_NE(error_of(make_node("Gelu", 1, 1, {{"approximate", attr_int(1)}}, 20), {&x})
                .find("'approximate'"),
            std::string::npos);
  EXPECT_NE(error_of(make_node("Relu", 1, 1, {{"alpha", attr_float(0.1)}}), {&x})
                .find("'alpha' is not supported"),
            std::string::npos);
  EXPECT_NE(error_of(make_node("Exp", 2), {&x, &x}).find("takes 1 inputs"), std::string::npos);
}

// ---- Softmax, LogSoftmax -----------------------------------------------------------------

void check_softmax(bool log, const Shape& shape, int64_t axis, uint32_t seed) {
  SCOPED_TRACE(std::string(log ? "LogSoftmax " : "Softmax ") + shape_string(shape) + " axis " +
               std::to_string(axis));
  Buf x = random_f32(shape, seed, -10.0f, 10.0f);
  std::map<std::string, Attribute> attrs;
  if (axis != -1) attrs["axis"] = attr_int(axis);
  Buf y = run1(make_node(log ? "LogSoftmax" : "Softmax", 1, 1, attrs, 13), {&x});
  ASSERT_EQ(y.shape, shape);
  const size_t ax = size_t(axis < 0 ? axis + int64_t(shape.size()) : axis);
  int64_t outer = 1, inner = 1;
  for (size_t i = 0; i < ax; ++i) outer *= shape[i];
  for (size_t i = ax + 1; i < shape.size(); ++i) inner *= shape[i];
  const int64_t n = shape[ax];
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      auto at = [&](int64_t k) { return (o * n + k) * inner + i; };
      double m = -INFINITY, s = 0;
      for (int64_t k = 0; k < n; ++k) m = std::max<double>(m, x.as<float>()[at(k)]);
      for (int64_t k = 0; k < n; ++k) s += std::exp(x.as<float>()[at(k)] - m);
      for (int64_t k = 0; k < n; ++k) {
        const double xv = x.as<float>()[at(k)];
        const double want = log ? xv - m - std::log(s) : std::exp(xv - m) / s;
        // Softmax: 3e-6 relative (x - max is a float difference of up to 20,
        // whose rounding alone is 1e-6 of exp's value); LogSoftmax: 4e-6
        // absolute.
        if (log) {
          ASSERT_NEAR(y.as<float>()[at(k)], want, 4e-6);
        } else {
          ASSERT_LE(rel_err(y.as<float>()[at(k)], want, 1e-30), 3e-6);
        }
      }
    }
}

TEST(OnnxMathSoftmax, AxesAndShapes) {
  for (bool log : {false, true}) {
    check_softmax(log, {2, 3, 4}, -1, 1);
    check_softmax(log, {2, 3, 4}, 1, 2);  // an inner axis
    check_softmax(log, {2, 3, 4}, 0, 3);
    check_softmax(log, {2, 3, 4}, -3, 4);
    check_softmax(log, {2, 5, 130}, 1, 5);  // more lanes than one block
    check_softmax(log, {7}, 0, 6);
    check_softmax(log, {64, 1000}, -1, 7);  // rows over the pool
    check_softmax(log, {1, 12, 128, 128}, -1, 8);
  }
}

TEST(OnnxMathSoftmax, Refusals) {
  Buf x = random_f32({2, 3}, 1);
  EXPECT_NE(
      error_of(make_node("Softmax", 1, 1, {{"axis", attr_int(2)}}, 13), {&x}).find("out of range"),
      std::string::npos);
  EXPECT_NE(error_of(make_node("LogSoftmax", 1, 1, {{"axis", attr_int(-3)}}, 13), {&x})
                .find("out of range"),
            std::string::npos);
  EXPECT_NE(error_of(make_node("Softmax", 1, 1, {}, 12), {&x}).find("before opset 13"),
            std::string::npos);
  Buf i = i64({2}, {1, 2});
  EXPECT_NE(error_of(make_node("Softmax", 1, 1, {}, 13), {&i}).find("takes float32"),
            std::string::npos);
  EXPECT_NE(
      error_of(make_node("Softmax", 1, 1, {{"axis", attr_float(1)}}, 13), {&x}).find("'axis'"),
      std::string::npos);
}

// ---- LayerNormalization ----------------------------------------------------------------

void check_layer_norm(const Shape& shape, int64_t axis, bool with_bias, bool stats, uint32_t seed) {
  SCOPED_TRACE("LayerNormalization " + shape_string(shape) + " axis " + std::to_string(axis));
  const size_t ax = size_t(axis < 0 ? axis + int64_t(shape.size()) : axis);
  const Shape norm(shape.begin() + ptrdiff_t(ax), shape.end());
  Buf x = random_f32(shape, seed, -4.0f, 6.0f);
  Buf scale = random_f32(norm, seed + 1, 0.5f, 1.5f);
  Buf bias = random_f32(norm, seed + 2);
  const float eps = 1e-3f;
  Node node = make_node("LayerNormalization", with_bias ? 3 : 2, stats ? 3 : 1,
                        {{"axis", attr_int(axis)}, {"epsilon", attr_float(eps)}});
  std::vector<const Buf*> ins = {&x, &scale};
  if (with_bias) ins.push_back(&bias);
  auto r = run_node(node, ins);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  const std::vector<Buf>& out = *r;
  int64_t rows = 1, n = 1;
  for (size_t i = 0; i < ax; ++i) rows *= shape[i];
  for (size_t i = ax; i < shape.size(); ++i) n *= shape[i];
  if (stats) {
    Shape stat(shape.begin(), shape.begin() + ptrdiff_t(ax));
    stat.resize(shape.size(), 1);
    ASSERT_EQ(out[1].shape, stat);
    ASSERT_EQ(out[2].shape, stat);
  }
  for (int64_t row = 0; row < rows; ++row) {
    const float* xr = x.as<float>() + row * n;
    double mean = 0, var = 0;
    for (int64_t i = 0; i < n; ++i) mean += xr[i];
    mean /= double(n);
    for (int64_t i = 0; i < n; ++i) var += (xr[i] - mean) * (xr[i] - mean);
    var /= double(n);
    const double inv = 1.0 / std::sqrt(var + eps);
    for (int64_t i = 0; i < n; ++i) {
      const double want =
          (xr[i] - mean) * inv * scale.as<float>()[i] + (with_bias ? bias.as<float>()[i] : 0.0);
      ASSERT_NEAR(out[0].as<float>()[row * n + i], want, 2e-6) << row << " " << i;
    }
    if (stats) {
      EXPECT_NEAR(out[1].as<float>()[row], mean, 1e-6);
      EXPECT_LE(rel_err(out[2].as<float>()[row], inv), 1e-6);
    }
  }
}

TEST(OnnxMathLayerNorm, AxesBiasAndStatistics) {
  check_layer_norm({2, 3, 768}, -1, true, false, 1);
  check_layer_norm({4, 13}, -1, false, false, 2);
  check_layer_norm({2, 3, 4}, 1, true, true, 3);
  check_layer_norm({5, 3}, 0, true, true, 4);
  check_layer_norm({64, 777}, -1, true, true, 5);  // rows over the pool
  // Scale given with leading 1s.
  Buf x = random_f32({3, 8}, 9), s = random_f32({1, 8}, 10);
  EXPECT_TRUE(run_node(make_node("LayerNormalization", 2), {&x, &s}).is_ok());
}

TEST(OnnxMathLayerNorm, Refusals) {
  Buf x = random_f32({2, 3, 4}, 1);
  Buf s4 = random_f32({4}, 2), s3 = random_f32({3}, 3), s34 = random_f32({3, 4}, 4);
  EXPECT_NE(error_of(make_node("LayerNormalization", 2), {&x, &s3}).find("Scale has shape [3]"),
            std::string::npos);
  EXPECT_NE(error_of(make_node("LayerNormalization", 2, 1, {{"axis", attr_int(1)}}), {&x, &s4})
                .find("expected the normalised dims [3, 4]"),
            std::string::npos);
  EXPECT_NE(error_of(make_node("LayerNormalization", 3), {&x, &s4, &s3}).find("B has shape [3]"),
            std::string::npos);
  EXPECT_TRUE(
      run_node(make_node("LayerNormalization", 2, 1, {{"axis", attr_int(1)}}), {&x, &s34}).is_ok());
  EXPECT_NE(error_of(make_node("LayerNormalization", 2, 1, {{"axis", attr_int(3)}}), {&x, &s4})
                .find("out of range"),
            std::string::npos);
  EXPECT_NE(
      error_of(make_node("LayerNormalization", 2, 1, {{"stash_type", attr_int(11)}}), {&x, &s4})
          .find("stash_type 11"),
      std::string::npos);
  EXPECT_NE(
      error_of(make_node("LayerNormalization", 2, 1, {{"epsilon", attr_float(-1)}}), {&x, &s4})
          .find("epsilon"),
      std::string::npos);
  EXPECT_NE(error_of(make_node("LayerNormalization", 1), {&x}).find("takes 2 to 3 inputs"),
            std::string::npos);
  Buf xi = i64({4}, {1, 2, 3, 4});
  EXPECT_NE(error_of(make_node("LayerNormalization", 2), {&xi, &s4}).find("float32"),
            std::string::npos);
  Buf e(DType::Float32, {2, 0});
  Buf s0(DType::Float32, {0});
  EXPECT_NE(error_of(make_node("LayerNormalization", 2), {&e, &s0}).find("no elements"),
            std::string::npos);
}

// ---- BatchNormalization ------------------------------------------------------------------

void check_batch_norm(const Shape& shape, uint32_t seed) {
  SCOPED_TRACE("BatchNormalization " + shape_string(shape));
  const int64_t c = shape[1];
  Buf x = random_f32(shape, seed), scale = random_f32({c}, seed + 1),
      bias = random_f32({c}, seed + 2), mean = random_f32({c}, seed + 3),
      var = random_f32({c}, seed + 4, 0.1f, 2.0f);
  const float eps = 1e-5f;
  Buf y = run1(make_node("BatchNormalization", 5, 1, {{"epsilon", attr_float(eps)}}, 15),
               {&x, &scale, &bias, &mean, &var});
  ASSERT_EQ(y.shape, shape);
  int64_t inner = 1;
  for (size_t i = 2; i < shape.size(); ++i) inner *= shape[i];
  for (int64_t i = 0; i < x.count(); ++i) {
    const int64_t ch = (i / inner) % c;
    const double want = (x.as<float>()[i] - mean.as<float>()[ch]) /
                            std::sqrt(var.as<float>()[ch] + double(eps)) * scale.as<float>()[ch] +
                        bias.as<float>()[ch];
    ASSERT_NEAR(y.as<float>()[i], want, 1e-6 + 3e-7 * std::fabs(want)) << i;
  }
}

TEST(OnnxMathBatchNorm, Inference) {
  check_batch_norm({2, 3, 4, 5}, 1);
  check_batch_norm({4, 6}, 2);
  check_batch_norm({2, 16, 28, 28}, 3);  // planes over the pool
  check_batch_norm({1, 2, 3, 4, 5}, 4);
}

TEST(OnnxMathBatchNorm, Refusals) {
  Buf x = random_f32({2, 3, 4}, 1), p = random_f32({3}, 2), q = random_f32({4}, 3);
  const std::vector<const Buf*> ok = {&x, &p, &p, &p, &p};
  EXPECT_NE(
      error_of(make_node("BatchNormalization", 5, 1, {{"training_mode", attr_int(1)}}, 15), ok)
          .find("training_mode=1"),
      std::string::npos);
  EXPECT_TRUE(
      run_node(make_node("BatchNormalization", 5, 1, {{"training_mode", attr_int(0)}}, 15), ok)
          .is_ok());
  EXPECT_NE(error_of(make_node("BatchNormalization", 5, 3, {}, 15), ok).find("one output"),
            std::string::npos);
  Node blank_outputs = make_node("BatchNormalization", 5, 3, {}, 15);
  blank_outputs.outputs[1] = blank_outputs.outputs[2] = "";
  EXPECT_TRUE(run_node(blank_outputs, ok).is_ok());
  EXPECT_NE(error_of(make_node("BatchNormalization", 5, 1, {}, 15), {&x, &p, &p, &q, &p})
                .find("input_mean has shape [4]"),
            std::string::npos);
  Buf x1 = random_f32({3}, 4);
  EXPECT_NE(error_of(make_node("BatchNormalization", 5, 1, {}, 15), {&x1, &p, &p, &p, &p})
                .find("expected [N, C, ...]"),
            std::string::npos);
  EXPECT_NE(
      error_of(make_node("BatchNormalization", 3, 1, {}, 15), {&x, &p, &p}).find("takes 5 inputs"),
      std::string::npos);
  EXPECT_NE(error_of(make_node("BatchNormalization", 5, 1, {{"spatial", attr_int(1)}}, 15), ok)
                .find("'spatial'"),
            std::string::npos);
}

TEST(OnnxMathRegistry, EveryOpIsRegistered) {
  for (const char* op : {"Add",
                         "Sub",
                         "Mul",
                         "Div",
                         "Pow",
                         "Equal",
                         "Where",
                         "Neg",
                         "Abs",
                         "Sqrt",
                         "Exp",
                         "Log",
                         "Erf",
                         "Relu",
                         "Sigmoid",
                         "Tanh",
                         "Gelu",
                         "Softmax",
                         "LogSoftmax",
                         "LayerNormalization",
                         "BatchNormalization"})
    EXPECT_NE(find_op(op), nullptr) << op;
}

}  // namespace
}  // namespace cairn::onnx
