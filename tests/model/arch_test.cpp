// The architectures and tensors added to the shared decoder (qwen3, phi3,
// rope_freqs.weight, the mixture-of-experts qwen2moe and qwen3moe) on models
// the tests write themselves: each against a plain double-precision forward
// written from the definitions, layouts of the same weights against each
// other, and the errors of malformed files.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"
#include "kernels/kernels.h"
#include "kv/contiguous_kv.h"
#include "model/model.h"
#include "modelgen/model_builder.h"
#include "plain_decoder.h"
#include "test_util.h"

namespace cairn::model {
namespace {

using namespace plain;  // the synthetic models and the plain forward


ArchSpec qwen3_spec() {
  ArchSpec s;
  s.arch = "qwen3";
  s.qk_norm = true;
  s.rope_base = 1e6f;
  return s;
}

ArchSpec phi3_spec() {
  ArchSpec s;
  s.arch = "phi3";
  s.fuse_qkv = true;
  s.fuse_ffn = true;
  s.prescale_q = true;
  s.eps = 1e-5f;
  return s;
}

// ---- qwen3 -----------------------------------------------------------------

TEST(Qwen3, MatchesPlainReferenceWithHeadNorms) {
  for (int64_t hd : {16, 24}) {  // 24: heads wider than embd / heads, as Qwen3's are
    SCOPED_TRACE("head_dim " + std::to_string(hd));
    ArchSpec s = qwen3_spec();
    s.head_dim = hd;
    const Weights w = make_weights(s);
    auto l = load_bytes(write_model(s, w));
    ASSERT_TRUE(l) << l.status().message();
    const HParams& hp = l->model->hparams();
    EXPECT_EQ(hp.head_dim, hd);
    EXPECT_EQ(hp.n_rot, hd);
    EXPECT_EQ(hp.rope_style, kernels::RopeStyle::Neox);
    EXPECT_EQ(hp.kv_row_elems(), 2 * hd);
    EXPECT_LT(rel_diff(run(*l->model), reference(s, w)), 1e-4);
    // The head norms matter: the same weights read without them (as a
    // bias-free qwen2-style forward) are far from the model.
    ArchSpec no_norm = s;
    no_norm.qk_norm = false;
    EXPECT_GT(rel_diff(run(*l->model), reference(no_norm, w)), 1e-2);
  }
}

TEST(Qwen3, MalformedFilesAreRefusedByName) {
  const ArchSpec s = qwen3_spec();
  const Weights w = make_weights(s);
  EXPECT_EQ(load_error(write_model(s, w, {}, {}, {"blk.1.attn_k_norm.weight"})),
            "tensor 'blk.1.attn_k_norm.weight' is missing");
  EXPECT_EQ(load_error(write_model(s, w, {}, {{"blk.0.attn_q_norm.weight", {8}}})),
            "tensor 'blk.0.attn_q_norm.weight' has shape [8], expected [16]");
  const auto value_len = [](gguf::Writer& g) {
    g.set_uint32("qwen3.attention.key_length", 16);
    g.set_uint32("qwen3.attention.value_length", 32);
  };
  EXPECT_EQ(load_error(write_model(s, w, value_len)),
            "metadata 'qwen3.attention.value_length' = 32 differs from the key head size 16 "
            "(not supported)");
  const auto odd_heads = [](gguf::Writer& g) { g.set_uint32("qwen3.attention.head_count", 5); };
  EXPECT_NE(load_error(write_model(s, w, odd_heads)).find("is not a multiple"), std::string::npos);
  ArchSpec biased = s;
  biased.qkv_bias = true;
  EXPECT_EQ(load_error(write_model(biased, make_weights(biased))),
            "tensor 'blk.0.attn_q.bias': Q/K/V biases in a qwen3 model are not supported");
}

// ---- rope_freqs.weight -------------------------------------------------------

TEST(RopeFreqs, FactorsOfOneKeepTheBitsAndRealOnesMatchTheReference) {
  ArchSpec s;
  s.arch = "llama";
  s.neox = false;
  s.eps = 1e-5f;
  const Weights plain = make_weights(s);
  auto without = load_bytes(write_model(s, plain));
  ASSERT_TRUE(without) << without.status().message();
  const auto base_logits = run(*without->model);

  ArchSpec ones = s;
  ones.rope_freqs.assign(8, 1.0f);
  Weights w1 = plain;
  w1["rope_freqs.weight"] = ones.rope_freqs;
  auto with_ones = load_bytes(write_model(ones, w1));
  ASSERT_TRUE(with_ones) << with_ones.status().message();
  EXPECT_EQ(run(*with_ones->model), base_logits);  // bit for bit

  // Llama 3.1's factors for a small base, so several pairs are stretched
  // within the prompt's positions.
  ArchSpec real = s;
  real.rope_base = 100.0f;
  real.rope_freqs = modelgen::llama3_rope_factors(16, 100.0, 8.0, 1.0, 4.0, 16.0);
  Weights w2 = plain;
  w2["rope_freqs.weight"] = real.rope_freqs;
  auto with_real = load_bytes(write_model(real, w2));
  ASSERT_TRUE(with_real) << with_real.status().message();
  ArchSpec real_off = real;
  real_off.rope_freqs.clear();
  auto same_base = load_bytes(write_model(real_off, plain));
  ASSERT_TRUE(same_base);
  const auto got = run(*with_real->model);
  EXPECT_GT(max_abs_diff(got, run(*same_base->model)), 1e-3);
  EXPECT_LT(rel_diff(got, reference(real, w2)), 1e-4);
  // ... and for the NeoX style (qwen2).
  ArchSpec q = real;
  q.arch = "qwen2";
  q.neox = true;
  q.qkv_bias = true;
  Weights wq = make_weights(q);
  auto qm = load_bytes(write_model(q, wq));
  ASSERT_TRUE(qm) << qm.status().message();
  EXPECT_LT(rel_diff(run(*qm->model), reference(q, wq)), 1e-4);
}

TEST(RopeFreqs, KernelFactorsDivideTheAnglesAndOnesChangeNothing) {
  std::vector<float> c0(8), s0(8), c1(8), s1(8), c2(8), s2(8);
  const std::vector<float> ones(8, 1.0f), twos(8, 2.0f);
  for (int32_t pos : {0, 1, 7, 1000, 100000}) {
    kernels::rope_angles(16, 16, pos, 10000.0f, 0.5f, c0.data(), s0.data());
    kernels::rope_angles(16, 16, pos, 10000.0f, 0.5f, c1.data(), s1.data(), ones.data());
    EXPECT_EQ(c0, c1);
    EXPECT_EQ(s0, s1);
    // Dividing every angle by 2 equals halving the scale.
    kernels::rope_angles(16, 16, pos, 10000.0f, 1.0f, c2.data(), s2.data(), twos.data());
    for (size_t i = 0; i < 8; ++i) {
      EXPECT_NEAR(c2[i], c0[i], 1e-6);
      EXPECT_NEAR(s2[i], s0[i], 1e-6);
    }
  }
}

TEST(RopeFreqs, Llama3FactorsFollowTheWavelengthBands) {
  // Llama 3.1 8B: base 500000, 128 rotated dims.
  const std::vector<float> f = modelgen::llama3_rope_factors(128, 500000.0);
  ASSERT_EQ(f.size(), 64u);
  EXPECT_EQ(f.front(), 1.0f);  // the fastest pairs are left alone
  EXPECT_EQ(f.back(), 8.0f);   // the slowest are stretched by the factor
  for (size_t i = 1; i < f.size(); ++i) EXPECT_GE(f[i], f[i - 1]);
  const auto between = std::count_if(f.begin(), f.end(), [](float x) { return x > 1 && x < 8; });
  EXPECT_GT(between, 0);
}

TEST(RopeFreqs, BadTensorsAreRefused) {
  ArchSpec s;
  s.arch = "llama";
  s.neox = false;
  s.rope_freqs.assign(8, 1.0f);
  const Weights w = make_weights(s);
  EXPECT_EQ(load_error(write_model(s, w, {}, {{"rope_freqs.weight", {5}}})),
            "tensor 'rope_freqs.weight' has shape [5], expected [8]");
  Weights zero = w;
  zero["rope_freqs.weight"][3] = 0.0f;
  EXPECT_EQ(load_error(write_model(s, zero)),
            "tensor 'rope_freqs.weight' holds a factor that is not a positive finite number");
  Weights nan = w;
  nan["rope_freqs.weight"][0] = std::nanf("");
  EXPECT_NE(load_error(write_model(s, nan)).find("not a positive finite"), std::string::npos);
  // LongRoPE's factor pair (Phi-3's long-context files) is another scheme:
  // refused, not ignored.
  ArchSpec plain = s;
  plain.rope_freqs.clear();
  const auto long_rope = [](gguf::Writer& g) {
    std::vector<float> v(8, 1.0f);
    ASSERT_TRUE(g.add_tensor("rope_factors_long.weight", TensorType::F32, {8}, f32_bytes(v)).is_ok());
  };
  EXPECT_EQ(load_error(write_model(plain, make_weights(plain), long_rope)),
            "tensor 'rope_factors_long.weight': long-context RoPE factors (LongRoPE) are not "
            "supported for llama without rope.scaling.type longrope");
  // With that type, llama takes them as phi3 does (rope_scaling_test.cpp).
  const auto long_type = [&](gguf::Writer& g) {
    g.set_string("llama.rope.scaling.type", "longrope");
    long_rope(g);
  };
  EXPECT_EQ(load_error(write_model(plain, make_weights(plain), long_type)), "(loaded)");
}

// ---- phi3 --------------------------------------------------------------------

TEST(Phi3, FusedMatricesMatchTheSplitWeights) {
  const ArchSpec s = phi3_spec();
  const Weights w = make_weights(s);
  auto fused = load_bytes(write_model(s, w));
  ASSERT_TRUE(fused) << fused.status().message();
  const auto got = run(*fused->model);
  EXPECT_LT(rel_diff(got, reference(s, w)), 1e-4);
  // Q/K/V as three matrices (the reference accepts both): the same bits.
  ArchSpec split = s;
  split.fuse_qkv = false;
  auto unfused = load_bytes(write_model(split, w));
  ASSERT_TRUE(unfused) << unfused.status().message();
  EXPECT_EQ(run(*unfused->model), got);
  // A qwen2 model of the same split weights with zero biases is the same
  // network but for where Q's 1/sqrt(head_dim) is rounded.
  ArchSpec q = s;
  q.arch = "qwen2";
  q.fuse_qkv = q.fuse_ffn = false;
  q.qkv_bias = true;
  Weights wq = w;
  for (int64_t l = 0; l < s.layers; ++l) {
    wq[blk(l, "attn_q.bias")].assign(64, 0.0f);
    wq[blk(l, "attn_k.bias")].assign(32, 0.0f);
    wq[blk(l, "attn_v.bias")].assign(32, 0.0f);
  }
  auto qwen = load_bytes(write_model(q, wq));
  ASSERT_TRUE(qwen) << qwen.status().message();
  const auto qwen_logits = run(*qwen->model);
  EXPECT_LT(max_abs_diff(qwen_logits, got), 1e-4);
  // The gate is the first half of ffn_up: swapping the halves is another model.
  Weights swapped = w;
  for (int64_t l = 0; l < s.layers; ++l)
    std::swap(swapped[blk(l, "ffn_gate.weight")], swapped[blk(l, "ffn_up.weight")]);
  auto other = load_bytes(write_model(s, swapped));
  ASSERT_TRUE(other);
  EXPECT_GT(max_abs_diff(run(*other->model), got), 1e-3);
}

TEST(Phi3, MalformedFilesAreRefusedByName) {
  const ArchSpec s = phi3_spec();
  const Weights w = make_weights(s);
  EXPECT_EQ(load_error(write_model(s, w, {}, {{"blk.0.attn_qkv.weight", {64, 96}}})),
            "tensor 'blk.0.attn_qkv.weight' has shape [64, 96], expected [64, 128]");
  EXPECT_EQ(load_error(write_model(s, w, {}, {{"blk.1.ffn_up.weight", {64, 96}}})),
            "tensor 'blk.1.ffn_up.weight' has shape [64, 96], expected [64, 192]");
  ArchSpec gate = s;
  gate.fuse_ffn = false;
  EXPECT_EQ(load_error(write_model(gate, w)),
            "tensor 'blk.0.ffn_gate.weight': a phi3 model keeps its gate inside ffn_up.weight");
  ArchSpec wide = s;
  wide.head_dim = 24;
  EXPECT_EQ(load_error(write_model(wide, make_weights(wide))),
            "phi3: head_count * head size (4 * 24) must equal embedding_length 64");
}

// ---- qwen2moe, qwen3moe --------------------------------------------------------

ArchSpec qwen3moe_spec() {
  ArchSpec s = qwen3_spec();
  s.arch = "qwen3moe";
  s.experts = 4;
  s.experts_used = 2;
  s.ff_exp = 32;
  s.norm_topk = true;
  return s;
}

ArchSpec qwen2moe_spec() {
  ArchSpec s;
  s.arch = "qwen2moe";
  s.qkv_bias = true;
  s.rope_base = 1e6f;
  s.experts = 4;
  s.experts_used = 2;
  s.ff_exp = 32;
  s.ff_shexp = 48;
  return s;
}

TEST(Qwen3Moe, MatchesPlainReferenceWithRenormalizedExperts) {
  const ArchSpec s = qwen3moe_spec();
  const Weights w = make_weights(s);
  auto l = load_bytes(write_model(s, w));
  ASSERT_TRUE(l) << l.status().message();
  const HParams& hp = l->model->hparams();
  EXPECT_EQ(hp.n_expert, 4);
  EXPECT_EQ(hp.n_expert_used, 2);
  EXPECT_EQ(hp.n_ff_exp, 32);
  const auto got = run(*l->model);
  EXPECT_LT(rel_diff(got, reference(s, w)), 1e-4);
  // The renormalization matters: without it the same weights are another model.
  ArchSpec plain = s;
  plain.norm_topk = false;
  EXPECT_GT(rel_diff(got, reference(plain, w)), 1e-2);
  // Every expert used: the router still weights them.
  ArchSpec all = s;
  all.experts_used = 4;
  auto la = load_bytes(write_model(all, w));
  ASSERT_TRUE(la) << la.status().message();
  EXPECT_LT(rel_diff(run(*la->model), reference(all, w)), 1e-4);
}

// One expert, always chosen with weight 1: a qwen3 whose FFN is that expert.
TEST(Qwen3Moe, OneExpertIsTheDenseQwen3) {
  ArchSpec dense = qwen3_spec();
  const Weights w = make_weights(dense);
  ArchSpec moe = qwen3moe_spec();
  moe.experts = 1;
  moe.experts_used = 1;
  moe.ff_exp = dense.ff;
  Weights wm = w;
  for (int64_t l = 0; l < dense.layers; ++l) {
    wm[blk(l, "ffn_gate_inp.weight")].assign((size_t)dense.embd, 0.5f);
    wm[blk(l, "ffn_gate_exps.weight")] = w.at(blk(l, "ffn_gate.weight"));
    wm[blk(l, "ffn_up_exps.weight")] = w.at(blk(l, "ffn_up.weight"));
    wm[blk(l, "ffn_down_exps.weight")] = w.at(blk(l, "ffn_down.weight"));
  }
  auto a = load_bytes(write_model(dense, w));
  auto b = load_bytes(write_model(moe, wm));
  ASSERT_TRUE(a) << a.status().message();
  ASSERT_TRUE(b) << b.status().message();
  EXPECT_LT(max_abs_diff(run(*a->model), run(*b->model)), 1e-5);
}

// Renaming the experts (router rows and expert slabs permuted together)
// changes nothing, bit for bit: routing follows the weights, not the indices.
TEST(Qwen3Moe, PermutedExpertsGiveTheSameBits) {
  const ArchSpec s = qwen3moe_spec();
  const Weights w = make_weights(s);
  const std::vector<int64_t> perm = {2, 0, 3, 1};
  Weights p = w;
  const auto permute = [&](const std::string& name, int64_t slab) {
    const std::vector<float>& src = w.at(name);
    std::vector<float>& dst = p[name];
    for (int64_t e = 0; e < s.experts; ++e)
      std::copy_n(src.begin() + perm[(size_t)e] * slab, slab, dst.begin() + e * slab);
  };
  for (int64_t l = 0; l < s.layers; ++l) {
    permute(blk(l, "ffn_gate_inp.weight"), s.embd);
    for (const char* n : {"ffn_gate_exps.weight", "ffn_up_exps.weight", "ffn_down_exps.weight"})
      permute(blk(l, n), s.embd * s.ff_exp);
  }
  auto a = load_bytes(write_model(s, w));
  auto b = load_bytes(write_model(s, p));
  ASSERT_TRUE(a && b);
  EXPECT_EQ(run(*a->model), run(*b->model));
}

TEST(Qwen2Moe, MatchesPlainReferenceWithSharedExpert) {
  const ArchSpec s = qwen2moe_spec();
  const Weights w = make_weights(s);
  auto l = load_bytes(write_model(s, w));
  ASSERT_TRUE(l) << l.status().message();
  EXPECT_EQ(l->model->hparams().n_ff_shexp, 48);
  EXPECT_EQ(l->model->hparams().rope_style, kernels::RopeStyle::Neox);
  const auto got = run(*l->model);
  EXPECT_LT(rel_diff(got, reference(s, w)), 1e-4);
  // The weights are the softmax's, not renormalized ...
  ArchSpec norm = s;
  norm.norm_topk = true;
  EXPECT_GT(rel_diff(got, reference(norm, w)), 1e-2);
  // ... and the shared expert counts.
  ArchSpec no_shared = s;
  no_shared.ff_shexp = 0;
  EXPECT_GT(rel_diff(got, reference(no_shared, w)), 1e-2);
}

// Without feed_forward_length the expert widths stand alone; with it and
// without the expert keys, the reference's defaults (ff / used, ff).
TEST(Qwen2Moe, FeedForwardLengthOnlyStandsIn) {
  ArchSpec s = qwen2moe_spec();
  s.ff = 0;
  const Weights w = make_weights(s);
  auto l = load_bytes(write_model(s, w));
  ASSERT_TRUE(l) << l.status().message();
  EXPECT_LT(rel_diff(run(*l->model), reference(s, w)), 1e-4);

  gguf::Writer g;
  g.set_string("general.architecture", "qwen2moe");
  for (const char* k : {"embedding_length", "block_count", "attention.head_count",
                        "context_length"})
    g.set_uint32(std::string("qwen2moe.") + k, 64);
  g.set_uint32("qwen2moe.attention.head_count", 4);
  g.set_uint32("qwen2moe.feed_forward_length", 96);
  g.set_uint32("qwen2moe.expert_count", 4);
  g.set_uint32("qwen2moe.expert_used_count", 2);
  g.set_float32("qwen2moe.attention.layer_norm_rms_epsilon", 1e-6f);
  std::vector<float> emb(64 * 8, 0.0f);
  ASSERT_TRUE(g.add_tensor("token_embd.weight", TensorType::F32, {64, 8}, f32_bytes(emb)).is_ok());
  auto f = gguf::File::parse(g.to_bytes());
  ASSERT_TRUE(f) << f.status().message();
  auto hp = Model::read_hparams(**f);
  ASSERT_TRUE(hp) << hp.status().message();
  EXPECT_EQ(hp->n_ff_exp, 48);
  EXPECT_EQ(hp->n_ff_shexp, 96);
}

TEST(Moe, MalformedFilesAreRefusedByName) {
  const ArchSpec s = qwen3moe_spec();
  const Weights w = make_weights(s);
  ArchSpec too_many = s;
  too_many.experts_used = 5;
  EXPECT_EQ(load_error(write_model(too_many, w)),
            "metadata 'qwen3moe.expert_used_count' = 5 exceeds 'qwen3moe.expert_count' = 4");
  ArchSpec none = s;
  none.experts_used = 0;
  EXPECT_EQ(load_error(write_model(none, w)),
            "metadata 'qwen3moe.expert_used_count' must be positive, got 0");
  ArchSpec dense = s;  // a qwen3moe file without any expert keys or tensors
  dense.experts = 0;
  EXPECT_EQ(load_error(write_model(dense, w)), "metadata 'qwen3moe.expert_count' is missing");
  const auto huge = [](gguf::Writer& g) { g.set_uint32("qwen3moe.expert_count", 5000); };
  EXPECT_EQ(load_error(write_model(s, w, huge)),
            "metadata 'qwen3moe.expert_count' = 5000 exceeds the limit 1024");
  const auto groups = [](gguf::Writer& g) { g.set_uint32("qwen3moe.expert_group_count", 2); };
  EXPECT_EQ(load_error(write_model(s, w, groups)),
            "metadata 'qwen3moe.expert_group_count' = 2: grouped expert routing is not supported");
  EXPECT_EQ(load_error(write_model(s, w, {}, {{"blk.1.ffn_up_exps.weight", {64, 32, 3}}})),
            "tensor 'blk.1.ffn_up_exps.weight' has shape [64, 32, 3], expected [64, 32, 4]");
  EXPECT_EQ(load_error(write_model(s, w, {}, {{"blk.0.ffn_down_exps.weight", {32, 64}}})),
            "tensor 'blk.0.ffn_down_exps.weight' has shape [32, 64], expected [32, 64, 4]");
  EXPECT_EQ(load_error(write_model(s, w, {}, {}, {"blk.0.ffn_gate_exps.weight"})),
            "tensor 'blk.0.ffn_gate_exps.weight' is missing");
  EXPECT_EQ(load_error(write_model(s, w, {}, {{"blk.0.ffn_gate_inp.weight", {64, 5}}})),
            "tensor 'blk.0.ffn_gate_inp.weight' has shape [64, 5], expected [64, 4]");
  const auto wider = [](gguf::Writer& g) {
    g.set_uint32("qwen3moe.expert_feed_forward_length", 40);
  };
  EXPECT_EQ(load_error(write_model(s, w, wider)),
            "tensor 'blk.0.ffn_gate_exps.weight' has shape [64, 32, 4], expected [64, 40, 4]");
  ArchSpec biased = s;
  biased.qkv_bias = true;
  EXPECT_EQ(load_error(write_model(biased, make_weights(biased))),
            "tensor 'blk.0.attn_q.bias': Q/K/V biases in a qwen3moe model are not supported");

  const ArchSpec q2 = qwen2moe_spec();
  const Weights w2 = make_weights(q2);
  EXPECT_EQ(load_error(write_model(q2, w2, {}, {}, {"blk.1.ffn_gate_inp_shexp.weight"})),
            "tensor 'blk.1.ffn_gate_inp_shexp.weight' is missing");
  EXPECT_EQ(load_error(write_model(q2, w2, {}, {{"blk.0.ffn_gate_inp_shexp.weight", {64, 1}}})),
            "tensor 'blk.0.ffn_gate_inp_shexp.weight' has shape [64, 1], expected [64]");
  EXPECT_EQ(load_error(write_model(q2, w2, {}, {{"blk.0.ffn_down_shexp.weight", {32, 64}}})),
            "tensor 'blk.0.ffn_down_shexp.weight' has shape [32, 64], expected [48, 64]");
  ArchSpec no_len = q2;  // neither the shared width nor feed_forward_length
  no_len.ff = 0;
  no_len.ff_shexp = 0;
  Weights w3 = make_weights(qwen2moe_spec());
  EXPECT_EQ(load_error(write_model(no_len, w3)),
            "metadata 'qwen2moe.expert_shared_feed_forward_length' is missing, and so is "
            "'qwen2moe.feed_forward_length' that would stand in for it");
}

// Pipeline stages of a MoE model are the whole model's forward cut in two;
// tensor-parallel ranks are refused.
TEST(Moe, PipelineStagesButNoTensorParallelism) {
  const ArchSpec s = qwen2moe_spec();
  const Weights w = make_weights(s);
  const std::vector<uint8_t> bytes = write_model(s, w);
  auto whole = load_bytes(bytes);
  ASSERT_TRUE(whole) << whole.status().message();
  const auto want = run(*whole->model);

  auto f = gguf::File::parse(bytes);
  ASSERT_TRUE(f);
  const auto file = std::shared_ptr<const gguf::File>(std::move(*f));
  ShardSpec tp;
  tp.tp_size = 2;
  auto refused = Model::load(file, LoadOptions{1, tp});
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.status().message(),
            "a mixture-of-experts model (qwen2moe) cannot be split over tensor-parallel ranks; "
            "pipeline stages can");

  ShardSpec first, second;
  first.layer_end = 1;
  second.layer_begin = 1;
  auto a = Model::load(file, LoadOptions{2, first});
  auto b = Model::load(file, LoadOptions{2, second});
  ASSERT_TRUE(a) << a.status().message();
  ASSERT_TRUE(b) << b.status().message();
  auto kv_a = kv::ContiguousKvCache::create((*a)->kv_shape(), 1, 64, TensorType::F32);
  auto kv_b = kv::ContiguousKvCache::create((*b)->kv_shape(), 1, 64, TensorType::F32);
  ASSERT_TRUE(kv_a && kv_b);
  Batch batch;
  for (size_t i = 0; i < kPrompt.size(); ++i) batch.add(kPrompt[i], (int32_t)i, 0, true);
  std::vector<float> hidden;
  Logits none, lg;
  StageIo io_a;
  io_a.hidden_out = &hidden;
  ASSERT_TRUE((*a)->forward_stage(batch, **kv_a, io_a, none).is_ok());
  StageIo io_b;
  io_b.hidden_in = hidden.data();
  ASSERT_TRUE((*b)->forward_stage(batch, **kv_b, io_b, lg).is_ok());
  ASSERT_EQ(lg.rows(), want.size());
  for (size_t r = 0; r < lg.rows(); ++r)
    EXPECT_EQ(std::vector<float>(lg.row(r).begin(), lg.row(r).end()), want[r]) << r;
}

// ---- make-model writes each of them -----------------------------------------------

TEST(ArchModelgen, WritesEachArchitecture) {
  modelgen::VocabSource vocab;
  vocab.n_vocab = 64;
  vocab.is_byte_token.assign(64, 0);
  vocab.write_metadata = [](gguf::Writer&) {};
  const auto dir = test::temp_dir("arch-modelgen");
  struct Case {
    std::string arch;
    int64_t head_dim;
    std::string rope_freqs;
    std::vector<std::string> has, lacks;
  };
  const std::vector<Case> cases = {
      {"qwen3", 48, "", {"blk.0.attn_q_norm.weight", "blk.1.attn_k_norm.weight"}, {"blk.0.attn_q.bias"}},
      {"phi3", 0, "", {"blk.0.attn_qkv.weight"}, {"blk.0.attn_q.weight", "blk.0.ffn_gate.weight"}},
      {"llama", 0, "llama3", {"rope_freqs.weight", "blk.0.attn_q.weight"}, {"blk.0.attn_qkv.weight"}},
      {"qwen2moe", 0, "",
       {"blk.0.attn_q.bias", "blk.1.ffn_gate_exps.weight", "blk.1.ffn_gate_inp_shexp.weight",
        "blk.0.ffn_down_shexp.weight"},
       {"blk.0.ffn_gate.weight", "blk.0.ffn_down.weight", "blk.0.attn_q_norm.weight"}},
      {"qwen3moe", 48, "",
       {"blk.0.attn_q_norm.weight", "blk.0.ffn_gate_inp.weight", "blk.1.ffn_down_exps.weight"},
       {"blk.0.ffn_up.weight", "blk.0.ffn_up_shexp.weight", "blk.0.attn_q.bias"}},
      {"gemma2", 48, "", {"blk.0.post_attention_norm.weight", "blk.1.post_ffw_norm.weight"},
       {"output.weight", "blk.0.attn_q_norm.weight"}},
      {"gemma3", 48, "", {"blk.0.attn_q_norm.weight", "blk.1.post_ffw_norm.weight"},
       {"output.weight", "blk.0.attn_q.bias"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.arch);
    modelgen::RandomModelSpec spec;
    spec.arch = c.arch;
    spec.dim = 128;
    spec.layers = 2;
    spec.heads = 4;
    spec.kv_heads = 2;
    spec.ffn = 160;
    spec.ctx = 128;
    spec.head_dim = c.head_dim;
    spec.rope_freqs = c.rope_freqs;
    const std::string path = (dir / (c.arch + ".gguf")).string();
    auto sum = modelgen::write_random_model(spec, vocab, path);
    ASSERT_TRUE(sum) << sum.status().message();
    auto f = gguf::File::open(path);
    ASSERT_TRUE(f) << f.status().message();
    for (const std::string& n : c.has) EXPECT_NE((*f)->find_tensor(n), nullptr) << n;
    for (const std::string& n : c.lacks) EXPECT_EQ((*f)->find_tensor(n), nullptr) << n;
    auto l = Model::load(std::shared_ptr<const gguf::File>(std::move(*f)), LoadOptions{1, {}});
    ASSERT_TRUE(l) << l.status().message();
    EXPECT_EQ((*l)->hparams().head_dim, c.head_dim > 0 ? c.head_dim : 32);
    run(**l);
  }
  modelgen::RandomModelSpec bad;
  bad.rope_freqs = "yarn";
  EXPECT_EQ(modelgen::validate(bad).message(), "make-model: unknown --rope-freqs 'yarn' (llama3)");
  bad = {};
  bad.arch = "phi3";
  bad.head_dim = 32;
  bad.dim = 256;
  bad.heads = 4;
  EXPECT_EQ(modelgen::validate(bad).message(), "make-model: phi3 needs heads * head size == dim");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace cairn::model
