// onnx/graph.cpp — ModelProto bytes to onnx::Graph, checking everything the
// file alone can get wrong (see graph.h). Every size read from the file is
// checked before anything is allocated for it.
#include "onnx/graph.h"

#include <google/protobuf/io/coded_stream.h>
#include <onnx/onnx_pb.h>

#include <charconv>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <unordered_set>

#include "core/half.h"
#include "onnx/tensor.h"

namespace cairn::onnx {

namespace {

namespace fs = std::filesystem;
using TP = ::onnx::TensorProto;

const char* onnx_type_name(int t) {
  switch (t) {
    case TP::FLOAT: return "FLOAT";
    case TP::UINT8: return "UINT8";
    case TP::INT8: return "INT8";
    case TP::UINT16: return "UINT16";
    case TP::INT16: return "INT16";
    case TP::INT32: return "INT32";
    case TP::INT64: return "INT64";
    case TP::STRING: return "STRING";
    case TP::BOOL: return "BOOL";
    case TP::FLOAT16: return "FLOAT16";
    case TP::DOUBLE: return "DOUBLE";
    case TP::UINT32: return "UINT32";
    case TP::UINT64: return "UINT64";
    case TP::COMPLEX64: return "COMPLEX64";
    case TP::COMPLEX128: return "COMPLEX128";
    case TP::BFLOAT16: return "BFLOAT16";
    default: return nullptr;
  }
}

std::string type_string(int t) {
  const char* n = onnx_type_name(t);
  return n ? n : "type " + std::to_string(t);
}

// The dtypes cairn keeps as they are (graph inputs/outputs and initializers).
std::optional<DType> kept_dtype(int t) {
  switch (t) {
    case TP::FLOAT: return DType::Float32;
    case TP::DOUBLE: return DType::Float64;
    case TP::INT64: return DType::Int64;
    case TP::INT32: return DType::Int32;
    case TP::INT8: return DType::Int8;
    case TP::UINT8: return DType::UInt8;
    case TP::BOOL: return DType::Bool;
    default: return std::nullopt;
  }
}

Result<uint64_t> parse_u64(const std::string& s, const std::string& what) {
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size())
    return Status::invalid_argument(what + " '" + s + "' is not a non-negative integer");
  return v;
}

// Reads [offset, offset + length) of an external data file, after checking
// the location cannot leave the model's folder.
Result<std::string> read_external(const TP& t, const std::string& base_dir, uint64_t want_bytes) {
  std::string location;
  uint64_t offset = 0;
  std::optional<uint64_t> length;
  for (const auto& kv : t.external_data()) {
    if (kv.key() == "location") {
      location = kv.value();
    } else if (kv.key() == "offset") {
      CAIRN_ASSIGN_OR_RETURN(offset, parse_u64(kv.value(), "external data offset"));
    } else if (kv.key() == "length") {
      CAIRN_ASSIGN_OR_RETURN(length, parse_u64(kv.value(), "external data length"));
    }
  }
  if (location.empty()) return Status::invalid_argument("external data has no location");
  if (base_dir.empty())
    return Status::invalid_argument("external data '" + location +
                                    "' cannot be read: the model was given as bytes without a folder");
  if (location.find('\0') != std::string::npos)
    return Status::invalid_argument("external data location contains a NUL byte");
  const fs::path rel(location);
  if (rel.is_absolute() || rel.has_root_name() || rel.has_root_directory())
    return Status::invalid_argument("external data location '" + location +
                                    "' is absolute; it must be relative to the model's folder");
  for (const auto& part : rel)
    if (part == "..")
      return Status::invalid_argument("external data location '" + location +
                                      "' contains '..'; it must stay inside the model's folder");
  // Symbolic links could still lead out: compare the resolved paths.
  std::error_code ec;
  const fs::path base = fs::weakly_canonical(fs::path(base_dir), ec);
  if (ec) return Status::invalid_argument("model folder '" + base_dir + "': " + ec.message());
  const fs::path full = fs::weakly_canonical(base / rel, ec);
  if (ec) return Status::invalid_argument("external data '" + location + "': " + ec.message());
  const auto [bend, fit] = std::mismatch(base.begin(), base.end(), full.begin(), full.end());
  if (bend != base.end())
    return Status::invalid_argument("external data location '" + location +
                                    "' resolves outside the model's folder");
  if (length && *length != want_bytes)
    return Status::invalid_argument("external data length " + std::to_string(*length) + " is not the " +
                                    std::to_string(want_bytes) + " bytes its shape needs");
  std::ifstream in(full, std::ios::binary);
  if (!in) return Status::invalid_argument("external data file '" + location + "' cannot be opened");
  in.seekg(0, std::ios::end);
  const std::streamoff size = in.tellg();
  if (size < 0 || fs::is_directory(full, ec))
    return Status::invalid_argument("external data file '" + location + "' cannot be read");
  if (offset > uint64_t(size) || want_bytes > uint64_t(size) - offset)
    return Status::invalid_argument("external data range [" + std::to_string(offset) + ", +" +
                                    std::to_string(want_bytes) + ") is past the end of '" + location +
                                    "' (" + std::to_string(size) + " bytes)");
  std::string data(want_bytes, '\0');
  in.seekg(std::streamoff(offset));
  if (want_bytes && !in.read(data.data(), std::streamsize(want_bytes)))
    return Status::invalid_argument("external data file '" + location + "' could not be read");
  return data;
}

// Typed-field elements into little-endian bytes of `elem` bytes each.
template <typename Field, typename Out>
std::string pack(const Field& field) {
  std::string out(size_t(field.size()) * sizeof(Out), '\0');
  for (int i = 0; i < field.size(); ++i) {
    const Out v = static_cast<Out>(field.Get(i));
    std::memcpy(out.data() + size_t(i) * sizeof(Out), &v, sizeof(Out));
  }
  return out;
}

Result<values::Tensor> tensor_body(const TP& t, const std::string& base_dir) {
  if (t.has_segment()) return Status::invalid_argument("segmented tensors are not supported");
  const int type = t.data_type();
  const bool half = type == TP::FLOAT16 || type == TP::BFLOAT16;
  const std::optional<DType> kept = kept_dtype(type);
  if (!kept && !half)
    return Status::invalid_argument("data type " + type_string(type) +
                                    " is not supported (cairn keeps float32, float64, int64, int32, int8, "
                                    "uint8, bool; float16/bfloat16 are widened to float32)");
  Shape shape(t.dims().begin(), t.dims().end());
  const size_t elem = half ? 2 : values::dtype_size(*kept);
  CAIRN_ASSIGN_OR_RETURN(const int64_t count, checked_count(shape, half ? 4 : elem));
  const uint64_t want = uint64_t(count) * elem;

  std::string bytes;
  if (t.has_data_location() && t.data_location() == TP::EXTERNAL) {
    CAIRN_ASSIGN_OR_RETURN(bytes, read_external(t, base_dir, want));
  } else if (t.has_raw_data()) {
    if (t.raw_data().size() != want)
      return Status::invalid_argument("raw_data has " + std::to_string(t.raw_data().size()) +
                                      " bytes, its shape " + shape_string(shape) + " of " + type_string(type) +
                                      " needs " + std::to_string(want));
    bytes = t.raw_data();
  } else {
    int64_t have = 0;
    switch (type) {
      case TP::FLOAT: have = t.float_data_size(); break;
      case TP::DOUBLE: have = t.double_data_size(); break;
      case TP::INT64: have = t.int64_data_size(); break;
      default: have = t.int32_data_size(); break;  // INT32, INT8, UINT8, BOOL, FLOAT16, BFLOAT16
    }
    if (have != count)
      return Status::invalid_argument("has " + std::to_string(have) + " values, its shape " +
                                      shape_string(shape) + " needs " + std::to_string(count));
    switch (type) {
      case TP::FLOAT: bytes = pack<decltype(t.float_data()), float>(t.float_data()); break;
      case TP::DOUBLE: bytes = pack<decltype(t.double_data()), double>(t.double_data()); break;
      case TP::INT64: bytes = pack<decltype(t.int64_data()), int64_t>(t.int64_data()); break;
      case TP::INT32: bytes = pack<decltype(t.int32_data()), int32_t>(t.int32_data()); break;
      case TP::INT8: bytes = pack<decltype(t.int32_data()), int8_t>(t.int32_data()); break;
      case TP::UINT8: bytes = pack<decltype(t.int32_data()), uint8_t>(t.int32_data()); break;
      case TP::BOOL: {
        bytes.assign(size_t(count), '\0');
        for (int64_t i = 0; i < count; ++i) bytes[size_t(i)] = t.int32_data(int(i)) != 0 ? 1 : 0;
        break;
      }
      default:  // FLOAT16 / BFLOAT16: the 16 bits sit in the low half of each int32
        bytes = pack<decltype(t.int32_data()), uint16_t>(t.int32_data());
        break;
    }
  }
  if (type == TP::BOOL)  // any non-zero byte is true; the kernels expect 0/1
    for (char& c : bytes) c = c != 0 ? 1 : 0;
  if (half) {
    // FLOAT16/BFLOAT16 weights are widened to float32 at load: the operators
    // run on float32, and this keeps one code path per op.
    std::string wide(size_t(count) * 4, '\0');
    for (int64_t i = 0; i < count; ++i) {
      uint16_t h;
      std::memcpy(&h, bytes.data() + size_t(i) * 2, 2);
      const float f = type == TP::FLOAT16 ? f16_to_f32(h) : bf16_to_f32(h);
      std::memcpy(wide.data() + size_t(i) * 4, &f, 4);
    }
    bytes = std::move(wide);
  }
  return values::Tensor::make(half ? DType::Float32 : *kept, std::move(shape), std::move(bytes));
}

Result<values::Tensor> parse_tensor(const TP& t, const std::string& base_dir, const std::string& what) {
  auto r = tensor_body(t, base_dir);
  if (!r) return r.status().with_context(what);
  return r;
}

Result<ValueInfo> parse_value_info(const ::onnx::ValueInfoProto& v, const char* kind, bool* typed) {
  ValueInfo info;
  info.name = v.name();
  const std::string what = std::string(kind) + " '" + v.name() + "'";
  if (v.name().empty()) return Status::invalid_argument(std::string("a graph ") + kind + " has no name");
  if (!v.has_type() || v.type().value_case() == ::onnx::TypeProto::VALUE_NOT_SET) {
    // No type at all: outputs may leave it to inference; inputs may not.
    if (!typed) return Status::invalid_argument(what + " has no type");
    *typed = false;
    info.has_shape = false;
    return info;
  }
  if (!v.type().has_tensor_type())
    return Status::invalid_argument(what + " is not a tensor (sequences, maps and optionals are not supported)");
  const auto& tt = v.type().tensor_type();
  if (!tt.has_elem_type() || tt.elem_type() == TP::UNDEFINED) {
    if (!typed) return Status::invalid_argument(what + " has no element type");
    *typed = false;
  } else {
    const auto dt = kept_dtype(tt.elem_type());
    if (!dt)
      return Status::invalid_argument(what + " has element type " + type_string(tt.elem_type()) +
                                      ", which cairn does not take (float32, float64, int64, int32, int8, "
                                      "uint8, bool)");
    info.dtype = *dt;
    if (typed) *typed = true;
  }
  if (!tt.has_shape()) {
    info.has_shape = false;
    return info;
  }
  if (size_t(tt.shape().dim_size()) > kMaxRank)
    return Status::invalid_argument(what + " has rank " + std::to_string(tt.shape().dim_size()) +
                                    ", over the limit of " + std::to_string(kMaxRank));
  for (const auto& d : tt.shape().dim()) {
    if (d.has_dim_value()) {
      if (d.dim_value() < 0)
        return Status::invalid_argument(what + " has a negative dimension " + std::to_string(d.dim_value()));
      info.dims.push_back(d.dim_value());
      info.dim_names.emplace_back();
    } else {
      info.dims.push_back(-1);
      info.dim_names.push_back(d.has_dim_param() ? d.dim_param() : "");
    }
  }
  return info;
}

Result<Attribute> parse_attribute(const ::onnx::AttributeProto& a, const std::string& base_dir) {
  using AP = ::onnx::AttributeProto;
  Attribute out;
  if (!a.ref_attr_name().empty())
    return Status::invalid_argument("refers to a function attribute, which is not supported");
  switch (a.type()) {
    case AP::FLOAT: out.kind = Attribute::Kind::Float; out.f = a.f(); break;
    case AP::INT: out.kind = Attribute::Kind::Int; out.i = a.i(); break;
    case AP::STRING: out.kind = Attribute::Kind::String; out.s = a.s(); break;
    case AP::TENSOR: {
      out.kind = Attribute::Kind::Tensor;
      CAIRN_ASSIGN_OR_RETURN(auto t, parse_tensor(a.t(), base_dir, "tensor"));
      out.tensor = std::make_shared<const values::Tensor>(std::move(t));
      break;
    }
    case AP::FLOATS:
      out.kind = Attribute::Kind::Floats;
      out.floats.assign(a.floats().begin(), a.floats().end());
      break;
    case AP::INTS:
      out.kind = Attribute::Kind::Ints;
      out.ints.assign(a.ints().begin(), a.ints().end());
      break;
    case AP::STRINGS:
      out.kind = Attribute::Kind::Strings;
      out.strings.assign(a.strings().begin(), a.strings().end());
      break;
    case AP::GRAPH:
    case AP::GRAPHS:
      return Status::invalid_argument("is a subgraph, which cairn does not run (If, Loop and Scan are not supported)");
    case AP::SPARSE_TENSOR:
    case AP::SPARSE_TENSORS:
      return Status::invalid_argument("is a sparse tensor, which is not supported");
    case AP::TYPE_PROTO:
    case AP::TYPE_PROTOS:
      return Status::invalid_argument("is a type, which is not supported");
    case AP::TENSORS:
      return Status::invalid_argument("is a list of tensors, which is not supported");
    default:
      return Status::invalid_argument("has no valid type (" + std::to_string(int(a.type())) + ")");
  }
  return out;
}

bool is_default_domain(const std::string& d) { return d.empty() || d == "ai.onnx"; }

}  // namespace

Result<Graph> parse_model(std::string_view bytes, const std::string& base_dir) {
  if (bytes.size() > kMaxModelBytes)
    return Status::invalid_argument("model is " + std::to_string(bytes.size()) +
                                    " bytes, over protobuf's 2 GiB limit (store the weights as external data)");
  ::onnx::ModelProto model;
  {
    google::protobuf::io::CodedInputStream in(reinterpret_cast<const uint8_t*>(bytes.data()), int(bytes.size()));
    in.SetTotalBytesLimit(int(bytes.size()));
    if (!model.ParseFromCodedStream(&in) || !in.ConsumedEntireMessage())
      return Status::invalid_argument("not a valid ONNX model (protobuf parse failed)");
  }
  Graph g;
  if (!model.has_ir_version()) return Status::invalid_argument("not a valid ONNX model (no ir_version)");
  g.ir_version = model.ir_version();
  bool have_opset = false;
  for (const auto& op : model.opset_import()) {
    if (is_default_domain(op.domain())) {
      g.opset = std::max(g.opset, op.version());
      have_opset = true;
    }
  }
  if (!have_opset) return Status::invalid_argument("model imports no opset for the default ONNX domain");
  if (g.opset < 13)
    return Status::invalid_argument("model uses opset " + std::to_string(g.opset) +
                                    "; cairn runs opset 13 and later (convert it with "
                                    "onnx.version_converter.convert_version(model, 13))");
  if (!model.has_graph()) return Status::invalid_argument("model has no graph");
  const auto& graph = model.graph();
  if (graph.sparse_initializer_size() > 0)
    return Status::invalid_argument("sparse initializer '" + graph.sparse_initializer(0).values().name() +
                                    "' is not supported");

  // Every tensor name defined so far: graph inputs, initializers, node outputs.
  std::unordered_set<std::string> defined;
  for (const auto& t : graph.initializer()) {
    const std::string what = "initializer '" + t.name() + "'";
    if (t.name().empty()) return Status::invalid_argument("an initializer has no name");
    if (!defined.insert(t.name()).second) return Status::invalid_argument(what + " is defined twice");
    CAIRN_ASSIGN_OR_RETURN(auto tensor, parse_tensor(t, base_dir, what));
    g.initializers.push_back({t.name(), std::move(tensor)});
  }
  const std::unordered_set<std::string> initializer_names = defined;
  for (const auto& v : graph.input()) {
    // Old exporters list initializers among the inputs too; they stay constants.
    if (initializer_names.count(v.name())) continue;
    if (defined.count(v.name()))
      return Status::invalid_argument("graph input '" + v.name() + "' is listed twice");
    CAIRN_ASSIGN_OR_RETURN(auto info, parse_value_info(v, "input", nullptr));
    defined.insert(info.name);
    g.inputs.push_back(std::move(info));
  }

  for (int i = 0; i < graph.node_size(); ++i) {
    const auto& n = graph.node(i);
    Node node;
    node.op_type = n.op_type();
    node.name = n.name().empty() ? n.op_type() + "_" + std::to_string(i) : n.name();
    node.domain = is_default_domain(n.domain()) ? std::string() : n.domain();
    node.opset = node.domain.empty() ? g.opset : 1;
    if (node.op_type.empty()) return Status::invalid_argument("node " + std::to_string(i) + " has no op_type");
    if (!is_default_domain(n.domain()) && n.domain() != kCairnDomain)
      return Status::invalid_argument("node '" + node.name + "' (" + node.op_type + ") is in domain '" +
                                      n.domain() + "'; cairn runs the default ONNX domain and its own '" +
                                      std::string(kCairnDomain) + "' (collectives)");
    for (const auto& in : n.input()) {
      if (!in.empty() && !defined.count(in))
        return Status::invalid_argument(node.describe() + ": input '" + in +
                                        "' is not a graph input, an initializer or an earlier node's output");
      node.inputs.push_back(in);
    }
    for (const auto& a : n.attribute()) {
      auto attr = parse_attribute(a, base_dir);
      if (!attr) return attr.status().with_context(node.describe() + ": attribute '" + a.name() + "'");
      if (!node.attributes.emplace(a.name(), std::move(*attr)).second)
        return Status::invalid_argument(node.describe() + ": attribute '" + a.name() + "' is given twice");
    }
    // Every ONNX operator has an output; operators may rely on out[0].
    if (n.output_size() == 0) return Status::invalid_argument(node.describe() + ": the node has no outputs");
    for (const auto& out : n.output()) {
      if (!out.empty() && !defined.insert(out).second)
        return Status::invalid_argument(node.describe() + ": output '" + out +
                                        "' is already defined (a tensor has one producer)");
      node.outputs.push_back(out);
    }
    g.nodes.push_back(std::move(node));
  }

  std::set<std::string> output_names;
  for (const auto& v : graph.output()) {
    bool typed = false;
    CAIRN_ASSIGN_OR_RETURN(auto info, parse_value_info(v, "output", &typed));
    if (!defined.count(info.name))
      return Status::invalid_argument("graph output '" + info.name + "' is not produced by any node");
    if (!output_names.insert(info.name).second)
      return Status::invalid_argument("graph output '" + info.name + "' is listed twice");
    g.outputs.push_back(std::move(info));
    g.output_typed.push_back(typed);
  }
  if (g.outputs.empty()) return Status::invalid_argument("model has no graph outputs");
  return g;
}

}  // namespace cairn::onnx
