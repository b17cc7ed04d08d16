// `cairn make-model OUT ...`: a GGUF with random weights and another file's
// vocabulary (or the built-in demo vocabulary), for tests and benchmarks of
// real shapes. The building itself is modelgen/model_builder.h.
#include <spdlog/spdlog.h>

#include <memory>
#include <optional>

#include "commands.h"
#include "modelgen/demo_model.h"
#include "modelgen/lora_builder.h"
#include "modelgen/model_builder.h"

namespace cairn::cli {

namespace {

struct MakeModelArgs {
  std::string out;
  std::string vocab_from;
  std::string type = "f32";
  int threads = 0;
  modelgen::RandomModelSpec spec;
};

Status make_model(MakeModelArgs& a) {
  // The K-quant mixes: their base type plus llama.cpp's per-tensor choices.
  struct Mix {
    const char* name;
    modelgen::KMix mix;
    TensorType base;
  };
  constexpr Mix kMixes[] = {{"q3_k_m", modelgen::KMix::Q3_K_M, TensorType::Q3_K},
                            {"q4_k_m", modelgen::KMix::Q4_K_M, TensorType::Q4_K},
                            {"q5_k_m", modelgen::KMix::Q5_K_M, TensorType::Q5_K}};
  std::optional<TensorType> type = type_from_name(a.type);
  for (const Mix& m : kMixes) {
    if (a.type == m.name) {
      a.spec.mix = m.mix;
      type = m.base;
    }
  }
  if (!type) return Status::error("unknown --type '" + a.type + "'");
  a.spec.type = *type;
  CAIRN_RETURN_IF_ERROR(modelgen::validate(a.spec));

  modelgen::VocabSource vocab;
  if (a.vocab_from.empty()) {
    spdlog::info("no --vocab-from: using the built-in demo vocabulary");
    vocab = modelgen::demo_vocab();
  } else {
    auto file = gguf::File::open(a.vocab_from);
    if (!file.is_ok()) return file.status();
    auto v = modelgen::vocab_from_gguf(std::shared_ptr<const gguf::File>(std::move(*file)));
    if (!v.is_ok()) return v.status().with_context(a.vocab_from);
    vocab = std::move(*v);
  }
  auto summary = modelgen::write_random_model(a.spec, vocab, a.out, a.threads);
  if (!summary.is_ok()) return summary.status();
  for (const auto& f : summary->fallbacks)
    spdlog::warn("{}: rows of this length do not fit {} blocks; stored as {}", f.tensor,
                 type_info(f.wanted).name, type_info(f.used).name);
  spdlog::info("wrote {}: {} {} parameters, {:.1f} MiB", a.out, a.spec.arch, summary->n_params,
               summary->bytes / 1048576.0);
  return Status::ok();
}

struct MakeLoraArgs {
  std::string base, out, type = "f32", targets = "attn_q,attn_v";
  modelgen::RandomLoraSpec spec;
};

Status make_lora(MakeLoraArgs& a) {
  const std::optional<TensorType> type = type_from_name(a.type);
  if (!type) return Status::error("unknown --type '" + a.type + "'");
  a.spec.type = *type;
  a.spec.targets.clear();
  for (size_t begin = 0; begin <= a.targets.size();) {
    size_t end = a.targets.find(',', begin);
    if (end == std::string::npos) end = a.targets.size();
    if (end > begin) a.spec.targets.push_back(a.targets.substr(begin, end - begin));
    begin = end + 1;
  }
  auto base = gguf::File::open(a.base);
  if (!base.is_ok()) return base.status();
  auto bytes = modelgen::random_lora(**base, a.spec);
  if (!bytes.is_ok()) return bytes.status();
  std::FILE* f = std::fopen(a.out.c_str(), "wb");
  if (!f) return Status::error("cannot write " + a.out);
  const bool ok = std::fwrite(bytes->data(), 1, bytes->size(), f) == bytes->size();
  if (std::fclose(f) != 0 || !ok) return Status::error("cannot write " + a.out);
  spdlog::info("wrote {}: a rank-{} LoRA adapter of {} ({:.1f} KiB)", a.out, a.spec.rank, a.base,
               bytes->size() / 1024.0);
  return Status::ok();
}

}  // namespace

void register_make_lora(CLI::App& app, CommandResult& result) {
  auto* cmd = app.add_subcommand(
      "make-lora", "write a LoRA adapter (GGUF, llama.cpp's layout) with random weights for a model");
  auto a = std::make_shared<MakeLoraArgs>();
  cmd->add_option("BASE", a->base, "the base model (GGUF)")->required();
  cmd->add_option("OUT", a->out, "output GGUF path")->required();
  cmd->add_option("--rank", a->spec.rank, "rank of every pair")->capture_default_str();
  cmd->add_option("--alpha", a->spec.alpha, "adapter.lora.alpha (0: not written)")
      ->capture_default_str();
  cmd->add_option("--targets", a->targets,
                  "comma-separated tensor roles: attn_q, attn_k, attn_v, attn_qkv, attn_output, "
                  "ffn_gate, ffn_up, ffn_down, output, token_embd, ...")
      ->capture_default_str();
  cmd->add_option("--type", a->type, "f32, f16, bf16 or q8_0")->capture_default_str();
  cmd->add_option("--a-scale", a->spec.a_scale, "lora_a values in +-a_scale / sqrt(columns)")
      ->capture_default_str();
  cmd->add_option("--b-scale", a->spec.b_scale, "lora_b values in +-b_scale / sqrt(rank)")
      ->capture_default_str();
  cmd->add_option("--seed", a->spec.seed, "weight seed")->capture_default_str();
  cmd->callback([&result, a] { result.status = make_lora(*a); });
}

void register_make_model(CLI::App& app, CommandResult& result) {
  auto* cmd = app.add_subcommand("make-model", "write a GGUF model with random weights");
  auto a = std::make_shared<MakeModelArgs>();
  auto& s = a->spec;
  cmd->add_option("OUT", a->out, "output GGUF path")->required();
  cmd->add_option("--arch", s.arch,
                  "llama, qwen2, qwen3, phi3, qwen2moe, qwen3moe, gemma2, gemma3, gpt-oss or "
                  "bert (an embedding encoder; give it a WordPiece --vocab-from)")
      ->capture_default_str();
  cmd->add_option("--pooling", s.pooling,
                  "mean, cls, last or (bert) rank: <arch>.pooling_type; rank adds a reranker's "
                  "classification head (bert default: mean)");
  cmd->add_option("--dim", s.dim, "embedding length")->capture_default_str();
  cmd->add_option("--layers", s.layers, "transformer blocks")->capture_default_str();
  cmd->add_option("--heads", s.heads, "attention heads")->capture_default_str();
  cmd->add_option("--kv-heads", s.kv_heads, "key/value heads")->capture_default_str();
  cmd->add_option("--ffn", s.ffn, "feed-forward length")->capture_default_str();
  cmd->add_option("--ctx", s.ctx, "context length written to the file")->capture_default_str();
  cmd->add_option("--head-dim", s.head_dim,
                  "head size, written as attention.key_length/value_length (default: dim / heads)");
  cmd->add_option("--rope-freqs", s.rope_freqs,
                  "llama3: write rope_freqs.weight with Llama 3.1's RoPE frequency factors");
  cmd->add_option("--experts", s.experts, "qwen2moe/qwen3moe: experts per layer (default 8)");
  cmd->add_option("--experts-used", s.experts_used,
                  "qwen2moe/qwen3moe: experts each token is routed to (default 2)");
  cmd->add_option("--expert-ffn", s.expert_ffn,
                  "qwen2moe/qwen3moe: one expert's feed-forward length (default --ffn)");
  cmd->add_option("--shared-ffn", s.shared_ffn,
                  "qwen2moe: the shared expert's feed-forward length (default --ffn)");
  cmd->add_option("--sliding-window", s.sliding_window,
                  "gemma, gpt-oss: attention.sliding_window, positions a sliding layer sees "
                  "(gemma2 default 4096, gemma3 none, gpt-oss 128); llama: every layer sees its "
                  "last N positions "
                  "(Mistral 7B v0.1; the reference llama.cpp ignores it)");
  cmd->add_option("--rope-scaling", s.rope_scaling,
                  "linear, yarn or (phi3) longrope: writes rope.scaling.type (with "
                  "--rope-scaling-factor; longrope: rope_factors_long/short up to that factor)");
  cmd->add_option("--rope-scaling-factor", s.rope_scaling_factor,
                  "rope.scaling.factor: context extension factor (needs --rope-scaling)");
  cmd->add_option("--rope-orig-ctx", s.rope_orig_ctx,
                  "yarn, longrope: rope.scaling.original_context_length (default --ctx / factor)");
  cmd->add_option("--attn-softcap", s.attn_softcap,
                  "gemma2: attn_logit_softcapping (default 50)");
  cmd->add_option("--quiet-from", s.quiet_from,
                  "layers from this one on get output projections scaled by --quiet-scale "
                  "(the same seed and shape with fewer layers then makes a draft model that "
                  "agrees with this one most of the time); -1: none")
      ->check(CLI::Range(int64_t(-1), int64_t(1) << 20));
  cmd->add_option("--quiet-scale", s.quiet_scale, "see --quiet-from")
      ->check(CLI::Range(0.0f, 1.0f))
      ->capture_default_str();
  cmd->add_option("--final-softcap", s.final_softcap,
                  "gemma: final_logit_softcapping (gemma2 default 30, gemma3 none)");
  cmd->add_option("--vocab-from", a->vocab_from,
                  "GGUF whose tokenizer.* metadata is copied (default: demo vocabulary)");
  cmd->add_option("--type", a->type,
                  "f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, q2_k, q3_k, q4_k, q5_k, q6_k, "
                  "iq4_nl, iq4_xs, mxfp4, or a mix as llama.cpp's quantizer makes it: q3_k_m, "
                  "q4_k_m, q5_k_m; norms and biases stay f32")
      ->capture_default_str();
  cmd->add_option("--seed", s.seed, "weight seed")->capture_default_str();
  cmd->add_option("--name", s.name, "general.name");
  cmd->add_option("-t,--threads", a->threads, "threads that quantize (default: all cores)")
      ->check(CLI::Range(0, 1024));
  cmd->callback([&result, a] { result.status = make_model(*a); });
}

}  // namespace cairn::cli
