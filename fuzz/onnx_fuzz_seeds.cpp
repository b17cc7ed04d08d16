// Writes seed models for onnx_model_fuzz into the directory given as argv[1]:
// small valid ONNX models built with the protobuf classes (the seeds' add and
// MatMul+Neg networks, an MLP, a CNN, a shape-arithmetic chain, constants of
// several encodings, opset-18 forms), so no binary seeds live in the
// repository.
#include <onnx/onnx_pb.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

using TP = ::onnx::TensorProto;
using AP = ::onnx::AttributeProto;

struct Model {
  ::onnx::ModelProto m;
  explicit Model(int64_t opset) {
    m.set_ir_version(8);
    auto* o = m.add_opset_import();
    o->set_domain("");
    o->set_version(opset);
    m.mutable_graph()->set_name("seed");
  }
  ::onnx::GraphProto& g() { return *m.mutable_graph(); }
  static void value(::onnx::ValueInfoProto* v, const std::string& name, int elem, std::vector<int64_t> dims) {
    v->set_name(name);
    auto* tt = v->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(elem);
    for (int64_t d : dims) {
      auto* dim = tt->mutable_shape()->add_dim();
      if (d >= 0)
        dim->set_dim_value(d);
      else
        dim->set_dim_param("batch");
    }
  }
  Model& in(const std::string& n, std::vector<int64_t> d, int elem = TP::FLOAT) {
    value(g().add_input(), n, elem, d);
    return *this;
  }
  Model& out(const std::string& n, std::vector<int64_t> d, int elem = TP::FLOAT) {
    value(g().add_output(), n, elem, d);
    return *this;
  }
  // Float weights as raw_data, filled with `v`.
  Model& weight(const std::string& n, std::vector<int64_t> dims, float v) {
    auto* t = g().add_initializer();
    t->set_name(n);
    t->set_data_type(TP::FLOAT);
    size_t count = 1;
    for (int64_t d : dims) {
      t->add_dims(d);
      count *= size_t(d);
    }
    std::vector<float> data(count, v);
    t->set_raw_data(std::string(reinterpret_cast<const char*>(data.data()), count * 4));
    return *this;
  }
  Model& ints(const std::string& n, std::vector<int64_t> values) {
    auto* t = g().add_initializer();
    t->set_name(n);
    t->set_data_type(TP::INT64);
    t->add_dims(int64_t(values.size()));
    for (int64_t v : values) t->add_int64_data(v);
    return *this;
  }
  ::onnx::NodeProto& node(const std::string& op, std::vector<std::string> ins, std::vector<std::string> outs) {
    auto* n = g().add_node();
    n->set_op_type(op);
    n->set_name(op + "_" + std::to_string(g().node_size()));
    for (auto& s : ins) n->add_input(s);
    for (auto& s : outs) n->add_output(s);
    return *n;
  }
};

void attr_int(::onnx::NodeProto& n, const char* name, int64_t v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(AP::INT);
  a->set_i(v);
}
void attr_float(::onnx::NodeProto& n, const char* name, float v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(AP::FLOAT);
  a->set_f(v);
}
void attr_ints(::onnx::NodeProto& n, const char* name, std::vector<int64_t> v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(AP::INTS);
  for (int64_t x : v) a->add_ints(x);
}

bool save(const std::string& dir, const std::string& name, const Model& model) {
  const std::string bytes = model.m.SerializeAsString();
  const std::string path = dir + "/" + name;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return false;
  const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
  return std::fclose(f) == 0 && ok;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: onnx_fuzz_seeds <dir>\n");
    return 2;
  }
  const std::string dir = argv[1];
  bool ok = true;

  {  // the seeds' add network
    Model m(13);
    m.in("x1", {2, 2}).in("x2", {2, 2}).out("y", {2, 2});
    m.node("Add", {"x1", "x2"}, {"y"});
    ok = ok && save(dir, "add.onnx", m);
  }
  {  // MatMul + Neg with 0.5 weights (the seeds' matmul, shrunk)
    Model m(13);
    m.in("x", {-1, 8}).out("y", {-1, 4}).weight("w", {8, 4}, 0.5f);
    m.node("MatMul", {"x", "w"}, {"t"});
    m.node("Neg", {"t"}, {"y"});
    ok = ok && save(dir, "matmul_neg.onnx", m);
  }
  {  // MLP: Gemm, bias Add, Relu, MatMul, Softmax
    Model m(13);
    m.in("x", {-1, 6}).out("p", {-1, 3}).weight("w1", {4, 6}, 0.1f).weight("b1", {4}, 0.01f);
    m.weight("w2", {4, 3}, -0.2f).weight("b2", {3}, 0.0f);
    auto& gemm = m.node("Gemm", {"x", "w1", "b1"}, {"h"});
    attr_int(gemm, "transB", 1);
    attr_float(gemm, "alpha", 1.0f);
    m.node("Relu", {"h"}, {"r"});
    m.node("MatMul", {"r", "w2"}, {"o"});
    m.node("Add", {"o", "b2"}, {"l"});
    attr_int(m.node("Softmax", {"l"}, {"p"}), "axis", -1);
    ok = ok && save(dir, "mlp.onnx", m);
  }
  {  // CNN: Conv, BatchNormalization, MaxPool, GlobalAveragePool, Flatten
    Model m(13);
    m.in("img", {-1, 1, 8, 8}).out("f", {-1, 2});
    m.weight("k", {2, 1, 3, 3}, 0.1f).weight("kb", {2}, 0.0f);
    m.weight("s", {2}, 1.0f).weight("bb", {2}, 0.0f).weight("mean", {2}, 0.0f).weight("var", {2}, 1.0f);
    auto& conv = m.node("Conv", {"img", "k", "kb"}, {"c"});
    attr_ints(conv, "kernel_shape", {3, 3});
    attr_ints(conv, "pads", {1, 1, 1, 1});
    attr_ints(conv, "strides", {1, 1});
    m.node("BatchNormalization", {"c", "s", "bb", "mean", "var"}, {"n"});
    auto& pool = m.node("MaxPool", {"n"}, {"mp"});
    attr_ints(pool, "kernel_shape", {2, 2});
    attr_ints(pool, "strides", {2, 2});
    m.node("GlobalAveragePool", {"mp"}, {"g"});
    attr_int(m.node("Flatten", {"g"}, {"f"}), "axis", 1);
    ok = ok && save(dir, "cnn.onnx", m);
  }
  {  // Shape arithmetic: Shape -> Gather -> Unsqueeze -> Concat -> Reshape
    Model m(13);
    m.in("x", {-1, 4, 2}).out("y", {-1, 8}).ints("zero", {0}).ints("eight", {8}).ints("ax", {0});
    m.node("Shape", {"x"}, {"s"});
    attr_int(m.node("Gather", {"s", "zero"}, {"b"}), "axis", 0);
    attr_int(m.node("Concat", {"b", "eight"}, {"shape"}), "axis", 0);
    m.node("Reshape", {"x", "shape"}, {"r"});
    auto& tr = m.node("Transpose", {"r"}, {"t"});
    attr_ints(tr, "perm", {1, 0});
    m.node("Transpose", {"t"}, {"y"});
    ok = ok && save(dir, "shape_chain.onnx", m);
  }
  {  // Constants: a float16 Constant attribute, ConstantOfShape, Cast, Equal, Where
    Model m(13);
    m.in("x", {3}).out("y", {3}).ints("n", {3});
    auto& c = m.node("Constant", {}, {"c"});
    auto* a = c.add_attribute();
    a->set_name("value");
    a->set_type(AP::TENSOR);
    a->mutable_t()->set_data_type(TP::FLOAT16);
    a->mutable_t()->add_dims(3);
    for (int h : {0x3c00, 0xc000, 0x3800}) a->mutable_t()->add_int32_data(h);
    m.node("ConstantOfShape", {"n"}, {"z"});
    attr_int(m.node("Cast", {"x"}, {"xi"}), "to", TP::INT64);
    attr_int(m.node("Cast", {"xi"}, {"xf"}), "to", TP::FLOAT);
    m.node("Equal", {"xf", "z"}, {"eq"});
    attr_int(m.node("Cast", {"c"}, {"cf"}), "to", TP::FLOAT);
    m.node("Where", {"eq", "cf", "x"}, {"y"});
    ok = ok && save(dir, "constants.onnx", m);
  }
  {  // Opset 18 forms: ReduceMean axes input, Split num_outputs, LayerNormalization
    Model m(18);
    m.in("x", {-1, 4}).out("a", {-1, 2}).out("b", {-1, 2}).out("m", {-1, 1});
    m.weight("g", {4}, 1.0f).weight("beta", {4}, 0.0f).ints("axes", {1});
    attr_float(m.node("LayerNormalization", {"x", "g", "beta"}, {"ln"}), "epsilon", 1e-5f);
    auto& sp = m.node("Split", {"ln"}, {"a", "b"});
    attr_int(sp, "axis", 1);
    attr_int(sp, "num_outputs", 2);
    attr_int(m.node("ReduceMean", {"x", "axes"}, {"m"}), "keepdims", 1);
    ok = ok && save(dir, "opset18.onnx", m);
  }
  {  // Refused: external data (the fuzzer gives no folder), opset 12
    Model m(13);
    m.in("x", {2}).out("y", {2});
    auto* t = m.g().add_initializer();
    t->set_name("w");
    t->set_data_type(TP::FLOAT);
    t->add_dims(2);
    t->set_data_location(TP::EXTERNAL);
    auto* kv = t->add_external_data();
    kv->set_key("location");
    kv->set_value("w.bin");
    m.node("Add", {"x", "w"}, {"y"});
    ok = ok && save(dir, "external.onnx", m);
    Model old(12);
    old.in("x", {2}).out("y", {2});
    old.node("Relu", {"x"}, {"y"});
    ok = ok && save(dir, "opset12.onnx", old);
  }
  if (!ok) {
    std::fprintf(stderr, "onnx_fuzz_seeds: cannot write into %s\n", dir.c_str());
    return 1;
  }
  return 0;
}
