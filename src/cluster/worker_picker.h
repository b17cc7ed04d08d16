// cluster/worker_picker.h — which worker gets a request.
// Owns the routing policies over a snapshot of ready workers that serve the
// requested model: shortest-queue, round-robin and prefix-affinity
// (rendezvous hashing of the prompt's first characters, with a load
// fallback). Pure decisions: never touches the registry or the network.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cluster/registry.h"
#include "serving/backend.h"

namespace cairn::cluster {

enum class RoutePolicy { ShortestQueue, RoundRobin, PrefixAffinity };

std::optional<RoutePolicy> parse_route_policy(std::string_view name);
const char* route_policy_name(RoutePolicy p);

struct WorkerPickerOptions {
  RoutePolicy policy = RoutePolicy::ShortestQueue;
  size_t prefix_chars = 256;    // prefix-affinity: bytes of the prompt that choose the worker
  int64_t affinity_margin = 4;  // prefix-affinity: extra load tolerated on the chosen worker
};

// The load shortest-queue compares: the controller's own in-flight count
// (always fresh) plus the queue the worker last reported.
int64_t worker_load(const WorkerView& w);
// Used KV blocks as a fraction of the pool (0 when unknown); breaks load ties.
double kv_usage(const WorkerView& w);

// A decode worker's free KV blocks as the controller guesses them: the pool
// less the blocks in use at its last heartbeat, less `blocks_per_request`
// for each request the controller has in flight to it (that heartbeat may
// not show them yet). Negative when it looks full.
int64_t free_kv_estimate(const WorkerView& w, int64_t blocks_per_request);
// Where a handed-off request decodes: the candidate with the most estimated
// free blocks, ties to the lower load; -1 when there is none.
int pick_most_free_kv(const std::vector<WorkerView>& candidates, int64_t blocks_per_request);

// The bytes of a request's prompt that prefix-affinity hashes: the text, the
// token ids, or the chat messages' roles and contents, cut at `max_chars`.
std::string prefix_key(const serving::GenerateRequest& req, size_t max_chars);

class WorkerPicker {
 public:
  explicit WorkerPicker(WorkerPickerOptions options = {}) : options_(options) {}
  // Index of the chosen candidate, or -1 when there is none. `key` is the
  // request's prefix_key (only prefix-affinity reads it). Thread-safe.
  int pick(const std::vector<WorkerView>& candidates, std::string_view key);
  const WorkerPickerOptions& options() const { return options_; }

 private:
  WorkerPickerOptions options_;
  std::atomic<uint64_t> next_{0};
};

}  // namespace cairn::cluster
