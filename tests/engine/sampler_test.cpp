// Sampler tests: exact arithmetic of bias/penalties/logprobs, reproducibility,
// and empirical distributions against the definitions of each filter.
#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

namespace cairn::engine {
namespace {

const std::vector<float> kLogits = {2.0f, 1.5f, 1.0f, 0.5f, 0.0f, -0.5f, -1.0f, -3.0f};
constexpr int kDraws = 200000;

std::vector<double> softmax(const std::vector<double>& l) {
  double mx = *std::max_element(l.begin(), l.end());
  std::vector<double> p(l.size());
  double s = 0;
  for (size_t i = 0; i < l.size(); ++i) s += p[i] = std::exp(l[i] - mx);
  for (auto& v : p) v /= s;
  return p;
}

// Expected distribution: keep[i] says which tokens survive the filters;
// the survivors get softmax(logit / T).
std::vector<double> expected(const std::vector<bool>& keep, double temp) {
  std::vector<double> l(kLogits.size());
  for (size_t i = 0; i < l.size(); ++i) l[i] = keep[i] ? kLogits[i] / temp : -1e300;
  auto p = softmax(l);
  for (size_t i = 0; i < p.size(); ++i)
    if (!keep[i]) p[i] = 0;
  return p;
}

std::vector<double> frequencies(SamplingParams params) {
  params.seed = 1234;
  auto s = Sampler::create(params, static_cast<int32_t>(kLogits.size()));
  EXPECT_TRUE(s.is_ok()) << s.status().message();
  std::vector<double> counts(kLogits.size(), 0);
  for (int i = 0; i < kDraws; ++i) {
    auto r = s->sample(kLogits);
    EXPECT_TRUE(r.is_ok());
    counts[r->token] += 1;
  }
  for (auto& c : counts) c /= kDraws;
  return counts;
}

// Tolerance: 4 standard errors of a binomial proportion over kDraws draws
// (fixed seed, so the outcome is deterministic; 4 SE leaves room for the one
// seed we happen to use). Excluded tokens must never appear.
void expect_matches(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (want[i] == 0) {
      EXPECT_EQ(got[i], 0) << "token " << i << " should have been filtered out";
      continue;
    }
    double se = std::sqrt(want[i] * (1 - want[i]) / kDraws);
    EXPECT_NEAR(got[i], want[i], 4 * se) << "token " << i;
  }
}

TEST(SamplerDistribution, PlainSoftmaxAtTemperatureOne) {
  SamplingParams p;
  expect_matches(frequencies(p), expected(std::vector<bool>(8, true), 1.0));
}

TEST(SamplerDistribution, Temperature) {
  for (double t : {0.5, 0.7, 1.8}) {
    SamplingParams p;
    p.temperature = static_cast<float>(t);
    expect_matches(frequencies(p), expected(std::vector<bool>(8, true), t));
  }
}

TEST(SamplerDistribution, TopK) {
  SamplingParams p;
  p.top_k = 3;
  expect_matches(frequencies(p), expected({1, 1, 1, 0, 0, 0, 0, 0}, 1.0));
  p.temperature = 0.6f;
  expect_matches(frequencies(p), expected({1, 1, 1, 0, 0, 0, 0, 0}, 0.6));
}

TEST(SamplerDistribution, TopP) {
  // At T=1 the sorted probabilities are about .343 .208 .126 .077 .046 ...;
  // cumulative: .343 .551 .677 .754 .800(+) -> top_p 0.75 keeps 4 tokens.
  std::vector<double> raw(kLogits.begin(), kLogits.end());
  auto probs = softmax(raw);
  for (float top_p : {0.3f, 0.6f, 0.75f, 0.9f}) {
    std::vector<bool> keep(8, false);
    double cum = 0;
    for (size_t i = 0; i < probs.size(); ++i) {  // kLogits is already sorted descending
      keep[i] = true;
      cum += probs[i];
      if (cum >= top_p) break;
    }
    SamplingParams p;
    p.top_p = top_p;
    p.temperature = 1.3f;  // applied after top-p, on the survivors
    expect_matches(frequencies(p), expected(keep, 1.3));
  }
}

TEST(SamplerDistribution, MinP) {
  std::vector<double> raw(kLogits.begin(), kLogits.end());
  auto probs = softmax(raw);
  for (float min_p : {0.05f, 0.2f, 0.5f}) {
    std::vector<bool> keep(8);
    for (size_t i = 0; i < 8; ++i) keep[i] = probs[i] >= min_p * probs[0];
    SamplingParams p;
    p.min_p = min_p;
    expect_matches(frequencies(p), expected(keep, 1.0));
  }
}

TEST(SamplerDistribution, ChainTopKThenTopPThenMinP) {
  // top-k 5 renormalises over 5 tokens; top-p 0.8 of those; then min-p 0.3.
  std::vector<double> l5(kLogits.begin(), kLogits.begin() + 5);
  auto p5 = softmax(l5);
  std::vector<bool> keep(8, false);
  double cum = 0;
  size_t n = 0;
  for (; n < 5; ++n) {
    cum += p5[n];
    if (cum >= 0.8) break;
  }
  for (size_t i = 0; i <= n; ++i) keep[i] = p5[i] >= 0.3 * p5[0];
  SamplingParams p;
  p.top_k = 5;
  p.top_p = 0.8f;
  p.min_p = 0.3f;
  p.temperature = 0.9f;
  expect_matches(frequencies(p), expected(keep, 0.9));
}

TEST(Sampler, SeededRunsRepeatExactly) {
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_k = 6;
  p.top_p = 0.95f;
  p.repetition_penalty = 1.1f;
  p.seed = 99;
  auto a = Sampler::create(p, 8);
  auto b = Sampler::create(p, 8);
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  std::vector<Token> ta, tb;
  for (int i = 0; i < 2000; ++i) {
    ta.push_back(a->sample(kLogits)->token);
    a->accept(ta.back());
    tb.push_back(b->sample(kLogits)->token);
    b->accept(tb.back());
  }
  EXPECT_EQ(ta, tb);
  EXPECT_EQ(a->seed(), 99u);

  p.seed = 100;
  auto c = Sampler::create(p, 8);
  std::vector<Token> tc;
  for (int i = 0; i < 2000; ++i) {
    tc.push_back(c->sample(kLogits)->token);
    c->accept(tc.back());
  }
  EXPECT_NE(ta, tc);
}

TEST(Sampler, UnseededDrawsASeed) {
  SamplingParams p;
  auto a = Sampler::create(p, 8);
  auto b = Sampler::create(p, 8);
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  EXPECT_NE(a->seed(), b->seed());  // 2^-64 chance of a false failure
}

TEST(Sampler, GreedyIsArgmax) {
  std::mt19937 gen(7);
  std::normal_distribution<float> nd(0, 3);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<float> l(1000);
    for (auto& v : l) v = nd(gen);
    SamplingParams p;
    p.temperature = 0;
    p.top_k = 3;  // filters never change the argmax
    auto s = Sampler::create(p, 1000);
    ASSERT_TRUE(s.is_ok());
    auto r = s->sample(l);
    ASSERT_TRUE(r.is_ok());
    EXPECT_EQ(r->token, std::max_element(l.begin(), l.end()) - l.begin());
  }
  // Ties go to the lowest id.
  SamplingParams p;
  p.temperature = 0;
  auto s = Sampler::create(p, 4);
  std::vector<float> tie = {0.0f, 3.0f, 3.0f, 1.0f};
  EXPECT_EQ(s->sample(tie)->token, 1);
}

TEST(Sampler, PenaltiesChangeLogitsExactly) {
  SamplingParams p;
  p.repetition_penalty = 1.5f;
  p.presence_penalty = 0.25f;
  p.frequency_penalty = 0.5f;
  p.penalty_last_n = 4;
  auto s = Sampler::create(p, 6);
  ASSERT_TRUE(s.is_ok());
  // Token 0 falls out of the 4-token window; 1 twice, 2 once, 3 once.
  for (Token t : {0, 1, 2, 1, 3}) s->accept(t);
  std::vector<float> l = {3.0f, 3.0f, -2.0f, 0.0f, 1.0f, -1.0f};
  s->apply_bias_and_penalties(l);
  EXPECT_FLOAT_EQ(l[0], 3.0f);                             // outside the window
  EXPECT_FLOAT_EQ(l[1], 3.0f / 1.5f - 2 * 0.5f - 0.25f);   // positive: divided
  EXPECT_FLOAT_EQ(l[2], -2.0f * 1.5f - 1 * 0.5f - 0.25f);  // negative: multiplied
  EXPECT_FLOAT_EQ(l[3], 0.0f * 1.5f - 0.5f - 0.25f);       // zero counts as non-positive
  EXPECT_FLOAT_EQ(l[4], 1.0f);
  EXPECT_FLOAT_EQ(l[5], -1.0f);
}

TEST(Sampler, PenaltyWindowZeroDisables) {
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  p.penalty_last_n = 0;
  auto s = Sampler::create(p, 3);
  s->accept(1);
  std::vector<float> l = {1.0f, 1.0f, 1.0f};
  s->apply_bias_and_penalties(l);
  EXPECT_FLOAT_EQ(l[1], 1.0f);
}

TEST(Sampler, LogitBiasAddsAndBans) {
  SamplingParams p;
  p.logit_bias = {{2, 1.5f}, {0, -100.0f}};
  p.repetition_penalty = 2.0f;
  auto s = Sampler::create(p, 4);
  ASSERT_TRUE(s.is_ok());
  s->accept(2);
  std::vector<float> l = {5.0f, 1.0f, 1.0f, 0.0f};
  s->apply_bias_and_penalties(l);
  EXPECT_FLOAT_EQ(l[0], -95.0f);
  EXPECT_FLOAT_EQ(l[2], (1.0f + 1.5f) / 2.0f);  // bias first, then the penalty (llama.cpp order)
  EXPECT_FLOAT_EQ(l[1], 1.0f);

  // The banned token never wins, even greedily.
  SamplingParams g;
  g.temperature = 0;
  g.logit_bias = {{0, -100.0f}};
  auto gs = Sampler::create(g, 4);
  EXPECT_EQ(gs->sample(std::vector<float>{5.0f, 1.0f, 2.0f, 0.0f})->token, 2);
  SamplingParams r;
  r.logit_bias = {{0, -100.0f}};
  r.seed = 3;
  auto rs = Sampler::create(r, 4);
  for (int i = 0; i < 5000; ++i)
    ASSERT_NE(rs->sample(std::vector<float>{5.0f, 1.0f, 2.0f, 0.0f})->token, 0);
}

TEST(Sampler, LogprobsAreRawLogSoftmax) {
  std::vector<float> l = {1.0f, 3.0f, -2.0f, 2.0f, 3.0f};
  double lse = std::log(std::exp(1.0) + 2 * std::exp(3.0) + std::exp(-2.0) + std::exp(2.0));
  SamplingParams p;
  p.temperature = 0;
  p.n_logprobs = 3;
  p.logit_bias = {{3, 10.0f}};  // changes the choice, not the reported distribution
  auto s = Sampler::create(p, 5);
  auto r = s->sample(l);
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->token, 3);
  EXPECT_NEAR(r->logprob, 2.0 - lse, 1e-6);
  ASSERT_EQ(r->top.size(), 3u);
  EXPECT_EQ(r->top[0].token, 1);  // tie with 4: lower id first
  EXPECT_EQ(r->top[1].token, 4);
  EXPECT_EQ(r->top[2].token, 3);
  EXPECT_NEAR(r->top[0].logprob, 3.0 - lse, 1e-6);
  EXPECT_NEAR(r->top[2].logprob, 2.0 - lse, 1e-6);
  double total = 0;
  for (float v : l) total += std::exp(v - lse);
  EXPECT_NEAR(total, 1.0, 1e-9);

  SampleResult direct;
  raw_logprobs(l, 0, 2, direct);
  EXPECT_NEAR(direct.logprob, 1.0 - lse, 1e-6);
  EXPECT_EQ(direct.top.size(), 2u);
}

TEST(Sampler, LogprobsStableForHugeLogits) {
  std::vector<float> l = {1000.0f, 999.0f, -1000.0f};
  SampleResult r;
  raw_logprobs(l, 1, 1, r);
  EXPECT_NEAR(r.logprob, -1.0 - std::log1p(std::exp(-1.0)), 1e-5);
  EXPECT_TRUE(std::isfinite(r.top[0].logprob));
}

TEST(Sampler, ValidationRejectsBadParameters) {
  auto rejects = [](auto mutate, const char* field) {
    SamplingParams p;
    mutate(p);
    Status st = p.validate(100);
    EXPECT_FALSE(st.is_ok()) << field;
    EXPECT_NE(st.message().find(field), std::string::npos) << st.message();
    EXPECT_FALSE(Sampler::create(p, 100).is_ok()) << field;
  };
  const float nan = std::nanf(""), inf = INFINITY;
  rejects([&](SamplingParams& p) { p.temperature = nan; }, "temperature");
  rejects([&](SamplingParams& p) { p.temperature = -0.1f; }, "temperature");
  rejects([&](SamplingParams& p) { p.temperature = inf; }, "temperature");
  rejects([&](SamplingParams& p) { p.top_k = -1; }, "top_k");
  rejects([&](SamplingParams& p) { p.top_p = 0; }, "top_p");
  rejects([&](SamplingParams& p) { p.top_p = 1.01f; }, "top_p");
  rejects([&](SamplingParams& p) { p.top_p = nan; }, "top_p");
  rejects([&](SamplingParams& p) { p.min_p = -0.01f; }, "min_p");
  rejects([&](SamplingParams& p) { p.min_p = nan; }, "min_p");
  rejects([&](SamplingParams& p) { p.repetition_penalty = 0; }, "repetition_penalty");
  rejects([&](SamplingParams& p) { p.repetition_penalty = inf; }, "repetition_penalty");
  rejects([&](SamplingParams& p) { p.presence_penalty = 2.5f; }, "presence_penalty");
  rejects([&](SamplingParams& p) { p.frequency_penalty = nan; }, "frequency_penalty");
  rejects([&](SamplingParams& p) { p.penalty_last_n = -2; }, "penalty_last_n");
  rejects([&](SamplingParams& p) { p.logit_bias[100] = 1; }, "logit_bias");
  rejects([&](SamplingParams& p) { p.logit_bias[-1] = 1; }, "logit_bias");
  rejects([&](SamplingParams& p) { p.logit_bias[5] = nan; }, "logit_bias");
  rejects([&](SamplingParams& p) { p.logit_bias[5] = 101; }, "logit_bias");
  rejects([&](SamplingParams& p) { p.n_logprobs = 21; }, "n_logprobs");
  rejects([&](SamplingParams& p) { p.n_logprobs = -1; }, "n_logprobs");

  SamplingParams ok;
  ok.temperature = 0;
  ok.top_p = 1;
  ok.min_p = 1;
  ok.logit_bias[99] = -100;
  ok.n_logprobs = 20;
  EXPECT_TRUE(ok.validate(100).is_ok());
  EXPECT_FALSE(Sampler::create(ok, 0).is_ok());
}

TEST(Sampler, RejectsBadLogits) {
  SamplingParams p;
  auto s = Sampler::create(p, 3);
  EXPECT_FALSE(s->sample(std::vector<float>{1, 2}).is_ok());
  EXPECT_FALSE(s->sample(std::vector<float>{1, std::nanf(""), 2}).is_ok());
  EXPECT_FALSE(s->sample(std::vector<float>{1, INFINITY, 2}).is_ok());
  EXPECT_FALSE(s->sample(std::vector<float>{-INFINITY, -INFINITY, -INFINITY}).is_ok());
  // A masked (-inf) entry is fine and never drawn.
  for (int i = 0; i < 1000; ++i)
    ASSERT_NE(s->sample(std::vector<float>{0, -INFINITY, 0})->token, 1);
}

}  // namespace
}  // namespace cairn::engine

namespace cairn::engine {
namespace {

// The chi-squared statistic's critical value at p = 1e-3 for `dof` degrees
// of freedom (Wilson-Hilferty; within a few percent for dof >= 2).
double chi2_critical(int dof) {
  const double k = dof, z = 3.0902;  // the standard normal's 1 - 1e-3 quantile
  const double a = 2.0 / (9.0 * k);
  return k * std::pow(1 - a + z * std::sqrt(a), 3);
}

// Chi-squared of observed counts against probabilities `want` (bins with
// probability 0 must be empty; bins expecting < 5 are pooled).
void expect_chi2(const std::vector<double>& counts, const std::vector<double>& want, int n,
                 const std::string& what) {
  double stat = 0, pooled_obs = 0, pooled_exp = 0;
  int bins = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    if (want[i] == 0) {
      EXPECT_EQ(counts[i], 0) << what << ": token " << i << " is filtered out";
      continue;
    }
    const double e = want[i] * n;
    if (e < 5) {
      pooled_obs += counts[i];
      pooled_exp += e;
      continue;
    }
    stat += (counts[i] - e) * (counts[i] - e) / e;
    ++bins;
  }
  if (pooled_exp > 0) {
    stat += (pooled_obs - pooled_exp) * (pooled_obs - pooled_exp) / pooled_exp;
    ++bins;
  }
  if (bins < 2) return;
  EXPECT_LT(stat, chi2_critical(bins - 1)) << what << ": chi-squared " << stat << " over " << bins
                                           << " bins";
}

// sample_draft() keeps a drafted token with probability p(draft) and else
// draws from p without it: the emitted token's distribution is p's whatever
// the draft (the likeliest, a middling one, one the filters remove), over
// many seeds, through the whole chain (temperature, top-k, top-p, min-p).
TEST(SamplerDistribution, DraftVerificationKeepsTheDistribution) {
  constexpr int kSeeds = 4000;
  struct Case {
    SamplingParams params;
    std::vector<bool> keep;
    double temp;
  };
  std::vector<Case> cases;
  cases.push_back({SamplingParams{}, std::vector<bool>(8, true), 1.0});
  SamplingParams topk;
  topk.top_k = 4;
  topk.temperature = 0.8f;
  cases.push_back({topk, {1, 1, 1, 1, 0, 0, 0, 0}, 0.8});
  // top-p 0.7 at temperature 1 keeps .405 .245 .149 (cumulative .799).
  SamplingParams topp;
  topp.top_p = 0.7f;
  topp.temperature = 1.2f;
  cases.push_back({topp, {1, 1, 1, 0, 0, 0, 0, 0}, 1.2});
  for (size_t ci = 0; ci < cases.size(); ++ci) {
    const auto want = expected(cases[ci].keep, cases[ci].temp);
    for (Token draft : {0, 2, 6}) {
      std::vector<double> counts(kLogits.size(), 0);
      int kept = 0;
      for (int seed = 0; seed < kSeeds; ++seed) {
        SamplingParams p = cases[ci].params;
        p.seed = 1000003ull * (uint64_t)seed + 17;
        auto s = Sampler::create(p, (int32_t)kLogits.size());
        ASSERT_TRUE(s.is_ok());
        auto r = s->sample_draft(kLogits, draft);
        ASSERT_TRUE(r.is_ok());
        counts[(size_t)r->token] += 1;
        kept += r->token == draft;
      }
      expect_chi2(counts, want, kSeeds,
                  "case " + std::to_string(ci) + " draft " + std::to_string(draft));
      if (want[(size_t)draft] == 0) {
        EXPECT_EQ(kept, 0);
      }
    }
  }
}

TEST(Sampler, GreedyDraftVerificationIsTheArgmax) {
  SamplingParams p;
  p.temperature = 0;
  auto s = Sampler::create(p, (int32_t)kLogits.size());
  ASSERT_TRUE(s.is_ok());
  for (Token draft : {0, 3, 7}) {
    auto r = s->sample_draft(kLogits, draft);
    ASSERT_TRUE(r.is_ok());
    EXPECT_EQ(r->token, 0);
  }
}

}  // namespace
}  // namespace cairn::engine
