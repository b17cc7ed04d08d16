// cluster/controller_service.h — the cairn.v1.Controller gRPC service.
// Owns the translation between Register / Heartbeat / Deregister /
// ListWorkers calls and the Registry; checks every message (sizes, address)
// before the registry sees it. Never routes requests and never calls workers.
#pragma once

#include <memory>

namespace grpc {
class Service;
}

namespace cairn::cluster {

class Registry;

// The service borrows `registry`, which must outlive the server running it.
std::unique_ptr<grpc::Service> make_controller_service(Registry& registry);

}  // namespace cairn::cluster
