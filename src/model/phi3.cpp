// model/phi3.cpp — the `phi3` architecture's loader.
// The `phi3` architecture (Phi-3, Phi-3.5, Phi-4 mini): the llama decoder with
// Q, K and V in one attn_qkv matrix (rows Q, then K, then V; separate
// matrices are accepted too, as the reference does) and gate and up stacked
// in ffn_up (2 * feed_forward_length rows, gate first), both taken as views;
// NeoX-style RoPE; Q scaled by 1/sqrt(head_dim) before attention rather than
// the scores after it. attention.sliding_window is ignored, as the reference
// ignores it for phi3. LongRoPE files (Phi-3 128k: rope_factors_long/short,
// rope.scaling.attn_factor) take the long factors when the served context
// (LoadOptions::n_ctx) exceeds rope.scaling.original_context_length, the
// short ones otherwise, as the reference chooses by its context size.
#include "model/arch.h"
#include "model/tensor_names.h"

namespace cairn::model {

Result<std::unique_ptr<Model>> load_phi3(std::shared_ptr<const gguf::File> file, HParams hp,
                                         const LoadOptions& options) {
  if (hp.n_head * hp.head_dim != hp.n_embd)
    return Status::error("phi3: head_count * head size (" + std::to_string(hp.n_head) + " * " +
                         std::to_string(hp.head_dim) + ") must equal embedding_length " +
                         std::to_string(hp.n_embd));
  DecoderOptions d;
  d.fused_qkv = file->find_tensor(tensor_name(TensorRole::AttnQkv, 0)) != nullptr;
  d.fused_ffn = true;
  d.prescale_q = true;
  d.rope_factor_pair = true;
  if (file->find_tensor(tensor_name(TensorRole::FfnGate, 0)))
    return Status::error("tensor '" + tensor_name(TensorRole::FfnGate, 0) +
                         "': a phi3 model keeps its gate inside ffn_up.weight");
  return load_decoder(std::move(file), std::move(hp), options, d);
}

}  // namespace cairn::model
