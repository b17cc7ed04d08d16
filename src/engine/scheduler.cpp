// engine/scheduler.cpp — continuous batching: the per-step token budget, KV admission, preemption.
#include "engine/scheduler.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <span>
#include <utility>

namespace cairn::engine {

Sequence::Sequence(RequestId id_, EngineRequest req, Sampler sampler_, StopChecker stop_,
                   std::shared_ptr<SequenceSink> sink_)
    : id(id_),
      request(std::move(req)),
      tokens(request.prompt),
      n_prompt(static_cast<int32_t>(request.prompt.size())),
      sampler(std::move(sampler_)),
      stop(std::move(stop_)),
      sink(std::move(sink_)),
      arrived(Clock::now()) {}

void Scheduler::add(std::unique_ptr<Sequence> seq) { waiting_.push_back(std::move(seq)); }

SeqId Scheduler::next_kv_seq() {
  const SeqId id = kv_seq_counter_;
  kv_seq_counter_ = kv_seq_counter_ == std::numeric_limits<SeqId>::max() ? 0 : kv_seq_counter_ + 1;
  return id;
}

int32_t Scheduler::decoding() const {
  int32_t n = 0;
  for (const auto& s : running_) n += s->remaining() == 1 && !s->done;
  return n;
}

int64_t Scheduler::prompt_backlog() const {
  int64_t n = 0;
  for (const auto& s : running_)
    if (!s->done && s->remaining() > 1) n += s->remaining();  // one token left: a decode
  for (const auto& s : waiting_) n += std::max(0, s->remaining());
  return n;
}

void Scheduler::schedule(kv::PagedKvCache& kv, ScheduledBatch& plan, int32_t prefill_cap) {
  plan.chunks.clear();
  plan.batch.clear();
  plan.failed.clear();
  plan.imports.clear();
  plan.preempted = 0;
  plan.decode_tokens = plan.prefill_tokens = plan.draft_tokens = 0;
  int32_t budget = cfg_.max_batch_tokens;
  int32_t prefill_left = std::max(prefill_cap, 0);
  schedule_running(kv, plan, budget, prefill_left);
  // Admitting while preempting would only evict the newcomer next step.
  if (plan.preempted == 0) admit_waiting(kv, plan, budget, prefill_left);
}

int32_t Scheduler::reserve_chunk(Sequence& seq, int32_t want, kv::PagedKvCache& kv) {
  // A prefill chunk that does not fit whole may still fit in part: a smaller
  // chunk now beats preempting someone for it.
  for (int32_t n = want; n > 0; n /= 2)
    if (kv.reserve(seq.kv_seq, n)) return n;
  return 0;
}

void Scheduler::add_chunk(Sequence& seq, int32_t n, ScheduledBatch& plan) {
  // Tokens past the sequence's own are its draft (a decode step's chunk only).
  const int32_t known = std::min(n, seq.remaining());
  const int32_t n_draft = n - known;
  ScheduledChunk c{&seq, seq.n_computed, n, seq.n_computed + known == (int32_t)seq.tokens.size(),
                   n_draft};
  for (int32_t i = 0; i < n; ++i) {
    const int32_t pos = c.start + i;
    const Token t = i < known ? seq.tokens[(size_t)pos] : seq.draft[(size_t)(i - known)];
    plan.batch.add(t, pos, seq.kv_seq, c.wants_logits && i >= known - 1, seq.request.adapter);
  }
  plan.chunks.push_back(c);
}

void Scheduler::propose_all_drafts(int32_t budget, int32_t prefill_left) {
  asks_.clear();
  for (size_t i = 0; i < running_.size(); ++i) {
    Sequence& seq = *running_[i];
    seq.draft.clear();
    if (!drafts_ || !seq.speculate || seq.draft_max <= 0 || seq.done || !seq.failure.empty() ||
        seq.import_next >= 0 || seq.remaining() != 1)
      continue;
    // The most schedule_running could give it (its room only shrinks there).
    const int32_t later = (int32_t)(running_.size() - i - 1);
    int32_t room = std::min(budget - 1 - later, prefill_left);
    if (!waiting_.empty()) room /= 2;
    const int32_t max = std::min(seq.draft_max, room);
    if (max > 0) asks_.push_back({seq.id, seq.tokens, max, &seq.draft});
  }
  if (!asks_.empty()) drafts_->propose_batch(asks_);
}

int32_t Scheduler::propose_drafts(Sequence& seq, int32_t room) {
  const int32_t max = std::max(0, std::min(seq.draft_max, room));
  if ((int32_t)seq.draft.size() > max) seq.draft.resize((size_t)max);
  return (int32_t)seq.draft.size();
}

void Scheduler::preempt(size_t index, kv::PagedKvCache& kv) {
  std::unique_ptr<Sequence> seq = std::move(running_[index]);
  running_.erase(running_.begin() + static_cast<std::ptrdiff_t>(index));
  kv.release(seq->kv_seq);
  seq->in_kv = false;
  seq->n_computed = 0;  // prompt and generated tokens are recomputed on readmission
  seq->import_next = -1;  // (handed-over rows are imported again)
  waiting_.push_front(std::move(seq));
}

void Scheduler::schedule_running(kv::PagedKvCache& kv, ScheduledBatch& plan, int32_t& budget,
                                 int32_t& prefill_left) {
  propose_all_drafts(budget, prefill_left);
  // Oldest first: each gets its decode token (or its next prefill chunk);
  // when the pool runs dry the newest running sequence gives its blocks back.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    Sequence& seq = *running_[i];
    if (seq.import_next >= 0 && !seq.done && seq.failure.empty() && !plan_import(seq, plan)) {
      ++i;  // its rows are still being copied in
      continue;
    }
    const bool decode = seq.remaining() == 1;
    int32_t want = std::min({seq.remaining(), budget, decode ? 1 : prefill_left});
    if (seq.done || !seq.failure.empty() || want <= 0) {
      ++i;
      continue;
    }
    // Draft tokens take what is left of the budget once every later
    // running sequence has its next token, and count as prompt tokens
    // (the stall-free cap): a full step drafts less, or not at all.
    int32_t n_draft = 0;
    if (!decode) seq.draft.clear();
    if (decode) {
      const int32_t later = (int32_t)(running_.size() - i - 1);
      int32_t room = std::min(budget - 1 - later, prefill_left);
      if (!waiting_.empty()) room /= 2;  // prompts waiting keep a share: no starving them
      n_draft = propose_drafts(seq, room);
      want += n_draft;
    }
    int32_t got = reserve_chunk(seq, want, kv);
    while (got == 0 && i + 1 < running_.size()) {
      preempt(running_.size() - 1, kv);
      ++plan.preempted;
      got = reserve_chunk(seq, want, kv);
    }
    if (got == 0) {
      if (i == 0) {
        // Nothing else holds blocks: this sequence can never fit.
        seq.failure = "the KV cache (" + std::to_string(kv.stats().blocks_total) +
                      " blocks) cannot hold this sequence's " + std::to_string(seq.tokens.size()) +
                      " tokens";
        plan.failed.push_back(&seq);
        ++i;
      } else {
        preempt(i, kv);
        ++plan.preempted;
      }
      break;  // everything after i has been preempted already
    }
    if (decode) {
      // A chunk the pool could not hold whole keeps the drafts that fit.
      seq.draft.resize((size_t)std::max(0, got - 1));
      n_draft = got - 1;
    }
    add_chunk(seq, got, plan);
    budget -= got;
    if (decode) {
      plan.decode_tokens += 1;
      plan.prefill_tokens += n_draft;
      plan.draft_tokens += n_draft;
      prefill_left -= n_draft;
    } else {
      plan.prefill_tokens += got;
      prefill_left -= got;
    }
    ++i;
  }
}

void Scheduler::admit_waiting(kv::PagedKvCache& kv, ScheduledBatch& plan, int32_t& budget,
                              int32_t& prefill_left) {
  while (!waiting_.empty() && budget > 0 && running() < cfg_.max_seqs) {
    Sequence& seq = *waiting_.front();
    const bool alone = running_.empty();
    if (seq.request.import_kv) {
      const int imported = admit_imported(seq, kv, plan, alone, budget);
      if (imported < 0) break;  // waits for blocks: nobody overtakes the head
      if (imported > 0) continue;
    }
    if (prefill_left <= 0) break;  // (handed-over rows, above, take no forward)
    // Under pressure, do not even look up the prefix (its statistics would
    // count the same prompt every step it waits).
    const int32_t first = std::min<int32_t>({(int32_t)seq.tokens.size(), budget, prefill_left});
    if (!alone && kv.free_blocks() < kv.blocks_for(first)) break;
    seq.kv_seq = next_kv_seq();
    // Another adapter computes other K/V for the same tokens: its own prefixes.
    const int32_t cached = kv.reuse_prefix(seq.kv_seq, seq.tokens, seq.request.adapter);
    seq.in_kv = true;
    seq.n_computed = cached;
    const int32_t got = reserve_chunk(seq, std::min({seq.remaining(), budget, prefill_left}), kv);
    if (got == 0 && !alone) {
      kv.release(seq.kv_seq);
      seq.in_kv = false;
      seq.n_computed = 0;
      break;  // first come first served: nobody overtakes the head
    }
    if (seq.cached_prompt_tokens < 0) seq.cached_prompt_tokens = std::min(cached, seq.n_prompt);
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
    if (got == 0) {
      seq.failure = "the KV cache (" + std::to_string(kv.stats().blocks_total) +
                    " blocks) has no room for this sequence even alone";
      plan.failed.push_back(&seq);
      break;
    }
    add_chunk(seq, got, plan);
    budget -= got;
    plan.prefill_tokens += got;
    prefill_left -= got;
  }
}

int Scheduler::admit_imported(Sequence& seq, kv::PagedKvCache& kv, ScheduledBatch& plan, bool alone,
                              int32_t& budget) {
  // The handed-over rows are reserved whole or not at all (no over-commit):
  // a sequence that cannot fit them waits at the head of the queue.
  if (!alone && kv.free_blocks() < kv.blocks_for(seq.n_prompt + 1)) return -1;
  seq.kv_seq = next_kv_seq();
  const int32_t cached = kv.reuse_prefix(seq.kv_seq, seq.tokens, seq.request.adapter);
  if (cached >= seq.n_prompt) {  // the prefix cache had it all: a plain admission
    kv.release(seq.kv_seq);
    return 0;
  }
  // The rows, and the forced tokens' first chunk in this same step.
  const int32_t next = std::min<int32_t>((int32_t)seq.tokens.size() - seq.n_prompt, budget);
  if (!kv.reserve(seq.kv_seq, seq.n_prompt - cached + next)) {
    kv.release(seq.kv_seq);
    if (!alone) return -1;
    seq.failure = "the KV cache (" + std::to_string(kv.stats().blocks_total) +
                  " blocks) has no room for this sequence's " + std::to_string(seq.n_prompt) +
                  " handed-over prompt tokens";
    running_.push_back(std::move(waiting_.front()));
    waiting_.pop_front();
    plan.failed.push_back(&seq);
    return 1;
  }
  seq.in_kv = true;
  seq.n_computed = cached;
  seq.import_next = cached;
  if (seq.cached_prompt_tokens < 0) seq.cached_prompt_tokens = cached;
  running_.push_back(std::move(waiting_.front()));
  waiting_.pop_front();
  if (plan_import(seq, plan) && next > 0) {
    add_chunk(seq, next, plan);
    budget -= next;
    (next == 1 ? plan.decode_tokens : plan.prefill_tokens) += next;
  }
  return 1;
}

bool Scheduler::plan_import(Sequence& seq, ScheduledBatch& plan) {
  const int32_t from = seq.import_next;
  const int32_t to = (int32_t)std::min<int64_t>(
      seq.n_prompt, (int64_t)from + std::max(1, cfg_.import_positions_per_step));
  plan.imports.push_back({&seq, from, to});
  seq.n_computed = to;
  seq.import_next = to < seq.n_prompt ? to : -1;
  return seq.import_next < 0;
}

void Scheduler::commit(const ScheduledBatch& plan, kv::PagedKvCache& kv) {
  for (const ScheduledChunk& c : plan.chunks) {
    Sequence& seq = *c.seq;
    // A speculative chunk's draft rows wait for verification (the engine
    // commits the accepted ones): only the sequence's own token is known.
    const int32_t n = c.n - c.n_draft;
    kv.commit(seq.kv_seq, std::span<const Token>(seq.tokens).subspan((size_t)c.start, (size_t)n));
    seq.n_computed += n;
  }
}

std::unique_ptr<Sequence> Scheduler::remove(RequestId id, kv::PagedKvCache& kv) {
  auto take = [&](auto& list) -> std::unique_ptr<Sequence> {
    auto it = std::find_if(list.begin(), list.end(), [&](const auto& s) { return s->id == id; });
    if (it == list.end()) return nullptr;
    std::unique_ptr<Sequence> seq = std::move(*it);
    list.erase(it);
    if (seq->in_kv) kv.release(seq->kv_seq);
    seq->in_kv = false;
    return seq;
  };
  if (auto seq = take(running_)) return seq;
  return take(waiting_);
}

std::vector<std::unique_ptr<Sequence>> Scheduler::take_done(kv::PagedKvCache& kv) {
  return take_if(kv, [](const Sequence& s) { return s.done || !s.failure.empty(); });
}

std::vector<std::unique_ptr<Sequence>> Scheduler::take_all(kv::PagedKvCache& kv) {
  return take_if(kv, [](const Sequence&) { return true; });
}

std::vector<std::unique_ptr<Sequence>> Scheduler::take_if(
    kv::PagedKvCache& kv, const std::function<bool(const Sequence&)>& pred) {
  std::vector<std::unique_ptr<Sequence>> out;
  auto sweep = [&](auto& list) {
    for (auto it = list.begin(); it != list.end();) {
      if (pred(**it)) {
        if ((*it)->in_kv) kv.release((*it)->kv_seq);
        (*it)->in_kv = false;
        out.push_back(std::move(*it));
        it = list.erase(it);
      } else {
        ++it;
      }
    }
  };
  sweep(running_);
  sweep(waiting_);
  return out;
}

}  // namespace cairn::engine
