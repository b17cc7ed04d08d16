// --kv-type q8_0: the caches store K/V rows as Q8_0 blocks. The allocator's
// accounting (block_bytes, the pool a byte budget buys, default_pool_bytes)
// reports the real, smaller rows; rows are quantized on write and read back
// within half a step of their block; raw rows move between caches of the
// same type only (a handoff between types is refused by its geometry); and
// shapes Q8_0 cannot hold are refused with the flag's message.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/half.h"
#include "core/quant_blocks.h"
#include "kernels/type_ops.h"
#include "kv/block_table_kv.h"
#include "kv/contiguous_kv.h"
#include "kv/kv_cache.h"
#include "kv/transfer.h"

namespace cairn::kv {
namespace {

KvShape shape_of(int32_t layers, int32_t row, TensorType t) {
  KvShape s{layers, row};
  s.dtype = t;
  return s;
}

TEST(KvQ8, RowBytes) {
  EXPECT_EQ(kv_row_bytes(TensorType::F16, 128), 256);
  EXPECT_EQ(kv_row_bytes(TensorType::F32, 128), 512);
  EXPECT_EQ(kv_row_bytes(TensorType::Q8_0, 128), 4 * 34);
  EXPECT_EQ(kv_row_bytes(TensorType::Q8_0, 100), 0);
  EXPECT_EQ(kv_row_bytes(TensorType::Q4_0, 128), 0);
}

TEST(KvQ8, MemoryPerTokenIsAboutHalfOfF16) {
  for (int32_t row : {32, 64, 256, 512, 1024, 4096}) {
    for (int32_t layers : {1, 2, 22, 32}) {
      const int64_t f16 = PagedKvCache::block_bytes(shape_of(layers, row, TensorType::F16));
      const int64_t q8 = PagedKvCache::block_bytes(shape_of(layers, row, TensorType::Q8_0));
      ASSERT_GT(f16, 0);
      ASSERT_GT(q8, 0);
      // Bytes per token: 2 (K, V) * layers * row * 34 / 32 against * 2.
      EXPECT_EQ(q8, (int64_t)2 * layers * 16 * (row / 32) * 34);
      EXPECT_LE((double)q8, 0.55 * (double)f16) << row << " x " << layers;
    }
  }
}

TEST(KvQ8, SamePoolBytesHoldAbout188TimesTheTokens) {
  const int64_t mb = 64;
  for (int32_t row : {256, 1024}) {
    KvConfig cfg;
    cfg.pool_bytes = mb << 20;
    auto f16 = PagedKvCache::create(shape_of(4, row, TensorType::F16), cfg);
    auto q8 = PagedKvCache::create(shape_of(4, row, TensorType::Q8_0), cfg);
    ASSERT_TRUE(f16) << f16.status().message();
    ASSERT_TRUE(q8) << q8.status().message();
    const int64_t tf = (int64_t)(*f16)->stats().blocks_total * (*f16)->block_tokens();
    const int64_t tq = (int64_t)(*q8)->stats().blocks_total * (*q8)->block_tokens();
    const double ratio = (double)tq / (double)tf;
    EXPECT_GE(ratio, 1.85) << row;
    EXPECT_LE(ratio, 64.0 / 34.0 + 0.01) << row;
    // The pool's accounting: every block at its real size, within the budget.
    EXPECT_LE((int64_t)(*q8)->stats().blocks_total *
                  PagedKvCache::block_bytes(shape_of(4, row, TensorType::Q8_0)),
              cfg.pool_bytes);
    // A full context fits in as many more tokens of a q8_0 pool.
    EXPECT_GE((*q8)->free_blocks(), (int32_t)(1.85 * (*f16)->free_blocks()));
  }
  // default_pool_bytes asks for the same tokens in fewer bytes.
  const int64_t want_f16 =
      default_pool_bytes(shape_of(8, 512, TensorType::F16), 2048, int64_t{1} << 40);
  const int64_t want_q8 =
      default_pool_bytes(shape_of(8, 512, TensorType::Q8_0), 2048, int64_t{1} << 40);
  EXPECT_LE((double)want_q8, 0.55 * (double)want_f16);
  EXPECT_EQ(want_f16 / PagedKvCache::block_bytes(shape_of(8, 512, TensorType::F16)),
            want_q8 / PagedKvCache::block_bytes(shape_of(8, 512, TensorType::Q8_0)));
}

TEST(KvQ8, RowsNotMultipleOf32AreRefusedWithTheFlagsMessage) {
  KvConfig cfg;
  cfg.pool_bytes = 1 << 20;
  auto r = PagedKvCache::create(shape_of(2, 48, TensorType::Q8_0), cfg);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("--kv-type q8_0 needs n_head_kv*head_dim divisible by 32, "
                                      "this model has 48"),
            std::string::npos)
      << r.status().message();
  EXPECT_FALSE(ContiguousKvCache::create(KvShape{2, 48}, 1, 16, TensorType::Q8_0).is_ok());
  EXPECT_FALSE(BlockTableKv::create(shape_of(2, 48, TensorType::Q8_0), 4, 16).is_ok());
  EXPECT_FALSE(PagedKvCache::create(shape_of(2, 64, TensorType::Q4_0), cfg).is_ok());
  EXPECT_EQ(PagedKvCache::block_bytes(shape_of(2, 48, TensorType::Q8_0)), 0);
}

TEST(KvQ8, ParseKvType) {
  EXPECT_EQ(*parse_kv_type("f16"), TensorType::F16);
  EXPECT_EQ(*parse_kv_type("q8_0"), TensorType::Q8_0);
  auto bad = parse_kv_type("q4");
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("--kv-type must be f16 or q8_0"), std::string::npos);
}

// Writes quantize per block of 32 (scale max|x| / 127): every element comes
// back within half a step of its block, and the bytes are those of the
// reference cache's rounding (ties to even: 0.5 steps to 0, 2.5 to 2).
TEST(KvQ8, WriteQuantizesPerBlockAndRawRowsRoundTrip) {
  const KvShape shape = shape_of(2, 128, TensorType::Q8_0);
  KvConfig cfg;
  cfg.pool_bytes = PagedKvCache::block_bytes(shape) * 8;
  cfg.prefix_cache = false;
  auto a = PagedKvCache::create(shape, cfg);
  auto b = PagedKvCache::create(shape, cfg);
  ASSERT_TRUE(a && b);
  ASSERT_TRUE((*a)->reserve(7, 40));
  ASSERT_TRUE((*b)->reserve(9, 40));
  std::mt19937 rng(5);
  std::normal_distribution<float> g(0.0f, 2.0f);
  const TypeOps* ops = type_ops(TensorType::Q8_0);
  const size_t rb = (size_t)kv_row_bytes(TensorType::Q8_0, 128);
  for (int32_t pos = 0; pos < 40; ++pos) {
    std::vector<float> k(128), v(128);
    for (float& x : k) x = g(rng);
    for (float& x : v) x = g(rng);
    (*a)->write(1, 7, pos, k.data(), v.data());
    std::vector<float> back(128);
    ops->to_float((*a)->key(1, 7, pos), back.data(), 128);
    for (int blk = 0; blk < 4; ++blk) {
      float amax = 0;
      for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(k[(size_t)(blk * 32 + i)]));
      for (int i = 0; i < 32; ++i)
        ASSERT_NEAR(back[(size_t)(blk * 32 + i)], k[(size_t)(blk * 32 + i)],
                    amax / 127 * 0.51 + 1e-3 * amax);
    }
    std::vector<uint8_t> want(rb);
    quant::q8_0_from_float_act(v.data(), want.data(), 128);
    ASSERT_EQ(std::memcmp((*a)->value(1, 7, pos), want.data(), rb), 0);
    // A handoff between two q8_0 caches moves the bytes as they are.
    std::vector<uint8_t> rk(rb), rv(rb);
    ASSERT_TRUE((*a)->read_raw(1, 7, pos, rk.data(), rv.data()));
    ASSERT_TRUE((*b)->write_raw(1, 9, pos, rk.data(), rv.data()));
    ASSERT_EQ(std::memcmp((*b)->key(1, 9, pos), (*a)->key(1, 7, pos), rb), 0);
    ASSERT_EQ(std::memcmp((*b)->value(1, 9, pos), (*a)->value(1, 7, pos), rb), 0);
  }
  std::vector<float> ties(128, 0.0f);
  ties[0] = 127.0f, ties[1] = 0.5f, ties[2] = 2.5f, ties[3] = -3.5f, ties[4] = 1.5f;
  (*a)->write(0, 7, 0, ties.data(), ties.data());
  const auto* blk = static_cast<const quant::BlockQ8_0*>((*a)->key(0, 7, 0));
  EXPECT_EQ(f16_to_f32(blk->d), 1.0f);
  EXPECT_EQ(blk->qs[0], 127);
  EXPECT_EQ(blk->qs[1], 0);
  EXPECT_EQ(blk->qs[2], 2);
  EXPECT_EQ(blk->qs[3], -4);
  EXPECT_EQ(blk->qs[4], 2);
}

// A handoff's geometry carries the row type: rows of another type are never
// taken (their bytes would be read in the wrong layout).
TEST(KvQ8, TransferGeometryRefusesAnotherKvType) {
  KvGeometry f16{kTransferVersion, 4, 256, 2, 16, TensorType::F16};
  KvGeometry q8{kTransferVersion, 4, 256, 1, 16, TensorType::Q8_0};
  EXPECT_EQ(q8.row_bytes(), 8 * 34);
  EXPECT_EQ(q8.bytes_for(3), 2 * 4 * 8 * 34 * 3);
  EXPECT_EQ(geometry_mismatch(q8, q8), "");
  const std::string why = geometry_mismatch(f16, q8);
  EXPECT_NE(why.find("K/V cache type q8_0 where this worker has f16"), std::string::npos) << why;
  EXPECT_NE(why.find("--kv-type"), std::string::npos) << why;
  EXPECT_NE(geometry_mismatch(q8, f16), "");
  // An import checked against its own geometry: a q8_0 run's bytes are q8_0-sized.
  ImportedKv in;
  in.geometry = q8;
  in.prompt = {1, 2, 3};
  in.runs.push_back(KvRows{0, 3, std::string((size_t)q8.bytes_for(3), '\0')});
  EXPECT_TRUE(in.check().is_ok()) << in.check().message();
  in.runs[0].bytes.resize((size_t)f16.bytes_for(3));
  EXPECT_FALSE(in.check().is_ok());
}

TEST(KvQ8, BlockTableKvStoresQ8Rows) {
  const KvShape shape = shape_of(2, 64, TensorType::Q8_0);
  auto kv = BlockTableKv::create(shape, 4, 16);
  ASSERT_TRUE(kv) << kv.status().message();
  EXPECT_EQ((*kv)->dtype(), TensorType::Q8_0);
  EXPECT_EQ((*kv)->pool_bytes(), 4 * PagedKvCache::block_bytes(shape));
  ASSERT_TRUE((*kv)->set_tables({SeqTable{3, {2, 0}, 0, 32}}).is_ok());
  std::vector<float> k(64), v(64);
  for (int i = 0; i < 64; ++i) k[(size_t)i] = (float)(i - 32) / 8, v[(size_t)i] = (float)i / 16;
  (*kv)->write(1, 3, 20, k.data(), v.data());
  std::vector<float> back(64);
  type_ops(TensorType::Q8_0)->to_float((*kv)->value(1, 3, 20), back.data(), 64);
  for (int i = 0; i < 64; ++i) EXPECT_NEAR(back[(size_t)i], v[(size_t)i], 0.02);
}

}  // namespace
}  // namespace cairn::kv
