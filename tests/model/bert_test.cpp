// The bert encoder on generated models: batching equivalence, the batch
// rules of a non-causal model, the classification head, clear errors.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "kv/contiguous_kv.h"
#include "model/model.h"
#include "model/pooling.h"
#include "modelgen/demo_model.h"
#include "modelgen/model_builder.h"
#include "test_util.h"

namespace cairn::model {
namespace {

struct Built {
  std::shared_ptr<const gguf::File> file;
  std::unique_ptr<Model> model;
};

Built bert(const std::string& pooling) {
  auto dir = cairn::test::temp_dir("bert-" + pooling);
  modelgen::RandomModelSpec s;
  s.arch = "bert";
  s.dim = 64;
  s.layers = 2;
  s.heads = 4;
  s.kv_heads = 4;
  s.ffn = 128;
  s.ctx = 64;
  s.seed = 3;
  s.pooling = pooling;
  const std::string path = (dir / "bert.gguf").string();
  Built b;
  auto r = modelgen::write_random_model(s, modelgen::demo_vocab(), path);
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  auto f = gguf::File::open(path);
  EXPECT_TRUE(f.is_ok());
  if (!f.is_ok()) return b;
  b.file = std::shared_ptr<const gguf::File>(std::move(*f));
  auto m = Model::load(b.file, LoadOptions{2, {}});
  EXPECT_TRUE(m) << m.status().message();
  if (m) b.model = std::move(*m);
  return b;
}

std::unique_ptr<kv::ContiguousKvCache> any_kv() {
  auto kv = kv::ContiguousKvCache::create(kv::KvShape{1, 8}, 1, 1, TensorType::F32);
  EXPECT_TRUE(kv);
  return kv ? std::move(*kv) : nullptr;
}

const std::vector<Token> kA = {1, 5, 9, 17, 33, 2, 40, 11};
const std::vector<Token> kB = {1, 44, 8, 21};

Logits run(Model& m, const std::vector<Token>& toks) {
  Batch b;
  for (size_t i = 0; i < toks.size(); ++i) b.add(toks[i], (int32_t)i, 0, true);
  auto kv = any_kv();
  Logits out;
  Status st = m.forward_hidden(b, *kv, out);
  EXPECT_TRUE(st.is_ok()) << st.message();
  return out;
}

TEST(Bert, HyperParametersAndNoLogits) {
  Built b = bert("mean");
  ASSERT_TRUE(b.model);
  const HParams& hp = b.model->hparams();
  EXPECT_EQ(hp.arch, "bert");
  EXPECT_FALSE(hp.causal);
  EXPECT_FALSE(hp.has_lm_head);
  EXPECT_EQ(hp.pooling, Pooling::Mean);
  EXPECT_EQ(hp.n_cls_out, 0);
  EXPECT_NEAR(hp.norm_eps, 1e-12f, 1e-15f);
  Batch batch;
  batch.add(1, 0, 0, true);
  auto kv = any_kv();
  Logits out;
  Status st = b.model->forward(batch, *kv, out);
  ASSERT_FALSE(st.is_ok());
  EXPECT_NE(st.message().find("is an embedding model"), std::string::npos) << st.message();
  std::vector<float> scores;
  EXPECT_FALSE(b.model->classify(std::vector<float>(64, 0.0f), scores).is_ok());
}

// Two sequences interleaved in one batch, only some rows asked for, give
// the rows each gives alone; the rows are LayerNorm outputs (finite, O(1)).
TEST(Bert, InterleavedSequencesMatchOneAtATime) {
  Built b = bert("cls");
  ASSERT_TRUE(b.model);
  Model& m = *b.model;
  const Logits a = run(m, kA), bb = run(m, kB);
  ASSERT_EQ(a.rows(), kA.size());
  for (float v : a.data) ASSERT_TRUE(std::isfinite(v) && std::fabs(v) < 20.0f);
  Batch batch;
  for (size_t i = 0; i < kA.size(); ++i) {
    batch.add(kA[i], (int32_t)i, 7, i % 2 == 0);
    if (i < kB.size()) batch.add(kB[kB.size() - 1 - i], (int32_t)(kB.size() - 1 - i), 3, true);
  }
  auto kv = any_kv();
  Logits h;
  Status st = m.forward_hidden(batch, *kv, h);
  ASSERT_TRUE(st.is_ok()) << st.message();
  ASSERT_EQ(h.n_vocab, 64);
  for (size_t r = 0; r < h.rows(); ++r) {
    const size_t bi = (size_t)h.batch_index[r];
    const Logits& want = batch.seqs[bi] == 7 ? a : bb;
    const auto row = want.row((size_t)batch.positions[bi]);
    for (size_t i = 0; i < row.size(); ++i) ASSERT_NEAR(h.row(r)[i], row[i], 1e-4) << r;
  }
}

TEST(Bert, RefusesPartialSequencesAndBadTokens) {
  Built b = bert("mean");
  ASSERT_TRUE(b.model);
  auto kv = any_kv();
  Logits out;
  const auto error = [&](const Batch& batch) {
    Status st = b.model->forward_hidden(batch, *kv, out);
    return st.is_ok() ? std::string("(ok)") : st.message();
  };
  Batch gap;  // position 1 missing
  gap.add(1, 0, 0, true);
  gap.add(2, 2, 0, true);
  EXPECT_NE(error(gap).find("not whole in the batch"), std::string::npos) << error(gap);
  Batch late;  // a continuation, as a decoder would be fed
  late.add(1, 5, 0, true);
  EXPECT_NE(error(late).find("not whole in the batch"), std::string::npos);
  Batch twice;
  twice.add(1, 0, 0, true);
  twice.add(2, 0, 0, true);
  EXPECT_NE(error(twice).find("not whole in the batch"), std::string::npos);
  Batch token;
  token.add(100000, 0, 0, true);
  EXPECT_NE(error(token).find("outside the vocabulary"), std::string::npos);
  Batch far;
  for (int i = 0; i < 65; ++i) far.add(1, i, 0, true);
  EXPECT_NE(error(far).find("outside the model's context"), std::string::npos);
  EXPECT_NE(error(Batch{}).find("empty"), std::string::npos);
}

TEST(Bert, RankHeadScores) {
  Built b = bert("rank");
  ASSERT_TRUE(b.model);
  Model& m = *b.model;
  EXPECT_EQ(m.hparams().pooling, Pooling::Rank);
  EXPECT_EQ(m.hparams().n_cls_out, 1);
  const Logits h = run(m, kA);
  std::vector<float> pooled, s1, s2;
  ASSERT_TRUE(pool_rows(Pooling::Rank, h.data.data(), (int64_t)h.rows(), 64, pooled).is_ok());
  ASSERT_TRUE(m.classify(pooled, s1).is_ok());
  ASSERT_EQ(s1.size(), 1u);
  EXPECT_TRUE(std::isfinite(s1[0]));
  pooled[0] += 1.0f;
  ASSERT_TRUE(m.classify(pooled, s2).is_ok());
  EXPECT_NE(s1[0], s2[0]);
  EXPECT_FALSE(m.classify(std::vector<float>(3, 0.0f), s1).is_ok());
}

}  // namespace
}  // namespace cairn::model
