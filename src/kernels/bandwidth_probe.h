// kernels/bandwidth_probe.h — how fast this machine reads memory.
// Owns a read-bandwidth probe: a buffer far bigger than the caches (or memory
// the caller names, such as a model's weights), split into one contiguous
// share per thread, each thread summing its share with the widest loads
// active_isa() allows; the best of several passes is the number a
// memory-bound kernel (decode) can hope to reach. Used by `cairn bench-model`
// to turn tok/s into an efficiency. Never touches model weights and never runs
// unless asked: it allocates (and faults in) the whole buffer on each call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

#include "core/cpu_features.h"
#include "core/status.h"

namespace cairn::kernels {

struct BandwidthOptions {
  size_t bytes = size_t{1} << 30;  // buffer size; rounded down to whole 4 KiB pages per thread
  int threads = 1;                 // >= 1
  int passes = 5;                  // >= 1; each pass reads the whole buffer once
};

struct BandwidthResult {
  double best_gbps = 0;  // bytes / time of the fastest pass, in 1e9 bytes per second
  double mean_gbps = 0;  // over all passes, to show how noisy the machine was
  // CPU time of this process / (wall time x threads) in the fastest pass: far
  // under 1 means other processes had the cores and the number is low.
  double best_cpu_share = 0;
  size_t bytes = 0;  // bytes each pass read
  int threads = 0;
  int passes = 0;
  Isa isa = Isa::Scalar;  // the load width used
  uint64_t checksum = 0;  // sum of every 64-bit word of the buffer (keeps the loads alive)
};

// Errors (one line) on a non-positive thread or pass count, a buffer smaller
// than one page per thread, or a failed allocation.
Result<BandwidthResult> measure_read_bandwidth(const BandwidthOptions& options);

// The same probe kept between passes (buffer mapped and faulted in once), for
// passes interleaved with other work: on a host whose bandwidth moves within
// seconds, a kernel's rate is only comparable with passes taken around it.
class ReadProbe {
 public:
  // options.passes is ignored; the other errors are measure_read_bandwidth's.
  static Result<std::unique_ptr<ReadProbe>> create(const BandwidthOptions& options);
  // A probe over memory the caller owns and keeps alive (a model's weights):
  // the streams' bytes in order, split into one contiguous share per thread.
  // Each stream is read from its first 8-byte boundary in whole words, so up
  // to 14 bytes of each go unread; bytes() counts only what is read. Errors
  // (one line) on a non-positive thread count or under one page per thread.
  static Result<std::unique_ptr<ReadProbe>> over(std::span<const std::span<const uint8_t>> streams,
                                                 int threads);
  ~ReadProbe();
  ReadProbe(const ReadProbe&) = delete;
  ReadProbe& operator=(const ReadProbe&) = delete;

  struct Pass {
    double gbps = 0;       // bytes() / wall time of the reads, 1e9 bytes per second
    double cpu_share = 0;  // CPU time of this process / (wall time x threads)
  };
  // One pass: each thread reads its share once (threads start before the clock).
  Pass pass();
  // `passes` (>= 1) passes summarized as measure_read_bandwidth does.
  BandwidthResult best_of(int passes);
  size_t bytes() const;
  int threads() const;
  Isa isa() const;
  uint64_t checksum() const;  // the last pass's sum of every word

 private:
  struct Impl;
  explicit ReadProbe(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Wrapping sum of n 64-bit words with the loads of `isa` (capped by
// active_isa()); every level gives the same value. Exposed for tests.
uint64_t sum_words(const uint64_t* words, size_t n, Isa isa);

}  // namespace cairn::kernels
