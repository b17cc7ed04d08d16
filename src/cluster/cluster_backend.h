// cluster/cluster_backend.h — the controller: requests spread over workers, as a serving::Backend.
// Owns request routing across the registry's workers: picks a ready worker
// that serves the model, and for a completion generates with it
// (cluster/worker_picker.h), forwards through a per-worker Backend (a
// RemoteBackend in production, fakes in tests), counts what it has in flight
// per worker, retries a request (generation or embedding) on another worker
// when its worker fails before the first token or the answer reached the
// client, and otherwise ends it with an error: never a hang. When the
// workers of a model include dedicated prefill and decode ones, a generation
// runs its prompt on a prefill worker that hands the K/V over to a decode
// worker, and a decode worker lost mid-stream is replaced by another that
// recomputes from the tokens so far. Also the union of models, the aggregated
// health and stats, and per-worker gauges for /metrics. Never speaks HTTP,
// never blocks on the network in submit.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "cluster/registry.h"
#include "cluster/worker_picker.h"
#include "serving/backend.h"

namespace cairn::cluster {

struct ClusterOptions {
  WorkerPickerOptions routing;
  int max_attempts = 3;            // workers tried per request before the first token
  int32_t max_queue = 256;         // requests in flight through the controller (503 beyond)
  double request_timeout_s = 600;  // deadline of each forwarded Generate
  double rpc_timeout_s = 10;       // tokenize / detokenize on a worker
  // Prefill → decode: KV blocks one request is guessed to take on its decode
  // worker, for requests routed there that its heartbeat does not show yet.
  int64_t decode_blocks_per_request = 16;
};

// Makes the Backend that reaches one worker; `on_broken` is to be called
// when the connection to it fails (the worker is then dropped at once).
using WorkerBackendFactory = std::function<std::shared_ptr<serving::Backend>(
    const WorkerView& worker, std::function<void()> on_broken)>;

class ClusterBackend final : public serving::Backend {
 public:
  // `registry` must outlive this object. Without a factory, workers are
  // reached with RemoteBackend over gRPC.
  ClusterBackend(Registry& registry, ClusterOptions options, WorkerBackendFactory factory = {});
  ~ClusterBackend() override;  // cancels what is in flight and waits for it

  Result<serving::RequestId> submit(serving::GenerateRequest req,
                                    std::shared_ptr<serving::EventSink> sink) override;
  // Routed like submit (same picker, same retry on a worker lost before it
  // answered), to any worker serving the model, embeddings-only ones included.
  Result<serving::RequestId> embed(serving::EmbedRequest req,
                                   std::shared_ptr<serving::EmbedSink> sink) override;
  void cancel(serving::RequestId id) override;
  std::vector<serving::ModelInfo> models() const override;
  serving::Health health() const override;
  serving::BackendStats stats() const override;
  Result<std::vector<serving::Token>> tokenize(const std::string& model, const std::string& text,
                                               bool add_special,
                                               bool parse_special = true) const override;
  Result<std::vector<std::string>> token_pieces(
      const std::string& model, const std::vector<serving::Token>& tokens) const override;
  Result<std::string> apply_template(const serving::GenerateRequest&) const override {
    return Status::invalid_argument(
        "the controller does not render chat templates: ask a worker's /apply-template");
  }
  Result<std::string> detokenize(const std::string& model,
                                 const std::vector<serving::Token>& tokens) const override;
  void start_draining() override;
  std::string extra_metrics() const override;

  int in_flight() const { return in_flight_.load(); }

  struct Flight;
  class RelaySink;
  class EmbedRelaySink;

 private:
  // Ready workers serving `model`, minus those named in `exclude`; for a
  // generation, only those whose model generates.
  std::vector<WorkerView> candidates(const std::string& model,
                                     const std::vector<std::string>& exclude,
                                     bool generation) const;
  std::shared_ptr<serving::Backend> backend_for(const WorkerView& w) const;
  // Starts the flight on the next worker; an error when no worker took it.
  // For a prefill/decode flight, the next prefill-capable worker, told to
  // hand off to a decode worker picked (and reserved) with it.
  Status dispatch(const std::shared_ptr<Flight>& flight);
  // Continues a flight whose first tokens were sent on a decode-capable
  // worker (any generating one when none is left): with the rows under
  // `handoff_id` on the reserved decode worker, or recomputing when it is
  // empty; an error when no worker took it.
  Status dispatch_decode(const std::shared_ptr<Flight>& flight, std::string handoff_id);
  // After an attempt failed with `err`: true when another attempt has the flight now.
  bool recover(const std::shared_ptr<Flight>& flight, const Status& err);
  // Whether a generation for `model` runs as prefill then decode now.
  bool pd_mode(const std::string& model) const;
  // The decode worker for a new handoff (dedicated first, then "both"; not
  // `prefill_id` where another exists), with its reservation counted.
  std::optional<WorkerView> reserve_decode(const std::shared_ptr<Flight>& flight,
                                           const std::string& prefill_id);
  void release_reservation(Flight& flight);
  // Counts a new flight in and dispatches it; its id, or why nobody took it.
  Result<serving::RequestId> start(const std::shared_ptr<Flight>& flight);
  void finished(serving::RequestId id);
  // Called by the relay when an attempt ended with `err` before any token.
  bool retry(const std::shared_ptr<Flight>& flight, const Status& err);
  // Why no worker can take a request for `model` (ok when one can):
  // NotFound, Unavailable, or for a generation InvalidArgument when every
  // worker serving it is embeddings-only.
  Status no_worker_error(const std::string& model, bool generation) const;

  Registry& registry_;
  ClusterOptions options_;
  WorkerBackendFactory factory_;
  mutable WorkerPicker picker_;
  std::atomic<bool> draining_{false};
  std::atomic<bool> stopping_{false};
  std::atomic<int> in_flight_{0};
  std::atomic<serving::RequestId> next_id_{1};

  mutable std::mutex mu_;
  std::map<serving::RequestId, std::shared_ptr<Flight>> flights_;
  // Per worker id; entries of workers that left move to retired_ (the calls
  // they may still run keep their sinks pointing here) until destruction.
  mutable std::map<std::string, std::shared_ptr<serving::Backend>> backends_;
  mutable std::vector<std::shared_ptr<serving::Backend>> retired_;
  mutable uint64_t seen_version_ = 0;
  // Decode workers chosen for handoffs whose decode part has not started
  // (by worker id), so that a burst of requests spreads over them.
  std::map<std::string, int> pending_decode_;

  // Prefill → decode.
  std::string handoff_prefix_;  // random per controller: handoff ids never repeat
  std::atomic<uint64_t> next_handoff_{1};
  std::atomic<uint64_t> pd_requests_{0};
  std::atomic<uint64_t> pd_handoffs_{0};
  std::atomic<uint64_t> fallback_transfer_{0};
  std::atomic<uint64_t> fallback_decode_lost_{0};
  std::atomic<uint64_t> fallback_prefill_lost_{0};
};

}  // namespace cairn::cluster
