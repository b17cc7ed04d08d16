// tests/model/golden_eval.h — scoring a model against a reference's golden
// answers (golden_from_server.py's format): greedy decoding, one token per
// forward after the prompt, and teacher-forced top-5 log-probabilities (the
// prompt in one batch, then each reference token alone), on one LoRA
// adapter id (0: the base model). Also the make-model spec a golden file
// records. Used by the arch and LoRA golden tests.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "kv/contiguous_kv.h"
#include "logprobs.h"
#include "model/model.h"
#include "modelgen/model_builder.h"
#include "tokenizer/tokenizer.h"

namespace cairn::test {

struct GoldenScore {
  int cases = 0, greedy_ok = 0;  // cases whose greedy tokens all match
  int steps = 0, agree = 0;      // teacher-forced steps, and those whose argmax matches
  std::vector<double> devs;      // |ours - reference| per top-5 entry
  std::string worst;             // where the largest deviation is
  double median() const {
    std::vector<double> s = devs;
    std::sort(s.begin(), s.end());
    return s.empty() ? 0.0 : s[s.size() / 2];
  }
  double max() const { return devs.empty() ? 0.0 : *std::max_element(devs.begin(), devs.end()); }
};

// The golden files (*.json) of tests/model/<dir>, sorted.
inline std::vector<std::filesystem::path> golden_files(const std::string& dir) {
  namespace fs = std::filesystem;
  std::vector<fs::path> out;
  const fs::path d = fs::path(CAIRN_TESTS_DIR) / "model" / dir;
  if (!fs::exists(d)) return out;
  for (const auto& e : fs::directory_iterator(d))
    if (e.path().extension() == ".json") out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

// The spec a golden file's "make_model" records (type f32 unless it says).
inline modelgen::RandomModelSpec golden_model_spec(const nlohmann::json& j) {
  modelgen::RandomModelSpec s;
  s.arch = j.at("arch").get<std::string>();
  s.dim = j.at("dim").get<int64_t>();
  s.layers = j.at("layers").get<int64_t>();
  s.heads = j.at("heads").get<int64_t>();
  s.kv_heads = j.at("kv_heads").get<int64_t>();
  s.ffn = j.at("ffn").get<int64_t>();
  s.ctx = j.at("ctx").get<int64_t>();
  s.head_dim = j.value("head_dim", int64_t{0});
  s.rope_freqs = j.value("rope_freqs", std::string());
  s.experts = j.value("experts", int64_t{0});  // the MoE sizes (0: make-model's defaults)
  s.experts_used = j.value("experts_used", int64_t{0});
  s.expert_ffn = j.value("expert_ffn", int64_t{0});
  s.shared_ffn = j.value("shared_ffn", int64_t{0});
  s.sliding_window = j.value("sliding_window", int64_t{0});  // gemma (0: make-model's defaults)
  s.attn_softcap = j.value("attn_softcap", 0.0f);
  s.final_softcap = j.value("final_softcap", 0.0f);
  s.rope_scaling = j.value("rope_scaling", std::string());  // RoPE scaling keys (none unless set)
  s.rope_scaling_factor = j.value("rope_scaling_factor", 0.0f);
  s.rope_orig_ctx = j.value("rope_orig_ctx", int64_t{0});
  s.seed = j.at("seed").get<uint64_t>();
  s.name = j.value("name", std::string());
  s.pooling = j.value("pooling", std::string());  // bert (and decoders with the key)
  const auto type = type_from_name(j.value("type", std::string("f32")));
  s.type = type ? *type : TensorType::F32;
  return s;
}

inline GoldenScore score_golden(model::Model& model, const Tokenizer& tok, const nlohmann::json& g,
                                const std::string& name, uint16_t adapter = 0) {
  using model::Batch;
  using model::Logits;
  GoldenScore sc;
  const auto ids = [](const nlohmann::json& a) { return a.get<std::vector<Token>>(); };
  for (const nlohmann::json& c : g["cases"]) {
    ++sc.cases;
    const std::vector<Token> prompt = ids(c["prompt_tokens"]);
    const std::vector<Token> want = ids(c["tokens"]);
    EXPECT_EQ(tok.encode(c["prompt"].get<std::string>(), true), prompt);
    {
      auto kv = kv::ContiguousKvCache::create(model.hparams().kv_shape(), 1,
                                              (int64_t)(prompt.size() + want.size() + 1));
      EXPECT_TRUE(kv) << kv.status().message();
      if (!kv) return sc;
      Batch b;
      for (size_t i = 0; i < prompt.size(); ++i)
        b.add(prompt[i], (int32_t)i, 0, i + 1 == prompt.size(), adapter);
      Logits lg;
      std::vector<Token> got;
      int32_t pos = (int32_t)prompt.size();
      while (got.size() < want.size()) {
        Status s = model.forward(b, **kv, lg);
        EXPECT_TRUE(s.is_ok()) << s.message();
        if (!s.is_ok()) return sc;
        got.push_back(argmax(lg.row(0)));
        b.clear();
        b.add(got.back(), pos++, 0, true, adapter);
      }
      sc.greedy_ok += got == want;
    }
    std::vector<Token> seq = prompt;
    seq.insert(seq.end(), want.begin(), want.end() - 1);
    auto kv = kv::ContiguousKvCache::create(model.hparams().kv_shape(), 1, (int64_t)seq.size());
    EXPECT_TRUE(kv) << kv.status().message();
    if (!kv) return sc;
    const nlohmann::json& ref_steps = c["steps"];
    EXPECT_EQ(ref_steps.size(), want.size());
    size_t step = 0;
    for (size_t start = 0; start < seq.size() && step < ref_steps.size(); ++step) {
      const size_t end = start == 0 ? prompt.size() : start + 1;
      Batch b;
      for (size_t i = start; i < end; ++i) b.add(seq[i], (int32_t)i, 0, i + 1 == end, adapter);
      Logits one;
      Status s = model.forward(b, **kv, one);
      EXPECT_TRUE(s.is_ok()) << s.message();
      if (!s.is_ok() || one.rows() != 1) return sc;
      ++sc.steps;
      sc.agree += argmax(one.row(0)) == want[step];
      const std::vector<double> lp = log_softmax(one.row(0));
      for (const nlohmann::json& top : ref_steps[step]["top"]) {
        const Token id = top[0].get<Token>();
        EXPECT_TRUE(id >= 0 && (size_t)id < lp.size());
        if (id < 0 || (size_t)id >= lp.size()) return sc;
        const double dev = std::fabs(lp[(size_t)id] - top[2].get<double>());
        if (dev > sc.max())
          sc.worst = name + ": prompt " + c["prompt"].dump() + " step " + std::to_string(step) +
                     " token " + std::to_string(id) + ": ours " + std::to_string(lp[(size_t)id]) +
                     ", ref " + std::to_string(top[2].get<double>());
        sc.devs.push_back(dev);
      }
      start = end;
    }
  }
  return sc;
}

}  // namespace cairn::test
