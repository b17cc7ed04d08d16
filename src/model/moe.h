// model/moe.h — internal to src/model: a mixture-of-experts FFN (qwen2moe,
// qwen3moe, gpt-oss). A router picks, per token, n_used of n_expert expert
// FFNs; their outputs are summed with the router's weights; an optional shared
// expert (qwen2moe) runs on every token, scaled by its own sigmoid gate. Tokens are
// grouped by expert, so each expert's weights are read once per forward
// however many tokens chose it, and an expert nobody chose is not read.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "gguf/gguf.h"
#include "kernels/kernels.h"

namespace cairn::model {

// How a token's router logits become its experts' weights.
enum class MoeGating {
  Softmax,        // softmax over all experts, the top n_used kept (qwen2moe, qwen3moe)
  SoftmaxChosen,  // the top n_used logits, then a softmax over those alone (gpt-oss)
};

// The experts' activation between gate/up and down.
enum class MoeActivation {
  Swiglu,     // silu(gate) * up
  SwigluOai,  // gpt-oss: g = min(gate, 7), u = clamp(up, -7, 7), g * sigmoid(1.702 g) * (u + 1)
};

struct MoeWeights {
  int64_t n_expert = 0, n_used = 0;
  int64_t n_embd = 0, n_ff = 0;  // n_ff: one expert's feed-forward length
  // Router weights after the softmax: renormalized to sum 1 over the chosen
  // experts (qwen3moe) or not (qwen2moe); then times `scale` (0 or 1: none).
  bool norm_topk = false;
  float scale = 0.0f;
  MoeGating gating = MoeGating::Softmax;
  MoeActivation activation = MoeActivation::Swiglu;
  kernels::WeightMatrix router;  // n_expert rows of n_embd
  std::vector<float> router_bias;  // n_expert, added to the logits; empty: none
  // Per-expert biases after gate, up and down (gpt-oss): n_expert rows of
  // n_ff, n_ff and n_embd; empty: none.
  std::vector<float> gate_bias, up_bias, down_bias;
  // Expert e's matrices: views of the 3-D GGUF tensors (one slab per expert).
  std::vector<kernels::WeightMatrix> gate, up, down;  // n_ff x n_embd, n_ff x n_embd, n_embd x n_ff
  // The shared expert (all empty / null when the model has none).
  bool shared = false;
  int64_t n_ff_shared = 0;
  kernels::WeightMatrix shared_gate, shared_up, shared_down;
  kernels::WeightMatrix shared_gate_inp;  // one row of n_embd: the shared expert's gate logit
};

// Expert e's view of a 3-D expert tensor [cols, rows, n_expert] of `t`.
Result<std::vector<kernels::WeightMatrix>> expert_views(const gguf::File& f, const std::string& name,
                                                         int64_t cols, int64_t rows, int64_t n_expert);

// The experts a token's router logits choose: indices of the n_used largest
// softmax probabilities (ties to the lower index), and their weights.
void route_token(const float* logits, int64_t n_expert, int64_t n_used, bool norm_topk, float scale,
                 int32_t* experts, float* weights, MoeGating gating = MoeGating::Softmax);

// out[t] = the MoE FFN of x[t] ([n_tokens, n_embd] each; out may not alias x).
void moe_forward(const MoeWeights& w, const float* x, int64_t n_tokens, float* out, ThreadPool& pool);

}  // namespace cairn::model
