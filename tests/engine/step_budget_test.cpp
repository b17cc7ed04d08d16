// Stall-free batching: the chunk-size arithmetic, and a scheduler driven by
// a model of step time (a fixed cost per step, per decode token and per
// prompt token) in place of a clock: a long prompt arriving among running
// streams never makes a step longer than the target, and still completes.
#include "engine/step_budget.h"

#include <gtest/gtest.h>

#include "engine/scheduler.h"
#include "engine_test_util.h"

namespace cairn::engine {
namespace {

using test_support::demo;
using test_support::make_kv;

TEST(StepBudget, OffUnmeasuredAndFitted) {
  StepBudget off(StepBudgetConfig{-1});
  off.observe(8, 0, 0.010);
  off.observe(8, 100, 0.5);
  EXPECT_EQ(off.prefill_tokens(8, 512), 512);
  EXPECT_EQ(off.target_s(8), 0);

  StepBudget b(StepBudgetConfig{0, 16});
  EXPECT_EQ(b.prefill_tokens(8, 512), 512);  // nothing measured yet
  // Steps on a line: 6 ms + 1 ms per token.
  b.observe(8, 0, 0.014);
  b.observe(8, 100, 0.114);
  b.observe(4, 20, 0.030);
  EXPECT_NEAR(b.per_token_s(), 0.001, 1e-9);
  EXPECT_NEAR(b.fixed_s(), 0.006, 1e-9);
  EXPECT_NEAR(b.target_s(8), 4 * 0.014, 1e-9);  // 4x the streams' own step
  EXPECT_EQ(b.prefill_tokens(0, 512), 512);     // nobody decodes: nobody waits
  EXPECT_NEAR(b.prefill_tokens(8, 512), 42, 1);  // (56 - 14) ms / 1 ms
  EXPECT_EQ(b.prefill_tokens(8, 20), 20);       // never above the ceiling
  // One step size only: everything is per token.
  StepBudget flat(StepBudgetConfig{0});
  flat.observe(10, 0, 0.010);
  flat.observe(10, 0, 0.010);
  EXPECT_NEAR(flat.per_token_s(), 0.001, 1e-12);
  EXPECT_EQ(flat.fixed_s(), 0);
  // The automatic target has a floor; a fixed one is taken as given, and
  // the minimum applies when it leaves no room.
  StepBudget tiny(StepBudgetConfig{0});
  tiny.observe(1, 0, 0.0001);
  EXPECT_DOUBLE_EQ(tiny.target_s(1), StepBudget::kAutoFloorMs / 1000);
  StepBudget fixed(StepBudgetConfig{100, 8});
  fixed.observe(4, 0, 0.098);
  fixed.observe(4, 8, 0.098 + 8 * 0.005);
  EXPECT_EQ(fixed.prefill_tokens(4, 512), 8);
  // Bad observations are ignored.
  const double before = fixed.per_token_s();
  fixed.observe(4, 8, -1);
  fixed.observe(4, 8, std::numeric_limits<double>::quiet_NaN());
  fixed.observe(0, 0, 1.0);
  EXPECT_EQ(fixed.per_token_s(), before);
}

TEST(StepBudget, PromptTokensSpreadOverStepsWithinTheTarget) {
  // 6 ms + 1 ms per token; 8 streams decode: the target (56 ms) leaves 42.
  StepBudget b(StepBudgetConfig{0, 16});
  b.observe(8, 0, 0.014);
  b.observe(8, 100, 0.114);
  EXPECT_EQ(b.prefill_tokens(8, 512, 100), 25);   // a quarter of what waits
  EXPECT_EQ(b.prefill_tokens(8, 512, 101), 26);   // rounded up: the backlog drains
  EXPECT_EQ(b.prefill_tokens(8, 512, 20), 16);    // never below the minimum
  EXPECT_NEAR(b.prefill_tokens(8, 512, 1000), 42, 1);  // never above the target
  EXPECT_EQ(b.prefill_tokens(8, 512, 0), 16);     // an unknown or empty backlog: the old rule
  EXPECT_NEAR(b.prefill_tokens(8, 512, -1), 42, 1);
  EXPECT_EQ(b.prefill_tokens(0, 512, 100), 512);  // nobody decodes: the whole budget
  StepBudget all(StepBudgetConfig{.max_step_ms = 0, .drain_steps = 0});
  all.observe(8, 0, 0.014);
  all.observe(8, 100, 0.114);
  EXPECT_NEAR(all.prefill_tokens(8, 512, 100), 42, 1);  // spreading off: what fits the target

  // Kernels that take 16 tokens at a time: decode + prompt tokens fill whole
  // tiles, rounded up while the target allows, else down.
  StepBudget tiles(StepBudgetConfig{.max_step_ms = 0, .token_granule = 16});
  tiles.observe(8, 0, 0.014);
  tiles.observe(8, 100, 0.114);
  EXPECT_EQ(tiles.prefill_tokens(8, 512, 100), 40);   // 8 + 25 = 33: up to 48, within the target
  EXPECT_EQ(tiles.prefill_tokens(8, 512, 60), 24);    // 8 + 15 -> 16 below the minimum, 8 + 24 = 32
  EXPECT_EQ(tiles.prefill_tokens(8, 512, 1000), 40);  // 8 + 42 = 50: down to 48
  EXPECT_EQ(tiles.prefill_tokens(8, 30, 1000), 24);   // the ceiling holds: 8 + 30 down to 32
  for (int64_t backlog : {0, 1, 17, 63, 64, 100, 170, 1000}) {
    const int32_t n = tiles.prefill_tokens(8, 512, backlog);
    EXPECT_LE(n, 42) << backlog;
    EXPECT_GE(n, 16) << backlog;
  }
}

class NullSink final : public SequenceSink {
 public:
  void on_token(const TokenOutput&) override {}
  void on_end(const EndOutput&) override {}
  void on_error(const Status&) override {}
};

std::unique_ptr<Sequence> make_seq(RequestId id, int32_t n_prompt) {
  EngineRequest r;
  for (int32_t i = 0; i < n_prompt; ++i) r.prompt.push_back(10 + ((int32_t)id * 7 + i) % 200);
  r.sampling.temperature = 0;
  auto sampler = Sampler::create(r.sampling, 512);
  EXPECT_TRUE(sampler.is_ok());
  StopChecker stop(*demo().tokenizer, {});
  return std::make_unique<Sequence>(id, std::move(r), std::move(*sampler), std::move(stop),
                                    std::make_shared<NullSink>());
}

// Step time on a made-up host: 20 ms a step and 4 ms per token (prefill
// ~250 tokens/s, as a 1B model on two cores).
double step_seconds(const ScheduledBatch& plan) {
  return 0.020 + 0.004 * (plan.decode_tokens + plan.prefill_tokens);
}

TEST(StepBudget, LongPromptsAmongStreamsStayUnderTheTargetAndComplete) {
  auto kv = make_kv(*demo().model, 512);
  Scheduler s({512, 64});
  StepBudget budget(StepBudgetConfig{0, 16});
  ScheduledBatch plan;
  auto step = [&] {
    s.schedule(*kv, plan, budget.prefill_tokens(s.decoding(), 512, s.prompt_backlog()));
    const double t = step_seconds(plan);
    budget.observe(plan.decode_tokens, plan.prefill_tokens, t);
    s.commit(plan, *kv);
    for (auto& c : plan.chunks)
      if (c.wants_logits) c.seq->tokens.push_back(42);
    return t;
  };
  for (RequestId id = 1; id <= 16; ++id) s.add(make_seq(id, 8));
  step();  // the 16 short prompts, before anyone decodes
  for (int i = 0; i < 5; ++i) step();  // decode only: 28 ms steps
  const double target = budget.target_s(16);
  EXPECT_NEAR(target, 4 * (0.020 + 16 * 0.004), 1e-9);

  // Two 1,024-token prompts arrive.
  EXPECT_EQ(s.prompt_backlog(), 0);
  s.add(make_seq(100, 1024));
  s.add(make_seq(101, 1024));
  EXPECT_EQ(s.prompt_backlog(), 2048);
  double longest = 0, elapsed = 0;
  int steps = 0;
  auto done = [&] {
    int32_t prefilled = 0;
    for (const auto& c : plan.chunks)
      if (c.seq->id >= 100 && c.wants_logits) ++prefilled;
    return prefilled;
  };
  int finished = 0;
  while (finished < 2 && steps < 2000) {
    const double t = step();
    longest = std::max(longest, t);
    elapsed += t;
    finished += done();
    ++steps;
  }
  ASSERT_EQ(finished, 2) << "the long prompts never completed";
  // The first long prompt decodes once prefilled: the target for 17 streams.
  EXPECT_LE(longest, budget.target_s(17) + 1e-9) << "a step ran over the target";
  // The prompt tokens' own time (4 ms each) is most of the elapsed time:
  // cutting them into chunks costs only the decode parts of the extra steps.
  const double prompt_time = 2048 * 0.004;
  EXPECT_LT(elapsed, 2.0 * prompt_time) << steps << " steps";

  // Off: the same arrival makes one step of the whole budget.
  auto kv2 = make_kv(*demo().model, 512);
  Scheduler s2({512, 64});
  for (RequestId id = 1; id <= 16; ++id) s2.add(make_seq(id, 8));
  ScheduledBatch p2;
  s2.schedule(*kv2, p2);
  s2.commit(p2, *kv2);
  for (auto& c : p2.chunks) c.seq->tokens.push_back(42);
  s2.add(make_seq(100, 1024));
  s2.schedule(*kv2, p2);
  EXPECT_EQ(p2.prefill_tokens, 512 - 16);
  EXPECT_GT(step_seconds(p2), 5 * target);
}

}  // namespace
}  // namespace cairn::engine
