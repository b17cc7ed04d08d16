// The engine over a q8_0 paged cache (--kv-type q8_0): several streams at
// once give each stream's output alone (attention over Q8_0 rows does not
// depend on the rest of a batch), and speculative decoding by prompt lookup
// leaves greedy output unchanged with drafts accepted.
#include <gtest/gtest.h>

#include "engine_test_util.h"

namespace cairn::engine {
namespace {

using test_support::demo;
using test_support::greedy;
using test_support::RecordingSink;

std::vector<std::shared_ptr<RecordingSink>> run_q8(const std::vector<EngineRequest>& reqs,
                                                   int32_t lookup, EngineStats* stats = nullptr) {
  auto& m = demo();
  kv::KvShape shape = m.model->kv_shape();
  shape.dtype = TensorType::Q8_0;
  auto kv = kv::PagedKvCache::create(shape, {512 * kv::PagedKvCache::block_bytes(shape), 16, true});
  EXPECT_TRUE(kv.is_ok()) << kv.status().message();
  if (!kv.is_ok()) return {};
  EngineConfig cfg;
  cfg.max_batch_tokens = 64;
  cfg.spec_lookup_max = lookup;
  Engine e(*m.model, *m.tokenizer, **kv, cfg);
  e.start();
  std::vector<std::shared_ptr<RecordingSink>> sinks;
  for (const auto& q : reqs) {
    sinks.push_back(std::make_shared<RecordingSink>());
    EXPECT_TRUE(e.submit(q, sinks.back()).is_ok());
  }
  for (auto& s : sinks) EXPECT_TRUE(s->wait());
  e.stop();
  if (stats) *stats = e.stats();
  EXPECT_EQ((*kv)->stats().blocks_used, 0);
  return sinks;
}

TEST(KvQ8Engine, BatchedAndSpeculativeGreedyEqualEachStreamAlone) {
  auto& m = demo();
  std::vector<EngineRequest> reqs;
  for (const char* text : {"the little dog the little dog the little dog",
                           "once upon a time there was a time there was",
                           "a king and his best horse and his best horse"})
    reqs.push_back(greedy(m.tokenizer->encode(text, true), 48));
  std::vector<std::vector<Token>> alone;
  for (const auto& r : reqs) {
    auto s = run_q8({r}, 0);
    ASSERT_EQ(s.size(), 1u);
    EXPECT_TRUE(s[0]->error.empty()) << s[0]->error;
    EXPECT_EQ(s[0]->tokens.size(), 48u);
    alone.push_back(s[0]->tokens);
  }
  auto together = run_q8(reqs, 0);
  EngineStats st;
  auto spec = run_q8(reqs, 4, &st);
  ASSERT_EQ(together.size(), reqs.size());
  ASSERT_EQ(spec.size(), reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(together[i]->tokens, alone[i]) << "request " << i << " batched";
    EXPECT_EQ(spec[i]->tokens, alone[i]) << "request " << i << " with lookup drafts";
  }
  EXPECT_GT(st.spec_draft_tokens_total, 0u);
}

}  // namespace
}  // namespace cairn::engine
