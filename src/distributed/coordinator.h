// distributed/coordinator.h — the distributed worker's side of a model cut
// over rank_size × stage_size agents. Owns the Agents gRPC service (agents
// join over one stream each; the rendezvous table for their groups), the
// group's life (formed once every rank has joined, re-formed under a new
// epoch when a rank leaves and a process with that rank joins again), the
// liveness watch (a ping per second; an agent that misses three is dropped,
// as one whose stream ends is), and the forwards: one at a time, inputs to
// the first stage's agents, outputs from the last stage's first agent, an
// error if any agent fails or leaves. DistributedSession puts it behind
// onnx::Session's interface, so a servable's batcher drives it as it drives
// a local model; an LLM's shards are driven by a DistributedLlm
// (distributed_llm.h) under a local engine.
#pragma once

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cairn/v1/agents.grpc.pb.h"
#include "collective/group.h"
#include "core/status.h"
#include "onnx/session.h"

namespace cairn::distributed {

struct CoordinatorOptions {
  int rank_size = 1;
  int stage_size = 1;
  // The agents' group timeout: the rendezvous and every collective.
  std::chrono::milliseconds group_timeout{5000};
  std::chrono::milliseconds ping_interval{1000};
  int missed_pings = 3;  // an agent silent this many intervals is dropped
  // A forward that takes longer than this fails (a guard, not a budget).
  std::chrono::milliseconds run_timeout{600000};
  // An LLM (GGUF) cut over the agents: the model's fingerprint
  // (llm_step.h), which every agent's file must have, and the K/V pool each
  // agent keeps. Empty: ONNX shards, checked by their inputs and outputs.
  std::string llm_fingerprint;
  uint32_t kv_blocks = 0;
  uint32_t kv_block_tokens = 16;
};

// Totals over the forwards run so far, summed over the agents.
struct RunStats {
  uint64_t forwards = 0;
  uint64_t agent_forward_ns = 0;  // each agent's whole forward
  uint64_t agent_comm_ns = 0;     // inside its stage's collectives, and sending to the next stage
  uint64_t agent_comm_bytes = 0;  // payload handed to both
};

class Coordinator final : public v1::Agents::Service {
 public:
  // rank_size >= 1, stage_size >= 1 dividing it.
  static Result<std::unique_ptr<Coordinator>> create(const CoordinatorOptions& options);
  ~Coordinator() override;

  grpc::Status Join(grpc::ServerContext* ctx,
                    grpc::ServerReaderWriter<v1::WorkerMessage, v1::AgentMessage>* stream) override;
  grpc::Status StoreSet(grpc::ServerContext* ctx, const v1::StoreSetRequest* req, v1::StoreSetReply* reply) override;
  grpc::Status StoreGet(grpc::ServerContext* ctx, const v1::StoreGetRequest* req, v1::StoreGetReply* reply) override;

  // Blocks until every rank has joined and the group is formed; timeout 0:
  // forever. The error lists the ranks still missing.
  Status wait_ready(std::chrono::milliseconds timeout);
  bool ready() const;
  // One line for logs and /health: "ready (epoch 3)", "waiting for ranks 2, 5", ...
  std::string state() const;

  // One forward (serialised with the others). Unavailable when the group is
  // not ready or breaks during the forward, or when `epoch` is given and the
  // group formed since is another.
  Result<std::vector<values::Tensor>> run(std::vector<values::Tensor> inputs,
                                          std::optional<uint64_t> epoch = std::nullopt);
  // Several forwards sent together (micro-batches of one step): each stage
  // starts the next while the next stage has this one. All fail if one does.
  Result<std::vector<std::vector<values::Tensor>>> run_pipelined(std::vector<std::vector<values::Tensor>> micro,
                                                                 std::optional<uint64_t> epoch = std::nullopt);
  int stage_size() const { return options_.stage_size; }
  // The epoch being formed or formed: it changes whenever an agent leaves
  // or the group re-forms (an LLM's K/V held by the agents is then lost).
  uint64_t epoch() const;
  RunStats stats() const;

  // The model's inputs (the first stage's) and outputs (the last stage's),
  // from the agents' Hellos; empty until they have joined.
  std::vector<onnx::ValueInfo> inputs() const;
  std::vector<onnx::ValueInfo> outputs() const;
  int64_t opset() const;

  // Ends every agent's stream and refuses new ones (before the gRPC server
  // shuts down).
  void shutdown();

 private:
  struct Member;
  explicit Coordinator(const CoordinatorOptions& options);
  void drop(int rank, const std::shared_ptr<Member>& m, const std::string& why);
  void start_forming_locked();
  void watch();
  int per_stage() const { return options_.rank_size / options_.stage_size; }
  std::string missing_locked() const;
  bool all_loaded_locked() const;
  bool llm() const { return !options_.llm_fingerprint.empty(); }

  CoordinatorOptions options_;
  collective::MemoryStore store_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<int, std::shared_ptr<Member>> members_;
  std::vector<onnx::ValueInfo> inputs_, outputs_;
  int64_t opset_ = 0;
  uint64_t epoch_ = 0;        // the epoch being formed or formed
  std::set<int> formed_;      // ranks that formed epoch_
  bool ready_ = false;
  bool stopping_ = false;
  std::chrono::steady_clock::time_point retry_form_at_{};  // a failed forming is retried then

  // The forwards in flight (those of one run_pipelined call).
  std::mutex run_mu_;
  uint64_t next_run_ = 0;
  struct Pending {
    uint64_t id = 0;
    std::set<int> waiting;
    std::optional<Status> error;
    std::vector<values::Tensor> outputs;
  };
  std::map<uint64_t, Pending> pending_;  // under mu_
  RunStats stats_;                  // under mu_
  std::atomic<uint64_t> epoch_seen_{0};  // epoch_, for epoch() without the lock

  std::thread watcher_;
};

// The agents' model as an onnx::Session for a servable's TensorModel.
std::unique_ptr<onnx::Session> make_distributed_session(std::shared_ptr<Coordinator> coordinator);

}  // namespace cairn::distributed
