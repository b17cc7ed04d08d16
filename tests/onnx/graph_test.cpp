// tests/onnx/graph_test.cpp — the ONNX loader: what it reads (initializer
// encodings, half-precision widening, external data, dynamic dims) and every
// refusal (malformed bytes, old opsets, foreign domains, sizes, paths).
#include "onnx/graph.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/half.h"
#include "onnx_test_models.h"
#include "test_util.h"

namespace cairn::onnx {
namespace {

using test::floats;
using test::ModelBuilder;
using test::to_floats;
using TP = ::onnx::TensorProto;

// A model y = x + W with W [3] given by `fill`.
ModelBuilder add_model() {
  ModelBuilder b;
  b.input("x", {3}).output("y", {3});
  b.node("Add", {"x", "W"}, {"y"}, "add");
  return b;
}

TP& weight(ModelBuilder& b, int type, std::vector<int64_t> dims = {3}) {
  auto* t = b.g().add_initializer();
  t->set_name("W");
  t->set_data_type(type);
  for (int64_t d : dims) t->add_dims(d);
  return *t;
}

std::string load_error(const std::string& bytes, const std::string& dir = "") {
  auto s = Session::load_bytes(bytes, dir, test::fake_options());
  return s.is_ok() ? "(loaded)" : s.status().message();
}

std::vector<float> run_add(const std::string& bytes, const std::string& dir = "") {
  auto s = Session::load_bytes(bytes, dir, test::fake_options());
  EXPECT_TRUE(s.is_ok()) << s.status().message();
  if (!s) return {};
  auto x = floats({0, 0, 0}, {3});
  const values::Tensor* in[] = {&x};
  auto r = (*s)->run(in);
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  return r ? to_floats((*r)[0]) : std::vector<float>{};
}

#define EXPECT_HAS(haystack, needle) \
  EXPECT_NE(std::string(haystack).find(needle), std::string::npos) << (haystack)

TEST(OnnxGraph, ParsesInputsOutputsAndNodes) {
  ModelBuilder b;
  b.input("x", {-1, 4}).output("y", {-1, 4});
  auto* d = b.g().mutable_input(0)->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim();
  (void)d;  // a third dim with neither value nor name
  b.node("Neg", {"x"}, {"y"});
  auto& n = b.g().mutable_node()->at(0);
  auto* a = n.add_attribute();
  a->set_name("axes");
  a->set_type(::onnx::AttributeProto::INTS);
  a->add_ints(1);
  a->add_ints(-1);
  auto* s = n.add_attribute();
  s->set_name("mode");
  s->set_type(::onnx::AttributeProto::STRING);
  s->set_s("fast");
  auto g = parse_model(b.bytes(), "");
  ASSERT_TRUE(g.is_ok()) << g.status().message();
  EXPECT_EQ(g->opset, 13);
  ASSERT_EQ(g->inputs.size(), 1u);
  EXPECT_EQ(g->inputs[0].dims, (std::vector<int64_t>{-1, 4, -1}));
  EXPECT_EQ(g->inputs[0].dim_names, (std::vector<std::string>{"N", "", ""}));
  ASSERT_EQ(g->nodes.size(), 1u);
  EXPECT_EQ(g->nodes[0].name, "Neg_0");
  EXPECT_EQ(g->nodes[0].opset, 13);
  auto axes = g->nodes[0].get_ints("axes");
  ASSERT_TRUE(axes.is_ok());
  EXPECT_EQ(*axes, (std::vector<int64_t>{1, -1}));
  EXPECT_EQ(*g->nodes[0].get_string("mode", ""), "fast");
}

TEST(OnnxGraph, InitializerEncodings) {
  {
    auto b = add_model();
    auto& t = weight(b, TP::FLOAT);
    const float v[3] = {1.5f, -2, 3};
    t.set_raw_data(std::string(reinterpret_cast<const char*>(v), sizeof v));
    EXPECT_EQ(run_add(b.bytes()), (std::vector<float>{1.5f, -2, 3}));
  }
  {
    auto b = add_model();
    auto& t = weight(b, TP::FLOAT16);
    for (float f : {1.0f, -2.0f, 0.5f}) t.add_int32_data(f32_to_f16(f));
    EXPECT_EQ(run_add(b.bytes()), (std::vector<float>{1, -2, 0.5f}));
  }
  {
    auto b = add_model();
    auto& t = weight(b, TP::BFLOAT16);
    uint16_t raw[3];
    const float fs[3] = {1.0f, -3.0f, 0.25f};
    for (int i = 0; i < 3; ++i) raw[i] = f32_to_bf16(fs[i]);
    t.set_raw_data(std::string(reinterpret_cast<const char*>(raw), sizeof raw));
    EXPECT_EQ(run_add(b.bytes()), (std::vector<float>{1, -3, 0.25f}));
  }
  {
    ModelBuilder b;
    b.input("x", {3}).output("y", {3});
    auto* t = b.g().add_initializer();
    t->set_name("i");
    t->set_data_type(TP::INT64);
    t->add_dims(2);
    t->add_int64_data(7);
    t->add_int64_data(-9);
    auto* u = b.g().add_initializer();
    u->set_name("m");
    u->set_data_type(TP::BOOL);
    u->add_dims(2);
    u->set_raw_data(std::string("\x00\x05", 2));
    b.node("Neg", {"x"}, {"y"});
    auto g = parse_model(b.bytes(), "");
    ASSERT_TRUE(g.is_ok()) << g.status().message();
    ASSERT_EQ(g->initializers.size(), 2u);
    EXPECT_EQ(g->initializers[0].tensor.dtype, DType::Int64);
    EXPECT_EQ(g->initializers[0].tensor.as<int64_t>()[1], -9);
    EXPECT_EQ(g->initializers[1].tensor.dtype, DType::Bool);
    EXPECT_EQ(g->initializers[1].tensor.data, std::string("\x00\x01", 2));  // normalised to 0/1
  }
}

TEST(OnnxGraph, RefusesMalformedBytes) {
  auto b = add_model();
  weight(b, TP::FLOAT).set_raw_data(std::string(12, '\0'));
  const std::string bytes = b.bytes();
  EXPECT_EQ(load_error(bytes.substr(0, bytes.size() - 3)), "not a valid ONNX model (protobuf parse failed)");
  EXPECT_EQ(load_error("not a model at all \xff\xff\xff"), "not a valid ONNX model (protobuf parse failed)");
  ::onnx::ModelProto m;
  m.mutable_graph();
  EXPECT_HAS(load_error(m.SerializeAsString()), "no ir_version");
  EXPECT_EQ(load_error(""), "not a valid ONNX model (no ir_version)");
}

TEST(OnnxGraph, RefusesOldOpsetsAndForeignDomains) {
  ModelBuilder old(12);
  old.input("x", {1}).output("y", {1});
  old.node("Neg", {"x"}, {"y"});
  const auto e = load_error(old.bytes());
  EXPECT_HAS(e, "opset 12");
  EXPECT_HAS(e, "onnx.version_converter.convert_version(model, 13)");

  ModelBuilder none;
  none.m.clear_opset_import();
  none.input("x", {1}).output("y", {1});
  none.node("Neg", {"x"}, {"y"});
  EXPECT_HAS(load_error(none.bytes()), "no opset for the default ONNX domain");

  ModelBuilder ms;
  ms.input("x", {1}).output("y", {1});
  ms.node("FusedGemm", {"x"}, {"y"}, "fg").set_domain("com.microsoft");
  EXPECT_EQ(load_error(ms.bytes()),
            "node 'fg' (FusedGemm) is in domain 'com.microsoft'; cairn runs the default ONNX domain and its own 'cairn' (collectives)");

  ModelBuilder ai;  // "ai.onnx" is the default domain by another name
  ai.m.mutable_opset_import(0)->set_domain("ai.onnx");
  ai.input("x", {1}).output("y", {1});
  ai.node("Neg", {"x"}, {"y"}).set_domain("ai.onnx");
  EXPECT_EQ(load_error(ai.bytes()), "(loaded)");
}

TEST(OnnxGraph, RefusesInitializersThatDisagreeWithTheirShape) {
  {
    auto b = add_model();
    weight(b, TP::FLOAT).set_raw_data(std::string(8, '\0'));
    EXPECT_EQ(load_error(b.bytes()),
              "initializer 'W': raw_data has 8 bytes, its shape [3] of FLOAT needs 12");
  }
  {
    auto b = add_model();
    auto& t = weight(b, TP::FLOAT);
    t.add_float_data(1);
    t.add_float_data(2);
    EXPECT_EQ(load_error(b.bytes()), "initializer 'W': has 2 values, its shape [3] needs 3");
  }
  {
    auto b = add_model();
    weight(b, TP::FLOAT, {int64_t(1) << 40, int64_t(1) << 40});
    auto e = load_error(b.bytes());
    EXPECT_HAS(e, "initializer 'W'");
    EXPECT_HAS(e, "over the size limit");
  }
  {
    auto b = add_model();
    weight(b, TP::FLOAT, {3, -1});
    EXPECT_HAS(load_error(b.bytes()), "negative dimension");
  }
  {
    auto b = add_model();
    weight(b, TP::STRING).add_string_data("a");
    auto e = load_error(b.bytes());
    EXPECT_HAS(e, "initializer 'W': data type STRING is not supported");
  }
  {
    auto b = add_model();
    auto* sp = b.g().add_sparse_initializer();
    sp->mutable_values()->set_name("S");
    EXPECT_EQ(load_error(b.bytes()), "sparse initializer 'S' is not supported");
  }
}

TEST(OnnxGraph, RefusesBadGraphStructure) {
  {
    ModelBuilder b;
    b.input("x", {1}).output("y", {1});
    b.node("Neg", {"t"}, {"y"}, "first");
    b.node("Neg", {"x"}, {"t"}, "second");  // out of order
    EXPECT_EQ(load_error(b.bytes()),
              "node 'first' (Neg, opset 13): input 't' is not a graph input, an initializer or an earlier "
              "node's output");
  }
  {
    ModelBuilder b;
    b.input("x", {1}).output("y", {1});
    b.node("Neg", {"x"}, {"y"}, "a");
    b.node("Neg", {"x"}, {"y"}, "b");
    EXPECT_HAS(load_error(b.bytes()), "node 'b' (Neg, opset 13): output 'y' is already defined");
  }
  {
    ModelBuilder b;
    b.input("x", {1}).output("x", {1});
    b.node("Neg", {"x"}, {"x"}, "a");
    EXPECT_HAS(load_error(b.bytes()), "output 'x' is already defined");
  }
  {
    ModelBuilder b;
    b.input("x", {1}).output("y", {1});
    b.node("Neg", {"x"}, {}, "silent");
    b.node("Neg", {"x"}, {"y"});
    EXPECT_EQ(load_error(b.bytes()), "node 'silent' (Neg, opset 13): the node has no outputs");
  }
  {
    ModelBuilder b;
    b.input("x", {1}).output("y", {1}).output("z", {1});
    b.node("Neg", {"x"}, {"y"});
    EXPECT_EQ(load_error(b.bytes()), "graph output 'z' is not produced by any node");
  }
  {
    ModelBuilder b;
    b.input("x", {1}).output("y", {1});
    auto& n = b.node("Neg", {"x"}, {"y"}, "loop");
    auto* a = n.add_attribute();
    a->set_name("body");
    a->set_type(::onnx::AttributeProto::GRAPH);
    a->mutable_g();
    EXPECT_HAS(load_error(b.bytes()), "node 'loop' (Neg, opset 13): attribute 'body': is a subgraph");
  }
  {
    ModelBuilder b;
    b.input("x", {1}, TP::FLOAT16).output("y", {1});
    b.node("Neg", {"x"}, {"y"});
    EXPECT_HAS(load_error(b.bytes()), "input 'x' has element type FLOAT16");
  }
  {
    ModelBuilder b;
    b.input("x", std::vector<int64_t>(40, 1)).output("y", {1});
    b.node("Neg", {"x"}, {"y"});
    EXPECT_HAS(load_error(b.bytes()), "input 'x' has rank 40");
  }
}

struct ExternalData : ::testing::Test {
  std::filesystem::path dir = cairn::test::temp_dir("onnx_external");

  void SetUp() override {
    const float v[4] = {9, 1, 2, 3};  // W is the last three
    std::ofstream(dir / "w.bin", std::ios::binary).write(reinterpret_cast<const char*>(v), sizeof v);
  }
  static std::string model(const std::string& location, const std::string& offset, const std::string& length = "") {
    auto b = add_model();
    auto& t = weight(b, TP::FLOAT);
    t.set_data_location(TP::EXTERNAL);
    auto kv = [&](const char* k, const std::string& v) {
      auto* e = t.add_external_data();
      e->set_key(k);
      e->set_value(v);
    };
    kv("location", location);
    if (!offset.empty()) kv("offset", offset);
    if (!length.empty()) kv("length", length);
    return b.bytes();
  }
};

TEST_F(ExternalData, ReadsTheRangeInsideTheModelFolder) {
  EXPECT_EQ(run_add(model("w.bin", "4", "12"), dir.string()), (std::vector<float>{1, 2, 3}));
  // Through Session::load: the folder is the model file's.
  std::ofstream(dir / "m.onnx", std::ios::binary) << model("w.bin", "4");
  auto s = Session::load((dir / "m.onnx").string(), test::fake_options());
  EXPECT_TRUE(s.is_ok()) << s.status().message();
}

TEST_F(ExternalData, RefusesPathsOutsideTheFolderAndRangesPastTheEnd) {
  const std::string d = dir.string();
  EXPECT_HAS(load_error(model("w.bin", "8"), d), "past the end of 'w.bin' (16 bytes)");
  EXPECT_HAS(load_error(model("w.bin", "18446744073709551615"), d), "past the end");
  EXPECT_HAS(load_error(model("w.bin", "4", "8"), d), "length 8 is not the 12 bytes");
  EXPECT_HAS(load_error(model("w.bin", "-4"), d), "offset '-4' is not a non-negative integer");
  EXPECT_HAS(load_error(model("../w.bin", "0"), d), "contains '..'");
  EXPECT_HAS(load_error(model("sub/../../w.bin", "0"), d), "contains '..'");
  EXPECT_HAS(load_error(model("/etc/passwd", "0"), d), "is absolute");
  EXPECT_HAS(load_error(model("missing.bin", "0"), d), "cannot be opened");
  EXPECT_HAS(load_error(model("w.bin", "4"), ""), "without a folder");
  EXPECT_HAS(load_error(model("", "4"), d), "no location");
  // A symbolic link in the folder that leads out of it.
  const auto outside = cairn::test::temp_dir("onnx_external_outside");
  std::ofstream(outside / "x.bin", std::ios::binary) << std::string(64, '\0');
  std::filesystem::create_symlink(outside / "x.bin", dir / "link.bin");
  EXPECT_HAS(load_error(model("link.bin", "0"), d), "resolves outside the model's folder");
  std::filesystem::create_directory(dir / "sub");
  EXPECT_HAS(load_error(model("sub", "0"), d), "cannot be read");
}

}  // namespace
}  // namespace cairn::onnx
