// `cairn controller`: routes requests to registered workers. Serves the
// OpenAI HTTP API (the same HTTP routes as `cairn serve`, over a ClusterBackend)
// and, on one gRPC port, the Controller service workers register with and the
// client-facing Serving service. Prints "cairn: listening on http://HOST:PORT"
// and "cairn: grpc listening on HOST:PORT" on stderr (tests parse them), and
// drains on SIGTERM/SIGINT.
#include <grpcpp/impl/service_type.h>  // grpc::Service is destroyed here
#include <spdlog/spdlog.h>

#include <cstdio>
#include <memory>

#include "api/grpc_server.h"
#include "api/grpc_serving_service.h"
#include "api/http_server.h"
#include "cluster/cluster_backend.h"
#include "cluster/controller_service.h"
#include "cluster/registry.h"
#include "commands.h"
#include "server_flags.h"

namespace cairn::cli {

namespace {

struct ControllerArgs {
  api::ServerOptions server;
  int grpc_port = 5500;
  std::string route = "shortest-queue";
  int worker_timeout_ms = 6000;
  int heartbeat_ms = 2000;
  int max_attempts = 3;
  int prefix_chars = 256;
  int32_t max_queue = 256;
};

std::string host_port(const std::string& host, int port) {
  const bool v6 = host.find(':') != std::string::npos && host.front() != '[';
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

Status run_controller(ControllerArgs a) {
  auto policy = cluster::parse_route_policy(a.route);
  if (!policy)
    return Status::error("--route: '" + a.route +
                         "' is not one of shortest-queue, round-robin, prefix-affinity");
  if (a.heartbeat_ms >= a.worker_timeout_ms)
    return Status::error("--heartbeat-ms must be shorter than --worker-timeout-ms");

  cluster::RegistryOptions ro;
  ro.heartbeat_ms = a.heartbeat_ms;
  ro.timeout_ms = a.worker_timeout_ms;
  cluster::Registry registry(ro);

  cluster::ClusterOptions co;
  co.routing.policy = *policy;
  co.routing.prefix_chars = static_cast<size_t>(a.prefix_chars);
  co.max_attempts = a.max_attempts;
  co.max_queue = a.max_queue;
  co.request_timeout_s = a.server.request_timeout_s;
  auto backend = std::make_unique<cluster::ClusterBackend>(registry, co);

  a.server.handle_signals = true;
  auto http = api::HttpServer::start(*backend, a.server);
  if (!http.is_ok()) return http.status();
  std::fprintf(stderr, "cairn: listening on http://%s:%u\n", (*http)->host().c_str(),
               static_cast<unsigned>((*http)->port()));
  std::fflush(stderr);

  auto controller_service = cluster::make_controller_service(registry);
  auto serving_service = api::make_serving_service(*backend);
  api::GrpcServerOptions go;
  go.address = host_port(a.server.host, a.grpc_port);
  auto grpc_server = api::GrpcServer::start(go, {controller_service.get(), serving_service.get()});
  if (!grpc_server.is_ok()) {
    (*http)->stop();
    (*http)->wait();
    return grpc_server.status();
  }
  std::fprintf(stderr, "cairn: grpc listening on %s\n",
               host_port(a.server.host, (*grpc_server)->port()).c_str());
  spdlog::info("controller: route {}, workers dropped after {} ms without a heartbeat",
               cluster::route_policy_name(*policy), a.worker_timeout_ms);
  std::fprintf(stderr, "cairn: ready\n");
  std::fflush(stderr);

  (*http)->wait();  // returns after a drain (SIGTERM/SIGINT) or stop
  // Front-ends go before the backend they talk to; the backend (which cancels
  // and waits for its worker calls) before the registry it reads.
  (*grpc_server)->shutdown(1.0);
  grpc_server.value().reset();
  http.value().reset();
  backend.reset();
  spdlog::info("controller stopped");
  return Status::ok();
}

}  // namespace

void register_controller(CLI::App& app, CommandResult& result) {
  auto* cmd =
      app.add_subcommand("controller", "route requests to registered workers (gRPC + OpenAI HTTP)");
  auto a = std::make_shared<ControllerArgs>();
  add_http_server_flags(cmd, a->server, a->max_queue, "--http-port");
  add_grpc_port_flag(cmd, a->grpc_port,
                     "gRPC port for workers (Controller) and clients (Serving); 0: any free port");
  cmd->add_option("--route", a->route, "shortest-queue, round-robin or prefix-affinity")
      ->capture_default_str();
  cmd->add_option("--worker-timeout-ms", a->worker_timeout_ms,
                  "drop a worker after this long without a heartbeat")
      ->check(CLI::Range(100, 3600 * 1000))
      ->capture_default_str();
  cmd->add_option("--heartbeat-ms", a->heartbeat_ms, "heartbeat interval workers are told to use")
      ->check(CLI::Range(10, 3600 * 1000))
      ->capture_default_str();
  cmd->add_option("--max-attempts", a->max_attempts,
                  "workers tried for a request that fails before its first token")
      ->check(CLI::Range(1, 16))
      ->capture_default_str();
  cmd->add_option("--prefix-chars", a->prefix_chars,
                  "prefix-affinity: prompt bytes that choose the worker")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->callback([a, &result] {
    if (a->grpc_port < 0) {
      result.status = Status::error("--grpc-port: the controller needs a gRPC port (0: any free)");
      return;
    }
    result.status = run_controller(*a);
  });
}

}  // namespace cairn::cli
