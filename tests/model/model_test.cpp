// Model tests on models the tests write themselves: a plain double-precision
// reference forward, ragged-batch equivalence, determinism, and clear errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/half.h"
#include "kv/contiguous_kv.h"
#include "model/model.h"
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

std::string load_error(const SynthSpec& spec) {
  auto f = test::synth_file(spec);
  if (!f) return "gguf: " + f.status().message();
  auto m = Model::load(std::shared_ptr<const gguf::File>(std::move(*f)));
  return m ? std::string("(loaded)") : m.status().message();
}

// ---- a plain reference forward, written from the definitions ------------------

using Vec = std::vector<double>;

Vec matvec(const std::vector<float>& w, int64_t cols, const Vec& x) {  // w: rows x cols
  const int64_t rows = (int64_t)w.size() / cols;
  Vec y((size_t)rows, 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) y[(size_t)r] += (double)w[(size_t)(r * cols + c)] * x[(size_t)c];
  return y;
}

Vec rmsnorm(const Vec& x, const std::vector<float>& w) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double s = 1.0 / std::sqrt(ss / (double)x.size() + 1e-5);
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * s * w[i];
  return y;
}

void rope_ref(Vec& x, int64_t n_heads, int64_t hd, int pos, double base, bool neox) {
  for (int64_t h = 0; h < n_heads; ++h)
    for (int64_t i = 0; i < hd / 2; ++i) {
      const double theta = pos * std::pow(base, -2.0 * (double)i / (double)hd);
      const size_t a = (size_t)(h * hd + (neox ? i : 2 * i));
      const size_t b = (size_t)(h * hd + (neox ? i + hd / 2 : 2 * i + 1));
      const double x0 = x[a], x1 = x[b];
      x[a] = x0 * std::cos(theta) - x1 * std::sin(theta);
      x[b] = x0 * std::sin(theta) + x1 * std::cos(theta);
    }
}

// Logits of every position of one sequence.
std::vector<Vec> reference_forward(const SynthSpec& s, SynthWeights& w, const std::vector<Token>& toks) {
  const int64_t E = s.n_embd, hd = E / s.n_head, T = (int64_t)toks.size();
  const bool neox = s.arch == "qwen2";
  std::vector<Vec> x((size_t)T);
  for (int64_t t = 0; t < T; ++t) {
    const auto& emb = w.t["token_embd.weight"];
    x[(size_t)t].assign(emb.begin() + toks[(size_t)t] * E, emb.begin() + (toks[(size_t)t] + 1) * E);
  }
  for (int64_t il = 0; il < s.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    std::vector<Vec> q(T), k(T), v(T);
    for (int64_t t = 0; t < T; ++t) {
      const Vec xn = rmsnorm(x[(size_t)t], w.t[p + "attn_norm.weight"]);
      q[t] = matvec(w.t[p + "attn_q.weight"], E, xn);
      k[t] = matvec(w.t[p + "attn_k.weight"], E, xn);
      v[t] = matvec(w.t[p + "attn_v.weight"], E, xn);
      if (neox) {
        for (size_t i = 0; i < q[t].size(); ++i) q[t][i] += w.t[p + "attn_q.bias"][i];
        for (size_t i = 0; i < k[t].size(); ++i) k[t][i] += w.t[p + "attn_k.bias"][i];
        for (size_t i = 0; i < v[t].size(); ++i) v[t][i] += w.t[p + "attn_v.bias"][i];
      }
      rope_ref(q[t], s.n_head, hd, (int)t, s.rope_base, neox);
      rope_ref(k[t], s.n_head_kv, hd, (int)t, s.rope_base, neox);
    }
    for (int64_t t = 0; t < T; ++t) {
      Vec attn((size_t)(s.n_head * hd), 0.0);
      for (int64_t h = 0; h < s.n_head; ++h) {
        const int64_t kvh = h * s.n_head_kv / s.n_head;
        Vec sc((size_t)t + 1);
        double mx = -1e300;
        for (int64_t j = 0; j <= t; ++j) {
          double d = 0;
          for (int64_t i = 0; i < hd; ++i) d += q[t][(size_t)(h * hd + i)] * k[j][(size_t)(kvh * hd + i)];
          sc[(size_t)j] = d / std::sqrt((double)hd);
          mx = std::max(mx, sc[(size_t)j]);
        }
        double sum = 0;
        for (double& e : sc) sum += (e = std::exp(e - mx));
        for (int64_t j = 0; j <= t; ++j)
          for (int64_t i = 0; i < hd; ++i)
            attn[(size_t)(h * hd + i)] += sc[(size_t)j] / sum * v[j][(size_t)(kvh * hd + i)];
      }
      const Vec o = matvec(w.t[p + "attn_output.weight"], s.n_head * hd, attn);
      for (int64_t i = 0; i < E; ++i) x[(size_t)t][(size_t)i] += o[(size_t)i];
      const Vec xn = rmsnorm(x[(size_t)t], w.t[p + "ffn_norm.weight"]);
      const Vec g = matvec(w.t[p + "ffn_gate.weight"], E, xn);
      const Vec u = matvec(w.t[p + "ffn_up.weight"], E, xn);
      Vec h(g.size());
      for (size_t i = 0; i < g.size(); ++i) h[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
      const Vec d = matvec(w.t[p + "ffn_down.weight"], s.n_ff, h);
      for (int64_t i = 0; i < E; ++i) x[(size_t)t][(size_t)i] += d[(size_t)i];
    }
  }
  std::vector<Vec> logits;
  const auto& out = w.t.count("output.weight") ? w.t["output.weight"] : w.t["token_embd.weight"];
  for (int64_t t = 0; t < T; ++t) logits.push_back(matvec(out, E, rmsnorm(x[(size_t)t], w.t["output_norm.weight"])));
  return logits;
}

// ---- helpers over the real model --------------------------------------------

std::vector<std::vector<float>> run_sequence(Model& m, KvView& kv, SeqId seq,
                                             const std::vector<Token>& toks) {
  Batch b;
  for (size_t i = 0; i < toks.size(); ++i) b.add(toks[i], (int32_t)i, seq, true);
  Logits lg;
  Status st = m.forward(b, kv, lg);
  EXPECT_TRUE(st.is_ok()) << st.message();
  std::vector<std::vector<float>> rows;
  for (size_t r = 0; r < lg.rows(); ++r) rows.emplace_back(lg.row(r).begin(), lg.row(r).end());
  return rows;
}

std::unique_ptr<ContiguousKvCache> kv_for(const Model& m, int seqs = 2,
                                          TensorType t = TensorType::F16) {
  auto kv = ContiguousKvCache::create(m.hparams().kv_shape(), seqs, 64, t);
  EXPECT_TRUE(kv) << kv.status().message();
  return kv ? std::move(*kv) : nullptr;
}

const std::vector<Token> kPromptA = {1, 5, 9, 17, 33, 2, 40, 11, 7, 3};
const std::vector<Token> kPromptB = {1, 44, 8, 8, 21, 30};

// ---- tests ------------------------------------------------------------------

TEST(ModelLoad, ReadsHyperParameters) {
  SynthSpec s;
  s.extra = [](gguf::Writer& w) {
    w.set_string("llama.rope.scaling.type", "linear");
    w.set_float32("llama.rope.scaling.factor", 4.0f);
  };
  Built b = build(s);
  ASSERT_TRUE(b.model);
  const HParams& hp = b.model->hparams();
  EXPECT_EQ(hp.arch, "llama");
  EXPECT_EQ(hp.n_vocab, 48);
  EXPECT_EQ(hp.n_embd, 64);
  EXPECT_EQ(hp.n_layer, 2);
  EXPECT_EQ(hp.n_head, 4);
  EXPECT_EQ(hp.n_head_kv, 2);
  EXPECT_EQ(hp.head_dim, 16);
  EXPECT_EQ(hp.n_rot, 16);
  EXPECT_EQ(hp.n_ff, 96);
  EXPECT_EQ(hp.n_ctx_train, 256);
  EXPECT_FLOAT_EQ(hp.rope_freq_scale, 0.25f);
  EXPECT_FLOAT_EQ(hp.norm_eps, 1e-5f);
  EXPECT_EQ(hp.rope_style, kernels::RopeStyle::Norm);
  EXPECT_FALSE(hp.tied_output);

  SynthSpec q;
  q.arch = "qwen2";
  q.tied = true;
  q.rope_base = 1e6f;
  Built bq = build(q);
  ASSERT_TRUE(bq.model);
  EXPECT_EQ(bq.model->hparams().rope_style, kernels::RopeStyle::Neox);
  EXPECT_TRUE(bq.model->hparams().tied_output);
  EXPECT_FLOAT_EQ(bq.model->hparams().rope_freq_base, 1e6f);
  EXPECT_EQ(supported_architectures(),
            (std::vector<std::string_view>{"llama", "qwen2", "qwen3", "phi3", "qwen2moe",
                                           "qwen3moe", "gemma2", "gemma3", "gpt-oss", "bert"}));
}

// The model (F32 K/V) against the plain double-precision reference above, for
// both RoPE styles, GQA, QKV bias and tied output.
TEST(ModelForward, MatchesPlainReference) {
  for (const char* arch : {"llama", "qwen2"})
    for (bool tied : {false, true}) {
      SCOPED_TRACE(std::string(arch) + (tied ? " tied" : ""));
      SynthSpec s;
      s.arch = arch;
      s.tied = tied;
      SynthWeights w;
      Built b = build(s, &w);
      ASSERT_TRUE(b.model);
      auto kv = kv_for(*b.model, 1, TensorType::F32);
      const auto got = run_sequence(*b.model, *kv, 0, kPromptA);
      const auto want = reference_forward(s, w, kPromptA);
      ASSERT_EQ(got.size(), want.size());
      double max_diff = 0, max_abs = 0;
      for (size_t t = 0; t < got.size(); ++t)
        for (size_t i = 0; i < got[t].size(); ++i) {
          max_diff = std::max(max_diff, std::fabs(got[t][i] - want[t][i]));
          max_abs = std::max(max_abs, std::fabs(want[t][i]));
        }
      EXPECT_GT(max_abs, 0.1);  // the logits are not trivially zero
      EXPECT_LT(max_diff, 1e-4 * std::max(1.0, max_abs));
    }
}

TEST(ModelForward, DeterministicAcrossRunsAndLoads) {
  SynthSpec s;
  Built b1 = build(s), b2 = build(s);
  ASSERT_TRUE(b1.model && b2.model);
  auto kv1 = kv_for(*b1.model), kv2 = kv_for(*b2.model);
  const auto r1 = run_sequence(*b1.model, *kv1, 0, kPromptA);
  const auto r2 = run_sequence(*b2.model, *kv2, 0, kPromptA);
  const auto r3 = run_sequence(*b1.model, *kv1, 0, kPromptA);  // rewrites the same slots
  EXPECT_EQ(r1, r2);
  EXPECT_EQ(r1, r3);
}

// Two sequences interleaved in one ragged batch, then a mixed step (a decode
// token of one, a prefill chunk of the other), give the logits each gets alone.
TEST(ModelForward, RaggedBatchMatchesSeparateRuns) {
  for (const char* arch : {"llama", "qwen2"}) {
    SCOPED_TRACE(arch);
    SynthSpec s;
    s.arch = arch;
    Built b = build(s);
    ASSERT_TRUE(b.model);
    Model& m = *b.model;

    auto alone = kv_for(m);
    const auto a_alone = run_sequence(m, *alone, 0, kPromptA);
    const auto b_alone = run_sequence(m, *alone, 1, kPromptB);

    auto kv = kv_for(m);
    // Step 1: first 6 tokens of A interleaved with the first 4 of B.
    Batch batch;
    Logits lg;
    for (int i = 0; i < 6; ++i) {
      batch.add(kPromptA[(size_t)i], i, 0, true);
      if (i < 4) batch.add(kPromptB[(size_t)i], i, 1, i == 3);
    }
    ASSERT_TRUE(m.forward(batch, *kv, lg).is_ok());
    ASSERT_EQ(lg.rows(), 7u);
    for (size_t r = 0; r < lg.rows(); ++r) {
      const size_t bi = (size_t)lg.batch_index[r];
      const auto& want = batch.seqs[bi] == 0 ? a_alone[(size_t)batch.positions[bi]]
                                             : b_alone[(size_t)batch.positions[bi]];
      for (size_t i = 0; i < want.size(); ++i)
        ASSERT_NEAR(lg.row(r)[i], want[i], 1e-5) << "row " << r << " logit " << i;
    }
    // Step 2: the rest of B (a prefill chunk) and of A, B's tokens first.
    batch.clear();
    for (size_t i = 4; i < kPromptB.size(); ++i) batch.add(kPromptB[i], (int32_t)i, 1, true);
    for (size_t i = 6; i < kPromptA.size(); ++i) batch.add(kPromptA[i], (int32_t)i, 0, true);
    ASSERT_TRUE(m.forward(batch, *kv, lg).is_ok());
    ASSERT_EQ(lg.rows(), batch.size());
    for (size_t r = 0; r < lg.rows(); ++r) {
      const auto& want = batch.seqs[r] == 0 ? a_alone[(size_t)batch.positions[r]]
                                            : b_alone[(size_t)batch.positions[r]];
      for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(lg.row(r)[i], want[i], 1e-5);
    }
  }
}

TEST(ModelForward, TokenByTokenDecodeMatchesPrefill) {
  SynthSpec s;
  Built b = build(s);
  ASSERT_TRUE(b.model);
  auto kv = kv_for(*b.model);
  const auto prefill = run_sequence(*b.model, *kv, 0, kPromptA);
  auto kv2 = kv_for(*b.model);
  Logits lg;
  for (size_t i = 0; i < kPromptA.size(); ++i) {
    Batch one;
    one.add(kPromptA[i], (int32_t)i, 1, true);
    ASSERT_TRUE(b.model->forward(one, *kv2, lg).is_ok());
    // Not bit-equal: like ggml, a single token's F32 products take
    // ggml_vec_dot_f32's summation order and a batch's take tinyBLAS's
    // (kernels/float_order.h), a difference of float rounding only, which an
    // F16 K/V value on a rounding boundary can lift to ~1e-4 (a wrong
    // position or mask is off by far more than 1e-3).
    for (size_t j = 0; j < prefill[i].size(); ++j) ASSERT_NEAR(lg.row(0)[j], prefill[i][j], 1e-3);
  }
}

TEST(ModelForward, LogitsOnlyForRowsThatAskAndF16CacheIsClose) {
  SynthSpec s;
  Built b = build(s);
  ASSERT_TRUE(b.model);
  auto kv16 = kv_for(*b.model, 1, TensorType::F16);
  auto kv32 = kv_for(*b.model, 1, TensorType::F32);
  EXPECT_EQ(kv16->bytes() * 2, kv32->bytes());
  Batch batch;
  for (size_t i = 0; i < kPromptA.size(); ++i) batch.add(kPromptA[i], (int32_t)i, 0, i == 2 || i == 9);
  Logits l16, l32;
  ASSERT_TRUE(b.model->forward(batch, *kv16, l16).is_ok());
  ASSERT_TRUE(b.model->forward(batch, *kv32, l32).is_ok());
  EXPECT_EQ(l16.batch_index, (std::vector<int32_t>{2, 9}));
  EXPECT_EQ(l16.n_vocab, 48);
  EXPECT_EQ(l16.data.size(), 2u * 48u);
  double diff = 0;
  for (size_t i = 0; i < l16.data.size(); ++i) diff = std::max(diff, (double)std::fabs(l16.data[i] - l32.data[i]));
  EXPECT_GT(diff, 0.0);   // F16 storage really rounds
  EXPECT_LT(diff, 1e-2);  // ... and only that
}

// Quantized weights (activations quantized per block by the kernels) stay close
// to the plain reference over the same dequantized weights.
TEST(ModelForward, QuantizedWeightsRunCloseToReference) {
  for (TensorType t : {TensorType::F16, TensorType::BF16, TensorType::Q8_0, TensorType::Q4_0,
                       TensorType::Q4_K, TensorType::Q6_K}) {
    SCOPED_TRACE(std::string(type_info(t).name));
    SynthSpec s;
    s.type = t;
    s.n_embd = 256;  // K-quants need rows of 256
    s.n_ff = 512;
    s.n_head = 4;
    s.n_head_kv = 2;
    SynthWeights w;
    Built b = build(s, &w);
    ASSERT_TRUE(b.model);
    auto kv = kv_for(*b.model, 1, TensorType::F32);
    const auto got = run_sequence(*b.model, *kv, 0, kPromptA);
    const auto want = reference_forward(s, w, kPromptA);
    double max_diff = 0, max_abs = 0;
    for (size_t r = 0; r < got.size(); ++r)
      for (size_t i = 0; i < got[r].size(); ++i) {
        ASSERT_TRUE(std::isfinite(got[r][i]));
        max_diff = std::max(max_diff, std::fabs(got[r][i] - want[r][i]));
        max_abs = std::max(max_abs, std::fabs(want[r][i]));
      }
    EXPECT_LT(max_diff, 0.05 * max_abs) << "max |diff| " << max_diff << " of " << max_abs;
  }
}

// ---- errors -----------------------------------------------------------------

TEST(ModelLoad, MalformedHyperParametersNameTheKey) {
  struct Case {
    const char* what;
    std::function<void(SynthSpec&)> tweak;
    const char* expect;  // substring of the error
  };
  const std::vector<Case> cases = {
      {"no architecture", [](SynthSpec& s) { s.omit_keys.insert("general.architecture"); },
       "general.architecture' is missing"},
      {"unknown architecture", [](SynthSpec& s) { s.arch = "mamba"; }, "'mamba' is not supported"},
      {"no block_count", [](SynthSpec& s) { s.omit_keys.insert("block_count"); },
       "llama.block_count' is missing"},
      {"zero heads", [](SynthSpec& s) { s.uint_override["attention.head_count"] = 0; },
       "llama.attention.head_count' must be positive"},
      {"heads not multiple of kv heads",
       [](SynthSpec& s) { s.uint_override["attention.head_count_kv"] = 3; },
       "is not a multiple of 'llama.attention.head_count_kv'"},
      {"embedding not multiple of heads",
       [](SynthSpec& s) { s.uint_override["attention.head_count"] = 5; s.uint_override["attention.head_count_kv"] = 5; },
       "llama.embedding_length' = 64 is not a multiple"},
      {"odd rope dims", [](SynthSpec& s) { s.uint_override["rope.dimension_count"] = 7; },
       "llama.rope.dimension_count' = 7"},
      {"absurd layer count", [](SynthSpec& s) { s.uint_override["block_count"] = 100000; },
       "llama.block_count' = 100000 exceeds"},
      {"no epsilon", [](SynthSpec& s) { s.omit_keys.insert("attention.layer_norm_rms_epsilon"); },
       "layer_norm_rms_epsilon' is missing"},
      {"wrong key type",
       [](SynthSpec& s) { s.extra = [](gguf::Writer& w) { w.set_string("llama.block_count", "two"); }; },
       "llama.block_count"},
      {"unknown scaling",
       [](SynthSpec& s) { s.extra = [](gguf::Writer& w) { w.set_string("llama.rope.scaling.type", "dynamic"); }; },
       "metadata 'llama.rope.scaling.type' = 'dynamic' is not supported"},
  };
  for (const Case& c : cases) {
    SynthSpec s;
    c.tweak(s);
    const std::string err = load_error(s);
    EXPECT_NE(err.find(c.expect), std::string::npos) << c.what << ": got \"" << err << "\"";
    EXPECT_EQ(err.find('\n'), std::string::npos) << c.what;
  }
}

TEST(ModelLoad, MissingOrMisshapenTensorsNameTheTensor) {
  SynthSpec missing;
  missing.omit_tensors.insert("blk.1.ffn_up.weight");
  EXPECT_EQ(load_error(missing), "tensor 'blk.1.ffn_up.weight' is missing");

  SynthSpec shape;
  shape.dims_override["blk.0.attn_k.weight"] = {64, 64};  // GQA wants 32 rows
  EXPECT_EQ(load_error(shape), "tensor 'blk.0.attn_k.weight' has shape [64, 64], expected [64, 32]");

  SynthSpec norm;
  norm.dims_override["output_norm.weight"] = {32};
  EXPECT_EQ(load_error(norm), "tensor 'output_norm.weight' has shape [32], expected [64]");

  SynthSpec no_embd;
  no_embd.omit_tensors.insert("token_embd.weight");
  EXPECT_EQ(load_error(no_embd), "tensor 'token_embd.weight' is missing");

  SynthSpec qwen_no_bias;
  qwen_no_bias.arch = "qwen2";
  qwen_no_bias.omit_tensors.insert("blk.0.attn_v.bias");
  EXPECT_EQ(load_error(qwen_no_bias), "tensor 'blk.0.attn_v.bias' is missing");

  SynthSpec ints;  // a GGUF type the file format allows but nothing computes with
  ints.type_override["blk.0.ffn_gate.weight"] = TensorType::I32;
  EXPECT_EQ(load_error(ints),
            "tensor 'blk.0.ffn_gate.weight' has type i32, which cairn cannot compute with");
}

TEST(ModelForward, BadBatchesAreRejectedBeforeRunning) {
  SynthSpec s;
  Built b = build(s);
  ASSERT_TRUE(b.model);
  auto kv = kv_for(*b.model, 2);
  Logits lg;
  const auto err = [&](const Batch& batch) {
    Status st = b.model->forward(batch, *kv, lg);
    return st.is_ok() ? std::string("(ok)") : st.message();
  };
  Batch empty;
  EXPECT_EQ(err(empty), "batch is empty");
  Batch bad_token;
  bad_token.add(48, 0, 0, true);
  EXPECT_NE(err(bad_token).find("token 48 is outside the vocabulary of 48"), std::string::npos);
  Batch neg_token;
  neg_token.add(-1, 0, 0, true);
  EXPECT_NE(err(neg_token).find("token -1"), std::string::npos);
  Batch far;
  far.add(1, 64, 0, true);
  EXPECT_NE(err(far).find("position 64 of sequence 0 is outside its KV capacity 64"), std::string::npos);
  Batch unknown_seq;
  unknown_seq.add(1, 0, 2, true);
  EXPECT_NE(err(unknown_seq).find("sequence 2 has no KV space"), std::string::npos);
  Batch dup;
  dup.add(1, 3, 1, false);
  dup.add(2, 3, 1, true);
  EXPECT_EQ(err(dup), "batch has two tokens at position 3 of sequence 1");
  Batch ragged;
  ragged.add(1, 0, 0, true);
  ragged.positions.push_back(1);
  EXPECT_EQ(err(ragged), "batch fields have different lengths");
  Batch ok;
  ok.add(1, 0, 0, true);
  EXPECT_EQ(err(ok), "(ok)");
  // A cache built for another model is refused, not overrun.
  SynthSpec other;
  other.n_head_kv = 4;
  Built b2 = build(other);
  ASSERT_TRUE(b2.model);
  auto wrong = kv_for(*b2.model, 2);
  Status st = b.model->forward(ok, *wrong, lg);
  EXPECT_EQ(st.message(), "KV view is shaped for 2 layers of 64-wide rows; the model needs 2 of 32");
}

TEST(ContiguousKv, RejectsBadShapes) {
  SynthSpec s;
  Built b = build(s);
  ASSERT_TRUE(b.model);
  const HParams& hp = b.model->hparams();
  EXPECT_FALSE(ContiguousKvCache::create(hp.kv_shape(), 0, 16));
  EXPECT_FALSE(ContiguousKvCache::create(hp.kv_shape(), 1, 0));
  auto q = ContiguousKvCache::create(hp.kv_shape(), 1, 16, TensorType::Q4_0);
  ASSERT_FALSE(q);
  EXPECT_NE(q.status().message().find("q4_0 is not supported"), std::string::npos);
  // Q8_0 (--kv-type q8_0) is a storage type; these 32-element rows fit its blocks.
  EXPECT_TRUE(ContiguousKvCache::create(hp.kv_shape(), 1, 16, TensorType::Q8_0));
  auto kv = ContiguousKvCache::create(hp.kv_shape(), 3, 16);
  ASSERT_TRUE(kv);
  EXPECT_EQ((*kv)->capacity(2), 16);
  EXPECT_EQ((*kv)->capacity(3), 0);
  EXPECT_EQ((*kv)->capacity(-1), 0);
  EXPECT_EQ((*kv)->dtype(), TensorType::F16);
  // Rows land where they are read back, per layer / sequence / position.
  std::vector<float> k((size_t)hp.kv_row_elems(), 1.5f), v((size_t)hp.kv_row_elems(), -2.0f);
  (*kv)->write(1, 2, 15, k.data(), v.data());
  EXPECT_EQ(*(const uint16_t*)(*kv)->key(1, 2, 15), f32_to_f16(1.5f));
  EXPECT_EQ(*(const uint16_t*)(*kv)->value(1, 2, 15), f32_to_f16(-2.0f));
  EXPECT_EQ(*(const uint16_t*)(*kv)->key(1, 2, 14), 0);
  EXPECT_EQ(*(const uint16_t*)(*kv)->key(0, 2, 15), 0);
}

}  // namespace
}  // namespace cairn::model
