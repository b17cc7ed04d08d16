// engine/step_budget.cpp — the stall-free chunk size from measured step costs.
#include "engine/step_budget.h"

#include <algorithm>
#include <cmath>

namespace cairn::engine {

namespace {
double blend(double old_value, double sample, double alpha) {
  return old_value <= 0 ? sample : old_value + alpha * (sample - old_value);
}
}  // namespace

void StepBudget::observe(int32_t n_decode, int32_t n_prefill, double seconds) {
  if (!(seconds >= 0) || !std::isfinite(seconds)) return;
  if (n_prefill <= 0) {
    if (n_decode > 0) decode_s_ = blend(decode_s_, seconds, kAlpha);
    return;
  }
  // Without a decode-only measurement yet, the whole step is the prompt's.
  const double base = n_decode > 0 ? decode_s_ : 0;
  const double per_token = std::max(0.0, seconds - base) / n_prefill;
  per_token_s_ = blend(per_token_s_, per_token, kAlpha);
}

double StepBudget::target_s() const {
  if (cfg_.max_step_ms > 0) return cfg_.max_step_ms / 1000;
  if (cfg_.max_step_ms < 0 || decode_s_ <= 0) return 0;
  return std::max(kAutoFactor * decode_s_, kAutoFloorMs / 1000);
}

int32_t StepBudget::prefill_tokens(int32_t n_decode, int32_t ceiling) const {
  ceiling = std::max(ceiling, 0);
  const double target = target_s();
  if (n_decode <= 0 || target <= 0 || decode_s_ <= 0) return ceiling;
  // Streams wait but a prompt token's cost is unknown: a small probe first.
  if (per_token_s_ <= 0) return std::min(ceiling, cfg_.min_prefill_tokens);
  const double room = target - decode_s_;
  const double fit = room > 0 ? std::floor(room / per_token_s_) : 0;
  const int32_t n = fit >= (double)ceiling ? ceiling : (int32_t)fit;
  return std::min(ceiling, std::max(n, cfg_.min_prefill_tokens));
}

}  // namespace cairn::engine
