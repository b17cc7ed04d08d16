// Embedding paths on models the tests write themselves: a decoder's
// forward_hidden against its own logits, ragged batches against one sequence
// at a time, the pooling helper, and the file's pooling key.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "kv/contiguous_kv.h"
#include "model/model.h"
#include "model/pooling.h"
#include "synth_model.h"

namespace cairn::model {
namespace {

using kv::ContiguousKvCache;
using test::SynthSpec;
using test::SynthWeights;

struct Built {
  std::shared_ptr<const gguf::File> file;
  std::unique_ptr<Model> model;
};

Built build(const SynthSpec& spec, SynthWeights* w = nullptr) {
  Built b;
  auto f = test::synth_file(spec, w);
  EXPECT_TRUE(f) << f.status().message();
  if (!f) return b;
  b.file = std::shared_ptr<const gguf::File>(std::move(*f));
  auto m = Model::load(b.file, LoadOptions{2, {}});
  EXPECT_TRUE(m) << m.status().message();
  if (m) b.model = std::move(*m);
  return b;
}

std::unique_ptr<ContiguousKvCache> kv_for(const Model& m, int seqs = 2) {
  auto kv = ContiguousKvCache::create(m.hparams().kv_shape(), seqs, 64, TensorType::F32);
  EXPECT_TRUE(kv) << kv.status().message();
  return kv ? std::move(*kv) : nullptr;
}

const std::vector<Token> kPromptA = {1, 5, 9, 17, 33, 2, 40, 11, 7, 3};
const std::vector<Token> kPromptB = {1, 44, 8, 8, 21, 30};

// Hidden rows times the output head are the logits forward() gives.
TEST(ForwardHidden, TimesOutputHeadIsTheLogits) {
  for (const char* arch : {"llama", "qwen2"})
    for (bool tied : {false, true}) {
      SCOPED_TRACE(std::string(arch) + (tied ? " tied" : ""));
      SynthSpec s;
      s.arch = arch;
      s.tied = tied;
      SynthWeights w;
      Built b = build(s, &w);
      ASSERT_TRUE(b.model);
      EXPECT_EQ(b.model->hparams().pooling, Pooling::Unspecified);
      EXPECT_TRUE(b.model->hparams().causal);
      Batch batch;
      for (size_t i = 0; i < kPromptA.size(); ++i)
        batch.add(kPromptA[i], (int32_t)i, 0, i % 3 == 0);
      auto kv1 = kv_for(*b.model), kv2 = kv_for(*b.model);
      Logits logits, hidden;
      ASSERT_TRUE(b.model->forward(batch, *kv1, logits).is_ok());
      Status st = b.model->forward_hidden(batch, *kv2, hidden);
      ASSERT_TRUE(st.is_ok()) << st.message();
      ASSERT_EQ(hidden.n_vocab, s.n_embd);
      ASSERT_EQ(hidden.batch_index, logits.batch_index);
      const std::vector<float>& out = w.t.at(tied ? "token_embd.weight" : "output.weight");
      for (size_t r = 0; r < hidden.rows(); ++r)
        for (int64_t v = 0; v < s.n_vocab; ++v) {
          double d = 0;
          for (int64_t i = 0; i < s.n_embd; ++i)
            d += (double)hidden.row(r)[(size_t)i] * out[(size_t)(v * s.n_embd + i)];
          ASSERT_NEAR(d, logits.row(r)[(size_t)v], 1e-4) << "row " << r << " vocab " << v;
        }
    }
}

// Two sequences interleaved in one batch give each one's rows alone.
TEST(ForwardHidden, RaggedBatchMatchesOneAtATime) {
  SynthSpec s;
  Built b = build(s);
  ASSERT_TRUE(b.model);
  Model& m = *b.model;
  const auto alone = [&](const std::vector<Token>& toks) {
    auto kv = kv_for(m);
    Batch batch;
    for (size_t i = 0; i < toks.size(); ++i) batch.add(toks[i], (int32_t)i, 0, true);
    Logits h;
    EXPECT_TRUE(m.forward_hidden(batch, *kv, h).is_ok());
    return h;
  };
  const Logits a = alone(kPromptA), bb = alone(kPromptB);
  auto kv = kv_for(m);
  Batch batch;
  for (size_t i = 0; i < kPromptA.size(); ++i) {
    batch.add(kPromptA[i], (int32_t)i, 0, true);
    if (i < kPromptB.size()) batch.add(kPromptB[i], (int32_t)i, 1, true);
  }
  Logits h;
  ASSERT_TRUE(m.forward_hidden(batch, *kv, h).is_ok());
  ASSERT_EQ(h.rows(), batch.size());
  for (size_t r = 0; r < h.rows(); ++r) {
    const size_t bi = (size_t)h.batch_index[r];
    const Logits& want = batch.seqs[bi] == 0 ? a : bb;
    const auto row = want.row((size_t)batch.positions[bi]);
    for (size_t i = 0; i < row.size(); ++i) ASSERT_NEAR(h.row(r)[i], row[i], 1e-5);
  }
}

TEST(ForwardHidden, ReadsPoolingTypeAndRefusesBadOnes) {
  SynthSpec s;
  s.uint_override["pooling_type"] = 3;
  Built b = build(s);
  ASSERT_TRUE(b.model);
  EXPECT_EQ(b.model->hparams().pooling, Pooling::Last);
  s.uint_override["pooling_type"] = 9;
  auto f = test::synth_file(s);
  ASSERT_TRUE(f);
  auto m = Model::load(std::shared_ptr<const gguf::File>(std::move(*f)));
  ASSERT_FALSE(m);
  EXPECT_NE(m.status().message().find("pooling_type"), std::string::npos) << m.status().message();
}

TEST(Pooling, MeanClsLastAndErrors) {
  const std::vector<float> rows = {1, 2, 3, 4, 5, 6};  // 3 rows of 2
  std::vector<float> out;
  ASSERT_TRUE(pool_rows(Pooling::Mean, rows.data(), 3, 2, out).is_ok());
  EXPECT_EQ(out, (std::vector<float>{3, 4}));
  ASSERT_TRUE(pool_rows(Pooling::Cls, rows.data(), 3, 2, out).is_ok());
  EXPECT_EQ(out, (std::vector<float>{1, 2}));
  ASSERT_TRUE(pool_rows(Pooling::Rank, rows.data(), 3, 2, out).is_ok());
  EXPECT_EQ(out, (std::vector<float>{1, 2}));
  ASSERT_TRUE(pool_rows(Pooling::Last, rows.data(), 3, 2, out).is_ok());
  EXPECT_EQ(out, (std::vector<float>{5, 6}));
  ASSERT_TRUE(pool_rows(Pooling::None, rows.data(), 3, 2, out).is_ok());
  EXPECT_EQ(out, rows);
  EXPECT_FALSE(pool_rows(Pooling::Mean, rows.data(), 0, 2, out).is_ok());
  EXPECT_FALSE(pool_rows(Pooling::Unspecified, rows.data(), 3, 2, out).is_ok());
  EXPECT_FALSE(pool_rows(Pooling::Mean, nullptr, 3, 2, out).is_ok());
}

}  // namespace
}  // namespace cairn::model
