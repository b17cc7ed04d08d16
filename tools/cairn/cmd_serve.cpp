// `cairn serve`: the OpenAI-compatible HTTP server over one model in this
// process. It listens first (answering /health with 503 while the model loads),
// prints "listening on http://HOST:PORT" on stderr, and drains on SIGTERM/SIGINT.
#include <grpcpp/impl/service_type.h>  // grpc::Service is destroyed here
#include <spdlog/spdlog.h>

#include <cstdio>
#include <memory>

#include "api/grpc_server.h"
#include "api/grpc_serving_service.h"
#include "api/http_server.h"
#include "api/loading_backend.h"
#include "commands.h"
#include "core/cpu_features.h"
#include "kernels/kernels.h"
#include "modelgen/demo_model.h"
#include "server_flags.h"
#include "serving/local_backend.h"

namespace cairn::cli {

namespace {

struct ServeArgs {
  std::string model;
  api::ServerOptions server;
  serving::LocalBackendOptions backend;
  int64_t kv_cache_mb = 0;
  int grpc_port = -1;  // -1: no gRPC server
};

Status serve(ServeArgs a) {
  auto resolved = modelgen::model_or_demo(a.model);
  if (!resolved.is_ok()) return resolved.status();
  const std::string path = *resolved;
  a.backend.model_path = path;
  a.backend.kv_pool_bytes = a.kv_cache_mb * (int64_t(1) << 20);
  a.server.handle_signals = true;

  api::LoadingBackend backend;
  auto server = api::HttpServer::start(backend, a.server);
  if (!server.is_ok()) return server.status();
  // Tests and scripts parse this line to find a port chosen with --port 0.
  std::fprintf(stderr, "cairn: listening on http://%s:%u\n", (*server)->host().c_str(),
               static_cast<unsigned>((*server)->port()));
  std::fflush(stderr);

  // The Serving gRPC service over the same backend, so gRPC clients reach a
  // one-process server as they reach a controller.
  std::unique_ptr<grpc::Service> serving_service;
  std::unique_ptr<api::GrpcServer> grpc_server;
  if (a.grpc_port >= 0) {
    serving_service = api::make_serving_service(backend);
    api::GrpcServerOptions go;
    const std::string& host = a.server.host;
    const bool v6 = host.find(':') != std::string::npos && host.front() != '[';
    go.address = (v6 ? "[" + host + "]" : host) + ":" + std::to_string(a.grpc_port);
    auto started = api::GrpcServer::start(go, {serving_service.get()});
    if (!started.is_ok()) {
      (*server)->stop();
      (*server)->wait();
      return started.status();
    }
    grpc_server = std::move(started.value());
    std::fprintf(stderr, "cairn: grpc listening on %s:%d\n", (v6 ? "[" + host + "]" : host).c_str(),
                 grpc_server->port());
    std::fflush(stderr);
  }

  auto local = serving::LocalBackend::create(a.backend);
  if (!local.is_ok()) {
    if (grpc_server) grpc_server->shutdown(0);
    (*server)->stop();
    (*server)->wait();
    return local.status();
  }
  spdlog::info(
      "serving model '{}' (context {} tokens, KV pool {} MiB; kernels {}, batch tiles {}, bf16 "
      "{})",
      (*local)->model_id(), (*local)->n_ctx(), (*local)->kv_pool_bytes() >> 20,
      isa_name(active_isa()), kernels::packed_tile_path(), kernels::packed_bf16_tile_path());
  backend.set(std::move(local.value()));
  std::fprintf(stderr, "cairn: ready\n");
  std::fflush(stderr);
  (*server)->wait();
  if (grpc_server) grpc_server->shutdown(1.0);
  grpc_server.reset();
  server.value().reset();  // connections go before the backend they talk to
  spdlog::info("server stopped");
  return Status::ok();
}

}  // namespace

void register_serve(CLI::App& app, CommandResult& result) {
  auto* cmd = app.add_subcommand("serve", "serve a model over an OpenAI-compatible HTTP API");
  auto a = std::make_shared<ServeArgs>();
  auto& s = a->server;
  auto& b = a->backend;
  cmd->add_option("-m,--model", a->model, "GGUF model (default: the built-in demo model)");
  add_http_server_flags(cmd, s, b.max_queue, "--port");
  add_engine_flags(cmd, b, a->kv_cache_mb);
  add_grpc_port_flag(cmd, a->grpc_port,
                     "also serve the Serving gRPC service on this port; 0: any free port "
                     "(default: off)");
  cmd->callback([a, &result] { result.status = serve(*a); });
}

}  // namespace cairn::cli
