// serving/handoff_store.h — the decode side's buffer of incoming K/V transfers.
// Owns the prompt rows other workers push here (prefill → decode handoff,
// kv/transfer.h) from their first row until a Generate with `resume` takes
// them, with every check an untrusted sender needs: the geometry against the
// local cache, sizes, contiguity, a total byte cap and a timeout. Also owns
// HandoffCounters, the counts both roles keep for WorkerStatus. Thread-safe;
// never touches the network or the engine.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/status.h"
#include "kv/transfer.h"
#include "serving/backend.h"

namespace cairn::serving {

// Handoffs as one worker counts them (both roles; proto HandoffCounters).
struct HandoffCountersSnapshot {
  uint64_t sent = 0;  // transfers the decode worker acknowledged whole
  uint64_t send_failed = 0;
  uint64_t bytes_sent = 0;
  uint64_t received = 0;  // transfers received whole
  uint64_t bytes_received = 0;
  uint64_t resumed = 0;  // Generate calls that took a transfer's rows
  uint64_t expired = 0;  // transfers dropped unclaimed (timeout, refused, cut off)
  Histogram seconds;     // first row to the decode worker's reply
};

class HandoffCounters {
 public:
  static const std::vector<double>& seconds_bounds();

  std::atomic<uint64_t> sent{0}, send_failed{0}, bytes_sent{0};
  std::atomic<uint64_t> received{0}, bytes_received{0}, resumed{0}, expired{0};

  void observe_seconds(double s);
  HandoffCountersSnapshot snapshot() const;

 private:
  mutable std::mutex mu_;  // guards the histogram only
  Histogram seconds_{seconds_bounds()};
};

struct HandoffStoreOptions {
  int64_t max_bytes = int64_t(1) << 30;  // all transfers' rows together
  int64_t timeout_ms = 30000;            // since an entry's last activity
  size_t max_prompt_tokens = 1 << 20;
  size_t max_entries = 4096;  // transfers held at once
  size_t max_id_bytes = 256;
  // Injectable for tests; default: steady_clock::now.
  std::function<std::chrono::steady_clock::time_point()> clock = {};
};

class HandoffStore {
 public:
  // `backend` gives the local geometry (Backend::kv_geometry) and must
  // outlive the store; `counters` (optional, outliving it too) get received,
  // bytes_received and expired.
  HandoffStore(const Backend& backend, HandoffStoreOptions options,
               HandoffCounters* counters = nullptr);

  // Starts a transfer. InvalidArgument: a bad id, an empty or too long
  // prompt, a negative token id, a geometry that differs from the local one
  // (the message names the field), an id already held; NotFound/Unavailable
  // from kv_geometry; Unavailable "handoff buffer full" when the whole
  // prompt's rows would exceed max_bytes (they are reserved here, so a
  // transfer begun never fails for room later).
  Status begin(const std::string& id, const std::string& model, const kv::KvGeometry& geometry,
               std::vector<Token> prompt);
  // The next run: it must start where the last ended, stay within the
  // prompt and hold exactly geometry.bytes_for(n) bytes. Any failure drops
  // the transfer.
  Status append(const std::string& id, kv::KvRows rows);
  // Marks the transfer whole (ImportedKv::check must pass, else it is dropped).
  Status finish(const std::string& id);
  // Forgets a transfer whose stream broke off (no-op when absent or whole).
  void drop_incomplete(const std::string& id);
  // The whole transfer, removed from the store. NotFound when absent,
  // incomplete or expired.
  Result<std::shared_ptr<const kv::ImportedKv>> take(const std::string& id);

  int64_t bytes() const;  // reserved for the transfers held
  size_t size() const;    // transfers held (complete or not)

 private:
  struct Entry {
    std::string model;
    kv::ImportedKv kv;
    int32_t next = 0;      // the next position expected
    int64_t reserved = 0;  // bytes_for(prompt.size())
    bool whole = false;
    std::chrono::steady_clock::time_point touched;
  };
  std::chrono::steady_clock::time_point now() const;
  void expire_locked(std::chrono::steady_clock::time_point now);
  void erase_locked(std::map<std::string, Entry>::iterator it, bool count_expired);

  const Backend& backend_;
  HandoffStoreOptions options_;
  HandoffCounters* counters_;
  mutable std::mutex mu_;
  std::map<std::string, Entry> entries_;
  int64_t bytes_ = 0;
};

}  // namespace cairn::serving
