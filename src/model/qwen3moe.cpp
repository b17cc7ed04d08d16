// model/qwen3moe.cpp — the `qwen3moe` architecture's loader.
// The `qwen3moe` architecture (Qwen3-30B-A3B, Qwen3-235B-A22B): qwen3's
// attention (per-head Q/K RMSNorm before NeoX-style RoPE, no biases, heads of
// attention.key_length) and, in place of the FFN, a mixture of experts
// (model/moe.h): softmax over ffn_gate_inp's logits, the expert_used_count
// best experts with their probabilities renormalized to sum 1; no shared
// expert. As in the reference, expert_weights_scale is not applied.
#include "model/arch.h"
#include "model/tensor_names.h"

namespace cairn::model {

Result<std::unique_ptr<Model>> load_qwen3moe(std::shared_ptr<const gguf::File> file, HParams hp,
                                             const LoadOptions& options) {
  for (TensorRole r : {TensorRole::AttnQBias, TensorRole::AttnKBias, TensorRole::AttnVBias})
    if (file->find_tensor(tensor_name(r, 0)))
      return Status::error("tensor '" + tensor_name(r, 0) +
                           "': Q/K/V biases in a qwen3moe model are not supported");
  return load_decoder(
      std::move(file), std::move(hp), options,
      DecoderOptions{.qkv_bias = false, .qk_norm = true, .moe = true, .norm_topk = true});
}

}  // namespace cairn::model
