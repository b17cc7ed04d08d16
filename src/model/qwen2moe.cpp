// model/qwen2moe.cpp — the `qwen2moe` architecture's loader.
// The `qwen2moe` architecture (Qwen1.5-MoE, Qwen2-MoE): qwen2's attention
// (Q/K/V biases, NeoX-style RoPE) and, in place of the FFN, a mixture of
// experts (model/moe.h): softmax over ffn_gate_inp's logits, the
// expert_used_count best experts weighted by their probabilities as they are
// (not renormalized), plus a shared expert (ffn_{gate,up,down}_shexp, width
// expert_shared_feed_forward_length) scaled per token by the sigmoid of
// ffn_gate_inp_shexp · x. As in the reference, expert_weights_scale is not
// applied.
#include "model/arch.h"

namespace cairn::model {

Result<std::unique_ptr<Model>> load_qwen2moe(std::shared_ptr<const gguf::File> file, HParams hp,
                                             const LoadOptions& options) {
  return load_decoder(std::move(file), std::move(hp), options,
                      DecoderOptions{.qkv_bias = true,
                                     .moe = true,
                                     .norm_topk = false,
                                     .shared_expert = true});
}

}  // namespace cairn::model
