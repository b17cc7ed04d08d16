// WorkerAgent against a fake Controller service in this process: it
// registers, heartbeats with fresh status, registers again when the
// controller forgets it or is replaced on the same port, and deregisters.
#include "cluster/worker_agent.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "api/fake_backend.h"
#include "api/grpc_server.h"
#include "cairn/v1/controller.grpc.pb.h"
#include "serving_test_util.h"

namespace cairn::cluster {
namespace {

using std::chrono::milliseconds;

class FakeController final : public v1::Controller::Service {
 public:
  grpc::Status Register(grpc::ServerContext*, const v1::RegisterRequest* req,
                        v1::RegisterResponse* res) override {
    std::lock_guard<std::mutex> lock(mu_);
    registers.push_back(*req);
    const std::string id = prefix + std::to_string(registers.size());
    known_ids.push_back(id);
    res->set_worker_id(id);
    res->set_heartbeat_ms(0);  // leave the worker's own interval
    cv_.notify_all();
    return grpc::Status::OK;
  }
  grpc::Status Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest* req,
                         v1::HeartbeatResponse* res) override {
    std::lock_guard<std::mutex> lock(mu_);
    heartbeats.push_back(*req);
    res->set_known(is_known(req->worker_id()));
    cv_.notify_all();
    return grpc::Status::OK;
  }
  grpc::Status Deregister(grpc::ServerContext*, const v1::DeregisterRequest* req,
                          v1::DeregisterResponse* res) override {
    std::lock_guard<std::mutex> lock(mu_);
    deregistered.push_back(req->worker_id());
    res->set_known(is_known(req->worker_id()));
    cv_.notify_all();
    return grpc::Status::OK;
  }

  template <class Pred>
  bool wait(Pred pred, milliseconds timeout = milliseconds(10000)) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return pred(*this); });
  }
  void forget_all() {
    std::lock_guard<std::mutex> lock(mu_);
    known_ids.clear();
  }
  template <class F>
  auto locked(F f) {
    std::lock_guard<std::mutex> lock(mu_);
    return f(*this);
  }

  std::string prefix = "w";
  std::vector<v1::RegisterRequest> registers;
  std::vector<v1::HeartbeatRequest> heartbeats;
  std::vector<std::string> deregistered;
  std::vector<std::string> known_ids;

 private:
  bool is_known(const std::string& id) const {
    return std::find(known_ids.begin(), known_ids.end(), id) != known_ids.end();
  }
  std::mutex mu_;
  std::condition_variable cv_;
};

struct RunningController {
  std::unique_ptr<FakeController> service = std::make_unique<FakeController>();
  std::unique_ptr<api::GrpcServer> server;
  std::string address;

  explicit RunningController(const std::string& addr = "127.0.0.1:0",
                             const std::string& prefix = "w") {
    service->prefix = prefix;  // before the server runs: no race with Register
    api::GrpcServerOptions o;
    o.address = addr;
    auto s = api::GrpcServer::start(o, {service.get()});
    EXPECT_TRUE(s.is_ok()) << s.status().message();
    if (!s.is_ok()) return;
    server = std::move(s.value());
    address = "127.0.0.1:" + std::to_string(server->port());
  }
  ~RunningController() {
    if (server) server->shutdown(0);
  }
};

WorkerAgentOptions options_for(const std::string& controller, int heartbeat_ms = 50) {
  WorkerAgentOptions o;
  o.controller = controller;
  o.name = "test-worker";
  o.advertise = "127.0.0.1:7777";
  o.heartbeat_ms = heartbeat_ms;
  return o;
}

TEST(WorkerAgentTest, StatusCarriesRoleAndHandoffCounters) {
  RunningController c;
  ASSERT_TRUE(c.server);
  api::test::FakeBackend backend;
  serving::HandoffCounters counters;
  counters.received = 3;
  counters.observe_seconds(0.02);
  auto o = options_for(c.address);
  o.role = "decode";
  o.handoff_counters = &counters;
  auto agent = WorkerAgent::start(o, backend);
  ASSERT_NE(agent, nullptr);
  ASSERT_TRUE(c.service->wait([](FakeController& f) { return f.registers.size() >= 1; }));
  const v1::RegisterRequest reg =
      c.service->locked([](FakeController& f) { return f.registers[0]; });
  EXPECT_EQ(reg.status().role(), "decode");
  EXPECT_EQ(reg.status().handoff().received(), 3u);
  EXPECT_EQ(reg.status().handoff().seconds_counts_size(),
            reg.status().handoff().seconds_bounds_size() + 1);
  // Heartbeats carry fresh counts.
  counters.resumed = 2;
  ASSERT_TRUE(c.service->wait([](FakeController& f) {
    return !f.heartbeats.empty() && f.heartbeats.back().status().handoff().resumed() == 2 &&
           f.heartbeats.back().status().role() == "decode";
  }));
  agent->stop_and_deregister();

  o.role = "middle";
  EXPECT_FALSE(WorkerAgent::validate(o).is_ok());
  EXPECT_EQ(WorkerAgent::start(o, backend), nullptr);
}

TEST(WorkerAgentTest, RegistersHeartbeatsWithStatusAndDeregisters) {
  RunningController c;
  ASSERT_TRUE(c.server);
  api::test::FakeBackend backend;
  backend.set_mode(api::test::FakeBackend::Mode::Hold);
  std::mutex mu;
  std::vector<std::string> announced;
  auto o = options_for(c.address);
  o.on_registered = [&](const std::string& id) {
    std::lock_guard<std::mutex> lock(mu);
    announced.push_back(id);
  };
  auto agent = WorkerAgent::start(o, backend);
  ASSERT_NE(agent, nullptr);

  ASSERT_TRUE(c.service->wait([](FakeController& f) { return f.registers.size() >= 1; }));
  const v1::RegisterRequest reg =
      c.service->locked([](FakeController& f) { return f.registers[0]; });
  EXPECT_EQ(reg.name(), "test-worker");
  EXPECT_EQ(reg.address(), "127.0.0.1:7777");
  ASSERT_EQ(reg.status().models_size(), 1);
  EXPECT_EQ(reg.status().models(0).id(), "fake");
  EXPECT_EQ(reg.status().running(), 0);

  // A request starts running: the next heartbeats carry the new load.
  serving::GenerateRequest req;
  req.prompt = std::string("x");
  ASSERT_TRUE(backend.submit(req, std::make_shared<cairn::test::NullSink>()).is_ok());
  ASSERT_TRUE(c.service->wait([](FakeController& f) {
    return !f.heartbeats.empty() && f.heartbeats.back().status().running() == 1;
  }));
  EXPECT_TRUE(
      c.service->locked([](FakeController& f) { return f.heartbeats.back().worker_id() == "w1"; }));
  EXPECT_TRUE(agent->registered());
  EXPECT_EQ(agent->worker_id(), "w1");
  backend.release_all();

  agent->stop_and_deregister();
  EXPECT_FALSE(agent->registered());
  EXPECT_EQ(c.service->locked([](FakeController& f) { return f.deregistered; }),
            std::vector<std::string>{"w1"});
  // No more traffic after stop.
  const size_t beats = c.service->locked([](FakeController& f) { return f.heartbeats.size(); });
  EXPECT_FALSE(c.service->wait([&](FakeController& f) { return f.heartbeats.size() > beats; },
                               milliseconds(200)));
  agent->stop_and_deregister();  // idempotent
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(announced, std::vector<std::string>{"w1"});
}

TEST(WorkerAgentTest, RegistersAgainWhenTheControllerForgetsIt) {
  RunningController c;
  ASSERT_TRUE(c.server);
  api::test::FakeBackend backend;
  auto agent = WorkerAgent::start(options_for(c.address), backend);
  ASSERT_NE(agent, nullptr);
  ASSERT_TRUE(c.service->wait([](FakeController& f) { return f.heartbeats.size() >= 2; }));
  c.service->forget_all();
  ASSERT_TRUE(c.service->wait([](FakeController& f) { return f.registers.size() >= 2; }));
  EXPECT_TRUE(c.service->wait([](FakeController& f) {
    return !f.heartbeats.empty() && f.heartbeats.back().worker_id() == "w2";
  }));
  EXPECT_EQ(agent->worker_id(), "w2");
}

TEST(WorkerAgentTest, ComesBackToAControllerRestartedOnTheSamePort) {
  auto first = std::make_unique<RunningController>();
  ASSERT_TRUE(first->server);
  const std::string address = first->address;
  api::test::FakeBackend backend;
  const int heartbeat_ms = 100;
  auto agent = WorkerAgent::start(options_for(address, heartbeat_ms), backend);
  ASSERT_NE(agent, nullptr);
  ASSERT_TRUE(first->service->wait([](FakeController& f) { return f.heartbeats.size() >= 1; }));
  first.reset();  // the controller dies...
  ASSERT_TRUE([&] {
    for (int i = 0; i < 200 && agent->registered(); ++i)
      std::this_thread::sleep_for(milliseconds(heartbeat_ms / 4));
    return !agent->registered();
  }()) << "the agent never noticed the controller was gone";

  RunningController second(address, "new");  // ...and a new one starts on its port
  ASSERT_TRUE(second.server) << "port " << address << " was not free again";
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(second.service->wait([](FakeController& f) { return f.registers.size() >= 1; }));
  // Within two heartbeats, plus slack for a loaded machine.
  EXPECT_LT(std::chrono::steady_clock::now() - t0, milliseconds(2 * heartbeat_ms + 1500));
  // Heartbeats go on under the new id.
  EXPECT_TRUE(second.service->wait([](FakeController& f) {
    return !f.heartbeats.empty() && f.heartbeats.back().worker_id() == "new1";
  }));
  EXPECT_TRUE(agent->registered());
  EXPECT_EQ(agent->worker_id(), "new1");
  agent->stop_and_deregister();
  EXPECT_EQ(second.service->locked([](FakeController& f) { return f.deregistered.size(); }), 1u);
}

TEST(WorkerAgentTest, StopIsPromptWhenTheControllerIsUnreachable) {
  // A port nothing listens on: take one from a server and close it.
  std::string address;
  {
    RunningController c;
    ASSERT_TRUE(c.server);
    address = c.address;
  }
  api::test::FakeBackend backend;
  auto agent = WorkerAgent::start(options_for(address, 1000), backend);
  ASSERT_NE(agent, nullptr);
  EXPECT_FALSE(agent->registered());
  const auto t0 = std::chrono::steady_clock::now();
  agent->stop_and_deregister();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, milliseconds(4000));
}

TEST(WorkerAgentTest, BadOptionsAreRefused) {
  api::test::FakeBackend backend;
  auto o = options_for("127.0.0.1:1");
  o.heartbeat_ms = 0;
  EXPECT_FALSE(WorkerAgent::validate(o).is_ok());
  EXPECT_EQ(WorkerAgent::start(o, backend), nullptr);
  o = options_for("");
  EXPECT_FALSE(WorkerAgent::validate(o).is_ok());
  o = options_for("127.0.0.1:1");
  o.advertise.clear();
  EXPECT_FALSE(WorkerAgent::validate(o).is_ok());
  o = options_for("127.0.0.1:1");
  o.name = std::string(1000, 'n');
  EXPECT_FALSE(WorkerAgent::validate(o).is_ok());
  EXPECT_TRUE(WorkerAgent::validate(options_for("127.0.0.1:1")).is_ok());
}

}  // namespace
}  // namespace cairn::cluster
