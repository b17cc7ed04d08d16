// YaRN RoPE scaling (every architecture of the shared decoder) and llama's
// sliding window (Mistral 7B v0.1) on models the tests write themselves:
// against the plain double-precision forward of plain_decoder.h, prefill and
// decode, with the angles pinned to ggml's, and the refusals of bad metadata.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "gguf/gguf_writer.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "modelgen/model_builder.h"
#include "plain_decoder.h"
#include "test_util.h"

namespace cairn::model {
namespace {

using namespace plain;

// 40 positions: past a YaRN original context of 16.
std::vector<Token> long_prompt() {
  std::vector<Token> p;
  for (int i = 0; i < 40; ++i) p.push_back((Token)((i * 7 + 3) % 48));
  return p;
}

ArchSpec yarn_spec(const std::string& arch) {
  ArchSpec s;
  s.arch = arch;
  s.neox = arch != "llama";
  s.qkv_bias = arch == "qwen2";
  s.head_dim = 16;
  // Base 100 and an original context of 16: the ramp runs over pairs 0 to 2,
  // so one pair extrapolates, one blends and the rest interpolate.
  s.rope_base = 100.0f;
  s.yarn_factor = 4;
  s.yarn_orig = 16;
  return s;
}

// ---- YaRN ---------------------------------------------------------------------

TEST(Yarn, KernelAnglesAreGgmls) {
  // cos/sin of ggml's rope op (llama.cpp of September 2026) for 64 rotated
  // dimensions, base 10000, factor 4, original context 64, the defaults
  // (ext 1, betas 32 and 1) and the context's attention factor (1 here), at
  // position 35: printed from a rope op on pairs (1, 0).
  kernels::RopeYarn y;
  y.ext_factor = 1.0f;
  y.attn_factor = 1.0f;
  kernels::rope_yarn_corr_dims(64, 64, 10000.0f, 32.0f, 1.0f, y.corr_low, y.corr_high);
  EXPECT_EQ(y.corr_low, 0.0f);
  EXPECT_EQ(y.corr_high, 9.0f);
  std::vector<float> c(32), s(32);
  kernels::rope_angles_yarn(64, 64, 35, 10000.0f, 0.25f, y, c.data(), s.data());
  const struct {
    int pair;
    float cos, sin;
  } want[] = {{0, -0x1.076a9cp+0f, -0x1.f33e0cp-2f},
              {5, 0x1.2c5d7ap-3f, -0x1.210f9cp+0f},
              {9, 0x1.cdeb1ep-1f, 0x1.63a954p-1f},
              {31, 0x1.237d2cp+0f, 0x1.5c4802p-10f}};
  for (const auto& w : want) {
    EXPECT_EQ(c[(size_t)w.pair], w.cos) << "pair " << w.pair;
    EXPECT_EQ(s[(size_t)w.pair], w.sin) << "pair " << w.pair;
  }
  // No blend and no attention factor: rope_angles' bits.
  std::vector<float> c0(32), s0(32);
  for (int32_t pos : {0, 3, 35, 100000}) {
    kernels::rope_angles(64, 64, pos, 10000.0f, 0.25f, c0.data(), s0.data());
    kernels::rope_angles_yarn(64, 64, pos, 10000.0f, 0.25f, kernels::RopeYarn{}, c.data(),
                              s.data());
    EXPECT_EQ(c, c0);
    EXPECT_EQ(s, s0);
  }
}

TEST(Yarn, MatchesPlainReferencePastTheOriginalContext) {
  const std::vector<Token> prompt = long_prompt();
  for (const std::string arch : {"llama", "qwen2", "qwen3"}) {
    SCOPED_TRACE(arch);
    ArchSpec s = yarn_spec(arch);
    s.qk_norm = arch == "qwen3";
    const Weights w = make_weights(s);
    auto l = load_bytes(write_model(s, w));
    ASSERT_TRUE(l) << l.status().message();
    const HParams& hp = l->model->hparams();
    EXPECT_EQ(hp.rope_freq_scale, 0.25f);
    EXPECT_EQ(hp.yarn_ext_factor, 1.0f);
    EXPECT_EQ(hp.n_ctx_orig_yarn, 16);
    EXPECT_EQ(hp.yarn_beta_fast, 32.0f);
    EXPECT_EQ(hp.yarn_beta_slow, 1.0f);
    EXPECT_NEAR(hp.yarn_attn_factor, 1.0f, 1e-6);  // the rope op multiplies 0.1 ln 4 + 1 in
    EXPECT_TRUE(hp.rope_yarn());
    const std::vector<Vec> want = reference(s, w, prompt);
    const auto got = run(*l->model, prompt);
    EXPECT_LT(rel_diff(got, want), 1e-4);
    EXPECT_LT(rel_diff(run(*l->model, prompt, /*one_by_one=*/true), want), 1e-4);
    // Each part matters: without YaRN, and with plain interpolation (no blend,
    // no magnitude scaling), the model is another one.
    ArchSpec none = s;
    none.yarn_factor = 0;
    EXPECT_GT(rel_diff(got, reference(none, w, prompt)), 1e-2);
    auto linear = load_bytes(write_model(none, w, [&](gguf::Writer& g) {
      g.set_string(arch + ".rope.scaling.type", "linear");
      g.set_float32(arch + ".rope.scaling.factor", 4.0f);
    }));
    ASSERT_TRUE(linear) << linear.status().message();
    const auto linear_logits = run(*linear->model, prompt);
    EXPECT_GT(max_abs_diff(got, linear_logits), 1e-3);
    // yarn_ext_factor 0 leaves plain interpolation: linear's bits.
    auto no_ext = load_bytes(write_model(s, w, [&](gguf::Writer& g) {
      g.set_float32(arch + ".rope.scaling.yarn_ext_factor", 0.0f);
    }));
    ASSERT_TRUE(no_ext) << no_ext.status().message();
    EXPECT_FALSE(no_ext->model->hparams().rope_yarn());
    EXPECT_EQ(run(*no_ext->model, prompt), linear_logits);
  }
}

TEST(Yarn, KeysTheReferenceReads) {
  ArchSpec s = yarn_spec("llama");
  const Weights w = make_weights(s);
  // No original_context_length: context_length stands in (256 in these files).
  ArchSpec s2 = s;
  s2.yarn_factor = 0;
  auto l = load_bytes(write_model(s2, w, [](gguf::Writer& g) {
    g.set_string("llama.rope.scaling.type", "yarn");
    g.set_float32("llama.rope.scaling.factor", 4.0f);
  }));
  ASSERT_TRUE(l) << l.status().message();
  EXPECT_EQ(l->model->hparams().n_ctx_orig_yarn, 256);
  // The betas, the log multiplier (the ratio of two magnitude scalings) and
  // rope.scaling.attn_factor, which multiplies in with any scaling.
  auto keys = load_bytes(write_model(s, w, [](gguf::Writer& g) {
    g.set_float32("llama.rope.scaling.yarn_beta_fast", 16.0f);
    g.set_float32("llama.rope.scaling.yarn_beta_slow", 2.0f);
    g.set_float32("llama.rope.scaling.yarn_log_multiplier", 0.5f);
    g.set_float32("llama.rope.scaling.attn_factor", 2.0f);
  }));
  ASSERT_TRUE(keys) << keys.status().message();
  const HParams& hp = keys->model->hparams();
  EXPECT_EQ(hp.yarn_beta_fast, 16.0f);
  EXPECT_EQ(hp.yarn_beta_slow, 2.0f);
  const double m1 = 0.1 * std::log(4.0) + 1, mhalf = 0.05 * std::log(4.0) + 1;
  EXPECT_NEAR(hp.yarn_attn_factor, m1 / mhalf / m1 * 2.0, 1e-6);
  // rope.scaling.attn_factor alone, with linear scaling: cos and sin doubled.
  auto linear = load_bytes(write_model(s2, w, [](gguf::Writer& g) {
    g.set_string("llama.rope.scaling.type", "linear");
    g.set_float32("llama.rope.scaling.factor", 2.0f);
    g.set_float32("llama.rope.scaling.attn_factor", 2.0f);
  }));
  ASSERT_TRUE(linear) << linear.status().message();
  EXPECT_EQ(linear->model->hparams().yarn_attn_factor, 2.0f);
  EXPECT_EQ(linear->model->hparams().yarn_ext_factor, 0.0f);
  EXPECT_TRUE(linear->model->hparams().rope_yarn());
}

TEST(Yarn, BadMetadataIsRefusedByName) {
  ArchSpec s;
  s.arch = "qwen2";
  s.qkv_bias = true;
  const Weights w = make_weights(s);
  const auto with = [&](const std::function<void(gguf::Writer&)>& meta) {
    return load_error(write_model(s, w, meta));
  };
  for (const char* type : {"dynamic", "su", "YARN"})
    EXPECT_EQ(with([&](gguf::Writer& g) {
                g.set_string("qwen2.rope.scaling.type", type);
                g.set_float32("qwen2.rope.scaling.factor", 4.0f);
              }),
              std::string("metadata 'qwen2.rope.scaling.type' = '") + type +
                  "' is not supported (none, linear, yarn, longrope)");
  const auto yarn = [&](const std::function<void(gguf::Writer&)>& more) {
    return with([&](gguf::Writer& g) {
      g.set_string("qwen2.rope.scaling.type", "yarn");
      g.set_float32("qwen2.rope.scaling.factor", 4.0f);
      more(g);
    });
  };
  EXPECT_EQ(yarn([](gguf::Writer& g) {
              g.set_uint32("qwen2.rope.scaling.original_context_length", 0);
            }),
            "metadata 'qwen2.rope.scaling.original_context_length' must be positive, got 0");
  EXPECT_EQ(yarn([](gguf::Writer& g) { g.set_float32("qwen2.rope.scaling.yarn_beta_fast", 0); }),
            "metadata 'qwen2.rope.scaling.yarn_beta_fast' must be positive, got 0.000000");
  EXPECT_EQ(yarn([](gguf::Writer& g) { g.set_float32("qwen2.rope.scaling.yarn_beta_slow", -1); }),
            "metadata 'qwen2.rope.scaling.yarn_beta_slow' must be positive, got -1.000000");
  EXPECT_EQ(yarn([](gguf::Writer& g) {
              g.set_float32("qwen2.rope.scaling.yarn_ext_factor", std::nanf(""));
            }),
            "metadata 'qwen2.rope.scaling.yarn_ext_factor' is not finite");
  EXPECT_EQ(yarn([](gguf::Writer& g) {
              g.set_float32("qwen2.rope.scaling.yarn_log_multiplier", -10.0f);
            }),
            "metadata 'qwen2.rope.scaling.yarn_log_multiplier' gives no positive attention factor");
  EXPECT_EQ(yarn([](gguf::Writer& g) { g.set_float32("qwen2.rope.scaling.attn_factor", 0); }),
            "metadata 'qwen2.rope.scaling.attn_factor' must be positive, got 0.000000");
  EXPECT_EQ(with([](gguf::Writer& g) {
              g.set_string("qwen2.rope.scaling.type", "yarn");
              g.set_float32("qwen2.rope.scaling.factor", -2.0f);
            }),
            "metadata 'qwen2.rope.scaling.factor' must be positive");
  EXPECT_NE(yarn([](gguf::Writer& g) {
              g.set_string("qwen2.rope.scaling.original_context_length", "16");
            }).find("original_context_length"),
            std::string::npos);
}

// ---- phi3's LongRoPE ----------------------------------------------------------

TEST(Phi3LongRope, FactorsChosenByTheServedContext) {
  ArchSpec s;
  s.arch = "phi3";
  s.fuse_qkv = s.fuse_ffn = s.prescale_q = true;
  s.eps = 1e-5f;
  s.head_dim = 16;  // 8 rotated pairs
  const std::vector<float> long_f = {1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, 8.0f, 12.0f};
  const std::vector<float> short_f = {1.0f, 1.0f, 1.1f, 1.2f, 1.3f, 1.5f, 1.8f, 2.0f};
  // The converter's attention factor for 256 / 32: sqrt(1 + ln 8 / ln 32).
  const float attn = (float)std::sqrt(1 + std::log(8.0) / std::log(32.0));
  const auto meta = [&](std::vector<float> lf, std::vector<float> sf) {
    return [=](gguf::Writer& g) {
      g.set_string("phi3.rope.scaling.type", "longrope");
      g.set_uint32("phi3.rope.scaling.original_context_length", 32);
      g.set_float32("phi3.rope.scaling.attn_factor", attn);
      if (!lf.empty()) {
        ASSERT_TRUE(g.add_tensor("rope_factors_long.weight", TensorType::F32,
                                 {(int64_t)lf.size()}, f32_bytes(lf)).is_ok());
      }
      if (!sf.empty()) {
        ASSERT_TRUE(g.add_tensor("rope_factors_short.weight", TensorType::F32,
                                 {(int64_t)sf.size()}, f32_bytes(sf)).is_ok());
      }
    };
  };
  const Weights w = make_weights(s);
  const std::vector<uint8_t> bytes = write_model(s, w, meta(long_f, short_f));
  const std::vector<Token> prompt = long_prompt();
  std::vector<std::vector<float>> by_long, by_short;
  // context_length (256, the default), 64 > 32: long; 32 and 16: short.
  for (int64_t n_ctx : {0, 64, 32, 16}) {
    SCOPED_TRACE("n_ctx " + std::to_string(n_ctx));
    auto l = load_bytes(bytes, n_ctx);
    ASSERT_TRUE(l) << l.status().message();
    EXPECT_EQ(l->model->hparams().n_ctx_orig_yarn, 32);
    EXPECT_EQ(l->model->hparams().yarn_attn_factor, attn);
    const bool is_long = n_ctx == 0 || n_ctx > 32;
    ArchSpec r = s;
    r.rope_freqs = is_long ? long_f : short_f;
    r.attn_factor = attn;
    const std::vector<Vec> want = reference(r, w, prompt);
    const auto got = run(*l->model, prompt);
    EXPECT_LT(rel_diff(got, want), 1e-4);
    EXPECT_LT(rel_diff(run(*l->model, prompt, /*one_by_one=*/true), want), 1e-4);
    (is_long ? by_long : by_short) = got;
  }
  EXPECT_GT(max_abs_diff(by_long, by_short), 1e-3);
  // Only the long factors and a short context: no factors, the attention factor stays.
  auto only_long = load_bytes(write_model(s, w, meta(long_f, {})), 16);
  ASSERT_TRUE(only_long) << only_long.status().message();
  ArchSpec r = s;
  r.attn_factor = attn;
  EXPECT_LT(rel_diff(run(*only_long->model, prompt), reference(r, w, prompt)), 1e-4);

  // Bad factors, by name.
  std::vector<float> zero = long_f;
  zero[2] = 0.0f;
  EXPECT_EQ(load_error(write_model(s, w, meta(zero, short_f))),
            "tensor 'rope_factors_long.weight' holds a factor that is not a positive finite number");
  EXPECT_NE(load_error(write_model(s, w, meta({1.0f, 2.0f}, short_f))).find("rope_factors_long"),
            std::string::npos);
  ArchSpec q;
  q.arch = "qwen2";
  q.qkv_bias = true;
  EXPECT_EQ(load_error(write_model(q, make_weights(q), [&](gguf::Writer& g) {
              ASSERT_TRUE(g.add_tensor("rope_factors_short.weight", TensorType::F32, {8},
                                       f32_bytes(short_f)).is_ok());
            })),
            "tensor 'rope_factors_short.weight': long-context RoPE factors (LongRoPE) are not "
            "supported for qwen2");
}

// ---- llama's sliding window ---------------------------------------------------

TEST(LlamaSlidingWindow, EveryLayerSeesItsLastWindowPositions) {
  ArchSpec s;
  s.arch = "llama";
  s.neox = false;
  s.layers = 3;
  s.window = 5;  // shorter than the 12-token prompt
  const Weights w = make_weights(s);
  auto l = load_bytes(write_model(s, w));
  ASSERT_TRUE(l) << l.status().message();
  const HParams& hp = l->model->hparams();
  EXPECT_EQ(hp.n_swa, 5);
  EXPECT_EQ(hp.swa_layers, (std::vector<uint8_t>{1, 1, 1}));
  const std::vector<Vec> want = reference(s, w);
  const auto got = run(*l->model);
  EXPECT_LT(rel_diff(got, want), 1e-4);
  EXPECT_LT(rel_diff(run(*l->model, kPrompt, /*one_by_one=*/true), want), 1e-4);
  // The window matters; the first `window` positions see what full attention sees.
  ArchSpec full = s;
  full.window = 0;
  const std::vector<Vec> want_full = reference(full, w);
  EXPECT_GT(rel_diff(got, want_full), 1e-2);
  for (size_t t = 0; t < 5; ++t)
    for (size_t i = 0; i < got[t].size(); ++i)
      EXPECT_NEAR(got[t][i], want_full[t][i], 1e-4) << "position " << t;
  // A window as long as the prompt: full attention's logits.
  ArchSpec wide = s;
  wide.window = (int64_t)kPrompt.size();
  auto lw = load_bytes(write_model(wide, w));
  ASSERT_TRUE(lw) << lw.status().message();
  EXPECT_LT(rel_diff(run(*lw->model), want_full), 1e-4);
  // Window 0: no sliding layers.
  auto l0 = load_bytes(write_model(full, w, [](gguf::Writer& g) {
    g.set_uint32("llama.attention.sliding_window", 0);
  }));
  ASSERT_TRUE(l0) << l0.status().message();
  EXPECT_EQ(l0->model->hparams().n_swa, 0);
  EXPECT_TRUE(l0->model->hparams().swa_layers.empty());
  // YaRN and the window together.
  ArchSpec both = yarn_spec("llama");
  both.window = 7;
  const std::vector<Token> prompt = long_prompt();
  const Weights wb = make_weights(both);
  auto lb = load_bytes(write_model(both, wb));
  ASSERT_TRUE(lb) << lb.status().message();
  const std::vector<Vec> want_both = reference(both, wb, prompt);
  EXPECT_LT(rel_diff(run(*lb->model, prompt), want_both), 1e-4);
  EXPECT_LT(rel_diff(run(*lb->model, prompt, /*one_by_one=*/true), want_both), 1e-4);
}

TEST(LlamaSlidingWindow, BadWindowIsRefusedByName) {
  ArchSpec s;
  s.arch = "llama";
  s.neox = false;
  const Weights w = make_weights(s);
  EXPECT_NE(load_error(write_model(s, w, [](gguf::Writer& g) {
              g.set_string("llama.attention.sliding_window", "4096");
            })).find("metadata 'llama.attention.sliding_window'"),
            std::string::npos);
  EXPECT_EQ(load_error(write_model(s, w, [](gguf::Writer& g) {
              g.set_uint32("llama.attention.sliding_window", 0x7fffffff);
            })),
            "metadata 'llama.attention.sliding_window' = 2147483647 exceeds the limit 268435456");
}

// ---- make-model ---------------------------------------------------------------

TEST(RopeScalingModelgen, WritesYarnAndLlamaWindow) {
  modelgen::VocabSource vocab;
  vocab.n_vocab = 64;
  vocab.is_byte_token.assign(64, 0);
  vocab.write_metadata = [](gguf::Writer&) {};
  const auto dir = test::temp_dir("rope-modelgen");
  modelgen::RandomModelSpec spec;
  spec.arch = "qwen2";
  spec.dim = 64;
  spec.heads = 2;
  spec.kv_heads = 1;
  spec.ffn = 96;
  spec.ctx = 256;
  spec.rope_scaling = "yarn";
  spec.rope_scaling_factor = 4;
  const std::string path = (dir / "yarn.gguf").string();
  ASSERT_TRUE(modelgen::write_random_model(spec, vocab, path).is_ok());
  auto f = gguf::File::open(path);
  ASSERT_TRUE(f) << f.status().message();
  auto m = Model::load(std::shared_ptr<const gguf::File>(std::move(*f)), LoadOptions{1, {}});
  ASSERT_TRUE(m) << m.status().message();
  EXPECT_EQ((*m)->hparams().n_ctx_orig_yarn, 64);  // ctx / factor
  EXPECT_EQ((*m)->hparams().rope_freq_scale, 0.25f);
  EXPECT_EQ((*m)->hparams().yarn_ext_factor, 1.0f);

  spec.arch = "llama";
  spec.rope_scaling = "linear";
  spec.rope_scaling_factor = 2;
  spec.sliding_window = 32;
  const std::string lpath = (dir / "window.gguf").string();
  ASSERT_TRUE(modelgen::write_random_model(spec, vocab, lpath).is_ok());
  auto lf = gguf::File::open(lpath);
  ASSERT_TRUE(lf) << lf.status().message();
  auto lm = Model::load(std::shared_ptr<const gguf::File>(std::move(*lf)), LoadOptions{1, {}});
  ASSERT_TRUE(lm) << lm.status().message();
  EXPECT_EQ((*lm)->hparams().n_swa, 32);
  EXPECT_EQ((*lm)->hparams().rope_freq_scale, 0.5f);
  EXPECT_FALSE((*lm)->hparams().rope_yarn());

  // phi3's LongRoPE: the factor pair (long chosen for the file's whole
  // context), the converter's attention factor, the original context.
  spec = {};
  spec.arch = "phi3";
  spec.dim = 64;
  spec.heads = 4;
  spec.kv_heads = 2;
  spec.ffn = 96;
  spec.ctx = 256;
  spec.rope_scaling = "longrope";
  spec.rope_scaling_factor = 8;
  spec.rope_orig_ctx = 32;
  const std::string ppath = (dir / "longrope.gguf").string();
  ASSERT_TRUE(modelgen::write_random_model(spec, vocab, ppath).is_ok());
  auto pf = gguf::File::open(ppath);
  ASSERT_TRUE(pf) << pf.status().message();
  ASSERT_NE((*pf)->find_tensor("rope_factors_short.weight"), nullptr);
  auto pm = Model::load(std::shared_ptr<const gguf::File>(std::move(*pf)), LoadOptions{1, {}});
  ASSERT_TRUE(pm) << pm.status().message();
  EXPECT_EQ((*pm)->hparams().n_ctx_orig_yarn, 32);
  EXPECT_EQ((*pm)->hparams().rope_freq_scale, 1.0f);
  EXPECT_NEAR((*pm)->hparams().yarn_attn_factor, std::sqrt(1 + std::log(8.0) / std::log(32.0)),
              1e-6);

  modelgen::RandomModelSpec bad;
  bad.rope_scaling = "longrope";
  bad.rope_scaling_factor = 4;
  EXPECT_EQ(modelgen::validate(bad).message(),
            "make-model: --rope-scaling longrope needs --arch phi3");
  bad.rope_scaling = "dynamic";
  EXPECT_EQ(modelgen::validate(bad).message(),
            "make-model: unknown --rope-scaling 'dynamic' (linear, yarn, longrope)");
  bad.rope_scaling = "yarn";
  bad.rope_scaling_factor = 0;
  EXPECT_EQ(modelgen::validate(bad).message(),
            "make-model: --rope-scaling needs a positive --rope-scaling-factor");
  bad = {};
  bad.rope_orig_ctx = 64;
  EXPECT_EQ(modelgen::validate(bad).message(),
            "make-model: --rope-scaling-factor and --rope-orig-ctx need --rope-scaling");
  bad.rope_scaling = "linear";
  bad.rope_scaling_factor = 2;
  EXPECT_EQ(modelgen::validate(bad).message(),
            "make-model: --rope-orig-ctx needs --rope-scaling yarn or longrope");
  bad = {};
  bad.arch = "qwen2";
  bad.sliding_window = 16;
  EXPECT_EQ(modelgen::validate(bad).message(),
            "make-model: --sliding-window needs --arch llama, gemma2, gemma3 or gpt-oss");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace cairn::model
