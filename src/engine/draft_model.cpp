// engine/draft_model.cpp — a draft model's proposals: feed what it has not seen, draft greedily.
#include "engine/draft_model.h"

#include <algorithm>
#include <cmath>

namespace cairn::engine {

namespace {

constexpr int64_t kDefaultPoolCap = int64_t(256) << 20;

std::string shown(std::string_view text) {
  std::string s(text.substr(0, 40));
  return "'" + s + (text.size() > 40 ? "...'" : "'");
}

}  // namespace

Status check_same_vocabulary(const Tokenizer& target, int64_t target_n_vocab,
                             const Tokenizer& draft, int64_t draft_n_vocab) {
  const std::string head = "the draft model's vocabulary differs from the target's: ";
  if (target_n_vocab != draft_n_vocab || target.vocab_size() != draft.vocab_size())
    return Status::invalid_argument(head + std::to_string(draft_n_vocab) + " tokens against " +
                                    std::to_string(target_n_vocab));
  for (Token t = 0; t < target.vocab_size(); ++t) {
    if (target.token_text(t) != draft.token_text(t))
      return Status::invalid_argument(head + "token " + std::to_string(t) + " is " +
                                      shown(draft.token_text(t)) + " against " +
                                      shown(target.token_text(t)));
    if (target.attr(t) != draft.attr(t))
      return Status::invalid_argument(head + "token " + std::to_string(t) + " (" +
                                      shown(target.token_text(t)) + ") has another type");
  }
  if (target.bos() != draft.bos() || target.eos() != draft.eos())
    return Status::invalid_argument(head + "BOS/EOS are " + std::to_string(draft.bos()) + "/" +
                                    std::to_string(draft.eos()) + " against " +
                                    std::to_string(target.bos()) + "/" +
                                    std::to_string(target.eos()));
  return Status::ok();
}

Result<std::unique_ptr<DraftModel>> DraftModel::create(model::Model& model, DraftModelConfig cfg) {
  const model::HParams& hp = model.hparams();
  if (!hp.has_lm_head || !hp.causal)
    return Status::invalid_argument("the draft model (" + hp.arch +
                                    ") is not a causal language model");
  if (hp.n_ctx_train > 0) cfg.n_ctx = (int32_t)std::min<int64_t>(cfg.n_ctx, hp.n_ctx_train);
  cfg.n_ctx = std::max(cfg.n_ctx, 1);
  cfg.max_seqs = std::max(cfg.max_seqs, 1);
  const kv::KvShape shape = model.kv_shape();
  const int64_t block = kv::PagedKvCache::block_bytes(shape);
  if (block <= 0) return Status::error("the draft model's K/V shape is invalid");
  if (cfg.pool_bytes <= 0) {
    // Every sequence's whole context, capped: the cap only costs drafts.
    const int64_t blocks = (int64_t)((cfg.n_ctx + 15) / 16) * cfg.max_seqs;
    cfg.pool_bytes = std::min(blocks, kDefaultPoolCap / block) * block;
    cfg.pool_bytes = std::max(cfg.pool_bytes, (int64_t)kv::kMinBlocks * block);
  }
  auto kv = kv::PagedKvCache::create(shape, kv::KvConfig{cfg.pool_bytes, 16, true});
  if (!kv.is_ok()) return kv.status().with_context("the draft model's K/V cache");
  return std::unique_ptr<DraftModel>(new DraftModel(model, cfg, std::move(*kv)));
}

Result<std::unique_ptr<DraftModel>> DraftModel::load(const std::string& path, int n_threads,
                                                     const Tokenizer& target_tok,
                                                     int64_t target_n_vocab, DraftModelConfig cfg) {
  auto loaded = model::load_model(path, model::LoadOptions{n_threads, {}, cfg.n_ctx});
  if (!loaded.is_ok()) return loaded.status().with_context("--draft-model");
  Status same = check_same_vocabulary(target_tok, target_n_vocab, *loaded->tokenizer,
                                      loaded->model->hparams().n_vocab);
  if (!same.is_ok()) return same.with_context("--draft-model " + path);
  auto made = create(*loaded->model, cfg);
  if (!made.is_ok()) return made.status().with_context("--draft-model " + path);
  (*made)->owned_ = std::move(*loaded);  // the Model object itself does not move
  return std::move(*made);
}

Token DraftModel::pick(std::span<const float> logits) const {
  if (logits.empty()) return -1;
  const size_t best = (size_t)(std::max_element(logits.begin(), logits.end()) - logits.begin());
  const float top = logits[best];
  if (!std::isfinite(top)) return -1;
  if (cfg_.p_min > 0) {
    double sum = 0;
    for (float l : logits) sum += std::exp((double)l - top);
    if (1.0 / sum < cfg_.p_min) return -1;
  }
  return (Token)best;
}

void DraftModel::propose(uint64_t seq, std::span<const Token> tokens, int32_t max,
                         std::vector<Token>& out) {
  out.clear();
  const int64_t T = (int64_t)tokens.size();
  // Positions up to T - 1 + (max - 1) are written: all inside the context.
  max = (int32_t)std::min<int64_t>(max, (int64_t)cfg_.n_ctx - T + 1);
  if (max <= 0 || T == 0) return;
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) {
    State s;
    if (!free_ids_.empty()) {
      s.kv_seq = free_ids_.back();
      free_ids_.pop_back();
    } else {
      s.kv_seq = next_kv_seq_++;
    }
    // A prompt other sequences share is fed once.
    if (T > 1) s.fed = kv_->reuse_prefix(s.kv_seq, tokens.first((size_t)T - 1));
    it = seqs_.emplace(seq, s).first;
  }
  State& s = it->second;
  auto drop = [&] {  // no K/V for it: no drafts now, a fresh start next time
    kv_->release(s.kv_seq);
    free_ids_.push_back(s.kv_seq);
    seqs_.erase(it);
  };
  if (s.fed > T - 1) {  // (never for a sequence that only grows)
    drop();
    return;
  }
  // The last token is fed again each time (its row is given back with the
  // drafts'): its logits give the first draft even when nothing is new.
  const int32_t n_feed = (int32_t)(T - s.fed);
  if (!kv_->reserve(s.kv_seq, n_feed + max - 1)) {
    drop();
    return;
  }
  batch_.clear();
  for (int64_t i = s.fed; i < T; ++i)
    batch_.add(tokens[(size_t)i], (int32_t)i, s.kv_seq, i == T - 1);
  if (!model_.forward(batch_, *kv_, logits_).is_ok() || logits_.rows() != 1) {
    drop();
    return;
  }
  kv_->commit(s.kv_seq, tokens.subspan((size_t)s.fed, (size_t)(T - 1 - s.fed)));
  s.fed = (int32_t)(T - 1);
  for (Token d = pick(logits_.row(0)); d >= 0; d = pick(logits_.row(0))) {
    out.push_back(d);
    if ((int32_t)out.size() == max) break;
    batch_.clear();
    batch_.add(d, (int32_t)(T - 1 + (int64_t)out.size()), s.kv_seq, true);
    if (!model_.forward(batch_, *kv_, logits_).is_ok() || logits_.rows() != 1) break;
  }
  kv_->unreserve(s.kv_seq);
}

void DraftModel::forget(uint64_t seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  kv_->release(it->second.kv_seq);
  free_ids_.push_back(it->second.kv_seq);
  seqs_.erase(it);
}

}  // namespace cairn::engine
