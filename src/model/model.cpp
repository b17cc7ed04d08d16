// model/model.cpp — hyper-parameters from GGUF metadata, the architecture table, Model::load.
#include "model/model.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "model/arch.h"
#include "model/tensor_names.h"

namespace cairn::model {
namespace {

constexpr ArchSpec kArchs[] = {
    {"llama", kernels::RopeStyle::Norm, &load_llama, false, &read_llama_hparams},
    {"qwen2", kernels::RopeStyle::Neox, &load_qwen2},
    {"qwen3", kernels::RopeStyle::Neox, &load_qwen3},
    {"phi3", kernels::RopeStyle::Neox, &load_phi3},
    {"qwen2moe", kernels::RopeStyle::Neox, &load_qwen2moe, /*moe=*/true},
    {"qwen3moe", kernels::RopeStyle::Neox, &load_qwen3moe, /*moe=*/true},
    {"gemma2", kernels::RopeStyle::Neox, &load_gemma2, false, &read_gemma2_hparams},
    {"gemma3", kernels::RopeStyle::Neox, &load_gemma3, false, &read_gemma3_hparams},
    {"gpt-oss", kernels::RopeStyle::Neox, &load_gptoss, /*moe=*/true, &read_gptoss_hparams},
    {"bert", kernels::RopeStyle::Norm, &load_bert, false, &read_bert_hparams,
     "attention.layer_norm_epsilon"},
};

// Generous ceilings: they keep products of sizes far from overflow while
// admitting any real model (the tensor-shape checks do the precise work).
constexpr int64_t kMaxEmbd = int64_t{1} << 20;
constexpr int64_t kMaxLayers = 4096;
constexpr int64_t kMaxHeads = 4096;
constexpr int64_t kMaxHeadDim = 4096;
constexpr int64_t kMaxFf = int64_t{1} << 22;
constexpr int64_t kMaxCtx = int64_t{1} << 28;
constexpr int64_t kMaxExperts = 1024;  // the reference's limit too

// RoPE scaling as the reference reads and applies it: rope.scaling.type
// (none, linear, yarn, longrope; absent: linear when a factor is present), its factor,
// rope.scaling.attn_factor, and for yarn the original context and the yarn_*
// keys as the reference's grok/mistral3 read them (its llama/qwen/phi3/gemma
// graphs keep the defaults: ext factor 1, betas 32 and 1, no log multiplier;
// a file that writes other values gets them here). yarn_attn_factor counts
// only with ext factor 0: with the blend the reference's context replaces it.
Status read_rope_scaling(const MetaReader& m, HParams& hp) {
  std::optional<std::string_view> type;
  CAIRN_ASSIGN_OR_RETURN(type, m.text("rope.scaling.type"));
  double factor = 0;
  CAIRN_ASSIGN_OR_RETURN(factor, m.real("rope.scaling.factor", 0.0));
  if (factor == 0) {
    CAIRN_ASSIGN_OR_RETURN(factor, m.real("rope.scale_linear", 0.0));  // older files
  }
  // The context YaRN's ramp and LongRoPE's choice of factors are measured against.
  CAIRN_ASSIGN_OR_RETURN(hp.n_ctx_orig_yarn, m.count("rope.scaling.original_context_length",
                                                     kMaxCtx, hp.n_ctx_train));
  const std::string_view t = type.value_or(factor != 0 ? "linear" : "none");
  if (t == "none") return Status::ok();
  const bool yarn = t == "yarn";
  // longrope: the factors are tensors (phi3; llama with this type), its
  // attention factor rope.scaling.attn_factor; otherwise it scales as linear.
  hp.rope_longrope = t == "longrope";
  if (t != "linear" && !yarn && !hp.rope_longrope)
    return Status::error("metadata '" + m.key("rope.scaling.type") + "' = '" + std::string(t) +
                         "' is not supported (none, linear, yarn, longrope)");
  if (factor < 0)
    return Status::error("metadata '" + m.key("rope.scaling.factor") + "' must be positive");
  // No factor: llama.cpp treats it as 1.
  if (factor != 0) hp.rope_freq_scale = (float)(1.0 / factor);
  const auto positive = [&](const char* key, double fallback) -> Result<float> {
    double v = 0;
    CAIRN_ASSIGN_OR_RETURN(v, m.real(key, fallback));
    if (!(v > 0) || !std::isfinite((float)v))
      return Status::error("metadata '" + m.key(key) + "' must be positive, got " +
                           std::to_string(v));
    return (float)v;
  };
  float attn_factor = 1.0f;
  CAIRN_ASSIGN_OR_RETURN(attn_factor, positive("rope.scaling.attn_factor", 1.0));
  if (!yarn) {
    hp.yarn_attn_factor = attn_factor;
    return Status::ok();
  }
  double ext = 0, log_mul = 0;
  CAIRN_ASSIGN_OR_RETURN(ext, m.real("rope.scaling.yarn_ext_factor", -1.0));
  hp.yarn_ext_factor = ext < 0 ? 1.0f : (float)ext;  // negative: not set, as the reference
  CAIRN_ASSIGN_OR_RETURN(hp.yarn_beta_fast, positive("rope.scaling.yarn_beta_fast", 32.0));
  CAIRN_ASSIGN_OR_RETURN(hp.yarn_beta_slow, positive("rope.scaling.yarn_beta_slow", 1.0));
  CAIRN_ASSIGN_OR_RETURN(log_mul, m.real("rope.scaling.yarn_log_multiplier", 0.0));
  float attn = 1.0f;
  CAIRN_ASSIGN_OR_RETURN(attn, positive("rope.scaling.yarn_attn_factor", 1.0));
  if (hp.yarn_ext_factor != 0.0f) {
    // llama_context's attention factor, in its float order (the reference's
    // C fuses a * b + c): 0.1 ln(s) + 1 (or the ratio of two such with the log
    // multiplier), divided by what the rope op multiplies in again.
    const float s = 1.0f / hp.rope_freq_scale;
    const auto mscale = [&](float mul) {
      return s <= 1.0f ? 1.0f : std::fma(0.1f * mul, std::log(s), 1.0f);
    };
    attn = log_mul != 0 ? mscale(1.0f) / mscale((float)log_mul) : mscale(1.0f);
    attn *= 1.0f / std::fma(0.1f, std::log(s), 1.0f);
  }
  hp.yarn_attn_factor = attn * attn_factor;
  if (!(hp.yarn_attn_factor > 0) || !std::isfinite(hp.yarn_attn_factor))
    return Status::error("metadata '" + m.key("rope.scaling.yarn_log_multiplier") +
                         "' gives no positive attention factor");
  return Status::ok();
}

// The expert counts and widths of a mixture-of-experts model. Like the
// reference for qwen2moe/qwen3moe, expert_weights_scale and
// expert_gating_func are not read (softmax routing, no scale); expert groups
// (DeepSeek's group-limited routing) are refused rather than ignored.
Status read_experts(const MetaReader& m, HParams& hp) {
  CAIRN_ASSIGN_OR_RETURN(hp.n_expert, m.count("expert_count", kMaxExperts));
  CAIRN_ASSIGN_OR_RETURN(hp.n_expert_used, m.count("expert_used_count", kMaxExperts));
  if (hp.n_expert_used > hp.n_expert)
    return Status::error("metadata '" + m.key("expert_used_count") + "' = " +
                         std::to_string(hp.n_expert_used) + " exceeds '" + m.key("expert_count") +
                         "' = " + std::to_string(hp.n_expert));
  int64_t groups = 0;
  CAIRN_ASSIGN_OR_RETURN(groups, m.count("expert_group_count", kMaxExperts, -1));
  if (groups > 1)
    return Status::error("metadata '" + m.key("expert_group_count") + "' = " +
                         std::to_string(groups) + ": grouped expert routing is not supported");
  const auto needs_ff = [&](const char* key) -> Status {
    if (hp.n_ff > 0) return Status::ok();
    return Status::error("metadata '" + m.key(key) + "' is missing, and so is '" +
                         m.key("feed_forward_length") + "' that would stand in for it");
  };
  CAIRN_ASSIGN_OR_RETURN(hp.n_ff_exp, m.count("expert_feed_forward_length", kMaxFf, -1));
  if (hp.n_ff_exp < 0) {
    CAIRN_RETURN_IF_ERROR(needs_ff("expert_feed_forward_length"));
    hp.n_ff_exp = hp.n_ff / hp.n_expert_used;  // the reference's default
    if (hp.n_ff_exp == 0)
      return Status::error("metadata '" + m.key("expert_feed_forward_length") +
                           "' is missing and feed_forward_length / expert_used_count is 0");
  }
  CAIRN_ASSIGN_OR_RETURN(hp.n_ff_shexp, m.count("expert_shared_feed_forward_length", kMaxFf, -1));
  if (hp.n_ff_shexp < 0) hp.n_ff_shexp = hp.n_ff;  // 0 when that is absent too
  return Status::ok();
}

// What embeddings need from any architecture: the pooling the file asks
// for (Unspecified when absent) and whether attention is causal.
Status read_embedding_keys(const MetaReader& m, HParams& hp) {
  const std::string pk = m.key("pooling_type");
  auto pooling = m.file().get_uint(pk);
  if (!pooling) return pooling.status().with_context("metadata '" + pk + "'");
  if (pooling->has_value()) {
    const uint64_t v = **pooling;
    if (v > (uint64_t)Pooling::Rank)
      return Status::error("metadata '" + pk + "' = " + std::to_string(v) +
                           " is not a pooling type (0 none, 1 mean, 2 cls, 3 last, 4 rank)");
    hp.pooling = (Pooling)v;
  }
  const std::string ck = m.key("attention.causal");
  auto causal = m.file().get_bool(ck);
  if (!causal) return causal.status().with_context("metadata '" + ck + "'");
  hp.causal = causal->value_or(true);
  return Status::ok();
}

}  // namespace

Status read_swa_pattern(const MetaReader& m, HParams& hp, uint64_t default_period) {
  uint64_t period = default_period;
  const std::string k = m.key("attention.sliding_window_pattern");
  const gguf::Value* v = m.file().find(k);
  // A per-layer array is not read for these architectures (the reference
  // ignores it too and keeps its default period).
  if (v && v->type != gguf::ValueType::ARRAY) {
    auto p = m.file().get_uint(k);
    if (!p) return p.status().with_context("metadata '" + k + "'");
    period = p->value_or(default_period);
  }
  hp.swa_layers.assign((size_t)hp.n_layer, 0);
  for (int64_t il = 0; il < hp.n_layer; ++il)
    hp.swa_layers[(size_t)il] = period == 0 || (uint64_t)il % period < period - 1;
  return Status::ok();
}

const ArchSpec* find_arch(std::string_view name) {
  for (const ArchSpec& a : kArchs)
    if (a.name == name) return &a;
  return nullptr;
}

std::vector<std::string_view> supported_architectures() {
  std::vector<std::string_view> out;
  for (const ArchSpec& a : kArchs) out.push_back(a.name);
  return out;
}

Result<HParams> Model::read_hparams(const gguf::File& file) {
  auto arch_name = file.get_string("general.architecture");
  if (!arch_name) return arch_name.status().with_context("metadata 'general.architecture'");
  if (!arch_name->has_value()) return Status::error("metadata 'general.architecture' is missing");
  const std::string_view name = **arch_name;
  const ArchSpec* spec = find_arch(name);
  if (!spec) {
    std::string known;
    for (const ArchSpec& a : kArchs) known += (known.empty() ? "" : ", ") + std::string(a.name);
    return Status::error("architecture '" + std::string(name) + "' is not supported (" + known + ")");
  }

  HParams hp;
  hp.arch = std::string(name);
  hp.rope_style = spec->rope_style;
  MetaReader m(file, hp.arch);
  CAIRN_ASSIGN_OR_RETURN(hp.n_embd, m.count("embedding_length", kMaxEmbd));
  CAIRN_ASSIGN_OR_RETURN(hp.n_layer, m.count("block_count", kMaxLayers));
  CAIRN_ASSIGN_OR_RETURN(hp.n_head, m.count("attention.head_count", kMaxHeads));
  CAIRN_ASSIGN_OR_RETURN(hp.n_head_kv, m.count("attention.head_count_kv", kMaxHeads, hp.n_head));
  // A mixture-of-experts model's FFN widths are the expert_* keys; its
  // feed_forward_length only stands in for those that are absent.
  CAIRN_ASSIGN_OR_RETURN(hp.n_ff, m.count("feed_forward_length", kMaxFf, spec->moe ? -1 : 0));
  if (hp.n_ff < 0) hp.n_ff = 0;
  CAIRN_ASSIGN_OR_RETURN(hp.n_ctx_train, m.count("context_length", kMaxCtx));

  if (hp.n_head % hp.n_head_kv != 0)
    return Status::error("metadata '" + m.key("attention.head_count") + "' = " +
                         std::to_string(hp.n_head) + " is not a multiple of '" +
                         m.key("attention.head_count_kv") + "' = " + std::to_string(hp.n_head_kv));
  // The head size: attention.key_length where the file has it (Qwen3's heads
  // are wider than embedding_length / head_count), else that quotient. One
  // size serves K, V and Q, so value_length must equal it.
  int64_t key_len = 0, value_len = 0;
  CAIRN_ASSIGN_OR_RETURN(key_len, m.count("attention.key_length", kMaxHeadDim, -1));
  CAIRN_ASSIGN_OR_RETURN(value_len, m.count("attention.value_length", kMaxHeadDim, -1));
  if (key_len < 0 && hp.n_embd % hp.n_head != 0)
    return Status::error("metadata '" + m.key("embedding_length") + "' = " +
                         std::to_string(hp.n_embd) + " is not a multiple of '" +
                         m.key("attention.head_count") + "' = " + std::to_string(hp.n_head));
  hp.head_dim = key_len > 0 ? key_len : hp.n_embd / hp.n_head;
  if (value_len > 0 && value_len != hp.head_dim)
    return Status::error("metadata '" + m.key("attention.value_length") + "' = " +
                         std::to_string(value_len) + " differs from the key head size " +
                         std::to_string(hp.head_dim) + " (not supported)");
  CAIRN_ASSIGN_OR_RETURN(hp.n_rot, m.count("rope.dimension_count", kMaxEmbd, hp.head_dim));
  if (hp.n_rot > hp.head_dim || hp.n_rot % 2 != 0)
    return Status::error("metadata '" + m.key("rope.dimension_count") + "' = " +
                         std::to_string(hp.n_rot) + " must be even and at most the head size " +
                         std::to_string(hp.head_dim));

  if (spec->moe) CAIRN_RETURN_IF_ERROR(read_experts(m, hp));

  double base = 0;
  CAIRN_ASSIGN_OR_RETURN(base, m.real("rope.freq_base", 10000.0));
  if (base <= 0) return Status::error("metadata '" + m.key("rope.freq_base") + "' must be positive");
  hp.rope_freq_base = (float)base;
  CAIRN_RETURN_IF_ERROR(read_rope_scaling(m, hp));

  double eps = 0;
  CAIRN_ASSIGN_OR_RETURN(eps, m.real(spec->eps_key, std::nan("")));
  if (eps <= 0 || eps >= 1)
    return Status::error("metadata '" + m.key(spec->eps_key) +
                         "' must be in (0, 1), got " + std::to_string(eps));
  hp.norm_eps = (float)eps;
  CAIRN_RETURN_IF_ERROR(read_embedding_keys(m, hp));
  if (spec->read_extra) CAIRN_RETURN_IF_ERROR(spec->read_extra(m, hp));

  // The vocabulary size is the embedding's row count; the shape checks of the
  // loader verify the rest of the tensor against n_embd.
  const std::string embd_name = tensor_name(TensorRole::TokEmbd);
  const gguf::TensorInfo* embd = file.find_tensor(embd_name);
  if (!embd) return Status::error("tensor '" + embd_name + "' is missing");
  if (embd->dims.size() != 2 || embd->dims[1] <= 0)
    return Status::error("tensor '" + embd_name + "' must be 2-D [n_embd, n_vocab]");
  hp.n_vocab = embd->dims[1];
  hp.tied_output = file.find_tensor(tensor_name(TensorRole::Output)) == nullptr;
  return hp;
}

Status Model::forward_stage(const Batch&, KvView&, const StageIo&, Logits&) {
  return Status::error("this model cannot run as a shard");
}

Status Model::forward_hidden(const Batch&, KvView&, Logits&) {
  return Status::error("this model cannot make embeddings");
}

Status Model::classify(std::span<const float>, std::vector<float>&) {
  return Status::error("this model has no classification head");
}

Status Model::set_adapters(std::vector<std::shared_ptr<const LoraAdapter>> adapters) {
  if (adapters.empty()) return Status::ok();
  return Status::error("this model cannot apply LoRA adapters at run time");
}

kv::KvShape Model::kv_shape() const {
  auto local = shard_hparams(hparams_, shard_);
  return local.is_ok() ? local->kv_shape() : hparams_.kv_shape();
}

Result<HParams> shard_hparams(const HParams& hp, const ShardSpec& s) {
  const int64_t end = s.layer_end < 0 ? hp.n_layer : s.layer_end;
  if (s.layer_begin < 0 || s.layer_begin >= end || end > hp.n_layer)
    return Status::error("layers [" + std::to_string(s.layer_begin) + ", " + std::to_string(end) +
                         ") are not a range of the model's " + std::to_string(hp.n_layer));
  if (s.tp_size < 1 || s.tp_rank < 0 || s.tp_rank >= s.tp_size)
    return Status::error("tensor-parallel rank " + std::to_string(s.tp_rank) + " of " +
                         std::to_string(s.tp_size) + " is out of range");
  if (hp.n_expert > 0 && s.tp_size > 1)
    return Status::error("a mixture-of-experts model (" + hp.arch +
                         ") cannot be split over tensor-parallel ranks; pipeline stages can");
  const auto divides = [&](int64_t n, const char* what) -> Status {
    if (n % s.tp_size == 0) return Status::ok();
    return Status::error(std::string("the model's ") + what + " (" + std::to_string(n) +
                         ") cannot be split over " + std::to_string(s.tp_size) +
                         " tensor-parallel ranks");
  };
  CAIRN_RETURN_IF_ERROR(divides(hp.n_head, "attention heads"));
  CAIRN_RETURN_IF_ERROR(divides(hp.n_head_kv, "K/V heads"));
  CAIRN_RETURN_IF_ERROR(divides(hp.n_ff, "feed-forward width"));
  if (vocab_range(hp.n_vocab, s.tp_size - 1, s.tp_size).first >= hp.n_vocab)
    return Status::error("a vocabulary of " + std::to_string(hp.n_vocab) + " cannot be split over " +
                         std::to_string(s.tp_size) + " ranks");
  HParams local = hp;
  local.n_layer = end - s.layer_begin;
  local.n_head = hp.n_head / s.tp_size;
  local.n_head_kv = hp.n_head_kv / s.tp_size;
  local.n_ff = hp.n_ff / s.tp_size;
  if (!hp.swa_layers.empty())
    local.swa_layers.assign(hp.swa_layers.begin() + s.layer_begin, hp.swa_layers.begin() + end);
  return local;
}

Result<ShardSpec> shard_for_rank(const HParams& hp, int rank, int rank_size, int stage_size) {
  if (stage_size < 1 || rank_size < stage_size || rank_size % stage_size != 0 || rank < 0 ||
      rank >= rank_size)
    return Status::error("rank " + std::to_string(rank) + " of " + std::to_string(rank_size) +
                         " in " + std::to_string(stage_size) + " stages is not a valid layout");
  if (stage_size > hp.n_layer)
    return Status::error("the model's " + std::to_string(hp.n_layer) + " layers cannot fill " +
                         std::to_string(stage_size) + " pipeline stages");
  const int per_stage = rank_size / stage_size;
  const int stage = rank / per_stage;
  ShardSpec s;
  s.tp_rank = rank % per_stage;
  s.tp_size = per_stage;
  s.layer_begin = stage * hp.n_layer / stage_size;
  s.layer_end = (stage + 1) * hp.n_layer / stage_size;
  CAIRN_RETURN_IF_ERROR(shard_hparams(hp, s).status());
  return s;
}

std::pair<int64_t, int64_t> vocab_range(int64_t n_vocab, int tp_rank, int tp_size) {
  const int64_t chunk = (n_vocab + tp_size - 1) / tp_size;
  const int64_t begin = std::min<int64_t>(n_vocab, chunk * tp_rank);
  return {begin, std::min<int64_t>(n_vocab, begin + chunk)};
}

Result<std::unique_ptr<Model>> Model::load(std::shared_ptr<const gguf::File> file,
                                           const LoadOptions& options) {
  if (!file) return Status::error("no GGUF file given");
  auto hp = read_hparams(*file);
  if (!hp) return hp.status();
  const ArchSpec* spec = find_arch(hp->arch);
  return spec->load(std::move(file), std::move(*hp), options);
}

}  // namespace cairn::model
