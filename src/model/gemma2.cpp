// model/gemma2.cpp — the `gemma2` architecture's loader.
// The `gemma2` architecture (Gemma 2): embeddings times sqrt(n_embd); per
// layer RMSNorm, attention, an RMSNorm of its output (post_attention_norm),
// the residual add, RMSNorm, a GeGLU FFN (GELU's tanh form), an RMSNorm of its
// output (post_ffw_norm), the residual add. The norm weights are used as
// stored: the converter has already added Gemma's +1. NeoX-style RoPE; Q
// scaled after RoPE by 1/sqrt(head size) (by 1/sqrt(n_embd / n_head) for the
// 46-layer 27B, as the reference decides by the layer count); attention
// scores soft-capped (attn_logit_softcapping, default 50) and the logits too
// (final_logit_softcapping, default 30). Layers alternate sliding-window
// (attention.sliding_window, default 4096) and global attention, sliding
// first (attention.sliding_window_pattern, default 2); the sliding layers'
// RoPE base is rope.freq_base_swa where present, else the global one. The
// output is always tied to token_embd.
#include "model/arch.h"
#include "model/tensor_names.h"

namespace cairn::model {

Status read_gemma2_hparams(const MetaReader& m, HParams& hp) {
  CAIRN_ASSIGN_OR_RETURN(hp.n_swa, m.count("attention.sliding_window", int64_t{1} << 28, 4096));
  CAIRN_RETURN_IF_ERROR(read_swa_pattern(m, hp, 2));
  double base_swa = 0, attn_cap = 0, final_cap = 0;
  CAIRN_ASSIGN_OR_RETURN(base_swa, m.real("rope.freq_base_swa", hp.rope_freq_base));
  CAIRN_ASSIGN_OR_RETURN(attn_cap, m.real("attn_logit_softcapping", 50.0));
  CAIRN_ASSIGN_OR_RETURN(final_cap, m.real("final_logit_softcapping", 30.0));
  for (const auto& [key, v] : {std::pair{"rope.freq_base_swa", base_swa},
                               std::pair{"attn_logit_softcapping", attn_cap},
                               std::pair{"final_logit_softcapping", final_cap}})
    if (!(v > 0)) return Status::error("metadata '" + m.key(key) + "' must be positive");
  hp.rope_freq_base_swa = (float)base_swa;
  hp.rope_freq_scale_swa = hp.rope_freq_scale;
  hp.attn_softcap = (float)attn_cap;
  hp.final_softcap = (float)final_cap;
  hp.attn_scale = hp.n_layer == 46 ? 1.0f / std::sqrt((float)(hp.n_embd / hp.n_head))
                                   : 1.0f / std::sqrt((float)hp.head_dim);
  return Status::ok();
}

Result<std::unique_ptr<Model>> load_gemma2(std::shared_ptr<const gguf::File> file, HParams hp,
                                           const LoadOptions& options) {
  // The reference reads neither of these for gemma2: refused, not ignored.
  for (TensorRole r : {TensorRole::Output, TensorRole::RopeFreqs, TensorRole::AttnQBias})
    if (file->find_tensor(tensor_name(r, 0)))
      return Status::error("tensor '" + tensor_name(r, 0) + "' is not part of a gemma2 model");
  DecoderOptions d;
  d.prescale_q = true;
  d.scale_embd = true;
  d.post_norms = true;
  d.geglu = true;
  return load_decoder(std::move(file), std::move(hp), options, d);
}

}  // namespace cairn::model
