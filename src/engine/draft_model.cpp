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
  const DraftAsk ask{seq, tokens, max, &out};
  propose_batch(std::span<const DraftAsk>(&ask, 1));
}

void DraftModel::drop(uint64_t seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  kv_->release(it->second.kv_seq);
  free_ids_.push_back(it->second.kv_seq);
  seqs_.erase(it);
}

void DraftModel::propose_batch(std::span<const DraftAsk> asks) {
  // A sequence still drafting: where its next draft goes and how many more.
  struct Live {
    const DraftAsk* ask;
    SeqId kv_seq;
    int64_t T;
    int32_t max;
  };
  std::vector<Live> live;
  live.reserve(asks.size());
  for (const DraftAsk& a : asks) {
    a.out->clear();
    const int64_t T = (int64_t)a.tokens.size();
    // Positions up to T - 1 + (max - 1) are written: all inside the context.
    const int32_t max = (int32_t)std::min<int64_t>(a.max, (int64_t)cfg_.n_ctx - T + 1);
    if (max <= 0 || T == 0) continue;
    auto it = seqs_.find(a.seq);
    if (it == seqs_.end()) {
      State s;
      if (!free_ids_.empty()) {
        s.kv_seq = free_ids_.back();
        free_ids_.pop_back();
      } else {
        s.kv_seq = next_kv_seq_++;
      }
      // A prompt other sequences share is fed once.
      if (T > 1) s.fed = kv_->reuse_prefix(s.kv_seq, a.tokens.first((size_t)T - 1));
      it = seqs_.emplace(a.seq, s).first;
    }
    State& s = it->second;
    // (fed past T - 1 never happens to a sequence that only grows.) No room
    // in the pool: no drafts now, a fresh start next time.
    if (s.fed > T - 1 || !kv_->reserve(s.kv_seq, (int32_t)(T - s.fed) + max - 1)) {
      drop(a.seq);
      continue;
    }
    live.push_back({&a, s.kv_seq, T, max});
  }
  // Feed: each sequence's unseen tokens, the last always again (its row is
  // given back with the drafts'), so there are logits to draft from even
  // when nothing is new. Whole sequences per forward, up to kFeedTokens rows
  // (one longer sequence goes alone).
  constexpr int64_t kFeedTokens = 1024;
  std::vector<Live> drafting;
  for (size_t first = 0; first < live.size();) {
    batch_.clear();
    size_t last = first;
    for (; last < live.size(); ++last) {
      const Live& l = live[last];
      const State& s = seqs_.at(l.ask->seq);
      if (last > first && (int64_t)batch_.size() + (l.T - s.fed) > kFeedTokens) break;
      for (int64_t i = s.fed; i < l.T; ++i)
        batch_.add(l.ask->tokens[(size_t)i], (int32_t)i, l.kv_seq, i == l.T - 1);
    }
    const bool ok = model_.forward(batch_, *kv_, logits_).is_ok() &&
                    logits_.rows() == last - first;
    for (size_t j = first; j < last; ++j) {
      Live& l = live[j];
      if (!ok) {
        drop(l.ask->seq);
        continue;
      }
      State& s = seqs_.at(l.ask->seq);
      kv_->commit(l.kv_seq, l.ask->tokens.subspan((size_t)s.fed, (size_t)(l.T - 1 - s.fed)));
      s.fed = (int32_t)(l.T - 1);
      const Token d = pick(logits_.row(j - first));
      if (d >= 0) l.ask->out->push_back(d);
      if (d >= 0 && l.max > 1) drafting.push_back(l);
    }
    first = last;
  }
  // Draft: one forward per position for every sequence still drafting.
  while (!drafting.empty()) {
    batch_.clear();
    for (const Live& l : drafting)
      batch_.add(l.ask->out->back(), (int32_t)(l.T - 1 + (int64_t)l.ask->out->size()), l.kv_seq,
                 true);
    if (!model_.forward(batch_, *kv_, logits_).is_ok() || logits_.rows() != drafting.size())
      break;
    std::vector<Live> next;
    for (size_t j = 0; j < drafting.size(); ++j) {
      const Live& l = drafting[j];
      const Token d = pick(logits_.row(j));
      if (d < 0) continue;
      l.ask->out->push_back(d);
      if ((int32_t)l.ask->out->size() < l.max) next.push_back(l);
    }
    drafting.swap(next);
  }
  for (const Live& l : live)
    if (seqs_.count(l.ask->seq)) kv_->unreserve(l.kv_seq);
}

void DraftModel::forget(uint64_t seq) { drop(seq); }

}  // namespace cairn::engine
