// Attention over Q8_0 K/V rows (--kv-type q8_0): every path (scalar, AVX2,
// AVX-512, each where the CPU and CAIRN_ISA allow it) against a plain
// double-precision attention over the dequantized rows and q quantized to
// Q8_0 as the reference's attention over such a cache takes it (heads on
// blocks; the others take q in float), across head sizes
// (including ones that do not start a head on a block: the scalar kernel),
// GQA ratios, positions spanning many blocks, sliding windows, soft-caps and
// sinks, in contiguous and paged caches; and a token's result does not
// depend on the rest of its batch.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/quant.h"
#include "core/quant_blocks.h"
#include "core/thread_pool.h"
#include "kernels/type_ops.h"
#include "kv/contiguous_kv.h"
#include "kv/kv_cache.h"
#include "model/attention.h"

namespace cairn::model {
namespace {

constexpr int kLayer = 1;

struct Case {
  int64_t head_dim, n_head_kv, ratio;
  int32_t n_pos;
  int64_t window = 0;
  float softcap = 0.0f;
  bool sinks = false;
};

std::string name_of(const Case& c) {
  return "hd" + std::to_string(c.head_dim) + "_kv" + std::to_string(c.n_head_kv) + "_r" +
         std::to_string(c.ratio) + "_n" + std::to_string(c.n_pos) + "_w" +
         std::to_string(c.window) + (c.softcap > 0 ? "_cap" : "") + (c.sinks ? "_sinks" : "");
}

std::vector<float> random_vec(std::mt19937& rng, size_t n, float amp) {
  std::uniform_real_distribution<float> u(-amp, amp);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

// q of one head as the kernels take it where heads start on blocks: Q8_0
// codes and scales (the reference's activation rounding), dequantized.
std::vector<float> quantized_q(const float* q, int64_t hd) {
  if (hd % 32 != 0) return std::vector<float>(q, q + hd);
  std::vector<quant::BlockQ8_0> b((size_t)(hd / 32));
  quant::q8_0_from_float_act(q, b.data(), hd);
  std::vector<float> out((size_t)hd);
  type_ops(TensorType::Q8_0)->to_float(b.data(), out.data(), hd);
  return out;
}

// Plain attention in double over the rows as stored (dequantized), with q as
// the kernels quantize it.
std::vector<double> reference(const KvView& kv, const Case& c, SeqId seq, int32_t pos,
                              const float* q, const float* sinks) {
  const int64_t hd = c.head_dim, row = c.n_head_kv * hd, n_head = c.n_head_kv * c.ratio;
  const auto to_float = type_ops(TensorType::Q8_0)->to_float;
  const int64_t n = pos + 1, first = c.window > 0 ? std::max<int64_t>(0, n - c.window) : 0;
  std::vector<float> k((size_t)row), v((size_t)row);
  std::vector<double> out((size_t)(n_head * hd), 0.0);
  const double scale = 1.0 / std::sqrt((double)hd);
  for (int64_t h = 0; h < n_head; ++h) {
    const int64_t off = (h / c.ratio) * hd;
    const std::vector<float> qh = quantized_q(q + h * hd, hd);
    std::vector<double> s((size_t)n, -INFINITY);
    double mx = sinks ? sinks[h] : -INFINITY;
    for (int64_t p = first; p < n; ++p) {
      to_float(kv.key(kLayer, seq, (int32_t)p), k.data(), row);
      double dot = 0;
      for (int64_t d = 0; d < hd; ++d) dot += (double)k[(size_t)(off + d)] * qh[(size_t)d];
      if (c.softcap > 0) dot = std::tanh(dot / c.softcap) * c.softcap;
      s[(size_t)p] = dot * scale;
      mx = std::max(mx, s[(size_t)p]);
    }
    double sum = sinks ? std::exp(sinks[h] - mx) : 0.0;
    for (int64_t p = first; p < n; ++p) sum += std::exp(s[(size_t)p] - mx);
    for (int64_t p = first; p < n; ++p) {
      const double w = std::exp(s[(size_t)p] - mx) / sum;
      to_float(kv.value(kLayer, seq, (int32_t)p), v.data(), row);
      for (int64_t d = 0; d < hd; ++d) out[(size_t)(h * hd + d)] += w * v[(size_t)(off + d)];
    }
  }
  return out;
}

std::vector<AttnPath> paths_here(int64_t head_dim) {
  std::vector<AttnPath> out = {AttnPath::Scalar};
  for (AttnPath p : {AttnPath::Avx2, AttnPath::Avx512})
    if (attention_path_supported(p, head_dim)) out.push_back(p);
  return out;
}

const char* path_name(AttnPath p) {
  return p == AttnPath::Scalar ? "scalar" : p == AttnPath::Avx2 ? "avx2" : "avx512";
}

// Writes random rows for seqs 0 and 1, then checks a batch of tokens of both
// (the last positions, and a few earlier ones) on every path.
void check_case(KvView& kv, const Case& c, ThreadPool& pool) {
  std::mt19937 rng(1234 + (uint32_t)c.head_dim * 7 + (uint32_t)c.n_pos);
  const int64_t row = c.n_head_kv * c.head_dim, n_head = c.n_head_kv * c.ratio;
  for (int layer = 0; layer < 2; ++layer)
    for (SeqId s = 0; s < 2; ++s)
      for (int32_t p = 0; p < c.n_pos; ++p) {
        const auto k = random_vec(rng, (size_t)row, 1.5f), v = random_vec(rng, (size_t)row, 1.0f);
        kv.write(layer, s, p, k.data(), v.data());
      }
  const std::vector<SeqId> seqs = {0, 1, 0, 1};
  const std::vector<int32_t> positions = {c.n_pos - 1, c.n_pos - 1, c.n_pos / 2, 0};
  const auto q = random_vec(rng, seqs.size() * (size_t)(n_head * c.head_dim), 2.0f);
  const auto sinks = random_vec(rng, (size_t)n_head, 1.0f);
  AttnShape sh{n_head, c.n_head_kv, c.head_dim, 1.0f / std::sqrt((float)c.head_dim)};
  sh.window = c.window;
  sh.softcap = c.softcap;
  sh.sinks = c.sinks ? sinks.data() : nullptr;
  const size_t nq = (size_t)(n_head * c.head_dim);
  for (AttnPath path : paths_here(c.head_dim)) {
    std::vector<float> out(q.size(), NAN);
    attend(kv, kLayer, seqs, positions, q.data(), sh, out.data(), pool, path);
    for (size_t t = 0; t < seqs.size(); ++t) {
      const auto want = reference(kv, c, seqs[t], positions[t], q.data() + t * nq,
                                  c.sinks ? sinks.data() : nullptr);
      for (size_t i = 0; i < nq; ++i)
        ASSERT_NEAR(out[t * nq + i], want[i], 2e-5 * (1.0 + std::fabs(want[i])))
            << name_of(c) << " " << path_name(path) << " token " << t << " elem " << i;
    }
    // The same tokens one at a time: the same bits (no batch-dependent order).
    for (size_t t = 0; t < seqs.size(); ++t) {
      std::vector<float> one(nq, NAN);
      attend(kv, kLayer, std::span<const SeqId>(&seqs[t], 1),
             std::span<const int32_t>(&positions[t], 1), q.data() + t * nq, sh, one.data(), pool,
             path);
      for (size_t i = 0; i < nq; ++i)
        ASSERT_EQ(one[i], out[t * nq + i])
            << name_of(c) << " " << path_name(path) << " token " << t;
    }
  }
}

const Case kCases[] = {
    {64, 2, 1, 1},
    {64, 2, 4, 47},
    {128, 1, 8, 300},
    {128, 2, 2, 100},
    {32, 4, 1, 70},
    {96, 1, 3, 33},
    {256, 1, 2, 20},
    {64, 4, 2, 130, 40},
    {128, 2, 4, 200, 64, 30.0f},
    {64, 1, 4, 90, 0, 0.0f, true},
    {16, 2, 2, 40},
    {48, 2, 2, 35},
    {8, 4, 2, 50},  // heads inside blocks: scalar only
};

TEST(AttentionQ8, EveryPathNearDequantizedReferenceContiguous) {
  ThreadPool pool(3);
  for (const Case& c : kCases) {
    kv::KvShape shape{2, (int32_t)(c.n_head_kv * c.head_dim)};
    auto kv = kv::ContiguousKvCache::create(shape, 2, c.n_pos, TensorType::Q8_0);
    ASSERT_TRUE(kv) << kv.status().message();
    check_case(**kv, c, pool);
    if (HasFatalFailure()) return;
  }
}

TEST(AttentionQ8, EveryPathNearDequantizedReferencePaged) {
  ThreadPool pool(2);
  for (const Case& c : kCases) {
    kv::KvShape shape{2, (int32_t)(c.n_head_kv * c.head_dim)};
    shape.dtype = TensorType::Q8_0;
    kv::KvConfig cfg;
    cfg.pool_bytes = kv::PagedKvCache::block_bytes(shape) * (2 * (c.n_pos / 16 + 1) + 8);
    cfg.prefix_cache = false;
    auto kv = kv::PagedKvCache::create(shape, cfg);
    ASSERT_TRUE(kv) << kv.status().message();
    ASSERT_EQ((*kv)->dtype(), TensorType::Q8_0);
    ASSERT_TRUE((*kv)->reserve(0, c.n_pos));
    ASSERT_TRUE((*kv)->reserve(1, c.n_pos));
    check_case(**kv, c, pool);
    if (HasFatalFailure()) return;
  }
}

}  // namespace
}  // namespace cairn::model
