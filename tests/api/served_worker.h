// The Worker service over a backend on a loopback port, with a stub to it:
// what the worker service tests start before each case.
#pragma once

#include <grpcpp/grpcpp.h>

#include <memory>
#include <string>

#include "api/grpc_server.h"
#include "api/grpc_worker_service.h"
#include "cairn/v1/worker.grpc.pb.h"

namespace cairn::test {

struct ServedWorker {
  std::unique_ptr<grpc::Service> service;
  std::unique_ptr<api::GrpcServer> server;
  std::string address;  // 127.0.0.1:PORT
  std::unique_ptr<v1::Worker::Stub> stub;

  ServedWorker() = default;
  ServedWorker(const ServedWorker&) = delete;
  ServedWorker& operator=(const ServedWorker&) = delete;
  ~ServedWorker() { stop(); }

  Status start(serving::Backend& backend, const api::WorkerServiceOptions& options = {}) {
    service = api::make_worker_service(backend, options);
    auto s = api::GrpcServer::start(api::GrpcServerOptions{}, {service.get()});
    if (!s.is_ok()) return s.status();
    server = std::move(*s);
    address = "127.0.0.1:" + std::to_string(server->port());
    stub = v1::Worker::NewStub(grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
    return Status::ok();
  }
  void stop() {
    stub.reset();
    if (server) server->shutdown(1);
    server.reset();
    service.reset();
  }
};

}  // namespace cairn::test
