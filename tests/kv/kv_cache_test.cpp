// Paged KV cache: pool accounting, all-or-nothing reservations, verified
// prefix reuse (also under forced hash collisions), the write guard on shared
// blocks, LRU eviction order, and pool sizing.
#include "kv/kv_cache.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <random>
#include <vector>

#include "core/half.h"

namespace cairn::kv {
namespace {

const KvShape kShape{3, 8};  // 3 layers, 8-element rows
constexpr int kBt = 16;

std::unique_ptr<PagedKvCache> make(int32_t n_blocks, bool prefix = true,
                                   BlockHashFn hash = nullptr) {
  KvConfig cfg;
  cfg.pool_bytes = PagedKvCache::block_bytes(kShape) * n_blocks;
  cfg.prefix_cache = prefix;
  cfg.hash_for_testing = hash;
  auto r = PagedKvCache::create(kShape, cfg);
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  return r.is_ok() ? std::move(r.value()) : nullptr;
}

// The K (or V) a "model" would write at `pos`: a function of every token up
// to and including pos, so sharing rows between prompts with a common prefix
// is correct and sharing them between different prefixes is detectable.
// Small integers, exact in F16.
std::vector<float> row_for(const std::vector<Token>& toks, int32_t pos, int layer, int which) {
  uint64_t h = 1469598103934665603ULL;
  for (int32_t i = 0; i <= pos; ++i)
    h = (h ^ (uint64_t)(uint32_t)toks[(size_t)i]) * 1099511628211ULL;
  std::vector<float> row((size_t)kShape.row_elems);
  for (size_t i = 0; i < row.size(); ++i) {
    const uint64_t x = (h ^ ((uint64_t)layer * 0x9e3779b97f4a7c15ULL) ^
                        (i * 0xbf58476d1ce4e5b9ULL) ^ (uint64_t)which) *
                       0x94d049bb133111ebULL;
    row[i] = (float)((x >> 40) % 2001) - 1000.0f;
  }
  return row;
}

// Writes rows for positions [from, to) of `seq` whose tokens are `toks`.
void write_rows(PagedKvCache& kv, SeqId seq, const std::vector<Token>& toks, int32_t from,
                int32_t to) {
  for (int32_t p = from; p < to; ++p)
    for (int l = 0; l < kShape.n_layer; ++l)
      kv.write(l, seq, p, row_for(toks, p, l, 0).data(), row_for(toks, p, l, 1).data());
}

// Every stored row of positions [0, n) equals what its prefix implies.
::testing::AssertionResult rows_ok(const PagedKvCache& kv, SeqId seq,
                                   const std::vector<Token>& toks, int32_t n) {
  for (int32_t p = 0; p < n; ++p)
    for (int l = 0; l < kShape.n_layer; ++l)
      for (int which = 0; which < 2; ++which) {
        const auto want = row_for(toks, p, l, which);
        const auto* got =
            static_cast<const uint16_t*>(which ? kv.value(l, seq, p) : kv.key(l, seq, p));
        for (size_t i = 0; i < want.size(); ++i)
          if (f16_to_f32(got[i]) != want[i])
            return ::testing::AssertionFailure()
                   << "seq " << seq << " pos " << p << " layer " << l << (which ? " V" : " K")
                   << " elem " << i << ": " << f16_to_f32(got[i]) << " != " << want[i];
      }
  return ::testing::AssertionSuccess();
}

// Runs a whole prompt the way the scheduler will: reuse, reserve the rest,
// "forward" (write rows), commit. Returns the reused length, or -1 when the
// reservation failed (the sequence is then released).
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

std::vector<Token> tokens(int n, uint32_t seed, int vocab = 1000) {
  std::mt19937 rng(seed);
  std::vector<Token> t((size_t)n);
  for (Token& x : t) x = (Token)(rng() % (uint32_t)vocab);
  return t;
}

std::vector<Token> cat(std::vector<Token> a, const std::vector<Token>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

void expect_balanced(const PagedKvCache& kv) {
  const KvStats st = kv.stats();
  EXPECT_EQ(st.blocks_used + kv.free_blocks(), st.blocks_total);
  EXPECT_LE(st.blocks_cached, kv.free_blocks());
}

TEST(PagedKvCache, CreateValidatesAndRoundsDown) {
  EXPECT_EQ(PagedKvCache::block_bytes(kShape), 2 * 3 * 16 * 8 * 2);
  EXPECT_EQ(PagedKvCache::block_bytes({0, 8}), 0);
  KvConfig cfg;
  cfg.pool_bytes = PagedKvCache::block_bytes(kShape) * 10 + 777;
  auto kv = PagedKvCache::create(kShape, cfg);
  ASSERT_TRUE(kv.is_ok()) << kv.status().message();
  EXPECT_EQ((*kv)->stats().blocks_total, 10);
  EXPECT_EQ((*kv)->free_blocks(), 10);
  EXPECT_EQ((*kv)->dtype(), TensorType::F16);
  EXPECT_EQ((*kv)->n_layer(), 3);
  EXPECT_EQ((*kv)->row_elems(), 8);
  EXPECT_EQ((*kv)->block_tokens(), 16);
  EXPECT_EQ((*kv)->blocks_for(0), 0);
  EXPECT_EQ((*kv)->blocks_for(1), 1);
  EXPECT_EQ((*kv)->blocks_for(16), 1);
  EXPECT_EQ((*kv)->blocks_for(17), 2);

  struct Bad {
    KvShape shape;
    int64_t blocks;
    int32_t bt;
    const char* what;
  };
  for (const Bad& b :
       {Bad{{0, 8}, 10, 16, "positive layer count"}, Bad{{3, -1}, 10, 16, "positive layer count"},
        Bad{kShape, 10, 12, "power of two"}, Bad{kShape, 10, 0, "power of two"},
        Bad{kShape, 10, 4096, "power of two"}, Bad{kShape, 3, 16, "at least 4"},
        Bad{kShape, 0, 16, "at least 4"}}) {
    KvConfig c;
    c.block_tokens = b.bt;
    c.pool_bytes = b.blocks * std::max<int64_t>(1, PagedKvCache::block_bytes(kShape, b.bt));
    auto r = PagedKvCache::create(b.shape, c);
    ASSERT_FALSE(r.is_ok()) << b.what;
    EXPECT_NE(r.status().message().find(b.what), std::string::npos) << r.status().message();
    EXPECT_EQ(r.status().message().find('\n'), std::string::npos);
  }
  KvConfig neg;
  neg.pool_bytes = -5;
  EXPECT_FALSE(PagedKvCache::create(kShape, neg).is_ok());
}

TEST(PagedKvCache, ReserveCommitReleaseAndCapacity) {
  auto kv = make(8);
  ASSERT_TRUE(kv);
  EXPECT_EQ(kv->capacity(7), 0);
  EXPECT_EQ(kv->length(7), 0);
  ASSERT_TRUE(kv->reserve(7, 20));
  EXPECT_EQ(kv->capacity(7), 20);  // reserved positions, not whole blocks
  EXPECT_EQ(kv->stats().blocks_used, 2);
  ASSERT_TRUE(kv->reserve(7, 5));  // still room after length 0
  EXPECT_EQ(kv->capacity(7), 20);
  const auto t = tokens(20, 1);
  write_rows(*kv, 7, t, 0, 20);
  kv->commit(7, t);
  EXPECT_EQ(kv->length(7), 20);
  EXPECT_TRUE(rows_ok(*kv, 7, t, 20));
  ASSERT_TRUE(kv->reserve(7, 13));  // 33 tokens: a third block
  EXPECT_EQ(kv->capacity(7), 33);
  EXPECT_EQ(kv->stats().blocks_used, 3);
  EXPECT_TRUE(kv->reserve(8, 0));  // creates an empty sequence, no blocks
  EXPECT_EQ(kv->stats().blocks_used, 3);
  EXPECT_FALSE(kv->reserve(9, -1));
  kv->release(7);
  kv->release(8);
  kv->release(12345);  // unknown: ignored
  const KvStats st = kv->stats();
  EXPECT_EQ(st.blocks_used, 0);
  EXPECT_EQ(st.blocks_cached, 1);  // the one full block stays findable
  EXPECT_EQ(kv->free_blocks(), 8);
  EXPECT_EQ(kv->capacity(7), 0);
  EXPECT_EQ(kv->length(7), 0);
}

TEST(PagedKvCache, ReserveFailsCleanlyWhenFull) {
  auto kv = make(4);
  ASSERT_TRUE(kv);
  const auto a = tokens(40, 2);
  ASSERT_EQ(run_prompt(*kv, 1, a), 0);  // 3 blocks
  const KvStats before = kv->stats();
  EXPECT_FALSE(kv->reserve(2, 17));  // needs 2, 1 left
  EXPECT_EQ(kv->capacity(2), 0);     // not even created
  EXPECT_FALSE(kv->reserve(1, 25));  // 65 tokens: 5 blocks
  EXPECT_EQ(kv->capacity(1), 40);
  EXPECT_EQ(kv->length(1), 40);
  const KvStats after = kv->stats();
  EXPECT_EQ(after.blocks_used, before.blocks_used);
  EXPECT_EQ(after.blocks_cached, before.blocks_cached);
  EXPECT_EQ(kv->free_blocks(), 1);
  EXPECT_TRUE(rows_ok(*kv, 1, a, 40));
  EXPECT_TRUE(kv->reserve(1, 24));  // exactly 4 blocks
  EXPECT_EQ(kv->free_blocks(), 0);
  EXPECT_FALSE(kv->reserve(3, 1));
  kv->release(1);
  // Cached blocks count as free and are evicted on demand.
  EXPECT_EQ(kv->stats().blocks_cached, 2);
  EXPECT_TRUE(kv->reserve(3, 64));
  EXPECT_EQ(kv->stats().blocks_cached, 0);
  EXPECT_EQ(kv->stats().blocks_used, 4);
  kv->release(3);
  EXPECT_EQ(kv->stats().blocks_used, 0);
}

TEST(PagedKvCache, PrefixReuseFindsOnlyExactFullBlocks) {
  auto kv = make(32);
  ASSERT_TRUE(kv);
  const auto a = tokens(40, 3);
  ASSERT_EQ(run_prompt(*kv, 1, a), 0);  // blocks 0 and 1 full, 2 partial

  const auto prefix = [&](size_t n) {
    return std::vector<Token>(a.begin(), a.begin() + (ptrdiff_t)n);
  };
  struct Case {
    std::vector<Token> prompt;
    int32_t want;
    const char* what;
  };
  auto changed_first = a;
  changed_first[0] += 1;
  auto changed_17 = a;
  changed_17[17] += 1;
  const std::vector<Case> cases = {
      {cat(prefix(32), tokens(9, 50)), 32, "two full blocks, then different"},
      {prefix(33), 32, "two full blocks and one more token"},
      {prefix(32), 31, "ends on a cached block: last token recomputed"},
      {prefix(16), 15, "one block exactly"},
      {cat(prefix(20), tokens(30, 51)), 16, "diverges inside block 1"},
      {changed_17, 16, "one token of block 1 differs"},
      {changed_first, 0, "first token differs"},
      {prefix(15), 0, "shorter than a block"},
      {prefix(40), 32, "the whole of A: its partial block is not findable"},
      {prefix(1), 0, "one token"},
      {{}, 0, "empty"},
  };
  SeqId id = 100;
  uint64_t queries = kv->stats().prefix_queries, hits = kv->stats().prefix_hits;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const SeqId seq = id++;
    const int32_t got = kv->reuse_prefix(seq, c.prompt);
    EXPECT_EQ(got, c.want);
    queries += c.prompt.size();
    hits += (uint64_t)c.want;
    EXPECT_EQ(kv->length(seq), got);
    EXPECT_EQ(kv->capacity(seq), got);
    // Identical K/V bytes: the very rows A wrote.
    for (int32_t p = 0; p < got; ++p)
      for (int l = 0; l < kShape.n_layer; ++l) {
        EXPECT_EQ(std::memcmp(kv->key(l, seq, p), kv->key(l, 1, p), 16), 0);
        EXPECT_EQ(std::memcmp(kv->value(l, seq, p), kv->value(l, 1, p), 16), 0);
      }
    EXPECT_TRUE(rows_ok(*kv, seq, c.prompt, got));
    // The rest of the prompt runs normally on top of the shared prefix.
    ASSERT_TRUE(kv->reserve(seq, (int32_t)c.prompt.size() - got));
    write_rows(*kv, seq, c.prompt, got, (int32_t)c.prompt.size());
    kv->commit(seq, std::span<const Token>(c.prompt).subspan((size_t)got));
    EXPECT_TRUE(rows_ok(*kv, seq, c.prompt, (int32_t)c.prompt.size()));
    EXPECT_TRUE(rows_ok(*kv, 1, a, 40));
    kv->release(seq);
    expect_balanced(*kv);
  }
  EXPECT_EQ(kv->stats().prefix_queries, queries);
  EXPECT_EQ(kv->stats().prefix_hits, hits);

  // A block is keyed by its whole prefix: A's block 1 behind another block 0 is a miss.
  auto other = tokens(16, 60);
  ASSERT_EQ(run_prompt(*kv, 2, cat(other, tokens(1, 61))), 0);
  EXPECT_EQ(kv->reuse_prefix(3, cat(other, std::vector<Token>(a.begin() + 16, a.end()))), 16);
  kv->release(2);
  kv->release(3);
  kv->release(1);
  EXPECT_EQ(kv->stats().blocks_used, 0);
  // Findable after release, until evicted.
  EXPECT_EQ(kv->reuse_prefix(4, a), 32);
  kv->release(4);
}

TEST(PagedKvCache, TwoLiveSequencesShareAndSharedBlocksAreNeverOverwritten) {
  auto kv = make(16);
  ASSERT_TRUE(kv);
  const auto a = tokens(32, 4);
  ASSERT_EQ(run_prompt(*kv, 1, a), 0);
  EXPECT_EQ(kv->stats().blocks_used, 2);

  // B's prompt ends exactly on A's second block: both blocks shared, last token recomputed.
  ASSERT_EQ(kv->reuse_prefix(2, a), 31);
  EXPECT_EQ(kv->stats().blocks_used, 2);  // shared, not copied
  ASSERT_TRUE(kv->reserve(2, 1));
  EXPECT_EQ(kv->stats().blocks_used, 2);  // position 31 is inside the shared block
  EXPECT_EQ(kv->capacity(2), 32);
  const uint64_t skipped = kv->stats().writes_skipped;
  std::vector<float> garbage((size_t)kShape.row_elems, 1234.0f);
  for (int l = 0; l < kShape.n_layer; ++l) {
    kv->write(l, 2, 31, garbage.data(), garbage.data());  // the recomputed last token
    kv->write(l, 2, 3, garbage.data(), garbage.data());   // a bug upstream
    kv->write(l, 1, 20, garbage.data(), garbage.data());  // the owner rewriting a full block
    kv->write(l, 2, 32, garbage.data(), garbage.data());  // beyond capacity
  }
  EXPECT_EQ(kv->stats().writes_skipped, skipped + 4u * (uint64_t)kShape.n_layer);
  EXPECT_TRUE(rows_ok(*kv, 1, a, 32));
  EXPECT_TRUE(rows_ok(*kv, 2, a, 32));
  kv->commit(2, std::span<const Token>(a).subspan(31));
  EXPECT_EQ(kv->length(2), 32);

  // Both grow past the shared prefix into private blocks.
  const auto ta = cat(a, tokens(5, 5)), tb = cat(a, tokens(5, 6));
  for (auto [seq, t] : {std::pair{1, &ta}, std::pair{2, &tb}}) {
    ASSERT_TRUE(kv->reserve(seq, 5));
    write_rows(*kv, seq, *t, 32, 37);
    kv->commit(seq, std::span<const Token>(*t).subspan(32));
  }
  EXPECT_EQ(kv->stats().blocks_used, 4);
  EXPECT_NE(kv->key(0, 1, 32), kv->key(0, 2, 32));
  EXPECT_EQ(kv->key(0, 1, 31), kv->key(0, 2, 31));
  EXPECT_TRUE(rows_ok(*kv, 1, ta, 37));
  EXPECT_TRUE(rows_ok(*kv, 2, tb, 37));

  kv->release(1);  // B still holds the shared blocks
  EXPECT_EQ(kv->stats().blocks_used, 3);
  EXPECT_EQ(kv->stats().blocks_cached, 0);
  EXPECT_TRUE(rows_ok(*kv, 2, tb, 37));
  kv->release(2);
  EXPECT_EQ(kv->stats().blocks_used, 0);
  EXPECT_EQ(kv->stats().blocks_cached, 2);
}

// A block filled independently by a second sequence (both prefilled before
// either committed) stays private; the chain continues through the first copy.
TEST(PagedKvCache, DuplicateFullBlocksAreNotRegisteredTwice) {
  auto kv = make(16);
  ASSERT_TRUE(kv);
  const auto p = tokens(40, 7);
  for (SeqId s : {1, 2}) {
    ASSERT_EQ(kv->reuse_prefix(s, p), 0);
    ASSERT_TRUE(kv->reserve(s, 40));
  }
  for (SeqId s : {1, 2}) {
    write_rows(*kv, s, p, 0, 40);
    kv->commit(s, p);
  }
  kv->release(1);
  EXPECT_EQ(kv->stats().blocks_cached, 2);
  kv->release(2);
  EXPECT_EQ(kv->stats().blocks_cached, 2);
  EXPECT_EQ(kv->free_blocks(), 16);
  ASSERT_EQ(kv->reuse_prefix(3, p), 32);
  EXPECT_TRUE(rows_ok(*kv, 3, p, 32));
  kv->release(3);
}

TEST(PagedKvCache, EvictsLeastRecentlyUsedAndChainTailsFirst) {
  auto kv = make(6);
  ASSERT_TRUE(kv);
  // Three prompts of 17 tokens: one full (cached) block each after release.
  std::vector<std::vector<Token>> p;
  for (uint32_t i = 0; i < 3; ++i) {
    p.push_back(tokens(17, 10 + i));
    ASSERT_EQ(run_prompt(*kv, (SeqId)i, p.back()), 0);
    kv->release((SeqId)i);
  }
  EXPECT_EQ(kv->stats().blocks_cached, 3);
  // Touch p[0]: now p[1] is the least recently used.
  ASSERT_EQ(kv->reuse_prefix(10, p[0]), 16);
  kv->release(10);
  // 4 blocks: 3 blank ones and one eviction.
  ASSERT_TRUE(kv->reserve(11, 64));
  EXPECT_EQ(kv->stats().blocks_cached, 2);
  EXPECT_EQ(kv->reuse_prefix(12, p[1]), 0);
  ASSERT_EQ(kv->reuse_prefix(13, p[0]), 16);
  ASSERT_EQ(kv->reuse_prefix(14, p[2]), 16);
  EXPECT_TRUE(rows_ok(*kv, 13, p[0], 16));
  EXPECT_TRUE(rows_ok(*kv, 14, p[2], 16));
  for (SeqId s : {11, 12, 13, 14}) kv->release(s);
  EXPECT_EQ(kv->stats().blocks_used, 0);

  // One chain of 3 full blocks: evicting one block keeps the longest prefix.
  auto kv2 = make(4);
  ASSERT_TRUE(kv2);
  const auto c = tokens(49, 20);
  ASSERT_EQ(run_prompt(*kv2, 1, c), 0);
  kv2->release(1);
  EXPECT_EQ(kv2->stats().blocks_cached, 3);
  ASSERT_TRUE(kv2->reserve(2, 32));  // one blank block, one evicted
  EXPECT_EQ(kv2->stats().blocks_cached, 2);
  ASSERT_EQ(kv2->reuse_prefix(3, c), 32);
  EXPECT_TRUE(rows_ok(*kv2, 3, c, 32));
  kv2->release(2);
  kv2->release(3);
}

uint64_t constant_hash(uint64_t, std::span<const Token>) { return 42; }
uint64_t two_bit_hash(uint64_t prev, std::span<const Token> t) { return hash_block(prev, t) & 3; }

// With every key equal, hits must still be exact: tokens and the chain are verified.
TEST(PagedKvCache, HashCollisionsNeverReturnWrongKv) {
  auto kv = make(32, true, &constant_hash);
  ASSERT_TRUE(kv);
  const auto a = tokens(16, 30), b = tokens(16, 31), c = tokens(16, 32), d = tokens(16, 33);
  const auto x = cat(cat(a, c), d), y = cat(cat(b, c), a);
  ASSERT_EQ(run_prompt(*kv, 1, cat(x, {7})), 0);
  ASSERT_EQ(run_prompt(*kv, 2, cat(y, {7})), 0);
  kv->release(1);
  kv->release(2);
  EXPECT_EQ(kv->stats().blocks_cached, 6);
  struct Case {
    std::vector<Token> prompt;
    int32_t want;
  };
  for (const Case& k : std::vector<Case>{{cat(x, {1}), 48},
                                         {cat(y, {1}), 48},
                                         {cat(cat(b, c), d), 32},  // d only follows a, c
                                         {cat(cat(a, c), a), 32},
                                         {cat(c, {1}), 0},  // c is never a first block
                                         {cat(cat(a, b), c), 16},
                                         {cat(d, a), 0}}) {
    const int32_t got = kv->reuse_prefix(50, k.prompt);
    EXPECT_EQ(got, k.want);
    EXPECT_TRUE(rows_ok(*kv, 50, k.prompt, got));
    kv->release(50);
  }
  EXPECT_EQ(kv->stats().blocks_used, 0);
}

// Many sequences with random lengths and shared prefixes, random order of
// release, some hashes colliding: rows stay right and nothing leaks.
void random_workload(BlockHashFn hash, uint32_t seed) {
  auto kv = make(40, true, hash);
  ASSERT_TRUE(kv);
  std::mt19937 rng(seed);
  std::vector<std::vector<Token>> bases;
  for (uint32_t i = 0; i < 4; ++i)
    bases.push_back(tokens(16 + (int)(rng() % 48), seed * 7 + i, 50));
  std::map<SeqId, std::vector<Token>> live;
  SeqId next = 0;
  int reused_total = 0, failed = 0;
  for (int step = 0; step < 1500; ++step) {
    const uint32_t op = rng() % 10;
    if (op < 3 || live.empty()) {  // a new prompt: a shared base (maybe cut) plus a tail
      const auto& base = bases[rng() % bases.size()];
      auto prompt =
          std::vector<Token>(base.begin(), base.begin() + (ptrdiff_t)(1 + rng() % base.size()));
      prompt = cat(prompt, tokens((int)(rng() % 20), rng(), 50));
      const SeqId seq = next++;
      const int32_t r = run_prompt(*kv, seq, prompt);
      if (r < 0) {
        ++failed;
        EXPECT_EQ(kv->capacity(seq), 0);
        EXPECT_EQ(kv->length(seq), 0);
      } else {
        reused_total += r;
        live[seq] = prompt;
      }
    } else if (op < 8) {  // decode a few tokens on a random live sequence
      auto it = std::next(live.begin(), (ptrdiff_t)(rng() % live.size()));
      const int n = 1 + (int)(rng() % 3);
      const KvStats before = kv->stats();
      const int free_before = kv->free_blocks();
      if (!kv->reserve(it->first, n)) {
        EXPECT_EQ(kv->stats().blocks_used, before.blocks_used);
        EXPECT_EQ(kv->free_blocks(), free_before);
        continue;
      }
      const auto more = tokens(n, rng(), 50);
      const int32_t len = kv->length(it->first);
      it->second = cat(it->second, more);
      write_rows(*kv, it->first, it->second, len, len + n);
      kv->commit(it->first, more);
    } else {  // release one
      auto it = std::next(live.begin(), (ptrdiff_t)(rng() % live.size()));
      ASSERT_TRUE(rows_ok(*kv, it->first, it->second, (int32_t)it->second.size()));
      kv->release(it->first);
      live.erase(it);
    }
    expect_balanced(*kv);
    if (step % 50 == 0)
      for (const auto& [seq, t] : live) {
        ASSERT_EQ(kv->length(seq), (int32_t)t.size());
        ASSERT_TRUE(rows_ok(*kv, seq, t, (int32_t)t.size()));
      }
  }
  EXPECT_GT(reused_total, 0);  // the workload did exercise the prefix cache
  EXPECT_GT(failed, 0);        // and ran the pool dry
  for (const auto& [seq, t] : live) {
    ASSERT_TRUE(rows_ok(*kv, seq, t, (int32_t)t.size()));
    kv->release(seq);
  }
  EXPECT_EQ(kv->stats().blocks_used, 0);
  EXPECT_EQ(kv->free_blocks(), 40);
}

TEST(PagedKvCache, RandomWorkloadHasNoLeaksAndKeepsRowsRight) { random_workload(nullptr, 1); }
TEST(PagedKvCache, RandomWorkloadWithCollidingHashes) { random_workload(&two_bit_hash, 2); }

TEST(PagedKvCache, PrefixCacheOff) {
  auto kv = make(8, false);
  ASSERT_TRUE(kv);
  const auto a = tokens(40, 40);
  ASSERT_EQ(run_prompt(*kv, 1, a), 0);
  ASSERT_EQ(kv->reuse_prefix(2, a), 0);
  kv->release(1);
  kv->release(2);
  EXPECT_EQ(kv->stats().blocks_cached, 0);
  EXPECT_EQ(kv->stats().prefix_hits, 0u);
  EXPECT_EQ(kv->free_blocks(), 8);
}

TEST(PagedKvCache, ReusePrefixLeavesAStartedSequenceAlone) {
  auto kv = make(8);
  ASSERT_TRUE(kv);
  const auto a = tokens(33, 41);
  ASSERT_EQ(run_prompt(*kv, 1, a), 0);
  EXPECT_EQ(kv->reuse_prefix(1, a), 0);
  EXPECT_EQ(kv->length(1), 33);
  EXPECT_EQ(kv->stats().blocks_used, 3);
  kv->release(1);
}

// Each LoRA adapter's K/V for the same tokens differ: a prefix is found only
// in the space (adapter) that computed it, even when every hash collides.
TEST(PagedKvCache, PrefixesAreFoundOnlyInTheirOwnSpace) {
  for (BlockHashFn hash : {(BlockHashFn) nullptr, &constant_hash}) {
    auto kv = make(32, true, hash);
    ASSERT_TRUE(kv);
    const auto p = cat(tokens(40, 50), {9});
    const auto run_in = [&](SeqId seq, uint32_t space) {
      const int32_t reused = kv->reuse_prefix(seq, p, space);
      EXPECT_TRUE(kv->reserve(seq, (int32_t)p.size() - reused));
      write_rows(*kv, seq, p, reused, (int32_t)p.size());
      kv->commit(seq, std::span<const Token>(p).subspan((size_t)reused));
      return reused;
    };
    EXPECT_EQ(run_in(1, 0), 0);
    EXPECT_EQ(run_in(2, 3), 0);   // adapter 3 does not see the base model's blocks
    EXPECT_EQ(run_in(3, 3), 32);  // but its own
    EXPECT_EQ(run_in(4, 0), 32);
    EXPECT_EQ(run_in(5, 4), 0);
    EXPECT_EQ(run_in(6, 4), 32);
    for (SeqId s = 1; s <= 6; ++s) kv->release(s);
    expect_balanced(*kv);
    EXPECT_EQ(kv->stats().blocks_used, 0);
    // A started sequence that fails to reserve gives its record back.
    EXPECT_EQ(kv->reuse_prefix(7, p, 5), 0);
    kv->release(7);
    EXPECT_EQ(kv->stats().blocks_used, 0);
  }
}

TEST(BlockHash, DependsOnEveryTokenTheOrderAndThePrefix) {
  const auto a = tokens(16, 1);
  const uint64_t h = hash_block(0, a);
  EXPECT_EQ(h, hash_block(0, a));
  EXPECT_NE(h, hash_block(1, a));
  for (size_t i = 0; i < a.size(); ++i) {
    auto b = a;
    b[i] ^= 1;
    EXPECT_NE(h, hash_block(0, b)) << i;
  }
  auto swapped = a;
  std::swap(swapped[0], swapped[1]);
  EXPECT_NE(h, hash_block(0, swapped));
  EXPECT_NE(hash_block(0, std::vector<Token>{0}), hash_block(0, std::vector<Token>{0, 0}));
}

TEST(PoolSize, DefaultIsFourContextsCappedByMemory) {
  const int64_t bb = PagedKvCache::block_bytes(kShape);
  const int64_t big = int64_t{1} << 40;
  EXPECT_EQ(default_pool_bytes(kShape, 256, big), 256 * bb);  // 4096 tokens at least
  EXPECT_EQ(default_pool_bytes(kShape, 8192, big), 4 * 8192 / 16 * bb);
  EXPECT_EQ(default_pool_bytes(kShape, 8192, 100 * bb), 50 * bb);  // half the memory
  EXPECT_EQ(default_pool_bytes(kShape, 8192, 0), kMinBlocks * bb);
  EXPECT_EQ(default_pool_bytes({0, 8}, 256, big), 0);
  EXPECT_GT(available_memory_bytes(), 0);
  const int64_t def = default_pool_bytes(kShape, 2048);
  EXPECT_GE(def, kMinBlocks * bb);
  EXPECT_LE(def, 4 * 2048 / 16 * bb);
  KvConfig cfg;
  cfg.pool_bytes = def;
  EXPECT_TRUE(PagedKvCache::create(kShape, cfg).is_ok());
}

}  // namespace
}  // namespace cairn::kv

namespace cairn::kv {
namespace {

// Raw rows for a handoff: what read_raw copies out, write_raw puts back into
// another cache byte for byte; rows a sequence does not hold, and rows of
// full (immutable) blocks, are refused.
TEST(PagedKvCache, RawRowsMoveBetweenCachesUnderTheWriteRules) {
  auto a = make(8), b = make(8);
  ASSERT_TRUE(a && b);
  EXPECT_TRUE(a->stores_rows());
  std::vector<Token> toks(20);
  for (int i = 0; i < 20; ++i) toks[(size_t)i] = 100 + i;
  ASSERT_TRUE(a->reserve(1, 20));
  for (int l = 0; l < kShape.n_layer; ++l)
    for (int32_t p = 0; p < 20; ++p) {
      auto k = row_for(toks, p, l, 0), v = row_for(toks, p, l, 1);
      a->write(l, 1, p, k.data(), v.data());
    }
  a->commit(1, toks);
  const size_t rb = (size_t)kShape.row_elems * 2;
  std::vector<uint8_t> k(rb), v(rb);
  EXPECT_FALSE(a->read_raw(0, 1, 20 + kBt, k.data(), v.data()));  // beyond the reservation
  EXPECT_FALSE(a->read_raw(0, 9, 0, k.data(), v.data()));         // unknown sequence
  EXPECT_FALSE(a->read_raw(kShape.n_layer, 1, 0, k.data(), v.data()));

  ASSERT_TRUE(b->reserve(4, 20));
  for (int l = 0; l < kShape.n_layer; ++l)
    for (int32_t p = 0; p < 20; ++p) {
      ASSERT_TRUE(a->read_raw(l, 1, p, k.data(), v.data()));
      EXPECT_TRUE(b->write_raw(l, 4, p, k.data(), v.data()));
    }
  b->commit(4, toks);
  for (int l = 0; l < kShape.n_layer; ++l)
    for (int32_t p = 0; p < 20; ++p) {
      EXPECT_EQ(std::memcmp(a->key(l, 1, p), b->key(l, 4, p), rb), 0) << l << " " << p;
      EXPECT_EQ(std::memcmp(a->value(l, 1, p), b->value(l, 4, p), rb), 0) << l << " " << p;
    }
  // Position 3 is in a full block now: immutable.
  const uint64_t skipped = b->stats().writes_skipped;
  EXPECT_FALSE(b->write_raw(0, 4, 3, k.data(), v.data()));
  EXPECT_EQ(b->stats().writes_skipped, skipped + 1);
  // The imported full block is findable by prefix in the receiving cache.
  EXPECT_EQ(b->reuse_prefix(5, toks), kBt);
  b->release(4);
  b->release(5);
  a->release(1);
  EXPECT_EQ(a->stats().blocks_used, 0);
  EXPECT_EQ(b->stats().blocks_used, 0);
}

}  // namespace
}  // namespace cairn::kv

namespace cairn::kv {
namespace {

// Speculative decoding reserves rows for draft tokens, commits the accepted
// ones and gives back the rest: blocks wholly past the committed length
// return to the pool, none of them ever findable by prefix.
TEST(PagedKvCache, UnreserveGivesBackBlocksPastTheCommittedLength) {
  auto kv = make(8);
  std::vector<Token> toks(40);
  for (size_t i = 0; i < toks.size(); ++i) toks[i] = (Token)(i % 7 + 1);
  ASSERT_TRUE(kv->reserve(1, 17));
  kv->commit(1, std::span<const Token>(toks).first(17));
  ASSERT_TRUE(kv->reserve(1, 23));  // 17 + 23 = 40 positions: 3 blocks
  EXPECT_EQ(kv->stats().blocks_used, 3);
  kv->commit(1, std::span<const Token>(toks).subspan(17, 2));  // two of 23 accepted
  kv->unreserve(1);
  EXPECT_EQ(kv->length(1), 19);
  EXPECT_EQ(kv->stats().blocks_used, 2);
  EXPECT_EQ(kv->layout(1).capacity, 19);
  ASSERT_TRUE(kv->reserve(1, 13));  // 32: still two blocks
  EXPECT_EQ(kv->stats().blocks_used, 2);
  kv->commit(1, std::span<const Token>(toks).subspan(19, 13));
  kv->unreserve(1);  // nothing past the length: nothing changes
  EXPECT_EQ(kv->stats().blocks_used, 2);
  kv->release(1);
  EXPECT_EQ(kv->stats().blocks_used, 0);
  // Only the two full blocks committed are findable.
  EXPECT_EQ(kv->reuse_prefix(2, toks), 32);
  kv->release(2);
  kv->unreserve(99);  // unknown: ignored
}

}  // namespace
}  // namespace cairn::kv
