// Random-model writer and demo model: layout, types, fallbacks, determinism,
// weight scales, atomic writes.
#include "modelgen/model_builder.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <thread>

#include "core/quant.h"
#include "kernels/type_ops.h"
#include "modelgen/demo_model.h"
#include "test_util.h"

namespace cairn::modelgen {
namespace {

std::vector<char> slurp(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), {}};
}

std::vector<float> to_floats(const gguf::TensorInfo& t) {
  std::vector<float> out(t.n_elements);
  const TypeOps* ops = type_ops(t.type);
  EXPECT_NE(ops, nullptr);
  ops->to_float(t.data, out.data(), static_cast<int64_t>(t.n_elements));
  return out;
}

RandomModelSpec small_spec(TensorType type) {
  RandomModelSpec s;
  s.dim = 256;
  s.layers = 2;
  s.heads = 4;
  s.kv_heads = 2;
  s.ffn = 512;
  s.ctx = 256;
  s.type = type;
  s.seed = 7;
  return s;
}

TEST(ModelBuilder, WritesLlamaLayoutForEveryType) {
  auto dir = test::temp_dir("builder-types");
  for (TensorType type : {TensorType::F32, TensorType::F16, TensorType::Q8_0, TensorType::Q4_0,
                          TensorType::Q4_K, TensorType::Q6_K}) {
    const std::string name(type_info(type).name);
    auto path = (dir / (name + ".gguf")).string();
    auto summary = write_random_model(small_spec(type), demo_vocab(), path);
    ASSERT_TRUE(summary.is_ok()) << summary.status().message();
    EXPECT_TRUE(summary->fallbacks.empty()) << name;
    EXPECT_EQ(summary->bytes, std::filesystem::file_size(path));
    auto file = gguf::File::open(path);
    ASSERT_TRUE(file.is_ok()) << file.status().message();
    const auto& f = **file;
    EXPECT_EQ(f.tensors().size(), 1 + 2 * 9 + 2u);
    const auto* q = f.find_tensor("blk.1.attn_k.weight");
    ASSERT_NE(q, nullptr);
    EXPECT_EQ(q->type, type);
    EXPECT_EQ(q->dims, (std::vector<int64_t>{256, 128}));  // 2 KV heads of 64
    const auto* norm = f.find_tensor("blk.0.ffn_norm.weight");
    ASSERT_NE(norm, nullptr);
    EXPECT_EQ(norm->type, TensorType::F32);
    for (float v : to_floats(*norm)) ASSERT_EQ(v, 1.0f);
    EXPECT_EQ(f.find_tensor("blk.0.attn_q.bias"), nullptr);
    EXPECT_EQ(*f.get_string("general.architecture").value(), "llama");
    EXPECT_EQ(*f.get_uint("llama.attention.head_count_kv").value(), 2u);
    EXPECT_EQ(*f.get_uint("llama.rope.dimension_count").value(), 64u);
    EXPECT_EQ(*f.get_string("tokenizer.ggml.model").value(), "llama");
    const auto* embd = f.find_tensor("token_embd.weight");
    ASSERT_NE(embd, nullptr);
    EXPECT_EQ(embd->dims[1], demo_vocab().n_vocab);
  }
}

TEST(ModelBuilder, WeightScalesAndZeroByteRows) {
  auto dir = test::temp_dir("builder-scales");
  auto path = (dir / "m.gguf").string();
  ASSERT_TRUE(write_random_model(small_spec(TensorType::F32), demo_vocab(), path).is_ok());
  auto file = gguf::File::open(path);
  ASSERT_TRUE(file.is_ok());
  auto sd = [](const std::vector<float>& v) {
    double s = 0;
    for (float x : v) s += double(x) * x;
    return std::sqrt(s / v.size());
  };
  EXPECT_NEAR(sd(to_floats(*(*file)->find_tensor("blk.0.ffn_down.weight"))), 1 / std::sqrt(512.0),
              0.002);
  EXPECT_NEAR(sd(to_floats(*(*file)->find_tensor("blk.0.attn_q.weight"))), 1 / std::sqrt(256.0),
              0.002);
  EXPECT_NEAR(sd(to_floats(*(*file)->find_tensor("token_embd.weight"))), 1.0, 0.01);
  // Output rows of byte tokens (ids 3..258 in the demo vocab) are zero, others are not.
  const auto out = to_floats(*(*file)->find_tensor("output.weight"));
  auto row_abs = [&](int r) {
    double s = 0;
    for (int i = 0; i < 256; ++i) s += std::fabs(out[r * 256 + i]);
    return s;
  };
  EXPECT_EQ(row_abs(3), 0.0);
  EXPECT_EQ(row_abs(258), 0.0);
  EXPECT_GT(row_abs(2), 0.0);
  EXPECT_GT(row_abs(259), 0.0);
}

// --quiet-from/--quiet-scale: the quiet layers' output projections are
// scaled, everything else is the same-seed model's, and a shallower model of
// the same seed holds exactly the deep one's first layers, embeddings and head.
TEST(ModelBuilder, QuietLayersAndASameSeedShallowDraft) {
  auto dir = test::temp_dir("builder-quiet");
  RandomModelSpec deep = small_spec(TensorType::F32);
  deep.layers = 3;
  deep.quiet_from = 1;
  deep.quiet_scale = 0.25f;
  RandomModelSpec shallow = small_spec(TensorType::F32);
  shallow.layers = 1;
  const auto dp = (dir / "deep.gguf").string(), sp = (dir / "shallow.gguf").string();
  ASSERT_TRUE(write_random_model(deep, demo_vocab(), dp).is_ok());
  ASSERT_TRUE(write_random_model(shallow, demo_vocab(), sp).is_ok());
  auto d = gguf::File::open(dp);
  auto s = gguf::File::open(sp);
  ASSERT_TRUE(d.is_ok() && s.is_ok());
  for (const char* name : {"token_embd.weight", "output.weight", "blk.0.attn_output.weight",
                           "blk.0.ffn_down.weight", "blk.0.attn_q.weight"})
    EXPECT_EQ(to_floats(*(*d)->find_tensor(name)), to_floats(*(*s)->find_tensor(name))) << name;
  const auto q1 = to_floats(*(*d)->find_tensor("blk.1.attn_q.weight"));
  const auto o1 = to_floats(*(*d)->find_tensor("blk.2.attn_output.weight"));
  const auto f1 = to_floats(*(*d)->find_tensor("blk.1.ffn_down.weight"));
  auto max_abs = [](const std::vector<float>& v) {
    float m = 0;
    for (float x : v) m = std::max(m, std::fabs(x));
    return m;
  };
  // uniform(+-sqrt(3) sd): attn_q untouched, the projections a quarter of it.
  EXPECT_NEAR(max_abs(q1), std::sqrt(3.0f) / 16.0f, 0.01f);
  EXPECT_NEAR(max_abs(o1), 0.25f * std::sqrt(3.0f) / 16.0f, 0.003f);
  EXPECT_NEAR(max_abs(f1), 0.25f * std::sqrt(3.0f) / std::sqrt(512.0f), 0.003f);
}

TEST(ModelBuilder, Qwen2HasBiasesAndItsRopeBase) {
  auto dir = test::temp_dir("builder-qwen2");
  auto spec = small_spec(TensorType::Q8_0);
  spec.arch = "qwen2";
  auto path = (dir / "q.gguf").string();
  ASSERT_TRUE(write_random_model(spec, demo_vocab(), path).is_ok());
  auto file = gguf::File::open(path);
  ASSERT_TRUE(file.is_ok());
  for (const char* n : {"blk.0.attn_q.bias", "blk.1.attn_k.bias", "blk.1.attn_v.bias"}) {
    const auto* t = (*file)->find_tensor(n);
    ASSERT_NE(t, nullptr) << n;
    EXPECT_EQ(t->type, TensorType::F32);
  }
  EXPECT_EQ((*file)->find_tensor("blk.0.attn_k.bias")->dims, std::vector<int64_t>{128});
  EXPECT_EQ(*(*file)->get_float("qwen2.rope.freq_base").value(), 1e6);
}

TEST(ModelBuilder, RowsThatDoNotFitFallBack) {
  EXPECT_EQ(storage_type(TensorType::Q4_K, 512), TensorType::Q4_K);
  // llama.cpp's quantizer's fallbacks.
  EXPECT_EQ(storage_type(TensorType::Q4_K, 64), TensorType::Q5_0);
  EXPECT_EQ(storage_type(TensorType::Q5_K, 896), TensorType::Q5_1);
  EXPECT_EQ(storage_type(TensorType::Q3_K, 896), TensorType::Q4_0);
  EXPECT_EQ(storage_type(TensorType::Q2_K, 96), TensorType::Q4_0);
  EXPECT_EQ(storage_type(TensorType::IQ4_XS, 96), TensorType::IQ4_NL);
  EXPECT_EQ(storage_type(TensorType::Q6_K, 96), TensorType::Q8_0);
  EXPECT_EQ(storage_type(TensorType::Q6_K, 100), TensorType::F16);
  EXPECT_EQ(storage_type(TensorType::Q4_0, 48), TensorType::F16);
  EXPECT_EQ(storage_type(TensorType::F16, 7), TensorType::F16);

  auto dir = test::temp_dir("builder-fallback");
  auto spec = small_spec(TensorType::Q4_K);
  spec.ffn = 320;  // ffn_down rows of 320 are not a multiple of 256
  auto path = (dir / "f.gguf").string();
  auto summary = write_random_model(spec, demo_vocab(), path);
  ASSERT_TRUE(summary.is_ok()) << summary.status().message();
  ASSERT_EQ(summary->fallbacks.size(), 2u);
  EXPECT_EQ(summary->fallbacks[0].tensor, "blk.0.ffn_down.weight");
  EXPECT_EQ(summary->fallbacks[0].used, TensorType::Q5_0);
  auto file = gguf::File::open(path);
  ASSERT_TRUE(file.is_ok());
  EXPECT_EQ((*file)->find_tensor("blk.1.ffn_down.weight")->type, TensorType::Q5_0);
  EXPECT_EQ((*file)->find_tensor("blk.1.ffn_up.weight")->type, TensorType::Q4_K);
}

// Q4_K_M: Q4_K except the output and, in the layers llama.cpp gives more
// bits (the first and last eighth, every third between), attn_v and ffn_down.
TEST(ModelBuilder, Q4KMStoresTheMoreBitsTensorsInQ6K) {
  std::vector<int64_t> more;
  for (int64_t l = 0; l < 22; ++l)
    if (more_bits_layer(l, 22)) more.push_back(l);
  EXPECT_EQ(more, (std::vector<int64_t>{0, 1, 4, 7, 10, 13, 16, 19, 20, 21}));

  auto dir = test::temp_dir("builder-q4km");
  auto spec = small_spec(TensorType::Q4_K);
  spec.mix = KMix::Q4_K_M;
  spec.layers = 9;  // more bits: 0 (first eighth), 3 and 6 (every third), 7 and 8 (last eighth)
  auto path = (dir / "m.gguf").string();
  auto summary = write_random_model(spec, demo_vocab(), path);
  ASSERT_TRUE(summary.is_ok()) << summary.status().message();
  EXPECT_TRUE(summary->fallbacks.empty());
  auto file = gguf::File::open(path);
  ASSERT_TRUE(file.is_ok());
  const auto type_of = [&](const std::string& name) { return (*file)->find_tensor(name)->type; };
  EXPECT_EQ(type_of("output.weight"), TensorType::Q6_K);
  EXPECT_EQ(type_of("token_embd.weight"), TensorType::Q4_K);
  for (int64_t l = 0; l < spec.layers; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    const bool more = l == 0 || l == 3 || l == 6 || l == 7 || l == 8;
    const TensorType want = more ? TensorType::Q6_K : TensorType::Q4_K;
    EXPECT_EQ(type_of(b + "attn_v.weight"), want) << l;
    EXPECT_EQ(type_of(b + "ffn_down.weight"), want) << l;
    EXPECT_EQ(type_of(b + "attn_q.weight"), TensorType::Q4_K) << l;
    EXPECT_EQ(type_of(b + "ffn_up.weight"), TensorType::Q4_K) << l;
  }
}

// Q3_K_M and Q5_K_M as llama.cpp's quantizer makes them for a llama model.
TEST(ModelBuilder, Q3KMAndQ5KMMixes) {
  EXPECT_EQ(mix_type(KMix::Q5_K_M, TensorType::Q5_K, "ffn_down", 0, 9), TensorType::Q6_K);
  EXPECT_EQ(mix_type(KMix::Q5_K_M, TensorType::Q5_K, "ffn_down", 1, 9), TensorType::Q5_K);
  EXPECT_EQ(mix_type(KMix::Q5_K_M, TensorType::Q5_K, "attn_q", 0, 9), TensorType::Q5_K);
  EXPECT_EQ(mix_type(KMix::Q3_K_M, TensorType::Q3_K, "attn_v", 1, 32), TensorType::Q5_K);
  EXPECT_EQ(mix_type(KMix::Q3_K_M, TensorType::Q3_K, "attn_v", 2, 32), TensorType::Q4_K);
  EXPECT_EQ(mix_type(KMix::Q3_K_M, TensorType::Q3_K, "ffn_down", 1, 32), TensorType::Q5_K);
  EXPECT_EQ(mix_type(KMix::Q3_K_M, TensorType::Q3_K, "ffn_down", 2, 32), TensorType::Q4_K);
  EXPECT_EQ(mix_type(KMix::Q3_K_M, TensorType::Q3_K, "attn_output", 5, 32), TensorType::Q4_K);
  EXPECT_EQ(mix_type(KMix::Q3_K_M, TensorType::Q3_K, "ffn_up", 5, 32), TensorType::Q3_K);
  EXPECT_EQ(mix_type(KMix::Q3_K_M, TensorType::Q3_K, "output", 0, 32), TensorType::Q6_K);

  auto dir = test::temp_dir("builder-q3km");
  auto spec = small_spec(TensorType::Q3_K);
  spec.mix = KMix::Q3_K_M;
  spec.layers = 3;
  spec.ffn = 384;  // ffn_down rows of 384: Q4_K falls back to Q5_0, Q5_K to Q5_1
  auto path = (dir / "m.gguf").string();
  auto summary = write_random_model(spec, demo_vocab(), path);
  ASSERT_TRUE(summary.is_ok()) << summary.status().message();
  auto file = gguf::File::open(path);
  ASSERT_TRUE(file.is_ok());
  const auto type_of = [&](const std::string& name) { return (*file)->find_tensor(name)->type; };
  EXPECT_EQ(type_of("blk.0.ffn_down.weight"), TensorType::Q5_0);  // Q4_K (0 < 3/16 is false)
  EXPECT_EQ(type_of("blk.0.attn_v.weight"), TensorType::Q5_K);
  EXPECT_EQ(type_of("blk.2.attn_v.weight"), TensorType::Q4_K);
  EXPECT_EQ(type_of("blk.1.attn_output.weight"), TensorType::Q4_K);
  EXPECT_EQ(type_of("blk.1.ffn_up.weight"), TensorType::Q3_K);
  EXPECT_EQ(type_of("output.weight"), TensorType::Q6_K);
  EXPECT_EQ(*(*file)->get_uint("general.file_type").value(), 12u);
}

// The MoE architectures: expert tensors of the right shapes, the router kept
// in F32 (llama.cpp's quantizer never quantizes it), ffn_down_exps and
// ffn_down_shexp under ffn_down's rule of a mix.
TEST(ModelBuilder, MixtureOfExpertsLayoutAndTypes) {
  auto dir = test::temp_dir("builder-moe");
  auto spec = small_spec(TensorType::Q4_K);
  spec.arch = "qwen2moe";
  spec.mix = KMix::Q4_K_M;
  spec.layers = 3;
  spec.experts = 4;
  spec.experts_used = 2;
  spec.expert_ffn = 256;
  spec.shared_ffn = 512;
  auto path = (dir / "m.gguf").string();
  auto summary = write_random_model(spec, demo_vocab(), path);
  ASSERT_TRUE(summary.is_ok()) << summary.status().message();
  auto file = gguf::File::open(path);
  ASSERT_TRUE(file.is_ok());
  const auto& f = **file;
  const auto* exps = f.find_tensor("blk.1.ffn_down_exps.weight");
  ASSERT_NE(exps, nullptr);
  EXPECT_EQ(exps->dims, (std::vector<int64_t>{256, 256, 4}));
  EXPECT_EQ(f.find_tensor("blk.1.ffn_gate_exps.weight")->dims, (std::vector<int64_t>{256, 256, 4}));
  EXPECT_EQ(f.find_tensor("blk.1.ffn_gate_inp.weight")->type, TensorType::F32);
  EXPECT_EQ(f.find_tensor("blk.1.ffn_gate_inp_shexp.weight")->type, TensorType::F32);
  EXPECT_EQ(f.find_tensor("blk.1.ffn_up_shexp.weight")->dims, (std::vector<int64_t>{256, 512}));
  // Of 3 layers, more bits in the last (the last eighth), not the first two.
  EXPECT_EQ(f.find_tensor("blk.2.ffn_down_exps.weight")->type, TensorType::Q6_K);
  EXPECT_EQ(f.find_tensor("blk.1.ffn_down_exps.weight")->type, TensorType::Q4_K);
  EXPECT_EQ(f.find_tensor("blk.2.ffn_down_shexp.weight")->type, TensorType::Q6_K);
  EXPECT_EQ(f.find_tensor("blk.0.ffn_down_shexp.weight")->type, TensorType::Q4_K);
  EXPECT_EQ(f.find_tensor("blk.1.ffn_up_exps.weight")->type, TensorType::Q4_K);
  EXPECT_EQ(f.find_tensor("blk.0.ffn_gate.weight"), nullptr);
  EXPECT_EQ(*f.get_uint("qwen2moe.expert_count").value(), 4u);
  EXPECT_EQ(*f.get_uint("qwen2moe.expert_used_count").value(), 2u);
  EXPECT_EQ(*f.get_uint("qwen2moe.expert_feed_forward_length").value(), 256u);
  EXPECT_EQ(*f.get_uint("qwen2moe.expert_shared_feed_forward_length").value(), 512u);
  // Defaults: 8 experts, 2 used, both widths --ffn; qwen3moe has no shared expert.
  spec = small_spec(TensorType::F32);
  spec.arch = "qwen3moe";
  ASSERT_TRUE(write_random_model(spec, demo_vocab(), path).is_ok());
  auto g = gguf::File::open(path);
  ASSERT_TRUE(g.is_ok());
  EXPECT_EQ((*g)->find_tensor("blk.0.ffn_up_exps.weight")->dims,
            (std::vector<int64_t>{256, 512, 8}));
  EXPECT_EQ(*(*g)->get_uint("qwen3moe.expert_used_count").value(), 2u);
  EXPECT_FALSE((*g)->get_uint("qwen3moe.expert_shared_feed_forward_length").value().has_value());
  EXPECT_EQ((*g)->find_tensor("blk.0.ffn_up_shexp.weight"), nullptr);
}

TEST(ModelBuilder, SameSeedSameBytes) {
  auto dir = test::temp_dir("builder-seed");
  auto spec = small_spec(TensorType::Q4_0);
  ASSERT_TRUE(write_random_model(spec, demo_vocab(), (dir / "a.gguf").string()).is_ok());
  ASSERT_TRUE(
      write_random_model(spec, demo_vocab(), (dir / "b.gguf").string(), 3).is_ok());  // threads
  spec.seed = 8;
  ASSERT_TRUE(write_random_model(spec, demo_vocab(), (dir / "c.gguf").string()).is_ok());
  EXPECT_EQ(slurp(dir / "a.gguf"), slurp(dir / "b.gguf"));
  EXPECT_NE(slurp(dir / "a.gguf"), slurp(dir / "c.gguf"));
  // No temp files are left behind.
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), {}), 3);
}

TEST(ModelBuilder, RejectsBadSpecs) {
  auto dir = test::temp_dir("builder-bad");
  auto path = (dir / "x.gguf").string();
  auto rejects = [&](auto mutate, const char* needle) {
    auto s = small_spec(TensorType::F32);
    mutate(s);
    auto r = write_random_model(s, demo_vocab(), path);
    ASSERT_FALSE(r.is_ok()) << needle;
    EXPECT_NE(r.status().message().find(needle), std::string::npos) << r.status().message();
  };
  rejects([](RandomModelSpec& s) { s.arch = "gpt2"; }, "--arch");
  rejects([](RandomModelSpec& s) { s.dim = 0; }, "--dim");
  rejects([](RandomModelSpec& s) { s.heads = 3; }, "multiple of --heads");
  rejects([](RandomModelSpec& s) { s.kv_heads = 3; }, "--kv-heads");
  rejects([](RandomModelSpec& s) { s.dim = 12, s.heads = 4; }, "even");
  rejects([](RandomModelSpec& s) { s.layers = 0; }, "--layers");
  rejects([](RandomModelSpec& s) { s.ffn = -1; }, "--ffn");
  rejects([](RandomModelSpec& s) { s.ctx = 0; }, "--ctx");
  rejects([](RandomModelSpec& s) { s.type = TensorType::IQ2_XS; }, "quantize");
  rejects([](RandomModelSpec& s) { s.experts = 4; }, "need a mixture-of-experts --arch");
  rejects([](RandomModelSpec& s) { s.arch = "qwen3moe", s.shared_ffn = 64; }, "--shared-ffn needs");
  rejects([](RandomModelSpec& s) { s.arch = "qwen3moe", s.experts = 4, s.experts_used = 5; },
          "--experts-used must be in [1, --experts]");
  rejects([](RandomModelSpec& s) { s.arch = "qwen3moe", s.experts = 2000; }, "--experts must be");
  rejects([](RandomModelSpec& s) { s.arch = "qwen2moe", s.head_dim = 128; },
          "qwen2moe needs heads * head size == dim");
  rejects([](RandomModelSpec& s) { s.pooling = "max"; }, "unknown --pooling");
  rejects([](RandomModelSpec& s) { s.pooling = "rank"; }, "--pooling rank needs --arch bert");
  rejects([](RandomModelSpec& s) { s.arch = "bert", s.rope_freqs = "llama3"; }, "--arch bert");
  EXPECT_FALSE(std::filesystem::exists(path));
  auto s = small_spec(TensorType::F32);
  EXPECT_FALSE(
      write_random_model(s, demo_vocab(), (dir / "no" / "such" / "dir.gguf").string()).is_ok());
}

TEST(ModelBuilder, VocabFromGgufCopiesTokenizerKeys) {
  auto dir = test::temp_dir("builder-vocab");
  auto src = (dir / "src.gguf").string();
  ASSERT_TRUE(write_random_model(small_spec(TensorType::F32), demo_vocab(), src).is_ok());
  auto file = gguf::File::open(src);
  ASSERT_TRUE(file.is_ok());
  auto vocab = vocab_from_gguf(std::shared_ptr<const gguf::File>(std::move(*file)));
  ASSERT_TRUE(vocab.is_ok()) << vocab.status().message();
  EXPECT_EQ(vocab->n_vocab, demo_vocab().n_vocab);
  EXPECT_EQ(vocab->is_byte_token, demo_vocab().is_byte_token);
  auto dst = (dir / "dst.gguf").string();
  auto spec = small_spec(TensorType::F16);
  spec.arch = "qwen2";
  ASSERT_TRUE(write_random_model(spec, *vocab, dst).is_ok());
  auto a = gguf::File::open(src);
  auto b = gguf::File::open(dst);
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  EXPECT_EQ(*(*a)->get_string_array("tokenizer.ggml.tokens").value(),
            *(*b)->get_string_array("tokenizer.ggml.tokens").value());
  EXPECT_EQ(*(*a)->get_float_array("tokenizer.ggml.scores").value(),
            *(*b)->get_float_array("tokenizer.ggml.scores").value());
  EXPECT_EQ(*(*b)->get_uint("tokenizer.ggml.eos_token_id").value(), 2u);
  EXPECT_EQ(*(*b)->get_bool("tokenizer.ggml.add_bos_token").value(), true);

  // A file without a vocabulary is refused.
  gguf::Writer w;
  w.set_string("general.architecture", "llama");
  auto empty = (dir / "empty.gguf").string();
  ASSERT_TRUE(w.write(empty).is_ok());
  auto e = gguf::File::open(empty);
  ASSERT_TRUE(e.is_ok());
  auto ev = vocab_from_gguf(std::shared_ptr<const gguf::File>(std::move(*e)));
  ASSERT_FALSE(ev.is_ok());
  EXPECT_NE(ev.status().message().find("tokenizer.ggml.tokens"), std::string::npos);
}

// bert: the converter's tensor names and keys, LayerNorm weights near 1,
// the classification head only with rank pooling.
TEST(ModelBuilder, BertLayoutPoolingAndHead) {
  auto dir = test::temp_dir("builder-bert");
  for (const char* pooling : {"", "cls", "rank"}) {
    SCOPED_TRACE(pooling);
    auto spec = small_spec(TensorType::F32);
    spec.arch = "bert";
    spec.kv_heads = 4;
    spec.pooling = pooling;
    const auto path = (dir / (std::string("b") + pooling + ".gguf")).string();
    auto r = write_random_model(spec, demo_vocab(), path);
    ASSERT_TRUE(r.is_ok()) << r.status().message();
    auto file = gguf::File::open(path);
    ASSERT_TRUE(file.is_ok());
    const gguf::File& f = **file;
    EXPECT_EQ(*f.get_uint("bert.pooling_type").value(),
              std::string(pooling) == "rank" ? 4u : std::string(pooling) == "cls" ? 2u : 1u);
    EXPECT_EQ(*f.get_bool("bert.attention.causal").value(), false);
    EXPECT_NEAR(*f.get_float("bert.attention.layer_norm_epsilon").value(), 1e-12, 1e-15);
    EXPECT_EQ(*f.get_uint("tokenizer.ggml.token_type_count").value(), 2u);
    for (const char* name :
         {"token_embd.weight", "token_types.weight", "position_embd.weight",
          "token_embd_norm.weight", "token_embd_norm.bias", "blk.1.attn_q.bias",
          "blk.1.attn_output_norm.bias", "blk.1.ffn_down.bias", "blk.1.layer_output_norm.weight"})
      EXPECT_NE(f.find_tensor(name), nullptr) << name;
    EXPECT_EQ(f.find_tensor("output.weight"), nullptr);
    EXPECT_EQ(f.find_tensor("cls.output.weight") != nullptr, std::string(pooling) == "rank");
    const auto norm = to_floats(*f.find_tensor("blk.0.layer_output_norm.weight"));
    for (float v : norm) EXPECT_NEAR(v, 1.0f, 0.11f);
    EXPECT_EQ(f.find_tensor("position_embd.weight")->dims[1], spec.ctx);
  }
}

TEST(DemoModel, VocabularyShape) {
  VocabSource v = demo_vocab();
  EXPECT_GT(v.n_vocab, 259 + 300);
  EXPECT_LT(v.n_vocab, 4096);
  int bytes = 0;
  for (auto b : v.is_byte_token) bytes += b;
  EXPECT_EQ(bytes, 256);
  EXPECT_EQ(v.is_byte_token[3], 1);
  EXPECT_EQ(v.is_byte_token[258], 1);
}

TEST(DemoModel, WrittenOnceAndReused) {
  auto dir = test::temp_dir("demo-cache");
  auto p = ensure_demo_model(dir);
  ASSERT_TRUE(p.is_ok()) << p.status().message();
  EXPECT_EQ(std::filesystem::path(*p).filename(), kDemoModelFile);
  const auto first = slurp(*p);
  const auto mtime = std::filesystem::last_write_time(*p);
  auto again = ensure_demo_model(dir);
  ASSERT_TRUE(again.is_ok());
  EXPECT_EQ(std::filesystem::last_write_time(*again), mtime);

  // A damaged file is replaced by a good one.
  { std::ofstream(*p, std::ios::binary | std::ios::trunc) << "GGUF junk"; }
  auto repaired = ensure_demo_model(dir);
  ASSERT_TRUE(repaired.is_ok());
  EXPECT_EQ(slurp(*repaired), first);
}

TEST(DemoModel, ConcurrentFirstRunsAreSafe) {
  auto dir = test::temp_dir("demo-race");
  std::vector<std::thread> threads;
  std::vector<int> ok(6, 0);
  for (int i = 0; i < 6; ++i)
    threads.emplace_back([&, i] { ok[i] = ensure_demo_model(dir).is_ok(); });
  for (auto& t : threads) t.join();
  for (int v : ok) EXPECT_EQ(v, 1);
  EXPECT_TRUE(gguf::File::open((dir / kDemoModelFile).string()).is_ok());
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), {}), 1);  // no temp files left
}

TEST(DemoModel, CacheDirFromEnvironment) {
  const char* old = std::getenv("CAIRN_CACHE_DIR");
  std::string saved = old ? old : "";
  setenv("CAIRN_CACHE_DIR", "/tmp/cairn-cache-test", 1);
  auto d = default_cache_dir();
  ASSERT_TRUE(d.is_ok());
  EXPECT_EQ(*d, std::filesystem::path("/tmp/cairn-cache-test"));
  unsetenv("CAIRN_CACHE_DIR");
  setenv("XDG_CACHE_HOME", "/tmp/xdg", 1);
  EXPECT_EQ(*default_cache_dir(), std::filesystem::path("/tmp/xdg/cairn"));
  unsetenv("XDG_CACHE_HOME");
  if (old) setenv("CAIRN_CACHE_DIR", saved.c_str(), 1);
}

}  // namespace
}  // namespace cairn::modelgen
