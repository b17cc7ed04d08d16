// onnx/ops_cast.cpp — Cast between every values::DType (bool, int8..uint64,
// float16, bfloat16, float32, float64).
// Elements go through one of three wide forms (int64, uint64, double) in
// chunks, so there is one reader per source dtype and one writer per
// destination dtype rather than a loop per pair. Every conversion is defined
// (no C++ undefined behaviour on any value):
//   float -> integer: truncates toward zero into int32 (for 8/16/32-bit
//     targets) or int64 (uint32, int64, uint64), then wraps to the target,
//     as x86-64 code does, so ONNX Runtime gives the same there (-1.5 ->
//     uint8 is 255, 300.7 -> uint8 is 44); beyond int32/int64 it saturates
//     (1e10 -> int32 is INT32_MAX) and NaN gives 0;
//   integer -> integer: two's-complement wrap (C++20 conversion), as a C cast;
//   anything -> bool: != 0 (NaN is true); bool -> anything: 0 or 1;
//   -> float32/float16/bfloat16: rounded to nearest even; a double beyond
//     float's range gives +-inf (float16 and bfloat16 pass through float32).
// Cast to string (and complex, float8, int4) is refused.
#include <cfloat>
#include <cmath>
#include <limits>
#include <type_traits>

#include "core/half.h"
#include "onnx/ops_shape_common.h"

namespace cairn::onnx::shape_ops {

namespace {

// ONNX TensorProto.DataType numbers.
Result<DType> dtype_from_onnx(int64_t to) {
  switch (to) {
    case 1:
      return DType::Float32;
    case 2:
      return DType::UInt8;
    case 3:
      return DType::Int8;
    case 4:
      return DType::UInt16;
    case 5:
      return DType::Int16;
    case 6:
      return DType::Int32;
    case 7:
      return DType::Int64;
    case 9:
      return DType::Bool;
    case 10:
      return DType::Float16;
    case 11:
      return DType::Float64;
    case 12:
      return DType::UInt32;
    case 13:
      return DType::UInt64;
    case 16:
      return DType::BFloat16;
    case 8:
      return Status::invalid_argument("Cast to string is not supported");
    case 14:
    case 15:
      return Status::invalid_argument("Cast to a complex type is not supported");
    default:
      return Status::invalid_argument("Cast to data type " + std::to_string(to) +
                                      " is not supported");
  }
}

enum class Wide { Signed, Unsigned, Real };

constexpr int64_t kChunk = 256;
union Chunk {
  int64_t s[kChunk];
  uint64_t u[kChunk];
  double f[kChunk];
};

template <typename T>
void load(const void* src, int64_t n, int64_t* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<const T*>(src)[i];
}
template <typename T>
void load(const void* src, int64_t n, uint64_t* dst) {
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<const T*>(src)[i];
}

// Elements [0, n) of src into the chunk; returns the wide form used.
Wide read(DType t, const void* src, int64_t n, Chunk& c) {
  switch (t) {
    case DType::Bool:
      for (int64_t i = 0; i < n; ++i) c.u[i] = static_cast<const uint8_t*>(src)[i] != 0;
      return Wide::Unsigned;
    case DType::Int8:
      load<int8_t>(src, n, c.s);
      return Wide::Signed;
    case DType::Int16:
      load<int16_t>(src, n, c.s);
      return Wide::Signed;
    case DType::Int32:
      load<int32_t>(src, n, c.s);
      return Wide::Signed;
    case DType::Int64:
      load<int64_t>(src, n, c.s);
      return Wide::Signed;
    case DType::UInt8:
      load<uint8_t>(src, n, c.u);
      return Wide::Unsigned;
    case DType::UInt16:
      load<uint16_t>(src, n, c.u);
      return Wide::Unsigned;
    case DType::UInt32:
      load<uint32_t>(src, n, c.u);
      return Wide::Unsigned;
    case DType::UInt64:
      load<uint64_t>(src, n, c.u);
      return Wide::Unsigned;
    case DType::Float16:
      for (int64_t i = 0; i < n; ++i) c.f[i] = f16_to_f32(static_cast<const uint16_t*>(src)[i]);
      return Wide::Real;
    case DType::BFloat16:
      for (int64_t i = 0; i < n; ++i) c.f[i] = bf16_to_f32(static_cast<const uint16_t*>(src)[i]);
      return Wide::Real;
    case DType::Float32:
      for (int64_t i = 0; i < n; ++i) c.f[i] = static_cast<const float*>(src)[i];
      return Wide::Real;
    case DType::Float64:
      for (int64_t i = 0; i < n; ++i) c.f[i] = static_cast<const double*>(src)[i];
      return Wide::Real;
  }
  return Wide::Signed;
}

// double -> float without leaving float's range: beyond FLT_MAX by less
// than half an ulp rounds to FLT_MAX, further to infinity (IEEE rounding).
float narrow(double d) {
  if (!(std::fabs(d) > double(FLT_MAX))) return static_cast<float>(d);  // also NaN
  const float big =
      std::fabs(d) < 0x1.ffffffp127 ? FLT_MAX : std::numeric_limits<float>::infinity();
  return d < 0 ? -big : big;
}

constexpr double pow2(int bits) {
  double r = 1;
  for (int i = 0; i < bits; ++i) r *= 2;
  return r;
}

// A float truncated toward zero into the integer range [lo, hi] (given as
// exact powers of two: lo = -2^(b-1) or 0, hi_excl = 2^(b-1) or 2^b).
template <typename T>
T saturate(double d) {
  constexpr bool is_signed = std::numeric_limits<T>::is_signed;
  constexpr double hi_excl = pow2(std::numeric_limits<T>::digits);  // digits excludes the sign bit
  constexpr double lo = is_signed ? -hi_excl : 0.0;
  if (std::isnan(d)) return 0;
  if (d >= hi_excl) return std::numeric_limits<T>::max();
  if (d <= lo - 1 || (is_signed && d < lo)) return std::numeric_limits<T>::min();
  return static_cast<T>(d);  // in range: truncates toward zero
}

// float -> integer the way x86-64 code (and so ONNX Runtime there) does it
// for every value the intermediate integer type holds: truncate into int32
// (targets of 8 to 32 bits, signed, and unsigned 8/16) or int64 (uint32,
// int64, and negative values for uint64), then wrap to the target. Beyond
// the intermediate's range it saturates, and NaN gives 0, where x86 gives
// the "integer indefinite" value (C++ leaves both undefined).
template <typename T>
T float_to_int(double d) {
  if constexpr (sizeof(T) < 4 || std::is_same_v<T, int32_t>) {
    return static_cast<T>(saturate<int32_t>(d));
  } else if constexpr (std::is_same_v<T, uint64_t>) {
    return d < 0 ? static_cast<uint64_t>(saturate<int64_t>(d)) : saturate<uint64_t>(d);
  } else {
    return static_cast<T>(saturate<int64_t>(d));
  }
}

template <typename T>
void store_int(Wide w, const Chunk& c, int64_t n, void* dst) {
  T* y = static_cast<T*>(dst);
  switch (w) {
    case Wide::Signed:
      for (int64_t i = 0; i < n; ++i) y[i] = static_cast<T>(c.s[i]);
      return;
    case Wide::Unsigned:
      for (int64_t i = 0; i < n; ++i) y[i] = static_cast<T>(c.u[i]);
      return;
    case Wide::Real:
      for (int64_t i = 0; i < n; ++i) y[i] = float_to_int<T>(c.f[i]);
      return;
  }
}

// The chunk as floats, in place into `f` (int64 -> float rounds once).
void to_float(Wide w, const Chunk& c, int64_t n, float* f) {
  switch (w) {
    case Wide::Signed:
      for (int64_t i = 0; i < n; ++i) f[i] = static_cast<float>(c.s[i]);
      return;
    case Wide::Unsigned:
      for (int64_t i = 0; i < n; ++i) f[i] = static_cast<float>(c.u[i]);
      return;
    case Wide::Real:
      for (int64_t i = 0; i < n; ++i) f[i] = narrow(c.f[i]);
      return;
  }
}

void write(DType t, Wide w, const Chunk& c, int64_t n, void* dst) {
  switch (t) {
    case DType::Bool: {
      uint8_t* y = static_cast<uint8_t*>(dst);
      for (int64_t i = 0; i < n; ++i)
        y[i] = w == Wide::Real ? c.f[i] != 0 : w == Wide::Signed ? c.s[i] != 0 : c.u[i] != 0;
      return;
    }
    case DType::Int8:
      store_int<int8_t>(w, c, n, dst);
      return;
    case DType::Int16:
      store_int<int16_t>(w, c, n, dst);
      return;
    case DType::Int32:
      store_int<int32_t>(w, c, n, dst);
      return;
    case DType::Int64:
      store_int<int64_t>(w, c, n, dst);
      return;
    case DType::UInt8:
      store_int<uint8_t>(w, c, n, dst);
      return;
    case DType::UInt16:
      store_int<uint16_t>(w, c, n, dst);
      return;
    case DType::UInt32:
      store_int<uint32_t>(w, c, n, dst);
      return;
    case DType::UInt64:
      store_int<uint64_t>(w, c, n, dst);
      return;
    case DType::Float32:
      to_float(w, c, n, static_cast<float*>(dst));
      return;
    case DType::Float16:
    case DType::BFloat16: {
      float f[kChunk];
      to_float(w, c, n, f);
      uint16_t* y = static_cast<uint16_t*>(dst);
      if (t == DType::Float16)
        for (int64_t i = 0; i < n; ++i) y[i] = f32_to_f16(f[i]);
      else
        for (int64_t i = 0; i < n; ++i) y[i] = f32_to_bf16(f[i]);
      return;
    }
    case DType::Float64: {
      double* y = static_cast<double*>(dst);
      for (int64_t i = 0; i < n; ++i)
        y[i] = w == Wide::Real ? c.f[i] : w == Wide::Signed ? double(c.s[i]) : double(c.u[i]);
      return;
    }
  }
}

// The pairs exported graphs cast most (masks, ids, half weights) in one
// direct loop each, giving exactly what the chunked path gives; false for
// any other pair.
template <typename From, typename To>
void direct_loop(const void* src, void* dst, int64_t n) {
  const From* x = static_cast<const From*>(src);
  To* y = static_cast<To*>(dst);
  for (int64_t i = 0; i < n; ++i) y[i] = static_cast<To>(x[i]);
}

bool cast_direct(DType from, DType to, const void* src, void* dst, int64_t n) {
  if (to == DType::Float32) {
    switch (from) {
      case DType::Int64:
        direct_loop<int64_t, float>(src, dst, n);
        return true;
      case DType::Int32:
        direct_loop<int32_t, float>(src, dst, n);
        return true;
      case DType::Bool: {
        const uint8_t* x = static_cast<const uint8_t*>(src);
        float* y = static_cast<float*>(dst);
        for (int64_t i = 0; i < n; ++i) y[i] = x[i] != 0 ? 1.0f : 0.0f;
        return true;
      }
      case DType::Float16: {
        const uint16_t* x = static_cast<const uint16_t*>(src);
        float* y = static_cast<float*>(dst);
        for (int64_t i = 0; i < n; ++i) y[i] = f16_to_f32(x[i]);
        return true;
      }
      case DType::BFloat16: {
        const uint16_t* x = static_cast<const uint16_t*>(src);
        float* y = static_cast<float*>(dst);
        for (int64_t i = 0; i < n; ++i) y[i] = bf16_to_f32(x[i]);
        return true;
      }
      default:
        return false;
    }
  }
  if (from == DType::Int64 && to == DType::Int32) {
    direct_loop<int64_t, int32_t>(src, dst, n);  // wraps, as the chunked path
    return true;
  }
  if (from == DType::Int32 && to == DType::Int64) {
    direct_loop<int32_t, int64_t>(src, dst, n);
    return true;
  }
  if (from == DType::Float32 && (to == DType::Float16 || to == DType::BFloat16)) {
    const float* x = static_cast<const float*>(src);
    uint16_t* y = static_cast<uint16_t*>(dst);
    if (to == DType::Float16)
      for (int64_t i = 0; i < n; ++i) y[i] = f32_to_f16(x[i]);
    else
      for (int64_t i = 0; i < n; ++i) y[i] = f32_to_bf16(x[i]);
    return true;
  }
  return false;
}

class CastOp final : public Op {
 public:
  explicit CastOp(DType to) : to_(to) {}

  Status infer(std::span<const TensorInfo> in, std::span<const bool>,
               std::span<TensorInfo> out) const override {
    out[0].dtype = to_;
    out[0].shape = in[0].shape;
    return checked_count(in[0].shape,
                         std::max(values::dtype_size(to_), values::dtype_size(in[0].dtype)))
        .status();
  }

  Status run(const RunArgs& args) const override {
    const TensorView& x = *args.in[0];
    const TensorView& y = *args.out[0];
    if (x.dtype == to_) {
      copy_blocks(args.pool, static_cast<char*>(y.data), 0, static_cast<const char*>(x.data), 0, 1,
                  int64_t(x.bytes()));
      return Status::ok();
    }
    struct Job {
      const char* src;
      char* dst;
      DType from, to;
      int64_t n;
    };
    const Job job{static_cast<const char*>(x.data), static_cast<char*>(y.data), x.dtype, to_,
                  x.count()};
    auto chunks = [&job](int64_t b, int64_t e) {
      const size_t si = values::dtype_size(job.from), di = values::dtype_size(job.to);
      Chunk c;
      for (int64_t k = b; k < e; ++k) {
        const int64_t first = k * kChunk, n = std::min(kChunk, job.n - first);
        if (cast_direct(job.from, job.to, job.src + first * int64_t(si),
                        job.dst + first * int64_t(di), n))
          continue;
        const Wide w = read(job.from, job.src + first * int64_t(si), n, c);
        write(job.to, w, c, n, job.dst + first * int64_t(di));
      }
    };
    const int64_t n_chunks = (job.n + kChunk - 1) / kChunk;
    if (job.n * 8 < kParallelBytes || n_chunks < 2 || args.pool.size() <= 1)
      chunks(0, n_chunks);
    else
      args.pool.parallel_for(n_chunks, chunks);
    return Status::ok();
  }

 private:
  DType to_;
};

Result<std::unique_ptr<Op>> make_cast(const NodeContext& ctx) {
  CAIRN_RETURN_IF_ERROR(check_arity(ctx.node, 1, 1, 1));
  CAIRN_ASSIGN_OR_RETURN(int64_t to, ctx.node.require_int("to"));
  CAIRN_ASSIGN_OR_RETURN(DType t, dtype_from_onnx(to));
  // Opset 19's `saturate` only concerns float8 targets, which are refused.
  return std::unique_ptr<Op>(new CastOp(t));
}

}  // namespace

void add_cast_ops(OpTable& table) { table.add("Cast", make_cast); }

}  // namespace cairn::onnx::shape_ops
