// api/grpc_server.h — one gRPC server process-side: bind, serve, shut down.
// Owns the grpc::Server and its listening port; serves services it is given
// but does not own (they must outlive it). Never implements a service and
// never touches a backend. gRPC headers stay in the .cpp: this header is
// included by the CLI and the cluster tests, and grpcpp is slow to compile.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/status.h"

namespace grpc {
class Service;
class Server;
}  // namespace grpc

namespace cairn::api {

struct GrpcServerOptions {
  std::string address = "127.0.0.1:0";  // HOST:PORT; port 0: any free port
  int max_message_bytes = 16 << 20;     // larger messages are refused by gRPC
};

class GrpcServer {
 public:
  // Binds (port 0: any free port) and serves the given services (not owned;
  // they outlive the server). A malformed address, a port in use or an
  // unbindable host is a one-line error naming the address.
  static Result<std::unique_ptr<GrpcServer>> start(const GrpcServerOptions& options,
                                                   const std::vector<grpc::Service*>& services);
  ~GrpcServer();  // shutdown(0) if not done
  GrpcServer(const GrpcServer&) = delete;
  GrpcServer& operator=(const GrpcServer&) = delete;

  int port() const { return port_; }
  // Stops accepting new calls; calls still running after `grace_seconds` are
  // cancelled. Returns once every handler has returned. Idempotent.
  void shutdown(double grace_seconds);

 private:
  GrpcServer() = default;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  bool shut_down_ = false;
};

// Splits "HOST:PORT" ("[::1]:PORT" for IPv6); false when it is not one.
// Shared by the CLI flags and the server so both refuse the same inputs.
bool split_host_port(const std::string& address, std::string* host, int* port);

}  // namespace cairn::api
