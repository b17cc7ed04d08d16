// Paged KV cache with sliding-window layers: a sliding group's blocks go back
// to the pool as positions fall out of the window, accounting returns to zero,
// and prefix hits bring (or are refused without) the window's sliding rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "core/half.h"
#include "kv/kv_cache.h"

namespace cairn::kv {
namespace {

constexpr int kBt = 16;

KvShape shape_of(std::vector<uint8_t> sliding, int32_t window) {
  KvShape s{(int32_t)sliding.size(), 8};
  s.window = window;
  s.sliding = std::move(sliding);
  return s;
}

std::unique_ptr<PagedKvCache> make(const KvShape& shape, int32_t n_blocks, bool prefix = true) {
  KvConfig cfg;
  cfg.pool_bytes = PagedKvCache::block_bytes(shape) * n_blocks;
  cfg.prefix_cache = prefix;
  auto r = PagedKvCache::create(shape, cfg);
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  return r.is_ok() ? std::move(r.value()) : nullptr;
}

// A row that depends on every token up to pos (as kv_cache_test.cpp's).
std::vector<float> row_for(const std::vector<Token>& toks, int32_t pos, int layer, int which) {
  uint64_t h = 1469598103934665603ULL;
  for (int32_t i = 0; i <= pos; ++i)
    h = (h ^ (uint64_t)(uint32_t)toks[(size_t)i]) * 1099511628211ULL;
  std::vector<float> row(8);
  for (size_t i = 0; i < row.size(); ++i) {
    const uint64_t x = (h ^ ((uint64_t)layer * 0x9e3779b97f4a7c15ULL) ^
                        (i * 0xbf58476d1ce4e5b9ULL) ^ (uint64_t)which) *
                       0x94d049bb133111ebULL;
    row[i] = (float)((x >> 40) % 2001) - 1000.0f;
  }
  return row;
}

void write_rows(PagedKvCache& kv, SeqId seq, const std::vector<Token>& toks, int32_t from,
                int32_t to) {
  for (int32_t p = from; p < to; ++p)
    for (int l = 0; l < (int)kv.n_layer(); ++l)
      kv.write(l, seq, p, row_for(toks, p, l, 0).data(), row_for(toks, p, l, 1).data());
}

// The rows a forward may read after n committed tokens: every position of a
// global layer, the next token's window of a sliding one.
::testing::AssertionResult rows_ok(const PagedKvCache& kv, SeqId seq,
                                   const std::vector<Token>& toks, int32_t n) {
  for (int l = 0; l < (int)kv.n_layer(); ++l) {
    const int64_t w = kv.kept_window(l);
    for (int32_t p = w > 0 ? (int32_t)std::max<int64_t>(0, n + 1 - w) : 0; p < n; ++p)
      for (int which = 0; which < 2; ++which) {
        const auto want = row_for(toks, p, l, which);
        const auto* got =
            static_cast<const uint16_t*>(which ? kv.value(l, seq, p) : kv.key(l, seq, p));
        for (size_t i = 0; i < want.size(); ++i)
          if (f16_to_f32(got[i]) != want[i])
            return ::testing::AssertionFailure() << "seq " << seq << " pos " << p << " layer "
                                                 << l << (which ? " V" : " K") << " elem " << i;
      }
  }
  return ::testing::AssertionSuccess();
}

// reuse, reserve the rest, write, commit; -1 (released) when it does not fit.
int32_t run_prompt(PagedKvCache& kv, SeqId seq, const std::vector<Token>& prompt) {
  const int32_t reused = kv.reuse_prefix(seq, prompt);
  if (!kv.reserve(seq, (int32_t)prompt.size() - reused)) {
    kv.release(seq);
    return -1;
  }
  write_rows(kv, seq, prompt, reused, (int32_t)prompt.size());
  kv.commit(seq, std::span<const Token>(prompt).subspan((size_t)reused));
  return reused;
}

// Decode: one token per step, as the scheduler does.
bool decode(PagedKvCache& kv, SeqId seq, std::vector<Token>& toks, int n, uint32_t seed) {
  std::mt19937 rng(seed);
  for (int i = 0; i < n; ++i) {
    if (!kv.reserve(seq, 1)) return false;
    toks.push_back((Token)(rng() % 1000));
    const int32_t p = (int32_t)toks.size() - 1;
    write_rows(kv, seq, toks, p, p + 1);
    kv.commit(seq, std::span<const Token>(toks).subspan((size_t)p));
  }
  return true;
}

std::vector<Token> tokens(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Token> t((size_t)n);
  for (Token& x : t) x = (Token)(rng() % 1000);
  return t;
}

void expect_balanced(const PagedKvCache& kv) {
  const KvStats st = kv.stats();
  EXPECT_EQ(st.blocks_used + kv.free_blocks(), st.blocks_total);
  EXPECT_LE(st.blocks_cached, kv.free_blocks());
}

TEST(SlidingKv, LayoutGroupsLayers) {
  // gemma2: alternate; 2 global + 2 sliding layers -> 2 tables of 2-layer blocks.
  const KvShape alt = shape_of({1, 0, 1, 0}, 16);
  EXPECT_EQ(PagedKvCache::tables(alt), 2);
  EXPECT_EQ(PagedKvCache::block_bytes(alt), 2 * 2 * 16 * 8 * 2);
  // gemma3: five sliding, one global -> 6 tables of 1-layer blocks.
  EXPECT_EQ(PagedKvCache::tables(shape_of({1, 1, 1, 1, 1, 0}, 16)), 6);
  // No window or no sliding layer: today's single table of every layer.
  EXPECT_EQ(PagedKvCache::tables(shape_of({1, 0, 1, 0}, 0)), 1);
  EXPECT_EQ(PagedKvCache::tables(shape_of({0, 0, 0}, 16)), 1);
  EXPECT_EQ(PagedKvCache::block_bytes(shape_of({0, 0, 0}, 16)), 2 * 3 * 16 * 8 * 2);
  // Every layer slides: one table, all layers.
  EXPECT_EQ(PagedKvCache::tables(shape_of({1, 1, 1}, 16)), 1);

  auto kv = make(alt, 8);
  ASSERT_TRUE(kv);
  EXPECT_EQ(kv->kept_window(0), 16);
  EXPECT_EQ(kv->kept_window(1), 0);
  EXPECT_EQ(kv->blocks_for(17), 4);  // two 16-token blocks in each of the two tables

  KvShape bad = alt;
  bad.sliding.pop_back();
  KvConfig cfg;
  cfg.pool_bytes = PagedKvCache::block_bytes(alt) * 8;
  EXPECT_FALSE(PagedKvCache::create(bad, cfg).is_ok());
  bad = alt;
  bad.window = -1;
  EXPECT_FALSE(PagedKvCache::create(bad, cfg).is_ok());
}

TEST(SlidingKv, DecodeReturnsBlocksThatLeaveTheWindow) {
  const KvShape shape = shape_of({1, 0, 1, 0}, 16);
  auto kv = make(shape, 64);
  ASSERT_TRUE(kv);
  std::vector<Token> toks = tokens(5, 1);
  ASSERT_EQ(run_prompt(*kv, 0, toks), 0);
  int32_t max_used = 0;
  for (int step = 0; step < 195; ++step) {
    ASSERT_TRUE(decode(*kv, 0, toks, 1, 100 + step));
    max_used = std::max(max_used, kv->stats().blocks_used);
    const int32_t n = (int32_t)toks.size();
    // Global: every block; sliding: blocks from the one holding n + 1 - 16 on.
    const int32_t global = (n + kBt - 1) / kBt;
    const int32_t sliding = global - std::max(0, n + 1 - 16) / kBt;
    ASSERT_EQ(kv->stats().blocks_used, global + sliding) << n;
    ASSERT_LE(sliding, 2);
  }
  EXPECT_TRUE(rows_ok(*kv, 0, toks, 200));
  EXPECT_EQ(kv->stats().blocks_used, 13 + 2);
  // Writes to a sliding layer before the window are dropped, not stored.
  const uint64_t skipped = kv->stats().writes_skipped;
  kv->write(0, 0, 3, row_for(toks, 3, 0, 0).data(), row_for(toks, 3, 0, 1).data());
  EXPECT_EQ(kv->stats().writes_skipped, skipped + 1);
  kv->release(0);
  EXPECT_EQ(kv->stats().blocks_used, 0);
  EXPECT_EQ(kv->free_blocks(), kv->stats().blocks_total);
  expect_balanced(*kv);
}

TEST(SlidingKv, EveryLayerSlidingBoundsTheWholeSequence) {
  const KvShape shape = shape_of({1, 1, 1}, 20);
  auto kv = make(shape, 8);  // 8 blocks: far fewer than 400 tokens would need
  ASSERT_TRUE(kv);
  std::vector<Token> toks = tokens(10, 2);
  ASSERT_EQ(run_prompt(*kv, 0, toks), 0);
  ASSERT_TRUE(decode(*kv, 0, toks, 390, 3));
  EXPECT_LE(kv->stats().blocks_used, 3);  // ceil(19 / 16) + 1
  EXPECT_TRUE(rows_ok(*kv, 0, toks, 400));
  // No global layer to anchor a verified prefix chain: hits are refused.
  kv->release(0);
  EXPECT_EQ(kv->reuse_prefix(1, toks), 0);
  kv->release(1);
  EXPECT_EQ(kv->stats().blocks_used, 0);
  expect_balanced(*kv);
}

TEST(SlidingKv, PrefixHitBringsTheWindowsSlidingRows) {
  const KvShape shape = shape_of({1, 0, 1, 0}, 16);
  auto kv = make(shape, 64);
  ASSERT_TRUE(kv);
  const std::vector<Token> a = tokens(100, 4);
  ASSERT_EQ(run_prompt(*kv, 0, a), 0);
  EXPECT_TRUE(rows_ok(*kv, 0, a, 100));
  // Sliding blocks 0..4 went back (findable) once the prompt was committed.
  EXPECT_EQ(kv->stats().blocks_used, 7 + 2);
  kv->release(0);
  EXPECT_EQ(kv->stats().blocks_used, 0);

  // A longer prompt: the six full blocks and their last window's sliding rows.
  std::vector<Token> b = a;
  for (Token t : tokens(30, 5)) b.push_back(t);
  ASSERT_EQ(run_prompt(*kv, 1, b), 96);
  EXPECT_TRUE(rows_ok(*kv, 1, b, 130));
  // A prompt sharing 50 tokens: 48 reused, sliding rows of positions 33..47.
  std::vector<Token> c(a.begin(), a.begin() + 50);
  for (Token t : tokens(20, 6)) c.push_back(t);
  ASSERT_EQ(run_prompt(*kv, 2, c), 48);
  EXPECT_TRUE(rows_ok(*kv, 2, c, 70));
  kv->release(1);
  kv->release(2);
  EXPECT_EQ(kv->stats().blocks_used, 0);
  expect_balanced(*kv);
}

TEST(SlidingKv, HitWithoutTheWindowsSlidingRowsIsRefused) {
  const KvShape shape = shape_of({1, 0, 1, 0}, 16);
  auto kv = make(shape, 16);
  ASSERT_TRUE(kv);
  const std::vector<Token> a = tokens(100, 7);
  ASSERT_EQ(run_prompt(*kv, 0, a), 0);
  kv->release(0);
  // LRU: sliding blocks 0..4 (dropped while the prompt ran), then the global
  // ones and sliding block 5. 10 blocks = 4 blank + sliding 0..4 + global 5.
  ASSERT_TRUE(kv->reserve(9, 5 * kBt));
  kv->release(9);
  EXPECT_EQ(kv->stats().blocks_cached, 5);  // global blocks 0..4 are still findable
  // 48 reused tokens would need sliding block 2 (positions 33..47), 32 block
  // 1, 16 block 0: all evicted, so the hit is refused.
  std::vector<Token> c(a.begin(), a.begin() + 50);
  for (Token t : tokens(20, 8)) c.push_back(t);
  const int32_t reused = run_prompt(*kv, 1, c);
  EXPECT_EQ(reused, 0);
  EXPECT_TRUE(rows_ok(*kv, 1, c, 70));
  kv->release(1);
  EXPECT_EQ(kv->stats().blocks_used, 0);
  expect_balanced(*kv);
}

TEST(SlidingKv, HitNeedsOnlyTheWindowsSlidingRows) {
  const KvShape shape = shape_of({1, 0, 1, 0}, 16);
  auto kv = make(shape, 16);
  ASSERT_TRUE(kv);
  const std::vector<Token> a = tokens(100, 9);
  ASSERT_EQ(run_prompt(*kv, 0, a), 0);
  kv->release(0);
  // 8 blocks = 4 blank + the 4 oldest cached: sliding blocks 0..3.
  ASSERT_TRUE(kv->reserve(9, 4 * kBt));
  kv->release(9);
  EXPECT_EQ(kv->stats().blocks_cached, 8);  // global 0..5, sliding 4 and 5
  // 96 reused tokens need only sliding block 5 (positions 81..95).
  std::vector<Token> b = a;
  for (Token t : tokens(20, 10)) b.push_back(t);
  EXPECT_EQ(run_prompt(*kv, 1, b), 96);
  EXPECT_TRUE(rows_ok(*kv, 1, b, 120));
  kv->release(1);
  EXPECT_EQ(kv->stats().blocks_used, 0);
  expect_balanced(*kv);
}

// Random prompts sharing prefixes, decode, pool pressure and releases in any
// order: rows right, accounting balanced, nothing held at the end.
TEST(SlidingKv, RandomWorkloadHasNoLeaksAndKeepsRowsRight) {
  for (const KvShape& shape :
       {shape_of({1, 0, 1, 0}, 16), shape_of({1, 1, 0, 1, 1, 0}, 24), shape_of({1, 1}, 20)}) {
    auto kv = make(shape, 40);
    ASSERT_TRUE(kv);
    std::mt19937 rng(11);
    const std::vector<Token> base = tokens(200, 12);
    struct Live {
      SeqId id;
      std::vector<Token> toks;
    };
    std::vector<Live> live;
    SeqId next = 0;
    for (int it = 0; it < 300; ++it) {
      const uint32_t op = rng() % 4;
      if (op == 0 || live.empty()) {
        std::vector<Token> p(base.begin(), base.begin() + 1 + rng() % 120);
        for (Token t : tokens((int)(rng() % 40), rng())) p.push_back(t);
        const SeqId id = next++;
        if (run_prompt(*kv, id, p) >= 0) {
          ASSERT_TRUE(rows_ok(*kv, id, p, (int32_t)p.size()));
          live.push_back({id, p});
        }
      } else if (op == 1) {
        Live& l = live[rng() % live.size()];
        if (decode(*kv, l.id, l.toks, 1 + (int)(rng() % 20), rng()))
          ASSERT_TRUE(rows_ok(*kv, l.id, l.toks, (int32_t)l.toks.size()));
        else
          ASSERT_EQ(kv->length(l.id), (int32_t)l.toks.size()) << "a failed reserve changes nothing";
      } else {
        const size_t i = rng() % live.size();
        kv->release(live[i].id);
        live.erase(live.begin() + (ptrdiff_t)i);
      }
      expect_balanced(*kv);
    }
    for (const Live& l : live) kv->release(l.id);
    // Shared prefixes were found (with a global layer to chain them).
    if (PagedKvCache::tables(shape) > 1) {
      EXPECT_GT(kv->stats().prefix_hits, 0u);
    }
    EXPECT_EQ(kv->stats().blocks_used, 0);
    EXPECT_EQ(kv->free_blocks(), kv->stats().blocks_total);
  }
}

}  // namespace
}  // namespace cairn::kv
