// onnx/ops_shape_common.h — helpers shared by the shape-family operator files.
// Owns the registration hooks of each file of the family (add_shape_ops in
// ops_shape.cpp calls them), the checks every one of those ops repeats (input
// and output counts, inputs that must be known before running, axis lists)
// and the byte-copy primitives the data-movement ops run on (contiguous
// blocks and strided gathers, split over the pool when big). Internal to
// src/onnx/: nothing outside the shape family includes it. run()-side helpers
// never allocate: they work on fixed arrays of kMaxRank.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "onnx/op.h"

namespace cairn::onnx::shape_ops {

// Registration hooks, one per file of the family.
void add_view_ops(OpTable& table);  // ops_shape.cpp: Reshape, Flatten, Squeeze, Unsqueeze, Identity
void add_source_ops(OpTable& table);  // ops_shape.cpp: Shape, Size, Constant, ConstantOfShape
void add_movement_ops(
    OpTable& table);                  // ops_shape_move.cpp: Transpose, Concat, Split, Slice, Gather
void add_cast_ops(OpTable& table);    // ops_cast.cpp: Cast
void add_reduce_ops(OpTable& table);  // ops_reduce.cpp: ReduceMean, ReduceSum, ArgMax, TopK

// The node has between min_in and max_in inputs listed (trailing omitted
// ones count as listed) and exactly n_out outputs (n_out < 0: at least one).
Status check_arity(const Node& node, size_t min_in, size_t max_in, int n_out);

// Input i's integer values, which must be known before running (a constant
// or computed from shapes); `what` names the input in the error.
Result<std::vector<int64_t>> known_ints(std::span<const TensorInfo> in, size_t i, const char* what);

// Axes made non-negative against rank; duplicates refused.
Result<std::vector<int64_t>> normalize_axes(const std::vector<int64_t>& axes, int64_t rank);

// An attribute that a later opset turned into an input: refused from that
// opset on, with an error saying which input replaced it.
Status refuse_moved_attribute(const Node& node, const char* attr, int64_t since_opset,
                              int input_index);

// A fixed-capacity list of dims or strides for run(), which may not allocate.
struct Dims {
  std::array<int64_t, kMaxRank> v{};
  size_t n = 0;
  int64_t& operator[](size_t i) { return v[i]; }
  int64_t operator[](size_t i) const { return v[i]; }
  void push(int64_t x) {
    if (n < kMaxRank) v[n++] = x;  // callers keep ranks within kMaxRank
  }
};

// A list of ints that an attribute gave before opset `since` and input
// `index` gives from it (Squeeze/Unsqueeze axes, Split's split, the reduce
// ops' axes). Made in the factory; read in infer().
struct IntsArg {
  bool from_input = false;
  size_t index = 0;
  bool has_attr = false;
  std::vector<int64_t> attr;

  static Result<IntsArg> make(const Node& node, const char* name, int64_t since, size_t index);
  // The values, or has == false when neither the attribute nor the input is
  // given. An input that is given must be known before running.
  struct Value {
    bool has = false;
    std::vector<int64_t> v;
  };
  Result<Value> get(std::span<const TensorInfo> in, std::span<const bool> present,
                    const char* name) const;
  // Reads the values while running (from the input when it is one), without
  // allocating; false when absent.
  bool read(const RunArgs& args, Dims& out) const;
};

// Whether input i is present in infer()'s arguments.
inline bool is_present(std::span<const bool> present, size_t i) {
  return i < present.size() && present[i];
}

// Reads up to kMaxRank integers of an int32/int64 tensor into `out` without
// allocating; false when the dtype is not an integer or there are too many.
bool read_small_ints(const TensorView& t, Dims& out);

// Copies n blocks of `block` bytes: block i from src + i * src_stride to
// dst + i * dst_stride. Splits the work over the pool when it is big
// (by block, or by pieces of each block when there are few blocks).
void copy_blocks(ThreadPool& pool, char* dst, int64_t dst_stride, const char* src,
                 int64_t src_stride, int64_t n, int64_t block);

// A strided gather into a contiguous output: for every multi-index over
// dims[0..rank) (row-major), copies one element of elem bytes from
// src + sum(idx[k] * src_stride[k]) to the next place of dst. The last dim
// is the inner loop: one memcpy when its stride equals elem. Strides are in
// bytes and may be negative (Slice with negative steps). Splits over the
// pool by rows when big.
struct StridedCopy {
  Dims dims;
  Dims src_stride;
  const char* src = nullptr;
  char* dst = nullptr;
  int64_t elem = 0;
};
void strided_copy(ThreadPool& pool, const StridedCopy& c);

// Above this many bytes of work, data movement and reductions split over the
// pool; below it the fork/join costs more than it saves.
inline constexpr int64_t kParallelBytes = int64_t(1) << 16;

}  // namespace cairn::onnx::shape_ops
