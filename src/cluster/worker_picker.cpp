// cluster/worker_picker.cpp — the policies that choose a worker for a request.
#include "cluster/worker_picker.h"

#include <limits>

namespace cairn::cluster {

namespace {

uint64_t fnv1a(std::string_view s, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

// splitmix64's finalizer: spreads the combined hash over all 64 bits so that
// rendezvous scores of similar worker names are independent.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

int shortest_queue(const std::vector<WorkerView>& c) {
  int best = -1;
  for (int i = 0; i < static_cast<int>(c.size()); ++i) {
    if (best < 0) {
      best = i;
      continue;
    }
    const int64_t li = worker_load(c[i]), lb = worker_load(c[best]);
    if (li < lb || (li == lb && kv_usage(c[i]) < kv_usage(c[best]))) best = i;
  }
  return best;
}

}  // namespace

std::optional<RoutePolicy> parse_route_policy(std::string_view name) {
  if (name == "shortest-queue") return RoutePolicy::ShortestQueue;
  if (name == "round-robin") return RoutePolicy::RoundRobin;
  if (name == "prefix-affinity") return RoutePolicy::PrefixAffinity;
  return std::nullopt;
}

const char* route_policy_name(RoutePolicy p) {
  switch (p) {
    case RoutePolicy::ShortestQueue:
      return "shortest-queue";
    case RoutePolicy::RoundRobin:
      return "round-robin";
    case RoutePolicy::PrefixAffinity:
      return "prefix-affinity";
  }
  return "?";
}

int64_t worker_load(const WorkerView& w) { return w.outstanding + w.status.queue_length(); }

double kv_usage(const WorkerView& w) {
  const int32_t total = w.status.kv_blocks_total();
  return total > 0 ? static_cast<double>(w.status.kv_blocks_used()) / total : 0.0;
}

int64_t free_kv_estimate(const WorkerView& w, int64_t blocks_per_request) {
  return int64_t{w.status.kv_blocks_total()} - w.status.kv_blocks_used() -
         w.outstanding * blocks_per_request;
}

int pick_most_free_kv(const std::vector<WorkerView>& c, int64_t blocks_per_request) {
  int best = -1;
  int64_t best_free = 0;
  for (int i = 0; i < static_cast<int>(c.size()); ++i) {
    const int64_t f = free_kv_estimate(c[i], blocks_per_request);
    if (best < 0 || f > best_free ||
        (f == best_free && worker_load(c[i]) < worker_load(c[best]))) {
      best = i;
      best_free = f;
    }
  }
  return best;
}

std::string prefix_key(const serving::GenerateRequest& req, size_t max_chars) {
  std::string key;
  if (const auto* text = std::get_if<std::string>(&req.prompt)) {
    key = text->substr(0, max_chars);
  } else if (const auto* ids = std::get_if<std::vector<serving::Token>>(&req.prompt)) {
    for (serving::Token t : *ids) {
      if (key.size() >= max_chars) break;
      key += std::to_string(t);
      key += ',';
    }
  } else if (const auto* chat = std::get_if<std::vector<serving::ChatMessage>>(&req.prompt)) {
    for (const auto& m : *chat) {
      if (key.size() >= max_chars) break;
      key += m.role;
      key += '\n';
      key += m.content;
      key += '\n';
    }
  }
  if (key.size() > max_chars) key.resize(max_chars);
  return req.model + '\0' + key;
}

int WorkerPicker::pick(const std::vector<WorkerView>& c, std::string_view key) {
  if (c.empty()) return -1;
  switch (options_.policy) {
    case RoutePolicy::ShortestQueue:
      return shortest_queue(c);
    case RoutePolicy::RoundRobin:
      return static_cast<int>(next_.fetch_add(1, std::memory_order_relaxed) % c.size());
    case RoutePolicy::PrefixAffinity: {
      // Rendezvous hashing on the worker's address (stable across controller
      // restarts, unlike its id): adding or losing a worker moves only the
      // prefixes that hashed to it.
      const uint64_t hk = fnv1a(key);
      int chosen = 0;
      uint64_t best = 0;
      for (int i = 0; i < static_cast<int>(c.size()); ++i) {
        const uint64_t score = mix(hk ^ fnv1a(c[i].address));
        if (i == 0 || score > best) {
          best = score;
          chosen = i;
        }
      }
      const int least = shortest_queue(c);
      if (worker_load(c[chosen]) > worker_load(c[least]) + options_.affinity_margin) return least;
      return chosen;
    }
  }
  return -1;
}

}  // namespace cairn::cluster
