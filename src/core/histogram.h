// core/histogram.h — a latency histogram as Prometheus exports it.
// Owns the buckets' counts, sum and count; the engine, the handoff counters
// and the serving layer's stats all use this one type. Not thread-safe:
// whoever observes from several threads guards it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

namespace cairn {

struct Histogram {
  std::vector<double> bounds;    // upper bounds, ascending (+Inf implied)
  std::vector<uint64_t> counts;  // bounds.size() + 1 buckets, not cumulative
  double sum = 0;
  uint64_t count = 0;

  Histogram() = default;
  explicit Histogram(std::vector<double> upper_bounds)
      : bounds(std::move(upper_bounds)), counts(bounds.size() + 1, 0) {}

  void observe(double seconds) {
    const size_t bucket = std::lower_bound(bounds.begin(), bounds.end(), seconds) - bounds.begin();
    ++counts[bucket];
    sum += seconds;
    ++count;
  }
};

}  // namespace cairn
