// modelgen/model_builder.cpp — random-weight GGUF models: tensor plan, values, streamed write.
#include "modelgen/model_builder.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string_view>

#include "core/quant.h"
#include "core/thread_pool.h"
#include "kernels/type_ops.h"
#include "model/tensor_names.h"

namespace cairn::modelgen {

namespace {

constexpr uint64_t kAlignment = 32;
constexpr int64_t kMaxDim = 1 << 16;
constexpr int64_t kMaxLayers = 1024;
constexpr int64_t kMaxFfn = 1 << 20;
constexpr int64_t kMaxCtx = 1 << 24;
constexpr int64_t kMaxExperts = 1024;
constexpr int64_t kChunkElems = 1 << 22;  // floats generated per write (16 MiB)

struct ArchDefaults {
  std::string_view arch;
  float rope_base;
  float norm_eps;
  bool qkv_bias;
  bool qk_norm = false;    // qwen3
  bool fused = false;      // phi3: attn_qkv, and gate/up stacked in ffn_up
  bool moe = false;        // router and experts in place of the FFN
  bool shared_expert = false;  // qwen2moe
  bool gemma = false;  // post-norms, output tied to token_embd, sliding window and soft-capping keys
  bool oai = false;    // gpt-oss: output bias, sinks, router and expert biases, sliding window
  bool bert = false;   // the encoder (plan_bert_tensors); norm_eps is its LayerNorm's
};
constexpr std::array<ArchDefaults, 10> kArchs = {{
    {"llama", 10000.0f, 1e-5f, false},
    {"qwen2", 1000000.0f, 1e-6f, true},
    {"qwen3", 1000000.0f, 1e-6f, false, true},
    {"phi3", 10000.0f, 1e-5f, false, false, true},
    {"qwen2moe", 1000000.0f, 1e-6f, true, false, false, true, true},
    {"qwen3moe", 1000000.0f, 1e-6f, false, true, false, true, false},
    {"gemma2", 10000.0f, 1e-6f, false, false, false, false, false, true},
    {"gemma3", 1000000.0f, 1e-6f, false, true, false, false, false, true},
    {"gpt-oss", 150000.0f, 1e-5f, true, false, false, true, false, false, true},
    {"bert", 10000.0f, 1e-12f, true, false, false, false, false, false, false, true},
}};

// GGUF's pooling_type values (llama.cpp's enum).
int pooling_id(std::string_view p) {
  return p == "mean" ? 1 : p == "cls" ? 2 : p == "last" ? 3 : p == "rank" ? 4 : -1;
}

// The bert tensor set as llama.cpp's converter names it (model/bert.cpp
// reads these names): LayerNorm weights near 1, biases small, two token types.
constexpr int64_t kBertTokenTypes = 2;

const ArchDefaults* find_arch(std::string_view a) {
  for (const auto& d : kArchs)
    if (d.arch == a) return &d;
  return nullptr;
}

// llama.cpp's general.file_type ids (LLAMA_FTYPE_*) for an all-one-type model.
struct FileType {
  TensorType type;
  uint32_t ftype;
};
constexpr std::array<FileType, 16> kFileTypes = {{
    {TensorType::F32, 0},     {TensorType::F16, 1},     {TensorType::Q4_0, 2},
    {TensorType::Q4_1, 3},    {TensorType::Q8_0, 7},    {TensorType::Q5_0, 8},
    {TensorType::Q5_1, 9},    {TensorType::Q2_K, 10},   {TensorType::Q3_K, 11},
    {TensorType::Q4_K, 14},   {TensorType::Q5_K, 16},   {TensorType::Q6_K, 18},
    {TensorType::IQ4_NL, 25}, {TensorType::IQ4_XS, 30}, {TensorType::BF16, 32},
    {TensorType::MXFP4, 38},
}};

// How a tensor's values are made.
// NearOne: 1 + uniform(-stddev, stddev) (per-head norms, so a swapped or
// skipped weight shows); Given: TensorPlan::values.
enum class Fill { Uniform, Ones, UniformZeroByteRows, NearOne, Given };

struct TensorPlan {
  std::string name;
  std::vector<int64_t> dims;  // dims[0] = row length
  TensorType type;
  Fill fill;
  float stddev;
  TensorType wanted = TensorType::F32;  // 2-D: the type asked for (type differs on a fallback)
  std::vector<float> values = {};       // Fill::Given
};

// splitmix64: a small, fully specified generator, so a seed gives the same
// weights with every standard library.
struct SplitMix {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  float uniform_pm1() {  // [-1, 1)
    return static_cast<float>(next() >> 40) * 0x1.0p-23f - 1.0f;
  }
};

uint64_t fnv1a(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

int64_t head_dim_of(const RandomModelSpec& s) {
  return s.head_dim > 0 ? s.head_dim : s.dim / s.heads;
}

// The MoE sizes with their defaults filled in.
struct ExpertSizes {
  int64_t n = 0, used = 0, ffn = 0, shared_ffn = 0;
};
ExpertSizes experts_of(const RandomModelSpec& s) {
  ExpertSizes e;
  e.n = s.experts > 0 ? s.experts : 8;
  e.used = s.experts_used > 0 ? s.experts_used : std::min<int64_t>(2, e.n);
  e.ffn = s.expert_ffn > 0 ? s.expert_ffn : s.ffn;
  e.shared_ffn = s.shared_ffn > 0 ? s.shared_ffn : s.ffn;
  return e;
}

std::vector<TensorPlan> plan_bert_tensors(const RandomModelSpec& s, int64_t n_vocab) {
  const int64_t E = s.dim, q = s.heads * head_dim_of(s), kv = s.kv_heads * head_dim_of(s);
  std::vector<TensorPlan> p;
  const auto matrix = [&](std::string name, int64_t in, int64_t out) {
    p.push_back({std::move(name), {in, out}, storage_type(s.type, in), Fill::Uniform,
                 1.0f / std::sqrt(static_cast<float>(in)), s.type});
  };
  const auto norm = [&](const std::string& name, int64_t n) {
    p.push_back({name + ".weight", {n}, TensorType::F32, Fill::NearOne, 0.1f});
    p.push_back({name + ".bias", {n}, TensorType::F32, Fill::Uniform, 0.02f});
  };
  const auto bias = [&](std::string name, int64_t n) {
    p.push_back({std::move(name), {n}, TensorType::F32, Fill::Uniform, 0.02f});
  };
  p.push_back({"token_embd.weight", {E, n_vocab}, storage_type(s.type, E), Fill::Uniform, 1.0f,
               s.type});
  p.push_back({"token_types.weight", {E, kBertTokenTypes}, TensorType::F32, Fill::Uniform, 0.5f});
  p.push_back({"position_embd.weight", {E, s.ctx}, TensorType::F32, Fill::Uniform, 0.5f});
  norm("token_embd_norm", E);
  for (int64_t il = 0; il < s.layers; ++il) {
    const std::string b = "blk." + std::to_string(il) + ".";
    matrix(b + "attn_q.weight", E, q);
    bias(b + "attn_q.bias", q);
    matrix(b + "attn_k.weight", E, kv);
    bias(b + "attn_k.bias", kv);
    matrix(b + "attn_v.weight", E, kv);
    bias(b + "attn_v.bias", kv);
    matrix(b + "attn_output.weight", q, E);
    bias(b + "attn_output.bias", E);
    norm(b + "attn_output_norm", E);
    matrix(b + "ffn_up.weight", E, s.ffn);
    bias(b + "ffn_up.bias", s.ffn);
    matrix(b + "ffn_down.weight", s.ffn, E);
    bias(b + "ffn_down.bias", E);
    norm(b + "layer_output_norm", E);
  }
  if (s.pooling == "rank") {  // the classification head, one score
    matrix("cls.weight", E, E);
    bias("cls.bias", E);
    matrix("cls.output.weight", E, 1);
    bias("cls.output.bias", 1);
  }
  return p;
}

std::vector<TensorPlan> plan_tensors(const RandomModelSpec& s, int64_t n_vocab) {
  if (find_arch(s.arch)->bert) return plan_bert_tensors(s, n_vocab);
  const int64_t head_dim = head_dim_of(s);
  const ArchDefaults& ad = *find_arch(s.arch);
  model::TensorSizes sizes;
  sizes.embd = s.dim;
  sizes.vocab = n_vocab;
  sizes.q = s.heads * head_dim;
  sizes.kv = s.kv_heads * head_dim;
  sizes.ff = s.ffn;
  sizes.head = head_dim;
  sizes.rope_pairs = head_dim / 2;
  const ExpertSizes ex = experts_of(s);
  sizes.expert = ex.n;
  sizes.ff_exp = ex.ffn;
  sizes.ff_shexp = ex.shared_ffn;
  model::TensorFeatures features;
  features.qkv_bias = ad.qkv_bias;
  features.qk_norm = ad.qk_norm;
  features.fused_qkv = ad.fused;
  features.fused_ffn = ad.fused;
  features.rope_freqs = !s.rope_freqs.empty();
  features.moe = ad.moe;
  features.shared_expert = ad.shared_expert;
  features.post_norms = ad.gemma;
  features.tied_output = ad.gemma;
  features.oai = ad.oai;
  sizes.heads = s.heads;
  std::vector<TensorPlan> p;
  // Names, shapes and order come from the loader's table; only how each
  // tensor's values are made and stored is decided here.
  model::for_each_tensor(
      s.layers, features, [&](model::TensorRole role, int64_t layer) {
        using R = model::TensorRole;
        std::vector<int64_t> dims = model::tensor_dims(role, sizes);
        std::string name = model::tensor_name(role, layer);
        if (role == R::RopeFreqs) {
          p.push_back({std::move(name), std::move(dims), TensorType::F32, Fill::Given, 0.0f,
                       TensorType::F32, llama3_rope_factors(head_dim, ad.rope_base)});
          return;
        }
        if (role == R::AttnQNorm || role == R::AttnKNorm) {
          p.push_back({std::move(name), std::move(dims), TensorType::F32, Fill::NearOne, 0.25f});
          return;
        }
        if (role == R::AttnSinks) {  // sink logits O(1), as the scores they join
          p.push_back({std::move(name), std::move(dims), TensorType::F32, Fill::Uniform, 1.0f});
          return;
        }
        if (role == R::FfnGateExpsBias || role == R::FfnUpExpsBias || role == R::FfnDownExpsBias) {
          // Biases, one row per expert: F32 whatever the type, as the converter keeps them.
          p.push_back({std::move(name), std::move(dims), TensorType::F32, Fill::Uniform, 0.02f,
                       TensorType::F32});
          return;
        }
        if (role == R::FfnGateInpShexp) {  // the shared expert's gate: logits O(1)
          p.push_back({std::move(name), std::move(dims), TensorType::F32, Fill::Uniform,
                       1.0f / std::sqrt(static_cast<float>(s.dim))});
          return;
        }
        if (dims.size() == 1) {  // norms (ones) and biases (small), always F32
          const bool norm = role == R::AttnNorm || role == R::FfnNorm || role == R::OutputNorm ||
                            role == R::AttnPostNorm || role == R::FfnPostNorm;
          p.push_back({std::move(name), std::move(dims), TensorType::F32,
                       norm ? Fill::Ones : Fill::Uniform, norm ? 0.0f : 0.02f});
          return;
        }
        const int64_t in = dims[0];
        if (role == R::FfnGateInp) {  // the router: never quantized (llama.cpp's rule)
          p.push_back({std::move(name), std::move(dims), TensorType::F32, Fill::Uniform,
                       1.0f / std::sqrt(static_cast<float>(in)), TensorType::F32});
          return;
        }
        if (role == R::TokEmbd) {
          // Unit-variance embeddings against 1/sqrt(fan_in) matrices keep the
          // residual stream and the logits O(1), so sampling from a random
          // model stays varied.
          p.push_back({std::move(name), std::move(dims), storage_type(s.type, in), Fill::Uniform,
                       1.0f, s.type});
          return;
        }
        const char* mix_role = role == R::Output      ? "output"
                               : role == R::AttnV     ? "attn_v"
                               : role == R::AttnOutput ? "attn_output"
                               : role == R::AttnQkv   ? "attn_qkv"
                               : role == R::FfnDown || role == R::FfnDownExps ||
                                         role == R::FfnDownShexp
                                   ? "ffn_down"
                                   : "";
        const TensorType t = mix_type(s.mix, s.type, mix_role, layer, s.layers);
        const bool quiet = s.quiet_from >= 0 && layer >= s.quiet_from &&
                           (role == R::AttnOutput || role == R::FfnDown);
        p.push_back({std::move(name), std::move(dims), storage_type(t, in),
                     role == R::Output ? Fill::UniformZeroByteRows : Fill::Uniform,
                     (quiet ? s.quiet_scale : 1.0f) / std::sqrt(static_cast<float>(in)), t});
      });
  if (s.rope_scaling == "longrope") {  // Phi-3 128k's pair (not in the shared table: phi3 only)
    const int64_t pairs = head_dim / 2;
    std::vector<float> lf((size_t)pairs), sf((size_t)pairs);
    for (int64_t i = 0; i < pairs; ++i) {
      // Rising with the wavelength, as the published factors do: long up to
      // the context factor, short up to a tenth of the way there.
      const float x = pairs > 1 ? (float)i / (float)(pairs - 1) : 0.0f;
      lf[(size_t)i] = 1.0f + (s.rope_scaling_factor - 1.0f) * x * x;
      sf[(size_t)i] = 1.0f + 0.1f * (s.rope_scaling_factor - 1.0f) * x;
    }
    p.push_back({"rope_factors_long.weight", {pairs}, TensorType::F32, Fill::Given, 0.0f,
                 TensorType::F32, std::move(lf)});
    p.push_back({"rope_factors_short.weight", {pairs}, TensorType::F32, Fill::Given, 0.0f,
                 TensorType::F32, std::move(sf)});
  }
  return p;
}

// Closes and removes the temp file unless the write got to the rename.
struct TempFile {
  std::string path;
  std::FILE* f = nullptr;
  bool keep = false;
  ~TempFile() {
    if (f) std::fclose(f);
    if (!keep) std::remove(path.c_str());
  }
};

Status write_all(std::FILE* f, const void* data, size_t n, const std::string& path) {
  if (n > 0 && std::fwrite(data, 1, n, f) != n)
    return Status::error("cannot write " + path + ": " + std::strerror(errno));
  return Status::ok();
}

Status write_tensor(std::FILE* f, const TensorPlan& t, const VocabSource& vocab, uint64_t seed,
                    const std::string& path, ThreadPool& pool, std::vector<float>& floats,
                    std::vector<uint8_t>& bytes) {
  const TypeOps* ops = type_ops(t.type);
  const int64_t row = t.dims[0];
  int64_t rows = 1;
  for (size_t d = 1; d < t.dims.size(); ++d) rows *= t.dims[d];
  const size_t row_size = *row_bytes(t.type, row);
  const int64_t rows_per_chunk = std::max<int64_t>(1, kChunkElems / row);
  SplitMix rng{seed ^ fnv1a(t.name)};
  const float scale = t.stddev * std::sqrt(3.0f);  // uniform(-a, a) has sd a/sqrt(3)
  for (int64_t r0 = 0; r0 < rows; r0 += rows_per_chunk) {
    const int64_t n_rows = std::min(rows_per_chunk, rows - r0);
    floats.resize(static_cast<size_t>(n_rows * row));
    for (int64_t r = 0; r < n_rows; ++r) {
      float* dst = floats.data() + r * row;
      const bool zero = t.fill == Fill::UniformZeroByteRows &&
                        static_cast<size_t>(r0 + r) < vocab.is_byte_token.size() &&
                        vocab.is_byte_token[r0 + r];
      for (int64_t i = 0; i < row; ++i) {
        const float u = rng.uniform_pm1();  // drawn even for zero rows: the stream stays aligned
        dst[i] = t.fill == Fill::Ones      ? 1.0f
                 : t.fill == Fill::NearOne ? 1.0f + u * t.stddev
                 : t.fill == Fill::Given   ? t.values[(size_t)((r0 + r) * row + i)]
                 : zero                    ? 0.0f
                                           : u * scale;
      }
    }
    // Values are drawn in order above; only quantizing (the slow part for
    // K-quants) runs in parallel, so the bytes never depend on the threads.
    bytes.resize(row_size * n_rows);
    pool.parallel_for(n_rows, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r)
        ops->from_float(floats.data() + r * row, bytes.data() + r * row_size, row);
    });
    CAIRN_RETURN_IF_ERROR(write_all(f, bytes.data(), bytes.size(), path));
  }
  return Status::ok();
}

}  // namespace

Result<VocabSource> vocab_from_gguf(std::shared_ptr<const gguf::File> file) {
  auto tokens = file->get_string_array("tokenizer.ggml.tokens");
  if (!tokens.is_ok()) return tokens.status();
  if (!tokens->has_value() || (*tokens)->empty())
    return Status::error("vocabulary file has no tokenizer.ggml.tokens");
  VocabSource v;
  v.n_vocab = static_cast<int64_t>((*tokens)->size());
  auto model = file->get_string("tokenizer.ggml.model");
  if (!model.is_ok()) return model.status();
  if (model->has_value()) v.model = std::string(**model);
  v.is_byte_token.assign(v.n_vocab, 0);
  auto types = file->get_int_array("tokenizer.ggml.token_type");
  if (!types.is_ok()) return types.status();
  if (types->has_value()) {
    const auto& tt = **types;
    for (size_t i = 0; i < tt.size() && i < v.is_byte_token.size(); ++i)
      v.is_byte_token[i] = tt[i] == 6;  // llama.cpp's LLAMA_TOKEN_TYPE_BYTE
  }
  v.write_metadata = [file](gguf::Writer& w) {
    for (const auto& kv : file->metadata())
      if (kv.key.starts_with("tokenizer.")) w.copy_value(kv.key, kv.value);
  };
  return v;
}

Status validate(const RandomModelSpec& s) {
  auto bad = [](const std::string& m) { return Status::error("make-model: " + m); };
  if (!find_arch(s.arch))
    return bad("unknown --arch '" + s.arch +
               "' (llama, qwen2, qwen3, phi3, qwen2moe, qwen3moe, gemma2, gemma3, gpt-oss or "
               "bert)");
  if (!s.pooling.empty() && pooling_id(s.pooling) < 0)
    return bad("unknown --pooling '" + s.pooling + "' (mean, cls, last, rank)");
  if (s.pooling == "rank" && s.arch != "bert")
    return bad("--pooling rank needs --arch bert (its classification head)");
  if (s.arch == "bert" && (!s.rope_freqs.empty() || !s.rope_scaling.empty() ||
                           s.sliding_window != 0 || s.head_dim != 0 || s.mix != KMix::None))
    return bad("--arch bert takes no RoPE, sliding-window, head-dim or K-quant mix options");
  if (s.dim < 1 || s.dim > kMaxDim) return bad("--dim must be in [1, 65536]");
  if (s.layers < 1 || s.layers > kMaxLayers) return bad("--layers must be in [1, 1024]");
  if (s.heads < 1 || s.heads > s.dim) return bad("--heads must be in [1, dim]");
  if (s.head_dim < 0 || s.head_dim > 4096) return bad("--head-dim must be in [0, 4096]");
  if (s.head_dim == 0 && s.dim % s.heads != 0) return bad("--dim must be a multiple of --heads");
  if (head_dim_of(s) % 2 != 0) return bad("the head size must be even for RoPE");
  if (s.arch == "phi3" && s.heads * head_dim_of(s) != s.dim)
    return bad("phi3 needs heads * head size == dim");
  if (s.arch == "qwen2moe" && s.heads * head_dim_of(s) != s.dim)
    return bad("qwen2moe needs heads * head size == dim");
  if (!s.rope_freqs.empty() && s.rope_freqs != "llama3")
    return bad("unknown --rope-freqs '" + s.rope_freqs + "' (llama3)");
  if (s.kv_heads < 1 || s.heads % s.kv_heads != 0)
    return bad("--heads must be a multiple of --kv-heads");
  if (s.ffn < 1 || s.ffn > kMaxFfn) return bad("--ffn must be in [1, 1048576]");
  if (s.ctx < 1 || s.ctx > kMaxCtx) return bad("--ctx must be in [1, 16777216]");
  const ArchDefaults& ad = *find_arch(s.arch);
  if (!ad.moe && (s.experts != 0 || s.experts_used != 0 || s.expert_ffn != 0))
    return bad("--experts, --experts-used and --expert-ffn need a mixture-of-experts --arch "
               "(qwen2moe, qwen3moe, gpt-oss)");
  if (!ad.shared_expert && s.shared_ffn != 0) return bad("--shared-ffn needs --arch qwen2moe");
  if (!ad.gemma && (s.attn_softcap != 0 || s.final_softcap != 0))
    return bad("--attn-softcap and --final-softcap need a gemma --arch");
  if (!ad.gemma && !ad.oai && s.arch != "llama" && s.sliding_window != 0)
    return bad("--sliding-window needs --arch llama, gemma2, gemma3 or gpt-oss");
  if (s.rope_scaling.empty() && (s.rope_scaling_factor != 0 || s.rope_orig_ctx != 0))
    return bad("--rope-scaling-factor and --rope-orig-ctx need --rope-scaling");
  if (!s.rope_scaling.empty() && s.rope_scaling != "linear" && s.rope_scaling != "yarn" &&
      s.rope_scaling != "longrope")
    return bad("unknown --rope-scaling '" + s.rope_scaling + "' (linear, yarn, longrope)");
  if (s.rope_scaling == "longrope" && s.arch != "phi3")
    return bad("--rope-scaling longrope needs --arch phi3");
  if (!s.rope_scaling.empty() &&
      !(s.rope_scaling_factor > 0 && std::isfinite(s.rope_scaling_factor)))
    return bad("--rope-scaling needs a positive --rope-scaling-factor");
  if (s.rope_orig_ctx != 0 && s.rope_scaling != "yarn" && s.rope_scaling != "longrope")
    return bad("--rope-orig-ctx needs --rope-scaling yarn or longrope");
  if (s.rope_orig_ctx < 0 || s.rope_orig_ctx > kMaxCtx)
    return bad("--rope-orig-ctx must be in [1, 16777216]");
  if (s.sliding_window < 0 || s.sliding_window > kMaxCtx)
    return bad("--sliding-window must be in [1, 16777216]");
  if (!(s.attn_softcap >= 0) || !(s.final_softcap >= 0) || !std::isfinite(s.attn_softcap) ||
      !std::isfinite(s.final_softcap))
    return bad("--attn-softcap and --final-softcap must be positive");
  if (s.arch == "gemma3" && s.attn_softcap != 0)
    return bad("--attn-softcap needs --arch gemma2 (gemma3 has no attention soft-capping)");
  if (s.experts < 0 || s.experts > kMaxExperts) return bad("--experts must be in [1, 1024]");
  const ExpertSizes ex = experts_of(s);
  if (s.experts_used < 0 || ex.used > ex.n) return bad("--experts-used must be in [1, --experts]");
  if (s.expert_ffn < 0 || s.expert_ffn > kMaxFfn)
    return bad("--expert-ffn must be in [1, 1048576]");
  if (s.shared_ffn < 0 || s.shared_ffn > kMaxFfn)
    return bad("--shared-ffn must be in [1, 1048576]");
  const TypeOps* ops = type_ops(s.type);
  if (!ops || !ops->from_float)
    return bad("cairn cannot quantize to " + std::string(type_info(s.type).name));
  return Status::ok();
}

std::vector<float> llama3_rope_factors(int64_t n_rot, double base, double factor,
                                       double low_freq_factor, double high_freq_factor,
                                       double original_ctx) {
  // A pair's wavelength in positions decides how much its frequency is
  // stretched: short ones (local detail) keep theirs, long ones are slowed by
  // `factor`, and between the two thresholds the inverse stretch moves
  // linearly with original_ctx / wavelength.
  const double pi = 3.14159265358979323846;
  const double long_wavelen = original_ctx / low_freq_factor;
  const double short_wavelen = original_ctx / high_freq_factor;
  std::vector<float> out;
  for (int64_t i = 0; i < n_rot / 2; ++i) {
    const double freq = std::pow(base, -2.0 * (double)i / (double)n_rot);
    const double wavelen = 2.0 * pi / freq;
    double divisor = 1.0;
    if (wavelen > long_wavelen) {
      divisor = factor;
    } else if (wavelen >= short_wavelen) {
      const double t =
          (original_ctx / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor);
      divisor = 1.0 / ((1.0 - t) / factor + t);
    }
    out.push_back((float)divisor);
  }
  return out;
}

bool more_bits_layer(int64_t layer, int64_t n_layers) {
  return layer < n_layers / 8 || layer >= 7 * n_layers / 8 || (layer - n_layers / 8) % 3 == 2;
}

TensorType storage_type(TensorType wanted, int64_t row) {
  if (row_bytes(wanted, row)) return wanted;
  struct Fallback {
    TensorType from, to;
  };
  constexpr Fallback kFallbacks[] = {
      {TensorType::Q2_K, TensorType::Q4_0}, {TensorType::Q3_K, TensorType::Q4_0},
      {TensorType::Q4_K, TensorType::Q5_0}, {TensorType::Q5_K, TensorType::Q5_1},
      {TensorType::Q6_K, TensorType::Q8_0}, {TensorType::IQ4_XS, TensorType::IQ4_NL},
  };
  for (const Fallback& f : kFallbacks)
    if (f.from == wanted && row_bytes(f.to, row)) return f.to;
  return TensorType::F16;
}

TensorType mix_type(KMix mix, TensorType base, std::string_view role, int64_t layer,
                    int64_t n_layers) {
  if (mix == KMix::None) return base;
  if (role == "output") return TensorType::Q6_K;
  if (role == "attn_qkv")  // fused Q/K/V: one step up from the base
    return mix == KMix::Q3_K_M ? TensorType::Q4_K : mix == KMix::Q4_K_M ? TensorType::Q5_K : TensorType::Q6_K;
  if (mix == KMix::Q3_K_M) {
    if (role == "attn_output") return TensorType::Q4_K;
    if (role == "attn_v") return layer < 2 ? TensorType::Q5_K : TensorType::Q4_K;
    if (role == "ffn_down") return layer < n_layers / 16 ? TensorType::Q5_K : TensorType::Q4_K;
    return base;
  }
  if ((role == "attn_v" || role == "ffn_down") && more_bits_layer(layer, n_layers))
    return TensorType::Q6_K;
  return base;
}

Result<BuildSummary> write_random_model(const RandomModelSpec& spec, const VocabSource& vocab,
                                        const std::string& path, int n_threads) {
  CAIRN_RETURN_IF_ERROR(validate(spec));
  if (vocab.n_vocab < 1 || vocab.n_vocab > (1 << 24) || !vocab.write_metadata)
    return Status::error("make-model: the vocabulary source has no usable tokens");
  const ArchDefaults& ad = *find_arch(spec.arch);
  const std::vector<TensorPlan> plan = plan_tensors(spec, vocab.n_vocab);

  gguf::Writer w;
  const std::string a = spec.arch;
  w.set_string("general.architecture", a);
  w.set_string("general.name", !spec.name.empty()
                                   ? spec.name
                                   : "cairn-random-" + a + "-" + std::to_string(spec.dim) + "x" +
                                         std::to_string(spec.layers));
  // llama.cpp's LLAMA_FTYPE_MOSTLY_Q3_K_M, _Q4_K_M, _Q5_K_M.
  if (spec.mix != KMix::None) {
    w.set_uint32("general.file_type", spec.mix == KMix::Q3_K_M   ? 12
                                      : spec.mix == KMix::Q4_K_M ? 15
                                                                 : 17);
  } else {
    for (const auto& ft : kFileTypes)
      if (ft.type == spec.type) w.set_uint32("general.file_type", ft.ftype);
  }
  w.set_uint32("general.quantization_version", 2);
  w.set_uint32(a + ".context_length", static_cast<uint32_t>(spec.ctx));
  w.set_uint32(a + ".embedding_length", static_cast<uint32_t>(spec.dim));
  w.set_uint32(a + ".block_count", static_cast<uint32_t>(spec.layers));
  w.set_uint32(a + ".feed_forward_length", static_cast<uint32_t>(spec.ffn));
  w.set_uint32(a + ".attention.head_count", static_cast<uint32_t>(spec.heads));
  if (ad.bert) {  // the keys llama.cpp's converter writes for BERT
    w.set_float32(a + ".attention.layer_norm_epsilon", ad.norm_eps);
    w.set_bool(a + ".attention.causal", false);
    w.set_uint32(a + ".attention.head_count_kv", static_cast<uint32_t>(spec.kv_heads));
    w.set_uint32(a + ".pooling_type",
                 static_cast<uint32_t>(pooling_id(spec.pooling.empty() ? "mean" : spec.pooling)));
    vocab.write_metadata(w);
    w.set_uint32("tokenizer.ggml.token_type_count", static_cast<uint32_t>(kBertTokenTypes));
    // An uncased BERT vocabulary, said outright: the reference lowercases
    // only when this key says so (cairn's default for WordPiece without it).
    if (vocab.model == "bert")
      w.set_bool("tokenizer.ggml.normalizer.lowercase", true);
  } else {
    if (!spec.pooling.empty())
      w.set_uint32(a + ".pooling_type", static_cast<uint32_t>(pooling_id(spec.pooling)));
    w.set_uint32(a + ".attention.head_count_kv", static_cast<uint32_t>(spec.kv_heads));
    w.set_uint32(a + ".rope.dimension_count", static_cast<uint32_t>(head_dim_of(spec)));
    if (spec.head_dim > 0) {
      w.set_uint32(a + ".attention.key_length", static_cast<uint32_t>(spec.head_dim));
      w.set_uint32(a + ".attention.value_length", static_cast<uint32_t>(spec.head_dim));
    }
    if (ad.moe) {
      const ExpertSizes ex = experts_of(spec);
      w.set_uint32(a + ".expert_count", static_cast<uint32_t>(ex.n));
      w.set_uint32(a + ".expert_used_count", static_cast<uint32_t>(ex.used));
      w.set_uint32(a + ".expert_feed_forward_length", static_cast<uint32_t>(ex.ffn));
      if (ad.shared_expert)
        w.set_uint32(a + ".expert_shared_feed_forward_length", static_cast<uint32_t>(ex.shared_ffn));
    }
    if (ad.gemma && spec.arch == "gemma2") {  // as the converter writes them (Gemma 2's defaults)
      w.set_uint32(a + ".attention.sliding_window",
                   static_cast<uint32_t>(spec.sliding_window > 0 ? spec.sliding_window : 4096));
      w.set_float32(a + ".attn_logit_softcapping", spec.attn_softcap > 0 ? spec.attn_softcap : 50.0f);
      w.set_float32(a + ".final_logit_softcapping",
                    spec.final_softcap > 0 ? spec.final_softcap : 30.0f);
    } else if (ad.oai) {  // gpt-oss: the released files' window unless asked otherwise
      w.set_uint32(a + ".attention.sliding_window",
                   static_cast<uint32_t>(spec.sliding_window > 0 ? spec.sliding_window : 128));
    } else if (ad.gemma) {  // gemma3: each key only when asked for
      if (spec.sliding_window > 0)
        w.set_uint32(a + ".attention.sliding_window", static_cast<uint32_t>(spec.sliding_window));
      if (spec.final_softcap > 0)
        w.set_float32(a + ".final_logit_softcapping", spec.final_softcap);
    }
    if (spec.arch == "llama" && spec.sliding_window > 0)
      w.set_uint32(a + ".attention.sliding_window", static_cast<uint32_t>(spec.sliding_window));
    w.set_float32(a + ".rope.freq_base", ad.rope_base);
    if (!spec.rope_scaling.empty()) {  // as the converter writes them
      w.set_string(a + ".rope.scaling.type", spec.rope_scaling);
      const int64_t orig =
          spec.rope_orig_ctx > 0
              ? spec.rope_orig_ctx
              : std::max<int64_t>(1, (int64_t)((double)spec.ctx / spec.rope_scaling_factor));
      if (spec.rope_scaling == "longrope") {
        // The factor lives in the tensors; the converter's attention factor.
        const double scale = (double)spec.ctx / (double)orig;
        const double attn =
            scale > 1 && orig > 1 ? std::sqrt(1 + std::log(scale) / std::log((double)orig)) : 1.0;
        w.set_float32(a + ".rope.scaling.attn_factor", static_cast<float>(attn));
      } else {
        w.set_float32(a + ".rope.scaling.factor", spec.rope_scaling_factor);
      }
      if (spec.rope_scaling != "linear")
        w.set_uint32(a + ".rope.scaling.original_context_length", static_cast<uint32_t>(orig));
    }
    w.set_float32(a + ".attention.layer_norm_rms_epsilon", ad.norm_eps);
    vocab.write_metadata(w);
  }

  // Tensors are declared, then their data is streamed to the file one at a
  // time, so a model of real size never sits in memory.
  BuildSummary summary;
  uint64_t data_bytes = 0;
  for (const TensorPlan& t : plan) {
    CAIRN_RETURN_IF_ERROR(w.declare_tensor(t.name, t.type, t.dims));
    uint64_t elems = 1;
    for (int64_t d : t.dims) elems *= static_cast<uint64_t>(d);
    const uint64_t size = *row_bytes(t.type, t.dims[0]) * (elems / t.dims[0]);
    data_bytes += size + gguf::Writer::tensor_padding(size, kAlignment);
    summary.n_params += elems;
    if (t.dims.size() >= 2 && t.type != t.wanted)
      summary.fallbacks.push_back({t.name, t.wanted, t.type});
  }
  const std::vector<uint8_t> header = w.header_bytes(kAlignment);
  summary.bytes = header.size() + data_bytes;

  namespace fs = std::filesystem;
  std::random_device rd;
  TempFile tmp;
  tmp.path = path + ".tmp-" + std::to_string(getpid()) + "-" + std::to_string(rd());
  tmp.f = std::fopen(tmp.path.c_str(), "wb");
  if (!tmp.f) return Status::error("cannot create " + tmp.path + ": " + std::strerror(errno));
  CAIRN_RETURN_IF_ERROR(write_all(tmp.f, header.data(), header.size(), tmp.path));
  std::vector<float> floats;
  std::vector<uint8_t> bytes;
  ThreadPool pool(n_threads);
  static const uint8_t kZeros[kAlignment] = {};
  uint64_t written = 0;
  for (const TensorPlan& t : plan) {
    const long before = std::ftell(tmp.f);
    CAIRN_RETURN_IF_ERROR(write_tensor(tmp.f, t, vocab, spec.seed, tmp.path, pool, floats, bytes));
    written += static_cast<uint64_t>(std::ftell(tmp.f) - before);
    const uint64_t pad = gguf::Writer::tensor_padding(written, kAlignment);
    CAIRN_RETURN_IF_ERROR(write_all(tmp.f, kZeros, pad, tmp.path));
    written += pad;
  }
  if (std::fflush(tmp.f) != 0 || std::fclose(tmp.f) != 0) {
    tmp.f = nullptr;
    return Status::error("cannot write " + tmp.path + ": " + std::strerror(errno));
  }
  tmp.f = nullptr;
  std::error_code ec;
  fs::rename(tmp.path, path, ec);
  if (ec) return Status::error("cannot move " + tmp.path + " to " + path + ": " + ec.message());
  tmp.keep = true;
  return summary;
}

}  // namespace cairn::modelgen
