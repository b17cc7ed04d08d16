// collective/group.h — a group of processes (ranks) running collectives
// together: all-reduce, all-gather, broadcast, barrier and point-to-point
// send/recv, on gloo's TCP transport (Debian's libgloo-dev). Owns the
// rendezvous: ranks meet through a Store (a key-value table every rank can
// reach) under a prefix, so a group that must re-form (an agent replaced)
// meets again under a new prefix. Every call is bounded by the group's
// timeout and reports a dead or hung peer as an Unavailable status, never
// an exception or a hang. One group is not for concurrent use: callers
// serialise their collectives (one request at a time per group).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "core/status.h"

namespace cairn::collective {

// Where ranks publish and find each other's addresses. get() waits up to
// `timeout` for the key to appear.
class Store {
 public:
  virtual ~Store() = default;
  virtual Status set(const std::string& key, const std::string& value) = 0;
  virtual Result<std::string> get(const std::string& key, std::chrono::milliseconds timeout) = 0;
};

// A store in this process's memory: for groups whose ranks are threads of
// one process (tests, benchmarks) and as the worker's table behind the
// remote store agents use.
class MemoryStore final : public Store {
 public:
  Status set(const std::string& key, const std::string& value) override;
  Result<std::string> get(const std::string& key, std::chrono::milliseconds timeout) override;
  // Removes every key starting with `prefix` (a finished epoch's addresses).
  void erase_prefix(const std::string& prefix);
  size_t size() const;

 private:
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::map<std::string, std::string> table_;
};

struct GroupOptions {
  // The address this rank listens on for its peers (loopback by default;
  // a host's reachable address when ranks are on several hosts).
  std::string host = "127.0.0.1";
  // Bound on the rendezvous and on every collective: a peer that died or
  // hangs shows up as an error after at most this long.
  std::chrono::milliseconds timeout{5000};
};

class Group {
 public:
  // Joins the group `prefix` as `rank` of `size`: publishes this rank's
  // address, waits for every other rank's and connects to all of them.
  static Result<std::unique_ptr<Group>> connect(Store& store, const std::string& prefix, int rank, int size,
                                                const GroupOptions& options = {});
  ~Group();

  int rank() const { return rank_; }
  int size() const { return size_; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  // data[i] = sum over ranks of data[i], on every rank.
  Status all_reduce_sum(float* data, size_t count);
  // out = every rank's `bytes` bytes of `in`, in rank order (size() * bytes).
  Status all_gather(const void* in, size_t bytes, void* out);
  // data on every rank = data on `root`.
  Status broadcast(void* data, size_t bytes, int root);
  Status barrier();
  // Point to point; a send and its recv name the same tag.
  Status send(const void* data, size_t bytes, int peer, uint32_t tag);
  Status recv(void* data, size_t bytes, int peer, uint32_t tag);

 private:
  struct Impl;
  Group(std::unique_ptr<Impl> impl, int rank, int size, std::chrono::milliseconds timeout);
  std::unique_ptr<Impl> impl_;
  int rank_ = 0, size_ = 1;
  std::chrono::milliseconds timeout_;
  uint32_t next_tag_ = 1;  // collectives' tags (point-to-point tags are the caller's)
};

// The group a model runs its collectives over, shared by the model's
// operators and the process that forms the group: replaced when the group
// re-forms, empty while there is none. Changed only between forwards.
class GroupSlot {
 public:
  Group* get() const { return group_.get(); }
  void set(std::unique_ptr<Group> group) { group_ = std::move(group); }

 private:
  std::unique_ptr<Group> group_;
};

}  // namespace cairn::collective
