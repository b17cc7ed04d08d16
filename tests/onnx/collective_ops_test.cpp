// tests/onnx/collective_ops_test.cpp — cairn.AllGather, cairn.AllReduce and
// cairn.Broadcast inside real sessions: each rank a thread of this process
// with its own session and shard of the weights, the ranks one
// collective::Group over loopback. The sharded models must give the
// unsharded product; a model with collectives refuses to load without a
// group, and bad attributes are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <thread>

#include "onnx/session.h"
#include "onnx_test_models.h"

namespace cairn::onnx {
namespace {

using test::floats;
using test::ModelBuilder;
using test::to_floats;

std::vector<float> random_floats(size_t n, unsigned seed) { return test::random_floats(n, -1, 1, seed); }

ModelBuilder with_cairn_domain() {
  ModelBuilder b;
  auto* o = b.m.add_opset_import();
  o->set_domain("cairn");
  o->set_version(1);
  return b;
}

::onnx::NodeProto& cairn_node(ModelBuilder& b, const std::string& op, const std::string& in, const std::string& out) {
  auto& n = b.node(op, {in}, {out}, op);
  n.set_domain("cairn");
  return n;
}

void set_int(::onnx::NodeProto& n, const std::string& name, int64_t v) {
  auto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(::onnx::AttributeProto::INT);
  a->set_i(v);
}

// Runs model(rank) with input x on `ranks` threads joined in one group;
// returns each rank's first output.
std::vector<std::vector<float>> run_ranks(int ranks, const std::function<ModelBuilder(int)>& model,
                                          const values::Tensor& x) {
  collective::MemoryStore store;
  static int next = 0;
  const std::string prefix = "ops" + std::to_string(next++) + "/";
  std::vector<std::vector<float>> out(static_cast<size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      auto g = collective::Group::connect(store, prefix, r, ranks);
      ASSERT_TRUE(g.is_ok()) << g.status().message();
      SessionOptions o;
      o.threads = 1;
      o.group = std::make_shared<collective::GroupSlot>();
      o.group->set(std::move(*g));
      auto s = Session::load_bytes(model(r).bytes(), "", o);
      ASSERT_TRUE(s.is_ok()) << s.status().message();
      const values::Tensor* in[] = {&x};
      auto y = (*s)->run(in);
      ASSERT_TRUE(y.is_ok()) << y.status().message();
      out[size_t(r)] = to_floats((*y)[0]);
    });
  for (auto& t : threads) t.join();
  return out;
}

std::vector<float> matmul(const std::vector<float>& x, const std::vector<float>& w, int m, int k, int n) {
  std::vector<float> y(size_t(m) * n);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double s = 0;
      for (int q = 0; q < k; ++q) s += double(x[size_t(i) * k + q]) * w[size_t(q) * n + j];
      y[size_t(i) * n + j] = float(s);
    }
  return y;
}

// Column-parallel: rank r holds W[:, r·n/R .. (r+1)·n/R) and the outputs are
// gathered along axis 1 (the seed's MatMul example, Neg after).
TEST(OnnxCollectives, ColumnShardsGatheredGiveTheWholeProduct) {
  const int m = 16, k = 24, n = 12, ranks = 4, cols = n / ranks;
  const auto x = random_floats(size_t(m) * k, 1), w = random_floats(size_t(k) * n, 2);
  auto model = [&](int r) {
    ModelBuilder b = with_cairn_domain();
    b.input("x", {m, k}).output("y", {m, n});
    std::vector<float> shard(size_t(k) * cols);
    for (int q = 0; q < k; ++q)
      for (int j = 0; j < cols; ++j) shard[size_t(q) * cols + j] = w[size_t(q) * n + r * cols + j];
    b.init("w", {k, cols}, shard);
    b.node("MatMul", {"x", "w"}, {"part"}, "mm");
    set_int(cairn_node(b, "AllGather", "part", "whole"), "axis", 1);
    b.node("Neg", {"whole"}, {"y"}, "neg");
    return b;
  };
  const auto got = run_ranks(ranks, model, floats(x, {m, k}));
  auto want = matmul(x, w, m, k, n);
  for (float& v : want) v = -v;
  for (int r = 0; r < ranks; ++r) {
    ASSERT_EQ(got[size_t(r)].size(), want.size()) << "rank " << r;
    for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[size_t(r)][i], want[i], 1e-5) << "rank " << r << " at " << i;
  }
}

// Row-parallel: rank r holds rows r·k/R .. of W and its slice of x's
// columns; the partial products are summed.
TEST(OnnxCollectives, RowShardsReducedGiveTheWholeProduct) {
  const int m = 5, k = 12, n = 7, ranks = 3, rows = k / ranks;
  const auto x = random_floats(size_t(m) * k, 3), w = random_floats(size_t(k) * n, 4);
  auto model = [&](int r) {
    ModelBuilder b = with_cairn_domain();
    b.input("x", {m, k}).output("y", {m, n});
    std::vector<float> shard(size_t(rows) * n);
    for (int q = 0; q < rows; ++q)
      for (int j = 0; j < n; ++j) shard[size_t(q) * n + j] = w[size_t(r * rows + q) * n + j];
    b.init("w", {rows, n}, shard);
    // x[:, r·rows : (r+1)·rows] by Slice on axis 1.
    auto& st = *b.g().add_initializer();
    st.set_name("starts");
    st.set_data_type(::onnx::TensorProto::INT64);
    st.add_dims(1);
    st.add_int64_data(r * rows);
    auto& en = *b.g().add_initializer();
    en.set_name("ends");
    en.set_data_type(::onnx::TensorProto::INT64);
    en.add_dims(1);
    en.add_int64_data((r + 1) * rows);
    auto& ax = *b.g().add_initializer();
    ax.set_name("axes");
    ax.set_data_type(::onnx::TensorProto::INT64);
    ax.add_dims(1);
    ax.add_int64_data(1);
    b.node("Slice", {"x", "starts", "ends", "axes"}, {"xs"}, "slice");
    b.node("MatMul", {"xs", "w"}, {"part"}, "mm");
    cairn_node(b, "AllReduce", "part", "y");
    return b;
  };
  const auto got = run_ranks(ranks, model, floats(x, {m, k}));
  const auto want = matmul(x, w, m, k, n);
  for (int r = 0; r < ranks; ++r)
    for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(got[size_t(r)][i], want[i], 1e-5) << "rank " << r;
}

TEST(OnnxCollectives, BroadcastGivesTheRootsTensor) {
  auto model = [](int r) {
    ModelBuilder b = with_cairn_domain();
    b.input("x", {3}).output("y", {3});
    b.init("mine", {3}, {float(r), float(r) + 0.5f, float(r) * 2});
    b.node("Add", {"x", "mine"}, {"s"}, "add");
    set_int(cairn_node(b, "Broadcast", "s", "y"), "root", 1);
    return b;
  };
  const auto got = run_ranks(3, model, floats({1, 1, 1}, {3}));
  for (const auto& v : got) EXPECT_EQ(v, (std::vector<float>{2, 2.5f, 3}));
}

TEST(OnnxCollectives, RefusedWithoutAGroupOrWithBadAttributes) {
  ModelBuilder b = with_cairn_domain();
  b.input("x", {2, 3}).output("y", {2, 6});
  cairn_node(b, "AllGather", "x", "y");
  auto s = Session::load_bytes(b.bytes(), "", SessionOptions{});
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.status().message().find("agent"), std::string::npos) << s.status().message();

  SessionOptions with_group;
  with_group.group = std::make_shared<collective::GroupSlot>();
  ModelBuilder bad_attr = with_cairn_domain();
  bad_attr.input("x", {2}).output("y", {2});
  set_int(cairn_node(bad_attr, "AllReduce", "x", "y"), "root", 0);
  s = Session::load_bytes(bad_attr.bytes(), "", with_group);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.status().message().find("no attribute 'root'"), std::string::npos) << s.status().message();

  ModelBuilder unknown = with_cairn_domain();
  unknown.input("x", {2}).output("y", {2});
  cairn_node(unknown, "AllToAll", "x", "y");
  s = Session::load_bytes(unknown.bytes(), "", with_group);
  ASSERT_FALSE(s.is_ok());
  EXPECT_NE(s.status().message().find("AllToAll"), std::string::npos) << s.status().message();

  // A slot with no group in it: loads, then the forward says so.
  s = Session::load_bytes(b.bytes(), "", with_group);
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  const auto x = floats({1, 2, 3, 4, 5, 6}, {2, 3});
  const values::Tensor* in[] = {&x};
  auto y = (*s)->run(in);
  ASSERT_FALSE(y.is_ok());
  EXPECT_NE(y.status().message().find("not in a group"), std::string::npos) << y.status().message();
}

}  // namespace
}  // namespace cairn::onnx
