// tools/cairn/distributed_worker.cpp — see distributed_worker.h.
#include "distributed_worker.h"

#include <spdlog/spdlog.h>

#include <cstdio>

#include "distributed/distributed_llm.h"
#include "distributed/llm_step.h"
#include "gguf/gguf.h"
#include "model/model.h"

namespace cairn::cli {

DistributedWorker::~DistributedWorker() {
  if (coordinator) coordinator->shutdown();
  if (server) server->shutdown(1.0);
}

Status start_distributed_worker(const DistributedFlags& flags, DistributedWorker& w,
                                const distributed::CoordinatorOptions& co, bool wait) {
  if (!w.coordinator) {
    CAIRN_ASSIGN_OR_RETURN(auto made, distributed::Coordinator::create(co));
    w.coordinator = std::move(made);
    w.options = co;
    api::GrpcServerOptions go;
    go.address = flags.address;
    go.max_message_bytes = flags.grpc_max_message_mb << 20;
    auto started = api::GrpcServer::start(go, {w.coordinator.get()});
    if (!started.is_ok()) return Status::unavailable("--distributed-address: " + started.status().message());
    w.server = std::move(started.value());
    std::fprintf(stderr, "cairn: distributed worker listening on %s (port %d) for %d agents in %d stages\n",
                 flags.address.c_str(), w.server->port(), co.rank_size, co.stage_size);
    std::fflush(stderr);
  } else if (w.options.rank_size != co.rank_size || w.options.stage_size != co.stage_size ||
             w.options.llm_fingerprint != co.llm_fingerprint || w.options.kv_blocks != co.kv_blocks) {
    return Status::invalid_argument("this worker's agents are " + std::to_string(w.options.rank_size) + " ranks in " +
                                    std::to_string(w.options.stage_size) +
                                    " stages of one model; a worker serves one distributed model");
  }
  spdlog::info("distributed: {}", w.coordinator->state());
  if (!wait) return Status::ok();
  return w.coordinator->wait_ready(std::chrono::milliseconds(int64_t(flags.wait_agents_s * 1000)));
}

Result<std::unique_ptr<serving::LocalBackend>> distributed_llm_backend(const DistributedFlags& flags,
                                                                       DistributedWorker& w, const std::string& path,
                                                                       int rank_size, int stage_size,
                                                                       serving::LocalBackendOptions o, bool wait) {
  auto file = gguf::File::open(path);
  if (!file.is_ok()) return file.status();
  CAIRN_ASSIGN_OR_RETURN(const model::HParams hp, model::Model::read_hparams(**file));
  for (int r = 0; r < rank_size; ++r) {
    auto shard = model::shard_for_rank(hp, r, rank_size, stage_size);
    if (!shard.is_ok())
      return Status::invalid_argument(path + " cannot be cut over " + std::to_string(rank_size) + " agents in " +
                                      std::to_string(stage_size) + " stages: " + shard.status().message());
  }
  o.model_path = path;
  CAIRN_ASSIGN_OR_RETURN(const auto plan, serving::LocalBackend::kv_plan(o, hp));
  distributed::CoordinatorOptions co;
  co.rank_size = rank_size;
  co.stage_size = stage_size;
  co.llm_fingerprint = distributed::llm_fingerprint(hp);
  co.kv_blocks = uint32_t(plan.blocks);
  co.kv_block_tokens = 16;
  CAIRN_RETURN_IF_ERROR(start_distributed_worker(flags, w, co, wait));
  std::shared_ptr<distributed::Coordinator> c = w.coordinator;
  o.kv_pool_bytes = plan.pool_bytes;
  o.remote_model = [c](const model::HParams& h) -> Result<std::unique_ptr<model::Model>> {
    return distributed::make_distributed_llm(c, h);
  };
  o.kv_generation = [c] { return c->epoch(); };
  o.remote_ready = [c] { return c->ready(); };
  return serving::LocalBackend::create(o);
}

std::string distributed_metrics(const DistributedWorker& w) {
  if (!w.coordinator) return "";
  const distributed::RunStats s = w.coordinator->stats();
  const auto counter = [](const char* name, const char* help, double v) {
    return std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " counter\n" + name + " " +
           std::to_string(v) + "\n";
  };
  return counter("cairn_distributed_forwards_total", "Forwards run over the agents.", double(s.forwards)) +
         counter("cairn_distributed_agent_forward_seconds_total", "The agents' time in forwards, summed over agents.",
                 double(s.agent_forward_ns) * 1e-9) +
         counter("cairn_distributed_agent_comm_seconds_total",
                 "The agents' time inside their stage's collectives and sending to the next stage, summed over agents.",
                 double(s.agent_comm_ns) * 1e-9) +
         counter("cairn_distributed_agent_comm_bytes_total",
                 "Payload bytes the agents handed to their stage's collectives and to the next stage.",
                 double(s.agent_comm_bytes));
}

}  // namespace cairn::cli
