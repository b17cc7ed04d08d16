// cluster/controller_service.cpp — the cairn.v1.Controller service workers register with.
#include "cluster/controller_service.h"

#include <grpcpp/grpcpp.h>

#include "cairn/v1/controller.grpc.pb.h"
#include "cluster/registry.h"
#include "rpc/convert.h"

namespace cairn::cluster {

namespace {

constexpr size_t kMaxWorkerId = 128;

class ControllerService final : public v1::Controller::Service {
 public:
  explicit ControllerService(Registry& registry) : registry_(registry) {}

  grpc::Status Register(grpc::ServerContext*, const v1::RegisterRequest* req,
                        v1::RegisterResponse* resp) override {
    auto id = registry_.register_worker(req->name(), req->address(), req->status());
    if (!id.is_ok())
      return rpc::to_grpc_status(Status::invalid_argument("register: " + id.status().message()));
    resp->set_worker_id(*id);
    resp->set_heartbeat_ms(registry_.options().heartbeat_ms);
    resp->set_timeout_ms(registry_.options().timeout_ms);
    return grpc::Status::OK;
  }

  grpc::Status Heartbeat(grpc::ServerContext*, const v1::HeartbeatRequest* req,
                         v1::HeartbeatResponse* resp) override {
    if (req->worker_id().size() > kMaxWorkerId) {
      resp->set_known(false);
      return grpc::Status::OK;
    }
    resp->set_known(registry_.heartbeat(req->worker_id(), req->status()));
    return grpc::Status::OK;
  }

  grpc::Status Deregister(grpc::ServerContext*, const v1::DeregisterRequest* req,
                          v1::DeregisterResponse* resp) override {
    resp->set_known(req->worker_id().size() <= kMaxWorkerId &&
                    registry_.deregister(req->worker_id()));
    return grpc::Status::OK;
  }

  grpc::Status ListWorkers(grpc::ServerContext*, const v1::ListWorkersRequest*,
                           v1::ListWorkersResponse* resp) override {
    for (const auto& w : registry_.list()) {
      auto* e = resp->add_workers();
      e->set_worker_id(w.id);
      e->set_name(w.name);
      e->set_address(w.address);
      *e->mutable_status() = w.status;
      e->set_last_heartbeat_ms_ago(w.last_heartbeat_ms_ago);
      e->set_outstanding(w.outstanding);
    }
    return grpc::Status::OK;
  }

 private:
  Registry& registry_;
};

}  // namespace

std::unique_ptr<grpc::Service> make_controller_service(Registry& registry) {
  return std::make_unique<ControllerService>(registry);
}

}  // namespace cairn::cluster
