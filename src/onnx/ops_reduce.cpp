// onnx/ops_reduce.cpp — reductions along axes: ReduceMean and ReduceSum
// (float32; ReduceSum also int64/int32, which wrap on overflow as two's
// complement), ArgMax (float32/int64/int32 in, int64 out) and TopK (float32
// values, int64 indices). Axes and K must be known before running. The
// common layout [outer, reduced, inner] has fast paths (contiguous rows, or
// whole inner rows accumulated at once) split over the pool when big; any
// other set of axes takes a plain loop over the input.
// NaN ranks above every number in ArgMax and TopK (numpy's convention), and
// equal values keep the lower index first, as ONNX Runtime does.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "onnx/ops_shape_common.h"

namespace cairn::onnx::shape_ops {

namespace {

// The input seen as [outer, reduce, inner] around one axis.
struct Around {
  int64_t outer = 1, n = 1, inner = 1;
};
Around around_axis(const Shape& s, int64_t axis) {
  Around a;
  for (int64_t k = 0; k < int64_t(s.size()); ++k) {
    if (k < axis)
      a.outer *= s[size_t(k)];
    else if (k == axis)
      a.n = s[size_t(k)];
    else
      a.inner *= s[size_t(k)];
  }
  return a;
}

// ------------------------------------------------------ ReduceMean/Sum

enum class ReduceKind { Sum, Mean };

// Accumulation type: floats in float; integers in the unsigned type of the
// same width, so overflow wraps instead of being undefined.
template <typename T>
struct AccOf {
  using type = std::make_unsigned_t<T>;
};
template <>
struct AccOf<float> {
  using type = float;
};
template <typename T>
using Acc = typename AccOf<T>::type;

struct ReducePlan {
  const char* src;
  char* dst;
  Dims dims, reduced;       // the input's dims; reduced[k] != 0 for a reduced axis
  int64_t outer, n, inner;  // when one reduced group: [outer, n, inner]
  bool mean;
};

template <typename T>
void reduce_rows(const ReducePlan& p, int64_t b, int64_t e) {
  // Work item w: output row o = w (inner == 1) or the inner chunk of a row.
  const T* x = reinterpret_cast<const T*>(p.src);
  T* y = reinterpret_cast<T*>(p.dst);
  if (p.inner == 1) {
    for (int64_t o = b; o < e; ++o) {
      const T* r = x + o * p.n;
      Acc<T> acc[8] = {};
      int64_t i = 0;
      for (; i + 8 <= p.n; i += 8)
        for (int j = 0; j < 8; ++j) acc[j] += Acc<T>(r[i + j]);
      for (; i < p.n; ++i) acc[0] += Acc<T>(r[i]);
      const Acc<T> s =
          ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
      y[o] = p.mean ? T(float(s) / float(p.n)) : T(s);
    }
    return;
  }
  constexpr int64_t kCols = 256;
  const int64_t chunks = (p.inner + kCols - 1) / kCols;
  for (int64_t w = b; w < e; ++w) {
    const int64_t o = w / chunks, c0 = (w % chunks) * kCols, c1 = std::min(p.inner, c0 + kCols);
    Acc<T> acc[kCols] = {};
    for (int64_t r = 0; r < p.n; ++r) {
      const T* row = x + (o * p.n + r) * p.inner;
      for (int64_t c = c0; c < c1; ++c) acc[c - c0] += Acc<T>(row[c]);
    }
    T* out = y + o * p.inner;
    for (int64_t c = c0; c < c1; ++c)
      out[c] = p.mean ? T(float(acc[c - c0]) / float(p.n)) : T(acc[c - c0]);
  }
}

// Any set of axes: zero the output, add every input element into its place.
template <typename T>
void reduce_any(const ReducePlan& p, int64_t in_count, int64_t out_count) {
  const T* x = reinterpret_cast<const T*>(p.src);
  T* y = reinterpret_cast<T*>(p.dst);
  std::fill(y, y + out_count, T(0));
  Dims out_stride, idx;
  int64_t st = 1;
  out_stride.n = idx.n = p.dims.n;
  for (size_t k = p.dims.n; k-- > 0;) {
    out_stride[k] = p.reduced[k] ? 0 : st;
    if (!p.reduced[k]) st *= p.dims[k];
    idx[k] = 0;
  }
  int64_t off = 0;
  for (int64_t i = 0; i < in_count; ++i) {
    y[off] = T(Acc<T>(y[off]) + Acc<T>(x[i]));
    for (size_t k = p.dims.n; k-- > 0;) {
      off += out_stride[k];
      if (++idx[k] < p.dims[k]) break;
      off -= idx[k] * out_stride[k];
      idx[k] = 0;
    }
  }
  // The mean of nothing is 0, as ONNX Runtime gives (numpy would say NaN).
  if (p.mean && out_count > 0 && in_count > 0) {
    const float n = float(in_count / out_count);
    for (int64_t i = 0; i < out_count; ++i) y[i] = T(float(y[i]) / n);
  }
}

class ReduceOp final : public Op {
 public:
  ReduceOp(ReduceKind kind, bool keepdims, bool noop, IntsArg axes)
      : kind_(kind), keepdims_(keepdims), noop_(noop), axes_(std::move(axes)) {}
  bool needs_value(size_t i) const override { return axes_.from_input && i == axes_.index; }

  Status infer(std::span<const TensorInfo> in, std::span<const bool> present,
               std::span<TensorInfo> out) const override {
    const DType t = in[0].dtype;
    if (t != DType::Float32 &&
        (kind_ == ReduceKind::Mean || (t != DType::Int64 && t != DType::Int32)))
      return Status::invalid_argument(
          std::string("input type ") + values::dtype_name(t) + " is not supported (" +
          (kind_ == ReduceKind::Mean ? "float32" : "float32, int64, int32") + ")");
    const Shape& d = in[0].shape;
    if (d.size() > kMaxRank)
      return Status::invalid_argument("rank " + std::to_string(d.size()) + " is over the limit");
    CAIRN_ASSIGN_OR_RETURN(auto axes, axes_.get(in, present, "axes"));
    std::vector<bool> reduced(d.size(), false);
    if (axes.v.empty()) {
      if (!noop_) reduced.assign(d.size(), true);
    } else {
      CAIRN_ASSIGN_OR_RETURN(auto norm, normalize_axes(axes.v, int64_t(d.size())));
      for (int64_t a : norm) reduced[size_t(a)] = true;
    }
    Shape s;
    for (size_t k = 0; k < d.size(); ++k) {
      if (!reduced[k])
        s.push_back(d[k]);
      else if (keepdims_)
        s.push_back(1);
    }
    out[0].dtype = t;
    out[0].shape = std::move(s);
    return Status::ok();
  }

  Status run(const RunArgs& args) const override {
    const TensorView& x = *args.in[0];
    const TensorView& y = *args.out[0];
    ReducePlan p;
    p.src = static_cast<const char*>(x.data);
    p.dst = static_cast<char*>(y.data);
    p.mean = kind_ == ReduceKind::Mean;
    Dims axes;
    const bool has = axes_.read(args, axes) && axes.n > 0;
    for (int64_t v : x.shape) {
      p.dims.push(v);
      p.reduced.push(has ? 0 : !noop_);
    }
    for (size_t i = 0; has && i < axes.n; ++i) {
      const int64_t a = axes[i] < 0 ? axes[i] + int64_t(p.dims.n) : axes[i];
      if (a < 0 || a >= int64_t(p.dims.n)) return changed_axes();
      p.reduced[size_t(a)] = 1;
    }
    // The axes must be the ones infer() saw (a plan is reused for inputs of
    // the same shapes): the output planned for them is what gets written.
    {
      size_t j = 0;
      bool same = true;
      for (size_t k = 0; k < p.dims.n && same; ++k) {
        if (p.reduced[k] && !keepdims_) continue;
        same = j < y.shape.size() && y.shape[j++] == (p.reduced[k] ? 1 : p.dims[k]);
      }
      if (!same || j != y.shape.size()) return changed_axes();
    }
    // Merge neighbours of the same kind, drop size-1 dims (they change
    // nothing), and see whether one reduced group is left.
    Dims g, gred;
    for (size_t k = 0; k < p.dims.n; ++k) {
      if (p.dims[k] == 1) continue;
      if (g.n > 0 && gred[g.n - 1] == p.reduced[k]) {
        g[g.n - 1] *= p.dims[k];
      } else {
        g.push(p.dims[k]);
        gred.push(p.reduced[k]);
      }
    }
    const int64_t in_count = x.count(), out_count = y.count();
    int groups = 0;
    for (size_t k = 0; k < g.n; ++k) groups += gred[k] != 0;
    if (groups == 0 && in_count == out_count) {  // nothing reduced (or only size-1 axes)
      copy_blocks(args.pool, p.dst, 0, p.src, 0, 1, int64_t(x.bytes()));
      return Status::ok();
    }
    if (groups > 1 || in_count == 0) {
      switch (x.dtype) {
        case DType::Int64:
          reduce_any<int64_t>(p, in_count, out_count);
          break;
        case DType::Int32:
          reduce_any<int32_t>(p, in_count, out_count);
          break;
        default:
          reduce_any<float>(p, in_count, out_count);
          break;
      }
      return Status::ok();
    }
    p.outer = p.n = p.inner = 1;
    bool after = false;
    for (size_t k = 0; k < g.n; ++k) {
      if (gred[k]) {
        p.n = g[k];
        after = true;
      } else {
        (after ? p.inner : p.outer) *= g[k];
      }
    }
    const int64_t items = p.inner == 1 ? p.outer : p.outer * ((p.inner + 255) / 256);
    auto work = [&p, t = x.dtype](int64_t b, int64_t e) {
      switch (t) {
        case DType::Int64:
          reduce_rows<int64_t>(p, b, e);
          break;
        case DType::Int32:
          reduce_rows<int32_t>(p, b, e);
          break;
        default:
          reduce_rows<float>(p, b, e);
          break;
      }
    };
    if (int64_t(x.bytes()) < kParallelBytes || items < 2 || args.pool.size() <= 1)
      work(0, items);
    else
      args.pool.parallel_for(items, work);
    return Status::ok();
  }

 private:
  static Status changed_axes() {
    return Status::invalid_argument("axes differ from those the plan was made for");
  }
  ReduceKind kind_;
  bool keepdims_, noop_;
  IntsArg axes_;
};

Result<int64_t> flag(const Node& node, const char* name, int64_t fallback) {
  CAIRN_ASSIGN_OR_RETURN(int64_t v, node.get_int(name, fallback));
  if (v != 0 && v != 1)
    return Status::invalid_argument(std::string(name) + " must be 0 or 1, got " +
                                    std::to_string(v));
  return v;
}

Result<std::unique_ptr<Op>> make_reduce(const NodeContext& ctx, ReduceKind kind,
                                        int64_t axes_input_since) {
  const Node& node = ctx.node;
  const bool from_input = node.opset >= axes_input_since;
  CAIRN_RETURN_IF_ERROR(check_arity(node, 1, from_input ? 2 : 1, 1));
  CAIRN_ASSIGN_OR_RETURN(auto axes, IntsArg::make(node, "axes", axes_input_since, 1));
  CAIRN_ASSIGN_OR_RETURN(int64_t keepdims, flag(node, "keepdims", 1));
  CAIRN_ASSIGN_OR_RETURN(int64_t noop, flag(node, "noop_with_empty_axes", 0));
  return std::unique_ptr<Op>(new ReduceOp(kind, keepdims == 1, noop == 1, std::move(axes)));
}

Result<std::unique_ptr<Op>> make_reduce_mean(const NodeContext& ctx) {
  return make_reduce(ctx, ReduceKind::Mean, 18);
}
Result<std::unique_ptr<Op>> make_reduce_sum(const NodeContext& ctx) {
  return make_reduce(ctx, ReduceKind::Sum, 13);
}

// --------------------------------------------------------------- ArgMax

// Whether a ranks above b (NaN above every number, equal to NaN).
template <typename T>
inline bool above(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (std::isnan(a)) return !std::isnan(b);
    if (std::isnan(b)) return false;
  }
  return a > b;
}

template <typename T>
void argmax_items(const void* src, int64_t* y, const Around& a, bool last, int64_t b, int64_t e) {
  const T* x = static_cast<const T*>(src);
  for (int64_t w = b; w < e; ++w) {  // one (outer, inner) column each
    const int64_t o = w / a.inner, i = w % a.inner;
    const T* col = x + o * a.n * a.inner + i;
    int64_t best = 0;
    for (int64_t r = 1; r < a.n; ++r) {
      const T v = col[r * a.inner], bv = col[best * a.inner];
      if (above(v, bv) || (last && !above(bv, v))) best = r;
    }
    y[w] = best;
  }
}

class ArgMaxOp final : public Op {
 public:
  ArgMaxOp(int64_t axis, bool keepdims, bool last)
      : axis_(axis), keepdims_(keepdims), last_(last) {}

  Status infer(std::span<const TensorInfo> in, std::span<const bool>,
               std::span<TensorInfo> out) const override {
    const DType t = in[0].dtype;
    if (t != DType::Float32 && t != DType::Int64 && t != DType::Int32)
      return Status::invalid_argument(std::string("input type ") + values::dtype_name(t) +
                                      " is not supported (float32, int64, int32)");
    const Shape& d = in[0].shape;
    CAIRN_ASSIGN_OR_RETURN(int64_t a, normalize_axis(axis_, int64_t(d.size())));
    if (d[size_t(a)] == 0)
      return Status::invalid_argument("axis " + std::to_string(a) + " of " + shape_string(d) +
                                      " is empty");
    Shape s = d;
    if (keepdims_)
      s[size_t(a)] = 1;
    else
      s.erase(s.begin() + a);
    out[0].dtype = DType::Int64;
    out[0].shape = std::move(s);
    return Status::ok();
  }

  Status run(const RunArgs& args) const override {
    const TensorView& x = *args.in[0];
    const int64_t axis = axis_ < 0 ? axis_ + int64_t(x.shape.size()) : axis_;
    struct Job {
      const void* src;
      int64_t* y;
      Around a;
      bool last;
      DType t;
    };
    const Job job{x.data, args.out[0]->as<int64_t>(), around_axis(x.shape, axis), last_, x.dtype};
    auto work = [&job](int64_t b, int64_t e) {
      switch (job.t) {
        case DType::Int64:
          argmax_items<int64_t>(job.src, job.y, job.a, job.last, b, e);
          break;
        case DType::Int32:
          argmax_items<int32_t>(job.src, job.y, job.a, job.last, b, e);
          break;
        default:
          argmax_items<float>(job.src, job.y, job.a, job.last, b, e);
          break;
      }
    };
    const int64_t items = job.a.outer * job.a.inner;
    if (int64_t(x.bytes()) < kParallelBytes || items < 2 || args.pool.size() <= 1)
      work(0, items);
    else
      args.pool.parallel_for(items, work);
    return Status::ok();
  }

 private:
  int64_t axis_;
  bool keepdims_, last_;
};

Result<std::unique_ptr<Op>> make_argmax(const NodeContext& ctx) {
  CAIRN_RETURN_IF_ERROR(check_arity(ctx.node, 1, 1, 1));
  CAIRN_ASSIGN_OR_RETURN(int64_t axis, ctx.node.get_int("axis", 0));
  CAIRN_ASSIGN_OR_RETURN(int64_t keepdims, flag(ctx.node, "keepdims", 1));
  CAIRN_ASSIGN_OR_RETURN(int64_t last, flag(ctx.node, "select_last_index", 0));
  return std::unique_ptr<Op>(new ArgMaxOp(axis, keepdims == 1, last == 1));
}

// ----------------------------------------------------------------- TopK

// One column's top k, kept as a heap of indices with the worst on top, in
// the output's own index slots (stride `st`): no scratch. Then heap-sorted
// so slot 0 holds the best.
struct TopKColumn {
  const float* x;  // the column's first element; element r at x[r * st]
  int64_t* idx;    // the output indices; slot j at idx[j * st]
  int64_t st;
  bool largest;

  // Whether element a comes before element b in the output.
  bool better(int64_t a, int64_t b) const {
    const float va = x[a * st], vb = x[b * st];
    if (largest ? above(va, vb) : above(vb, va)) return true;
    if (largest ? above(vb, va) : above(va, vb)) return false;
    return a < b;  // equal: lower index first
  }
  int64_t& slot(int64_t j) const { return idx[j * st]; }
  void sift_down(int64_t j, int64_t size) const {
    for (;;) {
      int64_t worst = j;
      const int64_t l = 2 * j + 1, r = l + 1;
      if (l < size && better(slot(worst), slot(l))) worst = l;
      if (r < size && better(slot(worst), slot(r))) worst = r;
      if (worst == j) return;
      std::swap(slot(j), slot(worst));
      j = worst;
    }
  }
  void run(int64_t n, int64_t k) const {
    if (k == 0) return;
    for (int64_t r = 0; r < k; ++r) slot(r) = r;
    for (int64_t j = k / 2; j-- > 0;) sift_down(j, k);
    for (int64_t r = k; r < n; ++r) {
      // Quick reject against the worst kept value (false for NaN on either
      // side, which then takes the full comparison).
      const float v = x[r * st], top = x[slot(0) * st];
      if (largest ? v < top : v > top) continue;
      if (better(r, slot(0))) {
        slot(0) = r;
        sift_down(0, k);
      }
    }
    for (int64_t size = k; size > 1; --size) {  // worst to the back
      std::swap(slot(0), slot(size - 1));
      sift_down(0, size - 1);
    }
  }
};

class TopKOp final : public Op {
 public:
  TopKOp(int64_t axis, bool largest) : axis_(axis), largest_(largest) {}
  bool needs_value(size_t i) const override { return i == 1; }

  Status infer(std::span<const TensorInfo> in, std::span<const bool>,
               std::span<TensorInfo> out) const override {
    if (in[0].dtype != DType::Float32)
      return Status::invalid_argument(std::string("input type ") + values::dtype_name(in[0].dtype) +
                                      " is not supported (float32)");
    const Shape& d = in[0].shape;
    CAIRN_ASSIGN_OR_RETURN(int64_t a, normalize_axis(axis_, int64_t(d.size())));
    CAIRN_ASSIGN_OR_RETURN(auto kv, known_ints(in, 1, "K"));
    if (kv.size() != 1)
      return Status::invalid_argument("K must hold one value, got " + std::to_string(kv.size()));
    const int64_t k = kv[0];
    if (k < 0 || k > d[size_t(a)])
      return Status::invalid_argument("k " + std::to_string(k) + " is out of range for axis " +
                                      std::to_string(a) + " of size " +
                                      std::to_string(d[size_t(a)]));
    Shape s = d;
    s[size_t(a)] = k;
    out[0].dtype = DType::Float32;
    out[0].shape = s;
    out[1].dtype = DType::Int64;
    out[1].shape = std::move(s);
    return Status::ok();
  }

  Status run(const RunArgs& args) const override {
    const TensorView& x = *args.in[0];
    const int64_t axis = axis_ < 0 ? axis_ + int64_t(x.shape.size()) : axis_;
    struct Job {
      const float* x;
      float* vals;
      int64_t* idx;
      Around a;
      int64_t k;
      bool largest;
    };
    const Job job{
        x.as<const float>(),        args.out[0]->as<float>(),         args.out[1]->as<int64_t>(),
        around_axis(x.shape, axis), args.out[0]->shape[size_t(axis)], largest_};
    auto work = [&job](int64_t b, int64_t e) {
      const Around& a = job.a;
      for (int64_t w = b; w < e; ++w) {
        const int64_t o = w / a.inner, i = w % a.inner;
        const float* col = job.x + o * a.n * a.inner + i;
        int64_t* ic = job.idx + o * job.k * a.inner + i;
        float* vc = job.vals + o * job.k * a.inner + i;
        TopKColumn{col, ic, a.inner, job.largest}.run(a.n, job.k);
        for (int64_t j = 0; j < job.k; ++j) vc[j * a.inner] = col[ic[j * a.inner] * a.inner];
      }
    };
    const int64_t items = job.a.outer * job.a.inner;
    if (int64_t(x.bytes()) < kParallelBytes || items < 2 || args.pool.size() <= 1)
      work(0, items);
    else
      args.pool.parallel_for(items, work);
    return Status::ok();
  }

 private:
  int64_t axis_;
  bool largest_;
};

Result<std::unique_ptr<Op>> make_topk(const NodeContext& ctx) {
  CAIRN_RETURN_IF_ERROR(check_arity(ctx.node, 2, 2, 2));
  CAIRN_ASSIGN_OR_RETURN(int64_t axis, ctx.node.get_int("axis", -1));
  CAIRN_ASSIGN_OR_RETURN(int64_t largest, flag(ctx.node, "largest", 1));
  // `sorted` = 0 leaves the order to the runtime; the output is always sorted.
  CAIRN_RETURN_IF_ERROR(flag(ctx.node, "sorted", 1).status());
  return std::unique_ptr<Op>(new TopKOp(axis, largest == 1));
}

}  // namespace

void add_reduce_ops(OpTable& table) {
  table.add("ReduceMean", make_reduce_mean);
  table.add("ReduceSum", make_reduce_sum);
  table.add("ArgMax", make_argmax);
  table.add("TopK", make_topk);
}

}  // namespace cairn::onnx::shape_ops
