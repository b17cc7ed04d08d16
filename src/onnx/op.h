// onnx/op.h — the operator interface between the planner and the kernels.
// Owns Op (one node's operator, made once at load from its attributes and
// constant inputs), the arguments a run passes it, and the table of operator
// factories by op type. An Op never allocates in run(): everything it needs
// for given shapes it asks for up front through scratch_bytes().
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string_view>

#include "collective/group.h"
#include "core/status.h"
#include "core/thread_pool.h"
#include "onnx/node.h"
#include "onnx/tensor.h"

namespace cairn::onnx {

// Attribute the session sets on a MatMul into which it fused the following
// Add of a constant [N] bias (the bias then is the MatMul's third input).
// The ':' keeps it apart from ONNX's attribute names.
inline constexpr std::string_view kFusedBiasAttr = "cairn:fused_bias";
// Attribute the session sets on a MatMul, Gemm or Conv into which it fused
// the activation reading its output; the value (a string) is that node's op
// type: "Relu", "Sigmoid", "Tanh", "Gelu", or "Gelu:tanh" for Gelu's tanh
// approximation.
inline constexpr std::string_view kFusedActivationAttr = "cairn:fused_activation";

struct RunArgs {
  std::span<const TensorView* const> in;  // one per node input; null for an omitted optional input
  std::span<TensorView* const> out;       // shapes and buffers set as infer() said
  void* scratch = nullptr;                // scratch_bytes() bytes, 64-byte aligned
  ThreadPool& pool;
};

class Op {
 public:
  virtual ~Op() = default;

  // Output dtypes and shapes for these inputs (in[i].value set where the
  // input is known before running; an omitted optional input has dtype
  // Float32, empty shape and is listed in `present` as false). Called once
  // per plan (a set of graph input shapes), never while running. The error
  // names the problem; the planner prefixes the node.
  virtual Status infer(std::span<const TensorInfo> in, std::span<const bool> present,
                       std::span<TensorInfo> out) const = 0;

  // Scratch bytes run() needs for these shapes (after infer() accepted them).
  virtual size_t scratch_bytes(std::span<const TensorInfo> in,
                               std::span<const TensorInfo> out) const {
    (void)in;
    (void)out;
    return 0;
  }

  // Output 0 is input 0's bytes under another shape (Reshape, Flatten,
  // Squeeze, Unsqueeze, Identity): the planner points the output at the
  // input's buffer and never calls run().
  virtual bool is_view() const { return false; }

  // Whether infer() needs input i's values, not only its shape (Reshape's
  // shape, Slice's bounds, TopK's K, axes given as inputs): the planner then
  // keys plans on the graph inputs those values come from.
  virtual bool needs_value(size_t input) const {
    (void)input;
    return false;
  }

  // Computes the outputs. Shapes were checked by infer(); no allocation.
  // Everything that can be checked from shapes and attributes fails in the
  // factory or in infer(); run() fails only on bad data values (an index out
  // of range in Gather: the message names the value), never reading out of
  // bounds.
  virtual Status run(const RunArgs& args) const = 0;
};

// What a factory sees: the node, and per input its value when it is a
// constant of the model (an initializer, a Constant node's output, or folded
// from them at load), so an operator can prepare (pack weights) once.
struct NodeContext {
  const Node& node;
  std::span<const TensorView* const> constants;  // one per input; null when not constant
  // The group collective operators (domain "cairn") run over; null when the
  // session was made without one (they then fail the load).
  std::shared_ptr<collective::GroupSlot> group = nullptr;
};


using OpFactory = Result<std::unique_ptr<Op>> (*)(const NodeContext&);

// The factory for an op type of the default domain (domain "") or of
// kCairnDomain, or null when cairn does not run it.
OpFactory find_op(std::string_view op_type, std::string_view domain = {});
// Every op type cairn runs, sorted (for docs and errors); those of
// kCairnDomain as "cairn.<op>".
std::span<const std::string_view> supported_ops();

// Each operator family registers its factories here (onnx/op_registry.cpp
// calls them in turn); `add` records one op type.
class OpTable {
 public:
  virtual void add(std::string_view op_type, OpFactory factory) = 0;

 protected:
  ~OpTable() = default;
};
void add_math_ops(OpTable& table);    // ops_math.cpp: elementwise, activations, normalisations
void add_shape_ops(OpTable& table);   // ops_shape.cpp: shapes, data movement, casts, reductions, ArgMax, TopK
void add_linear_ops(OpTable& table);  // ops_linear.cpp: MatMul, Gemm, Conv, pooling
void add_collective_ops(OpTable& table);  // ops_collective.cpp: cairn.AllGather, cairn.AllReduce, cairn.Broadcast

}  // namespace cairn::onnx
