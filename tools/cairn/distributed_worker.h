// tools/cairn/distributed_worker.h — the distributed worker inside `cairn
// serve` (a distributed servable) and `cairn worker` (a distributed LLM
// under a controller): the Agents service on --distributed-address, made
// once, and the LLM backend whose engine runs here over the agents' shards.
#pragma once

#include <memory>
#include <string>

#include "api/grpc_server.h"
#include "core/status.h"
#include "distributed/coordinator.h"
#include "serving/local_backend.h"

namespace cairn::cli {

struct DistributedFlags {
  std::string address = "0.0.0.0:6200";
  double wait_agents_s = 0;  // 0: forever
  int grpc_max_message_mb = 100;
};

// The server goes before the coordinator it serves.
struct DistributedWorker {
  std::shared_ptr<distributed::Coordinator> coordinator;
  std::unique_ptr<api::GrpcServer> server;
  distributed::CoordinatorOptions options;
  ~DistributedWorker();
};

// Starts the Agents service for `co` (once; a later call must be for the
// same model over the same layout), then waits for the agents when `wait`.
Status start_distributed_worker(const DistributedFlags& flags, DistributedWorker& w,
                                const distributed::CoordinatorOptions& co, bool wait);

// The LLM in GGUF file `path` cut over rank_size agents in stage_size
// stages: every rank's cut is checked first, the agents are told the K/V
// pool a local backend would have, and the engine runs here over a
// tables-only cache (LocalBackendOptions::remote_model), reporting Loading
// while the agents' group is not whole. `o`: the backend's options.
Result<std::unique_ptr<serving::LocalBackend>> distributed_llm_backend(const DistributedFlags& flags,
                                                                       DistributedWorker& w, const std::string& path,
                                                                       int rank_size, int stage_size,
                                                                       serving::LocalBackendOptions o, bool wait);

// Prometheus text of the coordinator's counters ("" without one).
std::string distributed_metrics(const DistributedWorker& w);

}  // namespace cairn::cli
