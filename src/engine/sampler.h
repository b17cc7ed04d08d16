// engine/sampler.h — turning one sequence's logits into the next token.
// Owns the sampling parameters, their validation, the per-request RNG and the
// per-sequence penalty history. Never touches the model, the KV cache or text:
// it sees a span of logits and token ids only.
//
// Chain (llama.cpp's common_sampler order, which adds the logit bias before the
// penalties sampler runs):
//   logit_bias -> penalties (repetition, presence, frequency) -> top-k -> top-p
//   -> min-p -> temperature -> draw.
// top-p and min-p therefore see the distribution at temperature 1, as in
// llama.cpp. temperature == 0 is greedy: argmax of the biased, penalised logits
// (ties go to the lowest id). Reported log-probabilities are log_softmax of the
// RAW logits (before bias, penalties and filters), as OpenAI reports them.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <random>
#include <span>
#include <vector>

#include "core/status.h"
#include "tokenizer/tokenizer.h"

namespace cairn::engine {

// Defaults are the neutral ones (plain sampling from softmax(logits)), as the
// OpenAI API defines them; front-ends set their own defaults on top.
struct SamplingParams {
  float temperature = 1.0f;  // 0 = greedy
  int32_t top_k = 0;         // 0 = off
  float top_p = 1.0f;        // (0, 1]; 1 = off
  float min_p = 0.0f;        // [0, 1]; 0 = off
  float repetition_penalty =
      1.0f;                        // > 0; 1 = off. Positive logits are divided, negative multiplied
  float presence_penalty = 0.0f;   // [-2, 2]: subtracted once from every token seen in the window
  float frequency_penalty = 0.0f;  // [-2, 2]: subtracted once per occurrence in the window
  int32_t penalty_last_n = 64;     // penalty window over accepted tokens; 0 = off, -1 = all
  std::map<Token, float> logit_bias;  // added to the logit; [-100, 100]
  std::optional<uint64_t> seed;       // absent: drawn from std::random_device
  int32_t n_logprobs = 0;             // top-N log-probabilities to report, [0, kMaxLogprobs]

  static constexpr int32_t kMaxLogprobs = 20;

  // One-line error naming the bad field, or ok. vocab_size bounds logit_bias ids.
  Status validate(int32_t vocab_size) const;
};

struct TokenLogprob {
  Token token = -1;
  float logprob = 0.0f;
};

struct SampleResult {
  Token token = -1;
  float logprob = 0.0f;           // of `token` under the raw distribution
  std::vector<TokenLogprob> top;  // n_logprobs most likely raw tokens, descending
};

class Sampler {
 public:
  // Validates `params`; the sampler then serves one sequence.
  static Result<Sampler> create(SamplingParams params, int32_t vocab_size);

  // Picks the next token from `logits` (size must equal vocab_size). Does not
  // add it to the penalty history: call accept() with whatever token the
  // sequence really continues with.
  Result<SampleResult> sample(std::span<const float> logits);

  // Speculative verification of one drafted token: a token whose distribution
  // is exactly sample()'s. Greedy: the same argmax (the caller compares it
  // with the draft). Temperature > 0, for a draft proposed with certainty
  // (prompt lookup): the draft is kept with probability p(draft), p the
  // final processed distribution, else a token is drawn from p without the
  // draft, renormalised; so each token's probability is p's. Draws other
  // random numbers than sample(): a seeded request repeats with speculation
  // as it was, not as it would be without.
  Result<SampleResult> sample_draft(std::span<const float> logits, Token draft);

  // A token sampled elsewhere (a handoff's first tokens): the random draw
  // sample() would have made is made and discarded, and the token accepted,
  // so a seeded request continues with the same numbers.
  void replay(Token t);

  // Appends a token to the penalty history (the prompt's tokens too, as
  // llama.cpp does).
  void accept(Token t);
  void accept(std::span<const Token> tokens);

  // The seed in use (the drawn one when the request gave none), for reporting.
  uint64_t seed() const { return seed_; }
  const SamplingParams& params() const { return params_; }

  // Applies bias and penalties to `logits` in place, exactly as sample() does
  // before filtering. Exposed so tests can check the arithmetic.
  // Returns false when nothing applied (no bias, no active penalty).
  bool apply_bias_and_penalties(std::span<float> logits) const;

 private:
  Sampler(SamplingParams params, int32_t vocab_size, uint64_t seed);
  // Uniform in [0, 1) from 53 bits of the engine: fixed arithmetic, so a seed
  // reproduces across standard libraries (std::uniform_real_distribution
  // need not).
  double uniform();
  Result<SampleResult> sample_impl(std::span<const float> logits, Token draft);

  SamplingParams params_;
  int32_t vocab_size_ = 0;
  uint64_t seed_ = 0;
  std::mt19937_64 rng_;
  std::deque<Token> history_;  // last penalty_last_n accepted tokens (all when -1)
  // Scratch reused across calls so sampling allocates nothing steady-state.
  std::vector<float> work_;
  std::vector<int32_t> candidates_;
  std::vector<float> exps_;     // exp(l - max) of the raw logits (their log-softmax)
  std::vector<float> weights_;  // the draw's weight of each candidate
};

// log_softmax of `logits` at `token` and the top `n` entries (descending,
// ties by lower id). Used by sample() and by teacher-forced tests.
void raw_logprobs(std::span<const float> logits, Token token, int32_t n, SampleResult& out);

}  // namespace cairn::engine
