// Scheduler: token budget, decode before prefill, chunked prefill, first come
// first served, max_seqs, prefix reuse at admission, preemption of the newest
// running sequence when the KV pool runs dry.
#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include "engine_test_util.h"

namespace cairn::engine {
namespace {

using test_support::demo;
using test_support::make_kv;

class NullSink final : public SequenceSink {
 public:
  void on_token(const TokenOutput&) override {}
  void on_end(const EndOutput&) override {}
  void on_error(const Status&) override {}
};

std::unique_ptr<Sequence> make_seq(RequestId id, int32_t n_prompt, Token first = 10) {
  EngineRequest r;
  for (int32_t i = 0; i < n_prompt; ++i) r.prompt.push_back(first + (i % 200));
  r.sampling.temperature = 0;
  auto sampler = Sampler::create(r.sampling, 512);
  EXPECT_TRUE(sampler.is_ok());
  StopChecker stop(*demo().tokenizer, {});
  return std::make_unique<Sequence>(id, std::move(r), std::move(*sampler), std::move(stop),
                                    std::make_shared<NullSink>());
}

// What one step gave each request: tokens scheduled.
std::map<RequestId, int32_t> tokens_by_request(const ScheduledBatch& plan) {
  std::map<RequestId, int32_t> out;
  for (const auto& c : plan.chunks) out[c.seq->id] += c.n;
  return out;
}

// Pretends the forward ran: commits, and appends a token to every sequence
// whose chunk reached its end (as sampling would).
void finish_step(Scheduler& s, ScheduledBatch& plan, kv::PagedKvCache& kv) {
  s.commit(plan, kv);
  for (auto& c : plan.chunks)
    if (c.wants_logits) c.seq->tokens.push_back(42);
}

TEST(Scheduler, ChunkedPrefillUnderTheBudgetThenDecode) {
  auto kv = make_kv(*demo().model, 64);
  Scheduler s({/*max_batch_tokens=*/32, /*max_seqs=*/8});
  s.add(make_seq(1, 50));
  ScheduledBatch plan;
  EXPECT_EQ(s.prompt_backlog(), 50);  // waiting: the whole prompt

  s.schedule(*kv, plan);
  ASSERT_EQ(plan.chunks.size(), 1u);
  EXPECT_EQ(plan.chunks[0].n, 32);
  EXPECT_FALSE(plan.chunks[0].wants_logits);
  EXPECT_EQ(plan.batch.size(), 32u);
  EXPECT_EQ(std::count(plan.batch.wants_logits.begin(), plan.batch.wants_logits.end(), 1), 0);
  finish_step(s, plan, *kv);
  EXPECT_EQ(s.prompt_backlog(), 18);  // running: the rest of its prompt

  s.schedule(*kv, plan);
  ASSERT_EQ(plan.chunks.size(), 1u);
  EXPECT_EQ(plan.chunks[0].start, 32);
  EXPECT_EQ(plan.chunks[0].n, 18);
  EXPECT_TRUE(plan.chunks[0].wants_logits);
  EXPECT_EQ(plan.batch.positions.back(), 49);
  EXPECT_EQ(plan.batch.wants_logits.back(), 1);
  finish_step(s, plan, *kv);
  EXPECT_EQ(s.prompt_backlog(), 0);  // decoding: its one token is not backlog

  s.schedule(*kv, plan);  // decode: one token at position 50
  ASSERT_EQ(plan.chunks.size(), 1u);
  EXPECT_EQ(plan.chunks[0].n, 1);
  EXPECT_EQ(plan.batch.positions[0], 50);
  EXPECT_EQ(kv->length(plan.chunks[0].seq->kv_seq), 50);
}

TEST(Scheduler, DecodesComeFirstAndWaitingPrefillFillsTheRestInOrder) {
  auto kv = make_kv(*demo().model, 64);
  Scheduler s({16, 8});
  s.add(make_seq(1, 10));
  ScheduledBatch plan;
  s.schedule(*kv, plan);
  finish_step(s, plan, *kv);  // 1 is now decoding
  s.add(make_seq(2, 12));
  s.add(make_seq(3, 12));
  s.schedule(*kv, plan);
  auto got = tokens_by_request(plan);
  EXPECT_EQ(got[1], 1);
  EXPECT_EQ(got[2], 12);
  EXPECT_EQ(got[3], 3);  // the rest of the budget, not more
  EXPECT_EQ(plan.batch.size(), 16u);
  EXPECT_EQ(plan.chunks[0].seq->id, 1u);  // decode first
  EXPECT_EQ(s.running(), 3);
}

TEST(Scheduler, MaxSeqsBoundsTheRunningSet) {
  auto kv = make_kv(*demo().model, 64);
  Scheduler s({512, 2});
  for (RequestId id = 1; id <= 4; ++id) s.add(make_seq(id, 5));
  ScheduledBatch plan;
  s.schedule(*kv, plan);
  EXPECT_EQ(s.running(), 2);
  EXPECT_EQ(s.waiting(), 2);
  auto got = tokens_by_request(plan);
  EXPECT_TRUE(got.count(1) && got.count(2));
  EXPECT_FALSE(got.count(3));
}

TEST(Scheduler, PrefixReuseSkipsCachedTokens) {
  auto kv = make_kv(*demo().model, 64);
  Scheduler s({512, 8});
  s.add(make_seq(1, 40));
  ScheduledBatch plan;
  s.schedule(*kv, plan);
  finish_step(s, plan, *kv);
  s.add(make_seq(2, 40));  // same prompt: two full blocks (32 tokens) are cached
  s.schedule(*kv, plan);
  auto got = tokens_by_request(plan);
  EXPECT_EQ(got[2], 8);
  for (const auto& c : plan.chunks)
    if (c.seq->id == 2) {
      EXPECT_EQ(c.start, 32);
      EXPECT_EQ(c.seq->cached_prompt_tokens, 32);
    }
}

TEST(Scheduler, PreemptsTheNewestWhenBlocksRunOutAndRecomputesItLater) {
  auto kv = make_kv(*demo().model, 6);  // 96 tokens
  Scheduler s({512, 8});
  s.add(make_seq(1, 32, 10));   // 2 blocks
  s.add(make_seq(2, 32, 100));  // 2 blocks
  s.add(make_seq(3, 32, 300));  // 2 blocks: the pool is full
  ScheduledBatch plan;
  s.schedule(*kv, plan);
  ASSERT_EQ(s.running(), 3);
  finish_step(s, plan, *kv);
  // Each now needs a third block for its decode token; only the oldest ones can have it.
  s.schedule(*kv, plan);
  EXPECT_GE(plan.preempted, 1);
  auto got = tokens_by_request(plan);
  EXPECT_EQ(got[1], 1);
  EXPECT_FALSE(got.count(3));  // the newest gave its blocks back
  EXPECT_EQ(s.waiting(), plan.preempted);
  finish_step(s, plan, *kv);
  // Once the others are gone, the preempted one recomputes prompt + generated token.
  auto one = s.remove(1, *kv);
  auto two = s.remove(2, *kv);
  ASSERT_TRUE(one && two);
  s.schedule(*kv, plan);
  got = tokens_by_request(plan);
  ASSERT_TRUE(got.count(3));
  for (const auto& c : plan.chunks)
    if (c.seq->id == 3) {
      EXPECT_TRUE(c.wants_logits);
      EXPECT_EQ(c.start + c.n, 33);  // 32 prompt + 1 generated, minus what the prefix cache kept
    }
}

TEST(Scheduler, ASequenceThatCanNeverFitFails) {
  auto kv = make_kv(*demo().model, 4);  // 64 tokens
  Scheduler s({16, 8});
  s.add(make_seq(1, 80));
  ScheduledBatch plan;
  bool failed = false;
  for (int i = 0; i < 10 && !failed; ++i) {
    s.schedule(*kv, plan);
    failed = !plan.failed.empty();
    if (!failed) finish_step(s, plan, *kv);
  }
  EXPECT_TRUE(failed);
  auto done = s.take_done(*kv);
  EXPECT_EQ(done.size(), 1u);
  EXPECT_TRUE(s.idle());
  EXPECT_EQ(kv->stats().blocks_used, 0);
}

TEST(Scheduler, RemoveReleasesBlocksWherever) {
  auto kv = make_kv(*demo().model, 64);
  Scheduler s({512, 1});
  s.add(make_seq(1, 20));
  s.add(make_seq(2, 20));
  ScheduledBatch plan;
  s.schedule(*kv, plan);
  EXPECT_GT(kv->stats().blocks_used, 0);
  EXPECT_TRUE(s.remove(2, *kv));  // waiting
  EXPECT_TRUE(s.remove(1, *kv));  // running
  EXPECT_FALSE(s.remove(1, *kv));
  EXPECT_EQ(kv->stats().blocks_used, 0);
  EXPECT_TRUE(s.idle());
}

}  // namespace
}  // namespace cairn::engine

namespace cairn::engine {
namespace {

// Proposes `n` tokens 7, 8, 9, ... whatever the sequence.
class FixedDrafts final : public DraftSource {
 public:
  void propose(uint64_t, std::span<const Token>, int32_t max, std::vector<Token>& out) override {
    out.clear();
    for (int32_t i = 0; i < max; ++i) out.push_back(7 + i);
  }
};

// A decoding sequence that speculates: its chunk is its last token plus the
// drafts, every row wanting logits; drafts count as prompt tokens, take
// only the budget the later running sequences leave, and their rows are not
// committed by the scheduler (the engine commits what verification keeps).
TEST(Scheduler, DraftsRideInTheDecodeChunkWithinTheBudget) {
  auto kv = make_kv(*demo().model, 64);
  FixedDrafts drafts;
  Scheduler s({/*max_batch_tokens=*/8, /*max_seqs=*/8});
  s.set_draft_source(&drafts);
  auto a = make_seq(1, 5);
  auto b = make_seq(2, 3);
  Sequence* sa = a.get();
  Sequence* sb = b.get();
  sa->speculate = true;
  sa->draft_max = 6;
  s.add(std::move(a));
  s.add(std::move(b));
  ScheduledBatch plan;
  s.schedule(*kv, plan);  // both prompts whole (8 tokens)
  finish_step(s, plan, *kv);

  s.schedule(*kv, plan);
  ASSERT_EQ(plan.chunks.size(), 2u);
  // 8 tokens: one for b, so a takes its token and 6 drafts.
  EXPECT_EQ(plan.chunks[0].seq, sa);
  EXPECT_EQ(plan.chunks[0].n, 7);
  EXPECT_EQ(plan.chunks[0].n_draft, 6);
  EXPECT_TRUE(plan.chunks[0].wants_logits);
  EXPECT_EQ(plan.chunks[1].n, 1);
  EXPECT_EQ(plan.decode_tokens, 2);
  EXPECT_EQ(plan.prefill_tokens, 6);
  EXPECT_EQ(plan.draft_tokens, 6);
  ASSERT_EQ(plan.batch.size(), 8u);
  EXPECT_EQ(plan.batch.tokens[1], 7);
  EXPECT_EQ(plan.batch.positions[6], 11);
  EXPECT_EQ(std::count(plan.batch.wants_logits.begin(), plan.batch.wants_logits.end(), 1), 8);
  s.commit(plan, *kv);
  EXPECT_EQ(kv->length(sa->kv_seq), 6);  // its own token only
  EXPECT_EQ(sa->n_computed, 6);
  EXPECT_EQ(kv->length(sb->kv_seq), 4);

  // A smaller draft_max, and a sequence that does not speculate, drafts nothing more.
  sa->tokens.push_back(42);
  sb->tokens.push_back(42);
  kv->unreserve(sa->kv_seq);
  sa->draft_max = 2;
  s.schedule(*kv, plan);
  EXPECT_EQ(plan.chunks[0].n, 3);
  EXPECT_EQ(plan.chunks[1].n, 1);
  EXPECT_EQ(plan.chunks[1].n_draft, 0);
}

}  // namespace
}  // namespace cairn::engine
