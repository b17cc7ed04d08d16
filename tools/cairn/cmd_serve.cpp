// `cairn serve`: the OpenAI-compatible HTTP server over one model in this
// process, or over a servable repository (--servable-dir: MindSpore Serving's
// REST and gRPC methods, and the OpenAI routes over its GGUF models). It
// listens first (answering /health with 503 while models load), prints
// "listening on http://HOST:PORT" on stderr, and drains on SIGTERM/SIGINT.
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
#include "distributed/coordinator.h"
#include "distributed_worker.h"
#include "kernels/kernels.h"
#include "modelgen/demo_model.h"
#include "server_flags.h"
#include "servable/repository.h"
#include "serving/local_backend.h"

namespace cairn::cli {

namespace {

struct ServeArgs {
  std::string model;
  api::ServerOptions server;
  serving::LocalBackendOptions backend;
  int64_t kv_cache_mb = 0;
  int grpc_port = -1;  // -1: no gRPC server
  int grpc_max_message_mb = 100;
  std::string servable_dir;
  std::vector<std::string> servables;
  double stage_timeout_s = 60;
  int max_versions = 2;
  double version_poll_s = 2;
  DistributedFlags distributed;
};

// VersionOptions::distributed_session for `cairn serve`.
Result<std::unique_ptr<onnx::Session>> distributed_session(const DistributedFlags& flags, DistributedWorker& w,
                                                           const servable::ModelDecl& d) {
  distributed::CoordinatorOptions co;
  co.rank_size = d.rank_size;
  co.stage_size = d.stage_size;
  CAIRN_RETURN_IF_ERROR(start_distributed_worker(flags, w, co, true));
  return distributed::make_distributed_session(w.coordinator);
}

// Loads the servables (or the model) and hands the backend over.
Status load(ServeArgs& a, servable::Repository* repo, api::LoadingBackend& backend) {
  if (repo) {
    CAIRN_RETURN_IF_ERROR(repo->load());
    for (const auto& info : repo->servables()) {
      if (info.versions.empty()) continue;
      std::string methods;
      for (const auto& m : info.methods) methods += (methods.empty() ? "" : ", ") + m.name;
      spdlog::info("serving servable '{}' version {} (methods: {})", info.name,
                   info.versions.back(), methods);
    }
    backend.set_borrowed(repo->llm_backend());
    return Status::ok();
  }
  auto local = serving::LocalBackend::create(a.backend);
  if (!local.is_ok()) return local.status();
  spdlog::info(
      "serving model '{}' (context {} tokens, KV pool {} MiB; kernels {}, batch tiles {}, bf16 "
      "{})",
      (*local)->model_id(), (*local)->n_ctx(), (*local)->kv_pool_bytes() >> 20,
      isa_name(active_isa()), kernels::packed_tile_path(), kernels::packed_bf16_tile_path());
  backend.set(std::move(local.value()));
  return Status::ok();
}

Status serve(ServeArgs a) {
  a.backend.kv_pool_bytes = a.kv_cache_mb * (int64_t(1) << 20);
  a.server.handle_signals = true;
  std::unique_ptr<servable::Repository> repo;
  if (!a.servable_dir.empty()) {
    if (!a.model.empty())
      return Status::invalid_argument("give either --model or --servable-dir, not both");
    servable::RepositoryOptions ro;
    ro.dir = a.servable_dir;
    ro.names = a.servables;
    ro.version.llm = a.backend;
    ro.version.stage_timeout_s = a.stage_timeout_s;
    ro.max_versions = a.max_versions;
    ro.poll_seconds = a.version_poll_s;
    auto worker = std::make_shared<DistributedWorker>();
    DistributedFlags flags = a.distributed;
    flags.grpc_max_message_mb = a.grpc_max_message_mb;
    ro.version.distributed_session = [flags, worker](const servable::ModelDecl& d) {
      return distributed_session(flags, *worker, d);
    };
    ro.version.distributed_llm = [flags, worker](const servable::ModelDecl& d, serving::LocalBackendOptions o)
        -> Result<std::unique_ptr<serving::Backend>> {
      CAIRN_ASSIGN_OR_RETURN(auto backend, distributed_llm_backend(flags, *worker, d.path, d.rank_size, d.stage_size,
                                                                   std::move(o), true));
      return std::unique_ptr<serving::Backend>(std::move(backend));
    };
    // Set before the HTTP server starts; the coordinator appears later, when
    // the servable loads (and the server does not read it before then).
    a.server.routes.unavailable = [w = std::weak_ptr<DistributedWorker>(worker)]() -> std::string {
      auto worker = w.lock();
      if (!worker || !worker->coordinator || worker->coordinator->ready()) return "";
      return "distributed model: " + worker->coordinator->state();
    };
    a.server.routes.extra_metrics = [w = std::weak_ptr<DistributedWorker>(worker)]() -> std::string {
      auto worker = w.lock();
      return worker ? distributed_metrics(*worker) : "";
    };
    auto opened = servable::Repository::open(std::move(ro));
    if (!opened.is_ok()) return opened.status();
    repo = std::move(opened.value());
  } else {
    if (!a.servables.empty()) return Status::invalid_argument("--servable needs --servable-dir");
    auto resolved = modelgen::model_or_demo(a.model);
    if (!resolved.is_ok()) return resolved.status();
    a.backend.model_path = *resolved;
  }

  api::LoadingBackend backend;
  auto server = api::HttpServer::start(backend, a.server, repo.get());
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
    serving_service = api::make_serving_service(backend, repo.get());
    api::GrpcServerOptions go;
    go.max_message_bytes = a.grpc_max_message_mb << 20;
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

  if (Status loaded = load(a, repo.get(), backend); !loaded.is_ok()) {
    if (grpc_server) grpc_server->shutdown(0);
    (*server)->stop();
    (*server)->wait();
    return loaded;
  }
  std::fprintf(stderr, "cairn: ready\n");
  std::fflush(stderr);
  (*server)->wait();
  if (repo) repo->start_draining();
  if (grpc_server) grpc_server->shutdown(1.0);
  grpc_server.reset();
  server.value().reset();  // connections go before the backend they talk to
  spdlog::info("server stopped");
  return Status::ok();
}

}  // namespace

void register_serve(CLI::App& app, CommandResult& result) {
  auto* cmd = app.add_subcommand(
      "serve", "serve a model over an OpenAI-compatible HTTP API, or a servable repository");
  auto a = std::make_shared<ServeArgs>();
  auto& s = a->server;
  auto& b = a->backend;
  cmd->add_option("-m,--model", a->model, "GGUF model (default: the built-in demo model)");
  add_http_server_flags(cmd, s, b.max_queue, "--port");
  add_engine_flags(cmd, b, a->kv_cache_mb);
  add_grpc_port_flag(cmd, a->grpc_port,
                     "also serve the Serving gRPC service on this port; 0: any free port "
                     "(default: off)");
  cmd->add_option("--grpc-max-message-mb", a->grpc_max_message_mb,
                  "largest gRPC message in MiB, either way (tensors travel in one message)")
      ->check(CLI::Range(1, 2047))
      ->capture_default_str();
  cmd->add_option("--servable-dir", a->servable_dir,
                  "serve the servables in this folder (<name>/servable_config.py, <name>/1/, ...)");
  cmd->add_option("--servable", a->servables,
                  "serve only this servable of --servable-dir (repeatable; default: all)");
  cmd->add_option("--stage-timeout", a->stage_timeout_s,
                  "seconds a servable's stage may run before its instance fails")
      ->check(CLI::Range(0.001, 1e6))
      ->capture_default_str();
  cmd->add_option("--max-versions", a->max_versions,
                  "versions of each servable kept loaded, newest first")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--version-poll", a->version_poll_s,
                  "seconds between looks for new version folders; 0: never")
      ->check(CLI::Range(0.0, 1e6))
      ->capture_default_str();
  cmd->add_option("--distributed-address", a->distributed.address,
                  "HOST:PORT where the agents of a distributed servable join (port 0: any free port)")
      ->capture_default_str();
  cmd->add_option("--wait-agents-seconds", a->distributed.wait_agents_s,
                  "how long a distributed servable waits for all its agents before it fails to load; 0: forever")
      ->check(CLI::Range(0.0, 1e7))
      ->capture_default_str();
  cmd->callback([a, &result] { result.status = serve(*a); });
}

}  // namespace cairn::cli
