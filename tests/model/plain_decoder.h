// tests/model/plain_decoder.h — the synthetic models of the model tests and
// a plain double-precision forward written from the definitions: a shape
// (ArchSpec), its random weights, the GGUF file of them (the layouts and
// metadata the architectures take), loading it, running it, and comparing
// logits. Shared by arch_test.cpp, rope_scaling_test.cpp and (loading, running,
// comparing) gemma_test.cpp.
#pragma once

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

namespace cairn::model::plain {

// A model's shape and which of the optional tensors it has. Weights are
// always made in split form (attn_q/k/v, ffn_gate/up); the writer fuses them
// for phi3.
struct ArchSpec {
  std::string arch = "qwen3";
  int64_t embd = 64, layers = 2, heads = 4, kv_heads = 2, ff = 96, vocab = 48;
  int64_t head_dim = 16;     // written as key_length/value_length when != embd / heads
  bool qk_norm = false;      // attn_q_norm / attn_k_norm (qwen3)
  bool qkv_bias = false;     // attn_q/k/v.bias (qwen2)
  bool fuse_qkv = false;     // write attn_qkv instead of attn_q/k/v
  bool fuse_ffn = false;     // write ffn_up as [gate; up], no ffn_gate
  bool neox = true;          // the RoPE style the architecture implies
  bool prescale_q = false;   // phi3: for the reference, nothing changes in exact arithmetic
  std::vector<float> rope_freqs;  // written when not empty
  // Mixture of experts (experts > 0): router and 3-D expert tensors instead
  // of ffn_gate/up/down; a shared expert when ff_shexp > 0 (qwen2moe).
  int64_t experts = 0, experts_used = 0, ff_exp = 0, ff_shexp = 0;
  bool norm_topk = false;  // for the reference: qwen3moe renormalizes the chosen weights
  float eps = 1e-6f;
  float rope_base = 10000.0f;
  // YaRN (rope.scaling.type "yarn") when yarn_factor > 0, measured against
  // yarn_orig positions.
  double yarn_factor = 0;
  int64_t yarn_orig = 0;
  // attention.sliding_window: every layer sees its last `window` positions.
  int64_t window = 0;
  // For the reference only: cos and sin times this (rope.scaling.attn_factor).
  double attn_factor = 1.0;
  uint32_t seed = 11;
};

using Weights = std::map<std::string, std::vector<float>>;

inline std::string blk(int64_t l, const char* name) { return "blk." + std::to_string(l) + "." + name; }

inline Weights make_weights(const ArchSpec& s) {
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
  fill("token_embd.weight", s.embd * s.vocab, 1.0f, 0.0f);
  fill("output_norm.weight", s.embd, 0.2f, 1.0f);
  fill("output.weight", s.embd * s.vocab, ws, 0.0f);
  for (int64_t l = 0; l < s.layers; ++l) {
    fill(blk(l, "attn_norm.weight"), s.embd, 0.2f, 1.0f);
    fill(blk(l, "attn_q.weight"), s.embd * q, ws, 0.0f);
    fill(blk(l, "attn_k.weight"), s.embd * kv, ws, 0.0f);
    fill(blk(l, "attn_v.weight"), s.embd * kv, ws, 0.0f);
    fill(blk(l, "attn_output.weight"), q * s.embd, 1.0f / std::sqrt((float)q), 0.0f);
    if (s.qkv_bias) {
      fill(blk(l, "attn_q.bias"), q, 0.3f, 0.0f);
      fill(blk(l, "attn_k.bias"), kv, 0.3f, 0.0f);
      fill(blk(l, "attn_v.bias"), kv, 0.3f, 0.0f);
    }
    if (s.qk_norm) {
      fill(blk(l, "attn_q_norm.weight"), s.head_dim, 0.5f, 1.0f);
      fill(blk(l, "attn_k_norm.weight"), s.head_dim, 0.5f, 1.0f);
    }
    fill(blk(l, "ffn_norm.weight"), s.embd, 0.2f, 1.0f);
    fill(blk(l, "ffn_gate.weight"), s.embd * s.ff, ws, 0.0f);
    fill(blk(l, "ffn_up.weight"), s.embd * s.ff, ws, 0.0f);
    fill(blk(l, "ffn_down.weight"), s.ff * s.embd, 1.0f / std::sqrt((float)s.ff), 0.0f);
    if (s.experts > 0) {
      // A router wide enough that the choices are clear-cut.
      fill(blk(l, "ffn_gate_inp.weight"), s.embd * s.experts, 3.0f * ws, 0.0f);
      fill(blk(l, "ffn_gate_exps.weight"), s.embd * s.ff_exp * s.experts, ws, 0.0f);
      fill(blk(l, "ffn_up_exps.weight"), s.embd * s.ff_exp * s.experts, ws, 0.0f);
      fill(blk(l, "ffn_down_exps.weight"), s.ff_exp * s.embd * s.experts,
           1.0f / std::sqrt((float)s.ff_exp), 0.0f);
    }
    if (s.ff_shexp > 0) {
      fill(blk(l, "ffn_gate_inp_shexp.weight"), s.embd, ws, 0.0f);
      fill(blk(l, "ffn_gate_shexp.weight"), s.embd * s.ff_shexp, ws, 0.0f);
      fill(blk(l, "ffn_up_shexp.weight"), s.embd * s.ff_shexp, ws, 0.0f);
      fill(blk(l, "ffn_down_shexp.weight"), s.ff_shexp * s.embd,
           1.0f / std::sqrt((float)s.ff_shexp), 0.0f);
    }
  }
  if (!s.rope_freqs.empty()) w["rope_freqs.weight"] = s.rope_freqs;
  return w;
}

inline std::vector<uint8_t> f32_bytes(const std::vector<float>& v) {
  std::vector<uint8_t> b(v.size() * sizeof(float));
  std::copy_n(reinterpret_cast<const uint8_t*>(v.data()), b.size(), b.data());
  return b;
}

// The file of `w` in `s`'s layout, with `extra_meta` written after the
// shape keys, the tensors in `reshape` given other dims (values padded with
// 1s) and those in `omit` left out.
inline std::vector<uint8_t> write_model(const ArchSpec& s, const Weights& w,
                                 const std::function<void(gguf::Writer&)>& extra_meta = {},
                                 const std::map<std::string, std::vector<int64_t>>& reshape = {},
                                 const std::vector<std::string>& omit = {}) {
  gguf::Writer g;
  const std::string a = s.arch;
  g.set_string("general.architecture", a);
  g.set_uint32(a + ".embedding_length", (uint32_t)s.embd);
  g.set_uint32(a + ".block_count", (uint32_t)s.layers);
  g.set_uint32(a + ".attention.head_count", (uint32_t)s.heads);
  g.set_uint32(a + ".attention.head_count_kv", (uint32_t)s.kv_heads);
  if (s.ff > 0) g.set_uint32(a + ".feed_forward_length", (uint32_t)s.ff);
  g.set_uint32(a + ".context_length", 256);
  g.set_float32(a + ".attention.layer_norm_rms_epsilon", s.eps);
  g.set_float32(a + ".rope.freq_base", s.rope_base);
  if (s.head_dim * s.heads != s.embd) {
    g.set_uint32(a + ".attention.key_length", (uint32_t)s.head_dim);
    g.set_uint32(a + ".attention.value_length", (uint32_t)s.head_dim);
  }
  if (s.experts > 0) {
    g.set_uint32(a + ".expert_count", (uint32_t)s.experts);
    g.set_uint32(a + ".expert_used_count", (uint32_t)s.experts_used);
    g.set_uint32(a + ".expert_feed_forward_length", (uint32_t)s.ff_exp);
  }
  if (s.ff_shexp > 0) g.set_uint32(a + ".expert_shared_feed_forward_length", (uint32_t)s.ff_shexp);
  if (s.yarn_factor > 0) {
    g.set_string(a + ".rope.scaling.type", "yarn");
    g.set_float32(a + ".rope.scaling.factor", (float)s.yarn_factor);
    g.set_uint32(a + ".rope.scaling.original_context_length", (uint32_t)s.yarn_orig);
  }
  if (s.window > 0) g.set_uint32(a + ".attention.sliding_window", (uint32_t)s.window);
  if (extra_meta) extra_meta(g);
  const auto add = [&](const std::string& name, std::vector<float> v,
                       std::vector<int64_t> dims) {
    if (std::find(omit.begin(), omit.end(), name) != omit.end()) return;
    if (auto it = reshape.find(name); it != reshape.end()) {
      dims = it->second;
      int64_t n = 1;
      for (int64_t d : dims) n *= d;
      v.resize((size_t)n, 1.0f);
    }
    ASSERT_TRUE(g.add_tensor(name, TensorType::F32, dims, f32_bytes(v)).is_ok()) << name;
  };
  const int64_t q = s.heads * s.head_dim, kv = s.kv_heads * s.head_dim;
  const auto cat = [](std::vector<float> x, const std::vector<float>& y) {
    x.insert(x.end(), y.begin(), y.end());
    return x;
  };
  add("token_embd.weight", w.at("token_embd.weight"), {s.embd, s.vocab});
  if (w.count("rope_freqs.weight"))
    add("rope_freqs.weight", w.at("rope_freqs.weight"),
        {(int64_t)w.at("rope_freqs.weight").size()});
  for (int64_t l = 0; l < s.layers; ++l) {
    add(blk(l, "attn_norm.weight"), w.at(blk(l, "attn_norm.weight")), {s.embd});
    if (s.fuse_qkv) {
      add(blk(l, "attn_qkv.weight"),
          cat(cat(w.at(blk(l, "attn_q.weight")), w.at(blk(l, "attn_k.weight"))),
              w.at(blk(l, "attn_v.weight"))),
          {s.embd, q + 2 * kv});
    } else {
      add(blk(l, "attn_q.weight"), w.at(blk(l, "attn_q.weight")), {s.embd, q});
      add(blk(l, "attn_k.weight"), w.at(blk(l, "attn_k.weight")), {s.embd, kv});
      add(blk(l, "attn_v.weight"), w.at(blk(l, "attn_v.weight")), {s.embd, kv});
    }
    for (const char* b : {"attn_q.bias", "attn_k.bias", "attn_v.bias"})
      if (w.count(blk(l, b))) add(blk(l, b), w.at(blk(l, b)), {(int64_t)w.at(blk(l, b)).size()});
    for (const char* n : {"attn_q_norm.weight", "attn_k_norm.weight"})
      if (w.count(blk(l, n))) add(blk(l, n), w.at(blk(l, n)), {s.head_dim});
    add(blk(l, "attn_output.weight"), w.at(blk(l, "attn_output.weight")), {q, s.embd});
    add(blk(l, "ffn_norm.weight"), w.at(blk(l, "ffn_norm.weight")), {s.embd});
    if (s.experts > 0) {
      add(blk(l, "ffn_gate_inp.weight"), w.at(blk(l, "ffn_gate_inp.weight")), {s.embd, s.experts});
      add(blk(l, "ffn_gate_exps.weight"), w.at(blk(l, "ffn_gate_exps.weight")),
          {s.embd, s.ff_exp, s.experts});
      add(blk(l, "ffn_up_exps.weight"), w.at(blk(l, "ffn_up_exps.weight")),
          {s.embd, s.ff_exp, s.experts});
      add(blk(l, "ffn_down_exps.weight"), w.at(blk(l, "ffn_down_exps.weight")),
          {s.ff_exp, s.embd, s.experts});
      if (s.ff_shexp > 0) {
        add(blk(l, "ffn_gate_inp_shexp.weight"), w.at(blk(l, "ffn_gate_inp_shexp.weight")),
            {s.embd});
        add(blk(l, "ffn_gate_shexp.weight"), w.at(blk(l, "ffn_gate_shexp.weight")),
            {s.embd, s.ff_shexp});
        add(blk(l, "ffn_up_shexp.weight"), w.at(blk(l, "ffn_up_shexp.weight")),
            {s.embd, s.ff_shexp});
        add(blk(l, "ffn_down_shexp.weight"), w.at(blk(l, "ffn_down_shexp.weight")),
            {s.ff_shexp, s.embd});
      }
      continue;
    }
    if (s.fuse_ffn) {
      add(blk(l, "ffn_up.weight"),
          cat(w.at(blk(l, "ffn_gate.weight")), w.at(blk(l, "ffn_up.weight"))), {s.embd, 2 * s.ff});
    } else {
      add(blk(l, "ffn_gate.weight"), w.at(blk(l, "ffn_gate.weight")), {s.embd, s.ff});
      add(blk(l, "ffn_up.weight"), w.at(blk(l, "ffn_up.weight")), {s.embd, s.ff});
    }
    add(blk(l, "ffn_down.weight"), w.at(blk(l, "ffn_down.weight")), {s.ff, s.embd});
  }
  add("output_norm.weight", w.at("output_norm.weight"), {s.embd});
  add("output.weight", w.at("output.weight"), {s.embd, s.vocab});
  return g.to_bytes();
}

struct Loaded {
  std::shared_ptr<const gguf::File> file;
  std::unique_ptr<Model> model;
};

// n_ctx: LoadOptions::n_ctx, the context the model is loaded to serve.
inline Result<Loaded> load_bytes(std::vector<uint8_t> bytes, int64_t n_ctx = 0) {
  auto f = gguf::File::parse(std::move(bytes));
  if (!f) return f.status();
  Loaded l;
  l.file = std::shared_ptr<const gguf::File>(std::move(*f));
  auto m = Model::load(l.file, LoadOptions{2, {}, n_ctx});
  if (!m) return m.status();
  l.model = std::move(*m);
  return l;
}

inline std::string load_error(std::vector<uint8_t> bytes) {
  auto l = load_bytes(std::move(bytes));
  return l ? std::string("(loaded)") : l.status().message();
}

inline const std::vector<Token> kPrompt = {1, 5, 9, 17, 33, 2, 40, 11, 7, 3, 22, 47};

// Logits of every position (F32 K/V): the prompt in one batch, or one token
// per forward (the decode path).
inline std::vector<std::vector<float>> run(Model& m, const std::vector<Token>& prompt = kPrompt,
                                           bool one_by_one = false) {
  auto kv = kv::ContiguousKvCache::create(m.hparams().kv_shape(), 1, (int64_t)prompt.size() + 1,
                                          TensorType::F32);
  EXPECT_TRUE(kv) << kv.status().message();
  std::vector<std::vector<float>> rows;
  const size_t step = one_by_one ? 1 : prompt.size();
  for (size_t start = 0; start < prompt.size(); start += step) {
    Batch b;
    for (size_t i = start; i < start + step; ++i) b.add(prompt[i], (int32_t)i, 0, true);
    Logits lg;
    Status st = m.forward(b, **kv, lg);
    EXPECT_TRUE(st.is_ok()) << st.message();
    for (size_t r = 0; r < lg.rows(); ++r) rows.emplace_back(lg.row(r).begin(), lg.row(r).end());
  }
  return rows;
}

// ---- the plain reference --------------------------------------------------------

using Vec = std::vector<double>;

inline Vec matvec(const std::vector<float>& w, int64_t cols, const Vec& x) {
  const int64_t rows = (int64_t)w.size() / cols;
  Vec y((size_t)rows, 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      y[(size_t)r] += (double)w[(size_t)(r * cols + c)] * x[(size_t)c];
  return y;
}

inline void rmsnorm(double* x, int64_t n, const std::vector<float>& w, double eps) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const double s = 1.0 / std::sqrt(ss / (double)n + eps);
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] * s * w[(size_t)i];
}

// YaRN from its definition (the paper's and Hugging Face's form): each
// pair's angle blends pos * freq (extrapolation) and pos * freq / factor
// (interpolation) by a ramp over the pairs from the one turning beta_fast = 32
// times over the original context (floor) to the one turning beta_slow = 1
// times (ceil); cos and sin are scaled by 0.1 ln(factor) + 1.
inline double yarn_theta(const ArchSpec& s, int64_t hd, int64_t i, double extrap) {
  const auto corr = [&](double beta) {
    return (double)hd * std::log((double)s.yarn_orig / (beta * 2 * M_PI)) /
           (2 * std::log((double)s.rope_base));
  };
  const double low = std::max(0.0, std::floor(corr(32))), high = std::min(hd - 1.0, std::ceil(corr(1)));
  const double ramp = std::clamp(((double)i - low) / std::max(0.001, high - low), 0.0, 1.0);
  const double extrap_weight = 1 - ramp;  // 1 for the fast pairs, 0 for the slow ones
  return extrap / s.yarn_factor * (1 - extrap_weight) + extrap * extrap_weight;
}

inline void rope(Vec& x, int64_t heads, int64_t hd, int pos, const ArchSpec& s) {
  const double mscale =
      (s.yarn_factor > 1 ? 0.1 * std::log(s.yarn_factor) + 1 : 1.0) * s.attn_factor;
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t i = 0; i < hd / 2; ++i) {
      double theta = pos * std::pow((double)s.rope_base, -2.0 * (double)i / (double)hd);
      if (!s.rope_freqs.empty()) theta /= s.rope_freqs[(size_t)i];
      if (s.yarn_factor > 0) theta = yarn_theta(s, hd, i, theta);
      const size_t a = (size_t)(h * hd + (s.neox ? i : 2 * i));
      const size_t b = (size_t)(h * hd + (s.neox ? i + hd / 2 : 2 * i + 1));
      const double x0 = x[a], x1 = x[b];
      x[a] = (x0 * std::cos(theta) - x1 * std::sin(theta)) * mscale;
      x[b] = (x0 * std::sin(theta) + x1 * std::cos(theta)) * mscale;
    }
}

// down(silu(gate x) * up x) with gate/up [ff rows of E], down [E rows of ff].
inline Vec swiglu(const float* gate, const float* up, const float* down, int64_t E, int64_t ff,
           const Vec& x) {
  Vec h((size_t)ff), y((size_t)E, 0.0);
  for (int64_t f = 0; f < ff; ++f) {
    double g = 0, u = 0;
    for (int64_t c = 0; c < E; ++c) {
      g += (double)gate[f * E + c] * x[(size_t)c];
      u += (double)up[f * E + c] * x[(size_t)c];
    }
    h[(size_t)f] = g / (1.0 + std::exp(-g)) * u;
  }
  for (int64_t r = 0; r < E; ++r)
    for (int64_t f = 0; f < ff; ++f) y[(size_t)r] += (double)down[r * ff + f] * h[(size_t)f];
  return y;
}

// The mixture of experts from its definition: softmax over the router's
// logits, the experts_used largest, their weights renormalized or not, the
// sum of their FFNs so weighted, plus the shared expert times sigmoid(gate).
inline Vec moe_ffn(const ArchSpec& s, const Weights& w, int64_t l, const Vec& x) {
  const int64_t E = s.embd, F = s.ff_exp;
  Vec p = matvec(w.at(blk(l, "ffn_gate_inp.weight")), E, x);
  const double mx = *std::max_element(p.begin(), p.end());
  double z = 0;
  for (double& v : p) z += (v = std::exp(v - mx));
  for (double& v : p) v /= z;
  std::vector<int> order((size_t)s.experts);
  for (int e = 0; e < (int)s.experts; ++e) order[(size_t)e] = e;
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return p[(size_t)a] > p[(size_t)b]; });
  double sum = 0;
  for (int64_t k = 0; k < s.experts_used; ++k) sum += p[(size_t)order[(size_t)k]];
  Vec y((size_t)E, 0.0);
  for (int64_t k = 0; k < s.experts_used; ++k) {
    const int e = order[(size_t)k];
    const double wt = s.norm_topk ? p[(size_t)e] / sum : p[(size_t)e];
    const Vec o = swiglu(w.at(blk(l, "ffn_gate_exps.weight")).data() + e * F * E,
                         w.at(blk(l, "ffn_up_exps.weight")).data() + e * F * E,
                         w.at(blk(l, "ffn_down_exps.weight")).data() + e * E * F, E, F, x);
    for (int64_t i = 0; i < E; ++i) y[(size_t)i] += wt * o[(size_t)i];
  }
  if (s.ff_shexp > 0) {
    const Vec gl = matvec(w.at(blk(l, "ffn_gate_inp_shexp.weight")), E, x);
    const double gate = 1.0 / (1.0 + std::exp(-gl[0]));
    const Vec o = swiglu(w.at(blk(l, "ffn_gate_shexp.weight")).data(),
                         w.at(blk(l, "ffn_up_shexp.weight")).data(),
                         w.at(blk(l, "ffn_down_shexp.weight")).data(), E, s.ff_shexp, x);
    for (int64_t i = 0; i < E; ++i) y[(size_t)i] += gate * o[(size_t)i];
  }
  return y;
}

inline std::vector<Vec> reference(const ArchSpec& s, const Weights& w,
                                  const std::vector<Token>& prompt = kPrompt) {
  const int64_t E = s.embd, hd = s.head_dim, T = (int64_t)prompt.size();
  const int64_t nq = s.heads * hd;
  std::vector<Vec> x((size_t)T);
  const auto& emb = w.at("token_embd.weight");
  for (int64_t t = 0; t < T; ++t)
    x[(size_t)t].assign(emb.begin() + prompt[(size_t)t] * E,
                        emb.begin() + (prompt[(size_t)t] + 1) * E);
  for (int64_t l = 0; l < s.layers; ++l) {
    std::vector<Vec> q((size_t)T), k((size_t)T), v((size_t)T);
    for (int64_t t = 0; t < T; ++t) {
      Vec xn = x[(size_t)t];
      rmsnorm(xn.data(), E, w.at(blk(l, "attn_norm.weight")), s.eps);
      q[t] = matvec(w.at(blk(l, "attn_q.weight")), E, xn);
      k[t] = matvec(w.at(blk(l, "attn_k.weight")), E, xn);
      v[t] = matvec(w.at(blk(l, "attn_v.weight")), E, xn);
      if (s.qkv_bias) {
        for (size_t i = 0; i < q[t].size(); ++i) q[t][i] += w.at(blk(l, "attn_q.bias"))[i];
        for (size_t i = 0; i < k[t].size(); ++i) k[t][i] += w.at(blk(l, "attn_k.bias"))[i];
        for (size_t i = 0; i < v[t].size(); ++i) v[t][i] += w.at(blk(l, "attn_v.bias"))[i];
      }
      if (s.qk_norm) {
        for (int64_t h = 0; h < s.heads; ++h)
          rmsnorm(q[t].data() + h * hd, hd, w.at(blk(l, "attn_q_norm.weight")), s.eps);
        for (int64_t h = 0; h < s.kv_heads; ++h)
          rmsnorm(k[t].data() + h * hd, hd, w.at(blk(l, "attn_k_norm.weight")), s.eps);
      }
      rope(q[t], s.heads, hd, (int)t, s);
      rope(k[t], s.kv_heads, hd, (int)t, s);
    }
    for (int64_t t = 0; t < T; ++t) {
      Vec attn((size_t)nq, 0.0);
      for (int64_t h = 0; h < s.heads; ++h) {
        const int64_t kvh = h * s.kv_heads / s.heads;
        // A sliding window: the last `window` positions, this one included.
        const int64_t j0 = s.window > 0 ? std::max<int64_t>(0, t - s.window + 1) : 0;
        Vec sc((size_t)t + 1, 0.0);
        double mx = -1e300;
        for (int64_t j = j0; j <= t; ++j) {
          double d = 0;
          for (int64_t i = 0; i < hd; ++i)
            d += q[t][(size_t)(h * hd + i)] * k[j][(size_t)(kvh * hd + i)];
          sc[(size_t)j] = d / std::sqrt((double)hd);
          mx = std::max(mx, sc[(size_t)j]);
        }
        double sum = 0;
        for (int64_t j = j0; j <= t; ++j) sum += (sc[(size_t)j] = std::exp(sc[(size_t)j] - mx));
        for (int64_t j = j0; j <= t; ++j)
          for (int64_t i = 0; i < hd; ++i)
            attn[(size_t)(h * hd + i)] += sc[(size_t)j] / sum * v[j][(size_t)(kvh * hd + i)];
      }
      const Vec o = matvec(w.at(blk(l, "attn_output.weight")), nq, attn);
      for (int64_t i = 0; i < E; ++i) x[(size_t)t][(size_t)i] += o[(size_t)i];
      Vec xn = x[(size_t)t];
      rmsnorm(xn.data(), E, w.at(blk(l, "ffn_norm.weight")), s.eps);
      const Vec d = s.experts > 0 ? moe_ffn(s, w, l, xn)
                                  : swiglu(w.at(blk(l, "ffn_gate.weight")).data(),
                                           w.at(blk(l, "ffn_up.weight")).data(),
                                           w.at(blk(l, "ffn_down.weight")).data(), E, s.ff, xn);
      for (int64_t i = 0; i < E; ++i) x[(size_t)t][(size_t)i] += d[(size_t)i];
    }
  }
  std::vector<Vec> logits;
  for (int64_t t = 0; t < T; ++t) {
    Vec xn = x[(size_t)t];
    rmsnorm(xn.data(), E, w.at("output_norm.weight"), s.eps);
    logits.push_back(matvec(w.at("output.weight"), E, xn));
  }
  return logits;
}

// max |got - want| relative to the largest logit (> 0.1, so not trivially 0).
inline double rel_diff(const std::vector<std::vector<float>>& got, const std::vector<Vec>& want) {
  EXPECT_EQ(got.size(), want.size());
  double diff = 0, mx = 0;
  for (size_t t = 0; t < std::min(got.size(), want.size()); ++t)
    for (size_t i = 0; i < want[t].size(); ++i) {
      diff = std::max(diff, std::fabs(got[t][i] - want[t][i]));
      mx = std::max(mx, std::fabs(want[t][i]));
    }
  EXPECT_GT(mx, 0.1);
  return diff / std::max(1.0, mx);
}

inline double max_abs_diff(const std::vector<std::vector<float>>& a,
                    const std::vector<std::vector<float>>& b) {
  double d = 0;
  for (size_t t = 0; t < a.size(); ++t)
    for (size_t i = 0; i < a[t].size(); ++i) d = std::max(d, (double)std::fabs(a[t][i] - b[t][i]));
  return d;
}

}  // namespace cairn::model::plain
