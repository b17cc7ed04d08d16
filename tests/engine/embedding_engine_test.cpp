// Engine: embedding jobs end to end (batched forwards between generation
// steps) on the demo decoder and a generated bert model; the vectors equal
// the model's own forward_hidden of each input alone, pooled.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "engine/engine.h"
#include "engine_test_util.h"
#include "kv/contiguous_kv.h"
#include "model/pooling.h"
#include "modelgen/demo_model.h"
#include "modelgen/model_builder.h"

namespace cairn::engine {
namespace {

using test_support::demo;
using test_support::make_kv;

class EmbedRecorder final : public EmbedSink {
 public:
  void on_embeddings(std::vector<std::vector<float>> v, int32_t n_tokens) override {
    std::lock_guard lk(mu_);
    vectors = std::move(v);
    tokens = n_tokens;
    done = true;
    cv_.notify_all();
  }
  void on_error(const Status& e) override {
    std::lock_guard lk(mu_);
    error = e;
    done = true;
    cv_.notify_all();
  }
  bool wait(double seconds = 60) {
    std::unique_lock lk(mu_);
    return cv_.wait_for(lk, std::chrono::duration<double>(seconds), [&] { return done; });
  }
  std::vector<std::vector<float>> vectors;
  int32_t tokens = 0;
  Status error;
  bool done = false;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
};

// One input alone through the model, pooled: what the engine must give.
std::vector<float> alone(model::Model& m, const std::vector<Token>& toks, model::Pooling p) {
  model::Batch b;
  const int32_t n = (int32_t)toks.size();
  for (int32_t i = 0; i < n; ++i) {
    const bool want = p == model::Pooling::Mean || (p == model::Pooling::Last && i == n - 1) ||
                      ((p == model::Pooling::Cls || p == model::Pooling::Rank) && i == 0);
    b.add(toks[(size_t)i], i, 0, want);
  }
  auto kv = kv::ContiguousKvCache::create(m.kv_shape(), 1, n);
  EXPECT_TRUE(kv.is_ok());
  model::Logits out;
  EXPECT_TRUE(m.forward_hidden(b, **kv, out).is_ok());
  std::vector<float> v;
  EXPECT_TRUE(model::pool_rows(p, out.data.data(), (int64_t)out.rows(), out.n_vocab, v).is_ok());
  if (p == model::Pooling::Rank) {
    std::vector<float> scores;
    EXPECT_TRUE(m.classify(v, scores).is_ok());
    return scores;
  }
  return v;
}

void expect_near(const std::vector<float>& a, const std::vector<float>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-4f * (1 + std::fabs(b[i])));
}

std::vector<std::vector<Token>> inputs(const Tokenizer& tok) {
  std::vector<std::vector<Token>> out;
  for (const char* t : {"the little dog", "once upon a time there was a king", "she went home",
                        "a", "what is the problem with the fire and the horse and the sea"})
    out.push_back(tok.encode(t, true));
  return out;
}

TEST(EmbeddingEngine, BatchedJobsEqualEachInputAloneWhileGenerating) {
  auto& m = demo();
  const auto in = inputs(*m.tokenizer);
  const model::Pooling kPoolings[] = {model::Pooling::Mean, model::Pooling::Last,
                                      model::Pooling::Cls};
  // Before the engine thread owns the model.
  std::vector<std::vector<std::vector<float>>> want;
  for (auto pooling : kPoolings) {
    want.emplace_back();
    for (const auto& one : in) want.back().push_back(alone(*m.model, one, pooling));
  }
  auto kv = make_kv(*m.model, 64);
  // A small forward budget: the five inputs need several embedding steps.
  Engine engine(*m.model, *m.tokenizer, *kv, EngineConfig{24, 8, 256});
  engine.start();
  auto gen = std::make_shared<test_support::RecordingSink>();
  ASSERT_TRUE(engine.submit(test_support::greedy(m.tokenizer->encode("once upon", true), 40), gen)
                  .is_ok());
  for (size_t p = 0; p < std::size(kPoolings); ++p) {
    const model::Pooling pooling = kPoolings[p];
    auto many = std::make_shared<EmbedRecorder>();
    auto single = std::make_shared<EmbedRecorder>();
    ASSERT_TRUE(engine.submit_embedding(EmbedRequest{in, pooling}, many).is_ok());
    ASSERT_TRUE(engine.submit_embedding(EmbedRequest{{in[1]}, pooling}, single).is_ok());
    ASSERT_TRUE(many->wait());
    ASSERT_TRUE(single->wait());
    ASSERT_TRUE(many->error.is_ok()) << many->error.message();
    ASSERT_EQ(many->vectors.size(), in.size());
    int32_t total = 0;
    for (size_t i = 0; i < in.size(); ++i) {
      expect_near(many->vectors[i], want[p][i]);
      total += (int32_t)in[i].size();
    }
    EXPECT_EQ(many->tokens, total);
    expect_near(single->vectors.at(0), many->vectors[1]);
  }
  ASSERT_TRUE(gen->wait());
  EXPECT_EQ(gen->tokens.size(), 40u);  // generation kept going between embedding forwards
  // The counters are published at the end of the step whose sinks were
  // called: wait for that step rather than read them while it runs.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (engine.stats().embed_requests_total < 6u && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_EQ(engine.stats().embed_requests_total, 6u);
}

TEST(EmbeddingEngine, RefusesBadJobsAndCancels) {
  auto& m = demo();
  auto kv = make_kv(*m.model, 64);
  Engine engine(*m.model, *m.tokenizer, *kv, EngineConfig{64, 8, 64});
  auto sink = std::make_shared<EmbedRecorder>();
  EXPECT_FALSE(engine.submit_embedding(EmbedRequest{{}, model::Pooling::Mean}, sink).is_ok());
  EXPECT_FALSE(engine.submit_embedding(EmbedRequest{{{}}, model::Pooling::Mean}, sink).is_ok());
  auto bad = engine.submit_embedding(EmbedRequest{{{1, 1 << 30}}, model::Pooling::Mean}, sink);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("vocabulary"), std::string::npos);
  auto long_input =
      engine.submit_embedding(EmbedRequest{{std::vector<Token>(65, 5)}, model::Pooling::Mean}, sink);
  ASSERT_FALSE(long_input.is_ok());
  EXPECT_NE(long_input.status().message().find("context"), std::string::npos);
  EXPECT_FALSE(engine.submit_embedding(EmbedRequest{{{1, 2}}, model::Pooling::Rank}, sink).is_ok());
  EXPECT_FALSE(engine.submit_embedding(EmbedRequest{{{1, 2}}, model::Pooling::None}, sink).is_ok());

  // Cancelled before any step ran (the engine is stepped by hand here).
  auto id = engine.submit_embedding(EmbedRequest{{{1, 2, 3}}, model::Pooling::Mean}, sink);
  ASSERT_TRUE(id.is_ok());
  engine.cancel(*id);
  engine.step();
  ASSERT_TRUE(sink->done);
  EXPECT_EQ(sink->error.code(), StatusCode::Cancelled);
  EXPECT_EQ(engine.stats().waiting, 0);

  // A job that runs: the paged cache is never touched.
  auto ok = std::make_shared<EmbedRecorder>();
  ASSERT_TRUE(engine.submit_embedding(EmbedRequest{{{1, 2, 3}, {4, 5}}, model::Pooling::Mean}, ok)
                  .is_ok());
  for (int i = 0; i < 4 && !ok->done; ++i) engine.step();
  ASSERT_TRUE(ok->done);
  EXPECT_TRUE(ok->error.is_ok()) << ok->error.message();
  EXPECT_EQ(ok->tokens, 5);
  EXPECT_EQ(engine.stats().kv.blocks_used, 0);
}

TEST(EmbeddingEngine, BertRanksAndKeepsInputsWhole) {
  auto dir = cairn::test::temp_dir("engine-bert");
  modelgen::RandomModelSpec s;
  s.arch = "bert";
  s.dim = 64;
  s.layers = 2;
  s.heads = 4;
  s.kv_heads = 4;
  s.ffn = 128;
  s.ctx = 64;
  s.pooling = "rank";
  const std::string path = (dir / "bert-rank.gguf").string();
  ASSERT_TRUE(modelgen::write_random_model(s, modelgen::demo_vocab(), path).is_ok());
  auto m = model::load_model(path, model::LoadOptions{2, {}});
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  std::vector<std::vector<Token>> in = {{1, 5, 9, 17, 2}, {1, 44, 8, 21, 30, 2}, {1, 7, 2}};
  std::vector<std::vector<float>> want;
  for (const auto& one : in) want.push_back(alone(*m->model, one, model::Pooling::Rank));
  auto kv = make_kv(*m->model, 8);
  Engine engine(*m->model, *m->tokenizer, *kv, EngineConfig{20, 8, 64});
  engine.start();
  // Longer than a forward's budget: a non-causal model sees an input whole, so it is refused.
  auto sink = std::make_shared<EmbedRecorder>();
  auto too_long =
      engine.submit_embedding(EmbedRequest{{std::vector<Token>(21, 5)}, model::Pooling::Rank}, sink);
  ASSERT_FALSE(too_long.is_ok());
  EXPECT_NE(too_long.status().message().find("--batch-tokens"), std::string::npos);

  ASSERT_TRUE(engine.submit_embedding(EmbedRequest{in, model::Pooling::Rank}, sink).is_ok());
  ASSERT_TRUE(sink->wait());
  ASSERT_TRUE(sink->error.is_ok()) << sink->error.message();
  for (size_t i = 0; i < in.size(); ++i) {
    ASSERT_EQ(sink->vectors[i].size(), 1u);
    expect_near(sink->vectors[i], want[i]);
  }
}

}  // namespace
}  // namespace cairn::engine
