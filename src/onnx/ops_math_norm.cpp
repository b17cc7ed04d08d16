// onnx/ops_math_norm.cpp — the normalisations: Softmax and LogSoftmax
// (opset 13: along one axis), LayerNormalization (opset 17) and
// BatchNormalization in inference mode. Rows along the last axis go through
// the vectorised row loops of onnx/ops_math_kernels.h; rows across an inner
// axis are done in blocks of lanes held on the stack, so run() never
// allocates.
#include <algorithm>
#include <cmath>
#include <string>

#include "onnx/ops_math_kernels.h"

namespace cairn::onnx {

namespace {

using mathk::Path;

std::string dtype_str(DType t) { return values::dtype_name(t); }

int64_t prod(const Shape& s, size_t from, size_t to) {
  int64_t n = 1;
  for (size_t i = from; i < to; ++i) n *= s[i];
  return n;
}

// ---- Softmax, LogSoftmax ------------------------------------------------------------

class SoftmaxOp final : public Op {
 public:
  SoftmaxOp(bool log, int64_t axis) : log_(log), axis_(axis), path_(mathk::best_path()) {}

  Status infer(std::span<const TensorInfo> in, std::span<const bool> present,
               std::span<TensorInfo> out) const override {
    (void)present;
    const char* name = log_ ? "LogSoftmax" : "Softmax";
    if (in[0].dtype != DType::Float32)
      return Status::invalid_argument(std::string(name) + " takes float32 input, got " +
                                      dtype_str(in[0].dtype));
    CAIRN_RETURN_IF_ERROR(normalize_axis(axis_, int64_t(in[0].shape.size())).status());
    out[0] = TensorInfo{DType::Float32, in[0].shape, nullptr};
    return Status::ok();
  }

  Status run(const RunArgs& args) const override {
    const TensorView& xt = *args.in[0];
    TensorView& yt = *args.out[0];
    if (yt.count() == 0) return Status::ok();
    const size_t axis = size_t(axis_ < 0 ? axis_ + int64_t(xt.shape.size()) : axis_);
    const int64_t outer = prod(xt.shape, 0, axis), n = xt.shape[axis];
    const int64_t inner = prod(xt.shape, axis + 1, xt.shape.size());
    const float* x = xt.as<const float>();
    float* y = yt.as<float>();
    const bool log = log_;
    const Path path = path_;
    if (inner == 1) {
      args.pool.parallel_for(
          outer,
          [&](int64_t r0, int64_t r1) {
            for (int64_t r = r0; r < r1; ++r) {
              const float* xr = x + r * n;
              float* yr = y + r * n;
              const float m = mathk::row_max(path, xr, n);
              const float s = mathk::exp_sub_sum(path, xr, m, yr, n);
              if (log) {
                mathk::affine(path, xr, 1.0f, -(m + std::log(s)), yr, n);
              } else {
                mathk::affine(path, yr, 1.0f / s, 0.0f, yr, n);
              }
            }
          },
          std::max<int64_t>(1, mathk::kGrainHeavy / n));
      return Status::ok();
    }
    // An inner axis: blocks of up to kLanes neighbouring positions, each
    // reduced along the axis with its maxima and sums on the stack.
    constexpr int64_t kLanes = 64;
    const int64_t blocks = (inner + kLanes - 1) / kLanes;
    args.pool.parallel_for(
        outer * blocks,
        [&](int64_t u0, int64_t u1) {
          float m[kLanes], s[kLanes];
          for (int64_t u = u0; u < u1; ++u) {
            const int64_t o = u / blocks, i0 = (u % blocks) * kLanes;
            const int64_t w = std::min(kLanes, inner - i0);
            const float* xb = x + o * n * inner + i0;
            float* yb = y + o * n * inner + i0;
            for (int64_t i = 0; i < w; ++i) m[i] = xb[i];
            for (int64_t k = 1; k < n; ++k)
              for (int64_t i = 0; i < w; ++i) m[i] = std::max(m[i], xb[k * inner + i]);
            for (int64_t i = 0; i < w; ++i) s[i] = 0.0f;
            for (int64_t k = 0; k < n; ++k) {
              float* yk = yb + k * inner;
              for (int64_t i = 0; i < w; ++i) yk[i] = xb[k * inner + i] - m[i];
              mathk::unary(path, mathk::UnOp::Exp, yk, yk, w);
              for (int64_t i = 0; i < w; ++i) s[i] += yk[i];
            }
            if (log) {
              for (int64_t i = 0; i < w; ++i) m[i] += std::log(s[i]);
              for (int64_t k = 0; k < n; ++k)
                for (int64_t i = 0; i < w; ++i) yb[k * inner + i] = xb[k * inner + i] - m[i];
            } else {
              for (int64_t i = 0; i < w; ++i) s[i] = 1.0f / s[i];
              for (int64_t k = 0; k < n; ++k)
                for (int64_t i = 0; i < w; ++i) yb[k * inner + i] *= s[i];
            }
          }
        },
        std::max<int64_t>(1, mathk::kGrainHeavy / (n * kLanes)));
    return Status::ok();
  }

 private:
  bool log_;
  int64_t axis_;
  Path path_;
};

template <bool Log>
Result<std::unique_ptr<Op>> make_softmax(const NodeContext& ctx) {
  const Node& node = ctx.node;
  CAIRN_RETURN_IF_ERROR(mathk::check_node(node, 1, 1, 1, {"axis"}));
  // Before opset 13 the input was flattened to 2-D at `axis` (default 1).
  if (node.opset < 13)
    return Status::invalid_argument(node.op_type +
                                    " before opset 13 (flattening to 2-D) is not supported");
  CAIRN_ASSIGN_OR_RETURN(int64_t axis, node.get_int("axis", -1));
  return std::unique_ptr<Op>(new SoftmaxOp(Log, axis));
}

// ---- LayerNormalization ---------------------------------------------------------------

// `s` (Scale or B) matches the normalised dims `norm`, leading 1s aside.
bool matches_norm_shape(const Shape& s, const Shape& norm) {
  auto strip = [](const Shape& v) {
    size_t i = 0;
    while (i < v.size() && v[i] == 1) ++i;
    return Shape(v.begin() + ptrdiff_t(i), v.end());
  };
  return strip(s) == strip(norm);
}

class LayerNormOp final : public Op {
 public:
  LayerNormOp(int64_t axis, float eps, bool has_bias, bool want_mean, bool want_inv)
      : axis_(axis),
        eps_(eps),
        has_bias_(has_bias),
        want_mean_(want_mean),
        want_inv_(want_inv),
        path_(mathk::best_path()) {}

  Status infer(std::span<const TensorInfo> in, std::span<const bool> present,
               std::span<TensorInfo> out) const override {
    const Shape& xs = in[0].shape;
    for (size_t i = 0; i < in.size(); ++i) {
      if (!present[i]) continue;
      if (in[i].dtype != DType::Float32)
        return Status::invalid_argument("LayerNormalization takes float32 inputs, input " +
                                        std::to_string(i) + " is " + dtype_str(in[i].dtype));
    }
    CAIRN_ASSIGN_OR_RETURN(int64_t axis, normalize_axis(axis_, int64_t(xs.size())));
    const Shape norm(xs.begin() + axis, xs.end());
    if (prod(norm, 0, norm.size()) == 0)
      return Status::invalid_argument("LayerNormalization over normalised dims " +
                                      shape_string(norm) + " with no elements");
    if (!matches_norm_shape(in[1].shape, norm))
      return Status::invalid_argument("LayerNormalization's Scale has shape " +
                                      shape_string(in[1].shape) +
                                      ", expected the normalised dims " + shape_string(norm));
    if (has_bias_ && present[2] && !matches_norm_shape(in[2].shape, norm))
      return Status::invalid_argument("LayerNormalization's B has shape " +
                                      shape_string(in[2].shape) +
                                      ", expected the normalised dims " + shape_string(norm));
    out[0] = TensorInfo{DType::Float32, xs, nullptr};
    Shape stat(xs.begin(), xs.begin() + axis);
    stat.resize(xs.size(), 1);
    for (size_t i = 1; i < out.size(); ++i) out[i] = TensorInfo{DType::Float32, stat, nullptr};
    return Status::ok();
  }

  Status run(const RunArgs& args) const override {
    const TensorView& xt = *args.in[0];
    const size_t axis = size_t(axis_ < 0 ? axis_ + int64_t(xt.shape.size()) : axis_);
    const int64_t rows = prod(xt.shape, 0, axis), n = prod(xt.shape, axis, xt.shape.size());
    const float* x = xt.as<const float>();
    const float* scale = args.in[1]->as<const float>();
    const float* bias =
        has_bias_ && args.in.size() > 2 && args.in[2] ? args.in[2]->as<const float>() : nullptr;
    float* y = args.out[0]->as<float>();
    auto stat_out = [&](size_t i, bool want) -> float* {
      return want && args.out.size() > i && args.out[i] ? args.out[i]->as<float>() : nullptr;
    };
    float* mean = stat_out(1, want_mean_);
    float* inv = stat_out(2, want_inv_);
    const float eps = eps_;
    const Path path = path_;
    args.pool.parallel_for(
        rows,
        [&](int64_t r0, int64_t r1) {
          for (int64_t r = r0; r < r1; ++r) {
            float m, is;
            mathk::layer_norm_row(path, x + r * n, scale, bias, eps, y + r * n, n, &m, &is);
            if (mean) mean[r] = m;
            if (inv) inv[r] = is;
          }
        },
        std::max<int64_t>(1, mathk::kGrainCheap / n));
    return Status::ok();
  }

 private:
  int64_t axis_;
  float eps_;
  bool has_bias_, want_mean_, want_inv_;
  Path path_;
};

Result<std::unique_ptr<Op>> make_layer_norm(const NodeContext& ctx) {
  const Node& node = ctx.node;
  CAIRN_RETURN_IF_ERROR(mathk::check_node(node, 2, 3, 3, {"axis", "epsilon", "stash_type"}));
  CAIRN_ASSIGN_OR_RETURN(int64_t axis, node.get_int("axis", -1));
  CAIRN_ASSIGN_OR_RETURN(double eps, node.get_float("epsilon", 1e-5));
  CAIRN_ASSIGN_OR_RETURN(int64_t stash, node.get_int("stash_type", 1));
  if (stash != 1)
    return Status::invalid_argument("LayerNormalization's stash_type " + std::to_string(stash) +
                                    " is not supported (only 1, float32)");
  if (!(eps >= 0.0) || !std::isfinite(eps))
    return Status::invalid_argument("LayerNormalization's epsilon " + std::to_string(eps) +
                                    " is not a finite non-negative number");
  auto wants = [&](size_t i) { return node.outputs.size() > i && !node.outputs[i].empty(); };
  return std::unique_ptr<Op>(
      new LayerNormOp(axis, float(eps), node.has_input(2), wants(1), wants(2)));
}

// ---- BatchNormalization (inference) -----------------------------------------------------

class BatchNormOp final : public Op {
 public:
  BatchNormOp(float eps) : eps_(eps), path_(mathk::best_path()) {}

  Status infer(std::span<const TensorInfo> in, std::span<const bool> present,
               std::span<TensorInfo> out) const override {
    (void)present;
    static const char* const kNames[] = {"X", "scale", "B", "input_mean", "input_var"};
    for (size_t i = 0; i < 5; ++i)
      if (in[i].dtype != DType::Float32)
        return Status::invalid_argument(std::string("BatchNormalization takes float32 inputs, ") +
                                        kNames[i] + " is " + dtype_str(in[i].dtype));
    const Shape& xs = in[0].shape;
    if (xs.size() < 2)
      return Status::invalid_argument("BatchNormalization's X has shape " + shape_string(xs) +
                                      ", expected [N, C, ...]");
    for (size_t i = 1; i < 5; ++i)
      if (in[i].shape != Shape{xs[1]})
        return Status::invalid_argument(std::string("BatchNormalization's ") + kNames[i] +
                                        " has shape " + shape_string(in[i].shape) + ", expected [" +
                                        std::to_string(xs[1]) + "] (X's channels)");
    out[0] = TensorInfo{DType::Float32, xs, nullptr};
    return Status::ok();
  }

  size_t scratch_bytes(std::span<const TensorInfo> in,
                       std::span<const TensorInfo> out) const override {
    (void)out;
    return 2 * size_t(in[0].shape[1]) * sizeof(float);
  }

  Status run(const RunArgs& args) const override {
    const TensorView& xt = *args.in[0];
    const int64_t batch = xt.shape[0], c = xt.shape[1];
    const int64_t inner = prod(xt.shape, 2, xt.shape.size());
    if (batch * c * inner == 0) return Status::ok();
    // Per channel, y = x * a + b with a = scale / sqrt(var + eps) and
    // b = B - mean * a.
    float* a = static_cast<float*>(args.scratch);
    float* b = a + c;
    const float* scale = args.in[1]->as<const float>();
    const float* bias = args.in[2]->as<const float>();
    const float* mean = args.in[3]->as<const float>();
    const float* var = args.in[4]->as<const float>();
    for (int64_t i = 0; i < c; ++i) {
      a[i] = float(double(scale[i]) / std::sqrt(double(var[i]) + double(eps_)));
      b[i] = float(double(bias[i]) - double(mean[i]) * double(a[i]));
    }
    const float* x = xt.as<const float>();
    float* y = args.out[0]->as<float>();
    const Path path = path_;
    args.pool.parallel_for(
        batch * c,
        [&](int64_t p0, int64_t p1) {
          for (int64_t p = p0; p < p1; ++p)
            mathk::affine(path, x + p * inner, a[p % c], b[p % c], y + p * inner, inner);
        },
        std::max<int64_t>(1, mathk::kGrainCheap / inner));
    return Status::ok();
  }

 private:
  float eps_;
  Path path_;
};

Result<std::unique_ptr<Op>> make_batch_norm(const NodeContext& ctx) {
  const Node& node = ctx.node;
  CAIRN_RETURN_IF_ERROR(mathk::check_node(node, 5, 5, 3, {"epsilon", "momentum", "training_mode"}));
  CAIRN_ASSIGN_OR_RETURN(int64_t training, node.get_int("training_mode", 0));
  if (training != 0)
    return Status::invalid_argument(
        "BatchNormalization with training_mode=" + std::to_string(training) +
        " is not supported (inference only)");
  for (size_t i = 1; i < node.outputs.size(); ++i)
    if (!node.outputs[i].empty())
      return Status::invalid_argument("BatchNormalization in inference has one output; output " +
                                      std::to_string(i) + " ('" + node.outputs[i] +
                                      "') is asked for");
  CAIRN_ASSIGN_OR_RETURN(double eps, node.get_float("epsilon", 1e-5));
  CAIRN_RETURN_IF_ERROR(node.get_float("momentum", 0.9).status());
  if (!(eps >= 0.0) || !std::isfinite(eps))
    return Status::invalid_argument("BatchNormalization's epsilon " + std::to_string(eps) +
                                    " is not a finite non-negative number");
  return std::unique_ptr<Op>(new BatchNormOp(float(eps)));
}

}  // namespace

namespace mathk {

void add_norm_ops(OpTable& table) {
  table.add("Softmax", make_softmax<false>);
  table.add("LogSoftmax", make_softmax<true>);
  table.add("LayerNormalization", make_layer_norm);
  table.add("BatchNormalization", make_batch_norm);
}

}  // namespace mathk

}  // namespace cairn::onnx
