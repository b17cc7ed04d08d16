// LoRA adapters (model/lora.h) on models and adapters the tests write: the
// flags, the refusals of files that do not fit, merged at load against
// applied at run time, several adapters and the base model in one batch,
// fused (phi3) tensors cut like their weights, and the scale rules.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "kv/contiguous_kv.h"
#include "model/load.h"
#include "model/lora.h"
#include "model/model.h"
#include "modelgen/demo_model.h"
#include "modelgen/lora_builder.h"
#include "modelgen/model_builder.h"
#include "test_util.h"

namespace cairn::model {
namespace {

namespace fs = std::filesystem;

const std::vector<std::string> kAllTargets = {"attn_q",   "attn_k", "attn_v",  "attn_output",
                                              "ffn_gate", "ffn_up", "ffn_down", "output",
                                              "token_embd"};

class Lora : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = cairn::test::temp_dir("lora"); }

  std::string base(const std::string& name, const std::string& arch = "llama",
                   TensorType type = TensorType::F32) {
    modelgen::RandomModelSpec s;
    s.arch = arch;
    s.dim = 64;
    s.layers = 2;
    s.heads = 4;
    s.kv_heads = 2;
    s.ffn = 96;
    s.ctx = 128;
    s.type = type;
    s.seed = 5;
    const std::string path = (dir_ / (name + ".gguf")).string();
    auto w = modelgen::write_random_model(s, modelgen::demo_vocab(), path, 1);
    EXPECT_TRUE(w) << w.status().message();
    return path;
  }

  std::string adapter(const std::string& name, const std::string& base_path,
                      modelgen::RandomLoraSpec spec) {
    auto f = gguf::File::open(base_path);
    EXPECT_TRUE(f) << f.status().message();
    auto bytes = modelgen::random_lora(**f, spec);
    EXPECT_TRUE(bytes) << bytes.status().message();
    return write(name, *bytes);
  }

  std::string write(const std::string& name, const std::vector<uint8_t>& bytes) {
    const std::string path = (dir_ / (name + ".gguf")).string();
    std::FILE* out = std::fopen(path.c_str(), "wb");
    EXPECT_NE(out, nullptr);
    std::fwrite(bytes.data(), 1, bytes.size(), out);
    std::fclose(out);
    return path;
  }

  fs::path dir_;
};

modelgen::RandomLoraSpec spec_of(std::vector<std::string> targets, uint64_t seed,
                                 TensorType type = TensorType::F32) {
  modelgen::RandomLoraSpec s;
  s.rank = 4;
  s.alpha = 8;
  s.targets = std::move(targets);
  s.type = type;
  s.seed = seed;
  return s;
}

// Logits of every position of `prompt` for each sequence of one batch:
// sequence i runs on adapter adapters[i].
std::vector<std::vector<float>> run(Model& m, const std::vector<Token>& prompt,
                                    const std::vector<uint16_t>& adapters) {
  auto kv = kv::ContiguousKvCache::create(m.hparams().kv_shape(), (int32_t)adapters.size(),
                                          (int64_t)prompt.size());
  EXPECT_TRUE(kv) << kv.status().message();
  Batch b;
  for (size_t s = 0; s < adapters.size(); ++s)
    for (size_t i = 0; i < prompt.size(); ++i) b.add(prompt[i], (int32_t)i, (SeqId)s, true, adapters[s]);
  Logits lg;
  Status st = m.forward(b, **kv, lg);
  EXPECT_TRUE(st.is_ok()) << st.message();
  std::vector<std::vector<float>> out;
  for (size_t r = 0; r < lg.rows(); ++r) out.emplace_back(lg.row(r).begin(), lg.row(r).end());
  return out;
}

double max_diff(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  EXPECT_EQ(a.size(), b.size());
  double d = 0;
  for (size_t r = 0; r < std::min(a.size(), b.size()); ++r)
    for (size_t i = 0; i < a[r].size(); ++i) d = std::max(d, (double)std::fabs(a[r][i] - b[r][i]));
  return d;
}

LoadedModel load(const std::string& path, AdapterOptions ad = {}) {
  auto m = load_model(path, LoadOptions{1, {}}, {}, ad);
  EXPECT_TRUE(m) << m.status().message();
  return m ? std::move(*m) : LoadedModel{};
}

const std::vector<Token> kPrompt = {1, 17, 42, 99, 7, 250, 3, 64, 128, 5};

TEST(LoraFlags, ParsesFilesScalesAndNames) {
  auto a = parse_lora_flag("a.gguf");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->path, "a.gguf");
  EXPECT_EQ(a->scale, 1.0f);
  auto b = parse_lora_flag("dir/a.gguf:0.25");
  ASSERT_TRUE(b);
  EXPECT_EQ(b->path, "dir/a.gguf");
  EXPECT_EQ(b->scale, 0.25f);
  auto c = parse_lora_flag("c:/x:y.gguf");  // a tail that is not a number stays in the path
  ASSERT_TRUE(c);
  EXPECT_EQ(c->path, "c:/x:y.gguf");
  auto d = parse_lora_module_flag("sql=ad/sql.gguf:2");
  ASSERT_TRUE(d);
  EXPECT_EQ(d->name, "sql");
  EXPECT_EQ(d->path, "ad/sql.gguf");
  EXPECT_EQ(d->scale, 2.0f);
  EXPECT_FALSE(parse_lora_flag(""));
  for (const char* bad : {"sql", "=a.gguf", "sql=", "sql=:2"})
    EXPECT_FALSE(parse_lora_module_flag(bad)) << bad;
}

TEST_F(Lora, RunTimeMatchesMergedAndScaleZeroIsTheBase) {
  const std::string b = base("base");
  const std::string ad = adapter("ad", b, spec_of(kAllTargets, 1));
  LoadedModel plain = load(b);
  LoadedModel merged = load(b, {{{ad, 1.0f, ""}}, {}});
  LoadedModel runtime = load(b, {{}, {{ad, 1.0f, "ad"}, {ad, 0.0f, "zero"}}});
  ASSERT_TRUE(plain.model && merged.model && runtime.model);
  ASSERT_EQ(runtime.model->n_adapters(), 2u);
  ASSERT_EQ(runtime.adapters.size(), 2u);
  EXPECT_EQ(runtime.adapters[0]->pairs.size(), 2u * 7 + 2);
  // scale = alpha / rank times the user's scale.
  EXPECT_FLOAT_EQ(runtime.adapters[0]->find("blk.0.attn_q.weight")->scale, 8.0f / 4.0f);

  const auto base_logits = run(*plain.model, kPrompt, {0});
  const auto merged_logits = run(*merged.model, kPrompt, {0});
  const auto rt = run(*runtime.model, kPrompt, {1});
  // The adapter changes the outputs, merged and at run time alike (in float,
  // the two differ by rounding only).
  const double effect = max_diff(base_logits, rt);
  EXPECT_GT(effect, 0.1);
  EXPECT_LT(max_diff(merged_logits, rt), 1e-3 * effect);
  // Scale 0 and the base id run exactly the base model.
  EXPECT_EQ(max_diff(run(*runtime.model, kPrompt, {2}), base_logits), 0.0);
  EXPECT_EQ(max_diff(run(*runtime.model, kPrompt, {0}), base_logits), 0.0);
}

TEST_F(Lora, AdaptersAndTheBaseShareOneBatch) {
  const std::string b = base("base");
  const std::string a1 = adapter("a1", b, spec_of({"attn_q", "attn_v", "ffn_down"}, 2));
  const std::string a2 = adapter("a2", b, spec_of({"attn_output", "ffn_up", "output"}, 3));
  LoadedModel m = load(b, {{}, {{a1, 1.0f, "a1"}, {a2, 0.5f, "a2"}}});
  ASSERT_TRUE(m.model);
  const auto alone0 = run(*m.model, kPrompt, {0});
  const auto alone1 = run(*m.model, kPrompt, {1});
  const auto alone2 = run(*m.model, kPrompt, {2});
  const auto mixed = run(*m.model, kPrompt, {2, 0, 1});
  const size_t n = kPrompt.size();
  ASSERT_EQ(mixed.size(), 3 * n);
  const auto part = [&](size_t s) {
    return std::vector<std::vector<float>>(mixed.begin() + (long)(s * n),
                                           mixed.begin() + (long)((s + 1) * n));
  };
  EXPECT_LT(max_diff(part(0), alone2), 1e-5);
  EXPECT_LT(max_diff(part(1), alone0), 1e-5);
  EXPECT_LT(max_diff(part(2), alone1), 1e-5);
  EXPECT_GT(max_diff(alone1, alone2), 0.1);

  // A batch naming an adapter that is not loaded is refused before it runs.
  auto kv = kv::ContiguousKvCache::create(m.model->hparams().kv_shape(), 1, 4);
  ASSERT_TRUE(kv);
  Batch bad;
  bad.add(1, 0, 0, true, 3);
  Logits lg;
  EXPECT_FALSE(m.model->forward(bad, **kv, lg).is_ok());
}

TEST_F(Lora, FusedTensorsAreCutLikeTheirWeights) {
  const std::string b = base("phi3", "phi3");
  const std::string ad = adapter("ad", b, spec_of({"attn_qkv", "ffn_up", "ffn_down"}, 4));
  LoadedModel merged = load(b, {{{ad, 1.0f, ""}}, {}});
  LoadedModel runtime = load(b, {{}, {{ad, 1.0f, "ad"}}});
  ASSERT_TRUE(merged.model && runtime.model);
  const auto rt = run(*runtime.model, kPrompt, {1});
  const double effect = max_diff(run(*runtime.model, kPrompt, {0}), rt);
  EXPECT_GT(effect, 0.1);
  EXPECT_LT(max_diff(run(*merged.model, kPrompt, {0}), rt), 1e-3 * effect);
}

TEST_F(Lora, QuantizedBaseAndAdapter) {
  // A Q8_0 base with an F16 adapter at run time; merged, the sums are
  // requantized to Q8_0, so the two differ by that rounding.
  const std::string b = base("q8", "llama", TensorType::Q8_0);
  const std::string ad = adapter("ad", b, spec_of(kAllTargets, 5, TensorType::F16));
  LoadedModel plain = load(b);
  LoadedModel merged = load(b, {{{ad, 1.0f, ""}}, {}});
  LoadedModel runtime = load(b, {{}, {{ad, 1.0f, "ad"}}});
  ASSERT_TRUE(plain.model && merged.model && runtime.model);
  const auto rt = run(*runtime.model, kPrompt, {1});
  const double effect = max_diff(run(*plain.model, kPrompt, {0}), rt);
  EXPECT_GT(effect, 0.1);
  EXPECT_LT(max_diff(run(*merged.model, kPrompt, {0}), rt), 0.1 * effect);
}

TEST_F(Lora, FilesThatDoNotFitAreRefused) {
  const std::string b = base("base");
  auto bf = gguf::File::open(b);
  ASSERT_TRUE(bf);
  const auto refused = [&](const std::string& path, const std::string& needle) {
    auto a = open_lora(path, "x", 1.0f, **bf);
    ASSERT_FALSE(a) << path;
    EXPECT_NE(a.status().message().find(needle), std::string::npos) << a.status().message();
  };
  refused(b, "general.type");  // a model, not an adapter
  refused((dir_ / "missing.gguf").string(), "missing.gguf");
  const auto header = [](gguf::Writer& w, const std::string& arch = "llama") {
    w.set_string("general.architecture", arch);
    w.set_string("general.type", "adapter");
    w.set_string("adapter.type", "lora");
  };
  const auto floats = [](int64_t n) { return std::vector<uint8_t>((size_t)n * 4, 0); };
  {
    gguf::Writer w;
    header(w, "qwen2");
    ASSERT_TRUE(w.add_tensor("blk.0.attn_q.weight.lora_a", TensorType::F32, {64, 4}, floats(256)).is_ok());
    ASSERT_TRUE(w.add_tensor("blk.0.attn_q.weight.lora_b", TensorType::F32, {4, 64}, floats(256)).is_ok());
    refused(write("arch", w.to_bytes()), "architecture 'qwen2'");
  }
  {
    gguf::Writer w;
    header(w);
    w.set_string("adapter.type", "prompt_tuning");
    refused(write("type", w.to_bytes()), "adapter.type");
  }
  {
    gguf::Writer w;
    header(w);
    ASSERT_TRUE(w.add_tensor("blk.0.attn_q.weight.lora_a", TensorType::F32, {64, 4}, floats(256)).is_ok());
    refused(write("half", w.to_bytes()), "only one of");
  }
  {
    gguf::Writer w;
    header(w);
    ASSERT_TRUE(w.add_tensor("blk.0.attn_q.weight.lora_a", TensorType::F32, {32, 4}, floats(128)).is_ok());
    ASSERT_TRUE(w.add_tensor("blk.0.attn_q.weight.lora_b", TensorType::F32, {4, 64}, floats(256)).is_ok());
    refused(write("shape", w.to_bytes()), "do not fit");
  }
  {
    gguf::Writer w;
    header(w);
    ASSERT_TRUE(w.add_tensor("blk.9.attn_q.weight.lora_a", TensorType::F32, {64, 4}, floats(256)).is_ok());
    ASSERT_TRUE(w.add_tensor("blk.9.attn_q.weight.lora_b", TensorType::F32, {4, 64}, floats(256)).is_ok());
    refused(write("layer", w.to_bytes()), "not in the model");
  }
  {
    gguf::Writer w;
    header(w);
    ASSERT_TRUE(w.add_tensor("blk.0.attn_q.weight.something", TensorType::F32, {64, 4}, floats(256)).is_ok());
    refused(write("suffix", w.to_bytes()), "neither");
  }
  {
    gguf::Writer w;
    header(w);
    ASSERT_TRUE(w.add_tensor("blk.0.attn_q.weight.lora_a", TensorType::F32, {64, 4, 2}, floats(512)).is_ok());
    ASSERT_TRUE(w.add_tensor("blk.0.attn_q.weight.lora_b", TensorType::F32, {4, 64, 2}, floats(512)).is_ok());
    refused(write("3d", w.to_bytes()), "do not fit");  // expert-shaped halves on a 2-D tensor
  }
  // An adapter given as the model.
  auto as_model = load_model(adapter("lone", b, spec_of({"attn_q"}, 8)));
  ASSERT_FALSE(as_model);
  EXPECT_NE(as_model.status().message().find("is a LoRA adapter"), std::string::npos);
  // Two run-time adapters of one name, and one named as nothing.
  const std::string ad = adapter("ad", b, spec_of({"attn_q"}, 6));
  EXPECT_FALSE(load_model(b, LoadOptions{1, {}}, {}, {{}, {{ad, 1.0f, "x"}, {ad, 1.0f, "x"}}}));
  EXPECT_FALSE(load_model(b, LoadOptions{1, {}}, {}, {{}, {{ad, 1.0f, ""}}}));
}

TEST_F(Lora, MixtureOfExpertsFfnIsMergedButNotAppliedAtRunTime) {
  const std::string b = base("moe", "qwen2moe");
  const std::string ad =
      adapter("ad", b, spec_of({"attn_q", "ffn_gate_inp", "ffn_up_exps", "ffn_down_exps"}, 7));
  auto rt = load_model(b, LoadOptions{1, {}}, {}, {{}, {{ad, 1.0f, "ad"}}});
  ASSERT_FALSE(rt);
  EXPECT_NE(rt.status().message().find("ffn_"), std::string::npos) << rt.status().message();
  LoadedModel merged = load(b, {{{ad, 1.0f, ""}}, {}});
  LoadedModel plain = load(b);
  ASSERT_TRUE(merged.model && plain.model);
  EXPECT_GT(max_diff(run(*merged.model, kPrompt, {0}), run(*plain.model, kPrompt, {0})), 1e-3);

  // Each expert's slab gains its own pair's product: W_e + scale * B_e A_e.
  auto f = gguf::File::open(b);
  ASSERT_TRUE(f);
  const std::string name = "blk.1.ffn_up_exps.weight";
  const gguf::TensorInfo* t = (*f)->find_tensor(name);
  ASSERT_TRUE(t && t->dims.size() == 3 && t->type == TensorType::F32);
  const int64_t in = t->dims[0], out = t->dims[1], experts = t->dims[2];
  const std::vector<float> before((const float*)t->data, (const float*)t->data + in * out * experts);
  auto a = open_lora(ad, "ad", 1.0f, **f);
  ASSERT_TRUE(a) << a.status().message();
  const LoraPair* p = (*a)->find(name);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->experts, experts);
  ASSERT_TRUE(merge_loras(**f, {*a}, 2).is_ok());
  const float* after = (const float*)(*f)->find_tensor(name)->data;
  const int64_t r = p->rank();
  const float* A = (const float*)p->a.data;  // experts * r rows of in
  const float* B = (const float*)p->b.data;  // experts * out rows of r
  double worst = 0;
  for (int64_t e = 0; e < experts; e += experts - 1)
    for (int64_t o = 0; o < out; o += 7)
      for (int64_t i = 0; i < in; i += 5) {
        double d = 0;
        for (int64_t k = 0; k < r; ++k) d += (double)B[(e * out + o) * r + k] * A[(e * r + k) * in + i];
        const size_t at = (size_t)((e * out + o) * in + i);
        worst = std::max(worst, std::fabs(before[at] + p->scale * d - after[at]));
      }
  EXPECT_LT(worst, 1e-5);
}

}  // namespace
}  // namespace cairn::model
