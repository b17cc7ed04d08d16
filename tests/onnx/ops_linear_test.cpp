// tests/onnx/ops_linear_test.cpp — MatMul, Gemm, Conv and the pools (onnx/ops_linear.cpp)
// against plain loops computed here in double, with constant (packed at load)
// and run-time operands, and the shapes and attributes they must refuse.
// Tolerance: 1e-5 · sum |terms| + 1e-5 for products (float sums), 1e-5
// relative for pools (one float sum of a few terms, or exact for max).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/thread_pool.h"
#include "onnx/op.h"
#include "op_harness.h"

namespace cairn::onnx {
namespace {

// ---- helpers ----

struct Tensor {
  Shape shape;
  std::vector<float> data;
  int64_t count() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
};

Tensor random_tensor(Shape shape, uint32_t seed) {
  Tensor t{std::move(shape), {}};
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  t.data.resize(size_t(t.count()));
  for (float& x : t.data) x = d(rng);
  return t;
}

using harness::Attrs;

Attribute ints_attr(std::vector<int64_t> v) { return harness::attr_ints(std::move(v)); }
Attribute int_attr(int64_t v) { return harness::attr_int(v); }
Attribute float_attr(double v) { return harness::attr_float(v); }
Attribute string_attr(std::string v) { return harness::attr_string(std::move(v)); }

// Makes the op (inputs marked in `constant` are given to the factory), infers,
// runs; returns the output or the first error.
Result<Tensor> run_op(const std::string& op, std::vector<const Tensor*> in, Attrs attrs = {},
                      std::vector<bool> constant = {}, int64_t opset = 17) {
  std::vector<TensorView> views(in.size());
  std::vector<harness::OpInput> ins(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (!in[i]) continue;
    views[i] = TensorView{DType::Float32, in[i]->shape, const_cast<float*>(in[i]->data.data())};
    ins[i] = harness::OpInput{&views[i], i < constant.size() && constant[i]};
  }
  CAIRN_ASSIGN_OR_RETURN(auto outs,
                         harness::run_op_node(harness::make_node(op, in.size(), 1, std::move(attrs), opset), ins));
  Tensor out{outs[0].shape, std::vector<float>(outs[0].data.size() / sizeof(float))};
  if (!out.data.empty()) std::memcpy(out.data.data(), outs[0].data.data(), outs[0].data.size());
  return out;
}

void expect_close(const Tensor& got, const Shape& shape, const std::vector<double>& ref,
                  const std::vector<double>& mag, const std::string& what) {
  ASSERT_EQ(got.shape, shape) << what;
  ASSERT_EQ(got.data.size(), ref.size()) << what;
  for (size_t i = 0; i < ref.size(); ++i)
    ASSERT_NEAR(got.data[i], ref[i], 1e-5 * mag[i] + 1e-5) << what << " at " << i;
}

void expect_refused(const Result<Tensor>& r, const std::string& needle) {
  ASSERT_FALSE(r.is_ok()) << "expected an error containing '" << needle << "'";
  EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
}

// ---- MatMul ----

// numpy matmul in double.
void matmul_ref(const Tensor& a, const Tensor& b, Shape* out_shape, std::vector<double>* out,
                std::vector<double>* mag) {
  Shape as = a.shape.size() == 1 ? Shape{1, a.shape[0]} : a.shape;
  Shape bs = b.shape.size() == 1 ? Shape{b.shape[0], 1} : b.shape;
  const int64_t m = as[as.size() - 2], k = as.back(), n = bs.back();
  const size_t r = std::max(as.size(), bs.size()) - 2;
  Shape ab(r, 1), bb(r, 1), batch(r);
  for (size_t i = 0; i < as.size() - 2; ++i) ab[r - (as.size() - 2) + i] = as[i];
  for (size_t i = 0; i < bs.size() - 2; ++i) bb[r - (bs.size() - 2) + i] = bs[i];
  int64_t nb = 1;
  for (size_t i = 0; i < r; ++i) nb *= (batch[i] = std::max(ab[i], bb[i]));
  *out_shape = batch;
  if (a.shape.size() > 1) out_shape->push_back(m);
  if (b.shape.size() > 1) out_shape->push_back(n);
  out->assign(size_t(nb * m * n), 0);
  mag->assign(out->size(), 0);
  for (int64_t t = 0; t < nb; ++t) {
    int64_t ia = 0, ib = 0, rem = t, sa = 1, sb = 1;
    for (size_t d = r; d-- > 0;) {
      const int64_t i = rem % batch[d];
      rem /= batch[d];
      ia += (ab[d] == 1 ? 0 : i) * sa;
      ib += (bb[d] == 1 ? 0 : i) * sb;
      sa *= ab[d];
      sb *= bb[d];
    }
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0, g = 0;
        for (int64_t kk = 0; kk < k; ++kk) {
          const double p = double(a.data[size_t(ia * m * k + i * k + kk)]) *
                           b.data[size_t(ib * k * n + kk * n + j)];
          s += p;
          g += std::fabs(p);
        }
        (*out)[size_t(t * m * n + i * n + j)] = s;
        (*mag)[size_t(t * m * n + i * n + j)] = g;
      }
  }
}

void check_matmul(Shape sa, Shape sb, bool b_const) {
  const Tensor a = random_tensor(sa, 1), b = random_tensor(sb, 2);
  Shape shape;
  std::vector<double> ref, mag;
  matmul_ref(a, b, &shape, &ref, &mag);
  auto got = run_op("MatMul", {&a, &b}, {}, {false, b_const});
  const std::string what = "MatMul " + shape_string(sa) + " · " + shape_string(sb) +
                           (b_const ? " (constant B)" : "");
  ASSERT_TRUE(got.is_ok()) << what << ": " << got.status().message();
  expect_close(*got, shape, ref, mag, what);
}

TEST(OpsLinear, MatMulShapes) {
  for (bool c : {false, true}) {
    check_matmul({3, 4}, {4, 5}, c);
    check_matmul({4}, {4, 5}, c);         // 1-D A: [5]
    check_matmul({3, 4}, {4}, c);         // 1-D B: [3]
    check_matmul({4}, {4}, c);            // both 1-D: a scalar
    check_matmul({2, 7, 33}, {33, 40}, c);  // batch of rows against one B
    check_matmul({2, 1, 3, 4}, {3, 4, 5}, c);  // batch dims broadcast both ways
    check_matmul({3, 4}, {2, 4, 5}, c);   // A broadcast over B's batch
    check_matmul({2, 3, 6}, {1, 6, 7}, c);  // B's batch dims all 1
    check_matmul({1, 2, 5, 0}, {0, 3}, c);  // K = 0: zeros
  }
  check_matmul({2, 3, 64, 70}, {2, 3, 70, 64}, false);  // attention-like, threads over batches
  check_matmul({1, 130, 300}, {1, 300, 129}, false);    // one big batch, threads inside
  check_matmul({16, 768}, {768, 100}, true);
}

TEST(OpsLinear, MatMulRefusals) {
  const Tensor a = random_tensor({3, 4}, 1), b = random_tensor({5, 6}, 2);
  expect_refused(run_op("MatMul", {&a, &b}), "inner dimensions differ");
  const Tensor a3 = random_tensor({2, 3, 4}, 1), b3 = random_tensor({3, 4, 6}, 2);
  expect_refused(run_op("MatMul", {&a3, &b3}), "do not broadcast");
  const Tensor s{{}, {1.0f}};
  expect_refused(run_op("MatMul", {&s, &a}), "rank 1 or more");
  expect_refused(run_op("MatMul", {&a}), "2 inputs");
}

// ---- Gemm ----

void check_gemm(int64_t m, int64_t n, int64_t k, bool ta, bool tb, float alpha, float beta,
                const Shape* c_shape, bool b_const) {
  const Tensor a = random_tensor(ta ? Shape{k, m} : Shape{m, k}, 3);
  const Tensor b = random_tensor(tb ? Shape{n, k} : Shape{k, n}, 4);
  Tensor c;
  if (c_shape) c = random_tensor(*c_shape, 5);
  std::vector<double> ref(size_t(m * n)), mag(size_t(m * n));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0, g = 0;
      for (int64_t kk = 0; kk < k; ++kk) {
        const double p = double(a.data[size_t(ta ? kk * m + i : i * k + kk)]) *
                         b.data[size_t(tb ? j * k + kk : kk * n + j)];
        s += p;
        g += std::fabs(p);
      }
      double v = alpha * s;
      if (c_shape) {
        const size_t r = c_shape->size();
        const int64_t cm = r == 2 ? (*c_shape)[0] : 1, cn = r >= 1 ? (*c_shape)[r - 1] : 1;
        v += double(beta) * c.data[size_t((cm == 1 ? 0 : i) * cn + (cn == 1 ? 0 : j))];
      }
      ref[size_t(i * n + j)] = v;
      mag[size_t(i * n + j)] = std::fabs(alpha) * g + std::fabs(beta);
    }
  Attrs attrs{{"alpha", float_attr(alpha)}, {"beta", float_attr(beta)},
              {"transA", int_attr(ta)}, {"transB", int_attr(tb)}};
  std::vector<const Tensor*> in{&a, &b};
  if (c_shape) in.push_back(&c);
  auto got = run_op("Gemm", in, attrs, {false, b_const, false});
  const std::string what = "Gemm m " + std::to_string(m) + " n " + std::to_string(n) + " k " +
                           std::to_string(k) + " tA " + std::to_string(ta) + " tB " +
                           std::to_string(tb) + " C " + (c_shape ? shape_string(*c_shape) : "none") +
                           (b_const ? " const B" : "");
  ASSERT_TRUE(got.is_ok()) << what << ": " << got.status().message();
  expect_close(*got, {m, n}, ref, mag, what);
}

TEST(OpsLinear, GemmForms) {
  const int64_t m = 5, n = 19, k = 13;
  const std::vector<Shape> cs = {{}, {1}, {n}, {1, n}, {m, 1}, {m, n}, {1, 1}};
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (bool bc : {false, true}) {
        check_gemm(m, n, k, ta, tb, 1.0f, 1.0f, nullptr, bc);
        for (const Shape& c : cs) {
          check_gemm(m, n, k, ta, tb, 1.0f, 1.0f, &c, bc);
          check_gemm(m, n, k, ta, tb, 0.5f, -2.0f, &c, bc);
        }
        check_gemm(m, n, k, ta, tb, 2.0f, 0.0f, &cs[5], bc);  // beta 0: C ignored
      }
  const Shape bias{300};
  check_gemm(70, 300, 270, false, true, 1.0f, 1.0f, &bias, true);  // a linear layer, threaded
}

TEST(OpsLinear, GemmRefusals) {
  const Tensor a = random_tensor({3, 4}, 1), b = random_tensor({4, 6}, 2);
  const Tensor a3 = random_tensor({2, 3, 4}, 1), c_bad = random_tensor({2, 6}, 3);
  expect_refused(run_op("Gemm", {&a3, &b}), "2-D A and B");
  expect_refused(run_op("Gemm", {&a, &b, &c_bad}), "does not broadcast");
  expect_refused(run_op("Gemm", {&a, &b}, {{"transA", int_attr(1)}}), "inner dimensions differ");
  expect_refused(run_op("Gemm", {&a, &b}, {{"transB", int_attr(2)}}), "0 or 1");
  expect_refused(run_op("Gemm", {&a, &b}, {{"alpha", int_attr(2)}}), "alpha");
}

// ---- Conv ----

struct ConvCase {
  Shape x, w;
  int64_t group = 1;
  std::vector<int64_t> strides{1, 1}, pads{0, 0, 0, 0}, dilations{1, 1};
  std::string auto_pad = "NOTSET";
  bool bias = false, w_const = true;
};

// Output size and padding before, as the ONNX spec states them.
void window_dims(int64_t in, int64_t k, int64_t s, int64_t d, int64_t pb, int64_t pe,
                 const std::string& auto_pad, bool ceil_mode, int64_t* out, int64_t* before) {
  const int64_t eff = (k - 1) * d + 1;
  if (auto_pad == "VALID") {
    *out = int64_t(std::ceil(double(in - eff + 1) / double(s)));
    *before = 0;
  } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    *out = int64_t(std::ceil(double(in) / double(s)));
    const int64_t total = std::max<int64_t>(0, (*out - 1) * s + eff - in);
    *before = auto_pad == "SAME_UPPER" ? total / 2 : (total + 1) / 2;
  } else {
    const double q = double(in + pb + pe - eff) / double(s);
    *out = int64_t(ceil_mode ? std::ceil(q) : std::floor(q)) + 1;
    if (ceil_mode && (*out - 1) * s >= in + pb) --*out;
    *before = pb;
  }
}

void check_conv(const ConvCase& cc) {
  const Tensor x = random_tensor(cc.x, 7), w = random_tensor(cc.w, 8);
  const Tensor b = random_tensor({cc.w[0]}, 9);
  const int64_t n = cc.x[0], c = cc.x[1], h = cc.x[2], wd = cc.x[3];
  const int64_t m = cc.w[0], cg = c / cc.group, mg = m / cc.group, kh = cc.w[2], kw = cc.w[3];
  int64_t oh, ow, pt, pl;
  window_dims(h, kh, cc.strides[0], cc.dilations[0], cc.pads[0], cc.pads[2], cc.auto_pad, false,
              &oh, &pt);
  window_dims(wd, kw, cc.strides[1], cc.dilations[1], cc.pads[1], cc.pads[3], cc.auto_pad, false,
              &ow, &pl);
  std::vector<double> ref(size_t(n * m * oh * ow)), mag(ref.size());
  for (int64_t in = 0; in < n; ++in)
    for (int64_t om = 0; om < m; ++om) {
      const int64_t g = om / mg;
      for (int64_t y = 0; y < oh; ++y)
        for (int64_t z = 0; z < ow; ++z) {
          double s = cc.bias ? b.data[size_t(om)] : 0.0, mg_sum = std::fabs(s);
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t i = 0; i < kh; ++i)
              for (int64_t j = 0; j < kw; ++j) {
                const int64_t ih = y * cc.strides[0] - pt + i * cc.dilations[0];
                const int64_t iw = z * cc.strides[1] - pl + j * cc.dilations[1];
                if (ih < 0 || ih >= h || iw < 0 || iw >= wd) continue;
                const double p =
                    double(x.data[size_t(((in * c + g * cg + ci) * h + ih) * wd + iw)]) *
                    w.data[size_t(((om * cg + ci) * kh + i) * kw + j)];
                s += p;
                mg_sum += std::fabs(p);
              }
          const size_t o = size_t(((in * m + om) * oh + y) * ow + z);
          ref[o] = s;
          mag[o] = mg_sum;
        }
    }
  Attrs attrs{{"group", int_attr(cc.group)},
              {"strides", ints_attr(cc.strides)},
              {"dilations", ints_attr(cc.dilations)},
              {"kernel_shape", ints_attr({kh, kw})}};
  if (cc.auto_pad == "NOTSET")
    attrs["pads"] = ints_attr(cc.pads);
  else
    attrs["auto_pad"] = string_attr(cc.auto_pad);
  std::vector<const Tensor*> in{&x, &w};
  if (cc.bias) in.push_back(&b);
  auto got = run_op("Conv", in, attrs, {false, cc.w_const, true});
  const std::string what = "Conv x " + shape_string(cc.x) + " w " + shape_string(cc.w) +
                           " group " + std::to_string(cc.group) + " " + cc.auto_pad;
  ASSERT_TRUE(got.is_ok()) << what << ": " << got.status().message();
  expect_close(*got, {n, m, oh, ow}, ref, mag, what);
}

TEST(OpsLinear, ConvForms) {
  ConvCase base{{2, 3, 9, 11}, {4, 3, 3, 3}};
  check_conv(base);
  ConvCase c = base;
  c.bias = true;
  c.pads = {1, 2, 0, 1};
  check_conv(c);  // asymmetric pads
  c.strides = {2, 3};
  check_conv(c);
  c.dilations = {2, 1};
  c.w_const = false;
  check_conv(c);
  ConvCase g{{1, 6, 8, 7}, {4, 3, 3, 2}, 2};
  g.bias = true;
  g.pads = {1, 1, 1, 1};
  check_conv(g);  // two groups
  ConvCase dw{{2, 5, 10, 9}, {5, 1, 3, 3}, 5};
  dw.bias = true;
  dw.pads = {1, 1, 1, 1};
  dw.strides = {2, 1};
  check_conv(dw);  // depthwise
  ConvCase dw2{{1, 3, 7, 7}, {6, 1, 3, 3}, 3};
  dw2.dilations = {2, 2};
  check_conv(dw2);  // depthwise, multiplier 2
  ConvCase pw{{2, 8, 6, 5}, {12, 8, 1, 1}};
  pw.bias = true;
  check_conv(pw);  // 1×1: no im2col
  pw.strides = {2, 2};
  check_conv(pw);  // strided 1×1: im2col
  for (const char* ap : {"SAME_UPPER", "SAME_LOWER", "VALID"}) {
    ConvCase a{{1, 2, 8, 9}, {3, 2, 4, 3}};
    a.auto_pad = ap;
    a.strides = {2, 2};
    check_conv(a);
  }
  ConvCase mnist{{4, 1, 28, 28}, {32, 1, 5, 5}};
  mnist.bias = true;
  mnist.pads = {2, 2, 2, 2};
  check_conv(mnist);  // one input channel, one group: a GEMM with K = 25
  ConvCase big{{1, 32, 14, 14}, {64, 32, 3, 3}};
  big.bias = true;
  big.pads = {1, 1, 1, 1};
  check_conv(big);
}

TEST(OpsLinear, ConvRefusals) {
  const Tensor x3 = random_tensor({1, 3, 9}, 1), w3 = random_tensor({4, 3, 3}, 2);
  expect_refused(run_op("Conv", {&x3, &w3}), "2-D inputs");
  const Tensor x = random_tensor({1, 3, 9, 9}, 1), w = random_tensor({4, 3, 3, 3}, 2);
  expect_refused(run_op("Conv", {&x, &w}, {{"group", int_attr(2)}}), "multiple of group");
  const Tensor w2 = random_tensor({4, 2, 3, 3}, 2);
  expect_refused(run_op("Conv", {&x, &w2}), "input channels per group");
  expect_refused(run_op("Conv", {&x, &w}, {{"kernel_shape", ints_attr({2, 2})}}), "disagrees");
  expect_refused(run_op("Conv", {&x, &w}, {{"kernel_shape", ints_attr({3, 3, 3})}}), "2-D");
  expect_refused(run_op("Conv", {&x, &w}, {{"auto_pad", string_attr("SAME")}}), "auto_pad");
  expect_refused(run_op("Conv", {&x, &w}, {{"pads", ints_attr({1, 1})}}), "pads");
  expect_refused(run_op("Conv", {&x, &w}, {{"strides", ints_attr({0, 1})}}), "strides");
  const Tensor bias = random_tensor({3}, 3);
  expect_refused(run_op("Conv", {&x, &w, &bias}), "bias");
  const Tensor small = random_tensor({1, 3, 2, 2}, 1);
  expect_refused(run_op("Conv", {&small, &w}), "larger than");
}

// ---- pools ----

struct PoolCase {
  Shape x;
  std::vector<int64_t> kernel, strides{1, 1}, pads{0, 0, 0, 0}, dilations{1, 1};
  bool ceil_mode = false, count_include_pad = false;
  std::string auto_pad = "NOTSET";
};

void check_pool(const std::string& op, const PoolCase& pc) {
  const Tensor x = random_tensor(pc.x, 11);
  const int64_t planes = pc.x[0] * pc.x[1], h = pc.x[2], w = pc.x[3];
  int64_t oh, ow, pt, pl;
  window_dims(h, pc.kernel[0], pc.strides[0], pc.dilations[0], pc.pads[0], pc.pads[2],
              pc.auto_pad, pc.ceil_mode, &oh, &pt);
  window_dims(w, pc.kernel[1], pc.strides[1], pc.dilations[1], pc.pads[1], pc.pads[3],
              pc.auto_pad, pc.ceil_mode, &ow, &pl);
  const int64_t ph = h + (pc.auto_pad == "NOTSET" ? pc.pads[2] : 0);
  const int64_t pw = w + (pc.auto_pad == "NOTSET" ? pc.pads[3] : 0);
  std::vector<double> ref(size_t(planes * oh * ow)), mag(ref.size());
  for (int64_t q = 0; q < planes; ++q)
    for (int64_t y = 0; y < oh; ++y)
      for (int64_t z = 0; z < ow; ++z) {
        double best = -INFINITY, sum = 0;
        int64_t count = 0;
        for (int64_t i = 0; i < pc.kernel[0]; ++i)
          for (int64_t j = 0; j < pc.kernel[1]; ++j) {
            const int64_t ih = y * pc.strides[0] - pt + i * pc.dilations[0];
            const int64_t iw = z * pc.strides[1] - pl + j * pc.dilations[1];
            if (ih >= 0 && ih < h && iw >= 0 && iw < w) {
              const double v = x.data[size_t((q * h + ih) * w + iw)];
              best = std::max(best, v);
              sum += v;
              ++count;
            } else if (pc.count_include_pad && ih >= -pt && ih < ph && iw >= -pl && iw < pw) {
              ++count;
            }
          }
        const size_t o = size_t((q * oh + y) * ow + z);
        ref[o] = op == "MaxPool" ? best : sum / double(count);
        mag[o] = 1.0;
      }
  Attrs attrs{{"kernel_shape", ints_attr(pc.kernel)},
              {"strides", ints_attr(pc.strides)},
              {"ceil_mode", int_attr(pc.ceil_mode)}};
  if (pc.auto_pad == "NOTSET")
    attrs["pads"] = ints_attr(pc.pads);
  else
    attrs["auto_pad"] = string_attr(pc.auto_pad);
  if (op == "MaxPool") attrs["dilations"] = ints_attr(pc.dilations);
  if (op == "AveragePool") attrs["count_include_pad"] = int_attr(pc.count_include_pad);
  auto got = run_op(op, {&x}, attrs);
  const std::string what = op + " x " + shape_string(pc.x) + " ceil " +
                           std::to_string(pc.ceil_mode) + " cip " +
                           std::to_string(pc.count_include_pad) + " " + pc.auto_pad;
  ASSERT_TRUE(got.is_ok()) << what << ": " << got.status().message();
  expect_close(*got, {pc.x[0], pc.x[1], oh, ow}, ref, mag, what);
}

TEST(OpsLinear, Pools) {
  for (const char* op : {"MaxPool", "AveragePool"}) {
    check_pool(op, PoolCase{{2, 3, 8, 8}, {2, 2}, {2, 2}});
    PoolCase p{{1, 2, 7, 9}, {3, 3}, {2, 2}, {1, 1, 1, 1}};
    check_pool(op, p);
    p.ceil_mode = true;
    check_pool(op, p);  // the last windows hang over the end
    p.count_include_pad = true;
    check_pool(op, p);
    p.ceil_mode = false;
    p.pads = {0, 1, 2, 0};
    check_pool(op, p);
    PoolCase e{{1, 1, 6, 6}, {3, 3}, {2, 2}, {1, 1, 1, 1}};
    e.ceil_mode = true;  // 6 + 2 pads: a window would start in the end padding and is dropped
    check_pool(op, e);
    for (const char* ap : {"SAME_UPPER", "SAME_LOWER", "VALID"}) {
      PoolCase a{{1, 2, 9, 8}, {3, 2}, {2, 3}};
      a.auto_pad = ap;
      check_pool(op, a);
    }
  }
  PoolCase d{{1, 2, 10, 10}, {3, 3}, {1, 2}, {2, 2, 2, 2}, {2, 3}};
  check_pool("MaxPool", d);  // dilations
}

// Values ONNX Runtime 1.x gives for x = 1..25 as [1,1,5,5], kernel 2×2,
// strides 2, pads 1, ceil_mode 1: a fourth window would start in the end
// padding, so the output is 3×3.
TEST(OpsLinear, PoolCeilModeMatchesOnnxRuntime) {
  Tensor x{{1, 1, 5, 5}, {}};
  for (int i = 0; i < 25; ++i) x.data.push_back(float(i + 1));
  Attrs attrs{{"kernel_shape", ints_attr({2, 2})}, {"strides", ints_attr({2, 2})},
              {"pads", ints_attr({1, 1, 1, 1})}, {"ceil_mode", int_attr(1)}};
  auto mx = run_op("MaxPool", {&x}, attrs);
  ASSERT_TRUE(mx.is_ok()) << mx.status().message();
  EXPECT_EQ(mx->shape, (Shape{1, 1, 3, 3}));
  EXPECT_EQ(mx->data, (std::vector<float>{1, 3, 5, 11, 13, 15, 21, 23, 25}));
  attrs["count_include_pad"] = int_attr(1);
  auto avg = run_op("AveragePool", {&x}, attrs);
  ASSERT_TRUE(avg.is_ok()) << avg.status().message();
  EXPECT_EQ(avg->data, (std::vector<float>{0.25f, 1.25f, 2.25f, 4.25f, 10, 12, 9.25f, 20, 22}));
}

TEST(OpsLinear, GlobalAveragePool) {
  for (const Shape& s : {Shape{2, 3, 5, 7}, Shape{3, 4, 6}}) {
    const Tensor x = random_tensor(s, 12);
    const int64_t planes = s[0] * s[1], size = x.count() / planes;
    std::vector<double> ref(static_cast<size_t>(planes)), mag(ref.size(), 1.0);
    for (int64_t q = 0; q < planes; ++q) {
      double sum = 0;
      for (int64_t i = 0; i < size; ++i) sum += x.data[size_t(q * size + i)];
      ref[size_t(q)] = sum / double(size);
    }
    Shape out(s.size(), 1);
    out[0] = s[0];
    out[1] = s[1];
    auto got = run_op("GlobalAveragePool", {&x});
    ASSERT_TRUE(got.is_ok()) << got.status().message();
    expect_close(*got, out, ref, mag, "GlobalAveragePool " + shape_string(s));
  }
  const Tensor x2 = random_tensor({3, 4}, 1);
  expect_refused(run_op("GlobalAveragePool", {&x2}), "rank 3 or more");
}

TEST(OpsLinear, PoolRefusals) {
  const Tensor x = random_tensor({1, 2, 8, 8}, 1), x5 = random_tensor({1, 2, 4, 4, 4}, 1);
  expect_refused(run_op("MaxPool", {&x}), "kernel_shape is required");
  expect_refused(run_op("MaxPool", {&x5}, {{"kernel_shape", ints_attr({2, 2})}}), "2-D inputs");
  expect_refused(run_op("AveragePool", {&x}, {{"kernel_shape", ints_attr({2, 2, 2})}}), "2-D");
  expect_refused(run_op("MaxPool", {&x}, {{"kernel_shape", ints_attr({2, 2})},
                                          {"pads", ints_attr({2, 0, 0, 0})}}),
                 "smaller than the window");
  expect_refused(run_op("AveragePool", {&x}, {{"kernel_shape", ints_attr({2, 2})},
                                              {"dilations", ints_attr({2, 2})}}, {}, 13),
                 "opset 19");
  expect_refused(run_op("AveragePool", {&x}, {{"kernel_shape", ints_attr({2, 2})},
                                              {"count_include_pad", int_attr(2)}}),
                 "count_include_pad");
  expect_refused(run_op("MaxPool", {&x}, {{"kernel_shape", ints_attr({9, 9})}}), "larger than");
  // The Indices output.
  Node node = harness::make_node("MaxPool", 1, 2, {{"kernel_shape", ints_attr({2, 2})}});
  std::vector<const TensorView*> consts(1, nullptr);
  auto made = find_op("MaxPool")(NodeContext{node, consts});
  ASSERT_FALSE(made.is_ok());
  EXPECT_NE(made.status().message().find("Indices"), std::string::npos);
}

}  // namespace
}  // namespace cairn::onnx
