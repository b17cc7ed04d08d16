// onnx/ops_shape_move.cpp — operators that move bytes without changing them:
// Transpose, Concat, Split, Slice and Gather, for any dtype. Each reduces its
// work to contiguous block copies or one strided gather (ops_shape_copy.cpp),
// which copy whole contiguous runs with memcpy and split over the pool when
// big. Gather is the one that can fail while running: its indices may come
// from a request, so they are checked before anything is written.
#include <algorithm>
#include <cstdint>

#include "onnx/ops_shape_common.h"

namespace cairn::onnx::shape_ops {

namespace {

// Row-major element strides of a shape.
void strides_of(const Shape& s, Dims& out) {
  out.n = s.size();
  int64_t st = 1;
  for (size_t k = s.size(); k-- > 0;) {
    out[k] = st;
    st *= s[k];
  }
}

// ------------------------------------------------------------ Transpose

class TransposeOp final : public Op {
 public:
  explicit TransposeOp(std::vector<int64_t> perm) : perm_(std::move(perm)) {}

  Status infer(std::span<const TensorInfo> in, std::span<const bool>,
               std::span<TensorInfo> out) const override {
    const Shape& d = in[0].shape;
    if (d.size() > kMaxRank)
      return Status::invalid_argument("rank " + std::to_string(d.size()) + " is over the limit");
    if (!perm_.empty()) {
      if (perm_.size() != d.size())
        return Status::invalid_argument(
            "perm " + shape_string(perm_) + " has " + std::to_string(perm_.size()) +
            " entries for an input of rank " + std::to_string(d.size()));
      std::vector<bool> seen(d.size());
      for (int64_t p : perm_) {
        if (p < 0 || p >= int64_t(d.size()) || seen[size_t(p)])
          return Status::invalid_argument("perm " + shape_string(perm_) +
                                          " is not a permutation of 0.." +
                                          std::to_string(d.size() - 1));
        seen[size_t(p)] = true;
      }
    }
    Shape s(d.size());
    for (size_t k = 0; k < d.size(); ++k) s[k] = d[size_t(axis(k, d.size()))];
    out[0].dtype = in[0].dtype;
    out[0].shape = std::move(s);
    return Status::ok();
  }

  Status run(const RunArgs& args) const override {
    const TensorView& x = *args.in[0];
    const TensorView& y = *args.out[0];
    const int64_t e = int64_t(values::dtype_size(x.dtype));
    Dims st;
    strides_of(x.shape, st);
    StridedCopy c;
    c.src = static_cast<const char*>(x.data);
    c.dst = static_cast<char*>(y.data);
    c.elem = e;
    for (size_t k = 0; k < x.shape.size(); ++k) {
      const int64_t a = axis(k, x.shape.size());
      c.dims.push(x.shape[size_t(a)]);
      c.src_stride.push(st[size_t(a)] * e);
    }
    strided_copy(args.pool, c);
    return Status::ok();
  }

 private:
  // The input axis of output axis k (the default reverses the axes).
  int64_t axis(size_t k, size_t rank) const {
    return perm_.empty() ? int64_t(rank - 1 - k) : perm_[k];
  }
  std::vector<int64_t> perm_;
};

Result<std::unique_ptr<Op>> make_transpose(const NodeContext& ctx) {
  CAIRN_RETURN_IF_ERROR(check_arity(ctx.node, 1, 1, 1));
  CAIRN_ASSIGN_OR_RETURN(auto perm, ctx.node.get_ints("perm"));
  if (ctx.node.has("perm") && perm.empty()) return Status::invalid_argument("perm is empty");
  return std::unique_ptr<Op>(new TransposeOp(std::move(perm)));
}

// --------------------------------------------------------------- Concat

// Shared by Concat and Split: the shape seen as [outer, axis, inner].
struct AxisSplit {
  int64_t outer = 1, inner = 1;
};
AxisSplit around(const Shape& s, int64_t axis) {
  AxisSplit r;
  for (int64_t k = 0; k < axis; ++k) r.outer *= s[size_t(k)];
  for (size_t k = size_t(axis) + 1; k < s.size(); ++k) r.inner *= s[k];
  return r;
}

class ConcatOp final : public Op {
 public:
  explicit ConcatOp(int64_t axis) : axis_(axis) {}

  Status infer(std::span<const TensorInfo> in, std::span<const bool>,
               std::span<TensorInfo> out) const override {
    const Shape& first = in[0].shape;
    if (first.empty()) return Status::invalid_argument("cannot concatenate scalars");
    CAIRN_ASSIGN_OR_RETURN(int64_t a, normalize_axis(axis_, int64_t(first.size())));
    Shape s = first;
    s[size_t(a)] = 0;
    for (size_t i = 0; i < in.size(); ++i) {
      const Shape& d = in[i].shape;
      if (in[i].dtype != in[0].dtype)
        return Status::invalid_argument("input " + std::to_string(i) + " is " +
                                        values::dtype_name(in[i].dtype) + ", input 0 is " +
                                        values::dtype_name(in[0].dtype));
      bool ok = d.size() == first.size();
      for (size_t k = 0; ok && k < d.size(); ++k) ok = int64_t(k) == a || d[k] == first[k];
      if (!ok)
        return Status::invalid_argument("input " + std::to_string(i) + " has shape " +
                                        shape_string(d) + ", which does not concatenate with " +
                                        shape_string(first) + " on axis " + std::to_string(a));
      if (d[size_t(a)] < 0 || s[size_t(a)] > INT64_MAX - d[size_t(a)])
        return Status::invalid_argument("the concatenated axis is too long");
      s[size_t(a)] += d[size_t(a)];
    }
    CAIRN_RETURN_IF_ERROR(checked_count(s, values::dtype_size(in[0].dtype)).status());
    out[0].dtype = in[0].dtype;
    out[0].shape = std::move(s);
    return Status::ok();
  }

  Status run(const RunArgs& args) const override {
    const TensorView& y = *args.out[0];
    const int64_t a = axis_ < 0 ? axis_ + int64_t(y.shape.size()) : axis_;
    const AxisSplit as = around(y.shape, a);
    const int64_t inner_bytes = as.inner * int64_t(values::dtype_size(y.dtype));
    const int64_t out_row = y.shape[size_t(a)] * inner_bytes;
    int64_t offset = 0;
    for (const TensorView* x : args.in) {
      const int64_t row = x->shape[size_t(a)] * inner_bytes;
      copy_blocks(args.pool, static_cast<char*>(y.data) + offset, out_row,
                  static_cast<const char*>(x->data), row, as.outer, row);
      offset += row;
    }
    return Status::ok();
  }

 private:
  int64_t axis_;
};

Result<std::unique_ptr<Op>> make_concat(const NodeContext& ctx) {
  CAIRN_RETURN_IF_ERROR(check_arity(ctx.node, 1, SIZE_MAX, 1));
  for (size_t i = 0; i < ctx.node.inputs.size(); ++i)
    if (ctx.node.inputs[i].empty())
      return Status::invalid_argument("input " + std::to_string(i) + " is empty");
  CAIRN_ASSIGN_OR_RETURN(int64_t axis, ctx.node.require_int("axis"));
  return std::unique_ptr<Op>(new ConcatOp(axis));
}

// ---------------------------------------------------------------- Split

class SplitOp final : public Op {
 public:
  SplitOp(int64_t axis, IntsArg split, int64_t num_outputs, size_t n_out)
      : axis_(axis), split_(std::move(split)), num_outputs_(num_outputs), n_out_(n_out) {}
  bool needs_value(size_t i) const override { return split_.from_input && i == split_.index; }

  Status infer(std::span<const TensorInfo> in, std::span<const bool> present,
               std::span<TensorInfo> out) const override {
    const Shape& d = in[0].shape;
    if (d.empty()) return Status::invalid_argument("cannot split a scalar");
    CAIRN_ASSIGN_OR_RETURN(int64_t a, normalize_axis(axis_, int64_t(d.size())));
    const int64_t dim = d[size_t(a)];
    const int64_t n = int64_t(n_out_);
    CAIRN_ASSIGN_OR_RETURN(auto split, split_.get(in, present, "split"));
    std::vector<int64_t> sizes;
    if (split.has) {
      if (num_outputs_ > 0)
        return Status::invalid_argument(
            "takes either input 'split' or attribute 'num_outputs', not both");
      if (int64_t(split.v.size()) != n)
        return Status::invalid_argument("split " + shape_string(split.v) + " has " +
                                        std::to_string(split.v.size()) + " sizes for " +
                                        std::to_string(n) + " outputs");
      int64_t sum = 0;
      for (int64_t v : split.v) {
        if (v < 0 || v > dim)
          return Status::invalid_argument("split " + shape_string(split.v) + " has a bad size");
        sum += v;
      }
      if (sum != dim)
        return Status::invalid_argument("split " + shape_string(split.v) + " adds up to " +
                                        std::to_string(sum) + ", the axis has " +
                                        std::to_string(dim));
      sizes = split.v;
    } else if (num_outputs_ > 0) {
      // Opset 18: chunks of ceil(dim / n), the last one smaller.
      const int64_t chunk = (dim + n - 1) / n;
      const int64_t last = dim - chunk * (n - 1);
      if (last < 0)
        return Status::invalid_argument("an axis of " + std::to_string(dim) +
                                        " cannot be split into " + std::to_string(n) +
                                        " chunks of " + std::to_string(chunk));
      sizes.assign(size_t(n), chunk);
      sizes.back() = last;
    } else {
      if (dim % n != 0)
        return Status::invalid_argument("an axis of " + std::to_string(dim) +
                                        " does not split evenly into " + std::to_string(n) +
                                        " outputs");
      sizes.assign(size_t(n), dim / n);
    }
    for (size_t i = 0; i < n_out_; ++i) {
      out[i].dtype = in[0].dtype;
      out[i].shape = d;
      out[i].shape[size_t(a)] = sizes[i];
    }
    return Status::ok();
  }

  Status run(const RunArgs& args) const override {
    const TensorView& x = *args.in[0];
    const int64_t a = axis_ < 0 ? axis_ + int64_t(x.shape.size()) : axis_;
    const AxisSplit as = around(x.shape, a);
    const int64_t inner_bytes = as.inner * int64_t(values::dtype_size(x.dtype));
    const int64_t in_row = x.shape[size_t(a)] * inner_bytes;
    int64_t offset = 0;
    for (TensorView* y : args.out) {
      const int64_t row = y->shape[size_t(a)] * inner_bytes;
      copy_blocks(args.pool, static_cast<char*>(y->data), row,
                  static_cast<const char*>(x.data) + offset, in_row, as.outer, row);
      offset += row;
    }
    return Status::ok();
  }

 private:
  int64_t axis_;
  IntsArg split_;
  int64_t num_outputs_;
  size_t n_out_;
};

Result<std::unique_ptr<Op>> make_split(const NodeContext& ctx) {
  const Node& node = ctx.node;
  CAIRN_RETURN_IF_ERROR(check_arity(node, 1, node.opset >= 13 ? 2 : 1, -1));
  CAIRN_ASSIGN_OR_RETURN(int64_t axis, node.get_int("axis", 0));
  CAIRN_ASSIGN_OR_RETURN(auto split, IntsArg::make(node, "split", 13, 1));
  CAIRN_ASSIGN_OR_RETURN(int64_t num_outputs, node.get_int("num_outputs", 0));
  if (node.has("num_outputs")) {
    if (node.opset < 18)
      return Status::invalid_argument("attribute 'num_outputs' exists from opset 18");
    if (num_outputs != int64_t(node.outputs.size()))
      return Status::invalid_argument("num_outputs is " + std::to_string(num_outputs) +
                                      " but the node has " + std::to_string(node.outputs.size()) +
                                      " outputs");
  }
  return std::unique_ptr<Op>(new SplitOp(axis, std::move(split), num_outputs, node.outputs.size()));
}

// ---------------------------------------------------------------- Slice

// Per dim of `d`: where the slice starts, its step and its length, from
// ONNX's starts/ends/axes/steps (negative values count from the back, then
// clamp: [0, d] for a positive step, [-1, d-1] for a negative one). Used by
// infer() (which reports errors) and run() (which repeats it on the same
// values, so it cannot fail there), without allocating.
Status slice_params(std::span<const int64_t> d, std::span<const int64_t> starts,
                    std::span<const int64_t> ends, std::span<const int64_t> axes, bool has_axes,
                    std::span<const int64_t> steps, bool has_steps, int64_t* start, int64_t* step,
                    int64_t* count) {
  const int64_t rank = int64_t(d.size());
  const size_t n = starts.size();
  if (ends.size() != n || (has_axes && axes.size() != n) || (has_steps && steps.size() != n))
    return Status::invalid_argument("starts, ends, axes and steps must have the same length");
  if (int64_t(n) > rank)
    return Status::invalid_argument(std::to_string(n) + " starts for an input of rank " +
                                    std::to_string(rank));
  for (int64_t k = 0; k < rank; ++k) {
    start[k] = 0;
    step[k] = 1;
    count[k] = d[size_t(k)];
  }
  uint64_t seen = 0;  // kMaxRank <= 64
  for (size_t i = 0; i < n; ++i) {
    int64_t a = has_axes ? axes[i] : int64_t(i);
    if (a < -rank || a >= rank)
      return Status::invalid_argument("axis " + std::to_string(a) + " is out of range for rank " +
                                      std::to_string(rank));
    if (a < 0) a += rank;
    if (seen & (uint64_t(1) << a))
      return Status::invalid_argument("axis " + std::to_string(a) + " is listed twice");
    seen |= uint64_t(1) << a;
    const int64_t dim = d[size_t(a)];
    int64_t s = has_steps ? steps[i] : 1;
    if (s == 0) return Status::invalid_argument("a step is 0");
    int64_t b = starts[i], e = ends[i];
    if (b < 0) b += dim;  // no overflow: dim >= 0
    if (e < 0) e += dim;
    // A step longer than the axis takes one element at most; clamping it
    // keeps the arithmetic below in range (steps may be INT64_MIN).
    const int64_t lim = std::max<int64_t>(dim, 1);
    s = std::clamp(s, -lim, lim);
    int64_t c;
    if (s > 0) {
      b = std::clamp<int64_t>(b, 0, dim);
      e = std::clamp<int64_t>(e, 0, dim);
      c = e > b ? (e - b + s - 1) / s : 0;
    } else {
      b = std::clamp<int64_t>(b, 0, dim - 1);
      e = std::clamp<int64_t>(e, -1, dim - 1);
      c = b > e ? (b - e - s - 1) / -s : 0;
    }
    if (dim == 0) c = 0;
    start[a] = c > 0 ? b : 0;
    step[a] = s;
    count[a] = c;
  }
  return Status::ok();
}

class SliceOp final : public Op {
 public:
  bool needs_value(size_t i) const override { return i >= 1; }

  Status infer(std::span<const TensorInfo> in, std::span<const bool> present,
               std::span<TensorInfo> out) const override {
    const Shape& d = in[0].shape;
    if (d.size() > kMaxRank)
      return Status::invalid_argument("rank " + std::to_string(d.size()) + " is over the limit");
    CAIRN_ASSIGN_OR_RETURN(auto starts, known_ints(in, 1, "starts"));
    CAIRN_ASSIGN_OR_RETURN(auto ends, known_ints(in, 2, "ends"));
    std::vector<int64_t> axes, steps;
    const bool has_axes = is_present(present, 3), has_steps = is_present(present, 4);
    if (has_axes) {
      CAIRN_ASSIGN_OR_RETURN(axes, known_ints(in, 3, "axes"));
    }
    if (has_steps) {
      CAIRN_ASSIGN_OR_RETURN(steps, known_ints(in, 4, "steps"));
    }
    Dims start, step, count;
    CAIRN_RETURN_IF_ERROR(slice_params(d, starts, ends, axes, has_axes, steps, has_steps,
                                       start.v.data(), step.v.data(), count.v.data()));
    out[0].dtype = in[0].dtype;
    out[0].shape.assign(count.v.begin(), count.v.begin() + int64_t(d.size()));
    return Status::ok();
  }

  Status run(const RunArgs& args) const override {
    const TensorView& x = *args.in[0];
    Dims starts, ends, axes, steps;
    const bool has_axes = args.in.size() > 3 && args.in[3] != nullptr;
    const bool has_steps = args.in.size() > 4 && args.in[4] != nullptr;
    if (!read_small_ints(*args.in[1], starts) || !read_small_ints(*args.in[2], ends) ||
        (has_axes && !read_small_ints(*args.in[3], axes)) ||
        (has_steps && !read_small_ints(*args.in[4], steps)))
      return Status::internal("Slice: starts/ends/axes/steps unreadable while running");
    Dims start, step, count, d;
    for (int64_t v : x.shape) d.push(v);
    CAIRN_RETURN_IF_ERROR(slice_params({d.v.data(), d.n}, {starts.v.data(), starts.n},
                                       {ends.v.data(), ends.n}, {axes.v.data(), axes.n}, has_axes,
                                       {steps.v.data(), steps.n}, has_steps, start.v.data(),
                                       step.v.data(), count.v.data()));
    // The values must be the ones infer() saw (a plan is reused for inputs
    // of the same shapes): never write past the output planned for them.
    const Shape& ys = args.out[0]->shape;
    for (size_t k = 0; k < d.n; ++k)
      if (ys.size() != d.n || ys[k] != count[k])
        return Status::invalid_argument(
            "starts/ends/axes/steps differ from those the plan was made for");
    const int64_t e = int64_t(values::dtype_size(x.dtype));
    Dims st;
    strides_of(x.shape, st);
    StridedCopy c;
    c.src = static_cast<const char*>(x.data);
    c.dst = static_cast<char*>(args.out[0]->data);
    c.elem = e;
    for (size_t k = 0; k < d.n; ++k) {
      c.src += start[k] * st[k] * e;
      c.dims.push(count[k]);
      c.src_stride.push(step[k] * st[k] * e);
    }
    strided_copy(args.pool, c);
    return Status::ok();
  }
};

Result<std::unique_ptr<Op>> make_slice(const NodeContext& ctx) {
  CAIRN_RETURN_IF_ERROR(check_arity(ctx.node, 3, 5, 1));
  CAIRN_RETURN_IF_ERROR(refuse_moved_attribute(ctx.node, "starts", 10, 1));
  CAIRN_RETURN_IF_ERROR(refuse_moved_attribute(ctx.node, "ends", 10, 2));
  CAIRN_RETURN_IF_ERROR(refuse_moved_attribute(ctx.node, "axes", 10, 3));
  return std::unique_ptr<Op>(new SliceOp());
}

// --------------------------------------------------------------- Gather

class GatherOp final : public Op {
 public:
  explicit GatherOp(int64_t axis) : axis_(axis) {}

  Status infer(std::span<const TensorInfo> in, std::span<const bool>,
               std::span<TensorInfo> out) const override {
    const Shape& d = in[0].shape;
    const Shape& ix = in[1].shape;
    if (d.empty()) return Status::invalid_argument("cannot gather from a scalar");
    if (in[1].dtype != DType::Int64 && in[1].dtype != DType::Int32)
      return Status::invalid_argument(std::string("indices must be int64 or int32, got ") +
                                      values::dtype_name(in[1].dtype));
    CAIRN_ASSIGN_OR_RETURN(int64_t a, normalize_axis(axis_, int64_t(d.size())));
    Shape s(d.begin(), d.begin() + a);
    s.insert(s.end(), ix.begin(), ix.end());
    s.insert(s.end(), d.begin() + a + 1, d.end());
    CAIRN_RETURN_IF_ERROR(checked_count(s, values::dtype_size(in[0].dtype)).status());
    if (in[1].value) CAIRN_RETURN_IF_ERROR(check_indices(*in[1].value, a, d[size_t(a)]));
    out[0].dtype = in[0].dtype;
    out[0].shape = std::move(s);
    return Status::ok();
  }

  Status run(const RunArgs& args) const override {
    const TensorView& x = *args.in[0];
    const TensorView& ix = *args.in[1];
    const int64_t a = axis_ < 0 ? axis_ + int64_t(x.shape.size()) : axis_;
    const int64_t dim = x.shape[size_t(a)];
    CAIRN_RETURN_IF_ERROR(check_indices(ix, a, dim));
    struct Job {
      const char* src;
      char* dst;
      const void* idx;
      bool i64;
      int64_t n_idx, dim, block;
    };
    const AxisSplit as = around(x.shape, a);
    const Job job{static_cast<const char*>(x.data),
                  static_cast<char*>(args.out[0]->data),
                  ix.data,
                  ix.dtype == DType::Int64,
                  ix.count(),
                  dim,
                  as.inner * int64_t(values::dtype_size(x.dtype))};
    auto rows = [&job](int64_t b, int64_t e) {
      for (int64_t w = b; w < e; ++w) {
        const int64_t o = w / job.n_idx, j = w % job.n_idx;
        int64_t i = job.i64 ? static_cast<const int64_t*>(job.idx)[j]
                            : static_cast<const int32_t*>(job.idx)[j];
        if (i < 0) i += job.dim;
        std::memcpy(job.dst + w * job.block, job.src + (o * job.dim + i) * job.block,
                    size_t(job.block));
      }
    };
    const int64_t n = as.outer * job.n_idx;
    if (n * job.block < kParallelBytes || n < 2 || args.pool.size() <= 1)
      rows(0, n);
    else
      args.pool.parallel_for(n, rows);
    return Status::ok();
  }

 private:
  // Every index in [-dim, dim), or an error naming the first that is not.
  static Status check_indices(const TensorView& ix, int64_t axis, int64_t dim) {
    const int64_t n = ix.count();
    const bool i64 = ix.dtype == DType::Int64;
    for (int64_t j = 0; j < n; ++j) {
      const int64_t i = i64 ? ix.as<const int64_t>()[j] : ix.as<const int32_t>()[j];
      if (i < -dim || i >= dim)
        return Status::invalid_argument("index " + std::to_string(i) +
                                        " is out of range for axis " + std::to_string(axis) +
                                        " of size " + std::to_string(dim));
    }
    return Status::ok();
  }
  int64_t axis_;
};

Result<std::unique_ptr<Op>> make_gather(const NodeContext& ctx) {
  CAIRN_RETURN_IF_ERROR(check_arity(ctx.node, 2, 2, 1));
  CAIRN_ASSIGN_OR_RETURN(int64_t axis, ctx.node.get_int("axis", 0));
  return std::unique_ptr<Op>(new GatherOp(axis));
}

}  // namespace

void add_movement_ops(OpTable& table) {
  table.add("Transpose", make_transpose);
  table.add("Concat", make_concat);
  table.add("Split", make_split);
  table.add("Slice", make_slice);
  table.add("Gather", make_gather);
}

}  // namespace cairn::onnx::shape_ops
