// onnx/session.h — a loaded ONNX model that runs forwards.
// Owns the parsed graph (onnx/graph.cpp), one Op per node, the constants,
// and the plans: for each set of input shapes seen, the shapes of every
// tensor, the values known before running, and one arena laid out so that
// tensors whose lifetimes do not overlap share bytes. A forward with shapes
// already planned allocates nothing but its output tensors. run() calls are
// serialised (one forward at a time; the kernels use the whole pool).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "core/value.h"
#include "onnx/op.h"

namespace cairn::onnx {

// A graph input or output as the file declares it.
struct ValueInfo {
  std::string name;
  values::DType dtype = values::DType::Float32;
  std::vector<int64_t> dims;            // -1: dynamic (named or unnamed)
  std::vector<std::string> dim_names;   // the symbolic name of a dynamic dim, or ""
  bool has_shape = true;                // false: the file gives no shape at all
};

struct SessionOptions {
  // The kernels' threads; null: the session makes its own with
  // ThreadPool::default_size() threads.
  ThreadPool* pool = nullptr;
  int threads = 0;  // for the session's own pool: 0 = default_size()
  // Plans kept (least recently used dropped first); each holds its arena.
  int max_plans = 16;
  // Where op types are looked up; empty: find_op (the real table). Tests
  // inject their own operators through it.
  std::function<OpFactory(std::string_view)> op_lookup;
  // The group for the model's collective operators (domain "cairn"): an
  // agent's shard of a distributed model. Null for an ordinary model.
  std::shared_ptr<collective::GroupSlot> group;
};

class Session {
 public:
  // Reads and checks the model: protobuf well-formed, opset >= 13, every
  // node's op supported with valid attributes (the error names the node, op
  // type and opset), initializers' sizes agree with their shapes, external
  // data files inside the model's folder and large enough. Folds nodes whose
  // inputs are all constants.
  static Result<std::unique_ptr<Session>> load(const std::string& path, SessionOptions options = {});
  // The same from bytes in memory; external data is looked up in base_dir
  // (refused when base_dir is empty).
  static Result<std::unique_ptr<Session>> load_bytes(std::string_view bytes, const std::string& base_dir,
                                                     SessionOptions options = {});
  virtual ~Session() = default;

  virtual const std::vector<ValueInfo>& inputs() const = 0;
  virtual const std::vector<ValueInfo>& outputs() const = 0;
  virtual int64_t opset() const = 0;

  // One forward. `inputs` in the order of inputs(); each checked against the
  // declared dtype and the fixed dims (the error names the input). Returns
  // the outputs in the order of outputs().
  virtual Result<std::vector<values::Tensor>> run(std::span<const values::Tensor* const> inputs) = 0;

  // Plans currently cached (tests, stats).
  virtual int plans_cached() const = 0;
  // Operator nodes left to run after load-time folding and fusion (tests).
  virtual size_t node_count() const = 0;
  // Bytes of the arena (intermediate tensors and scratch) of the plan the
  // last run() used, 0 before any run (tests, stats).
  virtual size_t arena_bytes() const = 0;
};

}  // namespace cairn::onnx
