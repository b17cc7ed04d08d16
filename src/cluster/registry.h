// cluster/registry.h — the controller's list of workers.
// Owns worker membership: registration (ids are assigned here), heartbeats
// carrying each worker's load, deregistration, expiry after a silence and
// immediate removal when a stream to a worker breaks, plus the controller's
// own per-worker counters (requests in flight, requests routed). Thread-safe;
// time is injected so tests need no sleeps. Never talks to the network and
// never decides where a request goes (cluster/worker_picker.h does).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "cairn/v1/worker.pb.h"
#include "core/status.h"

namespace cairn::cluster {

struct RegistryOptions {
  int32_t heartbeat_ms = 2000;  // the interval workers are told to use
  int32_t timeout_ms = 6000;    // silence after which a worker is dropped
  size_t max_workers = 1024;    // registrations beyond are refused
};

// One worker as the controller sees it at a moment.
struct WorkerView {
  std::string id;
  std::string name;
  std::string address;
  v1::WorkerStatus status;
  int64_t last_heartbeat_ms_ago = 0;
  int64_t outstanding = 0;    // requests the controller has in flight to it
  uint64_t routed_total = 0;  // requests the controller has sent it

  bool ready() const { return status.state() == v1::WorkerStatus::READY; }
  bool serves(const std::string& model) const;  // empty model: any
  // "prefill", "decode" or "both" (cairn worker --role); an empty or unknown
  // role is "both", so workers that predate roles keep taking everything.
  std::string role() const;
};

class Registry {
 public:
  using Clock = std::function<int64_t()>;  // monotonic milliseconds
  static int64_t steady_ms();

  explicit Registry(RegistryOptions options = {}, Clock clock = &Registry::steady_ms);

  // Checks the message (sizes, a host:port address) and assigns a fresh id.
  // A worker registering again at an address already listed replaces that entry.
  Result<std::string> register_worker(const std::string& name, const std::string& address,
                                      const v1::WorkerStatus& status);
  // false: unknown id (never registered, expired, failed or deregistered).
  bool heartbeat(const std::string& id, const v1::WorkerStatus& status);
  bool deregister(const std::string& id);
  // A stream to the worker broke: drop it now; its next heartbeat re-registers it.
  void mark_failed(const std::string& id);

  // Workers alive now (expired ones are dropped first), in registration order.
  std::vector<WorkerView> list();
  // The controller's in-flight count; +1 also counts a routed request. Unknown ids are ignored.
  void add_outstanding(const std::string& id, int delta);
  // Raised on every membership change, so callers can cache per-worker state.
  uint64_t membership_version() const;

  const RegistryOptions& options() const { return options_; }

 private:
  struct Entry {
    uint64_t order = 0;
    std::string name;
    std::string address;
    v1::WorkerStatus status;
    int64_t last_seen_ms = 0;
    int64_t outstanding = 0;
    uint64_t routed_total = 0;
  };
  void expire_locked(int64_t now);

  RegistryOptions options_;
  Clock clock_;
  std::string id_prefix_;  // random per registry: ids never repeat across controller restarts
  mutable std::mutex mu_;
  std::map<std::string, Entry> workers_;
  uint64_t next_ = 1;
  uint64_t version_ = 0;
};

}  // namespace cairn::cluster
