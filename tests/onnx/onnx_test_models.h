// tests/onnx/onnx_test_models.h — builds small ONNX ModelProtos in C++ for
// the loader and planner tests, and a handful of fake operators (injected
// through SessionOptions::op_lookup) so the graph machinery is tested apart
// from the real kernels.
#pragma once

#include <onnx/onnx_pb.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "onnx/session.h"

namespace cairn::onnx::test {

// dims: -1 is a dynamic dimension named "N".
struct ModelBuilder {
  ::onnx::ModelProto m;

  explicit ModelBuilder(int64_t opset = 13) {
    m.set_ir_version(8);
    auto* o = m.add_opset_import();
    o->set_domain("");
    o->set_version(opset);
    m.mutable_graph()->set_name("test");
  }
  ::onnx::GraphProto& g() { return *m.mutable_graph(); }

  static void fill(::onnx::ValueInfoProto* v, const std::string& name, int elem, const std::vector<int64_t>& dims) {
    v->set_name(name);
    auto* tt = v->mutable_type()->mutable_tensor_type();
    tt->set_elem_type(elem);
    auto* shape = tt->mutable_shape();
    for (int64_t d : dims) {
      auto* dim = shape->add_dim();
      if (d >= 0)
        dim->set_dim_value(d);
      else
        dim->set_dim_param("N");
    }
  }
  ModelBuilder& input(const std::string& name, std::vector<int64_t> dims, int elem = ::onnx::TensorProto::FLOAT) {
    fill(g().add_input(), name, elem, dims);
    return *this;
  }
  ModelBuilder& output(const std::string& name, std::vector<int64_t> dims, int elem = ::onnx::TensorProto::FLOAT) {
    fill(g().add_output(), name, elem, dims);
    return *this;
  }
  ::onnx::TensorProto& init(const std::string& name, std::vector<int64_t> dims, const std::vector<float>& data) {
    auto* t = g().add_initializer();
    t->set_name(name);
    t->set_data_type(::onnx::TensorProto::FLOAT);
    for (int64_t d : dims) t->add_dims(d);
    for (float f : data) t->add_float_data(f);
    return *t;
  }
  ::onnx::NodeProto& node(const std::string& op, std::vector<std::string> ins, std::vector<std::string> outs,
                          const std::string& name = "") {
    auto* n = g().add_node();
    n->set_op_type(op);
    n->set_name(name);
    for (auto& s : ins) n->add_input(s);
    for (auto& s : outs) n->add_output(s);
    return *n;
  }
  std::string bytes() const { return m.SerializeAsString(); }
};

// How often each fake op ran (reset by the tests that read them).
struct OpCounters {
  std::atomic<int> transpose_runs{0}, shape_runs{0}, neg_runs{0};
  std::atomic<bool> matmul_saw_constant_b{false};
  void reset() {
    transpose_runs = 0;
    shape_runs = 0;
    neg_runs = 0;
    matmul_saw_constant_b = false;
  }
};
OpCounters& counters();

// Add (same shapes, or b with one element), Neg, Identity (a view),
// Reshape (a view; needs its shape input known at plan time), Shape,
// Transpose (2-D), MatMul (2-D), Constant (value attribute), Fail (run()
// returns an error), BadInfer (infer() always refuses).
OpFactory fake_ops(std::string_view op_type);

// Options with the fake ops and a one-thread pool shared by the tests.
SessionOptions fake_options();

values::Tensor floats(const std::vector<float>& v, std::vector<int64_t> shape);
std::vector<float> to_floats(const values::Tensor& t);
// n floats uniform in [lo, hi), the same for the same seed.
std::vector<float> random_floats(size_t n, float lo, float hi, unsigned seed);

}  // namespace cairn::onnx::test
