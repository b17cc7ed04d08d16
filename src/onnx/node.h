// onnx/node.h — one node of an ONNX graph as the runtime keeps it.
// Owns Node (op type, name, the model's opset for its domain, input and
// output tensor names, attributes) and the typed attribute accessors that
// operators use, which turn a missing or mistyped attribute into an error
// naming it. Knows nothing of protobuf: onnx/graph.cpp fills these in.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "core/value.h"

namespace cairn::onnx {

// The domain of cairn's own operators (the collectives), opset 1.
inline constexpr std::string_view kCairnDomain = "cairn";

struct Attribute {
  enum class Kind { Float, Int, String, Tensor, Floats, Ints, Strings };
  Kind kind = Kind::Int;
  double f = 0;
  int64_t i = 0;
  std::string s;
  std::shared_ptr<const values::Tensor> tensor;
  std::vector<double> floats;
  std::vector<int64_t> ints;
  std::vector<std::string> strings;
};

struct Node {
  std::string name;     // may be empty in the file; graph.cpp names it "<op_type>_<index>" then
  std::string op_type;  // "MatMul"
  std::string domain;   // "" (ai.onnx), or kCairnDomain for cairn's collectives
  int64_t opset = 0;    // the model's opset_import version for the domain
  std::vector<std::string> inputs;  // "" marks an omitted optional input
  std::vector<std::string> outputs;
  std::map<std::string, Attribute> attributes;

  // "node 'name' (OpType, opset N)": the prefix of every error about it.
  std::string describe() const;

  bool has(const std::string& attr) const { return attributes.count(attr) != 0; }
  // Typed reads: the value, the fallback when absent, or an error (naming
  // the attribute) when present with another kind.
  Result<int64_t> get_int(const std::string& attr, int64_t fallback) const;
  Result<double> get_float(const std::string& attr, double fallback) const;
  Result<std::string> get_string(const std::string& attr, const std::string& fallback) const;
  Result<std::vector<int64_t>> get_ints(const std::string& attr,
                                        const std::vector<int64_t>& fallback = {}) const;
  Result<std::vector<double>> get_floats(const std::string& attr,
                                         const std::vector<double>& fallback = {}) const;
  // Required attributes: an error when absent.
  Result<int64_t> require_int(const std::string& attr) const;
  Result<const values::Tensor*> require_tensor(const std::string& attr) const;

  // Whether input i is present (listed and not "").
  bool has_input(size_t i) const { return i < inputs.size() && !inputs[i].empty(); }
};

}  // namespace cairn::onnx
