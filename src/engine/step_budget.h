// engine/step_budget.h — how many prompt tokens a step may take so running streams keep flowing.
// Owns the measured cost model of this host and model (seconds of a step
// with only decode tokens, and seconds per prompt token on top of it, both
// moving averages) and the step-time target derived from it (Sarathi-Serve's
// stall-free batching: a long prompt is cut into chunks sized by time, not
// by a fixed token count, so every running stream gets its next token within
// the target while the prompt still advances every step). Pure arithmetic on
// what the engine observes: never schedules or times anything itself.
#pragma once

#include <cstdint>

namespace cairn::engine {

struct StepBudgetConfig {
  // The target step time in ms: > 0 fixed; 0 automatic (kAutoFactor times
  // the measured decode-only step, at least kAutoFloorMs); < 0 off (prompt
  // chunks limited by the token budget only).
  double max_step_ms = 0;
  // Prompt tokens a step always may take, whatever the target: long
  // prompts never starve.
  int32_t min_prefill_tokens = 16;
};

class StepBudget {
 public:
  static constexpr double kAutoFactor = 4.0;
  static constexpr double kAutoFloorMs = 10.0;
  static constexpr double kAlpha = 0.2;  // weight of the newest observation

  explicit StepBudget(StepBudgetConfig cfg = {}) : cfg_(cfg) {}

  // One step's forward: decode tokens (one per running stream), prompt
  // tokens, and the seconds it took.
  void observe(int32_t n_decode, int32_t n_prefill, double seconds);

  // Prompt tokens the next step may take when it carries `n_decode` decode
  // tokens: `ceiling` when off, when no stream decodes (nobody waits), or
  // before a decode step was measured; min_prefill_tokens while a prompt
  // token's cost is unknown; else as many as fit the target, at least
  // min_prefill_tokens, at most `ceiling`.
  int32_t prefill_tokens(int32_t n_decode, int32_t ceiling) const;

  // The step-time target in seconds (0 when off or not yet known).
  double target_s() const;
  double decode_step_s() const { return decode_s_; }
  double prefill_token_s() const { return per_token_s_; }

 private:
  StepBudgetConfig cfg_;
  double decode_s_ = 0;     // a decode-only step (0: not measured yet)
  double per_token_s_ = 0;  // one prompt token on top of the decode part
};

}  // namespace cairn::engine
