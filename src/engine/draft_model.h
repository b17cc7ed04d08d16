// engine/draft_model.h — speculative decoding's second proposer: a small
// model of the target's vocabulary that guesses the next tokens itself.
// Owns the draft model's K/V (a paged cache of its own, sized once) and, per
// sequence, how many of its tokens that cache holds. The draft drafts
// greedily (its argmax at each position), so it is deterministic given the
// history: the engine's verification (Sampler::sample_draft: keep the draft
// with the target's probability p(draft), else sample from p without it) is
// then exactly rejection sampling against a point mass, and the output
// distribution is the target's for every sampler setting. Never samples,
// never touches the target's K/V; a draft that cannot get K/V rows proposes
// nothing (never an error).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/status.h"
#include "engine/draft.h"
#include "kv/kv_cache.h"
#include "model/load.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace cairn::engine {

struct DraftModelConfig {
  int32_t n_ctx = 4096;   // the target's tokens per sequence (capped by the draft's context)
  int32_t max_seqs = 64;  // sequences the pool is sized for
  // The draft's K/V pool; 0: room for n_ctx x max_seqs tokens, at most
  // 256 MiB (a pool that runs out only means fewer drafts).
  int64_t pool_bytes = 0;
  // Drafting stops at a token whose draft probability is below this (a
  // guess the target likely rejects costs a row of verification); 0: never.
  float p_min = 0.0f;
};

// Whether `draft` can propose tokens for `target`: the same number of ids,
// the same text and type for every id, the same BOS and EOS. The error is
// one line naming the first difference.
Status check_same_vocabulary(const Tokenizer& target, int64_t target_n_vocab,
                             const Tokenizer& draft, int64_t draft_n_vocab);

class DraftModel final : public DraftSource {
 public:
  // Borrows `model` (it must outlive this); errors on a model without a
  // language-model head or when the K/V pool cannot be made.
  static Result<std::unique_ptr<DraftModel>> create(model::Model& model, DraftModelConfig cfg);
  // Loads the draft from `path` (kernel threads as the target's) and checks
  // its vocabulary against the target's; it is owned from then on.
  static Result<std::unique_ptr<DraftModel>> load(const std::string& path, int n_threads,
                                                  const Tokenizer& target_tok,
                                                  int64_t target_n_vocab, DraftModelConfig cfg);

  // Feeds the tokens of `tokens` this cache lacks (one forward; the whole
  // prompt the first time), then drafts up to `max` tokens, one forward each,
  // and gives their rows back: the next call re-feeds those the target kept.
  void propose(uint64_t seq, std::span<const Token> tokens, int32_t max,
               std::vector<Token>& out) override;
  // The same for many sequences: their new tokens in shared forwards (up to
  // kFeedTokens rows each), then one forward per draft position for all.
  void propose_batch(std::span<const DraftAsk> asks) override;
  void forget(uint64_t seq) override;

  const kv::PagedKvCache& kv() const { return *kv_; }  // for tests: blocks return on forget()
  size_t tracked() const { return seqs_.size(); }
  const model::HParams& model_hparams() const { return model_.hparams(); }

 private:
  DraftModel(model::Model& m, DraftModelConfig cfg, std::unique_ptr<kv::PagedKvCache> kv)
      : model_(m), cfg_(cfg), kv_(std::move(kv)) {}
  // The draft's choice from one logits row; -1 when below p_min.
  Token pick(std::span<const float> logits) const;
  // Releases a sequence's rows and state: it proposes nothing now.
  void drop(uint64_t seq);

  struct State {
    SeqId kv_seq = 0;
    int32_t fed = 0;  // tokens of the sequence committed to kv_
  };
  model::LoadedModel owned_;  // set by load()
  model::Model& model_;
  DraftModelConfig cfg_;
  std::unique_ptr<kv::PagedKvCache> kv_;
  std::unordered_map<uint64_t, State> seqs_;
  SeqId next_kv_seq_ = 0;
  std::vector<SeqId> free_ids_;  // of forgotten sequences: ids stay dense
  model::Batch batch_;
  model::Logits logits_;
};

}  // namespace cairn::engine
