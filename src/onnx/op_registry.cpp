// onnx/op_registry.cpp — the table of operator factories, filled once by
// each operator family's add_*_ops().
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "onnx/op.h"

namespace cairn::onnx {

namespace {

struct Registry final : OpTable {
  std::map<std::string, OpFactory, std::less<>> factories;
  std::vector<std::string_view> names;

  void add(std::string_view op_type, OpFactory factory) override {
    factories.emplace(std::string(op_type), factory);
  }

  Registry() {
    add_math_ops(*this);
    add_shape_ops(*this);
    add_linear_ops(*this);
    add_collective_ops(*this);
    for (const auto& [name, f] : factories) names.push_back(name);
  }
};

const Registry& registry() {
  static const Registry r;
  return r;
}

}  // namespace

OpFactory find_op(std::string_view op_type, std::string_view domain) {
  const auto& f = registry().factories;
  auto it = domain.empty() ? f.find(op_type) : f.find(std::string(domain) + "." + std::string(op_type));
  return it == f.end() ? nullptr : it->second;
}

std::span<const std::string_view> supported_ops() { return registry().names; }

}  // namespace cairn::onnx
