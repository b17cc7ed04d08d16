// onnx/node.cpp — typed attribute reads with errors that name the attribute.
#include "onnx/node.h"

namespace cairn::onnx {

namespace {

const char* kind_name(Attribute::Kind k) {
  switch (k) {
    case Attribute::Kind::Float: return "a float";
    case Attribute::Kind::Int: return "an int";
    case Attribute::Kind::String: return "a string";
    case Attribute::Kind::Tensor: return "a tensor";
    case Attribute::Kind::Floats: return "a list of floats";
    case Attribute::Kind::Ints: return "a list of ints";
    case Attribute::Kind::Strings: return "a list of strings";
  }
  return "?";
}

Status wrong_kind(const std::string& attr, const Attribute& a, Attribute::Kind want) {
  return Status::invalid_argument("attribute '" + attr + "' is " + kind_name(a.kind) + ", expected " +
                                  kind_name(want));
}

}  // namespace

std::string Node::describe() const {
  return "node '" + name + "' (" + (domain.empty() ? "" : domain + ".") + op_type + ", opset " +
         std::to_string(opset) + ")";
}

Result<int64_t> Node::get_int(const std::string& attr, int64_t fallback) const {
  auto it = attributes.find(attr);
  if (it == attributes.end()) return fallback;
  if (it->second.kind != Attribute::Kind::Int) return wrong_kind(attr, it->second, Attribute::Kind::Int);
  return it->second.i;
}

Result<double> Node::get_float(const std::string& attr, double fallback) const {
  auto it = attributes.find(attr);
  if (it == attributes.end()) return fallback;
  if (it->second.kind != Attribute::Kind::Float)
    return wrong_kind(attr, it->second, Attribute::Kind::Float);
  return it->second.f;
}

Result<std::string> Node::get_string(const std::string& attr, const std::string& fallback) const {
  auto it = attributes.find(attr);
  if (it == attributes.end()) return fallback;
  if (it->second.kind != Attribute::Kind::String)
    return wrong_kind(attr, it->second, Attribute::Kind::String);
  return it->second.s;
}

Result<std::vector<int64_t>> Node::get_ints(const std::string& attr,
                                            const std::vector<int64_t>& fallback) const {
  auto it = attributes.find(attr);
  if (it == attributes.end()) return fallback;
  if (it->second.kind != Attribute::Kind::Ints) return wrong_kind(attr, it->second, Attribute::Kind::Ints);
  return it->second.ints;
}

Result<std::vector<double>> Node::get_floats(const std::string& attr,
                                             const std::vector<double>& fallback) const {
  auto it = attributes.find(attr);
  if (it == attributes.end()) return fallback;
  if (it->second.kind != Attribute::Kind::Floats)
    return wrong_kind(attr, it->second, Attribute::Kind::Floats);
  return it->second.floats;
}

Result<int64_t> Node::require_int(const std::string& attr) const {
  auto it = attributes.find(attr);
  if (it == attributes.end()) return Status::invalid_argument("attribute '" + attr + "' is required");
  if (it->second.kind != Attribute::Kind::Int) return wrong_kind(attr, it->second, Attribute::Kind::Int);
  return it->second.i;
}

Result<const values::Tensor*> Node::require_tensor(const std::string& attr) const {
  auto it = attributes.find(attr);
  if (it == attributes.end()) return Status::invalid_argument("attribute '" + attr + "' is required");
  if (it->second.kind != Attribute::Kind::Tensor || !it->second.tensor)
    return wrong_kind(attr, it->second, Attribute::Kind::Tensor);
  return it->second.tensor.get();
}

}  // namespace cairn::onnx
