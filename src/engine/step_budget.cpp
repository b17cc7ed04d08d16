// engine/step_budget.cpp — the stall-free chunk size from a line fitted to step times.
#include "engine/step_budget.h"

#include <algorithm>
#include <cmath>

namespace cairn::engine {

void StepBudget::observe(int32_t n_decode, int32_t n_prefill, double seconds) {
  const double x = (double)std::max(0, n_decode) + (double)std::max(0, n_prefill);
  if (!(seconds >= 0) || !std::isfinite(seconds) || x <= 0) return;
  const double a = seen_ ? kAlpha : 1.0;
  mx_ += a * (x - mx_);
  my_ += a * (seconds - my_);
  mxx_ += a * (x * x - mxx_);
  mxy_ += a * (x * seconds - mxy_);
  seen_ = true;
}

double StepBudget::per_token_s() const {
  if (!seen_) return 0;
  const double var = mxx_ - mx_ * mx_;
  // Steps of (nearly) one size say nothing about the split: all per token.
  if (var > 1e-6 * mx_ * mx_ + 1e-12) {
    const double slope = (mxy_ - mx_ * my_) / var;
    if (slope > 0 && my_ - slope * mx_ >= 0) return slope;
    if (slope > 0) return my_ / mx_;  // a negative fixed part is noise: no fixed part
  }
  return my_ / mx_;
}

double StepBudget::fixed_s() const {
  if (!seen_) return 0;
  return std::max(0.0, my_ - per_token_s() * mx_);
}

double StepBudget::target_s(int32_t n_decode) const {
  if (cfg_.max_step_ms > 0) return cfg_.max_step_ms / 1000;
  if (cfg_.max_step_ms < 0 || !seen_) return 0;
  const double decode_step = fixed_s() + per_token_s() * std::max(0, n_decode);
  return std::max(kAutoFactor * decode_step, kAutoFloorMs / 1000);
}

int32_t StepBudget::prefill_tokens(int32_t n_decode, int32_t ceiling, int64_t backlog) const {
  ceiling = std::max(ceiling, 0);
  const double target = target_s(n_decode);
  const double per_token = per_token_s();
  if (n_decode <= 0 || target <= 0 || per_token <= 0) return ceiling;
  const double room = target - fixed_s() - per_token * n_decode;
  const double fit = room > 0 ? std::floor(room / per_token) : 0;
  const int32_t most = std::min(ceiling, std::max(fit >= (double)ceiling ? ceiling : (int32_t)fit,
                                                   cfg_.min_prefill_tokens));
  int32_t n = most;
  if (backlog >= 0 && cfg_.drain_steps > 0) {
    const int64_t share = (backlog + cfg_.drain_steps - 1) / cfg_.drain_steps;
    n = (int32_t)std::clamp<int64_t>(share, std::min(most, cfg_.min_prefill_tokens), most);
  }
  const int32_t g = std::max(1, cfg_.token_granule);
  if (g > 1) {
    const int64_t total = (int64_t)n_decode + n;
    const int64_t up = (total + g - 1) / g * g - n_decode;
    const int64_t down = total / g * g - n_decode;
    if (up <= most)
      n = (int32_t)up;
    else if (down >= std::min(most, cfg_.min_prefill_tokens) && down > 0)
      n = (int32_t)down;
  }
  return n;
}

}  // namespace cairn::engine
