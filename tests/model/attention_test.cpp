// Attention kernels: every SIMD path gives the scalar path's exact bits on
// random K/V (F16 and F32 caches, contiguous and paged), for single tokens
// (decode orders) and batches (tinyBLAS orders), over ragged position counts,
// GQA ratios and head sizes; the scalar path itself stays near a plain
// double-precision attention; KvView::rows agrees with key()/value().
#include "model/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/half.h"
#include "core/thread_pool.h"
#include "kv/contiguous_kv.h"
#include "kv/kv_cache.h"

namespace cairn::model {
namespace {

using kv::ContiguousKvCache;

constexpr int kLayer = 1;

HParams shape_hp(int64_t head_dim, int64_t n_head_kv, int64_t ratio) {
  HParams hp;
  hp.n_layer = 2;
  hp.head_dim = head_dim;
  hp.n_head_kv = n_head_kv;
  hp.n_head = n_head_kv * ratio;
  hp.n_embd = hp.n_head * head_dim;
  return hp;
}

std::vector<float> random_vec(std::mt19937& rng, size_t n, float amp) {
  std::uniform_real_distribution<float> u(-amp, amp);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// Random K/V for positions [0, n) of seqs 0 and 1 in every layer.
void fill(KvView& kv, const HParams& hp, int32_t n, std::mt19937& rng) {
  const size_t row = (size_t)hp.kv_row_elems();
  for (int layer = 0; layer < hp.n_layer; ++layer)
    for (SeqId s = 0; s < 2; ++s)
      for (int32_t p = 0; p < n; ++p) {
        const auto k = random_vec(rng, row, 1.5f), v = random_vec(rng, row, 1.0f);
        kv.write(layer, s, p, k.data(), v.data());
      }
}

struct Query {
  std::vector<SeqId> seqs;
  std::vector<int32_t> positions;
};

// Gemma's sliding window and score soft-cap (0: none), for run().
struct Mask {
  int64_t window = 0;
  float softcap = 0.0f;
};

std::vector<float> run(const KvView& kv, const HParams& hp, const Query& qr,
                       const std::vector<float>& q, AttnPath path, ThreadPool& pool,
                       Mask mask = {}) {
  AttnShape sh{hp.n_head, hp.n_head_kv, hp.head_dim, 1.0f / std::sqrt((float)hp.head_dim)};
  sh.window = mask.window;
  sh.softcap = mask.softcap;
  std::vector<float> out(q.size(), NAN);
  attend(kv, kLayer, qr.seqs, qr.positions, q.data(), sh, out.data(), pool, path);
  return out;
}

// Index of the first element whose bits differ, or -1.
int64_t first_diff(const std::vector<float>& a, const std::vector<float>& b) {
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) return (int64_t)i;
  return -1;
}

float elem(const KvView& kv, const void* row, int64_t i) {
  return kv.dtype() == TensorType::F16 ? f16_to_f32(((const uint16_t*)row)[i])
                                       : ((const float*)row)[i];
}

// Softmax attention in double from the definition (query rounded like the cache).
std::vector<double> plain(const KvView& kv, const HParams& hp, SeqId seq, int32_t pos,
                          const float* q) {
  const int64_t hd = hp.head_dim, group = hp.n_head / hp.n_head_kv;
  std::vector<double> out((size_t)(hp.n_head * hd), 0.0);
  for (int64_t h = 0; h < hp.n_head; ++h) {
    const int64_t off = (h / group) * hd;
    std::vector<double> s((size_t)pos + 1);
    double mx = -INFINITY, sum = 0;
    for (int32_t p = 0; p <= pos; ++p) {
      double d = 0;
      for (int64_t i = 0; i < hd; ++i)
        d += (double)q[h * hd + i] * elem(kv, kv.key(kLayer, seq, p), off + i);
      s[(size_t)p] = d / std::sqrt((double)hd);
      mx = std::max(mx, s[(size_t)p]);
    }
    for (double& x : s) sum += (x = std::exp(x - mx));
    for (int32_t p = 0; p <= pos; ++p)
      for (int64_t i = 0; i < hd; ++i)
        out[(size_t)(h * hd + i)] +=
            s[(size_t)p] / sum * elem(kv, kv.value(kLayer, seq, p), off + i);
  }
  return out;
}

std::vector<AttnPath> simd_paths(int64_t head_dim) {
  std::vector<AttnPath> v;
  for (AttnPath p : {AttnPath::Avx2, AttnPath::Avx512})
    if (attention_path_supported(p, head_dim)) v.push_back(p);
  return v;
}

const char* path_name(AttnPath p) { return p == AttnPath::Avx512 ? "avx512" : "avx2"; }

// Every SIMD path against scalar for single tokens and batches at each n_pos.
void check_paths(const KvView& kv, const HParams& hp, const std::vector<int32_t>& n_pos_list,
                 std::mt19937& rng, ThreadPool& pool, const std::string& what,
                 Mask mask = {}) {
  const auto paths = simd_paths(hp.head_dim);
  if (paths.empty()) GTEST_SKIP() << "no SIMD attention path on this CPU (or CAIRN_ISA cap)";
  const size_t nq = (size_t)(hp.n_head * hp.head_dim);
  for (int32_t n : n_pos_list) {
    std::vector<Query> queries = {{{0}, {n - 1}}};  // one token: decode orders
    // Batches: tinyBLAS orders; tokens of both sequences, some at this n_pos.
    queries.push_back({{1, 0}, {n - 1, std::max(0, n / 2 - 1)}});
    queries.push_back({{0, 1, 0}, {std::max(0, n - 2), n - 1, n - 1}});
    // A prompt chunk (its sequence's K transposed once: scores_kt) beside a
    // decode token of the other sequence.
    Query chunk;
    for (int32_t p = std::max(0, n - 6); p < n; ++p) {
      chunk.seqs.push_back(0);
      chunk.positions.push_back(p);
    }
    chunk.seqs.push_back(1);
    chunk.positions.push_back(n - 1);
    queries.push_back(chunk);
    for (const Query& qr : queries) {
      const auto q = random_vec(rng, nq * qr.seqs.size(), 2.0f);
      const auto ref = run(kv, hp, qr, q, AttnPath::Scalar, pool, mask);
      for (AttnPath p : paths) {
        const auto got = run(kv, hp, qr, q, p, pool, mask);
        const int64_t d = first_diff(ref, got);
        ASSERT_EQ(d, -1) << what << " " << path_name(p) << " window " << mask.window << " cap "
                         << mask.softcap << " n_pos " << n << " tokens "
                         << qr.seqs.size() << ": element " << d << " is " << got[(size_t)d]
                         << ", scalar " << ref[(size_t)d];
      }
    }
  }
}

// Past 512: V.w runs in tiles of 512 positions, for batches and single tokens
// alike (attention_simd.inc); 700 resumes every lane once.
const std::vector<int32_t> kNPos = {1,  2,  15,  16,  17,  31,  32,  33,  63, 64,
                                    65, 96, 127, 128, 129, 500, 512, 513, 700};

struct ShapeCase {
  int64_t head_dim, ratio;
  TensorType dtype;
};

class AttentionPaths : public ::testing::TestWithParam<ShapeCase> {};

TEST_P(AttentionPaths, SimdMatchesScalarBitForBit) {
  const ShapeCase c = GetParam();
  const HParams hp = shape_hp(c.head_dim, 2, c.ratio);
  auto kv = ContiguousKvCache::create(hp.kv_shape(), 2, 700, c.dtype);
  ASSERT_TRUE(kv) << kv.status().message();
  std::mt19937 rng(1234 + (unsigned)(c.head_dim * 10 + c.ratio));
  fill(**kv, hp, 700, rng);
  ThreadPool pool(2);
  check_paths(**kv, hp, kNPos, rng, pool,
              "contiguous hd " + std::to_string(c.head_dim) + " gqa " + std::to_string(c.ratio));
}

// Gemma's layers: a window shorter and longer than the sequence, with and
// without the soft-cap, over ragged lengths (window edges inside and on 16-
// and 64-position boundaries).
TEST_P(AttentionPaths, WindowAndSoftcapMatchScalarBitForBit) {
  const ShapeCase c = GetParam();
  const HParams hp = shape_hp(c.head_dim, 2, c.ratio);
  auto kv = ContiguousKvCache::create(hp.kv_shape(), 2, 700, c.dtype);
  ASSERT_TRUE(kv) << kv.status().message();
  std::mt19937 rng(4321 + (unsigned)(c.head_dim * 10 + c.ratio));
  fill(**kv, hp, 700, rng);
  ThreadPool pool(2);
  for (Mask m : {Mask{0, 50.0f}, Mask{16, 0.0f}, Mask{16, 30.0f}, Mask{1, 0.0f},
                 Mask{100, 0.0f}, Mask{100, 2.5f}, Mask{4096, 50.0f}})
    check_paths(**kv, hp, {1, 2, 15, 17, 33, 64, 65, 101, 129, 513, 700}, rng, pool,
                "contiguous hd " + std::to_string(c.head_dim) + " gqa " + std::to_string(c.ratio),
                m);
}

std::vector<ShapeCase> shape_cases() {
  std::vector<ShapeCase> v;
  for (TensorType t : {TensorType::F16, TensorType::F32})
    for (int64_t hd : {64, 128, 16, 32, 48, 80})
      for (int64_t r : {1, 4, 8}) v.push_back({hd, r, t});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionPaths, ::testing::ValuesIn(shape_cases()),
                         [](const auto& info) {
                           const ShapeCase& c = info.param;
                           return std::string(c.dtype == TensorType::F16 ? "f16" : "f32") + "_hd" +
                                  std::to_string(c.head_dim) + "_gqa" + std::to_string(c.ratio);
                         });

TEST(Attention, PagedCacheSimdMatchesScalar) {
  const HParams hp = shape_hp(64, 4, 8);
  kv::KvConfig cfg;
  cfg.pool_bytes =
      64 * kv::PagedKvCache::block_bytes({(int32_t)hp.n_layer, (int32_t)hp.kv_row_elems()});
  auto kv = kv::PagedKvCache::create({(int32_t)hp.n_layer, (int32_t)hp.kv_row_elems()}, cfg);
  ASSERT_TRUE(kv) << kv.status().message();
  // Interleaved reservations (each one covers n tokens past the committed
  // length, which stays 0) so each sequence's blocks are not adjacent.
  for (int i = 1; i <= 20; ++i)
    for (SeqId s = 0; s < 2; ++s) ASSERT_TRUE((*kv)->reserve(s, 16 * i));
  ASSERT_GE((*kv)->capacity(0), 320);
  std::mt19937 rng(99);
  fill(**kv, hp, 320, rng);
  ThreadPool pool(2);
  check_paths(**kv, hp, {1, 16, 17, 33, 100, 320}, rng, pool, "paged");
}

// A paged cache that keeps only layer 1's window (the rows before it are back
// in the pool, reused by layer 0's blocks of another sequence): every path
// reads only the window and matches the scalar path.
TEST(Attention, SlidingPagedCacheSimdMatchesScalar) {
  const HParams hp = shape_hp(64, 2, 4);
  kv::KvShape shape = hp.kv_shape();
  shape.window = 40;
  shape.sliding = {0, 1};
  kv::KvConfig cfg;
  cfg.pool_bytes = 64 * kv::PagedKvCache::block_bytes(shape);
  auto kv = kv::PagedKvCache::create(shape, cfg);
  ASSERT_TRUE(kv) << kv.status().message();
  ASSERT_EQ((*kv)->kept_window(kLayer), 40);
  std::mt19937 rng(5);
  const size_t row = (size_t)hp.kv_row_elems();
  ThreadPool pool(2);
  std::vector<Token> toks;
  for (int32_t n = 1; n <= 300; ++n) {  // decode: one token per step for sequence 0
    ASSERT_TRUE((*kv)->reserve(0, 1));
    for (int layer = 0; layer < 2; ++layer) {
      const auto k = random_vec(rng, row, 1.5f), v = random_vec(rng, row, 1.0f);
      (*kv)->write(layer, 0, n - 1, k.data(), v.data());
    }
    toks.push_back((Token)n);
    (*kv)->commit(0, std::span<const Token>(toks).subspan((size_t)n - 1));
    if (n % 37 != 0 && n != 300) continue;
    const size_t nq = (size_t)(hp.n_head * hp.head_dim);
    for (Mask m : {Mask{40, 0.0f}, Mask{40, 50.0f}}) {
      const Query qr{{0}, {n - 1}};
      const auto q = random_vec(rng, nq, 2.0f);
      const auto ref = run(**kv, hp, qr, q, AttnPath::Scalar, pool, m);
      for (AttnPath p : simd_paths(hp.head_dim))
        ASSERT_EQ(first_diff(ref, run(**kv, hp, qr, q, p, pool, m)), -1)
            << path_name(p) << " n " << n;
    }
  }
  // 19 global blocks, and the sliding layer's blocks of positions 260..299 only.
  EXPECT_EQ((*kv)->stats().blocks_used, 19 + 3);
}

TEST(Attention, ScalarPathIsNearPlainAttention) {
  for (TensorType t : {TensorType::F16, TensorType::F32}) {
    const HParams hp = shape_hp(64, 2, 4);
    auto kv = ContiguousKvCache::create(hp.kv_shape(), 2, 128, t);
    ASSERT_TRUE(kv);
    std::mt19937 rng(7);
    fill(**kv, hp, 128, rng);
    ThreadPool pool(2);
    for (int32_t pos : {0, 16, 70, 127}) {
      const Query qr{{0}, {pos}};
      auto q = random_vec(rng, (size_t)(hp.n_head * hp.head_dim), 2.0f);
      if (t == TensorType::F16)
        for (float& x : q) x = f16_to_f32(f32_to_f16(x));
      const auto got = run(**kv, hp, qr, q, AttnPath::Scalar, pool);
      const auto want = plain(**kv, hp, 0, pos, q.data());
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_NEAR(got[i], want[i], 2e-3) << "pos " << pos << " element " << i;
    }
  }
}

TEST(Attention, RowsAgreeWithKeyAndValue) {
  const HParams hp = shape_hp(32, 2, 1);
  auto contiguous = ContiguousKvCache::create(hp.kv_shape(), 2, 40);
  ASSERT_TRUE(contiguous);
  kv::KvConfig cfg;
  cfg.pool_bytes = 8 * kv::PagedKvCache::block_bytes({2, (int32_t)hp.kv_row_elems()});
  auto paged = kv::PagedKvCache::create({2, (int32_t)hp.kv_row_elems()}, cfg);
  ASSERT_TRUE(paged);
  ASSERT_TRUE((*paged)->reserve(0, 40));
  const size_t row_bytes = (size_t)hp.kv_row_elems() * 2;
  for (const KvView* kv : {(const KvView*)contiguous->get(), (const KvView*)paged->get()}) {
    int32_t longest = 0;
    for (int32_t p = 0; p < 40; ++p) {
      for (int32_t max_n : {1, 3, 40 - p}) {
        const KvView::Rows r = kv->rows(1, 0, p, max_n);
        ASSERT_GE(r.n, 1);
        ASSERT_LE(r.n, max_n);
        longest = std::max(longest, r.n);
        for (int32_t i = 0; i < r.n; ++i) {
          EXPECT_EQ((const uint8_t*)r.k + i * row_bytes, kv->key(1, 0, p + i)) << p << "+" << i;
          EXPECT_EQ((const uint8_t*)r.v + i * row_bytes, kv->value(1, 0, p + i)) << p << "+" << i;
        }
      }
    }
    EXPECT_GE(longest, 16);  // runs, not single rows
  }
}

}  // namespace
}  // namespace cairn::model
