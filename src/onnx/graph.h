// onnx/graph.h — an ONNX model file parsed into plain C++ structures.
// Owns the parse and every check that needs only the file: the protobuf is
// well-formed, the opset is 13 or later, nodes are in the default domain and
// in topological order, initializers' sizes agree with their shapes,
// external data stays inside the model's folder and within its file. The
// result holds the initializers' bytes (values::Tensor) and the nodes as
// onnx::Node; it knows nothing of operators or plans (onnx/session.cpp does
// that). graph.cpp is the only file that includes the protobuf definition.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/value.h"
#include "onnx/node.h"
#include "onnx/session.h"

namespace cairn::onnx {

// Models at or over this size are refused (protobuf's own 2 GiB limit);
// bigger weights go in external data files.
inline constexpr uint64_t kMaxModelBytes = (uint64_t(1) << 31) - 1;

struct Initializer {
  std::string name;
  values::Tensor tensor;  // FLOAT16/BFLOAT16 already widened to float32
};

struct Graph {
  int64_t ir_version = 0;
  int64_t opset = 0;  // the default domain's ("" or "ai.onnx")
  std::vector<ValueInfo> inputs;   // initializers listed as inputs (old exports) left out
  std::vector<ValueInfo> outputs;
  std::vector<bool> output_typed;  // per output: whether the file gives its elem type
  std::vector<Initializer> initializers;
  std::vector<Node> nodes;  // in the file's order, which is checked to be topological
};

// Parses and checks a model. External data is read from files under
// base_dir (refused when base_dir is empty).
Result<Graph> parse_model(std::string_view bytes, const std::string& base_dir);

}  // namespace cairn::onnx
