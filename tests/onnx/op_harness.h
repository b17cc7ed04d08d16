// tests/onnx/op_harness.h — runs one operator outside a session, the way the
// planner does (factory -> infer -> allocate -> run), for the operator tests:
// node and attribute makers, and one runner over TensorView inputs.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "onnx/op.h"

namespace cairn::onnx::harness {

Attribute attr_int(int64_t v);
Attribute attr_ints(std::vector<int64_t> v);
Attribute attr_float(double v);
Attribute attr_string(std::string v);
Attribute attr_tensor(values::Tensor t);

using Attrs = std::map<std::string, Attribute>;

// A node named "<op>_0" with inputs "in0".. and outputs "out0"..
Node make_node(const std::string& op, size_t n_in, size_t n_out = 1, Attrs attrs = {}, int64_t opset = 17);

// The operator tests' pool: 2 threads, so the split paths run.
ThreadPool& op_pool();

struct OpInput {
  const TensorView* view = nullptr;  // null: an omitted optional input (the node's name becomes "")
  bool known = false;                // its value is known before running: given to the factory and infer()
};

// factory -> infer -> allocate (outputs filled with 0xCD bytes, so unwritten
// elements show) -> run, with the scratch the op asks for (64-byte aligned).
// The first error of any step is returned.
Result<std::vector<values::Tensor>> run_op_node(Node node, const std::vector<OpInput>& ins,
                                                ThreadPool& pool = op_pool());

}  // namespace cairn::onnx::harness
