// onnx/tensor.h — tensors as the ONNX runtime sees them while planning and running.
// Owns TensorView (a dtype, a shape and a pointer into memory someone else
// owns: the plan's arena, a constant, a caller's input) and TensorInfo (what
// the planner knows of a tensor before running: dtype, shape and, for
// constants, the value), plus the shape arithmetic every operator needs
// (element counts with overflow checks, numpy broadcasting, axis
// normalisation). Never allocates tensor data.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/value.h"

namespace cairn::onnx {

using values::DType;
using Shape = std::vector<int64_t>;

// Limits on what a model or an input may describe (as core/value.h's).
inline constexpr size_t kMaxRank = values::kMaxTensorRank;
inline constexpr uint64_t kMaxBytes = values::kMaxTensorBytes;

struct TensorView {
  DType dtype = DType::Float32;
  Shape shape;  // empty: a scalar (one element)
  void* data = nullptr;

  int64_t count() const;  // product of shape (1 for a scalar)
  size_t bytes() const { return size_t(count()) * values::dtype_size(dtype); }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data);
  }
};

// A tensor before a run: its dtype and shape for this plan's input shapes,
// and its value when the planner already knows it (initializers, Constant
// nodes, Shape outputs and anything computed only from those).
struct TensorInfo {
  DType dtype = DType::Float32;
  Shape shape;
  const TensorView* value = nullptr;
};

// The element count of a shape, or an error for a negative dimension, a rank
// over kMaxRank, or a count whose bytes (at elem_size) would pass kMaxBytes.
Result<int64_t> checked_count(const Shape& shape, size_t elem_size = 1);

// numpy's broadcast of two shapes, or an error naming both.
Result<Shape> broadcast_shapes(const Shape& a, const Shape& b);

// An axis in [-rank, rank) made non-negative, or an error.
Result<int64_t> normalize_axis(int64_t axis, int64_t rank);

// "[2, 3, 4]", for error messages.
std::string shape_string(const Shape& shape);

// A tensor's scalar integer values (int32/int64 tensors, as used for shapes,
// axes, indices): the values, or an error if the dtype is not an integer.
Result<std::vector<int64_t>> int_values(const TensorView& t);

}  // namespace cairn::onnx
