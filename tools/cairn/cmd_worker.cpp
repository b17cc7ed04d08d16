// `cairn worker`: one model in this process, served to a controller over gRPC.
// Loads the model, serves the cairn.v1.Worker service, prints "cairn: worker
// listening on HOST:PORT", registers with the controller (printing "cairn:
// registered with CONTROLLER as ID" each time it does) and heartbeats. On
// SIGTERM/SIGINT it deregisters first (so no new work is routed here), stops
// accepting, lets running requests finish within --drain-seconds and exits 0;
// a second signal exits at once. With --rank-size the model is computed by
// that many `cairn agent` processes (docs/distributed.md); the worker reports
// itself loading to the controller whenever their group is not whole.
// --role splits prefill and decode over workers (docs/cluster.md): a prefill
// worker pushes each handed-off request's K/V rows to a decode worker, which
// buffers them (--handoff-buffer-mb, --handoff-timeout-ms) until the request
// resumes there.
#include <grpcpp/impl/service_type.h>  // destroys the worker service
#include <pthread.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <ctime>
#include <memory>

#include "api/grpc_server.h"
#include "api/grpc_worker_service.h"
#include "cluster/worker_agent.h"
#include "commands.h"
#include "distributed_worker.h"
#include "modelgen/demo_model.h"
#include "server_flags.h"
#include "serving/handoff_store.h"
#include "serving/local_backend.h"

namespace cairn::cli {

namespace {

struct WorkerArgs {
  std::string model;
  serving::LocalBackendOptions backend;
  int64_t kv_cache_mb = 0;
  std::string controller;
  std::string name;
  std::string listen = "127.0.0.1:0";
  std::string advertise;
  int heartbeat_ms = 2000;
  double drain_seconds = 30;
  int max_message_mb = 16;
  // A distributed LLM: the model computed by rank_size `cairn agent`s.
  int rank_size = 0;
  int stage_size = 1;
  DistributedFlags distributed;
  // Prefill → decode handoff.
  std::string role = "both";
  int64_t handoff_timeout_ms = 30000;
  int64_t handoff_buffer_mb = 1024;
  int nice = -1;  // -1: 10 for --role prefill, else 0
};

// Waits up to `seconds` for SIGTERM or SIGINT (blocked in every thread, so
// only this call sees them); returns the signal or 0 on timeout.
int wait_signal(const sigset_t& set, double seconds) {
  timespec ts;
  ts.tv_sec = static_cast<time_t>(seconds);
  ts.tv_nsec = static_cast<long>((seconds - static_cast<double>(ts.tv_sec)) * 1e9);
  const int sig = sigtimedwait(&set, nullptr, &ts);
  return sig > 0 ? sig : 0;
}

std::string default_name() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') return "worker";
  return std::string(host) + "-" + std::to_string(getpid());
}

Status run_worker(WorkerArgs a) {
  std::string listen_host;
  int listen_port = 0;
  if (!api::split_host_port(a.listen, &listen_host, &listen_port))
    return Status::error("--listen '" + a.listen + "' is not HOST:PORT");
  if (!a.advertise.empty() && !api::split_host_port(a.advertise, nullptr, nullptr))
    return Status::error("--advertise '" + a.advertise + "' is not HOST:PORT");
  if (a.name.empty()) a.name = default_name();
  {
    cluster::WorkerAgentOptions probe;
    probe.controller = a.controller;
    probe.name = a.name;
    probe.advertise = a.advertise.empty() ? a.listen : a.advertise;
    probe.heartbeat_ms = a.heartbeat_ms;
    probe.role = a.role;
    Status ok = cluster::WorkerAgent::validate(probe);
    if (!ok.is_ok()) return ok;
  }

  // Every thread started from here on (engine, gRPC) inherits the blocked
  // mask, so the signals reach only wait_signal and never kill a worker
  // thread mid-request.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  // A prefill worker's prompts are throughput work and a decode worker's
  // tokens are latency work: where the two share cores, the decode worker
  // should run first. Linux keeps the nice value per thread and new threads
  // inherit it, so it is set here, before the engine and gRPC threads start.
  // A process started at a higher nice value keeps it (lowering needs privilege).
  const int nice = a.nice >= 0 ? a.nice : (a.role == "prefill" ? 10 : 0);
  errno = 0;
  const int current = getpriority(PRIO_PROCESS, 0);
  if (nice > 0 && !(errno == 0 && current >= nice) && setpriority(PRIO_PROCESS, 0, nice) != 0)
    spdlog::warn("--nice {}: could not lower this worker's CPU priority", nice);

  auto resolved = modelgen::model_or_demo(a.model);
  if (!resolved.is_ok()) return resolved.status();
  const std::string path = *resolved;
  a.backend.model_path = path;
  a.backend.kv_pool_bytes = a.kv_cache_mb * (int64_t(1) << 20);
  // With agents, the worker registers at once and reports Loading (so the
  // controller routes elsewhere) whenever their group is not whole.
  DistributedWorker agents;
  auto local = a.rank_size > 0 ? distributed_llm_backend(a.distributed, agents, path, a.rank_size, a.stage_size,
                                                         a.backend, false)
                               : serving::LocalBackend::create(a.backend);
  if (!local.is_ok()) return local.status();
  serving::LocalBackend& backend = **local;
  spdlog::info("worker model '{}' (context {} tokens, KV pool {} MiB)", backend.model_id(),
               backend.n_ctx(), backend.kv_pool_bytes() >> 20);

  // Both roles count; only a worker that decodes buffers incoming rows.
  serving::HandoffCounters handoff_counters;
  std::unique_ptr<serving::HandoffStore> handoff_store;
  if (a.role != "prefill") {
    serving::HandoffStoreOptions ho;
    ho.max_bytes = a.handoff_buffer_mb << 20;
    ho.timeout_ms = a.handoff_timeout_ms;
    handoff_store = std::make_unique<serving::HandoffStore>(backend, ho, &handoff_counters);
  }
  api::WorkerServiceOptions wo;
  wo.handoff_store = handoff_store.get();
  wo.handoff_counters = &handoff_counters;
  wo.role = a.role;
  wo.handoff_timeout_ms = a.handoff_timeout_ms;
  // Room for the first message's prompt under a peer with the same
  // --max-message-mb.
  wo.kv_push_chunk_bytes =
      std::min<int64_t>(int64_t(4) << 20, (int64_t(a.max_message_mb) << 20) / 2);
  auto service = api::make_worker_service(backend, wo);
  api::GrpcServerOptions so;
  so.address = a.listen;
  so.max_message_bytes = a.max_message_mb << 20;
  auto server = api::GrpcServer::start(so, {service.get()});
  if (!server.is_ok()) return server.status();
  const std::string bound = listen_host + ":" + std::to_string((*server)->port());
  // Tests and scripts parse this line to find a port chosen with port 0.
  std::fprintf(stderr, "cairn: worker listening on %s\n", bound.c_str());
  std::fflush(stderr);

  cluster::WorkerAgentOptions ao;
  ao.controller = a.controller;
  ao.name = a.name;
  ao.heartbeat_ms = a.heartbeat_ms;
  ao.role = a.role;
  ao.handoff_counters = &handoff_counters;
  if (!a.advertise.empty()) {
    ao.advertise = a.advertise;
  } else if (listen_host == "0.0.0.0" || listen_host == "[::]") {
    // A wildcard is no address a controller can dial: name this host instead.
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    ao.advertise =
        std::string(host[0] ? host : "127.0.0.1") + ":" + std::to_string((*server)->port());
  } else {
    ao.advertise = bound;
  }
  const std::string controller = a.controller;
  ao.on_registered = [controller](const std::string& id) {
    std::fprintf(stderr, "cairn: registered with %s as %s\n", controller.c_str(), id.c_str());
    std::fflush(stderr);
  };
  spdlog::info("worker '{}' advertising {} to controller {}", ao.name, ao.advertise, a.controller);
  auto agent = cluster::WorkerAgent::start(ao, backend);
  if (!agent) return Status::error("cannot start the controller agent");

  int sig = 0;
  while ((sig = wait_signal(signals, 3600)) == 0) {
  }
  spdlog::info("received signal {}: leaving the controller", sig);
  // Leave the controller first so that it routes nothing new here, then
  // refuse what still arrives (the controller retries it elsewhere).
  agent->stop_and_deregister();
  backend.start_draining();
  {
    const serving::Health h = backend.health();
    spdlog::info("draining: {} running, {} waiting (at most {} s)", h.running, h.waiting,
                 a.drain_seconds);
  }
  const auto drain_end =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(a.drain_seconds);
  for (;;) {
    const serving::Health h = backend.health();
    if (h.running == 0 && h.waiting == 0) break;
    const double left =
        std::chrono::duration<double>(drain_end - std::chrono::steady_clock::now()).count();
    if (left <= 0) {
      spdlog::warn("drain time is up with {} requests running, {} waiting: cancelling them",
                   h.running, h.waiting);
      break;
    }
    if (wait_signal(signals, std::min(left, 0.05)) != 0) {
      spdlog::warn("second signal: exiting at once");
      std::fflush(stderr);
      std::_Exit(1);
    }
  }
  // The handlers now only flush their last events; the grace covers that,
  // and cancels (freeing the engine's sequences) whatever outlived the drain.
  (*server)->shutdown(1.0);
  server.value().reset();
  service.reset();
  agent.reset();
  spdlog::info("worker stopped");
  return Status::ok();
}

}  // namespace

void register_worker(CLI::App& app, CommandResult& result) {
  auto* cmd = app.add_subcommand("worker", "serve a model to a cairn controller over gRPC");
  auto a = std::make_shared<WorkerArgs>();
  auto& b = a->backend;
  cmd->add_option("-m,--model", a->model, "GGUF model (default: the built-in demo model)");
  cmd->add_option("--controller", a->controller, "the controller's HOST:PORT")->required();
  cmd->add_option("--name", a->name, "worker name shown by the controller (default: HOST-PID)");
  cmd->add_option("--listen", a->listen, "HOST:PORT for the Worker service; port 0: any free port")
      ->capture_default_str();
  cmd->add_option("--advertise", a->advertise,
                  "HOST:PORT the controller dials (default: the listen host and bound port)");
  cmd->add_option("--heartbeat-ms", a->heartbeat_ms, "milliseconds between heartbeats")
      ->check(CLI::Range(cluster::kMinHeartbeatMs, cluster::kMaxHeartbeatMs))
      ->capture_default_str();
  cmd->add_option("--drain-seconds", a->drain_seconds,
                  "on SIGTERM/SIGINT, seconds running requests may finish")
      ->check(CLI::Range(0.0, 1e7))
      ->capture_default_str();
  cmd->add_option("--max-message-mb", a->max_message_mb, "largest gRPC message in MiB")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  cmd->add_option("--rank-size", a->rank_size,
                  "serve the model over this many `cairn agent`s (tensor x pipeline parallel; 0: in this process)")
      ->check(CLI::Range(0, 4096));
  cmd->add_option("--stage-size", a->stage_size, "pipeline stages of the agents (dividing --rank-size)")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  cmd->add_option("--distributed-address", a->distributed.address,
                  "HOST:PORT the agents join (with --rank-size); port 0: any free port")
      ->capture_default_str();
  cmd->add_option("--role", a->role,
                  "prefill: compute prompts and hand their K/V to a decode worker; decode: "
                  "take handed-over K/V and generate the rest; both: either")
      ->check(CLI::IsMember({"prefill", "decode", "both"}))
      ->capture_default_str();
  cmd->add_option("--handoff-timeout-ms", a->handoff_timeout_ms,
                  "a K/V push's deadline (prefill) and how long received rows wait for their "
                  "request (decode)")
      ->check(CLI::Range(int64_t(100), int64_t(3600000)))
      ->capture_default_str();
  cmd->add_option("--handoff-buffer-mb", a->handoff_buffer_mb,
                  "MiB of received K/V rows held at once (decode); more transfers are refused")
      ->check(CLI::Range(int64_t(1), int64_t(1) << 20))
      ->capture_default_str();
  cmd->add_option("--nice", a->nice,
                  "run this worker at nice value N (0-19), so that the workers it shares cores "
                  "with run first (default: 10 with --role prefill, else 0)")
      ->check(CLI::Range(0, 19));
  add_engine_flags(cmd, b, a->kv_cache_mb);
  cmd->add_option("--max-queue", b.max_queue, "requests waiting to run (refused beyond)")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  cmd->callback([a, &result] { result.status = run_worker(*a); });
}

}  // namespace cairn::cli
