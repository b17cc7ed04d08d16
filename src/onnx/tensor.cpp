// onnx/tensor.cpp — shape arithmetic shared by the planner and the operators.
#include "onnx/tensor.h"

#include <algorithm>

namespace cairn::onnx {

int64_t TensorView::count() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Result<int64_t> checked_count(const Shape& shape, size_t elem_size) {
  if (shape.size() > kMaxRank)
    return Status::invalid_argument("rank " + std::to_string(shape.size()) + " is over the limit of " +
                                    std::to_string(kMaxRank));
  const uint64_t limit = kMaxBytes / std::max<size_t>(elem_size, 1);
  uint64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return Status::invalid_argument("shape " + shape_string(shape) + " has a negative dimension");
    if (d != 0 && n > limit / uint64_t(d))
      return Status::invalid_argument("shape " + shape_string(shape) + " is over the size limit of " +
                                      std::to_string(kMaxBytes) + " bytes");
    n *= uint64_t(d);
  }
  if (n > limit)
    return Status::invalid_argument("shape " + shape_string(shape) + " is over the size limit of " +
                                    std::to_string(kMaxBytes) + " bytes");
  return int64_t(n);
}

Result<Shape> broadcast_shapes(const Shape& a, const Shape& b) {
  const size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (da == db || db == 1) {
      out[i] = da;
    } else if (da == 1) {
      out[i] = db;
    } else {
      return Status::invalid_argument("shapes " + shape_string(a) + " and " + shape_string(b) +
                                      " do not broadcast");
    }
  }
  return out;
}

Result<int64_t> normalize_axis(int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank)
    return Status::invalid_argument("axis " + std::to_string(axis) + " is out of range for rank " +
                                    std::to_string(rank));
  return axis < 0 ? axis + rank : axis;
}

std::string shape_string(const Shape& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

Result<std::vector<int64_t>> int_values(const TensorView& t) {
  const int64_t n = t.count();
  std::vector<int64_t> v(size_t(std::max<int64_t>(n, 0)));
  switch (t.dtype) {
    case DType::Int64:
      for (int64_t i = 0; i < n; ++i) v[size_t(i)] = t.as<const int64_t>()[i];
      return v;
    case DType::Int32:
      for (int64_t i = 0; i < n; ++i) v[size_t(i)] = t.as<const int32_t>()[i];
      return v;
    default:
      return Status::invalid_argument(std::string("expected an int64 or int32 tensor, got ") +
                                      values::dtype_name(t.dtype));
  }
}

}  // namespace cairn::onnx
