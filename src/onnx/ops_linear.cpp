// onnx/ops_linear.cpp — MatMul, Gemm, Conv (2-D), MaxPool, AveragePool, GlobalAveragePool.
// The products run on kernels/sgemm.h: a constant B (MatMul's, Gemm's) is
// packed once in the factory; a B computed at run time is packed into the
// op's scratch. Conv is a GEMM per (image, group) with the weights as A (read
// in place) and the im2col of the input as B, written straight in the
// packed-B layout (1×1 convolutions pack the input directly); a batch spreads
// whole images over the pool (each thread with its own scratch slot and
// single-threaded GEMMs), one image splits its GEMMs. Depthwise convolutions
// (one input channel per group) and the pools are direct loops over output
// planes. Everything that depends on shapes only is checked in the factory
// or infer(); run() only computes.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <new>
#include <string>

#include "kernels/sgemm.h"
#include "onnx/op.h"
#include "onnx/ops_math_kernels.h"

namespace cairn::onnx {
namespace {

using kernels::PackedB;
using kernels::PackedBView;
using kernels::SgemmEpilogue;

Status bad(std::string message) { return Status::invalid_argument(std::move(message)); }

Status need_float(const TensorInfo& t, const char* what) {
  if (t.dtype != DType::Float32)
    return bad(std::string(what) + " must be float32, got " + values::dtype_name(t.dtype));
  return Status::ok();
}

size_t align64(size_t n) { return (n + 63) / 64 * 64; }

// The activation the session fused into a MatMul, Gemm or Conv
// (kFusedActivationAttr), applied to the output as the GEMM finishes it.
struct FusedActivation {
  bool on = false;
  mathk::UnOp op = mathk::UnOp::Relu;
  mathk::Path path = mathk::best_path();

  static void apply(float* row, int64_t n, const void* self) {
    const auto* a = static_cast<const FusedActivation*>(self);
    mathk::unary(a->path, a->op, row, row, n);
  }
  void attach(SgemmEpilogue& e) const {
    if (!on) return;
    e.post = &FusedActivation::apply;
    e.post_ctx = this;
  }
  // For outputs not made by a GEMM (the direct convolution).
  void apply_to(float* y, int64_t n) const {
    if (on) mathk::unary(path, op, y, y, n);
  }
};

Result<FusedActivation> fused_activation(const Node& node) {
  FusedActivation a;
  const std::string key(kFusedActivationAttr);
  if (!node.has(key)) return a;
  CAIRN_ASSIGN_OR_RETURN(std::string name, node.get_string(key, ""));
  a.on = true;
  if (name == "Relu") a.op = mathk::UnOp::Relu;
  else if (name == "Sigmoid") a.op = mathk::UnOp::Sigmoid;
  else if (name == "Tanh") a.op = mathk::UnOp::Tanh;
  else if (name == "Gelu") a.op = mathk::UnOp::GeluErf;
  else if (name == "Gelu:tanh") a.op = mathk::UnOp::GeluTanh;
  else return bad("unknown fused activation '" + name + "'");
  return a;
}

Result<PackedB> pack_constant(const float* b, int64_t k, int64_t n, bool transposed) {
  try {
    return kernels::pack_b(b, k, n, transposed);
  } catch (const std::bad_alloc&) {
    return Status::internal("out of memory packing a " + std::to_string(k) + "×" +
                            std::to_string(n) + " weight matrix");
  }
}

// ---------------------------------------------------------------- MatMul

// numpy matmul's view of two shapes: 1-D operands promoted (A to [1,K], B to
// [K,1]) and the batch dims broadcast.
struct MatMulDims {
  int64_t m = 0, k = 0, n = 0;
  Shape a_batch, b_batch, batch;  // a_batch/b_batch left-padded to batch's rank
  Shape out;
};

Result<MatMulDims> matmul_dims(const Shape& a, const Shape& b) {
  if (a.empty() || b.empty()) return bad("MatMul operands must have rank 1 or more (got a scalar)");
  MatMulDims d;
  Shape as = a.size() == 1 ? Shape{1, a[0]} : a;
  Shape bs = b.size() == 1 ? Shape{b[0], 1} : b;
  d.m = as[as.size() - 2];
  d.k = as.back();
  d.n = bs.back();
  if (bs[bs.size() - 2] != d.k)
    return bad("MatMul inner dimensions differ: A " + shape_string(a) + " · B " + shape_string(b));
  const Shape ab(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
  CAIRN_ASSIGN_OR_RETURN(d.batch, broadcast_shapes(ab, bb));
  d.a_batch = Shape(d.batch.size() - ab.size(), 1);
  d.a_batch.insert(d.a_batch.end(), ab.begin(), ab.end());
  d.b_batch = Shape(d.batch.size() - bb.size(), 1);
  d.b_batch.insert(d.b_batch.end(), bb.begin(), bb.end());
  d.out = d.batch;
  if (a.size() > 1) d.out.push_back(d.m);
  if (b.size() > 1) d.out.push_back(d.n);
  return d;
}

int64_t product(const Shape& s) {
  int64_t n = 1;
  for (int64_t v : s) n *= v;
  return n;
}

// The flat index into a (left-padded, broadcast) batch shape `part` of the
// flat index t of the broadcast batch shape `full`.
int64_t batch_index(int64_t t, const Shape& full, const Shape& part) {
  int64_t idx = 0, stride = 1;
  for (size_t d = full.size(); d-- > 0;) {
    const int64_t i = t % full[d];
    t /= full[d];
    if (part[d] != 1) idx += i * stride;
    stride *= part[d];
  }
  return idx;
}

class MatMulOp final : public Op {
 public:
  MatMulOp(PackedB packed, std::vector<float> bias, FusedActivation act)
      : packed_(std::move(packed)), bias_(std::move(bias)), act_(act) {}

  Status infer(std::span<const TensorInfo> in, std::span<const bool>,
               std::span<TensorInfo> out) const override {
    CAIRN_RETURN_IF_ERROR(need_float(in[0], "A"));
    CAIRN_RETURN_IF_ERROR(need_float(in[1], "B"));
    CAIRN_ASSIGN_OR_RETURN(MatMulDims d, matmul_dims(in[0].shape, in[1].shape));
    auto count = checked_count(d.out, 4);
    if (!count) return count.status();
    if (!bias_.empty() && int64_t(bias_.size()) != d.n)
      return bad("MatMul's fused bias has " + std::to_string(bias_.size()) + " values for " +
                 std::to_string(d.n) + " columns");
    out[0].dtype = DType::Float32;
    out[0].shape = d.out;
    return Status::ok();
  }

  size_t scratch_bytes(std::span<const TensorInfo> in, std::span<const TensorInfo>) const override {
    if (packed_) return 0;
    auto d = matmul_dims(in[0].shape, in[1].shape);
    if (!d) return 0;
    return size_t(product(d->b_batch)) * kernels::sgemm_packed_bytes(d->k, d->n);
  }

  Status run(const RunArgs& args) const override {
    const TensorView& a = *args.in[0];
    const TensorView& b = *args.in[1];
    float* y = args.out[0]->as<float>();
    const MatMulDims d = *matmul_dims(a.shape, b.shape);
    const float* ap = a.as<const float>();
    const int64_t mk = d.m * d.k, mn = d.m * d.n, kn = d.k * d.n;
    if (d.m == 0 || d.n == 0) return Status::ok();
    const int64_t nb_b = product(d.b_batch), nb = product(d.batch);
    kernels::SgemmEpilogue epi;
    if (!bias_.empty()) epi.col_bias = bias_.data();
    act_.attach(epi);
    if (nb_b == 1) {
      // One B for every batch: A's batches (leading, contiguous) are rows of
      // one product.
      PackedBView view = packed_ ? packed_.view()
                                 : kernels::pack_b_into(static_cast<float*>(args.scratch),
                                                        b.as<const float>(), d.n, 1, d.k, d.n);
      kernels::sgemm_packed(nb * d.m, ap, d.k, 1, view, y, d.n, epi, &args.pool);
      return Status::ok();
    }
    const size_t pb = kernels::sgemm_packed_bytes(d.k, d.n);
    auto packed_at = [&](int64_t j) {
      return reinterpret_cast<float*>(static_cast<char*>(args.scratch) + size_t(j) * pb);
    };
    const float* bp = b.as<const float>();
    args.pool.parallel_for(nb_b, [&](int64_t j0, int64_t j1) {
      for (int64_t j = j0; j < j1; ++j)
        kernels::pack_b_into(packed_at(j), bp + j * kn, d.n, 1, d.k, d.n);
    });
    PackedBView view{nullptr, d.k, d.n, kernels::sgemm_nr(kernels::sgemm_isa()),
                     kernels::sgemm_isa()};
    auto one = [&](int64_t t, ThreadPool* pool) {
      PackedBView v = view;
      v.data = packed_at(batch_index(t, d.batch, d.b_batch));
      kernels::sgemm_packed(d.m, ap + batch_index(t, d.batch, d.a_batch) * mk, d.k, 1, v,
                            y + t * mn, d.n, epi, pool);
    };
    if (nb >= args.pool.size()) {
      args.pool.parallel_for(nb, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) one(t, nullptr);
      }, 1);
    } else {
      for (int64_t t = 0; t < nb; ++t) one(t, &args.pool);
    }
    return Status::ok();
  }

 private:
  PackedB packed_;
  std::vector<float> bias_;  // [N] added to every row (a fused Add), or empty
  FusedActivation act_;
};

Result<std::unique_ptr<Op>> make_matmul(const NodeContext& ctx) {
  // The session fuses MatMul -> Add(constant [N]) into one MatMul whose third
  // input is the bias, marked by kFusedBiasAttr (see session.cpp).
  const bool fused = ctx.node.has(std::string(kFusedBiasAttr));
  const size_t want = fused ? 3 : 2;
  if (ctx.node.inputs.size() != want || !ctx.node.has_input(0) || !ctx.node.has_input(1) ||
      (fused && !ctx.node.has_input(2)))
    return bad("MatMul takes 2 inputs");
  std::vector<float> bias;
  if (fused) {
    const TensorView* c = ctx.constants.size() > 2 ? ctx.constants[2] : nullptr;
    if (!c || c->dtype != DType::Float32 || c->shape.size() != 1 || c->count() <= 0)
      return bad("MatMul's fused bias must be a constant float32 vector");
    const float* cp = c->as<const float>();
    bias.assign(cp, cp + c->count());
  }
  PackedB packed;
  const TensorView* b = ctx.constants.size() > 1 ? ctx.constants[1] : nullptr;
  // A constant B with one matrix (the weights of a linear layer; leading
  // dims of 1 allowed) is packed once here.
  if (b && b->dtype == DType::Float32 && b->shape.size() >= 2 && b->count() > 0 &&
      b->count() == b->shape[b->shape.size() - 2] * b->shape.back()) {
    CAIRN_ASSIGN_OR_RETURN(packed, pack_constant(b->as<const float>(), b->shape[b->shape.size() - 2],
                                                 b->shape.back(), false));
  }
  CAIRN_ASSIGN_OR_RETURN(FusedActivation act, fused_activation(ctx.node));
  return std::unique_ptr<Op>(new MatMulOp(std::move(packed), std::move(bias), act));
}

// ---------------------------------------------------------------- Gemm

class GemmOp final : public Op {
 public:
  GemmOp(float alpha, float beta, bool ta, bool tb, PackedB packed, FusedActivation act)
      : alpha_(alpha), beta_(beta), ta_(ta), tb_(tb), packed_(std::move(packed)), act_(act) {}

  Status infer(std::span<const TensorInfo> in, std::span<const bool> present,
               std::span<TensorInfo> out) const override {
    CAIRN_RETURN_IF_ERROR(need_float(in[0], "A"));
    CAIRN_RETURN_IF_ERROR(need_float(in[1], "B"));
    const Shape& a = in[0].shape;
    const Shape& b = in[1].shape;
    if (a.size() != 2 || b.size() != 2)
      return bad("Gemm needs 2-D A and B, got A " + shape_string(a) + " and B " + shape_string(b));
    const int64_t m = ta_ ? a[1] : a[0], k = ta_ ? a[0] : a[1];
    const int64_t kb = tb_ ? b[1] : b[0], n = tb_ ? b[0] : b[1];
    if (k != kb)
      return bad("Gemm inner dimensions differ: A " + shape_string(a) + (ta_ ? "ᵀ" : "") + " · B " +
                 shape_string(b) + (tb_ ? "ᵀ" : ""));
    if (present.size() > 2 && present[2]) {
      CAIRN_RETURN_IF_ERROR(need_float(in[2], "C"));
      const Shape& c = in[2].shape;
      const Shape target{m, n};
      bool ok = c.size() <= 2;
      for (size_t i = 0; ok && i < c.size(); ++i) {
        const int64_t t = target[2 - c.size() + i];
        ok = c[i] == 1 || c[i] == t;
      }
      if (!ok)
        return bad("Gemm's C " + shape_string(c) + " does not broadcast to " + shape_string(target));
    }
    out[0].dtype = DType::Float32;
    out[0].shape = {m, n};
    auto count = checked_count(out[0].shape, 4);
    if (!count) return count.status();
    return Status::ok();
  }

  size_t scratch_bytes(std::span<const TensorInfo> in, std::span<const TensorInfo>) const override {
    if (packed_) return 0;
    const Shape& b = in[1].shape;
    return kernels::sgemm_packed_bytes(tb_ ? b[1] : b[0], tb_ ? b[0] : b[1]);
  }

  Status run(const RunArgs& args) const override {
    const TensorView& a = *args.in[0];
    const TensorView& b = *args.in[1];
    const TensorView* c = args.in.size() > 2 ? args.in[2] : nullptr;
    const int64_t m = ta_ ? a.shape[1] : a.shape[0], k = ta_ ? a.shape[0] : a.shape[1];
    const int64_t n = tb_ ? b.shape[0] : b.shape[1];
    float* y = args.out[0]->as<float>();
    if (m == 0 || n == 0) return Status::ok();
    SgemmEpilogue epi;
    epi.alpha = alpha_;
    act_.attach(epi);
    if (c && beta_ != 0.0f) {
      const float* cp = c->as<const float>();
      const size_t cr = c->shape.size();
      const int64_t cm = cr == 2 ? c->shape[0] : 1;
      const int64_t cn = cr >= 1 ? c->shape[cr - 1] : 1;
      if (beta_ == 1.0f && cm == 1 && cn == n) {
        epi.col_bias = cp;  // the usual bias row: added in the epilogue
      } else {
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j)
            y[i * n + j] = beta_ * cp[(cm == 1 ? 0 : i) * cn + (cn == 1 ? 0 : j)];
        epi.beta = 1.0f;
      }
    }
    const PackedBView view =
        packed_ ? packed_.view()
                : kernels::pack_b_into(static_cast<float*>(args.scratch), b.as<const float>(),
                                       tb_ ? 1 : n, tb_ ? k : 1, k, n);
    kernels::sgemm_packed(m, a.as<const float>(), ta_ ? 1 : k, ta_ ? m : 1, view, y, n, epi,
                          &args.pool);
    return Status::ok();
  }

 private:
  float alpha_, beta_;
  bool ta_, tb_;
  PackedB packed_;
  FusedActivation act_;
};

Result<std::unique_ptr<Op>> make_gemm(const NodeContext& ctx) {
  const Node& node = ctx.node;
  if (node.inputs.size() < 2 || node.inputs.size() > 3 || !node.has_input(0) || !node.has_input(1))
    return bad("Gemm takes 2 or 3 inputs");
  CAIRN_ASSIGN_OR_RETURN(double alpha, node.get_float("alpha", 1.0));
  CAIRN_ASSIGN_OR_RETURN(double beta, node.get_float("beta", 1.0));
  CAIRN_ASSIGN_OR_RETURN(int64_t ta, node.get_int("transA", 0));
  CAIRN_ASSIGN_OR_RETURN(int64_t tb, node.get_int("transB", 0));
  if ((ta != 0 && ta != 1) || (tb != 0 && tb != 1)) return bad("transA and transB must be 0 or 1");
  if (!std::isfinite(alpha) || !std::isfinite(beta)) return bad("alpha and beta must be finite");
  PackedB packed;
  const TensorView* b = ctx.constants.size() > 1 ? ctx.constants[1] : nullptr;
  if (b && b->dtype == DType::Float32 && b->shape.size() == 2 && b->count() > 0) {
    const int64_t k = tb ? b->shape[1] : b->shape[0], n = tb ? b->shape[0] : b->shape[1];
    CAIRN_ASSIGN_OR_RETURN(packed, pack_constant(b->as<const float>(), k, n, tb != 0));
  }
  CAIRN_ASSIGN_OR_RETURN(FusedActivation act, fused_activation(node));
  return std::unique_ptr<Op>(
      new GemmOp(float(alpha), float(beta), ta != 0, tb != 0, std::move(packed), act));
}

// ---------------------------------------------------------------- shared 2-D geometry

enum class AutoPad { NotSet, SameUpper, SameLower, Valid };

Result<AutoPad> parse_auto_pad(const Node& node) {
  CAIRN_ASSIGN_OR_RETURN(std::string s, node.get_string("auto_pad", "NOTSET"));
  if (s == "NOTSET") return AutoPad::NotSet;
  if (s == "SAME_UPPER") return AutoPad::SameUpper;
  if (s == "SAME_LOWER") return AutoPad::SameLower;
  if (s == "VALID") return AutoPad::Valid;
  return bad("auto_pad '" + s + "' is not NOTSET, SAME_UPPER, SAME_LOWER or VALID");
}

// A window sliding over H and W: the attributes, and for one input size the
// output size and the padding before each axis.
struct Window {
  int64_t kernel[2] = {1, 1}, stride[2] = {1, 1}, dilation[2] = {1, 1};
  int64_t pads[4] = {0, 0, 0, 0};  // top, left, bottom, right
  AutoPad auto_pad = AutoPad::NotSet;
  bool ceil_mode = false;

  struct Geometry {
    int64_t out[2];
    int64_t pad_before[2];
    int64_t pad_after[2];
  };

  Result<Geometry> geometry(int64_t h, int64_t w) const {
    Geometry g{};
    const int64_t in[2] = {h, w};
    for (int ax = 0; ax < 2; ++ax) {
      const int64_t eff = (kernel[ax] - 1) * dilation[ax] + 1;
      int64_t o = 0, before = 0, after = 0;
      switch (auto_pad) {
        case AutoPad::NotSet: {
          before = pads[ax];
          after = pads[ax + 2];
          const int64_t span = in[ax] + before + after - eff;
          if (span < 0)
            return bad("the window (" + std::to_string(eff) + ") is larger than the padded input (" +
                       std::to_string(in[ax] + before + after) + ")");
          o = (ceil_mode ? (span + stride[ax] - 1) / stride[ax] : span / stride[ax]) + 1;
          // A last window that would start in the end padding is dropped
          // (as the ONNX reference and PyTorch do).
          if (ceil_mode && (o - 1) * stride[ax] >= in[ax] + before) --o;
          break;
        }
        case AutoPad::Valid: {
          const int64_t span = in[ax] - eff;
          if (span < 0)
            return bad("the window (" + std::to_string(eff) + ") is larger than the input (" +
                       std::to_string(in[ax]) + ")");
          o = span / stride[ax] + 1;
          break;
        }
        default: {
          o = (in[ax] + stride[ax] - 1) / stride[ax];
          const int64_t total = std::max<int64_t>(0, (o - 1) * stride[ax] + eff - in[ax]);
          before = auto_pad == AutoPad::SameUpper ? total / 2 : total - total / 2;
          after = total - before;
        }
      }
      g.out[ax] = o;
      g.pad_before[ax] = before;
      g.pad_after[ax] = after;
    }
    return g;
  }
};

// Reads kernel_shape (or takes `kernel` when absent and allowed), strides,
// dilations, pads and auto_pad for a 2-D window.
Result<Window> parse_window(const Node& node, bool kernel_required, bool allow_dilations) {
  Window win;
  CAIRN_ASSIGN_OR_RETURN(win.auto_pad, parse_auto_pad(node));
  CAIRN_ASSIGN_OR_RETURN(auto ks, node.get_ints("kernel_shape"));
  if (!node.has("kernel_shape") && kernel_required) return bad("kernel_shape is required");
  if (node.has("kernel_shape") && ks.size() != 2)
    return bad("only 2-D windows are supported: kernel_shape has " + std::to_string(ks.size()) +
               " values");
  CAIRN_ASSIGN_OR_RETURN(auto st, node.get_ints("strides", {1, 1}));
  CAIRN_ASSIGN_OR_RETURN(auto dl, node.get_ints("dilations", {1, 1}));
  CAIRN_ASSIGN_OR_RETURN(auto pd, node.get_ints("pads", {0, 0, 0, 0}));
  if (st.size() != 2) return bad("strides must have 2 values, got " + std::to_string(st.size()));
  if (dl.size() != 2) return bad("dilations must have 2 values, got " + std::to_string(dl.size()));
  if (pd.size() != 4) return bad("pads must have 4 values, got " + std::to_string(pd.size()));
  if (!allow_dilations && node.has("dilations") && (dl[0] != 1 || dl[1] != 1))
    return bad("dilations need opset 19 for this operator");
  if (node.has("pads") && win.auto_pad != AutoPad::NotSet)
    return bad("pads and auto_pad " + std::string(win.auto_pad == AutoPad::Valid ? "VALID" : "SAME_*") +
               " cannot both be set");
  // Bounds that keep every index computation far from overflow.
  constexpr int64_t kLimit = int64_t(1) << 24;
  for (int i = 0; i < 2; ++i) {
    if (node.has("kernel_shape")) {
      if (ks[i] < 1 || ks[i] > kLimit) return bad("kernel_shape values must be in [1, 2^24]");
      win.kernel[i] = ks[i];
    }
    if (st[i] < 1 || st[i] > kLimit) return bad("strides must be in [1, 2^24]");
    if (dl[i] < 1 || dl[i] > kLimit) return bad("dilations must be in [1, 2^24]");
    win.stride[i] = st[i];
    win.dilation[i] = dl[i];
  }
  for (int i = 0; i < 4; ++i) {
    if (pd[i] < 0 || pd[i] > kLimit) return bad("pads must be in [0, 2^24]");
    win.pads[i] = pd[i];
  }
  return win;
}

Status need_nchw(const TensorInfo& x, const char* op) {
  CAIRN_RETURN_IF_ERROR(need_float(x, "X"));
  if (x.shape.size() != 4)
    return bad(std::string(op) + " supports only 2-D inputs (rank 4, NCHW), got " +
               shape_string(x.shape));
  return Status::ok();
}

// ---------------------------------------------------------------- Conv

class ConvOp final : public Op {
 public:
  ConvOp(Window win, int64_t group) : win_(win), group_(group) {}

  struct Dims {
    int64_t n, c, h, w, m, cg, mg, kh, kw, oh, ow, kg, p;
    Window::Geometry g;
    bool pointwise, direct;
  };

  Result<Dims> dims(const Shape& x, const Shape& wt) const {
    Dims d{};
    d.n = x[0], d.c = x[1], d.h = x[2], d.w = x[3];
    if (wt.size() != 4)
      return bad("Conv's weights must be [M, C/group, kH, kW], got " + shape_string(wt));
    d.m = wt[0], d.kh = wt[2], d.kw = wt[3];
    if (d.c % group_ != 0)
      return bad("input channels (" + std::to_string(d.c) + ") are not a multiple of group (" +
                 std::to_string(group_) + ")");
    if (d.m % group_ != 0)
      return bad("output channels (" + std::to_string(d.m) + ") are not a multiple of group (" +
                 std::to_string(group_) + ")");
    d.cg = d.c / group_;
    d.mg = d.m / group_;
    if (wt[1] != d.cg)
      return bad("weights " + shape_string(wt) + " need " + std::to_string(d.cg) +
                 " input channels per group");
    if (d.kh < 1 || d.kw < 1) return bad("weights " + shape_string(wt) + " have an empty kernel");
    if (has_kernel_ && (win_.kernel[0] != d.kh || win_.kernel[1] != d.kw))
      return bad("kernel_shape [" + std::to_string(win_.kernel[0]) + ", " +
                 std::to_string(win_.kernel[1]) + "] disagrees with the weights " + shape_string(wt));
    Window win = win_;
    win.kernel[0] = d.kh;
    win.kernel[1] = d.kw;
    CAIRN_ASSIGN_OR_RETURN(d.g, win.geometry(d.h, d.w));
    d.oh = d.g.out[0];
    d.ow = d.g.out[1];
    d.kg = d.cg * d.kh * d.kw;
    d.p = d.oh * d.ow;
    d.pointwise = d.kh == 1 && d.kw == 1 && win.stride[0] == 1 && win.stride[1] == 1 &&
                  d.g.pad_before[0] == 0 && d.g.pad_before[1] == 0 && d.oh == d.h && d.ow == d.w;
    d.direct = d.cg == 1 && group_ > 1;  // depthwise
    return d;
  }

  Status infer(std::span<const TensorInfo> in, std::span<const bool> present,
               std::span<TensorInfo> out) const override {
    CAIRN_RETURN_IF_ERROR(need_nchw(in[0], "Conv"));
    CAIRN_RETURN_IF_ERROR(need_float(in[1], "W"));
    CAIRN_ASSIGN_OR_RETURN(Dims d, dims(in[0].shape, in[1].shape));
    if (present.size() > 2 && present[2]) {
      CAIRN_RETURN_IF_ERROR(need_float(in[2], "B"));
      if (in[2].shape != Shape{d.m})
        return bad("Conv's bias must be [" + std::to_string(d.m) + "], got " +
                   shape_string(in[2].shape));
    }
    out[0].dtype = DType::Float32;
    out[0].shape = {d.n, d.m, d.oh, d.ow};
    auto count = checked_count(out[0].shape, 4);
    if (!count) return count.status();
    if (!d.direct) {  // the scratch must be describable too
      auto col = checked_count({d.kg, d.p}, 8);
      if (!col) return bad("Conv's im2col buffer would be too large: " + col.status().message());
    }
    return Status::ok();
  }

  size_t scratch_bytes(std::span<const TensorInfo> in, std::span<const TensorInfo>) const override {
    auto d = dims(in[0].shape, in[1].shape);
    if (!d || d->direct) return 0;
    return size_t(slots(d->n)) * slot_bytes(*d);
  }

  Status run(const RunArgs& args) const override {
    const TensorView& x = *args.in[0];
    const TensorView& wt = *args.in[1];
    const TensorView* bias = args.in.size() > 2 ? args.in[2] : nullptr;
    const Dims d = *dims(x.shape, wt.shape);
    const float* xp = x.as<const float>();
    const float* wp = wt.as<const float>();
    const float* bp = bias ? bias->as<const float>() : nullptr;
    float* yp = args.out[0]->as<float>();
    if (d.n == 0 || d.m == 0 || d.p == 0) return Status::ok();
    if (d.direct) return run_direct(d, xp, wp, bp, yp, args.pool);
    auto slot_at = [&](int64_t s) {
      return reinterpret_cast<float*>(static_cast<char*>(args.scratch) + size_t(s) * slot_bytes(d));
    };
    const int64_t used = std::min<int64_t>(slots(d.n), args.pool.size());
    if (used <= 1) {
      // One image (or one thread): each GEMM is split over the pool.
      for (int64_t n = 0; n < d.n; ++n) run_image(d, n, xp, wp, bp, yp, slot_at(0), &args.pool);
      return Status::ok();
    }
    // Several images: each thread takes whole images with its own scratch
    // slot and runs their GEMMs alone, so a batch of small images is not a
    // chain of tiny pool-split GEMMs.
    args.pool.parallel_for(used, [&](int64_t s0, int64_t s1) {
      for (int64_t s = s0; s < s1; ++s)
        for (int64_t n = s * d.n / used; n < (s + 1) * d.n / used; ++n)
          run_image(d, n, xp, wp, bp, yp, slot_at(s), nullptr);
    }, 1);
    return Status::ok();
  }

 private:
  friend Result<std::unique_ptr<Op>> make_conv(const NodeContext& ctx);

  // Images handled at once (each with its own scratch slot): a function of
  // the shapes only, so scratch_bytes() and run() agree; run() uses as many
  // as the pool has threads.
  static int64_t slots(int64_t n) { return std::clamp<int64_t>(n, 1, 16); }

  static size_t slot_bytes(const Dims& d) { return align64(kernels::sgemm_packed_bytes(d.kg, d.p)); }

  // Image n, every group: the im2col written straight into the packed-B
  // layout (1×1: the input itself packed), times the weights as A. `pool`
  // null: the calling thread only.
  void run_image(const Dims& d, int64_t n, const float* xp, const float* wp, const float* bp,
                 float* yp, float* slot, ThreadPool* pool) const {
    for (int64_t g = 0; g < group_; ++g) {
      const float* xg = xp + (n * d.c + g * d.cg) * d.h * d.w;
      PackedBView view;
      if (d.pointwise) {
        view = kernels::pack_b_into(slot, xg, d.h * d.w, 1, d.cg, d.p);
      } else {
        const Isa isa = kernels::sgemm_isa();
        const int nr = kernels::sgemm_nr(isa);
        const int64_t panels = (d.p + nr - 1) / nr;
        if (pool && d.kg * d.p >= 16384)
          pool->parallel_for(panels, [&](int64_t p0, int64_t p1) { im2col(d, xg, slot, nr, p0, p1); });
        else
          im2col(d, xg, slot, nr, 0, panels);
        view = PackedBView{slot, d.kg, d.p, nr, isa};
      }
      SgemmEpilogue epi;
      epi.row_bias = bp ? bp + g * d.mg : nullptr;
      act_.attach(epi);
      kernels::sgemm_packed(d.mg, wp + g * d.mg * d.kg, d.kg, 1, view,
                            yp + (n * d.m + g * d.mg) * d.p, d.p, epi, pool);
    }
  }

  // Panels [p0, p1) of the im2col B[(c·kH + i)·kW + j][oh·OW + ow] =
  // x[c][oh·sh - pt + i·dh][ow·sw - pl + j·dw] (0 outside), written in
  // kernels/sgemm.h's packed-B layout (what pack_b_into would make of it,
  // without the intermediate matrix): per K block of kSgemmKc rows, panels
  // of nr columns, each kc×nr row by row, zero past N. The columns go a
  // piece of kPiece at a time: each row of B is first made contiguous for
  // the piece in a small buffer (whole runs along output rows, the in-bounds
  // part of each copied without per-element checks), then dealt out to the
  // piece's panels nr floats at a time. Per-run bookkeeping is then paid per
  // output row, not per panel (a panel is often shorter than a row).
  void im2col(const Dims& d, const float* x, float* dst, int64_t nr, int64_t p0,
              int64_t p1) const {
    constexpr int64_t kPiece = 1024;  // a multiple of every nr
    alignas(64) float row[kPiece];
    const int64_t sh = win_.stride[0], sw = win_.stride[1];
    const int64_t dh = win_.dilation[0], dw = win_.dilation[1];
    const int64_t pt = d.g.pad_before[0], pl = d.g.pad_before[1];
    const int64_t npad = (d.p + nr - 1) / nr * nr;
    for (int64_t q0 = p0 * nr; q0 < p1 * nr; q0 += kPiece) {
      const int64_t q1 = std::min(p1 * nr, q0 + kPiece);
      const int64_t nv = std::min(q1, d.p) - q0;  // pixels in the piece (the rest is padding)
      const int64_t oh0 = q0 / d.ow, ow0 = q0 % d.ow;
      int64_t c = 0, i = 0, j = 0, k0 = 0, kc = std::min(kernels::kSgemmKc, d.kg);
      for (int64_t r = 0; r < d.kg; ++r) {
        if (r == k0 + kc) {
          k0 += kc;
          kc = std::min(kernels::kSgemmKc, d.kg - k0);
        }
        const float* xc = x + c * d.h * d.w;
        const int64_t off = j * dw - pl;
        // ow in [lo, hi) reads iw = ow·sw + off inside [0, W).
        int64_t lo, hi;
        if (sw == 1) {
          lo = std::min(d.ow, std::max<int64_t>(0, -off));
          hi = std::max(lo, std::min(d.ow, d.w - off));
        } else {
          lo = std::min(d.ow, off >= 0 ? 0 : (-off + sw - 1) / sw);
          hi = std::max(lo, d.w - 1 - off < 0 ? 0 : std::min(d.ow, (d.w - 1 - off) / sw + 1));
        }
        int64_t oh = oh0, ow = ow0;
        for (int64_t t = 0; t < nv; ++oh, ow = 0) {
          const int64_t end = ow + std::min(d.ow - ow, nv - t);
          float* ot = row + t - ow;  // column ow of this run at ot[ow]
          const int64_t ih = oh * sh - pt + i * dh;
          const bool row_in = ih >= 0 && ih < d.h;
          const int64_t a = row_in ? std::clamp(lo, ow, end) : end;
          const int64_t b = row_in ? std::clamp(hi, a, end) : end;
          for (int64_t u = ow; u < a; ++u) ot[u] = 0.0f;
          if (a < b) {
            const float* xr = xc + ih * d.w + off;
            if (sw == 1) {
              std::memcpy(ot + a, xr + a, size_t(b - a) * 4);
            } else {
              for (int64_t u = a; u < b; ++u) ot[u] = xr[u * sw];
            }
          }
          for (int64_t u = b; u < end; ++u) ot[u] = 0.0f;
          t += end - ow;
        }
        for (int64_t u = nv; u < q1 - q0; ++u) row[u] = 0.0f;
        // Deal the row out: panel q/nr holds columns [q, q + nr) at row r - k0.
        float* out = dst + k0 * npad + (r - k0) * nr;
        for (int64_t q = q0; q < q1; q += nr) {
          float* o = out + (q / nr) * kc * nr;
          const float* src = row + (q - q0);
          for (int64_t u = 0; u < nr; u += 8) std::memcpy(o + u, src + u, 32);
        }
        if (++j == d.kw) {
          j = 0;
          if (++i == d.kh) {
            i = 0;
            ++c;
          }
        }
      }
    }
  }

  // One input channel per group (depthwise): each output plane is a small
  // stencil over one input plane, too little work for a GEMM.
  Status run_direct(const Dims& d, const float* x, const float* w, const float* b, float* y,
                    ThreadPool& pool) const {
    pool.parallel_for(d.n * d.m, [&](int64_t q0, int64_t q1) {
      for (int64_t q = q0; q < q1; ++q) {
        const int64_t n = q / d.m, m = q % d.m, g = m / d.mg;
        const float* xc = x + (n * d.c + g) * d.h * d.w;
        const float* wm = w + m * d.kh * d.kw;
        float* out = y + q * d.p;
        const float bias = b ? b[m] : 0.0f;
        for (int64_t oh = 0; oh < d.oh; ++oh) {
          for (int64_t ow = 0; ow < d.ow; ++ow) {
            float sum = 0.0f;
            for (int64_t i = 0; i < d.kh; ++i) {
              const int64_t ih = oh * win_.stride[0] - d.g.pad_before[0] + i * win_.dilation[0];
              if (ih < 0 || ih >= d.h) continue;
              for (int64_t j = 0; j < d.kw; ++j) {
                const int64_t iw = ow * win_.stride[1] - d.g.pad_before[1] + j * win_.dilation[1];
                if (iw >= 0 && iw < d.w) sum += wm[i * d.kw + j] * xc[ih * d.w + iw];
              }
            }
            out[oh * d.ow + ow] = sum + bias;
          }
        }
        act_.apply_to(out, d.p);
      }
    });
    return Status::ok();
  }

  Window win_;
  int64_t group_;
  bool has_kernel_ = false;
  FusedActivation act_;
};

Result<std::unique_ptr<Op>> make_conv(const NodeContext& ctx) {
  const Node& node = ctx.node;
  if (node.inputs.size() < 2 || node.inputs.size() > 3 || !node.has_input(0) || !node.has_input(1))
    return bad("Conv takes 2 or 3 inputs");
  CAIRN_ASSIGN_OR_RETURN(Window win, parse_window(node, false, true));
  CAIRN_ASSIGN_OR_RETURN(int64_t group, node.get_int("group", 1));
  if (group < 1) return bad("group must be 1 or more, got " + std::to_string(group));
  auto op = std::make_unique<ConvOp>(win, group);
  op->has_kernel_ = node.has("kernel_shape");
  CAIRN_ASSIGN_OR_RETURN(op->act_, fused_activation(node));
  return std::unique_ptr<Op>(std::move(op));
}

// ---------------------------------------------------------------- pools

enum class PoolKind { Max, Average };

class PoolOp final : public Op {
 public:
  PoolOp(PoolKind kind, Window win, bool count_include_pad)
      : kind_(kind), win_(win), count_include_pad_(count_include_pad) {}

  Status infer(std::span<const TensorInfo> in, std::span<const bool>,
               std::span<TensorInfo> out) const override {
    CAIRN_RETURN_IF_ERROR(need_nchw(in[0], kind_ == PoolKind::Max ? "MaxPool" : "AveragePool"));
    const Shape& x = in[0].shape;
    CAIRN_ASSIGN_OR_RETURN(Window::Geometry g, win_.geometry(x[2], x[3]));
    out[0].dtype = DType::Float32;
    out[0].shape = {x[0], x[1], g.out[0], g.out[1]};
    auto count = checked_count(out[0].shape, 4);
    if (!count) return count.status();
    return Status::ok();
  }

  Status run(const RunArgs& args) const override {
    const TensorView& x = *args.in[0];
    const int64_t planes = x.shape[0] * x.shape[1], h = x.shape[2], w = x.shape[3];
    const Window::Geometry g = *win_.geometry(h, w);
    const float* xp = x.as<const float>();
    float* yp = args.out[0]->as<float>();
    const int64_t plane_out = g.out[0] * g.out[1];
    if (planes == 0 || plane_out == 0) return Status::ok();
    auto body = [&](int64_t q0, int64_t q1) {
      for (int64_t q = q0; q < q1; ++q) {
        if (kind_ == PoolKind::Max)
          pool_plane<true>(g, xp + q * h * w, h, w, yp + q * plane_out);
        else
          pool_plane<false>(g, xp + q * h * w, h, w, yp + q * plane_out);
      }
    };
    // A few thousand taps take less than handing them to another thread.
    if (planes * plane_out * win_.kernel[0] * win_.kernel[1] < 16384)
      body(0, planes);
    else
      args.pool.parallel_for(planes, body);
    return Status::ok();
  }

 private:
  // The taps t in [0, k) with lo <= base + t·d < hi: [first, end).
  static void tap_range(int64_t base, int64_t d, int64_t k, int64_t lo, int64_t hi, int64_t& first,
                        int64_t& end) {
    first = base >= lo ? 0 : (lo - base + d - 1) / d;
    end = base > hi - 1 ? 0 : std::min(k, (hi - 1 - base) / d + 1);
    if (end < first) end = first;
  }

  // One output plane. The taps inside the input form a rectangle of rows and
  // columns per output (the input is a box), so the loops run over that
  // rectangle with no per-tap bounds checks; taps are summed in row-major
  // order like the reference.
  template <bool kMax>
  void pool_plane(const Window::Geometry& g, const float* xc, int64_t h, int64_t w,
                  float* out) const {
    const int64_t sh = win_.stride[0], sw = win_.stride[1];
    const int64_t dh = win_.dilation[0], dw = win_.dilation[1];
    const int64_t kh = win_.kernel[0], kw = win_.kernel[1];
    const int64_t pt = g.pad_before[0], pl = g.pad_before[1];
    const int64_t ow_n = g.out[1];
    // count_include_pad counts taps inside the padded input (not past it).
    const int64_t lo_h = -pt, hi_h = h + g.pad_after[0];
    const int64_t lo_w = -pl, hi_w = w + g.pad_after[1];
    // Output columns whose whole window lies inside the row: [ow_a, ow_b).
    const int64_t last = w - 1 - (kw - 1) * dw + pl;
    const int64_t ow_b = last < 0 ? 0 : std::min(ow_n, last / sw + 1);
    const int64_t ow_a = std::min(ow_b, (pl + sw - 1) / sw);
    for (int64_t oh = 0; oh < g.out[0]; ++oh) {
      const int64_t base_h = oh * sh - pt;
      int64_t i0, i1, pi0, pi1;
      tap_range(base_h, dh, kh, 0, h, i0, i1);
      tap_range(base_h, dh, kh, lo_h, hi_h, pi0, pi1);
      const int64_t rows = i1 - i0, pad_rows = pi1 - pi0;
      const int64_t r0 = rows > 0 ? (base_h + i0 * dh) * w : 0;  // first valid row's offset
      float* o = out + oh * ow_n;
      auto one = [&](int64_t ow, int64_t j0, int64_t j1, int64_t count) {
        const int64_t c0 = r0 + ow * sw - pl;  // + j·dw >= row start for j >= j0
        float best = -std::numeric_limits<float>::infinity();
        float sum = 0.0f;
        for (int64_t i = 0; i < rows; ++i) {
          const int64_t r = c0 + i * dh * w;
          for (int64_t j = j0; j < j1; ++j) {
            if constexpr (kMax) {
              best = std::max(best, xc[r + j * dw]);
            } else {
              sum += xc[r + j * dw];
            }
          }
        }
        if constexpr (kMax) {
          (void)count;
          o[ow] = best;
        } else {
          o[ow] = count > 0 ? sum / float(count) : 0.0f;
        }
      };
      auto edge = [&](int64_t ow) {
        int64_t j0, j1, pj0, pj1;
        const int64_t base_w = ow * sw - pl;
        tap_range(base_w, dw, kw, 0, w, j0, j1);
        tap_range(base_w, dw, kw, lo_w, hi_w, pj0, pj1);
        one(ow, j0, j1, count_include_pad_ ? pad_rows * (pj1 - pj0) : rows * (j1 - j0));
      };
      for (int64_t ow = 0; ow < ow_a; ++ow) edge(ow);
      const int64_t inner = count_include_pad_ ? pad_rows * kw : rows * kw;
      if (kMax && rows == 2 && kw == 2 && dw == 1 && sw == 2) {
        // The common 2×2, stride-2 max pool: four loads per output.
        for (int64_t ow = ow_a; ow < ow_b; ++ow) {
          const float* pa = xc + (r0 + 2 * ow - pl);
          const float* pb = pa + dh * w;
          float best = -std::numeric_limits<float>::infinity();
          best = std::max(best, pa[0]);
          best = std::max(best, pa[1]);
          best = std::max(best, pb[0]);
          best = std::max(best, pb[1]);
          o[ow] = best;
        }
      } else {
        for (int64_t ow = ow_a; ow < ow_b; ++ow) one(ow, 0, kw, inner);
      }
      for (int64_t ow = std::max(ow_a, ow_b); ow < ow_n; ++ow) edge(ow);
    }
  }

  PoolKind kind_;
  Window win_;
  bool count_include_pad_;
};

Result<Window> pool_window(const Node& node, bool allow_dilations) {
  if (node.inputs.size() != 1 || !node.has_input(0)) return bad(node.op_type + " takes 1 input");
  CAIRN_ASSIGN_OR_RETURN(Window win, parse_window(node, true, allow_dilations));
  CAIRN_ASSIGN_OR_RETURN(int64_t ceil_mode, node.get_int("ceil_mode", 0));
  if (ceil_mode != 0 && ceil_mode != 1) return bad("ceil_mode must be 0 or 1");
  win.ceil_mode = ceil_mode != 0;
  // A window wholly in the padding would have nothing to pool.
  for (int i = 0; i < 4; ++i) {
    const int64_t eff = (win.kernel[i % 2] - 1) * win.dilation[i % 2] + 1;
    if (win.pads[i] >= eff)
      return bad("pads (" + std::to_string(win.pads[i]) + ") must be smaller than the window (" +
                 std::to_string(eff) + ")");
  }
  return win;
}

Result<std::unique_ptr<Op>> make_maxpool(const NodeContext& ctx) {
  const Node& node = ctx.node;
  if (node.outputs.size() > 1 && !node.outputs[1].empty())
    return bad("MaxPool's Indices output is not supported");
  CAIRN_ASSIGN_OR_RETURN(Window win, pool_window(node, true));
  CAIRN_ASSIGN_OR_RETURN(int64_t order, node.get_int("storage_order", 0));
  if (order != 0 && order != 1) return bad("storage_order must be 0 or 1");
  return std::unique_ptr<Op>(new PoolOp(PoolKind::Max, win, false));
}

Result<std::unique_ptr<Op>> make_avgpool(const NodeContext& ctx) {
  const Node& node = ctx.node;
  CAIRN_ASSIGN_OR_RETURN(Window win, pool_window(node, node.opset >= 19));
  CAIRN_ASSIGN_OR_RETURN(int64_t cip, node.get_int("count_include_pad", 0));
  if (cip != 0 && cip != 1) return bad("count_include_pad must be 0 or 1");
  return std::unique_ptr<Op>(new PoolOp(PoolKind::Average, win, cip != 0));
}

class GlobalAveragePoolOp final : public Op {
 public:
  Status infer(std::span<const TensorInfo> in, std::span<const bool>,
               std::span<TensorInfo> out) const override {
    CAIRN_RETURN_IF_ERROR(need_float(in[0], "X"));
    const Shape& x = in[0].shape;
    if (x.size() < 3)
      return bad("GlobalAveragePool needs an input of rank 3 or more (N, C, spatial...), got " +
                 shape_string(x));
    out[0].dtype = DType::Float32;
    out[0].shape = Shape(x.size(), 1);
    out[0].shape[0] = x[0];
    out[0].shape[1] = x[1];
    return Status::ok();
  }

  Status run(const RunArgs& args) const override {
    const TensorView& x = *args.in[0];
    const int64_t planes = x.shape[0] * x.shape[1];
    const int64_t size = planes == 0 ? 0 : x.count() / planes;
    const float* xp = x.as<const float>();
    float* yp = args.out[0]->as<float>();
    args.pool.parallel_for(planes, [&](int64_t q0, int64_t q1) {
      for (int64_t q = q0; q < q1; ++q) {
        double sum = 0;  // planes can be large: no float drift
        const float* xc = xp + q * size;
        for (int64_t i = 0; i < size; ++i) sum += xc[i];
        yp[q] = size > 0 ? float(sum / double(size)) : 0.0f;
      }
    });
    return Status::ok();
  }
};

Result<std::unique_ptr<Op>> make_global_avgpool(const NodeContext& ctx) {
  if (ctx.node.inputs.size() != 1 || !ctx.node.has_input(0))
    return bad("GlobalAveragePool takes 1 input");
  return std::unique_ptr<Op>(new GlobalAveragePoolOp());
}

}  // namespace

void add_linear_ops(OpTable& table) {
  table.add("MatMul", make_matmul);
  table.add("Gemm", make_gemm);
  table.add("Conv", make_conv);
  table.add("MaxPool", make_maxpool);
  table.add("AveragePool", make_avgpool);
  table.add("GlobalAveragePool", make_global_avgpool);
}

}  // namespace cairn::onnx
