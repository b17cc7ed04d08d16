// tests/distributed/coordinator_test.cpp — the distributed worker's
// Coordinator and the agent loop in one process: the Agents service on a
// loopback gRPC server, agents as threads running run_agent() on shard
// files written here. Forwards through two ranks (column shards gathered)
// and through two stages; refusals (a rank outside rank_size, a taken rank,
// a first-stage model with other inputs); a forward before the agents are
// in; and shutdown ending every agent's session.
#include <gtest/gtest.h>
#include <grpcpp/grpcpp.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "distributed/agent.h"
#include "distributed/coordinator.h"
#include "onnx/onnx_test_models.h"

namespace cairn::distributed {
namespace {

namespace fs = std::filesystem;
using onnx::test::ModelBuilder;
using namespace std::chrono_literals;

// y = x · W[:, shard] gathered along axis 1 (W = column j holds j + 1).
ModelBuilder shard_model(int rank, int ranks) {
  const int k = 3, n = 4 * ranks, cols = 4;
  ModelBuilder b;
  auto* o = b.m.add_opset_import();
  o->set_domain("cairn");
  o->set_version(1);
  b.input("x", {2, k}).output("y", {2, n});
  std::vector<float> w(size_t(k) * cols);
  for (int q = 0; q < k; ++q)
    for (int j = 0; j < cols; ++j) w[size_t(q) * cols + j] = float(rank * cols + j + 1);
  b.init("w", {k, cols}, w);
  b.node("MatMul", {"x", "w"}, {"part"}, "mm");
  auto& g = b.node("AllGather", {"part"}, {"y"}, "gather");
  g.set_domain("cairn");
  auto* a = g.add_attribute();
  a->set_name("axis");
  a->set_type(::onnx::AttributeProto::INT);
  a->set_i(1);
  return b;
}

// A one-node stage: y = x + c.
ModelBuilder add_model(float c, std::vector<int64_t> dims = {2, 3}) {
  ModelBuilder b;
  b.input("x", dims).output("y", dims);
  b.init("c", {}, {c});
  b.node("Add", {"x", "c"}, {"y"}, "add");
  return b;
}

struct Fixture {
  std::shared_ptr<Coordinator> coordinator;
  std::unique_ptr<grpc::Server> server;
  std::string address;
  fs::path dir;
  std::vector<std::thread> agents;
  std::vector<Status> results;

  Fixture(int ranks, int stages) : Fixture([&] {
    CoordinatorOptions o;
    o.rank_size = ranks;
    o.stage_size = stages;
    return o;
  }()) {}
  explicit Fixture(CoordinatorOptions o) {
    o.group_timeout = 3000ms;
    auto c = Coordinator::create(o);
    EXPECT_TRUE(c.is_ok()) << c.status().message();
    coordinator = std::move(*c);
    grpc::ServerBuilder sb;
    int port = 0;
    sb.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    sb.RegisterService(coordinator.get());
    server = sb.BuildAndStart();
    address = "127.0.0.1:" + std::to_string(port);
    dir = fs::temp_directory_path() / ("cairn-coord-" + std::to_string(::getpid()) + "-" + std::to_string(port));
    fs::create_directories(dir);
    results.resize(16);
  }
  ~Fixture() {
    coordinator->shutdown();
    server->Shutdown(std::chrono::system_clock::now() + 2s);
    for (auto& t : agents) t.join();
    fs::remove_all(dir);
  }
  std::string write(const std::string& name, const ModelBuilder& b) {
    const fs::path p = dir / name;
    std::ofstream(p, std::ios::binary) << b.bytes();
    return p.string();
  }
  void start_agent(int rank, const std::string& file, size_t slot) {
    agents.emplace_back([this, rank, file, slot] {
      AgentOptions o;
      o.distributed_address = address;
      o.rank = rank;
      o.model_file = file;
      o.threads = 1;
      o.join_timeout_s = 10;
      results[slot] = run_agent(o);
    });
  }
};

values::Tensor ones(std::vector<int64_t> shape) {
  return onnx::test::floats(std::vector<float>(size_t(shape[0] * shape[1]), 1.0f), shape);
}

TEST(DistributedCoordinator, TwoRanksGatherTheirColumns) {
  Fixture f(2, 1);
  auto early = f.coordinator->run({ones({2, 3})});
  ASSERT_FALSE(early.is_ok());
  EXPECT_EQ(early.status().code(), StatusCode::Unavailable);
  EXPECT_NE(early.status().message().find("waiting for agent ranks 0, 1"), std::string::npos)
      << early.status().message();
  f.start_agent(0, f.write("r0.onnx", shard_model(0, 2)), 0);
  f.start_agent(1, f.write("r1.onnx", shard_model(1, 2)), 1);
  ASSERT_TRUE(f.coordinator->wait_ready(20s).is_ok()) << f.coordinator->state();
  ASSERT_EQ(f.coordinator->inputs().size(), 1u);
  EXPECT_EQ(f.coordinator->outputs()[0].dims, (std::vector<int64_t>{2, 8}));
  for (int i = 0; i < 3; ++i) {
    auto y = f.coordinator->run({ones({2, 3})});
    ASSERT_TRUE(y.is_ok()) << y.status().message();
    const auto v = onnx::test::to_floats((*y)[0]);
    ASSERT_EQ(v.size(), 16u);
    for (int j = 0; j < 8; ++j) EXPECT_EQ(v[size_t(j)], 3.0f * float(j + 1)) << j;  // x is ones, K = 3
  }
  f.coordinator->shutdown();
  f.server->Shutdown(std::chrono::system_clock::now() + 2s);
  for (auto& t : f.agents) t.join();
  f.agents.clear();
  EXPECT_FALSE(f.coordinator->run({ones({2, 3})}).is_ok());
}

TEST(DistributedCoordinator, TwoStagesPassActivationsOn) {
  Fixture f(2, 2);
  f.start_agent(0, f.write("s0.onnx", add_model(1.0f)), 0);
  f.start_agent(1, f.write("s1.onnx", add_model(10.0f)), 1);
  ASSERT_TRUE(f.coordinator->wait_ready(20s).is_ok()) << f.coordinator->state();
  auto y = f.coordinator->run({ones({2, 3})});
  ASSERT_TRUE(y.is_ok()) << y.status().message();
  for (float v : onnx::test::to_floats((*y)[0])) EXPECT_EQ(v, 12.0f);
  // A bad input fails in stage 0; stage 1 hears of it and the error comes back.
  auto bad = f.coordinator->run({ones({3, 3})});
  ASSERT_FALSE(bad.is_ok());
  // The group re-forms after a failed forward and serves again.
  auto again = f.coordinator->run({ones({2, 3})});
  ASSERT_TRUE(again.is_ok()) << again.status().message();
}

TEST(DistributedCoordinator, RefusesBadRanksAndMismatchedShards) {
  Fixture f(2, 1);
  const std::string r0 = f.write("r0.onnx", shard_model(0, 2));
  f.start_agent(5, r0, 0);                                        // outside rank_size
  f.agents.back().join();
  f.agents.pop_back();
  EXPECT_FALSE(f.results[0].is_ok());
  EXPECT_NE(f.results[0].message().find("outside this servable's rank_size 2"), std::string::npos)
      << f.results[0].message();
  f.start_agent(0, r0, 1);
  for (int i = 0; i < 200 && f.coordinator->state().find("waiting for agent ranks 1") == std::string::npos; ++i)
    std::this_thread::sleep_for(50ms);
  ASSERT_NE(f.coordinator->state().find("waiting for agent ranks 1"), std::string::npos) << f.coordinator->state();
  // Rank 1 with another model's inputs (x of [2, 5]) is refused.
  f.start_agent(1, f.write("other.onnx", add_model(1.0f, {2, 5})), 2);
  f.agents.back().join();
  f.agents.pop_back();
  EXPECT_FALSE(f.results[2].is_ok());
  EXPECT_NE(f.results[2].message().find("other inputs"), std::string::npos) << f.results[2].message();
  EXPECT_FALSE(f.coordinator->ready());
  EXPECT_NE(f.coordinator->state().find("waiting for agent ranks 1"), std::string::npos) << f.coordinator->state();
}

}  // namespace
}  // namespace cairn::distributed
