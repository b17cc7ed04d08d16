// The gemma architectures (gemma2, gemma3) on models the test writes itself: against a plain
// double-precision forward written from the definitions (embedding scale,
// post-norms, GeGLU, soft-capped scores and logits, sliding-window layers),
// what each of those changes, and the errors of malformed files.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "kv/contiguous_kv.h"
#include "model/model.h"
#include "plain_decoder.h"

namespace cairn::model {
namespace {

// Loading, running and comparing (plain_decoder.h); the gemma models and
// their plain forward are this file's.
using plain::blk;
using plain::f32_bytes;
using plain::kPrompt;
using plain::load_bytes;
using plain::load_error;
using plain::matvec;
using plain::rel_diff;
using plain::rmsnorm;
using plain::run;
using plain::Vec;
using plain::Weights;

struct GemmaSpec {
  std::string arch = "gemma2";
  int64_t embd = 64, layers = 2, heads = 4, kv_heads = 2, head_dim = 24, ff = 96, vocab = 48;
  int64_t window = 4;       // attention.sliding_window
  int64_t period = 2;       // sliding layers: il % period < period - 1
  float attn_cap = 3.0f;    // 0: none
  float final_cap = 4.0f;   // 0: none
  float rope_base = 10000.0f;
  float rope_base_swa = 0.0f;  // the sliding layers' base; 0: rope_base (gemma2's default)
  bool qk_norm = false;        // attn_q_norm / attn_k_norm (gemma3)
  bool write_swa_base = false;  // rope.freq_base_swa in the file (else the default applies)
  float eps = 1e-6f;
  uint32_t seed = 5;
};

Weights make_weights(const GemmaSpec& s) {
  std::mt19937 rng(s.seed);
  Weights w;
  const auto fill = [&](const std::string& name, int64_t n, float scale, float bias) {
    std::uniform_real_distribution<float> u(-scale, scale);
    std::vector<float> v((size_t)n);
    for (float& x : v) x = bias + u(rng);
    w[name] = std::move(v);
  };
  const int64_t q = s.heads * s.head_dim, kv = s.kv_heads * s.head_dim;
  const float ws = 2.0f / std::sqrt((float)s.embd);
  fill("token_embd.weight", s.embd * s.vocab, 0.3f, 0.0f);
  fill("output_norm.weight", s.embd, 0.2f, 1.0f);
  for (int64_t l = 0; l < s.layers; ++l) {
    fill(blk(l, "attn_norm.weight"), s.embd, 0.2f, 1.0f);
    fill(blk(l, "attn_q.weight"), s.embd * q, 2 * ws, 0.0f);
    fill(blk(l, "attn_k.weight"), s.embd * kv, 2 * ws, 0.0f);
    fill(blk(l, "attn_v.weight"), s.embd * kv, ws, 0.0f);
    fill(blk(l, "attn_output.weight"), q * s.embd, 1.0f / std::sqrt((float)q), 0.0f);
    fill(blk(l, "post_attention_norm.weight"), s.embd, 0.2f, 1.0f);
    if (s.qk_norm) {
      fill(blk(l, "attn_q_norm.weight"), s.head_dim, 0.5f, 1.0f);
      fill(blk(l, "attn_k_norm.weight"), s.head_dim, 0.5f, 1.0f);
    }
    fill(blk(l, "ffn_norm.weight"), s.embd, 0.2f, 1.0f);
    fill(blk(l, "ffn_gate.weight"), s.embd * s.ff, ws, 0.0f);
    fill(blk(l, "ffn_up.weight"), s.embd * s.ff, ws, 0.0f);
    fill(blk(l, "ffn_down.weight"), s.ff * s.embd, 1.0f / std::sqrt((float)s.ff), 0.0f);
    fill(blk(l, "post_ffw_norm.weight"), s.embd, 0.2f, 1.0f);
  }
  return w;
}

std::vector<int64_t> dims_of(const GemmaSpec& s, const std::string& name, size_t n) {
  if (name.find("norm") != std::string::npos) return {(int64_t)n};
  const int64_t q = s.heads * s.head_dim, kv = s.kv_heads * s.head_dim;
  if (name == "token_embd.weight" || name == "output.weight" ||
      name == "dense_2.weight") return {s.embd, s.vocab};
  if (name.ends_with("attn_q.weight")) return {s.embd, q};
  if (name.ends_with("attn_k.weight") || name.ends_with("attn_v.weight")) return {s.embd, kv};
  if (name.ends_with("attn_output.weight")) return {q, s.embd};
  if (name.ends_with("ffn_down.weight")) return {s.ff, s.embd};
  return {s.embd, s.ff};
}

// The file of `w`; `meta` may add or override keys, `omit` leaves tensors out.
std::vector<uint8_t> write_model(const GemmaSpec& s, const Weights& w,
                                 const std::function<void(gguf::Writer&)>& meta = {},
                                 const std::vector<std::string>& omit = {}) {
  gguf::Writer g;
  const std::string a = s.arch;
  g.set_string("general.architecture", a);
  g.set_uint32(a + ".embedding_length", (uint32_t)s.embd);
  g.set_uint32(a + ".block_count", (uint32_t)s.layers);
  g.set_uint32(a + ".attention.head_count", (uint32_t)s.heads);
  g.set_uint32(a + ".attention.head_count_kv", (uint32_t)s.kv_heads);
  g.set_uint32(a + ".attention.key_length", (uint32_t)s.head_dim);
  g.set_uint32(a + ".attention.value_length", (uint32_t)s.head_dim);
  g.set_uint32(a + ".feed_forward_length", (uint32_t)s.ff);
  g.set_uint32(a + ".context_length", 256);
  g.set_float32(a + ".attention.layer_norm_rms_epsilon", s.eps);
  g.set_float32(a + ".rope.freq_base", s.rope_base);
  if (s.window > 0) g.set_uint32(a + ".attention.sliding_window", (uint32_t)s.window);
  g.set_uint32(a + ".attention.sliding_window_pattern", (uint32_t)s.period);
  if (s.attn_cap > 0) g.set_float32(a + ".attn_logit_softcapping", s.attn_cap);
  if (s.final_cap > 0) g.set_float32(a + ".final_logit_softcapping", s.final_cap);
  if (s.write_swa_base) g.set_float32(a + ".rope.freq_base_swa", s.rope_base_swa);
  if (meta) meta(g);
  for (const auto& [name, v] : w) {
    if (std::find(omit.begin(), omit.end(), name) != omit.end()) continue;
    EXPECT_TRUE(g.add_tensor(name, TensorType::F32, dims_of(s, name, v.size()), f32_bytes(v)).is_ok())
        << name;
  }
  return g.to_bytes();
}

// ---- the plain reference --------------------------------------------------------

void rope_neox(Vec& x, int64_t heads, int64_t hd, int pos, double base) {
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < hd / 2; ++i) {
      const double theta = pos * std::pow(base, -2.0 * (double)i / (double)hd);
      const size_t a = (size_t)(h * hd + i), b = (size_t)(h * hd + i + hd / 2);
      const double x0 = x[a], x1 = x[b];
      x[a] = x0 * std::cos(theta) - x1 * std::sin(theta);
      x[b] = x0 * std::sin(theta) + x1 * std::cos(theta);
    }
}

double softcap(double x, double cap) { return cap > 0 ? cap * std::tanh(x / cap) : x; }

double gelu_tanh(double x) {
  return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
}

bool sliding(const GemmaSpec& s, int64_t l) {
  return s.window > 0 && (s.period == 0 || l % s.period < s.period - 1);
}

std::vector<Vec> reference(const GemmaSpec& s, const Weights& w) {
  const int64_t E = s.embd, hd = s.head_dim, T = (int64_t)kPrompt.size();
  const int64_t nq = s.heads * hd;
  std::vector<Vec> x((size_t)T);
  const auto& emb = w.at("token_embd.weight");
  for (int64_t t = 0; t < T; ++t) {
    x[(size_t)t].assign(emb.begin() + kPrompt[(size_t)t] * E,
                        emb.begin() + (kPrompt[(size_t)t] + 1) * E);
    for (double& v : x[(size_t)t]) v *= std::sqrt((double)E);
  }
  for (int64_t l = 0; l < s.layers; ++l) {
    std::vector<Vec> q((size_t)T), k((size_t)T), v((size_t)T);
    for (int64_t t = 0; t < T; ++t) {
      Vec xn = x[(size_t)t];
      rmsnorm(xn.data(), E, w.at(blk(l, "attn_norm.weight")), s.eps);
      q[t] = matvec(w.at(blk(l, "attn_q.weight")), E, xn);
      k[t] = matvec(w.at(blk(l, "attn_k.weight")), E, xn);
      v[t] = matvec(w.at(blk(l, "attn_v.weight")), E, xn);
      if (s.qk_norm) {
        for (int64_t h = 0; h < s.heads; ++h)
          rmsnorm(q[t].data() + h * hd, hd, w.at(blk(l, "attn_q_norm.weight")), s.eps);
        for (int64_t h = 0; h < s.kv_heads; ++h)
          rmsnorm(k[t].data() + h * hd, hd, w.at(blk(l, "attn_k_norm.weight")), s.eps);
      }
      const double base =
          sliding(s, l) && s.rope_base_swa > 0 ? s.rope_base_swa : (double)s.rope_base;
      rope_neox(q[t], s.heads, hd, (int)t, base);
      rope_neox(k[t], s.kv_heads, hd, (int)t, base);
    }
    const int64_t first_back = sliding(s, l) ? s.window : T + 1;
    for (int64_t t = 0; t < T; ++t) {
      Vec attn((size_t)nq, 0.0);
      for (int64_t h = 0; h < s.heads; ++h) {
        const int64_t kvh = h * s.kv_heads / s.heads;
        const int64_t j0 = std::max<int64_t>(0, t - first_back + 1);
        Vec sc((size_t)(t + 1 - j0));
        double mx = -1e300;
        for (int64_t j = j0; j <= t; ++j) {
          double d = 0;
          for (int64_t i = 0; i < hd; ++i)
            d += q[t][(size_t)(h * hd + i)] * k[j][(size_t)(kvh * hd + i)];
          sc[(size_t)(j - j0)] = softcap(d / std::sqrt((double)hd), s.attn_cap);
          mx = std::max(mx, sc[(size_t)(j - j0)]);
        }
        double sum = 0;
        for (double& e : sc) sum += (e = std::exp(e - mx));
        for (int64_t j = j0; j <= t; ++j)
          for (int64_t i = 0; i < hd; ++i)
            attn[(size_t)(h * hd + i)] += sc[(size_t)(j - j0)] / sum * v[j][(size_t)(kvh * hd + i)];
      }
      Vec o = matvec(w.at(blk(l, "attn_output.weight")), nq, attn);
      rmsnorm(o.data(), E, w.at(blk(l, "post_attention_norm.weight")), s.eps);
      for (int64_t i = 0; i < E; ++i) x[(size_t)t][(size_t)i] += o[(size_t)i];
      Vec xn = x[(size_t)t];
      rmsnorm(xn.data(), E, w.at(blk(l, "ffn_norm.weight")), s.eps);
      const Vec g = matvec(w.at(blk(l, "ffn_gate.weight")), E, xn);
      const Vec u = matvec(w.at(blk(l, "ffn_up.weight")), E, xn);
      Vec hmid((size_t)s.ff);
      for (int64_t f = 0; f < s.ff; ++f) hmid[(size_t)f] = gelu_tanh(g[(size_t)f]) * u[(size_t)f];
      Vec d = matvec(w.at(blk(l, "ffn_down.weight")), s.ff, hmid);
      rmsnorm(d.data(), E, w.at(blk(l, "post_ffw_norm.weight")), s.eps);
      for (int64_t i = 0; i < E; ++i) x[(size_t)t][(size_t)i] += d[(size_t)i];
    }
  }
  std::vector<Vec> logits;
  for (int64_t t = 0; t < T; ++t) {
    Vec xn = x[(size_t)t];
    rmsnorm(xn.data(), E, w.at("output_norm.weight"), s.eps);
    Vec lg = matvec(w.at("token_embd.weight"), E, xn);  // tied
    for (double& z : lg) z = softcap(z, s.final_cap);
    logits.push_back(std::move(lg));
  }
  return logits;
}

// The GELU of the model is the reference's F16 table (about 1e-3 relative),
// so the tolerance is wider than the other architectures'; every feature
// checked below moves the logits by far more.
constexpr double kTol = 3e-3;

TEST(Gemma2, MatchesPlainReference) {
  const GemmaSpec s;
  const Weights w = make_weights(s);
  auto l = load_bytes(write_model(s, w));
  ASSERT_TRUE(l) << l.status().message();
  const HParams& hp = l->model->hparams();
  EXPECT_EQ(hp.n_swa, 4);
  EXPECT_EQ(hp.swa_layers, (std::vector<uint8_t>{1, 0}));
  EXPECT_TRUE(hp.tied_output);
  EXPECT_EQ(hp.rope_style, kernels::RopeStyle::Neox);
  EXPECT_FLOAT_EQ(hp.attn_scale, 1.0f / std::sqrt(24.0f));
  const auto got = run(*l->model);
  EXPECT_LT(rel_diff(got, reference(s, w)), kTol);
  // One token per forward (the decode path) slides its window the same way.
  EXPECT_LT(rel_diff(run(*l->model, kPrompt, /*one_by_one=*/true), reference(s, w)), kTol);
  // Each feature matters: without soft-capping, without the window, another model.
  GemmaSpec no_attn_cap = s, no_final_cap = s, no_window = s;
  no_attn_cap.attn_cap = 0;
  no_final_cap.final_cap = 0;
  no_window.window = 0;
  EXPECT_GT(rel_diff(got, reference(no_attn_cap, w)), 10 * kTol);
  EXPECT_GT(rel_diff(got, reference(no_final_cap, w)), 10 * kTol);
  EXPECT_GT(rel_diff(got, reference(no_window, w)), 10 * kTol);
  // Every layer sliding (pattern 0) and a window wider than the prompt.
  GemmaSpec all = s;
  all.period = 0;
  auto la = load_bytes(write_model(all, w));
  ASSERT_TRUE(la) << la.status().message();
  EXPECT_LT(rel_diff(run(*la->model), reference(all, w)), kTol);
  GemmaSpec wide = s;
  wide.window = 64;
  GemmaSpec dense = s;
  dense.period = 1;  // no sliding layer at all
  auto lw = load_bytes(write_model(wide, w));
  auto ld = load_bytes(write_model(dense, w));
  ASSERT_TRUE(lw && ld);
  EXPECT_EQ(run(*lw->model), run(*ld->model));  // bit for bit
}

TEST(Gemma2, MalformedFilesAreRefusedByName) {
  const GemmaSpec s;
  const Weights w = make_weights(s);
  EXPECT_EQ(load_error(write_model(s, w, {}, {"blk.1.post_ffw_norm.weight"})),
            "tensor 'blk.1.post_ffw_norm.weight' is missing");
  EXPECT_EQ(load_error(write_model(s, w, {}, {"blk.0.post_attention_norm.weight"})),
            "tensor 'blk.0.post_attention_norm.weight' is missing");
  Weights untied = w;
  untied["output.weight"] = w.at("token_embd.weight");
  EXPECT_EQ(load_error(write_model(s, untied)),
            "tensor 'output.weight' is not part of a gemma2 model");
  Weights short_norm = w;
  short_norm[blk(0, "post_ffw_norm.weight")].resize(32);
  EXPECT_EQ(load_error(write_model(s, short_norm)),
            "tensor 'blk.0.post_ffw_norm.weight' has shape [32], expected [64]");
  const auto zero_window = [](gguf::Writer& g) {
    g.set_uint32("gemma2.attention.sliding_window", 0);
  };
  EXPECT_EQ(load_error(write_model(s, w, zero_window)),
            "metadata 'gemma2.attention.sliding_window' must be positive, got 0");
  const auto zero_cap = [](gguf::Writer& g) {
    g.set_float32("gemma2.attn_logit_softcapping", 0.0f);
  };
  EXPECT_EQ(load_error(write_model(s, w, zero_cap)),
            "metadata 'gemma2.attn_logit_softcapping' must be positive");
  const auto nan_cap = [](gguf::Writer& g) {
    g.set_float32("gemma2.final_logit_softcapping", std::nanf(""));
  };
  EXPECT_EQ(load_error(write_model(s, w, nan_cap)),
            "metadata 'gemma2.final_logit_softcapping' is not finite");
  const auto text_pattern = [](gguf::Writer& g) {
    g.set_string("gemma2.attention.sliding_window_pattern", "2");
  };
  EXPECT_NE(load_error(write_model(s, w, text_pattern)).find("sliding_window_pattern"),
            std::string::npos);
}

GemmaSpec gemma3_spec() {
  GemmaSpec s;
  s.arch = "gemma3";
  s.layers = 3;
  s.period = 3;  // two sliding layers, then a global one
  s.qk_norm = true;
  s.attn_cap = 0;
  s.rope_base = 1e6f;
  s.rope_base_swa = 10000.0f;  // the default: not written
  return s;
}

TEST(Gemma3, MatchesPlainReference) {
  const GemmaSpec s = gemma3_spec();
  const Weights w = make_weights(s);
  auto l = load_bytes(write_model(s, w));
  ASSERT_TRUE(l) << l.status().message();
  const HParams& hp = l->model->hparams();
  EXPECT_EQ(hp.swa_layers, (std::vector<uint8_t>{1, 1, 0}));
  EXPECT_FLOAT_EQ(hp.rope_freq_base_swa, 10000.0f);
  EXPECT_FLOAT_EQ(hp.rope_freq_base, 1e6f);
  EXPECT_EQ(hp.attn_softcap, 0.0f);
  const auto got = run(*l->model);
  EXPECT_LT(rel_diff(got, reference(s, w)), kTol);
  EXPECT_LT(rel_diff(run(*l->model, kPrompt, /*one_by_one=*/true), reference(s, w)), kTol);
  // The head norms, the sliding layers' own RoPE base, the window and the
  // logit cap each matter.
  GemmaSpec no_norm = s, one_base = s, no_window = s, no_cap = s;
  no_norm.qk_norm = false;
  one_base.rope_base_swa = 0;
  no_window.window = 0;
  no_cap.final_cap = 0;
  EXPECT_GT(rel_diff(got, reference(no_norm, w)), 10 * kTol);
  EXPECT_GT(rel_diff(got, reference(one_base, w)), 10 * kTol);
  EXPECT_GT(rel_diff(got, reference(no_window, w)), 10 * kTol);
  EXPECT_GT(rel_diff(got, reference(no_cap, w)), 10 * kTol);
  // rope.freq_base_swa where the file has it; no sliding_window key: all global.
  GemmaSpec base = s;
  base.rope_base_swa = 500.0f;
  base.write_swa_base = true;
  auto lb = load_bytes(write_model(base, w));
  ASSERT_TRUE(lb) << lb.status().message();
  EXPECT_LT(rel_diff(run(*lb->model), reference(base, w)), kTol);
  auto lg = load_bytes(write_model(no_window, w));
  ASSERT_TRUE(lg) << lg.status().message();
  EXPECT_TRUE(lg->model->hparams().swa_layers.empty());
  EXPECT_LT(rel_diff(run(*lg->model), reference(no_window, w)), kTol);
  // An untied output head is allowed.
  Weights untied = w;
  untied["output.weight"] = w.at("token_embd.weight");
  auto lu = load_bytes(write_model(s, untied));
  ASSERT_TRUE(lu) << lu.status().message();
  EXPECT_FALSE(lu->model->hparams().tied_output);
  EXPECT_EQ(run(*lu->model), got);
}

TEST(Gemma3, MalformedFilesAreRefusedByName) {
  const GemmaSpec s = gemma3_spec();
  const Weights w = make_weights(s);
  EXPECT_EQ(load_error(write_model(s, w, {}, {"blk.2.attn_k_norm.weight"})),
            "tensor 'blk.2.attn_k_norm.weight' is missing");
  EXPECT_EQ(load_error(write_model(s, w, {}, {"blk.0.post_attention_norm.weight"})),
            "tensor 'blk.0.post_attention_norm.weight' is missing");
  Weights dense = w;
  dense["dense_2.weight"] = w.at("token_embd.weight");
  EXPECT_EQ(load_error(write_model(s, dense)),
            "tensor 'dense_2.weight': EmbeddingGemma's dense projections are not supported");
  const auto neg_cap = [](gguf::Writer& g) {
    g.set_float32("gemma3.final_logit_softcapping", -2.0f);
  };
  EXPECT_EQ(load_error(write_model(s, w, neg_cap)),
            "metadata 'gemma3.final_logit_softcapping' must be positive");
  const auto bad_base = [](gguf::Writer& g) { g.set_float32("gemma3.rope.freq_base_swa", 0.0f); };
  EXPECT_EQ(load_error(write_model(s, w, bad_base)),
            "metadata 'gemma3.rope.freq_base_swa' must be positive");
}

}  // namespace
}  // namespace cairn::model
