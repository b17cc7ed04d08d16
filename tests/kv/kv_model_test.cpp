// A tiny random model run through forward() over PagedKvCache and over the
// ContiguousKvCache (kv/contiguous_kv.h): identical logits, also for sequences that
// start on another sequence's cached prefix, and in ragged decode steps.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "kv/contiguous_kv.h"
#include "kv/kv_cache.h"
#include "model/model.h"

namespace cairn::kv {
namespace {

using model::Batch;
using model::Logits;
using model::Model;

constexpr int64_t kEmbd = 64, kLayer = 2, kHead = 4, kHeadKv = 2, kFf = 96, kVocab = 48;

struct Loaded {
  std::shared_ptr<const gguf::File> file;
  std::unique_ptr<Model> model;
};

// Random F32 weights with the tensor names and metadata llama/qwen2 read.
Loaded tiny_model(const std::string& arch) {
  gguf::Writer w;
  std::mt19937 rng(11);
  const auto key = [&](const char* k) { return arch + "." + k; };
  w.set_string("general.architecture", arch);
  w.set_uint32(key("embedding_length"), kEmbd);
  w.set_uint32(key("block_count"), kLayer);
  w.set_uint32(key("attention.head_count"), kHead);
  w.set_uint32(key("attention.head_count_kv"), kHeadKv);
  w.set_uint32(key("feed_forward_length"), kFf);
  w.set_uint32(key("context_length"), 256);
  w.set_float32(key("attention.layer_norm_rms_epsilon"), 1e-5f);
  w.set_float32(key("rope.freq_base"), 10000.0f);
  const auto add = [&](const std::string& name, std::vector<int64_t> dims, float scale,
                       float bias) {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    std::uniform_real_distribution<float> u(-scale, scale);
    std::vector<float> v((size_t)n);
    for (float& x : v) x = bias + u(rng);
    std::vector<uint8_t> bytes(v.size() * 4);
    std::memcpy(bytes.data(), v.data(), bytes.size());
    EXPECT_TRUE(w.add_tensor(name, TensorType::F32, std::move(dims), std::move(bytes)).is_ok())
        << name;
  };
  const int64_t hd = kEmbd / kHead;
  const float ws = 2.0f / 8.0f;  // ~2 / sqrt(n_embd)
  add("token_embd.weight", {kEmbd, kVocab}, 1.0f, 0.0f);
  add("output_norm.weight", {kEmbd}, 0.2f, 1.0f);
  add("output.weight", {kEmbd, kVocab}, ws, 0.0f);
  for (int64_t il = 0; il < kLayer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    add(p + "attn_norm.weight", {kEmbd}, 0.2f, 1.0f);
    add(p + "attn_q.weight", {kEmbd, kHead * hd}, ws, 0.0f);
    add(p + "attn_k.weight", {kEmbd, kHeadKv * hd}, ws, 0.0f);
    add(p + "attn_v.weight", {kEmbd, kHeadKv * hd}, ws, 0.0f);
    add(p + "attn_output.weight", {kHead * hd, kEmbd}, ws / 2, 0.0f);
    if (arch == "qwen2") {
      add(p + "attn_q.bias", {kHead * hd}, 0.3f, 0.0f);
      add(p + "attn_k.bias", {kHeadKv * hd}, 0.3f, 0.0f);
      add(p + "attn_v.bias", {kHeadKv * hd}, 0.3f, 0.0f);
    }
    add(p + "ffn_norm.weight", {kEmbd}, 0.2f, 1.0f);
    add(p + "ffn_gate.weight", {kEmbd, kFf}, ws, 0.0f);
    add(p + "ffn_up.weight", {kEmbd, kFf}, ws, 0.0f);
    add(p + "ffn_down.weight", {kFf, kEmbd}, 0.1f, 0.0f);
  }
  Loaded out;
  auto f = gguf::File::parse(w.to_bytes());
  EXPECT_TRUE(f.is_ok()) << f.status().message();
  if (!f.is_ok()) return out;
  out.file = std::shared_ptr<const gguf::File>(std::move(f.value()));
  auto m = Model::load(out.file, model::LoadOptions{2, {}});
  EXPECT_TRUE(m.is_ok()) << m.status().message();
  if (m.is_ok()) out.model = std::move(m.value());
  return out;
}

using Rows = std::vector<std::vector<float>>;

// One forward of `toks` at positions start.. of `seq`, logits for every token.
Rows run(Model& m, KvView& kv, SeqId seq, std::span<const Token> toks, int32_t start) {
  Batch b;
  for (size_t i = 0; i < toks.size(); ++i) b.add(toks[i], start + (int32_t)i, seq, true);
  Logits lg;
  const Status st = m.forward(b, kv, lg);
  EXPECT_TRUE(st.is_ok()) << st.message();
  Rows out;
  for (size_t r = 0; r < lg.rows(); ++r) out.emplace_back(lg.row(r).begin(), lg.row(r).end());
  return out;
}

Token argmax(const std::vector<float>& row) {
  return (Token)(std::max_element(row.begin(), row.end()) - row.begin());
}

::testing::AssertionResult near(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return ::testing::AssertionFailure() << "sizes differ";
  for (size_t i = 0; i < got.size(); ++i)
    if (!(std::fabs(got[i] - want[i]) <= 1e-5f * std::max(1.0f, std::fabs(want[i]))))
      return ::testing::AssertionFailure() << "logit " << i << ": " << got[i] << " vs " << want[i];
  return ::testing::AssertionSuccess();
}

std::vector<Token> random_tokens(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<Token> t((size_t)n);
  for (Token& x : t) x = (Token)(rng() % kVocab);
  return t;
}

class PagedForward : public ::testing::TestWithParam<const char*> {};

TEST_P(PagedForward, MatchesContiguousIncludingReusedPrefixes) {
  Loaded l = tiny_model(GetParam());
  ASSERT_TRUE(l.model);
  Model& m = *l.model;
  const model::HParams& hp = m.hparams();
  auto contiguous = ContiguousKvCache::create(hp.kv_shape(), 3, 128);
  ASSERT_TRUE(contiguous.is_ok());
  ContiguousKvCache& ref = *contiguous.value();
  const KvShape shape{(int32_t)hp.n_layer, (int32_t)hp.kv_row_elems()};
  auto paged_r = PagedKvCache::create(shape, {PagedKvCache::block_bytes(shape) * 32});
  ASSERT_TRUE(paged_r.is_ok()) << paged_r.status().message();
  PagedKvCache& kv = *paged_r.value();

  // A: a 40-token prompt, then greedy decode, on both caches.
  std::vector<Token> a = random_tokens(40, 1);
  ASSERT_EQ(kv.reuse_prefix(0, a), 0);
  ASSERT_TRUE(kv.reserve(0, 40));
  const Rows ref_a = run(m, ref, 0, a, 0);
  const Rows got_a = run(m, kv, 0, a, 0);
  ASSERT_EQ(got_a.size(), 40u);
  EXPECT_EQ(got_a, ref_a);
  kv.commit(0, a);
  Token next = argmax(got_a.back());
  for (int step = 0; step < 4; ++step) {
    const std::vector<Token> one{next};
    ASSERT_TRUE(kv.reserve(0, 1));
    const Rows r = run(m, ref, 0, one, (int32_t)a.size());
    const Rows g = run(m, kv, 0, one, (int32_t)a.size());
    ASSERT_EQ(g, r) << "decode step " << step;
    kv.commit(0, one);
    a.push_back(next);
    next = argmax(g[0]);
  }
  EXPECT_EQ(kv.length(0), 44);

  // The kernels may round a token differently in batches of other sizes, so
  // each reused sequence is checked two ways: bit for bit against a
  // contiguous cache fed the same batches (the prefix rows from A's 40-token
  // batch), and within 1e-5 against computing its whole prompt in one batch.
  auto full_r = ContiguousKvCache::create(hp.kv_shape(), 3, 128);
  ASSERT_TRUE(full_r.is_ok());
  ContiguousKvCache& full = *full_r.value();
  const std::span<const Token> a40(a.data(), 40);

  // B shares A's first 35 tokens: two full blocks come from the cache.
  std::vector<Token> b(a.begin(), a.begin() + 35);
  const auto tail = random_tokens(10, 2);
  b.insert(b.end(), tail.begin(), tail.end());
  const int32_t used_before = kv.stats().blocks_used;
  ASSERT_EQ(kv.reuse_prefix(1, b), 32);
  EXPECT_EQ(kv.stats().blocks_used, used_before);  // shared, not copied
  ASSERT_TRUE(kv.reserve(1, (int32_t)b.size() - 32));
  const std::span<const Token> b_rest = std::span<const Token>(b).subspan(32);
  const Rows got_b = run(m, kv, 1, b_rest, 32);
  (void)run(m, ref, 1, a40, 0);
  const Rows same_b = run(m, ref, 1, b_rest, 32);
  const Rows full_b = run(m, full, 1, b, 0);
  ASSERT_EQ(got_b.size(), b.size() - 32);
  EXPECT_EQ(got_b, same_b);
  for (size_t i = 0; i < got_b.size(); ++i)
    EXPECT_TRUE(near(got_b[i], full_b[32 + i])) << "position " << 32 + i;
  kv.commit(1, b_rest);

  // C is exactly A's first two blocks: the full last block is shared too and
  // only the last token is recomputed, its K/V write skipped (the cached row
  // from A's batch stands in for it, hence no bit-exact twin here).
  const std::vector<Token> c(a.begin(), a.begin() + 32);
  const uint64_t skipped = kv.stats().writes_skipped;
  ASSERT_EQ(kv.reuse_prefix(2, c), 31);
  ASSERT_TRUE(kv.reserve(2, 1));
  const std::span<const Token> c_last = std::span<const Token>(c).subspan(31);
  const Rows got_c = run(m, kv, 2, c_last, 31);
  const Rows full_c = run(m, full, 2, c, 0);
  ASSERT_EQ(got_c.size(), 1u);
  EXPECT_TRUE(near(got_c[0], full_c[31]));
  EXPECT_TRUE(near(got_c[0], ref_a[31]));
  EXPECT_EQ(kv.stats().writes_skipped, skipped + (uint64_t)hp.n_layer);
  kv.commit(2, c_last);
  (void)run(m, ref, 2, a40, 0);  // C's rows in `ref` as the paged cache holds them
  (void)run(m, full, 0, a, 0);   // A's 44 tokens in one batch

  // Ragged decode steps of all three, shared prefixes and all, equal the
  // contiguous caches doing the same steps.
  for (int step = 0; step < 3; ++step) {
    Batch batch;
    for (SeqId s = 0; s < 3; ++s) {
      ASSERT_TRUE(kv.reserve(s, 1));
      batch.add((Token)((step * 7 + s * 5) % kVocab), kv.length(s), s, true);
    }
    Logits ls, lf, lg;
    ASSERT_TRUE(m.forward(batch, ref, ls).is_ok());
    ASSERT_TRUE(m.forward(batch, full, lf).is_ok());
    ASSERT_TRUE(m.forward(batch, kv, lg).is_ok());
    ASSERT_EQ(lg.rows(), 3u);
    for (size_t r = 0; r < 3; ++r) {
      const std::vector<float> got(lg.row(r).begin(), lg.row(r).end());
      const std::vector<float> same(ls.row(r).begin(), ls.row(r).end());
      const std::vector<float> whole(lf.row(r).begin(), lf.row(r).end());
      EXPECT_EQ(got, same) << "step " << step << " seq " << r;
      EXPECT_TRUE(near(got, whole)) << "step " << step << " seq " << r;
    }
    for (SeqId s = 0; s < 3; ++s) kv.commit(s, std::span<const Token>(&batch.tokens[(size_t)s], 1));
  }

  // Releasing A leaves B and C intact; releasing all returns every block.
  kv.release(0);
  Batch last;
  last.add(3, kv.length(1), 1, true);
  ASSERT_TRUE(kv.reserve(1, 1));
  Logits lr, lg;
  ASSERT_TRUE(m.forward(last, ref, lr).is_ok());
  ASSERT_TRUE(m.forward(last, kv, lg).is_ok());
  EXPECT_EQ(lg.data, lr.data);
  kv.release(1);
  kv.release(2);
  EXPECT_EQ(kv.stats().blocks_used, 0);
  EXPECT_EQ(kv.free_blocks(), 32);
  EXPECT_GT(kv.stats().blocks_cached, 0);
}

// forward() refuses positions the scheduler did not reserve, before writing.
TEST_P(PagedForward, RefusesUnreservedPositions) {
  Loaded l = tiny_model(GetParam());
  ASSERT_TRUE(l.model);
  const KvShape shape{(int32_t)l.model->hparams().n_layer,
                      (int32_t)l.model->hparams().kv_row_elems()};
  auto kv = PagedKvCache::create(shape, {PagedKvCache::block_bytes(shape) * 8});
  ASSERT_TRUE(kv.is_ok());
  ASSERT_TRUE((*kv)->reserve(0, 5));
  Batch b;
  for (int i = 0; i < 6; ++i) b.add(1, i, 0, i == 5);
  Logits lg;
  const Status st = l.model->forward(b, **kv, lg);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("outside its KV capacity 5"), std::string::npos) << st.message();
  Batch other;
  other.add(1, 0, 9, true);
  EXPECT_FALSE(l.model->forward(other, **kv, lg).is_ok());  // unknown sequence
  // A cache shaped for another model is refused.
  auto wrong = PagedKvCache::create({shape.n_layer + 1, shape.row_elems},
                                    {PagedKvCache::block_bytes(shape) * 8});
  ASSERT_TRUE(wrong.is_ok());
  ASSERT_TRUE((*wrong)->reserve(0, 1));
  Batch one;
  one.add(1, 0, 0, true);
  EXPECT_FALSE(l.model->forward(one, **wrong, lg).is_ok());
}

INSTANTIATE_TEST_SUITE_P(Archs, PagedForward, ::testing::Values("llama", "qwen2"));

}  // namespace
}  // namespace cairn::kv
