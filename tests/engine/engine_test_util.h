// Helpers for the engine tests: the demo model (written once per binary), a
// thread-safe sink that records a sequence's events, and greedy requests.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <utility>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/generator.h"
#include "kv/kv_cache.h"
#include "model/load.h"
#include "modelgen/demo_model.h"
#include "modelgen/model_builder.h"
#include "test_util.h"

namespace cairn::engine::test_support {

// The demo model (llama, dim 128, 2 layers, the demo vocabulary), loaded once.
inline model::LoadedModel& demo() {
  static model::LoadedModel* m = [] {
    auto path = modelgen::ensure_demo_model(cairn::test::temp_dir("engine-demo"));
    if (!path.is_ok()) return static_cast<model::LoadedModel*>(nullptr);
    auto loaded = model::load_model(*path, model::LoadOptions{2, {}});
    return loaded.is_ok() ? new model::LoadedModel(std::move(*loaded)) : nullptr;
  }();
  return *m;
}

// gemma2: layers 0 and 2 slide over 16 positions, 1 and 3 are global; written and loaded once.
inline model::LoadedModel& gemma2_swa16() {
  static model::LoadedModel* m = [] {
    modelgen::RandomModelSpec spec;
    spec.arch = "gemma2";
    spec.dim = 128;
    spec.layers = 4;
    spec.heads = 4;
    spec.kv_heads = 2;
    spec.ffn = 256;
    spec.ctx = 1024;
    spec.sliding_window = 16;
    spec.seed = 77;
    const std::string path = (test::temp_dir("engine-gemma2") / "gemma2-swa16.gguf").string();
    auto written = modelgen::write_random_model(spec, modelgen::demo_vocab(), path);
    if (!written.is_ok()) return static_cast<model::LoadedModel*>(nullptr);
    auto loaded = model::load_model(path, model::LoadOptions{2, {}});
    return loaded.is_ok() ? new model::LoadedModel(std::move(*loaded)) : nullptr;
  }();
  return *m;
}

inline kv::KvShape shape_of(const model::Model& m) {
  return {static_cast<int32_t>(m.hparams().n_layer),
          static_cast<int32_t>(m.hparams().kv_row_elems())};
}

inline std::unique_ptr<kv::PagedKvCache> make_kv(const model::Model& m, int32_t blocks) {
  const auto shape = shape_of(m);
  auto kv =
      kv::PagedKvCache::create(shape, {blocks * kv::PagedKvCache::block_bytes(shape), 16, true});
  EXPECT_TRUE(kv.is_ok()) << kv.status().message();
  return kv.is_ok() ? std::move(*kv) : nullptr;
}

// Records everything the engine thread reports for one request.
class RecordingSink final : public SequenceSink {
 public:
  void on_token(const TokenOutput& out) override {
    std::lock_guard lk(mu_);
    tokens.push_back(out.id);
    pieces.push_back(out.text);
    text += out.text;
    samples.push_back(out.sample);
    cv_.notify_all();
  }
  void on_end(const EndOutput& out) override {
    std::lock_guard lk(mu_);
    ++ends;
    end = out;
    text += out.text;
    cv_.notify_all();
  }
  void on_error(const Status& err) override {
    std::lock_guard lk(mu_);
    ++ends;
    error = err.message();
    cv_.notify_all();
  }
  // Waits until the request ended (true) or `seconds` passed (false).
  bool wait(double seconds = 60) {
    std::unique_lock lk(mu_);
    return cv_.wait_for(lk, std::chrono::duration<double>(seconds), [&] { return ends > 0; });
  }
  // Waits until at least `n` tokens arrived.
  bool wait_tokens(size_t n, double seconds = 60) {
    std::unique_lock lk(mu_);
    return cv_.wait_for(lk, std::chrono::duration<double>(seconds),
                        [&] { return tokens.size() >= n || ends > 0; });
  }
  size_t n_tokens() {
    std::lock_guard lk(mu_);
    return tokens.size();
  }

  // Read only after wait() returned true.
  std::vector<Token> tokens;
  std::vector<std::string> pieces;
  std::vector<SampleResult> samples;
  std::string text;
  EndOutput end;
  std::string error;
  int ends = 0;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
};

inline EngineRequest greedy(std::vector<Token> prompt, int32_t max_tokens, bool ignore_eos = true) {
  EngineRequest r;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.ignore_eos = ignore_eos;
  r.sampling.temperature = 0;
  return r;
}

// Two-sample chi-squared test of equal-size samples, given each token's
// count in both (first, second): sum (a - b)^2 / (a + b) over the tokens
// with a + b >= 10, the rest pooled into one bin; `critical` is the
// quantile at 1 - 1e-3 for bins - 1 degrees of freedom (Wilson-Hilferty).
struct ChiSquared {
  double stat = 0, critical = 0;
  int bins = 0;
};
inline ChiSquared chi_squared_two_sample(const std::map<Token, std::pair<double, double>>& counts) {
  ChiSquared c;
  double pa = 0, pb = 0;
  for (const auto& [tok, ab] : counts) {
    if (ab.first + ab.second < 10) {
      pa += ab.first, pb += ab.second;
      continue;
    }
    c.stat += (ab.first - ab.second) * (ab.first - ab.second) / (ab.first + ab.second);
    ++c.bins;
  }
  if (pa + pb > 0) c.stat += (pa - pb) * (pa - pb) / (pa + pb), ++c.bins;
  const double k = c.bins - 1, a = 2.0 / (9.0 * k);
  c.critical = c.bins >= 2 ? k * std::pow(1 - a + 3.0902 * std::sqrt(a), 3) : 0;
  return c;
}

}  // namespace cairn::engine::test_support
