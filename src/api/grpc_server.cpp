// api/grpc_server.cpp — starting and stopping the gRPC server that hosts the services.
#include "api/grpc_server.h"

#include <grpcpp/grpcpp.h>

#include <chrono>

namespace cairn::api {

bool split_host_port(const std::string& address, std::string* host, int* port) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 >= address.size()) return false;
  std::string h = address.substr(0, colon);
  const std::string p = address.substr(colon + 1);
  if (h.front() == '[') {
    if (h.size() < 3 || h.back() != ']') return false;
  } else if (h.find(':') != std::string::npos) {
    return false;  // a bare IPv6 address is ambiguous: it needs brackets
  }
  if (p.size() > 5) return false;
  int value = 0;
  for (char c : p) {
    if (c < '0' || c > '9') return false;
    value = value * 10 + (c - '0');
  }
  if (value > 65535) return false;
  for (char c : h) {
    // Hosts are names or literals; anything else (spaces, schemes) is a typo.
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '-' || c == ':' || c == '[' || c == ']' || c == '_' ||
                    c == '%';
    if (!ok) return false;
  }
  if (host) *host = h;
  if (port) *port = value;
  return true;
}

Result<std::unique_ptr<GrpcServer>> GrpcServer::start(const GrpcServerOptions& options,
                                                      const std::vector<grpc::Service*>& services) {
  std::string host;
  int requested = 0;
  if (!split_host_port(options.address, &host, &requested))
    return Status::error("gRPC listen address '" + options.address + "' is not HOST:PORT");
  // gRPC cannot build a server without one (and would only log why).
  if (services.empty()) return Status::error("gRPC server on " + options.address + ": no services");
  if (options.max_message_bytes <= 0)
    return Status::error("gRPC max message size must be positive");

  std::unique_ptr<GrpcServer> out(new GrpcServer());
  int bound = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.address, grpc::InsecureServerCredentials(), &bound);
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  builder.SetMaxSendMessageSize(options.max_message_bytes);
  // Without this a second server could share the port (SO_REUSEPORT) and
  // silently split the traffic: a port in use must be an error.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  for (auto* s : services) {
    if (s == nullptr) return Status::error("gRPC server: null service");
    builder.RegisterService(s);
  }
  try {
    out->server_ = builder.BuildAndStart();
  } catch (const std::exception& e) {
    return Status::error("gRPC server on " + options.address + ": " + e.what());
  }
  // gRPC reports a failed bind as port 0 (and may or may not return a server).
  if (!out->server_ || bound == 0) {
    if (out->server_) {
      out->server_->Shutdown(std::chrono::system_clock::now());
      out->server_->Wait();
    }
    out->shut_down_ = true;
    return Status::error("cannot listen on " + options.address +
                         " (address in use or not a local address)");
  }
  out->port_ = bound;
  return out;
}

void GrpcServer::shutdown(double grace_seconds) {
  if (shut_down_ || !server_) return;
  shut_down_ = true;
  if (grace_seconds < 0) grace_seconds = 0;
  const auto deadline = std::chrono::system_clock::now() +
                        std::chrono::duration_cast<std::chrono::system_clock::duration>(
                            std::chrono::duration<double>(grace_seconds));
  server_->Shutdown(deadline);
  server_->Wait();
}

GrpcServer::~GrpcServer() { shutdown(0); }

}  // namespace cairn::api
