// onnx/ops_shape.cpp — the shape family's registration, its views and its
// sources. Views (Reshape, Flatten, Squeeze, Unsqueeze, Identity) only
// compute an output shape: the planner points the output at the input's
// bytes and never runs them (their run() copies, should it ever be called).
// Sources (Shape, Size, Constant, ConstantOfShape) make a tensor from a shape or an
// attribute; the planner usually evaluates them before running. Data
// movement, Cast and the reductions are in their own files.
#include <algorithm>

#include "onnx/ops_shape_common.h"

namespace cairn::onnx {

namespace shape_ops {

namespace {

// ---------------------------------------------------------------- views

class ViewOp : public Op {
 public:
  bool is_view() const override { return true; }
  Status run(const RunArgs& args) const override {
    const TensorView& x = *args.in[0];
    const TensorView& y = *args.out[0];
    if (y.data != x.data && x.bytes() > 0) std::memmove(y.data, x.data, x.bytes());
    return Status::ok();
  }
};

class ReshapeOp final : public ViewOp {
 public:
  explicit ReshapeOp(bool allowzero) : allowzero_(allowzero) {}

  bool needs_value(size_t i) const override { return i == 1; }

  Status infer(std::span<const TensorInfo> in, std::span<const bool>,
               std::span<TensorInfo> out) const override {
    CAIRN_ASSIGN_OR_RETURN(auto want, known_ints(in, 1, "shape"));
    const Shape& d = in[0].shape;
    CAIRN_ASSIGN_OR_RETURN(int64_t count, checked_count(d));
    if (want.size() > kMaxRank)
      return Status::invalid_argument("shape has rank " + std::to_string(want.size()) +
                                      ", over the limit of " + std::to_string(kMaxRank));
    Shape s(want.size());
    int64_t infer_at = -1;
    bool has_zero = false;
    for (size_t i = 0; i < want.size(); ++i) {
      const int64_t v = want[i];
      if (v == -1) {
        if (infer_at >= 0)
          return Status::invalid_argument("shape " + shape_string(want) + " has more than one -1");
        infer_at = int64_t(i);
        s[i] = 1;
      } else if (v == 0 && !allowzero_) {
        if (i >= d.size())
          return Status::invalid_argument("shape " + shape_string(want) + " copies dimension " +
                                          std::to_string(i) + " (a 0) of an input of rank " +
                                          std::to_string(d.size()));
        s[i] = d[i];
      } else if (v < 0) {
        return Status::invalid_argument("shape " + shape_string(want) + " has " +
                                        std::to_string(v) + " (only -1 may be negative)");
      } else {
        s[i] = v;
        has_zero |= v == 0;
      }
    }
    if (allowzero_ && has_zero && infer_at >= 0)
      return Status::invalid_argument("shape " + shape_string(want) +
                                      " has both 0 and -1 with allowzero=1");
    CAIRN_ASSIGN_OR_RETURN(int64_t known, checked_count(s));
    if (infer_at >= 0) {
      if (known == 0) {
        if (count != 0)
          return Status::invalid_argument("cannot reshape " + shape_string(d) + " to " +
                                          shape_string(want) +
                                          ": the other dimensions multiply to 0");
        s[size_t(infer_at)] = 0;
      } else {
        if (count % known != 0)
          return Status::invalid_argument("cannot reshape " + shape_string(d) + " (" +
                                          std::to_string(count) + " elements) to " +
                                          shape_string(want) + ": " + std::to_string(count) +
                                          " is not a multiple of " + std::to_string(known));
        s[size_t(infer_at)] = count / known;
      }
    } else if (known != count) {
      return Status::invalid_argument("cannot reshape " + shape_string(d) + " (" +
                                      std::to_string(count) + " elements) to " + shape_string(s) +
                                      " (" + std::to_string(known) + " elements)");
    }
    out[0].dtype = in[0].dtype;
    out[0].shape = std::move(s);
    return Status::ok();
  }

 private:
  bool allowzero_;
};

Result<std::unique_ptr<Op>> make_reshape(const NodeContext& ctx) {
  CAIRN_RETURN_IF_ERROR(check_arity(ctx.node, 2, 2, 1));
  CAIRN_ASSIGN_OR_RETURN(int64_t allowzero, ctx.node.get_int("allowzero", 0));
  if (allowzero != 0 && allowzero != 1)
    return Status::invalid_argument("allowzero must be 0 or 1, got " + std::to_string(allowzero));
  return std::unique_ptr<Op>(new ReshapeOp(allowzero == 1));
}

class FlattenOp final : public ViewOp {
 public:
  explicit FlattenOp(int64_t axis) : axis_(axis) {}
  Status infer(std::span<const TensorInfo> in, std::span<const bool>,
               std::span<TensorInfo> out) const override {
    const Shape& d = in[0].shape;
    const int64_t r = int64_t(d.size());
    if (axis_ < -r || axis_ > r)
      return Status::invalid_argument("axis " + std::to_string(axis_) +
                                      " is out of range for rank " + std::to_string(r));
    const int64_t a = axis_ < 0 ? axis_ + r : axis_;
    CAIRN_ASSIGN_OR_RETURN(int64_t outer, checked_count(Shape(d.begin(), d.begin() + a)));
    CAIRN_ASSIGN_OR_RETURN(int64_t inner, checked_count(Shape(d.begin() + a, d.end())));
    out[0].dtype = in[0].dtype;
    out[0].shape = {outer, inner};
    return Status::ok();
  }

 private:
  int64_t axis_;
};

Result<std::unique_ptr<Op>> make_flatten(const NodeContext& ctx) {
  CAIRN_RETURN_IF_ERROR(check_arity(ctx.node, 1, 1, 1));
  CAIRN_ASSIGN_OR_RETURN(int64_t axis, ctx.node.get_int("axis", 1));
  return std::unique_ptr<Op>(new FlattenOp(axis));
}

class SqueezeOp final : public ViewOp {
 public:
  explicit SqueezeOp(IntsArg axes) : axes_(std::move(axes)) {}
  bool needs_value(size_t i) const override { return axes_.from_input && i == axes_.index; }
  Status infer(std::span<const TensorInfo> in, std::span<const bool> present,
               std::span<TensorInfo> out) const override {
    const Shape& d = in[0].shape;
    CAIRN_ASSIGN_OR_RETURN(auto axes, axes_.get(in, present, "axes"));
    Shape s;
    if (!axes.has ||
        axes.v.empty()) {  // every 1-dim goes (an empty list too, as ONNX Runtime reads it)
      for (int64_t x : d)
        if (x != 1) s.push_back(x);
    } else {
      CAIRN_ASSIGN_OR_RETURN(auto norm, normalize_axes(axes.v, int64_t(d.size())));
      for (int64_t a : norm)
        if (d[size_t(a)] != 1)
          return Status::invalid_argument("cannot squeeze axis " + std::to_string(a) +
                                          " of shape " + shape_string(d) + ": its size is " +
                                          std::to_string(d[size_t(a)]) + ", not 1");
      for (size_t i = 0; i < d.size(); ++i)
        if (std::find(norm.begin(), norm.end(), int64_t(i)) == norm.end()) s.push_back(d[i]);
    }
    out[0].dtype = in[0].dtype;
    out[0].shape = std::move(s);
    return Status::ok();
  }

 private:
  IntsArg axes_;
};

Result<std::unique_ptr<Op>> make_squeeze(const NodeContext& ctx) {
  CAIRN_RETURN_IF_ERROR(check_arity(ctx.node, 1, ctx.node.opset >= 13 ? 2 : 1, 1));
  CAIRN_ASSIGN_OR_RETURN(auto axes, IntsArg::make(ctx.node, "axes", 13, 1));
  return std::unique_ptr<Op>(new SqueezeOp(std::move(axes)));
}

class UnsqueezeOp final : public ViewOp {
 public:
  explicit UnsqueezeOp(IntsArg axes) : axes_(std::move(axes)) {}
  bool needs_value(size_t i) const override { return axes_.from_input && i == axes_.index; }
  Status infer(std::span<const TensorInfo> in, std::span<const bool> present,
               std::span<TensorInfo> out) const override {
    const Shape& d = in[0].shape;
    CAIRN_ASSIGN_OR_RETURN(auto axes, axes_.get(in, present, "axes"));
    if (!axes.has) return Status::invalid_argument("axes are required");
    const int64_t rank = int64_t(d.size() + axes.v.size());
    if (rank > int64_t(kMaxRank))
      return Status::invalid_argument("the output rank " + std::to_string(rank) +
                                      " is over the limit of " + std::to_string(kMaxRank));
    CAIRN_ASSIGN_OR_RETURN(auto norm, normalize_axes(axes.v, rank));
    Shape s;
    size_t next = 0;
    for (int64_t i = 0; i < rank; ++i)
      s.push_back(std::find(norm.begin(), norm.end(), i) != norm.end() ? 1 : d[next++]);
    out[0].dtype = in[0].dtype;
    out[0].shape = std::move(s);
    return Status::ok();
  }

 private:
  IntsArg axes_;
};

Result<std::unique_ptr<Op>> make_unsqueeze(const NodeContext& ctx) {
  CAIRN_RETURN_IF_ERROR(
      check_arity(ctx.node, ctx.node.opset >= 13 ? 2 : 1, ctx.node.opset >= 13 ? 2 : 1, 1));
  CAIRN_ASSIGN_OR_RETURN(auto axes, IntsArg::make(ctx.node, "axes", 13, 1));
  return std::unique_ptr<Op>(new UnsqueezeOp(std::move(axes)));
}

class IdentityOp final : public ViewOp {
 public:
  Status infer(std::span<const TensorInfo> in, std::span<const bool>,
               std::span<TensorInfo> out) const override {
    out[0].dtype = in[0].dtype;
    out[0].shape = in[0].shape;
    return Status::ok();
  }
};

Result<std::unique_ptr<Op>> make_identity(const NodeContext& ctx) {
  CAIRN_RETURN_IF_ERROR(check_arity(ctx.node, 1, 1, 1));
  return std::unique_ptr<Op>(new IdentityOp());
}

// -------------------------------------------------------------- sources

// Shape: reads only the input's shape, never its data, so the planner may
// run it with in[0]->data == nullptr.
class ShapeOp final : public Op {
 public:
  ShapeOp(int64_t start, int64_t end, bool has_end) : start_(start), end_(end), has_end_(has_end) {}

  // ONNX's rule: negative counts from the back, then clamp to [0, rank].
  void range(int64_t rank, int64_t& b, int64_t& e) const {
    b = start_ < 0 ? start_ + rank : start_;
    e = !has_end_ ? rank : end_ < 0 ? end_ + rank : end_;
    b = std::clamp<int64_t>(b, 0, rank);
    e = std::clamp<int64_t>(e, 0, rank);
    e = std::max(e, b);
  }

  Status infer(std::span<const TensorInfo> in, std::span<const bool>,
               std::span<TensorInfo> out) const override {
    int64_t b, e;
    range(int64_t(in[0].shape.size()), b, e);
    out[0].dtype = DType::Int64;
    out[0].shape = {e - b};
    return Status::ok();
  }

  Status run(const RunArgs& args) const override {
    const Shape& d = args.in[0]->shape;
    int64_t b, e;
    range(int64_t(d.size()), b, e);
    int64_t* y = args.out[0]->as<int64_t>();
    for (int64_t i = b; i < e; ++i) y[i - b] = d[size_t(i)];
    return Status::ok();
  }

 private:
  int64_t start_, end_;
  bool has_end_;
};

Result<std::unique_ptr<Op>> make_shape(const NodeContext& ctx) {
  CAIRN_RETURN_IF_ERROR(check_arity(ctx.node, 1, 1, 1));
  CAIRN_ASSIGN_OR_RETURN(int64_t start, ctx.node.get_int("start", 0));
  CAIRN_ASSIGN_OR_RETURN(int64_t end, ctx.node.get_int("end", 0));
  return std::unique_ptr<Op>(new ShapeOp(start, end, ctx.node.has("end")));
}

// Size: the element count as an int64 scalar; like Shape it reads only the
// input's shape.
class SizeOp final : public Op {
 public:
  Status infer(std::span<const TensorInfo> in, std::span<const bool>,
               std::span<TensorInfo> out) const override {
    CAIRN_RETURN_IF_ERROR(checked_count(in[0].shape).status());
    out[0].dtype = DType::Int64;
    out[0].shape = {};
    return Status::ok();
  }
  Status run(const RunArgs& args) const override {
    *args.out[0]->as<int64_t>() = args.in[0]->count();
    return Status::ok();
  }
};

Result<std::unique_ptr<Op>> make_size(const NodeContext& ctx) {
  CAIRN_RETURN_IF_ERROR(check_arity(ctx.node, 1, 1, 1));
  return std::unique_ptr<Op>(new SizeOp());
}

// Constant: the attribute's tensor, copied out on every run (the planner
// usually keeps the value itself).
class ConstantOp final : public Op {
 public:
  explicit ConstantOp(std::shared_ptr<const values::Tensor> t) : t_(std::move(t)) {}
  Status infer(std::span<const TensorInfo>, std::span<const bool>,
               std::span<TensorInfo> out) const override {
    out[0].dtype = t_->dtype;
    out[0].shape = t_->shape;
    return Status::ok();
  }
  Status run(const RunArgs& args) const override {
    if (!t_->data.empty()) std::memcpy(args.out[0]->data, t_->data.data(), t_->data.size());
    return Status::ok();
  }

 private:
  std::shared_ptr<const values::Tensor> t_;
};

Result<std::unique_ptr<Op>> make_constant(const NodeContext& ctx) {
  const Node& node = ctx.node;
  CAIRN_RETURN_IF_ERROR(check_arity(node, 0, 0, 1));
  for (const char* refused : {"value_string", "value_strings", "sparse_value"})
    if (node.has(refused))
      return Status::invalid_argument(std::string("attribute '") + refused +
                                      "' is not supported (only numeric dense tensors)");
  int given = 0;
  for (const char* a : {"value", "value_float", "value_floats", "value_int", "value_ints"})
    given += node.has(a);
  if (given != 1)
    return Status::invalid_argument(
        "needs exactly one of value, value_float, value_floats, value_int, value_ints; got " +
        std::to_string(given));
  std::shared_ptr<const values::Tensor> t;
  if (node.has("value")) {
    CAIRN_ASSIGN_OR_RETURN(const values::Tensor* v, node.require_tensor("value"));
    CAIRN_ASSIGN_OR_RETURN(int64_t n, checked_count(v->shape, values::dtype_size(v->dtype)));
    if (v->data.size() != size_t(n) * values::dtype_size(v->dtype))
      return Status::invalid_argument("attribute 'value' holds " + std::to_string(v->data.size()) +
                                      " bytes for shape " + shape_string(v->shape));
    t = node.attributes.at("value").tensor;
  } else if (node.has("value_float")) {
    CAIRN_ASSIGN_OR_RETURN(double f, node.get_float("value_float", 0));
    t = std::make_shared<values::Tensor>(values::make_tensor(std::vector<float>{float(f)}, {}));
  } else if (node.has("value_floats")) {
    CAIRN_ASSIGN_OR_RETURN(auto fs, node.get_floats("value_floats"));
    std::vector<float> v(fs.begin(), fs.end());
    t = std::make_shared<values::Tensor>(values::make_tensor(v, {int64_t(v.size())}));
  } else if (node.has("value_int")) {
    CAIRN_ASSIGN_OR_RETURN(int64_t i, node.get_int("value_int", 0));
    t = std::make_shared<values::Tensor>(values::make_tensor(std::vector<int64_t>{i}, {}));
  } else {
    CAIRN_ASSIGN_OR_RETURN(auto is, node.get_ints("value_ints"));
    t = std::make_shared<values::Tensor>(values::make_tensor(is, {int64_t(is.size())}));
  }
  return std::unique_ptr<Op>(new ConstantOp(std::move(t)));
}

// ConstantOfShape: the shape comes from input 0 (known before running), the
// fill value from the one-element `value` tensor (float32 0 by default).
class ConstantOfShapeOp final : public Op {
 public:
  ConstantOfShapeOp(DType dtype, std::array<char, 8> value) : dtype_(dtype), value_(value) {}
  bool needs_value(size_t i) const override { return i == 0; }

  Status infer(std::span<const TensorInfo> in, std::span<const bool>,
               std::span<TensorInfo> out) const override {
    if (in[0].shape.size() != 1)
      return Status::invalid_argument("input must be 1-D, got shape " + shape_string(in[0].shape));
    CAIRN_ASSIGN_OR_RETURN(auto s, known_ints(in, 0, "input"));
    CAIRN_RETURN_IF_ERROR(checked_count(s, values::dtype_size(dtype_)).status());
    out[0].dtype = dtype_;
    out[0].shape = std::move(s);
    return Status::ok();
  }

  Status run(const RunArgs& args) const override {
    const TensorView& y = *args.out[0];
    char* p = static_cast<char*>(y.data);
    const size_t total = y.bytes(), elem = values::dtype_size(dtype_);
    if (total == 0) return Status::ok();
    std::memcpy(p, value_.data(), elem);
    for (size_t filled = elem; filled < total; filled *= 2)  // doubling copies
      std::memcpy(p + filled, p, std::min(filled, total - filled));
    return Status::ok();
  }

 private:
  DType dtype_;
  std::array<char, 8> value_;
};

Result<std::unique_ptr<Op>> make_constant_of_shape(const NodeContext& ctx) {
  CAIRN_RETURN_IF_ERROR(check_arity(ctx.node, 1, 1, 1));
  DType dtype = DType::Float32;
  std::array<char, 8> value{};
  if (ctx.node.has("value")) {
    CAIRN_ASSIGN_OR_RETURN(const values::Tensor* v, ctx.node.require_tensor("value"));
    const size_t elem = values::dtype_size(v->dtype);
    auto n = values::Tensor::count_of(v->dtype, v->shape);
    if (!n || *n != 1 || v->data.size() != elem || elem > value.size())
      return Status::invalid_argument(
          "attribute 'value' must hold exactly one element, got shape " + shape_string(v->shape));
    dtype = v->dtype;
    std::memcpy(value.data(), v->data.data(), elem);
  }
  return std::unique_ptr<Op>(new ConstantOfShapeOp(dtype, value));
}

}  // namespace

void add_view_ops(OpTable& table) {
  table.add("Reshape", make_reshape);
  table.add("Flatten", make_flatten);
  table.add("Squeeze", make_squeeze);
  table.add("Unsqueeze", make_unsqueeze);
  table.add("Identity", make_identity);
}

void add_source_ops(OpTable& table) {
  table.add("Shape", make_shape);
  table.add("Size", make_size);
  table.add("Constant", make_constant);
  table.add("ConstantOfShape", make_constant_of_shape);
}

}  // namespace shape_ops

void add_shape_ops(OpTable& table) {
  shape_ops::add_view_ops(table);
  shape_ops::add_source_ops(table);
  shape_ops::add_movement_ops(table);
  shape_ops::add_cast_ops(table);
  shape_ops::add_reduce_ops(table);
}

}  // namespace cairn::onnx
