// The engine on a gemma2-style model (sliding layers, window 16) whose paged
// cache keeps only the sliding layers' window: far fewer KV bytes for a long
// prompt than a cache that keeps every position, the same greedy tokens,
// prefix hits that give the same tokens, and every block back in the pool
// after finished, preempted and cancelled requests.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <random>

#include "engine_test_util.h"
#include "modelgen/model_builder.h"

namespace cairn::engine {
namespace {

using test_support::gemma2_swa16;
using test_support::greedy;
using test_support::RecordingSink;

// The KV blocks in use each time the request yields a token (read on the
// engine thread, the only one that touches the cache).
class CountingSink final : public SequenceSink {
 public:
  explicit CountingSink(const kv::PagedKvCache& kv) : kv_(kv) {}
  void on_token(const TokenOutput& out) override {
    used.push_back(kv_.stats().blocks_used);
    rec->on_token(out);
  }
  void on_end(const EndOutput& out) override { rec->on_end(out); }
  void on_error(const Status& err) override { rec->on_error(err); }
  std::vector<int32_t> used;  // read after rec->wait()
  std::shared_ptr<RecordingSink> rec = std::make_shared<RecordingSink>();

 private:
  const kv::PagedKvCache& kv_;
};

std::unique_ptr<kv::PagedKvCache> make_cache(const kv::KvShape& shape, int32_t token_blocks) {
  const int64_t bytes =
      (int64_t)token_blocks * kv::PagedKvCache::tables(shape) * kv::PagedKvCache::block_bytes(shape);
  auto kv = kv::PagedKvCache::create(shape, {bytes, 16, true});
  EXPECT_TRUE(kv.is_ok()) << kv.status().message();
  return kv.is_ok() ? std::move(*kv) : nullptr;
}

std::vector<Token> long_prompt(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Token> p((size_t)n);
  for (Token& t : p) t = (Token)(3 + rng() % 200);  // past the special tokens
  return p;
}

struct Served {
  std::vector<Token> tokens;
  std::vector<int32_t> used;
  int32_t cached = 0;
};

std::vector<Served> serve(model::LoadedModel& m, kv::PagedKvCache& kv,
                          const std::vector<std::vector<Token>>& prompts, int n_out,
                          EngineConfig cfg = {}) {
  Engine e(*m.model, *m.tokenizer, kv, cfg);
  e.start();
  std::vector<Served> out;
  for (const auto& p : prompts) {  // one after another: the second may hit the first's prefix
    auto sink = std::make_shared<CountingSink>(kv);
    auto id = e.submit(greedy(p, n_out), sink);
    EXPECT_TRUE(id.is_ok()) << id.status().message();
    EXPECT_TRUE(sink->rec->wait());
    EXPECT_TRUE(sink->rec->error.empty()) << sink->rec->error;
    out.push_back({sink->rec->tokens, sink->used, sink->rec->end.cached_prompt_tokens});
  }
  e.stop();
  EXPECT_EQ(kv.stats().blocks_used, 0);
  EXPECT_EQ(kv.free_blocks(), kv.stats().blocks_total);
  return out;
}

TEST(SlidingEngine, WindowedCacheUsesFarFewerBlocksWithIdenticalOutput) {
  auto& m = gemma2_swa16();
  ASSERT_EQ(m.model->hparams().n_swa, 16);
  const kv::KvShape all = m.model->hparams().kv_shape();
  const kv::KvShape windowed = m.model->hparams().paged_kv_shape();
  ASSERT_EQ(kv::PagedKvCache::tables(windowed), 2);
  const auto prompt = long_prompt(300, 1);
  auto kv_all = make_cache(all, 64);
  auto kv_win = make_cache(windowed, 64);
  ASSERT_TRUE(kv_all && kv_win);
  const auto a = serve(m, *kv_all, {prompt, prompt}, 20);
  const auto w = serve(m, *kv_win, {prompt, prompt}, 20);
  ASSERT_EQ(a.size(), 2u);
  ASSERT_EQ(w.size(), 2u);
  ASSERT_EQ(a[0].tokens.size(), 20u);
  EXPECT_EQ(w[0].tokens, a[0].tokens);
  // The repeat hits the first run's prefix (with the window's sliding rows).
  EXPECT_EQ(w[1].cached, 288);
  EXPECT_EQ(w[1].tokens, a[0].tokens);
  EXPECT_EQ(a[1].tokens, a[0].tokens);
  // At the last token, 319 positions are committed: every position keeps 20
  // blocks of all four layers; the windowed cache 20 blocks of the two global
  // layers and 1 of the sliding ones (positions 304..318), half the size each.
  EXPECT_EQ(a[0].used.back(), 20);
  EXPECT_EQ(w[0].used.back(), 21);
  const int64_t bytes_all = a[0].used.back() * kv::PagedKvCache::block_bytes(all);
  const int64_t bytes_win = w[0].used.back() * kv::PagedKvCache::block_bytes(windowed);
  EXPECT_EQ(bytes_win * 40, bytes_all * 21);
  for (int32_t u : w[0].used) EXPECT_LE(u, 22);  // 20 global + at most 2 sliding
}

TEST(SlidingEngine, PreemptionAndCancellationReturnEveryBlock) {
  auto& m = gemma2_swa16();
  const kv::KvShape windowed = m.model->hparams().paged_kv_shape();
  // Room for 24 blocks of 16 positions in every layer: 6 requests of ~100
  // tokens each need 7 global + <= 2 sliding blocks, so some wait or get preempted.
  auto kv = make_cache(windowed, 24);
  ASSERT_TRUE(kv);
  std::vector<std::vector<Token>> prompts;
  for (uint32_t i = 0; i < 6; ++i) prompts.push_back(long_prompt(60 + 7 * (int)i, 10 + i));
  // Solo runs on a roomy cache that keeps every position are the reference.
  auto roomy = make_cache(m.model->hparams().kv_shape(), 128);
  ASSERT_TRUE(roomy);
  std::vector<std::vector<Token>> want;
  for (const auto& p : prompts) want.push_back(serve(m, *roomy, {p}, 40)[0].tokens);

  Engine e(*m.model, *m.tokenizer, *kv, {64, 8, 0});
  e.start();
  std::vector<std::shared_ptr<RecordingSink>> sinks;
  for (const auto& p : prompts) {
    sinks.push_back(std::make_shared<RecordingSink>());
    ASSERT_TRUE(e.submit(greedy(p, 40), sinks.back()).is_ok());
  }
  // And one that is cancelled midway.
  auto cancelled = std::make_shared<RecordingSink>();
  auto cid = e.submit(greedy(long_prompt(90, 99), -1), cancelled);
  ASSERT_TRUE(cid.is_ok());
  ASSERT_TRUE(cancelled->wait_tokens(2));
  e.cancel(*cid);
  ASSERT_TRUE(cancelled->wait());
  EXPECT_EQ(cancelled->end.reason, EndReason::Cancelled);
  for (size_t i = 0; i < sinks.size(); ++i) {
    ASSERT_TRUE(sinks[i]->wait());
    ASSERT_TRUE(sinks[i]->error.empty()) << sinks[i]->error;
    EXPECT_EQ(sinks[i]->tokens, want[i]) << "request " << i;
  }
  const auto until = Clock::now() + std::chrono::seconds(30);
  while (Clock::now() < until && (e.stats().kv.blocks_used != 0 || e.stats().running != 0))
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_EQ(e.stats().kv.blocks_used, 0);
  EXPECT_GT(e.stats().preemptions, 0u);
  e.stop();
  EXPECT_EQ(kv->free_blocks(), kv->stats().blocks_total);
}

// A model whose layers slide refuses a cache that dropped rows of a layer
// that does not slide (or slides over more positions than it kept).
TEST(SlidingEngine, ForwardRefusesACacheThatKeepsTooLittle) {
  auto& m = gemma2_swa16();
  kv::KvShape wrong = m.model->hparams().paged_kv_shape();
  std::reverse(wrong.sliding.begin(), wrong.sliding.end());  // the global layers marked sliding
  auto kv = make_cache(wrong, 16);
  ASSERT_TRUE(kv);
  ASSERT_TRUE(kv->reserve(0, 1));
  model::Batch b;
  b.add(5, 0, 0, true);
  model::Logits logits;
  const Status st = m.model->forward(b, *kv, logits);
  EXPECT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("keeps only the last 16 positions of layer 1"), std::string::npos)
      << st.message();
  kv::KvShape narrow = m.model->hparams().paged_kv_shape();
  narrow.window = 8;
  auto kv2 = make_cache(narrow, 16);
  ASSERT_TRUE(kv2 && kv2->reserve(0, 1));
  EXPECT_FALSE(m.model->forward(b, *kv2, logits).is_ok());
}

}  // namespace
}  // namespace cairn::engine
