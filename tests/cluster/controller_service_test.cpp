// The Controller gRPC service over a Registry, called over loopback.
#include "cluster/controller_service.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "api/grpc_server.h"
#include "cairn/v1/controller.grpc.pb.h"
#include "cluster/registry.h"

namespace cairn::cluster {
namespace {

struct Fixture {
  Registry registry;
  std::unique_ptr<grpc::Service> service = make_controller_service(registry);
  std::unique_ptr<api::GrpcServer> server;
  std::unique_ptr<v1::Controller::Stub> stub;

  Fixture() : registry(options()) {
    auto s = api::GrpcServer::start({}, {service.get()});
    EXPECT_TRUE(s.is_ok()) << s.status().message();
    if (!s.is_ok()) return;
    server = std::move(s.value());
    stub = v1::Controller::NewStub(grpc::CreateChannel(
        "127.0.0.1:" + std::to_string(server->port()), grpc::InsecureChannelCredentials()));
  }
  ~Fixture() {
    if (server) server->shutdown(0);
  }
  static RegistryOptions options() {
    RegistryOptions o;
    o.heartbeat_ms = 250;
    o.timeout_ms = 900;
    return o;
  }
  static void deadline(grpc::ClientContext& ctx) {
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  }
};

v1::RegisterRequest registration(const std::string& name, const std::string& address) {
  v1::RegisterRequest r;
  r.set_name(name);
  r.set_address(address);
  r.mutable_status()->set_state(v1::WorkerStatus::READY);
  r.mutable_status()->add_models()->set_id("m");
  return r;
}

TEST(ControllerService, RegisterHeartbeatListDeregister) {
  Fixture f;
  ASSERT_TRUE(f.stub);
  v1::RegisterResponse reg;
  {
    grpc::ClientContext ctx;
    Fixture::deadline(ctx);
    ASSERT_TRUE(f.stub->Register(&ctx, registration("w", "127.0.0.1:4000"), &reg).ok());
  }
  EXPECT_FALSE(reg.worker_id().empty());
  EXPECT_EQ(reg.heartbeat_ms(), 250);
  EXPECT_EQ(reg.timeout_ms(), 900);

  v1::HeartbeatRequest hb;
  hb.set_worker_id(reg.worker_id());
  hb.mutable_status()->set_state(v1::WorkerStatus::READY);
  hb.mutable_status()->set_running(3);
  hb.mutable_status()->add_models()->set_id("m");
  v1::HeartbeatResponse hb_resp;
  {
    grpc::ClientContext ctx;
    Fixture::deadline(ctx);
    ASSERT_TRUE(f.stub->Heartbeat(&ctx, hb, &hb_resp).ok());
  }
  EXPECT_TRUE(hb_resp.known());

  f.registry.add_outstanding(reg.worker_id(), +1);
  v1::ListWorkersResponse list;
  {
    grpc::ClientContext ctx;
    Fixture::deadline(ctx);
    ASSERT_TRUE(f.stub->ListWorkers(&ctx, v1::ListWorkersRequest(), &list).ok());
  }
  ASSERT_EQ(list.workers_size(), 1);
  EXPECT_EQ(list.workers(0).worker_id(), reg.worker_id());
  EXPECT_EQ(list.workers(0).name(), "w");
  EXPECT_EQ(list.workers(0).address(), "127.0.0.1:4000");
  EXPECT_EQ(list.workers(0).status().running(), 3);
  EXPECT_EQ(list.workers(0).outstanding(), 1);

  v1::DeregisterRequest dr;
  dr.set_worker_id(reg.worker_id());
  v1::DeregisterResponse dr_resp;
  {
    grpc::ClientContext ctx;
    Fixture::deadline(ctx);
    ASSERT_TRUE(f.stub->Deregister(&ctx, dr, &dr_resp).ok());
  }
  EXPECT_TRUE(dr_resp.known());
  {
    grpc::ClientContext ctx;
    Fixture::deadline(ctx);
    ASSERT_TRUE(f.stub->Heartbeat(&ctx, hb, &hb_resp).ok());
  }
  EXPECT_FALSE(hb_resp.known());  // the worker registers again
  EXPECT_TRUE(f.registry.list().empty());
}

TEST(ControllerService, MalformedMessagesAreRefusedCleanly) {
  Fixture f;
  ASSERT_TRUE(f.stub);
  for (const std::string& address :
       {std::string(), std::string("nohost"), std::string("h:0"), std::string(5000, 'a') + ":1"}) {
    grpc::ClientContext ctx;
    Fixture::deadline(ctx);
    v1::RegisterResponse resp;
    grpc::Status s = f.stub->Register(&ctx, registration("w", address), &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << address.substr(0, 20);
    EXPECT_FALSE(s.error_message().empty());
  }
  v1::HeartbeatRequest hb;
  hb.set_worker_id(std::string(100000, 'x'));
  v1::HeartbeatResponse hb_resp;
  grpc::ClientContext ctx;
  Fixture::deadline(ctx);
  ASSERT_TRUE(f.stub->Heartbeat(&ctx, hb, &hb_resp).ok());
  EXPECT_FALSE(hb_resp.known());
  EXPECT_TRUE(f.registry.list().empty());
}

}  // namespace
}  // namespace cairn::cluster
