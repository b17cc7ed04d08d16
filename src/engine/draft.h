// engine/draft.h — where speculative decoding's draft tokens come from.
// Owns the DraftSource interface (a proposer of the next few tokens of one
// sequence, checked afterwards by the target model in one batched forward,
// engine/engine.cpp) and its first implementation, prompt lookup: the
// continuation of the latest earlier occurrence of the sequence's last
// n-gram (code edits, summaries and retrieval answers repeat their input).
// A proposer only guesses: a wrong guess costs compute, never output, since
// every draft token is verified against the target's own choice. Never
// touches the model, the KV cache or sampling.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace cairn::engine {

// One sequence's request for drafts in a batched proposal.
struct DraftAsk {
  uint64_t seq = 0;
  std::span<const Token> tokens;
  int32_t max = 0;
  std::vector<Token>* out = nullptr;
};

class DraftSource {
 public:
  virtual ~DraftSource() = default;
  // Every sequence of a step at once (a draft model runs them in shared
  // forwards); the default asks propose() for each.
  virtual void propose_batch(std::span<const DraftAsk> asks) {
    for (const DraftAsk& a : asks) propose(a.seq, a.tokens, a.max, *a.out);
  }
  // Fills `out` with up to `max` tokens guessed to follow `tokens` (the
  // sequence's prompt and generated tokens); empty when there is no guess.
  // `seq` names the sequence for a source that keeps state per sequence (a
  // draft model's K/V, engine/draft_model.h); forget() says it ended.
  virtual void propose(uint64_t seq, std::span<const Token> tokens, int32_t max,
                       std::vector<Token>& out) = 0;
  virtual void forget(uint64_t seq) { (void)seq; }
};

struct PromptLookupConfig {
  int32_t max_ngram = 3;  // the longest suffix looked up first
  int32_t min_ngram = 2;  // shorter suffixes match too often to be worth a draft
  int32_t window = 4096;  // the search covers the last `window` tokens: bounded cost per step
};

// Draft-free: the longest suffix n-gram (max_ngram down to min_ngram) that
// occurred earlier in the window proposes the tokens that followed its most
// recent occurrence. Stateless, so one instance serves every sequence.
class PromptLookup final : public DraftSource {
 public:
  explicit PromptLookup(PromptLookupConfig cfg = {}) : cfg_(cfg) {}
  void propose(uint64_t seq, std::span<const Token> tokens, int32_t max,
               std::vector<Token>& out) override;

 private:
  PromptLookupConfig cfg_;
};

// Two sources in turn: the first's guess when it has one, else the
// second's (--spec-lookup with --draft-model: a lookup hit costs no draft
// forward; a draft model catches up on the tokens it skipped when asked).
class FirstOfDrafts final : public DraftSource {
 public:
  FirstOfDrafts(std::shared_ptr<DraftSource> first, std::shared_ptr<DraftSource> second)
      : first_(std::move(first)), second_(std::move(second)) {}
  void propose(uint64_t seq, std::span<const Token> tokens, int32_t max,
               std::vector<Token>& out) override {
    first_->propose(seq, tokens, max, out);
    if (out.empty()) second_->propose(seq, tokens, max, out);
  }
  void propose_batch(std::span<const DraftAsk> asks) override {
    first_->propose_batch(asks);
    std::vector<DraftAsk> rest;
    for (const DraftAsk& a : asks)
      if (a.out->empty()) rest.push_back(a);
    if (!rest.empty()) second_->propose_batch(rest);
  }
  void forget(uint64_t seq) override {
    first_->forget(seq);
    second_->forget(seq);
  }

 private:
  std::shared_ptr<DraftSource> first_, second_;
};

}  // namespace cairn::engine
