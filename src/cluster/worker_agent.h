// cluster/worker_agent.h — a worker's half of the Controller protocol.
// Owns one background thread and one channel to the controller: it registers
// the worker (name, advertised address, load), sends a heartbeat with fresh
// load every interval, registers again whenever the controller no longer
// knows it (a restarted controller gets it back within two heartbeats), and
// deregisters on stop. Every RPC has a deadline and stop cancels the one in
// flight, so it never holds up shutdown. Never serves requests itself and
// never changes the backend (it only reads its status).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "core/status.h"
#include "serving/backend.h"
#include "serving/handoff_store.h"

namespace cairn::cluster {

struct WorkerAgentOptions {
  std::string controller;  // the controller's HOST:PORT (any gRPC target)
  std::string name;        // human-readable; need not be unique
  std::string advertise;   // HOST:PORT where this worker's Worker service listens
  int heartbeat_ms = 2000;
  // Sent in every WorkerStatus: the worker's role in prefill → decode
  // handoffs ("prefill", "decode" or "both") and its handoff counters
  // (borrowed, outliving the agent; null: none sent).
  std::string role = "both";
  const serving::HandoffCounters* handoff_counters = nullptr;
  // Called on the agent's thread after each successful Register with the new
  // worker id (e.g. for the CLI's "registered" line). Must not block.
  std::function<void(const std::string& worker_id)> on_registered;
};

// Limits on the options (flags are untrusted input).
inline constexpr int kMinHeartbeatMs = 10;
inline constexpr int kMaxHeartbeatMs = 600000;

class WorkerAgent {
 public:
  // A one-line error for options the agent cannot work with.
  static Status validate(const WorkerAgentOptions& options);
  // Starts the agent thread (the first Register is sent at once). Returns
  // nullptr when validate() fails. `backend` must outlive the agent.
  static std::unique_ptr<WorkerAgent> start(WorkerAgentOptions options,
                                            const serving::Backend& backend);
  ~WorkerAgent();  // stop_and_deregister()
  WorkerAgent(const WorkerAgent&) = delete;
  WorkerAgent& operator=(const WorkerAgent&) = delete;

  // True while the controller has acknowledged us (last Register or
  // Heartbeat succeeded and it knew our id).
  bool registered() const;
  std::string worker_id() const;  // empty before the first Register
  // Stops heartbeats (cancelling an RPC in flight) and deregisters, waiting at
  // most one RPC deadline. Idempotent.
  void stop_and_deregister();

 private:
  struct Impl;
  explicit WorkerAgent(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cairn::cluster
