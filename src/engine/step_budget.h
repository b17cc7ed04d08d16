// engine/step_budget.h — how many prompt tokens a step may take so running streams keep flowing.
// Owns the measured cost model of this host and model and the step-time
// target derived from it (Sarathi-Serve's stall-free batching: a long prompt
// is cut into chunks sized by time, not by a fixed token count, so every
// running stream gets its next token within the target while the prompt
// still advances every step). The model is a line, seconds = fixed +
// per_token x tokens, fitted by exponentially weighted least squares over
// the steps seen: a step's decode and prompt tokens are rows of the same
// matrix products, and the fixed part is what every step pays (the weights
// read once). Within the target, prompt tokens are also spread over steps:
// a step takes about 1/drain_steps of the prompt tokens waiting, so a prompt
// arriving among running streams rides along in several similar steps
// instead of one long one, and the streams' token gaps stay even. Pure
// arithmetic on what the engine observes: never schedules or times anything
// itself.
#pragma once

#include <cstdint>

namespace cairn::engine {

struct StepBudgetConfig {
  // The target step time in ms: > 0 fixed; 0 automatic (kAutoFactor times
  // the modelled step of the running streams alone, at least kAutoFloorMs);
  // < 0 off (prompt chunks limited by the token budget only).
  double max_step_ms = 0;
  // Prompt tokens a step always may take, whatever the target: long
  // prompts never starve.
  int32_t min_prefill_tokens = 16;
  // While streams decode, a step takes at least 1/drain_steps of the prompt
  // tokens waiting (and at least min_prefill_tokens), within the target; <= 0:
  // as many as the target allows.
  int32_t drain_steps = 4;
  // Tokens the matmul kernels take at a time (kernels::batch_token_granule):
  // a step's decode + prompt tokens are rounded to a multiple of it, up when
  // that stays within the target, so no step pays for a mostly empty tile.
  int32_t token_granule = 1;
};

class StepBudget {
 public:
  static constexpr double kAutoFactor = 4.0;
  static constexpr double kAutoFloorMs = 10.0;
  static constexpr double kAlpha = 0.1;  // weight of the newest step in the fit

  explicit StepBudget(StepBudgetConfig cfg = {}) : cfg_(cfg) {}

  // One step's forward: decode tokens (one per running stream), prompt
  // tokens, and the seconds it took.
  void observe(int32_t n_decode, int32_t n_prefill, double seconds);

  // Prompt tokens the next step may take when it carries `n_decode` decode
  // tokens and `backlog` prompt tokens wait to be computed: `ceiling` when
  // off, when no stream decodes (nobody waits), or before any step was seen;
  // else backlog / drain_steps (rounded up), at most what fits the target, at
  // least min_prefill_tokens, at most `ceiling`, and with the decode tokens a
  // whole number of token_granule where that is possible. A negative backlog
  // is unknown: as many as fit the target.
  int32_t prefill_tokens(int32_t n_decode, int32_t ceiling, int64_t backlog = -1) const;

  // The target for a step carrying `n_decode` decode tokens, in seconds (0
  // when off or nothing is measured yet).
  double target_s(int32_t n_decode) const;
  // The fitted line (0, 0 before any step).
  double fixed_s() const;
  double per_token_s() const;

 private:
  StepBudgetConfig cfg_;
  bool seen_ = false;
  // Exponentially weighted means of x (tokens), y (seconds), x*x and x*y.
  double mx_ = 0, my_ = 0, mxx_ = 0, mxy_ = 0;
};

}  // namespace cairn::engine
