// tests/onnx/onnx_test_models.cpp — the fake operators the loader and
// planner tests inject (plain scalar loops; only the graph machinery is
// under test here).
#include "onnx_test_models.h"

#include <cstring>
#include <random>

#include "onnx/tensor.h"

namespace cairn::onnx::test {

OpCounters& counters() {
  static OpCounters c;
  return c;
}

namespace {

Status need_inputs(std::span<const bool> present, size_t n) {
  if (present.size() < n) return Status::invalid_argument("expected " + std::to_string(n) + " inputs");
  for (size_t i = 0; i < n; ++i)
    if (!present[i]) return Status::invalid_argument("input " + std::to_string(i) + " is required");
  return Status::ok();
}

// The float ops' inputs: present and float32.
Status need_floats(std::span<const TensorInfo> in, std::span<const bool> present, size_t n) {
  CAIRN_RETURN_IF_ERROR(need_inputs(present, n));
  for (size_t i = 0; i < n; ++i)
    if (in[i].dtype != DType::Float32) return Status::invalid_argument("input " + std::to_string(i) + " is not float32");
  return Status::ok();
}

struct AddOp final : Op {
  Status infer(std::span<const TensorInfo> in, std::span<const bool> present,
               std::span<TensorInfo> out) const override {
    CAIRN_RETURN_IF_ERROR(need_floats(in, present, 2));
    auto nb = checked_count(in[1].shape);
    if (!nb) return nb.status();
    if (in[0].shape != in[1].shape && *nb != 1)
      return Status::invalid_argument("shapes " + shape_string(in[0].shape) + " and " + shape_string(in[1].shape) +
                                      " differ");
    out[0] = {DType::Float32, in[0].shape, nullptr};
    return Status::ok();
  }
  Status run(const RunArgs& a) const override {
    const int64_t n = a.out[0]->count();
    const bool scalar = a.in[1]->count() == 1;
    const float* x = a.in[0]->as<const float>();
    const float* y = a.in[1]->as<const float>();
    float* z = a.out[0]->as<float>();
    for (int64_t i = 0; i < n; ++i) z[i] = x[i] + y[scalar ? 0 : i];
    return Status::ok();
  }
};

struct NegOp final : Op {
  Status infer(std::span<const TensorInfo> in, std::span<const bool> present,
               std::span<TensorInfo> out) const override {
    CAIRN_RETURN_IF_ERROR(need_floats(in, present, 1));
    out[0] = {DType::Float32, in[0].shape, nullptr};
    return Status::ok();
  }
  size_t scratch_bytes(std::span<const TensorInfo>, std::span<const TensorInfo>) const override { return 100; }
  Status run(const RunArgs& a) const override {
    ++counters().neg_runs;
    // Touches its scratch, so a missing or short scratch area shows under ASan.
    std::memset(a.scratch, 0xab, 100);
    const int64_t n = a.out[0]->count();
    for (int64_t i = 0; i < n; ++i) a.out[0]->as<float>()[i] = -a.in[0]->as<const float>()[i];
    return Status::ok();
  }
};

struct IdentityOp final : Op {
  Status infer(std::span<const TensorInfo> in, std::span<const bool> present,
               std::span<TensorInfo> out) const override {
    CAIRN_RETURN_IF_ERROR(need_inputs(present, 1));
    out[0] = {in[0].dtype, in[0].shape, nullptr};
    return Status::ok();
  }
  bool is_view() const override { return true; }
  Status run(const RunArgs&) const override { return Status::internal("a view never runs"); }
};

struct ReshapeOp final : Op {
  bool needs_value(size_t i) const override { return i == 1; }
  Status infer(std::span<const TensorInfo> in, std::span<const bool> present,
               std::span<TensorInfo> out) const override {
    CAIRN_RETURN_IF_ERROR(need_inputs(present, 2));
    if (!in[1].value) return Status::invalid_argument("the shape input must be known before running");
    auto dims = int_values(*in[1].value);
    if (!dims) return dims.status();
    auto n = checked_count(in[0].shape);
    if (!n) return n.status();
    Shape s = *dims;
    int64_t known = 1, at = -1;
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] == -1)
        at = int64_t(i);
      else
        known *= s[i];
    }
    if (at >= 0 && known > 0) s[size_t(at)] = *n / known;
    auto m = checked_count(s);
    if (!m || *m != *n) return Status::invalid_argument("cannot reshape " + shape_string(in[0].shape) + " to " + shape_string(s));
    out[0] = {in[0].dtype, s, nullptr};
    return Status::ok();
  }
  bool is_view() const override { return true; }
  Status run(const RunArgs&) const override { return Status::internal("a view never runs"); }
};

struct ShapeOp final : Op {
  Status infer(std::span<const TensorInfo> in, std::span<const bool> present,
               std::span<TensorInfo> out) const override {
    CAIRN_RETURN_IF_ERROR(need_inputs(present, 1));
    out[0] = {DType::Int64, {int64_t(in[0].shape.size())}, nullptr};
    return Status::ok();
  }
  Status run(const RunArgs& a) const override {
    ++counters().shape_runs;
    for (size_t i = 0; i < a.in[0]->shape.size(); ++i) a.out[0]->as<int64_t>()[i] = a.in[0]->shape[i];
    return Status::ok();
  }
};

struct TransposeOp final : Op {
  Status infer(std::span<const TensorInfo> in, std::span<const bool> present,
               std::span<TensorInfo> out) const override {
    CAIRN_RETURN_IF_ERROR(need_floats(in, present, 1));
    if (in[0].shape.size() != 2) return Status::invalid_argument("2-D only");
    out[0] = {DType::Float32, {in[0].shape[1], in[0].shape[0]}, nullptr};
    return Status::ok();
  }
  Status run(const RunArgs& a) const override {
    ++counters().transpose_runs;
    const int64_t r = a.in[0]->shape[0], c = a.in[0]->shape[1];
    for (int64_t i = 0; i < r; ++i)
      for (int64_t j = 0; j < c; ++j) a.out[0]->as<float>()[j * r + i] = a.in[0]->as<const float>()[i * c + j];
    return Status::ok();
  }
};

struct MatMulOp final : Op {
  Status infer(std::span<const TensorInfo> in, std::span<const bool> present,
               std::span<TensorInfo> out) const override {
    CAIRN_RETURN_IF_ERROR(need_floats(in, present, 2));
    if (in[0].shape.size() != 2 || in[1].shape.size() != 2 || in[0].shape[1] != in[1].shape[0])
      return Status::invalid_argument("cannot multiply " + shape_string(in[0].shape) + " by " +
                                      shape_string(in[1].shape));
    out[0] = {DType::Float32, {in[0].shape[0], in[1].shape[1]}, nullptr};
    return Status::ok();
  }
  Status run(const RunArgs& a) const override {
    const int64_t m = a.in[0]->shape[0], k = a.in[0]->shape[1], n = a.in[1]->shape[1];
    const float* x = a.in[0]->as<const float>();
    const float* w = a.in[1]->as<const float>();
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        float s = 0;
        for (int64_t p = 0; p < k; ++p) s += x[i * k + p] * w[p * n + j];
        a.out[0]->as<float>()[i * n + j] = s;
      }
    return Status::ok();
  }
};

struct ConstantOp final : Op {
  const values::Tensor* value = nullptr;
  Status infer(std::span<const TensorInfo>, std::span<const bool>, std::span<TensorInfo> out) const override {
    out[0] = {value->dtype, value->shape, nullptr};
    return Status::ok();
  }
  Status run(const RunArgs& a) const override {
    if (!value->data.empty()) std::memcpy(a.out[0]->data, value->data.data(), value->data.size());
    return Status::ok();
  }
};

struct FailOp final : Op {
  Status infer(std::span<const TensorInfo> in, std::span<const bool> present,
               std::span<TensorInfo> out) const override {
    CAIRN_RETURN_IF_ERROR(need_inputs(present, 1));
    out[0] = {in[0].dtype, in[0].shape, nullptr};
    return Status::ok();
  }
  Status run(const RunArgs&) const override { return Status::invalid_argument("index 7 is out of range"); }
};

struct BadInferOp final : Op {
  Status infer(std::span<const TensorInfo>, std::span<const bool>, std::span<TensorInfo>) const override {
    return Status::invalid_argument("refused by infer");
  }
  Status run(const RunArgs&) const override { return Status::ok(); }
};

template <typename T>
Result<std::unique_ptr<Op>> make(const NodeContext&) {
  return std::unique_ptr<Op>(new T());
}

Result<std::unique_ptr<Op>> make_matmul(const NodeContext& ctx) {
  if (ctx.constants.size() > 1 && ctx.constants[1]) counters().matmul_saw_constant_b = true;
  return std::unique_ptr<Op>(new MatMulOp());
}

Result<std::unique_ptr<Op>> make_constant(const NodeContext& ctx) {
  auto t = ctx.node.require_tensor("value");
  if (!t) return t.status();
  auto op = std::make_unique<ConstantOp>();
  op->value = *t;
  return std::unique_ptr<Op>(std::move(op));
}

}  // namespace

OpFactory fake_ops(std::string_view op) {
  if (op == "Add") return make<AddOp>;
  if (op == "Neg") return make<NegOp>;
  if (op == "Identity") return make<IdentityOp>;
  if (op == "Reshape") return make<ReshapeOp>;
  if (op == "Shape") return make<ShapeOp>;
  if (op == "Transpose") return make<TransposeOp>;
  if (op == "MatMul") return make_matmul;
  if (op == "Constant") return make_constant;
  if (op == "Fail") return make<FailOp>;
  if (op == "BadInfer") return make<BadInferOp>;
  return nullptr;
}

SessionOptions fake_options() {
  static ThreadPool pool(1);
  SessionOptions o;
  o.pool = &pool;
  o.op_lookup = fake_ops;
  return o;
}

values::Tensor floats(const std::vector<float>& v, std::vector<int64_t> shape) {
  return values::make_tensor(v, std::move(shape));
}

std::vector<float> random_floats(size_t n, float lo, float hi, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

std::vector<float> to_floats(const values::Tensor& t) {
  std::vector<float> v(t.data.size() / 4);
  if (!v.empty()) std::memcpy(v.data(), t.data.data(), v.size() * 4);
  return v;
}

}  // namespace cairn::onnx::test
