// The split a distributed model makes of the paged cache: the worker's
// tables-only PagedKvCache hands out blocks (and forgets its prefixes when
// the agents' storage is replaced), an agent's BlockTableKv keeps the rows
// at those blocks. Rows written through one and read through the other's
// layout must be the paged cache's own.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "kv/block_table_kv.h"
#include "kv/kv_cache.h"

namespace cairn::kv {
namespace {

const KvShape kShape{2, 8};

std::unique_ptr<PagedKvCache> make(int32_t n_blocks, bool tables_only,
                                   std::function<uint64_t()> generation = nullptr) {
  KvConfig cfg;
  cfg.pool_bytes = PagedKvCache::block_bytes(kShape) * n_blocks;
  cfg.tables_only = tables_only;
  cfg.storage_generation = std::move(generation);
  auto r = PagedKvCache::create(kShape, cfg);
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  return r.is_ok() ? std::move(r.value()) : nullptr;
}

std::vector<float> row(int seq, int pos, int layer, int which) {
  std::vector<float> r((size_t)kShape.row_elems);
  for (size_t i = 0; i < r.size(); ++i) r[i] = (float)(seq * 1000 + pos * 10 + layer * 3 + which + (int)i);
  return r;
}

SeqTable table_of(const PagedKvCache& c, SeqId seq) {
  const SeqLayout l = c.layout(seq);
  return SeqTable{seq, std::vector<int32_t>(l.blocks.begin(), l.blocks.end()), l.writable_from, l.capacity};
}

TEST(BlockTableKv, HoldsTheRowsThePagedCacheWould) {
  auto paged = make(8, false);
  auto tables = make(8, true);
  auto agent = BlockTableKv::create(kShape, 8, 16);
  ASSERT_TRUE(agent.is_ok());
  const std::vector<Token> p1(21, 5), p2(40, 6);
  for (auto* c : {paged.get(), tables.get()}) {
    ASSERT_TRUE(c->reserve(1, 21));
    ASSERT_TRUE(c->reserve(2, 40));
  }
  ASSERT_TRUE((*agent)->set_tables({table_of(*tables, 1), table_of(*tables, 2)}).is_ok());
  EXPECT_EQ((*agent)->capacity(1), 21);
  EXPECT_EQ((*agent)->capacity(3), 0);
  for (int seq : {1, 2})
    for (int pos = 0; pos < (seq == 1 ? 21 : 40); ++pos)
      for (int layer = 0; layer < 2; ++layer) {
        paged->write(layer, seq, pos, row(seq, pos, layer, 0).data(), row(seq, pos, layer, 1).data());
        (*agent)->write(layer, seq, pos, row(seq, pos, layer, 0).data(), row(seq, pos, layer, 1).data());
      }
  // The tables-only cache has no rows: its writes are refused and counted.
  tables->write(0, 1, 0, row(1, 0, 0, 0).data(), row(1, 0, 0, 1).data());
  EXPECT_EQ(tables->stats().writes_skipped, 1u);
  for (int seq : {1, 2})
    for (int pos = 0; pos < (seq == 1 ? 21 : 40); ++pos)
      for (int layer = 0; layer < 2; ++layer) {
        EXPECT_EQ(0, std::memcmp(paged->key(layer, seq, pos), (*agent)->key(layer, seq, pos), 16));
        EXPECT_EQ(0, std::memcmp(paged->value(layer, seq, pos), (*agent)->value(layer, seq, pos), 16));
        const auto a = paged->rows(layer, seq, pos, 64), b = (*agent)->rows(layer, seq, pos, 64);
        EXPECT_EQ(a.n, b.n);
      }
}

TEST(BlockTableKv, RefusesTablesOutsideItsPool) {
  auto agent = BlockTableKv::create(kShape, 4, 16);
  ASSERT_TRUE(agent.is_ok());
  EXPECT_FALSE((*agent)->set_tables({SeqTable{1, {4}, 0, 16}}).is_ok());
  EXPECT_FALSE((*agent)->set_tables({SeqTable{1, {0}, 0, 17}}).is_ok());
  EXPECT_FALSE((*agent)->set_tables({SeqTable{1, {0}, 0, 8}, SeqTable{1, {1}, 0, 8}}).is_ok());
  EXPECT_TRUE((*agent)->set_tables({SeqTable{1, {3}, 0, 16}}).is_ok());
  EXPECT_FALSE(BlockTableKv::create(kShape, 0, 16).is_ok());
  EXPECT_FALSE(BlockTableKv::create(kShape, 4, 12).is_ok());
}

TEST(PagedKvCache, ANewStorageGenerationForgetsEveryPrefix) {
  uint64_t gen = 1;
  auto c = make(8, true, [&] { return gen; });
  std::vector<Token> prompt(40);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = (Token)i;
  ASSERT_TRUE(c->reserve(1, 40));
  c->commit(1, prompt);
  EXPECT_EQ(c->layout(1).generation, 1u);
  EXPECT_EQ(c->layout(1).writable_from, 32);
  c->release(1);
  EXPECT_EQ(c->reuse_prefix(2, prompt), 32);  // same storage: found
  c->release(2);
  gen = 2;  // the agents were replaced: nothing they hold is known any more
  EXPECT_EQ(c->reuse_prefix(3, prompt), 0);
  ASSERT_TRUE(c->reserve(3, 40));
  EXPECT_EQ(c->layout(3).generation, 2u);
  EXPECT_EQ(c->stats().blocks_cached, 0);
  EXPECT_EQ(c->free_blocks(), 5);
  EXPECT_TRUE(c->layout(99).blocks.empty());
}

}  // namespace
}  // namespace cairn::kv
