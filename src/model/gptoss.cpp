// model/gptoss.cpp — the `gpt-oss` architecture's loader.
// The `gpt-oss` architecture (OpenAI's gpt-oss-20b and -120b): per layer
// RMSNorm, attention with Q/K/V and output biases and a learned sink logit
// per query head that joins every softmax (no value of its own), NeoX-style
// RoPE (YaRN-scaled in the released files), the residual add, RMSNorm (named
// post_attention_norm in the file), a mixture of experts and the residual
// add. Layers alternate sliding-window (attention.sliding_window, 128 in the
// released files) and global attention, sliding first
// (attention.sliding_window_pattern, default 2); the sliding layers' RoPE is
// the global one unless rope.freq_base_swa says otherwise. The router has a
// bias; a token takes its expert_used_count largest logits and weighs those
// experts by a softmax over them; each expert adds biases after gate, up and
// down and gates with a clamped SwiGLU (model/moe.h's SwigluOai). The expert
// weights ship as MXFP4.
#include "model/arch.h"
#include "model/tensor_names.h"

namespace cairn::model {

Status read_gptoss_hparams(const MetaReader& m, HParams& hp) {
  CAIRN_ASSIGN_OR_RETURN(hp.n_swa, m.count("attention.sliding_window", int64_t{1} << 28));
  CAIRN_RETURN_IF_ERROR(read_swa_pattern(m, hp, 2));
  double base_swa = 0;
  CAIRN_ASSIGN_OR_RETURN(base_swa, m.real("rope.freq_base_swa", hp.rope_freq_base));
  if (!(base_swa > 0)) return Status::error("metadata '" + m.key("rope.freq_base_swa") + "' must be positive");
  hp.rope_freq_base_swa = (float)base_swa;
  hp.rope_freq_scale_swa = hp.rope_freq_scale;
  return Status::ok();
}

Result<std::unique_ptr<Model>> load_gptoss(std::shared_ptr<const gguf::File> file, HParams hp,
                                           const LoadOptions& options) {
  DecoderOptions d;
  d.qkv_bias = true;
  d.moe = true;
  d.oai = true;
  return load_decoder(std::move(file), std::move(hp), options, d);
}

}  // namespace cairn::model
