// Tensor- and pipeline-parallel shards (model.h's ShardSpec) against the
// whole model: ranks run as threads in this process, their collectives
// summing in rank order, so these tests check the cut and the arithmetic,
// not a transport (tests/distributed does that). Pipeline stages must give
// the whole model's bits; tensor-parallel ranks change the order in which a
// row-parallel product's partial sums are added, so their logits are held
// to the bounds printed here (1e-3 for float weights; see GoldenModels for
// quantized ones), and the F32/F16 golden models' greedy text.
#include <gtest/gtest.h>

#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "gguf/gguf.h"
#include "kv/contiguous_kv.h"
#include "model/model.h"
#include "modelgen/demo_model.h"
#include "modelgen/model_builder.h"
#include "test_util.h"
#include "logprobs.h"

namespace cairn::model {
namespace {

using cairn::test::log_softmax;

namespace fs = std::filesystem;
using nlohmann::json;

// The tensor-parallel ranks of one stage as threads: each publishes its
// buffer, all wait, each reads everyone's (summing in rank order), all wait.
class ThreadRanks {
 public:
  explicit ThreadRanks(int n) : n_(n), sync_(n), bufs_((size_t)n) {}

  class Comm final : public ShardComm {
   public:
    Comm(ThreadRanks& r, int rank) : r_(r), rank_(rank) {}
    Status all_reduce_sum(float* data, size_t n) override {
      r_.bufs_[(size_t)rank_] = data;
      r_.sync_.arrive_and_wait();
      std::vector<float> sum(n, 0.0f);
      for (int k = 0; k < r_.n_; ++k)
        for (size_t i = 0; i < n; ++i) sum[i] += r_.bufs_[(size_t)k][i];
      r_.sync_.arrive_and_wait();
      std::copy(sum.begin(), sum.end(), data);
      return Status::ok();
    }
    Status all_gather(const float* in, size_t n, float* out) override {
      r_.bufs_[(size_t)rank_] = const_cast<float*>(in);
      r_.sync_.arrive_and_wait();
      for (int k = 0; k < r_.n_; ++k) std::copy_n(r_.bufs_[(size_t)k], n, out + (size_t)k * n);
      r_.sync_.arrive_and_wait();
      return Status::ok();
    }

   private:
    ThreadRanks& r_;
    int rank_;
  };

 private:
  int n_;
  std::barrier<> sync_;
  std::vector<float*> bufs_;
};

// One model cut over rank_size = tp * stages shards, each with its own K/V,
// run stage after stage (the ranks of a stage at once) like the agents do.
class ShardedModel {
 public:
  static std::unique_ptr<ShardedModel> load(const std::string& path, int tp, int stages,
                                            int64_t ctx, std::string* error) {
    auto file = gguf::File::open(path);
    if (!file.is_ok()) {
      *error = file.status().message();
      return nullptr;
    }
    std::shared_ptr<const gguf::File> f(std::move(*file));
    auto hp = Model::read_hparams(*f);
    if (!hp.is_ok()) {
      *error = hp.status().message();
      return nullptr;
    }
    std::unique_ptr<ShardedModel> m(new ShardedModel);
    m->tp_ = tp;
    m->stages_ = stages;
    for (int rank = 0; rank < tp * stages; ++rank) {
      auto spec = shard_for_rank(*hp, rank, tp * stages, stages);
      if (!spec.is_ok()) {
        *error = spec.status().message();
        return nullptr;
      }
      LoadOptions o;
      o.n_threads = 1;
      o.shard = *spec;
      auto shard = Model::load(f, o);
      if (!shard.is_ok()) {
        *error = shard.status().message();
        return nullptr;
      }
      auto kv = kv::ContiguousKvCache::create((*shard)->kv_shape(), 1, ctx);
      if (!kv.is_ok()) {
        *error = kv.status().message();
        return nullptr;
      }
      m->shards_.push_back(std::move(*shard));
      m->kv_.push_back(std::move(*kv));
    }
    return m;
  }

  Status forward(const Batch& batch, Logits& out) {
    std::vector<float> hidden;
    for (int s = 0; s < stages_; ++s) {
      const bool last = s + 1 == stages_;
      ThreadRanks ranks(tp_);
      std::vector<Status> st((size_t)tp_, Status::ok());
      std::vector<std::vector<float>> next((size_t)tp_);
      std::vector<Logits> logits((size_t)tp_);
      std::vector<std::thread> threads;
      for (int r = 0; r < tp_; ++r) {
        threads.emplace_back([&, r] {
          ThreadRanks::Comm comm(ranks, r);
          StageIo io;
          io.hidden_in = s == 0 ? nullptr : hidden.data();
          io.hidden_out = last ? nullptr : &next[(size_t)r];
          io.comm = &comm;
          const size_t i = (size_t)(s * tp_ + r);
          st[(size_t)r] = shards_[i]->forward_stage(batch, *kv_[i], io, logits[(size_t)r]);
        });
      }
      for (auto& t : threads) t.join();
      for (const Status& e : st) CAIRN_RETURN_IF_ERROR(e);
      if (last) {
        // Every rank of the last stage holds the gathered logits.
        for (int r = 1; r < tp_; ++r)
          if (logits[(size_t)r].data != logits[0].data)
            return Status::error("the last stage's ranks disagree on the logits");
        out = std::move(logits[0]);
      } else {
        for (int r = 1; r < tp_; ++r)
          if (next[(size_t)r] != next[0])
            return Status::error("stage " + std::to_string(s) + "'s ranks disagree on their rows");
        hidden = std::move(next[0]);
      }
    }
    return Status::ok();
  }

  const Model& shard(int i) const { return *shards_[(size_t)i]; }

 private:
  int tp_ = 1, stages_ = 1;
  std::vector<std::unique_ptr<Model>> shards_;
  std::vector<std::unique_ptr<kv::ContiguousKvCache>> kv_;
};

std::unique_ptr<Model> load_whole(const std::string& path) {
  auto file = gguf::File::open(path);
  EXPECT_TRUE(file.is_ok()) << file.status().message();
  if (!file.is_ok()) return nullptr;
  auto m = Model::load(std::shared_ptr<const gguf::File>(std::move(*file)), LoadOptions{1, {}});
  EXPECT_TRUE(m.is_ok()) << m.status().message();
  return m.is_ok() ? std::move(*m) : nullptr;
}

// A prompt in one batch, then `steps` greedy tokens one at a time; every
// forward's logits row appended to `rows`.
template <typename Forward>
std::vector<Token> greedy(Forward&& forward, const std::vector<Token>& prompt, int steps,
                          std::vector<std::vector<float>>* rows = nullptr) {
  Batch b;
  for (size_t i = 0; i < prompt.size(); ++i) b.add(prompt[i], (int32_t)i, 0, i + 1 == prompt.size());
  std::vector<Token> got;
  int32_t pos = (int32_t)prompt.size();
  for (int i = 0; i < steps; ++i) {
    Logits lg;
    Status st = forward(b, lg);
    EXPECT_TRUE(st.is_ok()) << st.message();
    if (!st.is_ok() || lg.rows() != 1) return got;
    auto row = lg.row(0);
    if (rows) rows->emplace_back(row.begin(), row.end());
    const Token next = (Token)(std::max_element(row.begin(), row.end()) - row.begin());
    got.push_back(next);
    b.clear();
    b.add(next, pos++, 0, true);
  }
  return got;
}

// A random model this test writes (no ../shared needed).
std::string random_model(const std::string& name, modelgen::RandomModelSpec spec) {
  const fs::path dir = test::temp_dir("shard_" + name);
  const std::string path = (dir / (name + ".gguf")).string();
  const modelgen::VocabSource vocab = modelgen::demo_vocab();
  auto made = modelgen::write_random_model(spec, vocab, path);
  EXPECT_TRUE(made.is_ok()) << made.status().message();
  return path;
}

modelgen::RandomModelSpec small_spec(TensorType type) {
  modelgen::RandomModelSpec s;
  s.dim = 128;
  s.layers = 4;
  s.heads = 4;
  s.kv_heads = 2;
  s.ffn = 256;
  s.ctx = 256;
  s.type = type;
  s.seed = 7;
  return s;
}

const std::vector<Token> kPrompt = {1, 17, 42, 99, 7, 250, 3, 11, 64};

TEST(Shards, PipelineStagesGiveTheWholeModelsBits) {
  for (TensorType type : {TensorType::F32, TensorType::Q8_0, TensorType::Q4_0}) {
    const std::string path = random_model(std::string(type_info(type).name), small_spec(type));
    auto whole = load_whole(path);
    ASSERT_TRUE(whole);
    auto kv = kv::ContiguousKvCache::create(whole->kv_shape(), 1, 64);
    ASSERT_TRUE(kv.is_ok());
    std::vector<std::vector<float>> want, got;
    const auto ref = greedy([&](const Batch& b, Logits& lg) { return whole->forward(b, **kv, lg); },
                            kPrompt, 12, &want);
    for (int stages : {2, 4}) {
      std::string error;
      auto sharded = ShardedModel::load(path, 1, stages, 64, &error);
      ASSERT_TRUE(sharded) << error;
      got.clear();
      const auto toks = greedy([&](const Batch& b, Logits& lg) { return sharded->forward(b, lg); },
                               kPrompt, 12, &got);
      EXPECT_EQ(toks, ref) << type_info(type).name << " in " << stages << " stages";
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i)
        EXPECT_EQ(0, std::memcmp(got[i].data(), want[i].data(), got[i].size() * sizeof(float)))
            << type_info(type).name << " in " << stages << " stages, step " << i;
    }
  }
}

// The bound on a tensor-parallel cut: the largest difference of any
// log-probability among the whole model's top 5, and top-1 agreement, over a
// prompt and 24 teacher-forced steps.
struct Agreement {
  int steps = 0, top1 = 0;
  double max_dev = 0;
  // Against a reference's top-5 (the golden files), when given: the whole
  // model's and the shards' largest deviation.
  double whole_vs_ref = 0, shards_vs_ref = 0;
};

Agreement compare_teacher_forced(Model& whole, ShardedModel& sharded, const std::vector<Token>& prompt,
                                 const std::vector<Token>& forced, const json* ref_steps = nullptr) {
  auto kv = kv::ContiguousKvCache::create(whole.kv_shape(), 1, (int64_t)(prompt.size() + forced.size() + 1));
  EXPECT_TRUE(kv.is_ok());
  Agreement a;
  Batch b;
  for (size_t i = 0; i < prompt.size(); ++i) b.add(prompt[i], (int32_t)i, 0, i + 1 == prompt.size());
  int32_t pos = (int32_t)prompt.size();
  for (size_t step = 0; step <= forced.size(); ++step) {
    Logits lw, ls;
    EXPECT_TRUE(whole.forward(b, **kv, lw).is_ok());
    const Status st = sharded.forward(b, ls);
    EXPECT_TRUE(st.is_ok()) << st.message();
    if (!st.is_ok() || lw.rows() != 1 || ls.rows() != 1) return a;
    const auto pw = log_softmax(lw.row(0)), ps = log_softmax(ls.row(0));
    std::vector<size_t> order(pw.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::partial_sort(order.begin(), order.begin() + 5, order.end(),
                      [&](size_t x, size_t y) { return pw[x] > pw[y]; });
    const size_t top_s = (size_t)(std::max_element(ps.begin(), ps.end()) - ps.begin());
    ++a.steps;
    a.top1 += top_s == order[0];
    for (int k = 0; k < 5; ++k) a.max_dev = std::max(a.max_dev, std::abs(pw[order[(size_t)k]] - ps[order[(size_t)k]]));
    // The golden steps are the generated tokens' (the prompt's logits first).
    if (ref_steps && step < ref_steps->size()) {
      for (const json& top : (*ref_steps)[step]["top"]) {
        const size_t id = top[0].get<size_t>();
        const double want = top[2].get<double>();
        if (id >= pw.size()) continue;
        a.whole_vs_ref = std::max(a.whole_vs_ref, std::abs(pw[id] - want));
        a.shards_vs_ref = std::max(a.shards_vs_ref, std::abs(ps[id] - want));
      }
    }
    if (step == forced.size()) break;
    b.clear();
    b.add(forced[step], pos++, 0, true);
  }
  return a;
}

TEST(Shards, TensorParallelRanksAgreeWithTheWholeModel) {
  std::printf("  %-8s %-10s %6s %7s %10s\n", "type", "tp x pp", "steps", "top1%", "max|dlogp|");
  for (TensorType type : {TensorType::F32, TensorType::F16, TensorType::Q8_0, TensorType::Q4_0}) {
    const std::string path = random_model("tp_" + std::string(type_info(type).name), small_spec(type));
    auto whole = load_whole(path);
    ASSERT_TRUE(whole);
    std::vector<Token> forced;
    for (int i = 0; i < 24; ++i) forced.push_back((Token)((i * 37 + 5) % 300));
    for (auto [tp, pp] : {std::pair{2, 1}, std::pair{2, 2}}) {
      std::string error;
      auto sharded = ShardedModel::load(path, tp, pp, 64, &error);
      ASSERT_TRUE(sharded) << error;
      const Agreement a = compare_teacher_forced(*whole, *sharded, kPrompt, forced);
      std::printf("  %-8s %d x %-6d %6d %6.1f%% %10.2e\n", std::string(type_info(type).name).c_str(),
                  tp, pp, a.steps, 100.0 * a.top1 / std::max(1, a.steps), a.max_dev);
      EXPECT_EQ(a.steps, 25);
      EXPECT_GE(a.top1, a.steps * 99 / 100) << type_info(type).name;
      EXPECT_LT(a.max_dev, 1e-3) << type_info(type).name;
    }
  }
}

// qwen3 (per-head norms, wide heads), phi3 (views of fused matrices, cut
// again per rank) and rope_freqs.weight: pipeline stages keep the bits,
// tensor-parallel ranks stay within the float bound.
TEST(Shards, NewArchitecturesCutLikeLlama) {
  struct Case {
    const char* arch;
    int64_t head_dim;
    const char* rope_freqs;
  };
  for (const Case& c : {Case{"qwen3", 48, ""}, Case{"phi3", 0, ""}, Case{"llama", 0, "llama3"}}) {
    SCOPED_TRACE(c.arch);
    modelgen::RandomModelSpec spec = small_spec(TensorType::F32);
    spec.arch = c.arch;
    spec.head_dim = c.head_dim;
    spec.rope_freqs = c.rope_freqs;
    const std::string path = random_model(std::string("arch_") + c.arch, spec);
    auto whole = load_whole(path);
    ASSERT_TRUE(whole);
    auto kv = kv::ContiguousKvCache::create(whole->kv_shape(), 1, 64);
    ASSERT_TRUE(kv.is_ok());
    std::vector<std::vector<float>> want, got;
    const auto ref = greedy([&](const Batch& b, Logits& lg) { return whole->forward(b, **kv, lg); },
                            kPrompt, 8, &want);
    std::string error;
    auto staged = ShardedModel::load(path, 1, 2, 64, &error);
    ASSERT_TRUE(staged) << error;
    EXPECT_EQ(greedy([&](const Batch& b, Logits& lg) { return staged->forward(b, lg); }, kPrompt, 8,
                     &got),
              ref);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_EQ(0, std::memcmp(got[i].data(), want[i].data(), got[i].size() * sizeof(float)));
    auto cut = ShardedModel::load(path, 2, 2, 64, &error);
    ASSERT_TRUE(cut) << error;
    std::vector<Token> forced;
    for (int i = 0; i < 12; ++i) forced.push_back((Token)((i * 37 + 5) % 300));
    const Agreement a = compare_teacher_forced(*whole, *cut, kPrompt, forced);
    EXPECT_EQ(a.steps, 13);
    EXPECT_EQ(a.top1, a.steps);
    EXPECT_LT(a.max_dev, 1e-3);
  }
}

TEST(Shards, CutsThatCannotBeMadeAreRefused) {
  const std::string path = random_model("refuse_q4k", [] {
    auto s = small_spec(TensorType::Q4_K);
    s.dim = 256;
    s.ffn = 512;
    return s;
  }());
  auto file = gguf::File::open(path);
  ASSERT_TRUE(file.is_ok());
  std::shared_ptr<const gguf::File> f(std::move(*file));
  auto hp = Model::read_hparams(*f);
  ASSERT_TRUE(hp.is_ok());
  const auto expect_error = [&](int rank, int rank_size, int stages, const std::string& words) {
    auto spec = shard_for_rank(*hp, rank, rank_size, stages);
    std::string msg;
    if (!spec.is_ok()) {
      msg = spec.status().message();
    } else {
      LoadOptions o{1, *spec};
      auto m = Model::load(f, o);
      ASSERT_FALSE(m.is_ok()) << rank_size << " ranks in " << stages << " stages loaded";
      msg = m.status().message();
    }
    EXPECT_NE(msg.find(words), std::string::npos) << msg;
  };
  expect_error(0, 3, 1, "attention heads (4) cannot be split over 3");
  expect_error(0, 4, 1, "K/V heads (2) cannot be split over 4");
  expect_error(0, 5, 5, "4 layers cannot fill 5 pipeline stages");
  expect_error(0, 4, 3, "not a valid layout");
  // Q4_K blocks are 256 wide: half of the 256 output-projection columns is not whole blocks.
  expect_error(1, 2, 1, "cannot be cut at columns [128, 256)");
}

// The golden models: pipeline stages give the single-process bits; tensor
// parallel gives the golden greedy text for the F32/F16 ones and keeps top-1
// and log-probabilities as the random models do on the rest (where heads and
// block sizes allow the cut).
TEST(Shards, GoldenModels) {
  auto shared = test::shared_dir();
  if (!shared || !fs::exists(*shared / "golden"))
    GTEST_SKIP() << "skipped: ../shared/golden is not available";
  int checked = 0;
  std::printf("  %-22s %-7s %s\n", "model", "tp x pp", "result");
  for (const auto& e : fs::directory_iterator(*shared / "golden")) {
    if (e.path().extension() != ".json" || e.path().stem() == "chat-templates") continue;
    std::ifstream in(e.path());
    const json g = json::parse(in, nullptr, false);
    if (g.is_discarded() || !g.contains("model")) continue;
    const fs::path model = *shared / "models" / g["model"].get<std::string>();
    if (!fs::exists(model)) continue;
    const std::string name = model.stem().string();
    const bool exact = name.find("f32") != std::string::npos || name.find("f16") != std::string::npos ||
                       name.find("260K") != std::string::npos;
    auto whole = load_whole(model.string());
    ASSERT_TRUE(whole);
    const json& c = g["cases"][0];
    const auto prompt = c["prompt_tokens"].get<std::vector<Token>>();
    const auto want = c["tokens"].get<std::vector<Token>>();
    const int64_t ctx = (int64_t)(prompt.size() + want.size() + 1);
    for (auto [tp, pp] : {std::pair{1, 2}, std::pair{2, 1}, std::pair{4, 1}, std::pair{2, 2}}) {
      std::string error;
      auto sharded = ShardedModel::load(model.string(), tp, pp, ctx, &error);
      if (!sharded) {
        std::printf("  %-22s %d x %-3d refused: %s\n", name.c_str(), tp, pp, error.c_str());
        EXPECT_TRUE(tp > 1) << name << ": " << error;  // every model has 2+ layers
        continue;
      }
      ++checked;
      if (tp == 1) {
        auto kv = kv::ContiguousKvCache::create(whole->kv_shape(), 1, ctx);
        ASSERT_TRUE(kv.is_ok());
        std::vector<std::vector<float>> a, b;
        greedy([&](const Batch& bt, Logits& lg) { return whole->forward(bt, **kv, lg); }, prompt, 16, &a);
        greedy([&](const Batch& bt, Logits& lg) { return sharded->forward(bt, lg); }, prompt, 16, &b);
        EXPECT_EQ(a, b) << name << ": pipeline stages changed the logits";
        std::printf("  %-22s %d x %-3d %s\n", name.c_str(), tp, pp, a == b ? "same bits" : "DIFFERENT");
      } else if (exact) {
        const auto got =
            greedy([&](const Batch& bt, Logits& lg) { return sharded->forward(bt, lg); }, prompt, (int)want.size());
        EXPECT_EQ(got, want) << name << " at tp " << tp << " x pp " << pp;
        std::printf("  %-22s %d x %-3d greedy %s the golden tokens\n", name.c_str(), tp, pp,
                    got == want ? "equals" : "DIFFERS FROM");
      } else {
        const Agreement a = compare_teacher_forced(*whole, *sharded, prompt, want, &c["steps"]);
        std::printf("  %-22s %d x %-3d top-1 %d/%d, max |dlogp| %.2e; vs reference: whole %.2e, shards %.2e\n",
                    name.c_str(), tp, pp, a.top1, a.steps, a.max_dev, a.whole_vs_ref, a.shards_vs_ref);
        EXPECT_GE(a.top1 * 100, a.steps * 99) << name;
        // Measured: 0 (qwen2 q8_0), 6.8e-3 (gqa q8_0), 6.0e-2 (gqa q4_0). The
        // partial sums' new order moves a row by an ulp or so, and the next
        // projection's int8 rounding of its activations turns some of those
        // into whole quantization steps. The gqa models amplify such steps
        // (the reference itself moves by nats on this model between its AMX
        // and AVX-512 builds: golden_test.cpp), so the bound is looser than
        // for the float models.
        EXPECT_LT(a.max_dev, 0.1) << name;
      }
    }
  }
  EXPECT_GT(checked, 0);
}

}  // namespace
}  // namespace cairn::model
