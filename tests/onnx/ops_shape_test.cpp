// tests/onnx/ops_shape_test.cpp — the shape family (onnx/ops_shape*.cpp,
// ops_cast.cpp, ops_reduce.cpp): each op built from a Node, run through
// factory -> infer -> allocate -> run, against a plain reference computed
// here; attributes, negative axes, opset forms and the refusals.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>

#include "core/half.h"
#include "onnx/op.h"
#include "op_harness.h"
#include "test_util.h"

namespace cairn::onnx {
namespace {

using values::Tensor;

// ------------------------------------------------------------ helpers

using harness::attr_float;
using harness::attr_int;
using harness::attr_ints;
using harness::attr_tensor;

Node make_node(const std::string& op, size_t n_in, size_t n_out, int64_t opset = 13,
               std::map<std::string, Attribute> attrs = {}) {
  return harness::make_node(op, n_in, n_out, std::move(attrs), opset);
}

Tensor f32(std::vector<float> v, Shape s) { return values::make_tensor(v, std::move(s)); }
Tensor i64(std::vector<int64_t> v, Shape s) { return values::make_tensor(v, std::move(s)); }
Tensor i64(std::vector<int64_t> v) {
  const int64_t n = int64_t(v.size());
  return values::make_tensor(v, {n});
}
Tensor i32(std::vector<int32_t> v, Shape s) { return values::make_tensor(v, std::move(s)); }

template <typename T>
std::vector<T> data_of(const Tensor& t) {
  std::vector<T> v(t.data.size() / sizeof(T));
  if (!v.empty()) std::memcpy(v.data(), t.data.data(), v.size() * sizeof(T));
  return v;
}

std::vector<float> iota_f(int64_t n, float from = 0) {
  std::vector<float> v(static_cast<size_t>(n));
  std::iota(v.begin(), v.end(), from);
  return v;
}

struct In {
  Tensor t;
  bool known = false;   // its value is known before running (TensorInfo.value)
  bool present = true;  // false: an omitted optional input
};
In data(Tensor t) { return In{std::move(t), false, true}; }
In known(Tensor t) { return In{std::move(t), true, true}; }
In absent() { return In{Tensor{}, false, false}; }

// A pool of 3 (not the harness's 2), so odd splits run too.
ThreadPool& pool() {
  static ThreadPool p(3, ThreadPoolOptions{0, false});
  return p;
}

Result<std::vector<Tensor>> run_node(Node node, std::vector<In> ins, ThreadPool& tp = pool()) {
  std::vector<TensorView> views(ins.size());
  std::vector<harness::OpInput> in(ins.size());
  for (size_t i = 0; i < ins.size(); ++i) {
    if (!ins[i].present) continue;
    views[i] = TensorView{ins[i].t.dtype, ins[i].t.shape, ins[i].t.data.data()};
    in[i] = harness::OpInput{&views[i], ins[i].known};
  }
  return harness::run_op_node(std::move(node), in, tp);
}

// The error message of a run expected to fail ("" when it succeeded).
std::string error_of(Node node, std::vector<In> ins) {
  auto r = run_node(std::move(node), std::move(ins));
  return r ? std::string() : r.status().message();
}

#define ASSERT_RUN(var, ...)                                  \
  auto var##_r = run_node(__VA_ARGS__);                       \
  ASSERT_TRUE(var##_r.is_ok()) << var##_r.status().message(); \
  auto& var = *var##_r

Shape strides(const Shape& s) {
  Shape st(s.size());
  int64_t m = 1;
  for (size_t k = s.size(); k-- > 0;) {
    st[k] = m;
    m *= s[k];
  }
  return st;
}
int64_t count(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}
// Multi-index of flat position i in shape s.
Shape unflat(int64_t i, const Shape& s) {
  Shape idx(s.size());
  for (size_t k = s.size(); k-- > 0;) {
    idx[k] = i % s[k];
    i /= s[k];
  }
  return idx;
}

// -------------------------------------------------------------- views

TEST(OnnxShapeOps, ReshapeZeroCopiesMinusOneInfers) {
  ASSERT_RUN(r, make_node("Reshape", 2, 1),
             {data(f32(iota_f(24), {2, 3, 4})), known(i64({0, -1, 2}))});
  EXPECT_EQ(r[0].shape, (Shape{2, 6, 2}));
  EXPECT_EQ(data_of<float>(r[0]), iota_f(24));
  ASSERT_RUN(r2, make_node("Reshape", 2, 1),
             {data(f32(iota_f(24), {2, 3, 4})), known(i32({-1}, {1}))});
  EXPECT_EQ(r2[0].shape, (Shape{24}));
}

TEST(OnnxShapeOps, ReshapeAllowzero) {
  // allowzero=1: a 0 is a real 0, so [0, 4] of an empty tensor is kept.
  ASSERT_RUN(r, make_node("Reshape", 2, 1, 14, {{"allowzero", attr_int(1)}}),
             {data(f32({}, {0, 2, 2})), known(i64({0, 4}))});
  EXPECT_EQ(r[0].shape, (Shape{0, 4}));
  EXPECT_NE(error_of(make_node("Reshape", 2, 1, 14, {{"allowzero", attr_int(1)}}),
                     {data(f32(iota_f(6), {2, 3})), known(i64({0, 3}))}),
            "");
  EXPECT_NE(error_of(make_node("Reshape", 2, 1, 14, {{"allowzero", attr_int(1)}}),
                     {data(f32({}, {0, 3})), known(i64({0, -1}))})
                .find("both 0 and -1"),
            std::string::npos);
}

TEST(OnnxShapeOps, ReshapeRefusals) {
  auto x = f32(iota_f(6), {2, 3});
  EXPECT_NE(error_of(make_node("Reshape", 2, 1), {data(x), known(i64({4, 2}))}).find("6 elements"),
            std::string::npos);
  EXPECT_NE(error_of(make_node("Reshape", 2, 1), {data(x), known(i64({-1, -1}))})
                .find("more than one -1"),
            std::string::npos);
  EXPECT_NE(
      error_of(make_node("Reshape", 2, 1), {data(x), known(i64({-1, 4}))}).find("not a multiple"),
      std::string::npos);
  EXPECT_NE(error_of(make_node("Reshape", 2, 1), {data(x), known(i64({-2, 3}))}), "");
  EXPECT_NE(error_of(make_node("Reshape", 2, 1), {data(x), known(i64({1, 1, 0}))}).find("rank"),
            std::string::npos);
  EXPECT_NE(error_of(make_node("Reshape", 2, 1), {data(x), data(i64({3, 2}))})
                .find("known before running"),
            std::string::npos);
}

TEST(OnnxShapeOps, ViewsAreViewsAndRunCopies) {
  auto op = find_op("Reshape")(NodeContext{make_node("Reshape", 2, 1), {}});
  ASSERT_TRUE(op.is_ok());
  EXPECT_TRUE((*op)->is_view());
  for (const char* name : {"Flatten", "Squeeze", "Unsqueeze", "Identity"}) {
    auto o = find_op(name)(
        NodeContext{make_node(name, std::string(name) == "Unsqueeze" ? 2 : 1, 1), {}});
    ASSERT_TRUE(o.is_ok()) << name << ": " << o.status().message();
    EXPECT_TRUE((*o)->is_view()) << name;
  }
  ASSERT_RUN(r, make_node("Identity", 1, 1), {data(i64({5, 6, 7}))});
  EXPECT_EQ(data_of<int64_t>(r[0]), (std::vector<int64_t>{5, 6, 7}));
}

TEST(OnnxShapeOps, Flatten) {
  auto x = f32(iota_f(120), {2, 3, 4, 5});
  ASSERT_RUN(a, make_node("Flatten", 1, 1), {data(x)});
  EXPECT_EQ(a[0].shape, (Shape{2, 60}));
  ASSERT_RUN(b, make_node("Flatten", 1, 1, 13, {{"axis", attr_int(-1)}}), {data(x)});
  EXPECT_EQ(b[0].shape, (Shape{24, 5}));
  ASSERT_RUN(c, make_node("Flatten", 1, 1, 13, {{"axis", attr_int(0)}}), {data(x)});
  EXPECT_EQ(c[0].shape, (Shape{1, 120}));
  ASSERT_RUN(d, make_node("Flatten", 1, 1, 13, {{"axis", attr_int(4)}}), {data(x)});
  EXPECT_EQ(d[0].shape, (Shape{120, 1}));
  EXPECT_EQ(data_of<float>(d[0]), iota_f(120));
  EXPECT_NE(error_of(make_node("Flatten", 1, 1, 13, {{"axis", attr_int(5)}}), {data(x)}), "");
}

TEST(OnnxShapeOps, Squeeze) {
  auto x = f32(iota_f(6), {1, 2, 1, 3, 1});
  ASSERT_RUN(all, make_node("Squeeze", 1, 1), {data(x)});
  EXPECT_EQ(all[0].shape, (Shape{2, 3}));
  ASSERT_RUN(some, make_node("Squeeze", 2, 1), {data(x), known(i64({0, -1}))});
  EXPECT_EQ(some[0].shape, (Shape{2, 1, 3}));
  ASSERT_RUN(omitted, make_node("Squeeze", 2, 1), {data(x), absent()});
  EXPECT_EQ(omitted[0].shape, (Shape{2, 3}));
  ASSERT_RUN(empty, make_node("Squeeze", 2, 1), {data(x), known(i64({}, {0}))});
  EXPECT_EQ(empty[0].shape, (Shape{2, 3}));
  EXPECT_NE(
      error_of(make_node("Squeeze", 2, 1), {data(x), known(i64({1}))}).find("its size is 2, not 1"),
      std::string::npos);
  EXPECT_NE(error_of(make_node("Squeeze", 2, 1), {data(x), known(i64({0, 0}))}).find("twice"),
            std::string::npos);
  EXPECT_NE(error_of(make_node("Squeeze", 2, 1), {data(x), known(i64({5}))}).find("out of range"),
            std::string::npos);
  // Opset 13 moved axes to an input: the attribute is refused.
  EXPECT_NE(
      error_of(make_node("Squeeze", 1, 1, 13, {{"axes", attr_ints({0})}}), {data(x)}).find("input 1"),
      std::string::npos);
}

TEST(OnnxShapeOps, Unsqueeze) {
  auto x = f32(iota_f(6), {2, 3});
  ASSERT_RUN(a, make_node("Unsqueeze", 2, 1), {data(x), known(i64({0, 3}))});
  EXPECT_EQ(a[0].shape, (Shape{1, 2, 3, 1}));
  ASSERT_RUN(b, make_node("Unsqueeze", 2, 1), {data(x), known(i64({-1}))});
  EXPECT_EQ(b[0].shape, (Shape{2, 3, 1}));
  ASSERT_RUN(c, make_node("Unsqueeze", 2, 1), {data(i64({7}, {})), known(i64({0}))});
  EXPECT_EQ(c[0].shape, (Shape{1}));
  EXPECT_EQ(data_of<int64_t>(c[0]), (std::vector<int64_t>{7}));
  EXPECT_NE(error_of(make_node("Unsqueeze", 2, 1), {data(x), known(i64({4}))}), "");
  EXPECT_NE(error_of(make_node("Unsqueeze", 2, 1), {data(x), known(i64({1, -3}))}).find("twice"),
            std::string::npos);
  EXPECT_NE(error_of(make_node("Unsqueeze", 2, 1), {data(x), data(i64({0}))})
                .find("known before running"),
            std::string::npos);
}

// ------------------------------------------------------------ sources

TEST(OnnxShapeOps, ShapeWithStartEnd) {
  Tensor x{DType::Float32, {2, 3, 4, 5}, {}};  // data never read: empty on purpose
  ASSERT_RUN(a, make_node("Shape", 1, 1), {data(x)});
  EXPECT_EQ(data_of<int64_t>(a[0]), (std::vector<int64_t>{2, 3, 4, 5}));
  EXPECT_EQ(a[0].dtype, DType::Int64);
  ASSERT_RUN(b, make_node("Shape", 1, 1, 15, {{"start", attr_int(1)}, {"end", attr_int(-1)}}), {data(x)});
  EXPECT_EQ(data_of<int64_t>(b[0]), (std::vector<int64_t>{3, 4}));
  ASSERT_RUN(c, make_node("Shape", 1, 1, 15, {{"start", attr_int(-10)}, {"end", attr_int(10)}}), {data(x)});
  EXPECT_EQ(data_of<int64_t>(c[0]), (std::vector<int64_t>{2, 3, 4, 5}));
  ASSERT_RUN(d, make_node("Shape", 1, 1, 15, {{"start", attr_int(3)}, {"end", attr_int(1)}}), {data(x)});
  EXPECT_EQ(d[0].shape, (Shape{0}));
  ASSERT_RUN(e, make_node("Shape", 1, 1, 15, {{"start", attr_int(-1)}}), {data(x)});
  EXPECT_EQ(data_of<int64_t>(e[0]), (std::vector<int64_t>{5}));
}

TEST(OnnxShapeOps, Size) {
  Tensor x{DType::Float32, {2, 3, 4}, {}};  // data never read
  ASSERT_RUN(a, make_node("Size", 1, 1), {data(x)});
  EXPECT_EQ(a[0].shape, Shape{});
  EXPECT_EQ(data_of<int64_t>(a[0]), (std::vector<int64_t>{24}));
  ASSERT_RUN(b, make_node("Size", 1, 1), {data(Tensor{DType::Int64, {}, {}})});
  EXPECT_EQ(data_of<int64_t>(b[0]), (std::vector<int64_t>{1}));
}

TEST(OnnxShapeOps, ConstantForms) {
  ASSERT_RUN(t, make_node("Constant", 0, 1, 13, {{"value", attr_tensor(f32({1, 2, 3, 4}, {2, 2}))}}),
             {});
  EXPECT_EQ(t[0].shape, (Shape{2, 2}));
  EXPECT_EQ(data_of<float>(t[0]), (std::vector<float>{1, 2, 3, 4}));
  ASSERT_RUN(f, make_node("Constant", 0, 1, 13, {{"value_float", attr_float(2.5)}}), {});
  EXPECT_EQ(f[0].shape, Shape{});
  EXPECT_EQ(data_of<float>(f[0]), (std::vector<float>{2.5f}));
  Attribute fs;
  fs.kind = Attribute::Kind::Floats;
  fs.floats = {1.5, -2};
  ASSERT_RUN(g, make_node("Constant", 0, 1, 13, {{"value_floats", fs}}), {});
  EXPECT_EQ(data_of<float>(g[0]), (std::vector<float>{1.5f, -2.f}));
  ASSERT_RUN(i, make_node("Constant", 0, 1, 13, {{"value_int", attr_int(-7)}}), {});
  EXPECT_EQ(i[0].dtype, DType::Int64);
  EXPECT_EQ(data_of<int64_t>(i[0]), (std::vector<int64_t>{-7}));
  ASSERT_RUN(is, make_node("Constant", 0, 1, 13, {{"value_ints", attr_ints({3, 4, 5})}}), {});
  EXPECT_EQ(is[0].shape, (Shape{3}));
  EXPECT_EQ(data_of<int64_t>(is[0]), (std::vector<int64_t>{3, 4, 5}));

  Attribute str;
  str.kind = Attribute::Kind::String;
  str.s = "x";
  EXPECT_NE(
      error_of(make_node("Constant", 0, 1, 13, {{"value_string", str}}), {}).find("not supported"),
      std::string::npos);
  EXPECT_NE(
      error_of(make_node("Constant", 0, 1, 13, {{"sparse_value", attr_tensor(f32({1}, {1}))}}), {}),
      "");
  EXPECT_NE(error_of(make_node("Constant", 0, 1, 13, {}), {}).find("exactly one"),
            std::string::npos);
  EXPECT_NE(error_of(make_node("Constant", 0, 1, 13,
                               {{"value_int", attr_int(1)}, {"value_float", attr_float(1)}}),
                     {}),
            "");
}

TEST(OnnxShapeOps, ConstantOfShape) {
  ASSERT_RUN(a, make_node("ConstantOfShape", 1, 1), {known(i64({2, 3}))});
  EXPECT_EQ(a[0].dtype, DType::Float32);
  EXPECT_EQ(data_of<float>(a[0]), std::vector<float>(6, 0.f));
  ASSERT_RUN(b, make_node("ConstantOfShape", 1, 1, 13, {{"value", attr_tensor(i64({-3}, {1}))}}),
             {known(i64({5, 7, 3}))});
  EXPECT_EQ(b[0].dtype, DType::Int64);
  EXPECT_EQ(b[0].shape, (Shape{5, 7, 3}));
  EXPECT_EQ(data_of<int64_t>(b[0]), std::vector<int64_t>(105, -3));
  ASSERT_RUN(c, make_node("ConstantOfShape", 1, 1, 13, {{"value", attr_tensor(f32({1.5f}, {1}))}}),
             {known(i64({}, {0}))});
  EXPECT_EQ(c[0].shape, Shape{});
  EXPECT_EQ(data_of<float>(c[0]), (std::vector<float>{1.5f}));
  ASSERT_RUN(d, make_node("ConstantOfShape", 1, 1), {known(i64({4, 0}))});
  EXPECT_EQ(d[0].shape, (Shape{4, 0}));
  EXPECT_NE(error_of(make_node("ConstantOfShape", 1, 1), {known(i64({2, -1}))}).find("negative"),
            std::string::npos);
  EXPECT_NE(error_of(make_node("ConstantOfShape", 1, 1, 13, {{"value", attr_tensor(f32({1, 2}, {2}))}}),
                     {known(i64({2}))}),
            "");
  EXPECT_NE(error_of(make_node("ConstantOfShape", 1, 1), {data(i64({2}))}), "");
}

// ---------------------------------------------------------- Transpose

// The reference: out[idx] = x[idx permuted back].
template <typename T>
std::vector<T> transpose_ref(const std::vector<T>& x, const Shape& s,
                             const std::vector<int64_t>& perm) {
  Shape os(s.size());
  for (size_t k = 0; k < s.size(); ++k) os[k] = s[size_t(perm[k])];
  const Shape st = strides(s);
  std::vector<T> y(x.size());
  for (int64_t i = 0; i < count(os); ++i) {
    Shape idx = unflat(i, os);
    int64_t off = 0;
    for (size_t k = 0; k < s.size(); ++k) off += idx[k] * st[size_t(perm[k])];
    y[size_t(i)] = x[size_t(off)];
  }
  return y;
}

TEST(OnnxShapeOps, TransposeMatchesReference) {
  struct Case {
    Shape s;
    std::vector<int64_t> perm;
  };
  const Case cases[] = {
      {{3, 5}, {1, 0}},                 // 2-D: tiled path
      {{70, 45}, {1, 0}},               // 2-D, tiles with ragged edges
      {{2, 4, 8, 16}, {0, 2, 1, 3}},    // BERT heads: contiguous inner runs
      {{2, 64, 12, 64}, {0, 2, 1, 3}},  // big enough for the pool
      {{2, 3, 4, 5}, {0, 2, 3, 1}},     // strided inner loop
      {{2, 3, 4}, {2, 1, 0}},
      {{4, 1, 6}, {1, 2, 0}},    // a size-1 dim dropped
      {{3, 40, 50}, {0, 2, 1}},  // batched 2-D
      {{256, 300}, {1, 0}},      // big 2-D over the pool
      {{5}, {0}},
      {{}, {}},
  };
  for (const Case& c : cases) {
    const int64_t n = count(c.s);
    auto x = iota_f(n);
    std::map<std::string, Attribute> attrs;
    if (!c.perm.empty()) attrs["perm"] = attr_ints(c.perm);
    ASSERT_RUN(r, make_node("Transpose", 1, 1, 13, attrs), {data(f32(x, c.s))});
    EXPECT_EQ(data_of<float>(r[0]), transpose_ref(x, c.s, c.perm)) << shape_string(c.s);
  }
  // Default perm reverses; other element sizes (int64, bool) too.
  std::vector<int64_t> xi(60);
  std::iota(xi.begin(), xi.end(), 100);
  ASSERT_RUN(r, make_node("Transpose", 1, 1), {data(i64(xi, {3, 4, 5}))});
  EXPECT_EQ(r[0].shape, (Shape{5, 4, 3}));
  EXPECT_EQ(data_of<int64_t>(r[0]), transpose_ref(xi, {3, 4, 5}, {2, 1, 0}));
  std::vector<uint8_t> xb(35);
  for (size_t i = 0; i < xb.size(); ++i) xb[i] = (i * 7) % 3 == 0;
  auto tb = Tensor::make(DType::Bool, {5, 7}, std::string(xb.begin(), xb.end()));
  ASSERT_TRUE(tb.is_ok());
  ASSERT_RUN(rb, make_node("Transpose", 1, 1), {data(*tb)});
  EXPECT_EQ(data_of<uint8_t>(rb[0]), transpose_ref(xb, {5, 7}, {1, 0}));
}

TEST(OnnxShapeOps, TransposeRandomShapesAndPerms) {
  std::mt19937 rng(21);
  for (int iter = 0; iter < 300; ++iter) {
    const size_t rank = 1 + rng() % 5;
    Shape s(rank);
    for (auto& d : s) d = 1 + rng() % 6;
    if (iter % 50 == 0) s[rng() % rank] = 0;  // empty now and then
    std::vector<int64_t> perm(rank);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    std::vector<int64_t> x(size_t(count(s)));
    std::iota(x.begin(), x.end(), 1);
    ASSERT_RUN(r, make_node("Transpose", 1, 1, 13, {{"perm", attr_ints(perm)}}), {data(i64(x, s))});
    ASSERT_EQ(data_of<int64_t>(r[0]), transpose_ref(x, s, perm))
        << shape_string(s) << " perm " << shape_string(perm);
  }
}

TEST(OnnxShapeOps, TransposeRefusesBadPerm) {
  auto x = f32(iota_f(6), {2, 3});
  EXPECT_NE(error_of(make_node("Transpose", 1, 1, 13, {{"perm", attr_ints({0, 0})}}), {data(x)})
                .find("permutation"),
            std::string::npos);
  EXPECT_NE(error_of(make_node("Transpose", 1, 1, 13, {{"perm", attr_ints({0, 2})}}), {data(x)}), "");
  EXPECT_NE(error_of(make_node("Transpose", 1, 1, 13, {{"perm", attr_ints({-1, 0})}}), {data(x)}), "");
  EXPECT_NE(error_of(make_node("Transpose", 1, 1, 13, {{"perm", attr_ints({0, 1, 2})}}), {data(x)}),
            "");
}

// -------------------------------------------------------- Concat/Split

TEST(OnnxShapeOps, Concat) {
  auto a = f32(iota_f(6), {2, 3}), b = f32(iota_f(4, 100), {2, 2});
  ASSERT_RUN(r, make_node("Concat", 2, 1, 13, {{"axis", attr_int(-1)}}), {data(a), data(b)});
  EXPECT_EQ(r[0].shape, (Shape{2, 5}));
  EXPECT_EQ(data_of<float>(r[0]), (std::vector<float>{0, 1, 2, 100, 101, 3, 4, 5, 102, 103}));
  // int64 shape pieces, as exported graphs build them; an empty input.
  ASSERT_RUN(s, make_node("Concat", 3, 1, 13, {{"axis", attr_int(0)}}),
             {known(i64({1})), known(i64({}, {0})), known(i64({-1, 64}))});
  EXPECT_EQ(data_of<int64_t>(s[0]), (std::vector<int64_t>{1, -1, 64}));
  // Big enough for the pool: [3, 40000] ++ [3, 20000] on axis 1.
  auto big1 = iota_f(120000), big2 = iota_f(60000, -1e6f);
  ASSERT_RUN(g, make_node("Concat", 2, 1, 13, {{"axis", attr_int(1)}}),
             {data(f32(big1, {3, 40000})), data(f32(big2, {3, 20000}))});
  std::vector<float> want;
  for (int r0 = 0; r0 < 3; ++r0) {
    want.insert(want.end(), big1.begin() + r0 * 40000, big1.begin() + (r0 + 1) * 40000);
    want.insert(want.end(), big2.begin() + r0 * 20000, big2.begin() + (r0 + 1) * 20000);
  }
  EXPECT_EQ(data_of<float>(g[0]), want);
  // Refusals: shape mismatch, dtype mismatch, missing axis, scalars.
  EXPECT_NE(error_of(make_node("Concat", 2, 1, 13, {{"axis", attr_int(0)}}), {data(a), data(b)})
                .find("does not concatenate"),
            std::string::npos);
  EXPECT_NE(error_of(make_node("Concat", 2, 1, 13, {{"axis", attr_int(0)}}),
                     {data(a), data(i64({1, 2, 3}, {1, 3}))}),
            "");
  EXPECT_NE(error_of(make_node("Concat", 2, 1), {data(a), data(a)}).find("'axis' is required"),
            std::string::npos);
  EXPECT_NE(error_of(make_node("Concat", 1, 1, 13, {{"axis", attr_int(2)}}), {data(a)}), "");
}

TEST(OnnxShapeOps, SplitForms) {
  auto x = f32(iota_f(20), {2, 10});
  // Opset 13: sizes as input 1.
  ASSERT_RUN(a, make_node("Split", 2, 3, 13, {{"axis", attr_int(-1)}}),
             {data(x), known(i64({2, 3, 5}))});
  EXPECT_EQ(a[0].shape, (Shape{2, 2}));
  EXPECT_EQ(data_of<float>(a[0]), (std::vector<float>{0, 1, 10, 11}));
  EXPECT_EQ(data_of<float>(a[1]), (std::vector<float>{2, 3, 4, 12, 13, 14}));
  EXPECT_EQ(data_of<float>(a[2]), (std::vector<float>{5, 6, 7, 8, 9, 15, 16, 17, 18, 19}));
  // Even split by output count; an empty split is refused (as ONNX Runtime does).
  ASSERT_RUN(b, make_node("Split", 1, 2, 13), {data(x)});
  EXPECT_EQ(b[1].shape, (Shape{1, 10}));
  EXPECT_EQ(data_of<float>(b[1]), iota_f(10, 10));
  EXPECT_NE(
      error_of(make_node("Split", 2, 2, 13, {{"axis", attr_int(1)}}), {data(x), known(i64({}, {0}))})
          .find("0 sizes for 2 outputs"),
      std::string::npos);
  // Opset 18: num_outputs, the last chunk smaller (10 -> 4, 4, 2).
  ASSERT_RUN(c, make_node("Split", 1, 3, 18, {{"axis", attr_int(1)}, {"num_outputs", attr_int(3)}}),
             {data(x)});
  EXPECT_EQ(c[0].shape, (Shape{2, 4}));
  EXPECT_EQ(c[2].shape, (Shape{2, 2}));
  EXPECT_EQ(data_of<float>(c[2]), (std::vector<float>{8, 9, 18, 19}));
  // Refusals.
  EXPECT_NE(
      error_of(make_node("Split", 2, 2, 13, {{"axis", attr_int(1)}}), {data(x), known(i64({3, 3}))})
          .find("adds up"),
      std::string::npos);
  EXPECT_NE(error_of(make_node("Split", 1, 3, 13, {{"axis", attr_int(1)}}), {data(x)}).find("evenly"),
            std::string::npos);
  EXPECT_NE(error_of(make_node("Split", 1, 3, 13, {{"num_outputs", attr_int(3)}}), {data(x)})
                .find("opset 18"),
            std::string::npos);
  EXPECT_NE(error_of(make_node("Split", 1, 2, 18, {{"num_outputs", attr_int(3)}}), {data(x)}), "");
  EXPECT_NE(
      error_of(make_node("Split", 1, 2, 13, {{"split", attr_ints({1, 1})}}), {data(x)}).find("input 1"),
      std::string::npos);
  EXPECT_NE(
      error_of(make_node("Split", 2, 2, 13, {{"axis", attr_int(1)}}), {data(x), data(i64({5, 5}))}),
      "");
}

// --------------------------------------------------------------- Slice

// The spec's own loop: i from the clamped start while i < end (or > end).
std::vector<int64_t> slice_indices(int64_t dim, int64_t start, int64_t end, int64_t step) {
  if (start < 0) start += dim;
  if (end < 0) end += dim;
  std::vector<int64_t> v;
  if (step > 0) {
    start = std::clamp<int64_t>(start, 0, dim);
    end = std::clamp<int64_t>(end, 0, dim);
    for (int64_t i = start; i < end; i += step) v.push_back(i);
  } else {
    start = std::clamp<int64_t>(start, 0, dim - 1);
    end = std::clamp<int64_t>(end, -1, dim - 1);
    for (int64_t i = start; i > end; i += step) {
      v.push_back(i);
      if (i + step > i) break;  // (never: step < 0)
    }
  }
  return v;
}

TEST(OnnxShapeOps, SliceMatchesSpecLoop) {
  const Shape s{4, 5, 6};
  const auto x = iota_f(count(s));
  struct Case {
    std::vector<int64_t> starts, ends, axes, steps;
  };
  const int64_t big = std::numeric_limits<int64_t>::max(),
                small = std::numeric_limits<int64_t>::min();
  const Case cases[] = {
      {{1}, {3}, {}, {}},
      {{0, 1}, {big, -1}, {1, 2}, {}},
      {{-1}, {small}, {0}, {-1}},             // reversed axis 0
      {{5, 0}, {-big, 6}, {-1, 0}, {-2, 3}},  // negative step, clamps
      {{10}, {20}, {2}, {1}},                 // empty
      {{0, 0, 0}, {4, 5, 6}, {0, 1, 2}, {1, 1, 1}},
      {{1, 1}, {4, 5}, {-2, -3}, {2, 3}},
      {{-100}, {100}, {2}, {big}},  // huge step: one element
      {{3}, {-100}, {1}, {small}},  // huge negative step
  };
  for (const Case& c : cases) {
    std::vector<std::vector<int64_t>> sel(s.size());
    for (size_t k = 0; k < s.size(); ++k) sel[k] = slice_indices(s[k], 0, big, 1);
    for (size_t i = 0; i < c.starts.size(); ++i) {
      int64_t a = c.axes.empty() ? int64_t(i) : c.axes[i];
      if (a < 0) a += int64_t(s.size());
      sel[size_t(a)] =
          slice_indices(s[size_t(a)], c.starts[i], c.ends[i], c.steps.empty() ? 1 : c.steps[i]);
    }
    Shape os;
    for (auto& v : sel) os.push_back(int64_t(v.size()));
    std::vector<float> want;
    const Shape st = strides(s);
    for (int64_t i = 0; i < count(os); ++i) {
      Shape idx = unflat(i, os);
      int64_t off = 0;
      for (size_t k = 0; k < s.size(); ++k) off += sel[k][size_t(idx[k])] * st[k];
      want.push_back(x[size_t(off)]);
    }
    std::vector<In> ins{data(f32(x, s)), known(i64(c.starts)), known(i64(c.ends))};
    ins.push_back(c.axes.empty() ? absent() : known(i64(c.axes)));
    ins.push_back(c.steps.empty() ? absent() : known(i64(c.steps)));
    ASSERT_RUN(r, make_node("Slice", 5, 1), ins);
    EXPECT_EQ(r[0].shape, os) << shape_string(c.starts) << shape_string(c.ends);
    EXPECT_EQ(data_of<float>(r[0]), want) << shape_string(c.starts) << shape_string(c.ends);
  }
  // Three inputs only; int32 starts/ends; a big slice for the pool.
  ASSERT_RUN(r3, make_node("Slice", 3, 1),
             {data(f32(x, s)), known(i32({1}, {1})), known(i32({2}, {1}))});
  EXPECT_EQ(r3[0].shape, (Shape{1, 5, 6}));
  auto bx = iota_f(300 * 400);
  ASSERT_RUN(
      rb, make_node("Slice", 4, 1),
      {data(f32(bx, {300, 400})), known(i64({1, 7})), known(i64({299, 390})), known(i64({0, 1}))});
  ASSERT_EQ(rb[0].shape, (Shape{298, 383}));
  EXPECT_EQ(data_of<float>(rb[0])[0], bx[400 + 7]);
  EXPECT_EQ(data_of<float>(rb[0]).back(), bx[298 * 400 + 389]);
}

TEST(OnnxShapeOps, SliceRandomParameters) {
  std::mt19937 rng(33);
  auto pick = [&](int64_t dim) -> int64_t {
    switch (rng() % 4) {
      case 0:
        return int64_t(rng() % (2 * dim + 5)) - dim - 2;  // in and around the range
      case 1:
        return std::numeric_limits<int64_t>::max();
      case 2:
        return std::numeric_limits<int64_t>::min();
      default:
        return int64_t(rng() % (dim + 1));
    }
  };
  for (int iter = 0; iter < 300; ++iter) {
    const size_t rank = 1 + rng() % 4;
    Shape s(rank);
    for (auto& d : s) d = int64_t(rng() % 7);
    std::vector<int64_t> axes(rank);
    std::iota(axes.begin(), axes.end(), 0);
    std::shuffle(axes.begin(), axes.end(), rng);
    axes.resize(1 + rng() % rank);
    std::vector<int64_t> starts, ends, steps;
    std::vector<std::vector<int64_t>> sel(rank);
    for (size_t k = 0; k < rank; ++k) sel[k] = slice_indices(s[k], 0, s[k], 1);
    for (int64_t& a : axes) {
      const int64_t dim = s[size_t(a)];
      starts.push_back(pick(dim));
      ends.push_back(pick(dim));
      int64_t st = int64_t(rng() % 7) - 3;
      if (st == 0) st = rng() % 2 ? std::numeric_limits<int64_t>::min() : 5;
      steps.push_back(st);
      sel[size_t(a)] = slice_indices(dim, starts.back(), ends.back(), st);
      if (rng() % 2) a -= int64_t(rank);  // negative axes too
    }
    std::vector<float> x = iota_f(count(s));
    Shape os;
    for (auto& v : sel) os.push_back(int64_t(v.size()));
    std::vector<float> want;
    const Shape str = strides(s);
    for (int64_t i = 0; i < count(os); ++i) {
      Shape idx = unflat(i, os);
      int64_t off = 0;
      for (size_t k = 0; k < rank; ++k) off += sel[k][size_t(idx[k])] * str[k];
      want.push_back(x[size_t(off)]);
    }
    ASSERT_RUN(r, make_node("Slice", 5, 1),
               {data(f32(x, s)), known(i64(starts)), known(i64(ends)), known(i64(axes)),
                known(i64(steps))});
    ASSERT_EQ(r[0].shape, os) << iter;
    ASSERT_EQ(data_of<float>(r[0]), want) << iter;
  }
}

TEST(OnnxShapeOps, SliceRefusals) {
  auto x = f32(iota_f(6), {2, 3});
  EXPECT_NE(error_of(make_node("Slice", 5, 1),
                     {data(x), known(i64({0})), known(i64({1})), absent(), known(i64({0}))})
                .find("step is 0"),
            std::string::npos);
  EXPECT_NE(error_of(make_node("Slice", 3, 1), {data(x), known(i64({0, 0})), known(i64({1}))})
                .find("same length"),
            std::string::npos);
  EXPECT_NE(error_of(make_node("Slice", 4, 1),
                     {data(x), known(i64({0})), known(i64({1})), known(i64({2}))}),
            "");
  EXPECT_NE(error_of(make_node("Slice", 4, 1),
                     {data(x), known(i64({0, 0})), known(i64({1, 1})), known(i64({1, -1}))})
                .find("twice"),
            std::string::npos);
  EXPECT_NE(error_of(make_node("Slice", 3, 1), {data(x), data(i64({0})), known(i64({1}))})
                .find("known before"),
            std::string::npos);
}

// --------------------------------------------------------------- Gather

TEST(OnnxShapeOps, GatherAxesAndNegativeIndices) {
  const Shape s{3, 4, 5};
  auto x = iota_f(60);
  for (int64_t axis : {0, 1, 2, -1}) {
    const int64_t a = axis < 0 ? axis + 3 : axis;
    std::vector<int64_t> idx{2, -1, 0, 1, -2, 2};
    ASSERT_RUN(r, make_node("Gather", 2, 1, 13, {{"axis", attr_int(axis)}}),
               {data(f32(x, s)), data(i64(idx, {2, 3}))});
    Shape os(s.begin(), s.begin() + a);
    os.push_back(2);
    os.push_back(3);
    os.insert(os.end(), s.begin() + a + 1, s.end());
    ASSERT_EQ(r[0].shape, os);
    std::vector<float> want;
    const Shape st = strides(s);
    for (int64_t i = 0; i < count(os); ++i) {
      Shape oi = unflat(i, os);
      int64_t off = 0;
      for (int64_t k = 0; k < a; ++k) off += oi[size_t(k)] * st[size_t(k)];
      int64_t j = idx[size_t(oi[size_t(a)] * 3 + oi[size_t(a) + 1])];
      if (j < 0) j += s[size_t(a)];
      off += j * st[size_t(a)];
      for (int64_t k = a + 1; k < 3; ++k) off += oi[size_t(k + 1)] * st[size_t(k)];
      want.push_back(x[size_t(off)]);
    }
    EXPECT_EQ(data_of<float>(r[0]), want) << "axis " << axis;
  }
  // Scalar index (the axis goes away), int32 indices, int64 data (shapes).
  ASSERT_RUN(sc, make_node("Gather", 2, 1), {known(i64({2, 128, 768})), known(i64({-1}, {}))});
  EXPECT_EQ(sc[0].shape, Shape{});
  EXPECT_EQ(data_of<int64_t>(sc[0]), (std::vector<int64_t>{768}));
  ASSERT_RUN(g32, make_node("Gather", 2, 1), {data(f32(x, s)), data(i32({1}, {1}))});
  EXPECT_EQ(data_of<float>(g32[0]), iota_f(20, 20));
}

TEST(OnnxShapeOps, GatherEmbeddingRowsOverThePool) {
  const int64_t vocab = 500, hidden = 96, n = 300;
  auto table = test::random_normal(size_t(vocab * hidden), 7);
  std::vector<int64_t> ids(n);
  std::mt19937 rng(3);
  for (auto& i : ids) i = int64_t(rng() % vocab);
  ASSERT_RUN(r, make_node("Gather", 2, 1),
             {data(f32(table, {vocab, hidden})), data(i64(ids, {3, 100}))});
  ASSERT_EQ(r[0].shape, (Shape{3, 100, hidden}));
  auto got = data_of<float>(r[0]);
  for (int64_t j = 0; j < n; ++j)
    ASSERT_TRUE(std::equal(got.begin() + j * hidden, got.begin() + (j + 1) * hidden,
                           table.begin() + ids[size_t(j)] * hidden))
        << j;
}

TEST(OnnxShapeOps, GatherIndexOutOfRange) {
  auto x = f32(iota_f(12), {3, 4});
  // From data: run() fails, naming the value and the bound.
  EXPECT_EQ(error_of(make_node("Gather", 2, 1), {data(x), data(i64({0, 3}))}),
            "index 3 is out of range for axis 0 of size 3");
  EXPECT_EQ(
      error_of(make_node("Gather", 2, 1, 13, {{"axis", attr_int(1)}}), {data(x), data(i32({-5}, {1}))}),
      "index -5 is out of range for axis 1 of size 4");
  // Known before running: infer() fails.
  EXPECT_NE(error_of(make_node("Gather", 2, 1), {data(x), known(i64({7}))}).find("index 7"),
            std::string::npos);
  EXPECT_NE(
      error_of(make_node("Gather", 2, 1), {data(x), data(f32({0}, {1}))}).find("int64 or int32"),
      std::string::npos);
  EXPECT_NE(error_of(make_node("Gather", 2, 1, 13, {{"axis", attr_int(2)}}), {data(x), data(i64({0}))}),
            "");
}

// ----------------------------------------------------------------- Cast

Tensor raw(DType t, Shape s, const void* p, size_t bytes) {
  auto r = Tensor::make(t, std::move(s), std::string(static_cast<const char*>(p), bytes));
  EXPECT_TRUE(r.is_ok());
  return *r;
}

TEST(OnnxShapeOps, CastFloatToIntTruncatesWrapsAndSaturates) {
  // Within int32 (int64 for the 64-bit and uint32 targets) these are what
  // ONNX Runtime gives on x86-64 (checked with onnxruntime-node); beyond, it
  // gives x86's "integer indefinite" where cairn saturates, and NaN is 0.
  const float nan = std::numeric_limits<float>::quiet_NaN(),
              inf = std::numeric_limits<float>::infinity();
  std::vector<float> x{1.9f, -1.9f, 0.5f,   -0.5f,   3e9f,   -3e9f, nan,
                       inf,  -inf,  127.5f, -128.7f, 255.9f, 1e20f, 300.7f};
  const int64_t n = int64_t(x.size());
  ASSERT_RUN(a, make_node("Cast", 1, 1, 13, {{"to", attr_int(6)}}), {data(f32(x, {n}))});  // int32
  EXPECT_EQ(data_of<int32_t>(a[0]),
            (std::vector<int32_t>{1, -1, 0, 0, INT32_MAX, INT32_MIN, 0, INT32_MAX, INT32_MIN, 127,
                                  -128, 255, INT32_MAX, 300}));
  ASSERT_RUN(b, make_node("Cast", 1, 1, 13, {{"to", attr_int(3)}}),
             {data(f32(x, {n}))});  // int8: via int32, wraps
  EXPECT_EQ(data_of<int8_t>(b[0]),
            (std::vector<int8_t>{1, -1, 0, 0, -1, 0, 0, -1, 0, 127, -128, -1, -1, 44}));
  ASSERT_RUN(c, make_node("Cast", 1, 1, 13, {{"to", attr_int(2)}}), {data(f32(x, {n}))});  // uint8
  EXPECT_EQ(data_of<uint8_t>(c[0]),
            (std::vector<uint8_t>{1, 255, 0, 0, 255, 0, 0, 255, 0, 127, 128, 255, 255, 44}));
  ASSERT_RUN(d, make_node("Cast", 1, 1, 13, {{"to", attr_int(7)}}), {data(f32(x, {n}))});  // int64
  EXPECT_EQ(data_of<int64_t>(d[0]),
            (std::vector<int64_t>{1, -1, 0, 0, 3000000000, -3000000000, 0, INT64_MAX, INT64_MIN,
                                  127, -128, 255, INT64_MAX, 300}));
  ASSERT_RUN(e, make_node("Cast", 1, 1, 13, {{"to", attr_int(13)}}), {data(f32(x, {n}))});  // uint64
  EXPECT_EQ(data_of<uint64_t>(e[0]),
            (std::vector<uint64_t>{1, UINT64_MAX, 0, 0, 3000000000, uint64_t(-3000000000LL), 0,
                                   UINT64_MAX, uint64_t(1) << 63, 127, uint64_t(-128LL), 255,
                                   UINT64_MAX, 300}));
  ASSERT_RUN(u, make_node("Cast", 1, 1, 13, {{"to", attr_int(12)}}),
             {data(f32(x, {n}))});  // uint32: via int64
  EXPECT_EQ(data_of<uint32_t>(u[0])[1], UINT32_MAX);
  EXPECT_EQ(data_of<uint32_t>(u[0])[4], 3000000000u);
  ASSERT_RUN(f, make_node("Cast", 1, 1, 13, {{"to", attr_int(9)}}), {data(f32(x, {n}))});  // bool
  EXPECT_EQ(data_of<uint8_t>(f[0]),
            (std::vector<uint8_t>{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}));
  ASSERT_RUN(z, make_node("Cast", 1, 1, 13, {{"to", attr_int(9)}}), {data(f32({0.f, -0.f, 2.f}, {3}))});
  EXPECT_EQ(data_of<uint8_t>(z[0]), (std::vector<uint8_t>{0, 0, 1}));
}

TEST(OnnxShapeOps, CastIntegersWrapAndConvert) {
  std::vector<int64_t> x{0, 1, -1, 255, 256, -129, INT64_MAX, INT64_MIN, (int64_t(1) << 24) + 1};
  const int64_t n = int64_t(x.size());
  ASSERT_RUN(a, make_node("Cast", 1, 1, 13, {{"to", attr_int(3)}}),
             {data(i64(x, {n}))});  // int8: wraps
  std::vector<int8_t> want8;
  for (int64_t v : x) want8.push_back(int8_t(uint8_t(uint64_t(v) & 0xff)));
  EXPECT_EQ(data_of<int8_t>(a[0]), want8);
  ASSERT_RUN(b, make_node("Cast", 1, 1, 13, {{"to", attr_int(1)}}),
             {data(i64(x, {n}))});  // float: one rounding
  std::vector<float> wantf;
  for (int64_t v : x) wantf.push_back(float(v));
  EXPECT_EQ(data_of<float>(b[0]), wantf);
  ASSERT_RUN(w32, make_node("Cast", 1, 1, 13, {{"to", attr_int(6)}}),
             {data(i64(x, {n}))});  // int32: wraps
  std::vector<int32_t> want32;
  for (int64_t v : x) want32.push_back(int32_t(uint32_t(uint64_t(v))));
  EXPECT_EQ(data_of<int32_t>(w32[0]), want32);
  ASSERT_RUN(back64, make_node("Cast", 1, 1, 13, {{"to", attr_int(7)}}), {data(w32[0])});
  EXPECT_EQ(data_of<int64_t>(back64[0]), std::vector<int64_t>(want32.begin(), want32.end()));
  ASSERT_RUN(c, make_node("Cast", 1, 1, 13, {{"to", attr_int(11)}}),
             {data(i32({-3, 7}, {2}))});  // double
  EXPECT_EQ(data_of<double>(c[0]), (std::vector<double>{-3, 7}));
  ASSERT_RUN(d, make_node("Cast", 1, 1, 13, {{"to", attr_int(12)}}),
             {data(i32({-1, 5}, {2}))});  // uint32
  EXPECT_EQ(data_of<uint32_t>(d[0]), (std::vector<uint32_t>{UINT32_MAX, 5}));
  // bool -> float and int64 (attention masks).
  const uint8_t bits[] = {1, 0, 1};
  ASSERT_RUN(e, make_node("Cast", 1, 1, 13, {{"to", attr_int(1)}}),
             {data(raw(DType::Bool, {3}, bits, 3))});
  EXPECT_EQ(data_of<float>(e[0]), (std::vector<float>{1, 0, 1}));
  ASSERT_RUN(g, make_node("Cast", 1, 1, 13, {{"to", attr_int(9)}}), {data(i64({0, 5, -5}, {3}))});
  EXPECT_EQ(data_of<uint8_t>(g[0]), (std::vector<uint8_t>{0, 1, 1}));
  // uint64 beyond int64 to double and to int64 (wraps).
  const uint64_t u[] = {UINT64_MAX, 1};
  ASSERT_RUN(h, make_node("Cast", 1, 1, 13, {{"to", attr_int(7)}}),
             {data(raw(DType::UInt64, {2}, u, 16))});
  EXPECT_EQ(data_of<int64_t>(h[0]), (std::vector<int64_t>{-1, 1}));
}

TEST(OnnxShapeOps, CastHalfTypesAndDoubles) {
  std::vector<float> x{0.f, 1.f, -2.5f, 65504.f, 1e6f, 3.14159f, 1e-8f};
  const int64_t n = int64_t(x.size());
  ASSERT_RUN(h, make_node("Cast", 1, 1, 13, {{"to", attr_int(10)}}), {data(f32(x, {n}))});
  std::vector<uint16_t> want;
  for (float v : x) want.push_back(f32_to_f16(v));
  EXPECT_EQ(data_of<uint16_t>(h[0]), want);
  EXPECT_EQ(data_of<uint16_t>(h[0])[4], 0x7c00);  // 1e6 overflows to +inf
  // And back: float16 -> float32 is exact.
  ASSERT_RUN(back, make_node("Cast", 1, 1, 13, {{"to", attr_int(1)}}), {data(h[0])});
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(data_of<float>(back[0])[i], f16_to_f32(want[i]));
  ASSERT_RUN(bf, make_node("Cast", 1, 1, 13, {{"to", attr_int(16)}}), {data(f32(x, {n}))});
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(data_of<uint16_t>(bf[0])[i], f32_to_bf16(x[i]));
  // float64 beyond float's range gives +-inf, NaN stays NaN.
  const double d[] = {1e300, -1e300, std::nan(""), 0.1, 3.4028235e38};
  ASSERT_RUN(f, make_node("Cast", 1, 1, 13, {{"to", attr_int(1)}}),
             {data(raw(DType::Float64, {5}, d, sizeof d))});
  auto got = data_of<float>(f[0]);
  EXPECT_EQ(got[0], std::numeric_limits<float>::infinity());
  EXPECT_EQ(got[1], -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(got[2]));
  EXPECT_EQ(got[3], 0.1f);
  EXPECT_EQ(got[4], std::numeric_limits<float>::max());
  // Same dtype: a copy; large: over the pool.
  auto big = test::random_normal(50000, 11, 100.f);
  ASSERT_RUN(same, make_node("Cast", 1, 1, 13, {{"to", attr_int(1)}}), {data(f32(big, {50000}))});
  EXPECT_EQ(data_of<float>(same[0]), big);
  ASSERT_RUN(bi, make_node("Cast", 1, 1, 13, {{"to", attr_int(6)}}), {data(f32(big, {50000}))});
  auto bg = data_of<int32_t>(bi[0]);
  for (size_t i = 0; i < big.size(); ++i) ASSERT_EQ(bg[i], int32_t(std::trunc(big[i]))) << i;
}

TEST(OnnxShapeOps, CastRefusals) {
  auto x = f32({1}, {1});
  EXPECT_EQ(error_of(make_node("Cast", 1, 1, 13, {{"to", attr_int(8)}}), {data(x)}),
            "Cast to string is not supported");
  EXPECT_NE(error_of(make_node("Cast", 1, 1, 13, {{"to", attr_int(14)}}), {data(x)}).find("complex"),
            std::string::npos);
  EXPECT_NE(error_of(make_node("Cast", 1, 1, 19, {{"to", attr_int(17)}}), {data(x)}).find("17"),
            std::string::npos);
  EXPECT_NE(error_of(make_node("Cast", 1, 1, 13, {{"to", attr_int(0)}}), {data(x)}), "");
  EXPECT_NE(error_of(make_node("Cast", 1, 1, 13), {data(x)}).find("'to' is required"),
            std::string::npos);
}

// ----------------------------------------------------------- Reduce ops

// Reference reduction over any axes, in double.
std::vector<double> reduce_ref(const std::vector<float>& x, const Shape& s,
                               std::vector<int64_t> axes, bool mean, Shape& out_shape,
                               bool keepdims) {
  std::vector<bool> red(s.size(), axes.empty());
  for (int64_t a : axes) red[size_t(a < 0 ? a + int64_t(s.size()) : a)] = true;
  Shape os;
  for (size_t k = 0; k < s.size(); ++k) os.push_back(red[k] ? 1 : s[k]);
  std::vector<double> sum(size_t(count(os)), 0.0);
  const Shape ost = strides(os);
  for (int64_t i = 0; i < count(s); ++i) {
    Shape idx = unflat(i, s);
    int64_t off = 0;
    for (size_t k = 0; k < s.size(); ++k) off += red[k] ? 0 : idx[k] * ost[k];
    sum[size_t(off)] += x[size_t(i)];
  }
  if (mean)
    for (double& v : sum) v /= double(count(s) / std::max<int64_t>(count(os), 1));
  out_shape.clear();
  for (size_t k = 0; k < s.size(); ++k)
    if (!red[k] || keepdims) out_shape.push_back(red[k] ? 1 : s[k]);
  return sum;
}

TEST(OnnxShapeOps, ReduceMeanSumMatchReference) {
  struct Case {
    Shape s;
    std::vector<int64_t> axes;
  };
  const Case cases[] = {
      {{2, 3, 768}, {-1}},                       // LayerNorm-like rows
      {{4, 5, 6}, {1}},                          // [outer, n, inner]
      {{4, 5, 6}, {0}},    {{4, 5, 6}, {0, 2}},  // two groups: the plain loop
      {{4, 5, 6}, {}},                           // all
      {{2, 1, 3}, {1}},                          // only a size-1 axis
      {{64, 300, 8}, {1}},                       // big: over the pool
      {{300, 256}, {-1}},                        // big rows
      {{7}, {0}},
  };
  for (const Case& c : cases) {
    auto x = test::random_normal(size_t(count(c.s)), 5);
    for (bool keep : {true, false})
      for (bool mean : {true, false}) {
        Shape want_shape;
        auto want = reduce_ref(x, c.s, c.axes, mean, want_shape, keep);
        // ReduceMean at opset 13 (axes attribute), ReduceSum at 13 (axes input).
        Node node = mean ? make_node("ReduceMean", 1, 1, 13, {{"keepdims", attr_int(keep)}})
                         : make_node("ReduceSum", 2, 1, 13, {{"keepdims", attr_int(keep)}});
        std::vector<In> ins{data(f32(x, c.s))};
        if (mean && !c.axes.empty()) node.attributes["axes"] = attr_ints(c.axes);
        if (!mean) ins.push_back(c.axes.empty() ? absent() : known(i64(c.axes)));
        ASSERT_RUN(r, node, ins);
        EXPECT_EQ(r[0].shape, want_shape) << shape_string(c.s);
        auto got = data_of<float>(r[0]);
        ASSERT_EQ(got.size(), want.size());
        for (size_t i = 0; i < got.size(); ++i)
          ASSERT_NEAR(got[i], want[i], 1e-5 * (1 + std::fabs(want[i])) * (mean ? 1 : 30))
              << shape_string(c.s) << " axes " << shape_string(c.axes) << " mean " << mean << " i "
              << i;
      }
  }
}

TEST(OnnxShapeOps, ReduceOpsetForms) {
  auto x = f32(iota_f(24), {2, 3, 4});
  // ReduceMean 18: axes as an input; the attribute refused.
  ASSERT_RUN(a, make_node("ReduceMean", 2, 1, 18, {{"keepdims", attr_int(0)}}),
             {data(x), known(i64({-1}))});
  EXPECT_EQ(a[0].shape, (Shape{2, 3}));
  EXPECT_EQ(data_of<float>(a[0]), (std::vector<float>{1.5, 5.5, 9.5, 13.5, 17.5, 21.5}));
  EXPECT_NE(error_of(make_node("ReduceMean", 1, 1, 18, {{"axes", attr_ints({0})}}), {data(x)})
                .find("input 1"),
            std::string::npos);
  EXPECT_NE(
      error_of(make_node("ReduceMean", 2, 1, 13), {data(x), known(i64({0}))}).find("expects 1"),
      std::string::npos);
  EXPECT_NE(
      error_of(make_node("ReduceSum", 1, 1, 13, {{"axes", attr_ints({0})}}), {data(x)}).find("input 1"),
      std::string::npos);
  // noop_with_empty_axes: no axes -> the input unchanged.
  ASSERT_RUN(b, make_node("ReduceSum", 2, 1, 13, {{"noop_with_empty_axes", attr_int(1)}}),
             {data(x), absent()});
  EXPECT_EQ(b[0].shape, (Shape{2, 3, 4}));
  EXPECT_EQ(data_of<float>(b[0]), iota_f(24));
  ASSERT_RUN(b2, make_node("ReduceSum", 2, 1, 13, {{"noop_with_empty_axes", attr_int(1)}}),
             {data(x), known(i64({}, {0}))});
  EXPECT_EQ(b2[0].shape, (Shape{2, 3, 4}));
  ASSERT_RUN(c, make_node("ReduceSum", 1, 1, 13, {{"keepdims", attr_int(0)}}), {data(x)});
  EXPECT_EQ(c[0].shape, Shape{});
  EXPECT_EQ(data_of<float>(c[0]), (std::vector<float>{276}));
  // Integer ReduceSum; ReduceMean of ints refused; axes from data refused.
  ASSERT_RUN(d, make_node("ReduceSum", 2, 1),
             {data(i64({1, 2, 3, INT64_MAX, 1, 0}, {2, 3})), known(i64({1}))});
  EXPECT_EQ(data_of<int64_t>(d[0]), (std::vector<int64_t>{6, INT64_MIN}));  // wraps, no UB
  ASSERT_RUN(e, make_node("ReduceSum", 2, 1),
             {data(i32({1, 2, 3, 4, 5, 6}, {2, 3})), known(i64({0}))});
  EXPECT_EQ(data_of<int32_t>(e[0]), (std::vector<int32_t>{5, 7, 9}));
  EXPECT_NE(error_of(make_node("ReduceMean", 1, 1), {data(i64({1}))}).find("not supported"),
            std::string::npos);
  EXPECT_NE(error_of(make_node("ReduceSum", 2, 1), {data(x), data(i64({0}))}).find("known before"),
            std::string::npos);
  EXPECT_NE(error_of(make_node("ReduceSum", 2, 1), {data(x), known(i64({3}))}), "");
  EXPECT_NE(error_of(make_node("ReduceSum", 2, 1), {data(x), known(i64({1, -2}))}).find("twice"),
            std::string::npos);
  // Empty reduced axis: sum 0, and mean 0 as ONNX Runtime gives (not NaN).
  ASSERT_RUN(z, make_node("ReduceSum", 2, 1), {data(f32({}, {2, 0})), known(i64({1}))});
  EXPECT_EQ(data_of<float>(z[0]), (std::vector<float>{0, 0}));
  ASSERT_RUN(zm, make_node("ReduceMean", 1, 1, 13, {{"axes", attr_ints({1})}}),
             {data(f32({}, {2, 0}))});
  EXPECT_EQ(zm[0].shape, (Shape{2, 1}));
  EXPECT_EQ(data_of<float>(zm[0]), (std::vector<float>{0, 0}));
}

// --------------------------------------------------------------- ArgMax

TEST(OnnxShapeOps, ArgMax) {
  // Ties: first index unless select_last_index.
  auto x = f32({1, 5, 5, 2, 7, 7, 0, 7, 3, 3, 3, 3}, {3, 4});
  ASSERT_RUN(a, make_node("ArgMax", 1, 1, 13, {{"axis", attr_int(1)}}), {data(x)});
  EXPECT_EQ(a[0].shape, (Shape{3, 1}));
  EXPECT_EQ(data_of<int64_t>(a[0]), (std::vector<int64_t>{1, 0, 0}));
  ASSERT_RUN(b,
             make_node("ArgMax", 1, 1, 13,
                       {{"axis", attr_int(-1)}, {"select_last_index", attr_int(1)}, {"keepdims", attr_int(0)}}),
             {data(x)});
  EXPECT_EQ(b[0].shape, (Shape{3}));
  EXPECT_EQ(data_of<int64_t>(b[0]), (std::vector<int64_t>{2, 3, 3}));
  ASSERT_RUN(c, make_node("ArgMax", 1, 1), {data(x)});  // axis 0
  EXPECT_EQ(c[0].shape, (Shape{1, 4}));
  EXPECT_EQ(data_of<int64_t>(c[0]), (std::vector<int64_t>{1, 1, 0, 1}));
  // NaN ranks above numbers; int64 input.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  ASSERT_RUN(d, make_node("ArgMax", 1, 1, 13, {{"axis", attr_int(0)}}),
             {data(f32({1, nan, 9, nan}, {4}))});
  EXPECT_EQ(data_of<int64_t>(d[0]), (std::vector<int64_t>{1}));
  ASSERT_RUN(e, make_node("ArgMax", 1, 1, 13, {{"keepdims", attr_int(0)}}),
             {data(i64({-5, -2, -9}, {3}))});
  EXPECT_EQ(data_of<int64_t>(e[0]), (std::vector<int64_t>{1}));
  // Big, middle axis, against a plain loop.
  const Shape s{16, 500, 9};
  auto big = test::random_normal(size_t(count(s)), 9);
  ASSERT_RUN(g, make_node("ArgMax", 1, 1, 13, {{"axis", attr_int(1)}}), {data(f32(big, s))});
  auto got = data_of<int64_t>(g[0]);
  for (int64_t o = 0; o < 16; ++o)
    for (int64_t i = 0; i < 9; ++i) {
      int64_t best = 0;
      for (int64_t r = 1; r < 500; ++r)
        if (big[size_t((o * 500 + r) * 9 + i)] > big[size_t((o * 500 + best) * 9 + i)]) best = r;
      ASSERT_EQ(got[size_t(o * 9 + i)], best);
    }
  EXPECT_NE(error_of(make_node("ArgMax", 1, 1, 13, {{"axis", attr_int(2)}}), {data(x)}), "");
  EXPECT_NE(error_of(make_node("ArgMax", 1, 1), {data(f32({}, {0, 3}))}).find("empty"),
            std::string::npos);
}

// ----------------------------------------------------------------- TopK

TEST(OnnxShapeOps, TopKMatchesStableSort) {
  const Shape s{3, 50, 4};
  auto x = test::random_normal(size_t(count(s)), 13);
  for (size_t i = 0; i < x.size(); i += 7) x[i] = 0.25f;  // plenty of ties
  for (int64_t axis : {1, -1, 0})
    for (int64_t k : {0, 1, 3})
      for (int largest : {1, 0}) {
        const int64_t a = axis < 0 ? axis + 3 : axis;
        ASSERT_RUN(r,
                   make_node("TopK", 2, 2, 13, {{"axis", attr_int(axis)}, {"largest", attr_int(largest)}}),
                   {data(f32(x, s)), known(i64({k}))});
        Shape os = s;
        os[size_t(a)] = k;
        ASSERT_EQ(r[0].shape, os);
        ASSERT_EQ(r[1].shape, os);
        ASSERT_EQ(r[1].dtype, DType::Int64);
        auto vals = data_of<float>(r[0]);
        auto idx = data_of<int64_t>(r[1]);
        const Shape st = strides(s), ost = strides(os);
        // Each column: indices stably sorted by value, first k.
        for (int64_t c = 0; c < count(s) / s[size_t(a)]; ++c) {
          Shape cs = s;
          cs[size_t(a)] = 1;
          Shape ci = unflat(c, cs);
          int64_t base = 0, obase = 0;
          for (size_t q = 0; q < 3; ++q) base += ci[q] * st[q], obase += ci[q] * ost[q];
          std::vector<int64_t> order(size_t(s[size_t(a)]));
          std::iota(order.begin(), order.end(), 0);
          auto val = [&](int64_t j) { return x[size_t(base + j * st[size_t(a)])]; };
          std::stable_sort(order.begin(), order.end(), [&](int64_t p, int64_t q) {
            return largest ? val(p) > val(q) : val(p) < val(q);
          });
          for (int64_t j = 0; j < k; ++j) {
            ASSERT_EQ(idx[size_t(obase + j * ost[size_t(a)])], order[size_t(j)])
                << "axis " << axis << " k " << k;
            ASSERT_EQ(vals[size_t(obase + j * ost[size_t(a)])], val(order[size_t(j)]));
          }
        }
      }
}

TEST(OnnxShapeOps, TopKBigAndRefusals) {
  // Over the pool: 64 rows of 1000, top 10.
  auto x = test::random_normal(64000, 17);
  ASSERT_RUN(r, make_node("TopK", 2, 2), {data(f32(x, {64, 1000})), known(i64({10}))});
  auto idx = data_of<int64_t>(r[1]);
  for (int64_t row = 0; row < 64; ++row) {
    std::vector<float> v(x.begin() + row * 1000, x.begin() + (row + 1) * 1000);
    std::vector<float> sorted = v;
    std::sort(sorted.begin(), sorted.end(), std::greater<>());
    for (int j = 0; j < 10; ++j) ASSERT_EQ(v[size_t(idx[size_t(row * 10 + j)])], sorted[size_t(j)]);
  }
  auto small = f32(iota_f(6), {2, 3});
  EXPECT_NE(
      error_of(make_node("TopK", 2, 2), {data(small), known(i64({4}))}).find("k 4 is out of range"),
      std::string::npos);
  EXPECT_NE(error_of(make_node("TopK", 2, 2), {data(small), known(i64({-1}))}), "");
  EXPECT_NE(error_of(make_node("TopK", 2, 2), {data(small), data(i64({1}))}).find("known before"),
            std::string::npos);
  EXPECT_NE(error_of(make_node("TopK", 2, 1), {data(small), known(i64({1}))}).find("2 outputs"),
            std::string::npos);
  EXPECT_NE(
      error_of(make_node("TopK", 2, 2, 13, {{"largest", attr_int(2)}}), {data(small), known(i64({1}))}),
      "");
  // NaN is the largest value.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  ASSERT_RUN(n, make_node("TopK", 2, 2), {data(f32({1, nan, 3}, {3})), known(i64({2}))});
  EXPECT_EQ(data_of<int64_t>(n[1]), (std::vector<int64_t>{1, 2}));
}

// A plan made for one value of a known input, run with another (a plan is
// reused for equal shapes): refused, never written past the output.
std::string run_with_other_value(const Node& node, const Tensor& x, const Tensor& planned,
                                 const Tensor& actual, const Tensor* extra = nullptr) {
  auto op = find_op(node.op_type)(NodeContext{node, {}});
  if (!op) return op.status().message();
  TensorView xv{x.dtype, x.shape, const_cast<char*>(x.data.data())};
  TensorView pv{planned.dtype, planned.shape, const_cast<char*>(planned.data.data())};
  TensorView av{actual.dtype, actual.shape, const_cast<char*>(actual.data.data())};
  TensorView ev =
      extra ? TensorView{extra->dtype, extra->shape, const_cast<char*>(extra->data.data())}
            : TensorView{};
  std::vector<TensorInfo> in{{x.dtype, x.shape, nullptr}, {planned.dtype, planned.shape, &pv}};
  if (extra) in.push_back({ev.dtype, ev.shape, &ev});
  bool present[] = {true, true, true};
  std::vector<TensorInfo> out(1);
  Status st = (*op)->infer(in, std::span<const bool>(present, in.size()), out);
  if (!st) return st.message();
  std::string buf(size_t(count(out[0].shape)) * values::dtype_size(out[0].dtype), '\0');
  TensorView yv{out[0].dtype, out[0].shape, buf.data()};
  const TensorView* ins[] = {&xv, &av, &ev};
  TensorView* outs[] = {&yv};
  st = (*op)->run(
      RunArgs{std::span<const TensorView* const>(ins, in.size()), outs, nullptr, pool()});
  return st ? "" : st.message();
}

TEST(OnnxShapeOps, RunRefusesValuesThePlanWasNotMadeFor) {
  auto x = f32(iota_f(24), {2, 3, 4});
  EXPECT_EQ(run_with_other_value(make_node("ReduceSum", 2, 1), x, i64({1}), i64({1})), "");
  EXPECT_EQ(run_with_other_value(make_node("ReduceSum", 2, 1), x, i64({1}), i64({2})),
            "axes differ from those the plan was made for");
  EXPECT_EQ(run_with_other_value(make_node("ReduceSum", 2, 1, 13, {{"keepdims", attr_int(0)}}), x,
                                 i64({1}), i64({7})),
            "axes differ from those the plan was made for");
  const Tensor ends = i64({3});
  EXPECT_EQ(run_with_other_value(make_node("Slice", 3, 1), x, i64({1}), i64({1}), &ends), "");
  EXPECT_EQ(run_with_other_value(make_node("Slice", 3, 1), x, i64({1}), i64({0}), &ends),
            "starts/ends/axes/steps differ from those the plan was made for");
}

TEST(OnnxShapeOps, ShapeChainsOnSmallInt64Tensors) {
  // Shape -> Gather -> Unsqueeze -> Concat -> Reshape, as exported graphs do.
  Tensor x{DType::Float32, {2, 7, 12}, {}};
  ASSERT_RUN(sh, make_node("Shape", 1, 1), {data(x)});
  ASSERT_RUN(g, make_node("Gather", 2, 1), {known(sh[0]), known(i64({0}, {}))});
  ASSERT_RUN(u, make_node("Unsqueeze", 2, 1), {known(g[0]), known(i64({0}))});
  ASSERT_RUN(c, make_node("Concat", 3, 1, 13, {{"axis", attr_int(0)}}),
             {known(u[0]), known(i64({-1})), known(i64({3, 4}))});
  EXPECT_EQ(data_of<int64_t>(c[0]), (std::vector<int64_t>{2, -1, 3, 4}));
  ASSERT_RUN(r, make_node("Reshape", 2, 1), {data(f32(iota_f(168), {2, 7, 12})), known(c[0])});
  EXPECT_EQ(r[0].shape, (Shape{2, 7, 3, 4}));
}

}  // namespace
}  // namespace cairn::onnx
