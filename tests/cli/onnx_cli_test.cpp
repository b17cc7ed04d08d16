// tests/cli/onnx_cli_test.cpp — `cairn run-onnx` and `cairn bench-onnx` on a model written here.
// The model is the seeds' `add` network (y = x1 + x2, float32 [batch, 2]),
// built with the ONNX protobuf classes so the test needs no Python: run-onnx
// prints and writes the right .npy, names a bad or missing input in one error
// line, and bench-onnx prints one row per batch size (peer off).
#include <gtest/gtest.h>
#include <onnx/onnx_pb.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "cli/cli_process.h"
#include "core/npy.h"
#include "test_util.h"

namespace cairn {
namespace {

namespace fs = std::filesystem;
using test::run_cairn;

void add_input(::onnx::GraphProto* g, const std::string& name, bool output) {
  auto* v = output ? g->add_output() : g->add_input();
  v->set_name(name);
  auto* tt = v->mutable_type()->mutable_tensor_type();
  tt->set_elem_type(::onnx::TensorProto::FLOAT);
  tt->mutable_shape()->add_dim()->set_dim_param("batch");
  tt->mutable_shape()->add_dim()->set_dim_value(2);
}

class OnnxCli : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(fs::exists(test::cairn_binary())) << test::cairn_binary() << " is not built";
    dir_ = test::temp_dir("onnx_cli");
    ::onnx::ModelProto m;
    m.set_ir_version(8);
    m.set_producer_name("cairn-tests");
    auto* op = m.add_opset_import();
    op->set_domain("");
    op->set_version(13);
    auto* g = m.mutable_graph();
    g->set_name("add");
    auto* n = g->add_node();
    n->set_op_type("Add");
    n->set_name("add");
    n->add_input("x1");
    n->add_input("x2");
    n->add_output("y");
    add_input(g, "x1", false);
    add_input(g, "x2", false);
    add_input(g, "y", true);
    model_ = (dir_ / "add.onnx").string();
    std::ofstream f(model_, std::ios::binary);
    ASSERT_TRUE(m.SerializeToOstream(&f));
  }
  std::string npy(const std::string& name, const values::Tensor& t) {
    const std::string path = (dir_ / name).string();
    EXPECT_TRUE(values::write_npy_file(path, t).is_ok());
    return path;
  }

  fs::path dir_;
  std::string model_;
};

TEST_F(OnnxCli, RunOnnxPrintsAndWritesOutputs) {
  const auto a = npy("a.npy", values::make_tensor(std::vector<float>{1, 2, 3, 4}, {2, 2}));
  const auto b = npy("b.npy", values::make_tensor(std::vector<float>{10, 20, 30, 40.5f}, {2, 2}));
  const fs::path out = dir_ / "out";
  auto r = run_cairn({"run-onnx", "-m", model_, "--input", "x1=@" + a, "--input", "x2=@" + b, "--output-dir",
                      out.string(), "--threads", "1"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "y: float32 [2, 2] [11, 22, 33, 44.5]\n");
  auto y = values::read_npy_file((out / "y.npy").string());
  ASSERT_TRUE(y.is_ok()) << y.status().message();
  EXPECT_EQ(*y, values::make_tensor(std::vector<float>{11, 22, 33, 44.5f}, {2, 2}));
}

TEST_F(OnnxCli, RunOnnxRefusesBadInputs) {
  const auto a = npy("a.npy", values::make_tensor(std::vector<float>{1, 2, 3, 4}, {2, 2}));
  // A name the model does not have: the error names it and the real inputs.
  auto r = run_cairn({"run-onnx", "-m", model_, "--input", "x1=@" + a, "--input", "nope=@" + a});
  test::expect_one_error_line(r, "no input 'nope' (its inputs: x1, x2)");
  // An input left out.
  r = run_cairn({"run-onnx", "-m", model_, "--input", "x1=@" + a});
  test::expect_one_error_line(r, "input 'x2' is not given");
  // Not NAME=@file.
  r = run_cairn({"run-onnx", "-m", model_, "--input", "x1", "--input", "x2=@" + a});
  test::expect_one_error_line(r, "expected NAME=@file.npy");
  // A file that is not there.
  r = run_cairn({"run-onnx", "-m", model_, "--input", "x1=@" + a, "--input", "x2=@" + (dir_ / "missing.npy").string()});
  test::expect_one_error_line(r, "--input 'x2'");
  // A model that is not there.
  r = run_cairn({"run-onnx", "-m", (dir_ / "missing.onnx").string(), "--input", "x1=@" + a});
  test::expect_one_error_line(r, "missing.onnx");
}

TEST_F(OnnxCli, BenchOnnxPrintsOneRowPerBatch) {
  auto r = run_cairn({"bench-onnx", "-m", model_, "--batch", "1,3", "--seconds", "0.05", "--threads", "1", "--no-peer"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("cairn inst/s"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\n     1 "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\n     3 "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("ONNX Runtime columns left out: --no-peer"), std::string::npos) << r.out;

  r = run_cairn({"bench-onnx", "-m", model_, "--batch", "1,0", "--no-peer"});
  test::expect_one_error_line(r, "--batch: '0'");
}

}  // namespace
}  // namespace cairn
