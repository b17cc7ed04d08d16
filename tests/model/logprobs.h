// tests/model/logprobs.h — what the golden and shard tests compare of a
// logits row: its log-probabilities (in double) and its argmax.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

namespace cairn::test {

inline std::vector<double> log_softmax(std::span<const float> row) {
  double mx = -INFINITY;
  for (float x : row) mx = std::max(mx, (double)x);
  double sum = 0;
  for (float x : row) sum += std::exp((double)x - mx);
  const double lse = mx + std::log(sum);
  std::vector<double> out(row.size());
  for (size_t i = 0; i < row.size(); ++i) out[i] = (double)row[i] - lse;
  return out;
}

// The first index of the largest logit.
inline int32_t argmax(std::span<const float> row) {
  return (int32_t)(std::max_element(row.begin(), row.end()) - row.begin());
}

}  // namespace cairn::test
