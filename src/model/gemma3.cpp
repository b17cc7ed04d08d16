// model/gemma3.cpp — the `gemma3` architecture's loader (the text model).
// The `gemma3` architecture (Gemma 3 text): gemma2's decoder (embeddings
// times sqrt(n_embd), post-attention and post-FFN RMSNorms, GeGLU, norm
// weights used as stored) plus an RMSNorm of every head's query and key
// before RoPE, as qwen3; no attention soft-capping; the logits soft-capped
// only where final_logit_softcapping is present. With attention.sliding_window
// present and positive, five sliding layers then one global
// (attention.sliding_window_pattern, default 6); the sliding layers' RoPE has
// base rope.freq_base_swa (default 10000) and no scaling, the global layers
// the file's rope.freq_base and scaling. Q scaled after RoPE by 1/sqrt(head
// size) (1/sqrt(n_embd / n_head) for the 62-layer 27B, as the reference
// decides by the layer count). The output is token_embd unless output.weight
// is present. EmbeddingGemma's dense_2/dense_3 projections are refused.
#include "model/arch.h"
#include "model/tensor_names.h"

namespace cairn::model {

Status read_gemma3_hparams(const MetaReader& m, HParams& hp) {
  const std::string window_key = m.key("attention.sliding_window");
  auto window = m.file().get_uint(window_key);
  if (!window) return window.status().with_context("metadata '" + window_key + "'");
  if (window->value_or(0) > 0) {  // absent or 0: every layer global, as the reference
    CAIRN_ASSIGN_OR_RETURN(hp.n_swa, m.count("attention.sliding_window", int64_t{1} << 28));
    CAIRN_RETURN_IF_ERROR(read_swa_pattern(m, hp, 6));
    double base_swa = 0;
    CAIRN_ASSIGN_OR_RETURN(base_swa, m.real("rope.freq_base_swa", 10000.0));
    if (!(base_swa > 0))
      return Status::error("metadata '" + m.key("rope.freq_base_swa") + "' must be positive");
    hp.rope_freq_base_swa = (float)base_swa;
    hp.rope_freq_scale_swa = 1.0f;
  }
  double final_cap = 0;
  CAIRN_ASSIGN_OR_RETURN(final_cap, m.real("final_logit_softcapping", 0.0));
  if (final_cap < 0)
    return Status::error("metadata '" + m.key("final_logit_softcapping") + "' must be positive");
  hp.final_softcap = (float)final_cap;
  hp.attn_scale = hp.n_layer == 62 ? 1.0f / std::sqrt((float)(hp.n_embd / hp.n_head))
                                   : 1.0f / std::sqrt((float)hp.head_dim);
  return Status::ok();
}

Result<std::unique_ptr<Model>> load_gemma3(std::shared_ptr<const gguf::File> file, HParams hp,
                                           const LoadOptions& options) {
  for (TensorRole r : {TensorRole::RopeFreqs, TensorRole::AttnQBias})
    if (file->find_tensor(tensor_name(r, 0)))
      return Status::error("tensor '" + tensor_name(r, 0) + "' is not part of a gemma3 model");
  for (const char* name : {"dense_2.weight", "dense_3.weight"})
    if (file->find_tensor(name))
      return Status::error(std::string("tensor '") + name +
                           "': EmbeddingGemma's dense projections are not supported");
  DecoderOptions d;
  d.qk_norm = true;
  d.prescale_q = true;
  d.scale_embd = true;
  d.post_norms = true;
  d.geglu = true;
  return load_decoder(std::move(file), std::move(hp), options, d);
}

}  // namespace cairn::model
