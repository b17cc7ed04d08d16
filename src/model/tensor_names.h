// model/tensor_names.h — the one table of llama-family GGUF tensor names.
// Owns each tensor's role, its llama.cpp name (per-layer ones as the part
// after "blk.<layer>."), its shape in terms of the model's sizes, and when it
// may be absent. The loader (model/blocks.cpp, model/model.cpp) looks tensors
// up through it and the model writers (modelgen/) name and size what they
// write from it, so the two cannot drift apart. Order is the file order the
// writers use: the embedding, every layer's tensors, then the output head.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cairn::model {

enum class TensorRole {
  TokEmbd,
  RopeFreqs,
  AttnNorm,
  AttnQ,
  AttnK,
  AttnV,
  AttnQkv,
  AttnQBias,
  AttnKBias,
  AttnVBias,
  AttnQNorm,
  AttnKNorm,
  AttnOutput,
  AttnOutputBias,   // the output projection's bias (gpt-oss)
  AttnSinks,        // one learned logit per query head, in every softmax's sum (gpt-oss)
  AttnPostNorm,     // RMSNorm of the attention's output before the residual add (gemma);
                    // gpt-oss names its FFN's input norm so
  FfnNorm,
  FfnGate,
  FfnUp,
  FfnGateUp,
  FfnDown,
  FfnGateInp,       // the router (MoE)
  FfnGateInpBias,   // the router's bias (gpt-oss)
  FfnGateExps,      // the experts' gate, up and down: 3-D, one slab per expert
  FfnUpExps,
  FfnDownExps,
  FfnGateExpsBias,  // the experts' biases: one row per expert (gpt-oss)
  FfnUpExpsBias,
  FfnDownExpsBias,
  FfnGateInpShexp,  // the shared expert's gate logit weights (qwen2moe)
  FfnGateShexp,
  FfnUpShexp,
  FfnDownShexp,
  FfnPostNorm,      // RMSNorm of the FFN's output before the residual add (gemma)
  OutputNorm,
  Output,
};

// A tensor dimension, named by the size it equals.
enum class TensorDim {
  None,   // no such dimension (1-D tensors have no rows)
  Embd,   // embedding length
  Vocab,  // vocabulary size
  Q,      // n_head * head_dim
  Kv,     // n_head_kv * head_dim
  Ff,     // feed-forward length
  Qkv,    // Q + 2 * Kv: the fused Q/K/V projection's rows (phi3)
  Ff2,    // 2 * Ff: gate and up stacked in one matrix (phi3)
  Head,   // head_dim: per-head norm weights (qwen3)
  RopePairs,  // n_rot / 2: one RoPE frequency factor per rotated pair
  Expert,     // expert_count: the router's rows, the experts' slabs (MoE)
  FfExp,      // expert_feed_forward_length: one expert's FFN width
  FfShexp,    // expert_shared_feed_forward_length: the shared expert's FFN width
  Heads,      // n_head: one value per query head (gpt-oss's attention sinks)
};

enum class TensorPresence {
  Always,
  QkvBias,    // only in architectures whose Q/K/V projections carry biases (qwen2)
  Untied,     // absent when the output head is tied to token_embd.weight
  SplitQkv,   // separate Q, K and V projections (all but phi3)
  FusedQkv,   // one Q/K/V projection, rows Q then K then V (phi3)
  QkNorm,     // per-head RMSNorm of Q and K after the projections (qwen3)
  SplitFfn,   // separate gate and up projections (all but phi3 and the MoE models)
  FusedFfn,   // gate and up stacked in ffn_up.weight, gate first (phi3)
  RopeFreqs,  // optional per-pair RoPE frequency divisors (Llama 3.1/3.2)
  DenseFfn,   // the one FFN's down projection (all but the MoE models)
  Moe,        // the router and the experts (qwen2moe, qwen3moe)
  SharedExpert,  // the MoE's shared expert and its gate (qwen2moe)
  PostNorms,     // norms of the attention's and the FFN's outputs (gemma2, gemma3)
  PostAttnNorm,  // post_attention_norm: gemma's post-norm, or gpt-oss's FFN input norm
  FfnNorm,       // ffn_norm: every FFN's input norm but gpt-oss's
  Oai,           // gpt-oss: the output bias, attention sinks, router and expert biases
};

// Which of the optional or alternative tensors a model holds.
struct TensorFeatures {
  bool qkv_bias = false;
  bool tied_output = false;
  bool fused_qkv = false;
  bool qk_norm = false;
  bool fused_ffn = false;
  bool rope_freqs = false;
  bool moe = false;            // router and experts instead of one FFN
  bool shared_expert = false;  // with moe: a shared expert (qwen2moe)
  bool post_norms = false;     // post_attention_norm and post_ffw_norm (gemma)
  bool oai = false;            // gpt-oss's extra tensors, and post_attention_norm as the FFN's norm
};

struct TensorSpec {
  TensorRole role;
  std::string_view name;  // the whole name, or (per_layer) the part after "blk.<layer>."
  bool per_layer;
  TensorDim cols;  // GGUF dims[0], the row length
  TensorDim rows;  // GGUF dims[1]; None for a 1-D tensor
  TensorPresence presence;
  TensorDim slabs = TensorDim::None;  // GGUF dims[2] of a 3-D tensor (the experts); else None
};

inline constexpr std::array<TensorSpec, 36> kTensorTable = {{
    {TensorRole::TokEmbd, "token_embd.weight", false, TensorDim::Embd, TensorDim::Vocab,
     TensorPresence::Always},
    {TensorRole::RopeFreqs, "rope_freqs.weight", false, TensorDim::RopePairs, TensorDim::None,
     TensorPresence::RopeFreqs},
    {TensorRole::AttnNorm, "attn_norm.weight", true, TensorDim::Embd, TensorDim::None,
     TensorPresence::Always},
    {TensorRole::AttnQ, "attn_q.weight", true, TensorDim::Embd, TensorDim::Q,
     TensorPresence::SplitQkv},
    {TensorRole::AttnK, "attn_k.weight", true, TensorDim::Embd, TensorDim::Kv,
     TensorPresence::SplitQkv},
    {TensorRole::AttnV, "attn_v.weight", true, TensorDim::Embd, TensorDim::Kv,
     TensorPresence::SplitQkv},
    {TensorRole::AttnQkv, "attn_qkv.weight", true, TensorDim::Embd, TensorDim::Qkv,
     TensorPresence::FusedQkv},
    {TensorRole::AttnQBias, "attn_q.bias", true, TensorDim::Q, TensorDim::None,
     TensorPresence::QkvBias},
    {TensorRole::AttnKBias, "attn_k.bias", true, TensorDim::Kv, TensorDim::None,
     TensorPresence::QkvBias},
    {TensorRole::AttnVBias, "attn_v.bias", true, TensorDim::Kv, TensorDim::None,
     TensorPresence::QkvBias},
    {TensorRole::AttnQNorm, "attn_q_norm.weight", true, TensorDim::Head, TensorDim::None,
     TensorPresence::QkNorm},
    {TensorRole::AttnKNorm, "attn_k_norm.weight", true, TensorDim::Head, TensorDim::None,
     TensorPresence::QkNorm},
    {TensorRole::AttnOutput, "attn_output.weight", true, TensorDim::Q, TensorDim::Embd,
     TensorPresence::Always},
    {TensorRole::AttnOutputBias, "attn_output.bias", true, TensorDim::Embd, TensorDim::None,
     TensorPresence::Oai},
    {TensorRole::AttnSinks, "attn_sinks.weight", true, TensorDim::Heads, TensorDim::None,
     TensorPresence::Oai},
    {TensorRole::AttnPostNorm, "post_attention_norm.weight", true, TensorDim::Embd,
     TensorDim::None, TensorPresence::PostAttnNorm},
    {TensorRole::FfnNorm, "ffn_norm.weight", true, TensorDim::Embd, TensorDim::None,
     TensorPresence::FfnNorm},
    {TensorRole::FfnGate, "ffn_gate.weight", true, TensorDim::Embd, TensorDim::Ff,
     TensorPresence::SplitFfn},
    {TensorRole::FfnUp, "ffn_up.weight", true, TensorDim::Embd, TensorDim::Ff,
     TensorPresence::SplitFfn},
    {TensorRole::FfnGateUp, "ffn_up.weight", true, TensorDim::Embd, TensorDim::Ff2,
     TensorPresence::FusedFfn},
    {TensorRole::FfnDown, "ffn_down.weight", true, TensorDim::Ff, TensorDim::Embd,
     TensorPresence::DenseFfn},
    {TensorRole::FfnGateInp, "ffn_gate_inp.weight", true, TensorDim::Embd, TensorDim::Expert,
     TensorPresence::Moe},
    {TensorRole::FfnGateInpBias, "ffn_gate_inp.bias", true, TensorDim::Expert, TensorDim::None,
     TensorPresence::Oai},
    {TensorRole::FfnGateExps, "ffn_gate_exps.weight", true, TensorDim::Embd, TensorDim::FfExp,
     TensorPresence::Moe, TensorDim::Expert},
    {TensorRole::FfnUpExps, "ffn_up_exps.weight", true, TensorDim::Embd, TensorDim::FfExp,
     TensorPresence::Moe, TensorDim::Expert},
    {TensorRole::FfnDownExps, "ffn_down_exps.weight", true, TensorDim::FfExp, TensorDim::Embd,
     TensorPresence::Moe, TensorDim::Expert},
    {TensorRole::FfnGateExpsBias, "ffn_gate_exps.bias", true, TensorDim::FfExp, TensorDim::Expert,
     TensorPresence::Oai},
    {TensorRole::FfnUpExpsBias, "ffn_up_exps.bias", true, TensorDim::FfExp, TensorDim::Expert,
     TensorPresence::Oai},
    {TensorRole::FfnDownExpsBias, "ffn_down_exps.bias", true, TensorDim::Embd, TensorDim::Expert,
     TensorPresence::Oai},
    {TensorRole::FfnGateInpShexp, "ffn_gate_inp_shexp.weight", true, TensorDim::Embd,
     TensorDim::None, TensorPresence::SharedExpert},
    {TensorRole::FfnGateShexp, "ffn_gate_shexp.weight", true, TensorDim::Embd, TensorDim::FfShexp,
     TensorPresence::SharedExpert},
    {TensorRole::FfnUpShexp, "ffn_up_shexp.weight", true, TensorDim::Embd, TensorDim::FfShexp,
     TensorPresence::SharedExpert},
    {TensorRole::FfnDownShexp, "ffn_down_shexp.weight", true, TensorDim::FfShexp, TensorDim::Embd,
     TensorPresence::SharedExpert},
    {TensorRole::FfnPostNorm, "post_ffw_norm.weight", true, TensorDim::Embd, TensorDim::None,
     TensorPresence::PostNorms},
    {TensorRole::OutputNorm, "output_norm.weight", false, TensorDim::Embd, TensorDim::None,
     TensorPresence::Always},
    {TensorRole::Output, "output.weight", false, TensorDim::Embd, TensorDim::Vocab,
     TensorPresence::Untied},
}};

// The table's row for `role` (rows are in TensorRole order).
constexpr const TensorSpec& tensor_spec(TensorRole role) {
  return kTensorTable[static_cast<size_t>(role)];
}

// The GGUF name of `role`; per-layer roles need `layer`, the others ignore it.
inline std::string tensor_name(TensorRole role, int64_t layer = -1) {
  const TensorSpec& s = tensor_spec(role);
  if (!s.per_layer) return std::string(s.name);
  return "blk." + std::to_string(layer) + "." + std::string(s.name);
}

// The sizes TensorDim names, for one model.
struct TensorSizes {
  int64_t embd = 0, vocab = 0, q = 0, kv = 0, ff = 0;
  int64_t head = 0;        // head_dim
  int64_t rope_pairs = 0;  // n_rot / 2
  int64_t expert = 0, ff_exp = 0, ff_shexp = 0;  // MoE: expert count, expert and shared FFN widths
  int64_t heads = 0;       // n_head

  int64_t of(TensorDim d) const {
    switch (d) {
      case TensorDim::Embd:
        return embd;
      case TensorDim::Vocab:
        return vocab;
      case TensorDim::Q:
        return q;
      case TensorDim::Kv:
        return kv;
      case TensorDim::Ff:
        return ff;
      case TensorDim::Qkv:
        return q + 2 * kv;
      case TensorDim::Ff2:
        return 2 * ff;
      case TensorDim::Head:
        return head;
      case TensorDim::RopePairs:
        return rope_pairs;
      case TensorDim::Expert:
        return expert;
      case TensorDim::FfExp:
        return ff_exp;
      case TensorDim::FfShexp:
        return ff_shexp;
      case TensorDim::Heads:
        return heads;
      case TensorDim::None:
        break;
    }
    return 0;
  }
};

// The GGUF dims of `role` ([cols], [cols, rows] or [cols, rows, slabs]) for a
// model of `sizes`.
inline std::vector<int64_t> tensor_dims(TensorRole role, const TensorSizes& sizes) {
  const TensorSpec& s = tensor_spec(role);
  if (s.rows == TensorDim::None) return {sizes.of(s.cols)};
  if (s.slabs == TensorDim::None) return {sizes.of(s.cols), sizes.of(s.rows)};
  return {sizes.of(s.cols), sizes.of(s.rows), sizes.of(s.slabs)};
}

// Whether a model with `features` holds `role`.
constexpr bool tensor_present(TensorRole role, const TensorFeatures& f) {
  switch (tensor_spec(role).presence) {
    case TensorPresence::Always:
      return true;
    case TensorPresence::QkvBias:
      return f.qkv_bias;
    case TensorPresence::Untied:
      return !f.tied_output;
    case TensorPresence::SplitQkv:
      return !f.fused_qkv;
    case TensorPresence::FusedQkv:
      return f.fused_qkv;
    case TensorPresence::QkNorm:
      return f.qk_norm;
    case TensorPresence::SplitFfn:
      return !f.fused_ffn && !f.moe;
    case TensorPresence::FusedFfn:
      return f.fused_ffn;
    case TensorPresence::RopeFreqs:
      return f.rope_freqs;
    case TensorPresence::DenseFfn:
      return !f.moe;
    case TensorPresence::Moe:
      return f.moe;
    case TensorPresence::SharedExpert:
      return f.moe && f.shared_expert;
    case TensorPresence::PostNorms:
      return f.post_norms;
    case TensorPresence::PostAttnNorm:
      return f.post_norms || f.oai;
    case TensorPresence::FfnNorm:
      return !f.oai;
    case TensorPresence::Oai:
      return f.oai;
  }
  return true;
}

// Calls f(role, layer) for every tensor such a model holds, in file order
// (layer is -1 for the tensors outside the blocks).
template <typename F>
void for_each_tensor(int64_t n_layer, const TensorFeatures& features, F&& f) {
  size_t i = 0;
  const auto present = [&](const TensorSpec& s) { return tensor_present(s.role, features); };
  for (; i < kTensorTable.size() && !kTensorTable[i].per_layer; ++i)
    if (present(kTensorTable[i])) f(kTensorTable[i].role, int64_t{-1});
  const size_t first_layer = i;
  size_t end_layer = first_layer;
  while (end_layer < kTensorTable.size() && kTensorTable[end_layer].per_layer) ++end_layer;
  for (int64_t l = 0; l < n_layer; ++l)
    for (size_t j = first_layer; j < end_layer; ++j)
      if (present(kTensorTable[j])) f(kTensorTable[j].role, l);
  for (i = end_layer; i < kTensorTable.size(); ++i)
    if (present(kTensorTable[i])) f(kTensorTable[i].role, int64_t{-1});
}

// The llama/qwen2 forms: Q/K/V biases or not, a tied head or not.
constexpr bool tensor_present(TensorRole role, bool qkv_bias, bool tied_output) {
  return tensor_present(role, TensorFeatures{.qkv_bias = qkv_bias, .tied_output = tied_output});
}
template <typename F>
void for_each_tensor(int64_t n_layer, bool qkv_bias, bool tied_output, F&& f) {
  for_each_tensor(n_layer, TensorFeatures{.qkv_bias = qkv_bias, .tied_output = tied_output},
                  std::forward<F>(f));
}

// Rows are in TensorRole order, so tensor_spec() can index the table.
static_assert([] {
  for (size_t i = 0; i < kTensorTable.size(); ++i)
    if (static_cast<size_t>(kTensorTable[i].role) != i) return false;
  return true;
}());

}  // namespace cairn::model
