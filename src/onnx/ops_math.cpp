// onnx/ops_math.cpp — the elementwise operators: Add, Sub, Mul, Div, Pow and
// Equal with numpy broadcasting, Where, and the unary ones (Neg, Abs, Sqrt,
// Exp, Log, Erf, Relu, Sigmoid, Tanh, Gelu); add_math_ops() registers these
// and onnx/ops_math_norm.cpp's normalisations.
// Broadcasting is planned in run() on fixed-size arrays (no allocation): the
// output's dims of size 1 are dropped and neighbours that every input walks
// the same way are merged, so a same-shape op is one row, a [N, H] + [H] bias
// is N rows of H, and the innermost loop always reads each input either
// contiguously or as one broadcast value (the float loops in
// onnx/ops_math_kernels.h take exactly those two strides).
#include <algorithm>
#include <cstring>
#include <string>
#include <type_traits>

#include "onnx/ops_math_kernels.h"

namespace cairn::onnx {

namespace mathk {

Status check_node(const Node& node, size_t min_in, size_t max_in, size_t max_out,
                  std::initializer_list<const char*> attrs) {
  const size_t n_in = node.inputs.size();
  if (n_in < min_in || n_in > max_in)
    return Status::invalid_argument(
        node.op_type + " takes " +
        (min_in == max_in ? std::to_string(min_in)
                          : std::to_string(min_in) + " to " + std::to_string(max_in)) +
        " inputs, got " + std::to_string(n_in));
  for (size_t i = 0; i < min_in; ++i)
    if (!node.has_input(i))
      return Status::invalid_argument(node.op_type + "'s input " + std::to_string(i) +
                                      " is required");
  if (node.outputs.empty() || node.outputs[0].empty())
    return Status::invalid_argument(node.op_type + " needs its first output");
  if (node.outputs.size() > max_out)
    return Status::invalid_argument(node.op_type + " has at most " + std::to_string(max_out) +
                                    " outputs, got " + std::to_string(node.outputs.size()));
  for (const auto& entry : node.attributes) {
    const std::string& name = entry.first;  // clang 14 cannot capture a structured binding
    if (std::find_if(attrs.begin(), attrs.end(), [&](const char* a) { return name == a; }) ==
        attrs.end())
      return Status::invalid_argument("attribute '" + name + "' is not supported by " +
                                      node.op_type);
  }
  return Status::ok();
}

}  // namespace mathk

namespace {

using mathk::BinOp;
using mathk::UnOp;

std::string dtype_str(DType t) { return values::dtype_name(t); }

// ---- the broadcast loop -----------------------------------------------------------

constexpr int kMaxInputs = 3;

struct Loop {
  int rank = 0;  // >= 1 after plan()
  int n_in = 0;
  int64_t dims[kMaxRank] = {};
  int64_t strides[kMaxInputs][kMaxRank] = {};  // elements; 0 where the input is broadcast
};

// Merges the output's dims into as few as the inputs' layouts allow (see the
// file comment). Shapes were checked by infer(): each input's dims are 1 or
// the output's.
void plan(const Shape& out, const TensorView* const* ins, int n_in, Loop& loop) {
  const int r = int(out.size());
  int64_t st[kMaxInputs][kMaxRank];
  for (int k = 0; k < n_in; ++k) {
    const Shape& s = ins[k]->shape;
    const int off = r - int(s.size());
    int64_t stride = 1;
    for (int i = r - 1; i >= 0; --i) {
      const int64_t d = i >= off ? s[size_t(i - off)] : 1;
      st[k][i] = d == 1 ? 0 : stride;
      stride *= d;
    }
  }
  loop.n_in = n_in;
  loop.rank = 0;
  for (int i = 0; i < r; ++i) {
    if (out[size_t(i)] == 1) continue;
    const int64_t d = out[size_t(i)];
    bool merge = loop.rank > 0;
    for (int k = 0; merge && k < n_in; ++k) merge = loop.strides[k][loop.rank - 1] == st[k][i] * d;
    if (merge) {
      loop.dims[loop.rank - 1] *= d;
      for (int k = 0; k < n_in; ++k) loop.strides[k][loop.rank - 1] = st[k][i];
    } else {
      loop.dims[loop.rank] = d;
      for (int k = 0; k < n_in; ++k) loop.strides[k][loop.rank] = st[k][i];
      ++loop.rank;
    }
  }
  if (loop.rank == 0) {
    loop.rank = 1;
    loop.dims[0] = 1;
    for (int k = 0; k < n_in; ++k) loop.strides[k][0] = 0;
  }
}

// Calls inner(offsets, out_offset, n, inner_strides) over the output in
// contiguous runs of the innermost dim (split further when it is long), on
// the pool when there are more than `grain` elements. offsets[k] is input k's
// element offset at the run's start; its stride along the run is 0 or 1.
template <typename F>
void for_each_run(const Loop& loop, ThreadPool& pool, int64_t grain, const F& inner) {
  const int last = loop.rank - 1;
  const int64_t n_inner = loop.dims[last];
  int64_t rows = 1;
  for (int i = 0; i < last; ++i) rows *= loop.dims[i];
  if (rows == 0 || n_inner == 0) return;
  int64_t inner_st[kMaxInputs];
  for (int k = 0; k < loop.n_in; ++k) inner_st[k] = loop.strides[k][last];

  // The offsets of row `row` (its index over dims [0, last)).
  auto row_offsets = [&](int64_t row, int64_t* idx, int64_t* offs) {
    for (int k = 0; k < loop.n_in; ++k) offs[k] = 0;
    for (int i = last - 1; i >= 0; --i) {
      idx[i] = row % loop.dims[i];
      row /= loop.dims[i];
      for (int k = 0; k < loop.n_in; ++k) offs[k] += idx[i] * loop.strides[k][i];
    }
  };

  const int64_t pieces = n_inner > grain ? (n_inner + grain - 1) / grain : 1;
  if (pieces == 1) {
    // Units are rows, walked with an incremented index.
    auto body = [&](int64_t r0, int64_t r1) {
      int64_t idx[kMaxRank];
      int64_t offs[kMaxInputs];
      row_offsets(r0, idx, offs);
      for (int64_t r = r0; r < r1; ++r) {
        inner(offs, r * n_inner, n_inner, inner_st);
        for (int i = last - 1; i >= 0; --i) {
          for (int k = 0; k < loop.n_in; ++k) offs[k] += loop.strides[k][i];
          if (++idx[i] < loop.dims[i]) break;
          for (int k = 0; k < loop.n_in; ++k) offs[k] -= loop.strides[k][i] * loop.dims[i];
          idx[i] = 0;
        }
      }
    };
    pool.parallel_for(rows, body, std::max<int64_t>(1, grain / n_inner));
    return;
  }
  // Long rows: units are pieces of a row.
  const int64_t len = (n_inner + pieces - 1) / pieces;
  auto body = [&](int64_t u0, int64_t u1) {
    int64_t idx[kMaxRank];
    int64_t offs[kMaxInputs];
    for (int64_t u = u0; u < u1; ++u) {
      const int64_t row = u / pieces;
      const int64_t p0 = (u % pieces) * len;
      const int64_t n = std::min(len, n_inner - p0);
      if (n <= 0) continue;
      row_offsets(row, idx, offs);
      for (int k = 0; k < loop.n_in; ++k) offs[k] += p0 * inner_st[k];
      inner(offs, row * n_inner + p0, n, inner_st);
    }
  };
  pool.parallel_for(rows * pieces, body, 1);
}

// ---- binary operators -------------------------------------------------------------

enum class Kind { Add, Sub, Mul, Div, Pow, Equal };

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::Add:
      return "Add";
    case Kind::Sub:
      return "Sub";
    case Kind::Mul:
      return "Mul";
    case Kind::Div:
      return "Div";
    case Kind::Pow:
      return "Pow";
    case Kind::Equal:
      return "Equal";
  }
  return "?";
}

// Integer arithmetic wraps (two's complement) instead of overflowing, and
// division truncates towards zero, as ONNX Runtime's does on x86-64; the
// caller has refused a zero divisor.
template <typename T>
void int_binary(Kind k, const T* a, int64_t sa, const T* b, int64_t sb, T* out, int64_t n) {
  using U = std::make_unsigned_t<T>;
  switch (k) {
    case Kind::Add:
      for (int64_t i = 0; i < n; ++i) out[i] = T(U(a[i * sa]) + U(b[i * sb]));
      return;
    case Kind::Sub:
      for (int64_t i = 0; i < n; ++i) out[i] = T(U(a[i * sa]) - U(b[i * sb]));
      return;
    case Kind::Mul:
      for (int64_t i = 0; i < n; ++i) out[i] = T(U(a[i * sa]) * U(b[i * sb]));
      return;
    case Kind::Div:
      for (int64_t i = 0; i < n; ++i) {
        const T x = a[i * sa], y = b[i * sb];
        out[i] = y == -1 ? T(U(0) - U(x)) : T(x / y);  // min / -1 wraps to min
      }
      return;
    default:
      return;
  }
}

template <typename T>
void equal(const T* a, int64_t sa, const T* b, int64_t sb, uint8_t* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i * sa] == b[i * sb] ? 1 : 0;
}

void equal_bool(const uint8_t* a, int64_t sa, const uint8_t* b, int64_t sb, uint8_t* out,
                int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = (a[i * sa] != 0) == (b[i * sb] != 0) ? 1 : 0;
}

template <typename T>
bool has_zero(const TensorView& t) {
  const T* p = t.as<const T>();
  const int64_t n = t.count();
  for (int64_t i = 0; i < n; ++i)
    if (p[i] == 0) return true;
  return false;
}

class BinaryOp final : public Op {
 public:
  explicit BinaryOp(Kind kind) : kind_(kind), path_(mathk::best_path()) {}

  Status infer(std::span<const TensorInfo> in, std::span<const bool> present,
               std::span<TensorInfo> out) const override {
    (void)present;
    const DType a = in[0].dtype, b = in[1].dtype;
    const char* name = kind_name(kind_);
    if (a != b)
      return Status::invalid_argument(std::string(name) + "'s inputs have different dtypes (" +
                                      dtype_str(a) + " and " + dtype_str(b) + ")");
    const bool f32 = a == DType::Float32, ints = a == DType::Int64 || a == DType::Int32;
    if (kind_ == Kind::Pow && !f32)
      return Status::invalid_argument("Pow takes float32 inputs, got " + dtype_str(a));
    if (kind_ == Kind::Equal && !(f32 || ints || a == DType::Bool))
      return Status::invalid_argument("Equal takes float32, int64, int32 or bool inputs, got " +
                                      dtype_str(a));
    if (kind_ != Kind::Pow && kind_ != Kind::Equal && !(f32 || ints))
      return Status::invalid_argument(std::string(name) +
                                      " takes float32, int64 or int32 inputs, got " + dtype_str(a));
    CAIRN_ASSIGN_OR_RETURN(Shape shape, broadcast_shapes(in[0].shape, in[1].shape));
    out[0].dtype = kind_ == Kind::Equal ? DType::Bool : a;
    CAIRN_RETURN_IF_ERROR(checked_count(shape, values::dtype_size(out[0].dtype)).status());
    out[0].shape = std::move(shape);
    return Status::ok();
  }

  Status run(const RunArgs& args) const override {
    const TensorView& a = *args.in[0];
    const TensorView& b = *args.in[1];
    TensorView& out = *args.out[0];
    if (out.count() == 0) return Status::ok();
    const DType dt = a.dtype;
    if (kind_ == Kind::Div && dt != DType::Float32 &&
        (dt == DType::Int64 ? has_zero<int64_t>(b) : has_zero<int32_t>(b)))
      return Status::invalid_argument("integer division by zero");
    const TensorView* ins[2] = {&a, &b};
    Loop loop;
    plan(out.shape, ins, 2, loop);
    const size_t es = values::dtype_size(dt);
    const auto* pa = static_cast<const char*>(a.data);
    const auto* pb = static_cast<const char*>(b.data);
    char* po = static_cast<char*>(out.data);
    const size_t eo = values::dtype_size(out.dtype);
    const Kind kind = kind_;
    const mathk::Path path = path_;
    for_each_run(
        loop, args.pool, mathk::kGrainCheap,
        [&](const int64_t* offs, int64_t o, int64_t n, const int64_t* st) {
          const void* x = pa + size_t(offs[0]) * es;
          const void* y = pb + size_t(offs[1]) * es;
          void* z = po + size_t(o) * eo;
          if (kind == Kind::Equal) {
            auto* r = static_cast<uint8_t*>(z);
            switch (dt) {
              case DType::Float32:
                return equal(static_cast<const float*>(x), st[0], static_cast<const float*>(y),
                             st[1], r, n);
              case DType::Int64:
                return equal(static_cast<const int64_t*>(x), st[0], static_cast<const int64_t*>(y),
                             st[1], r, n);
              case DType::Int32:
                return equal(static_cast<const int32_t*>(x), st[0], static_cast<const int32_t*>(y),
                             st[1], r, n);
              default:
                return equal_bool(static_cast<const uint8_t*>(x), st[0],
                                  static_cast<const uint8_t*>(y), st[1], r, n);
            }
          }
          switch (dt) {
            case DType::Float32:
              return mathk::binary(path, BinOp(int(kind)), static_cast<const float*>(x), st[0],
                                   static_cast<const float*>(y), st[1], static_cast<float*>(z), n);
            case DType::Int64:
              return int_binary(kind, static_cast<const int64_t*>(x), st[0],
                                static_cast<const int64_t*>(y), st[1], static_cast<int64_t*>(z), n);
            default:
              return int_binary(kind, static_cast<const int32_t*>(x), st[0],
                                static_cast<const int32_t*>(y), st[1], static_cast<int32_t*>(z), n);
          }
        });
    return Status::ok();
  }

 private:
  Kind kind_;
  mathk::Path path_;
};
static_assert(int(Kind::Add) == int(BinOp::Add) && int(Kind::Sub) == int(BinOp::Sub) &&
              int(Kind::Mul) == int(BinOp::Mul) && int(Kind::Div) == int(BinOp::Div) &&
              int(Kind::Pow) == int(BinOp::Pow));

template <Kind K>
Result<std::unique_ptr<Op>> make_binary(const NodeContext& ctx) {
  CAIRN_RETURN_IF_ERROR(mathk::check_node(ctx.node, 2, 2, 1, {}));
  return std::unique_ptr<Op>(new BinaryOp(K));
}

// ---- Where ------------------------------------------------------------------------

template <typename T>
void select(const uint8_t* c, int64_t sc, const T* x, int64_t sx, const T* y, int64_t sy, T* out,
            int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = c[i * sc] ? x[i * sx] : y[i * sy];
}

class WhereOp final : public Op {
 public:
  Status infer(std::span<const TensorInfo> in, std::span<const bool> present,
               std::span<TensorInfo> out) const override {
    (void)present;
    if (in[0].dtype != DType::Bool)
      return Status::invalid_argument("Where's condition must be bool, got " +
                                      dtype_str(in[0].dtype));
    const DType t = in[1].dtype;
    if (in[2].dtype != t)
      return Status::invalid_argument("Where's values have different dtypes (" + dtype_str(t) +
                                      " and " + dtype_str(in[2].dtype) + ")");
    const size_t es = values::dtype_size(t);
    if (es != 1 && es != 2 && es != 4 && es != 8)
      return Status::invalid_argument("Where does not take " + dtype_str(t) + " values");
    CAIRN_ASSIGN_OR_RETURN(Shape s, broadcast_shapes(in[0].shape, in[1].shape));
    CAIRN_ASSIGN_OR_RETURN(s, broadcast_shapes(s, in[2].shape));
    CAIRN_RETURN_IF_ERROR(checked_count(s, es).status());
    out[0].dtype = t;
    out[0].shape = std::move(s);
    return Status::ok();
  }

  Status run(const RunArgs& args) const override {
    TensorView& out = *args.out[0];
    if (out.count() == 0) return Status::ok();
    const TensorView* ins[3] = {args.in[0], args.in[1], args.in[2]};
    Loop loop;
    plan(out.shape, ins, 3, loop);
    const size_t es = values::dtype_size(out.dtype);
    const auto* pc = static_cast<const uint8_t*>(ins[0]->data);
    const auto* px = static_cast<const char*>(ins[1]->data);
    const auto* py = static_cast<const char*>(ins[2]->data);
    char* po = static_cast<char*>(out.data);
    for_each_run(
        loop, args.pool, mathk::kGrainCheap,
        [&](const int64_t* offs, int64_t o, int64_t n, const int64_t* st) {
          const uint8_t* c = pc + offs[0];
          const void* x = px + size_t(offs[1]) * es;
          const void* y = py + size_t(offs[2]) * es;
          void* z = po + size_t(o) * es;
          // Values are moved as bits of their size, whatever their dtype.
          switch (es) {
            case 1:
              return select(c, st[0], static_cast<const uint8_t*>(x), st[1],
                            static_cast<const uint8_t*>(y), st[2], static_cast<uint8_t*>(z), n);
            case 2:
              return select(c, st[0], static_cast<const uint16_t*>(x), st[1],
                            static_cast<const uint16_t*>(y), st[2], static_cast<uint16_t*>(z), n);
            case 4:
              return select(c, st[0], static_cast<const uint32_t*>(x), st[1],
                            static_cast<const uint32_t*>(y), st[2], static_cast<uint32_t*>(z), n);
            default:
              return select(c, st[0], static_cast<const uint64_t*>(x), st[1],
                            static_cast<const uint64_t*>(y), st[2], static_cast<uint64_t*>(z), n);
          }
        });
    return Status::ok();
  }
};

Result<std::unique_ptr<Op>> make_where(const NodeContext& ctx) {
  CAIRN_RETURN_IF_ERROR(mathk::check_node(ctx.node, 3, 3, 1, {}));
  return std::unique_ptr<Op>(new WhereOp());
}

// ---- unary operators --------------------------------------------------------------

const char* unop_name(UnOp op) {
  switch (op) {
    case UnOp::Neg:
      return "Neg";
    case UnOp::Abs:
      return "Abs";
    case UnOp::Sqrt:
      return "Sqrt";
    case UnOp::Exp:
      return "Exp";
    case UnOp::Log:
      return "Log";
    case UnOp::Erf:
      return "Erf";
    case UnOp::Relu:
      return "Relu";
    case UnOp::Sigmoid:
      return "Sigmoid";
    case UnOp::Tanh:
      return "Tanh";
    case UnOp::GeluErf:
    case UnOp::GeluTanh:
      return "Gelu";
  }
  return "?";
}

// Neg and Abs of integers wrap at the minimum (-min is min), as two's
// complement hardware does.
template <typename T>
void int_unary(UnOp op, const T* x, T* out, int64_t n) {
  using U = std::make_unsigned_t<T>;
  if (op == UnOp::Neg) {
    for (int64_t i = 0; i < n; ++i) out[i] = T(U(0) - U(x[i]));
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] < 0 ? T(U(0) - U(x[i])) : x[i];
  }
}

class UnaryOp final : public Op {
 public:
  explicit UnaryOp(UnOp op) : op_(op), path_(mathk::best_path()) {}

  Status infer(std::span<const TensorInfo> in, std::span<const bool> present,
               std::span<TensorInfo> out) const override {
    (void)present;
    const DType t = in[0].dtype;
    const bool ints_ok = op_ == UnOp::Neg || op_ == UnOp::Abs;
    if (t != DType::Float32 && !(ints_ok && (t == DType::Int64 || t == DType::Int32)))
      return Status::invalid_argument(std::string(unop_name(op_)) + " takes " +
                                      (ints_ok ? "float32, int64 or int32" : "float32") +
                                      " input, got " + dtype_str(t));
    out[0].dtype = t;
    out[0].shape = in[0].shape;
    return Status::ok();
  }

  Status run(const RunArgs& args) const override {
    const TensorView& x = *args.in[0];
    TensorView& out = *args.out[0];
    const int64_t n = out.count();
    const bool cheap =
        op_ == UnOp::Neg || op_ == UnOp::Abs || op_ == UnOp::Relu || op_ == UnOp::Sqrt;
    const UnOp op = op_;
    const mathk::Path path = path_;
    const DType dt = x.dtype;
    args.pool.parallel_for(
        n,
        [&](int64_t b, int64_t e) {
          switch (dt) {
            case DType::Float32:
              return mathk::unary(path, op, x.as<const float>() + b, out.as<float>() + b, e - b);
            case DType::Int64:
              return int_unary(op, x.as<const int64_t>() + b, out.as<int64_t>() + b, e - b);
            default:
              return int_unary(op, x.as<const int32_t>() + b, out.as<int32_t>() + b, e - b);
          }
        },
        cheap ? mathk::kGrainCheap : mathk::kGrainHeavy);
    return Status::ok();
  }

 private:
  UnOp op_;
  mathk::Path path_;
};

template <UnOp K>
Result<std::unique_ptr<Op>> make_unary(const NodeContext& ctx) {
  CAIRN_RETURN_IF_ERROR(mathk::check_node(ctx.node, 1, 1, 1, {}));
  return std::unique_ptr<Op>(new UnaryOp(K));
}

Result<std::unique_ptr<Op>> make_gelu(const NodeContext& ctx) {
  CAIRN_RETURN_IF_ERROR(mathk::check_node(ctx.node, 1, 1, 1, {"approximate"}));
  const Result<std::string> approx = ctx.node.get_string("approximate", "none");
  if (!approx) return approx.status();
  if (*approx != "none" && *approx != "tanh")
    return Status::invalid_argument("Gelu's attribute 'approximate' is \"" + *approx +
                                    "\"; expected \"none\" or \"tanh\"");
  return std::unique_ptr<Op>(new UnaryOp(*approx == "tanh" ? UnOp::GeluTanh : UnOp::GeluErf));
}

}  // namespace

void add_math_ops(OpTable& table) {
  table.add("Add", make_binary<Kind::Add>);
  table.add("Sub", make_binary<Kind::Sub>);
  table.add("Mul", make_binary<Kind::Mul>);
  table.add("Div", make_binary<Kind::Div>);
  table.add("Pow", make_binary<Kind::Pow>);
  table.add("Equal", make_binary<Kind::Equal>);
  table.add("Where", make_where);
  table.add("Neg", make_unary<UnOp::Neg>);
  table.add("Abs", make_unary<UnOp::Abs>);
  table.add("Sqrt", make_unary<UnOp::Sqrt>);
  table.add("Exp", make_unary<UnOp::Exp>);
  table.add("Log", make_unary<UnOp::Log>);
  table.add("Erf", make_unary<UnOp::Erf>);
  table.add("Relu", make_unary<UnOp::Relu>);
  table.add("Sigmoid", make_unary<UnOp::Sigmoid>);
  table.add("Tanh", make_unary<UnOp::Tanh>);
  table.add("Gelu", make_gelu);
  mathk::add_norm_ops(table);
}

}  // namespace cairn::onnx
