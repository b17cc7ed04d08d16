// model/blocks.h — internal to src/model: the shared pieces of decoder models.
// Owns tensor lookup with shape/type validation, the per-layer weight structs,
// and the blocks a forward pass is built from (embedding, RMSNorm, attention
// over a KvView, SwiGLU FFN, output head). Architecture files combine them;
// blocks never know which architecture calls them.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "gguf/gguf.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "model/lora.h"
#include "model/moe.h"
#include "model/tensor_names.h"

namespace cairn::model {

// ---- weights ----------------------------------------------------------------

// The 2-D tensor `name` as [cols, rows] (GGUF dims order), in a type cairn can
// compute with. Errors name the tensor and what is wrong with it.
Result<kernels::WeightMatrix> find_matrix(const gguf::File& f, const std::string& name,
                                          int64_t cols, int64_t rows);
// A 1-D tensor of n elements (norm weights, biases), converted to float.
Result<std::vector<float>> find_vector(const gguf::File& f, const std::string& name, int64_t n);

struct AttentionWeights {
  kernels::WeightMatrix wq, wk, wv, wo;  // wq/wk/wv: views of one attn_qkv when fused
  std::vector<float> bq, bk, bv;  // empty when the architecture has no QKV bias
  std::vector<float> q_norm, k_norm;  // head_dim each; empty without per-head norms
  bool prescale_q = false;  // Q *= 1/sqrt(head_dim) after RoPE, attention scale 1 (phi3)
  int64_t window = 0;     // > 0: a sliding layer, attending to its last `window` positions (gemma)
  bool swa_rope = false;  // RoPE by the sliding layers' base and scale (ws.rope_cs_swa)
  std::vector<float> bo;     // the output projection's bias (gpt-oss); empty: none
  std::vector<float> sinks;  // per query head, in every softmax (gpt-oss); empty: none
};

struct FfnWeights {
  kernels::WeightMatrix gate, up, down;  // gate/up: views of one ffn_up when fused
  bool geglu = false;  // gelu(gate) * up (gemma) instead of silu(gate) * up
};

struct LayerWeights {
  std::vector<float> attn_norm;
  AttentionWeights attn;
  std::vector<float> ffn_norm;
  FfnWeights ffn;  // empty in a mixture-of-experts model
  MoeWeights moe;  // n_expert == 0 unless DecoderOptions::moe
  // RMSNorms of the attention's and the FFN's outputs before their residual
  // adds (gemma); empty otherwise.
  std::vector<float> attn_post_norm, ffn_post_norm;
};

struct DecoderWeights {
  kernels::WeightMatrix tok_embd;
  std::vector<float> output_norm;
  kernels::WeightMatrix output;  // == tok_embd when hp.tied_output; a shard's vocabulary rows
  std::vector<LayerWeights> layers;
  std::vector<float> rope_freqs;  // rope_freqs.weight (rope_pairs floats); empty when absent
  float embd_scale = 0.0f;  // embedding rows times this (gemma: sqrt(n_embd)); 0: none
};

// What distinguishes one llama-family decoder from another beyond hparams:
// the tensors it adds or fuses (a tied head and rope_freqs.weight are read
// from the file) and where Q's scale is applied.
struct DecoderOptions {
  bool qkv_bias = false;   // Q/K/V projections carry biases (qwen2)
  bool qk_norm = false;    // per-head RMSNorm of Q and K before RoPE (qwen3)
  bool fused_qkv = false;  // one attn_qkv matrix, rows Q, K, V (phi3)
  bool fused_ffn = false;  // gate and up stacked in ffn_up, gate first (phi3)
  // Q is multiplied by 1/sqrt(head_dim) after RoPE and attention scales by 1
  // (phi3's graph: the same product, rounded at another place).
  bool prescale_q = false;
  // A mixture-of-experts FFN (model/moe.h) instead of one SwiGLU FFN: the
  // router and the 3-D expert tensors, sized by hparams' expert fields.
  bool moe = false;
  bool norm_topk = false;      // the chosen experts' weights renormalized to sum 1 (qwen3moe)
  bool shared_expert = false;  // plus a shared expert with a sigmoid gate (qwen2moe)
  // Gemma: embeddings times sqrt(n_embd), RMSNorms of the attention's and the
  // FFN's outputs (post_attention_norm, post_ffw_norm), a GeGLU FFN (GELU's
  // tanh form, as the reference computes it through an F16 table).
  bool scale_embd = false;
  bool post_norms = false;
  bool geglu = false;
  // gpt-oss: the output projection's bias, attention sinks, the FFN's norm
  // named post_attention_norm, and a mixture of experts whose router has a
  // bias and a softmax over the chosen experts' logits, whose experts have
  // biases and the clamped SwiGLU (MoeActivation::SwigluOai).
  bool oai = false;
  // LongRoPE's rope_factors_long/short (phi3; llama with rope.scaling.type
  // longrope): one of them becomes rope_freqs (by the served context, see
  // LoadOptions::n_ctx) unless rope_freqs.weight is present.
  bool rope_factor_pair = false;
};

// Loads the llama-style tensor set, named and shaped as model/tensor_names.h
// says, with the tensors `options` adds or fuses. A shard gets its stage's
// layers only (the output norm and head only on the last stage) and views of
// its slices of each matrix (model.h's ShardSpec): nothing is copied; fused
// matrices are cut into views the same way.
Result<DecoderWeights> load_decoder_weights(const gguf::File& f, const HParams& hp,
                                            const DecoderOptions& options,
                                            const ShardSpec& shard = {}, int64_t n_ctx = 0);

// ---- LoRA adapters at run time -------------------------------------------------

// One adapter's pairs for one layer (null: the tensor is not adapted). A
// fused tensor's pair is cut like its weights: B's rows per part, A shared.
struct LayerLora {
  const LoraPair* q = nullptr;
  const LoraPair* k = nullptr;
  const LoraPair* v = nullptr;
  const LoraPair* o = nullptr;
  const LoraPair* gate = nullptr;
  const LoraPair* up = nullptr;
  const LoraPair* down = nullptr;
};

// An adapter some tokens of a forward use: its pairs for the layer, and
// those tokens' rows in the activations the block computes on.
struct ActiveLora {
  const LayerLora* layer = nullptr;
  LoraRows* rows = nullptr;
};
using LayerLoras = std::span<const ActiveLora>;

// ---- activations ------------------------------------------------------------

// Per-forward scratch, grown to the largest batch seen and then reused.
struct Workspace {
  std::vector<float> x;         // residual stream   [T, n_embd]
  std::vector<float> xn;        // normed input      [T, n_embd], written only for float weights
                                //   (integer kernels make each row as they quantize it)
  std::vector<float> q;         // [T, n_head * head_dim]
  std::vector<float> k, v;      // [T, n_head_kv * head_dim]
  std::vector<float> attn;      // attention output before wo [T, n_head * head_dim]
  std::vector<float> tmp;       // block output      [T, n_embd]
  std::vector<float> gate, up;  // [T, n_ff]; gate takes silu(gate) * up for float down weights
  std::vector<float> out_rows;  // normed rows that want logits [R, n_embd]
  std::vector<float> rope_cs;   // per token: cos, then sin, of its RoPE pairs (rope_tables)
  std::vector<float> rope_cs_swa;  // the same by the sliding layers' base and scale, where they differ
  std::vector<float> lora_in;   // a LoRA product's input rows (normed, or the FFN's product)

  void reserve(const HParams& hp, int64_t n_tokens);
};

// Checks a batch against the vocabulary and the view before anything runs.
Status validate_batch(const HParams& hp, const Batch& batch, const KvView& kv);

// x[t] = row tokens[t] of the embedding table.
void embed(const kernels::WeightMatrix& tok_embd, const Batch& batch, float* x);

// x[i] += y[i] over n_tokens rows of n (the residual connection).
void add_rows(float* x, const float* y, int64_t n_tokens, int64_t n, ThreadPool& pool);

// Each token's RoPE cos/sin into ws.rope_cs, once per forward: every layer
// rotates by the same angles, so no layer recomputes them. `freq_factors`:
// rope_freqs.weight's per-pair divisors, or empty. Sliding layers with a RoPE
// of their own (hp.rope_freq_base_swa, _scale_swa) get ws.rope_cs_swa.
void rope_tables(const HParams& hp, const std::vector<float>& freq_factors, const Batch& batch,
                 Workspace& ws, ThreadPool& pool);

// The weights of the projection that follows a block's last one (see
// kernels::matmul_many's `next`): only a hint for the memory, never for results.
using NextWeights = std::span<const kernels::WeightMatrix* const>;

// Self-attention of layer `layer` for every token of the batch, on
// rms_norm(ws.x) * norm: projections (+ bias), per-head Q/K norms where the
// weights have them, RoPE (angles from rope_tables),
// K/V written to `kv`, causal attention per sequence over the view, output
// projection into ws.tmp. `next`: what follows the output projection.
// The normed rows are made as the projections quantize them (kernels::RowMaker);
// ws.xn holds them only for weights the kernels take as floats.
// `lora`: adapters whose products are added to the projections' outputs
// (before biases), for their tokens only.
void attention(const HParams& hp, const AttentionWeights& w, const std::vector<float>& norm,
               int layer, const Batch& batch, KvView& kv, Workspace& ws, ThreadPool& pool,
               NextWeights next, LayerLoras lora = {});

// SwiGLU FFN of x = rms_norm(ws.x) * norm into ws.tmp: down(silu(gate(x)) *
// up(x)) (GeGLU, gelu for silu, when w.geglu), the normed and the SwiGLU rows made as attention() makes its input.
// `next`: what follows the down projection.
void ffn_swiglu(const HParams& hp, const FfnWeights& w, const std::vector<float>& norm,
                int64_t n_tokens, Workspace& ws, ThreadPool& pool, NextWeights next,
                LayerLoras lora = {});

// rows[t] = rms_norm(rows[t]) * norm for n_tokens rows of hp.n_embd (gemma's
// post-norms), in place.
void norm_rows(const HParams& hp, const std::vector<float>& norm, float* rows, int64_t n_tokens,
               ThreadPool& pool);

// x *= s over n_tokens rows of n (gemma's embedding scale).
void scale_rows(float* x, float s, int64_t n_tokens, int64_t n, ThreadPool& pool);

// The mixture-of-experts FFN (model/moe.h) of x = rms_norm(ws.x) * norm into
// ws.tmp, for the first n_tokens rows.
void ffn_moe(const HParams& hp, const MoeWeights& w, const std::vector<float>& norm,
             int64_t n_tokens, Workspace& ws, ThreadPool& pool);

// Before the last layer's FFN: moves the residual rows of the tokens that want
// logits to the front of ws.x, in batch order, and returns their count. The
// rest of the network only feeds those rows, and (as in llama.cpp) the FFN's
// products then see that many tokens, which decides their summation order.
int64_t keep_output_rows(const Batch& batch, Workspace& ws, int64_t n_embd);

// Final norm of the (compacted, see keep_output_rows) rows that want logits and
// the output projection into `out`, soft-capped when hp.final_softcap > 0.
// `next`: what the next forward starts with.
// `lora`: adapters of the output head (pairs in LayerLora::o), their rows
// the compacted output rows.
void output_logits(const HParams& hp, const DecoderWeights& w, const Batch& batch, Workspace& ws,
                   ThreadPool& pool, Logits& out, NextWeights next, LayerLoras lora = {});

// output_logits without the output head: the final norm of the (compacted)
// rows that want logits into `out` (out.n_vocab = n_embd), for embeddings.
void output_hidden(const HParams& hp, const DecoderWeights& w, const Batch& batch, Workspace& ws,
                   ThreadPool& pool, Logits& out);

// x = gelu(x) over n floats, GELU's tanh form through the reference's F16
// table (ggml's GGML_GELU_FP16), as gemma's GeGLU uses it.
void gelu_inplace(float* x, int64_t n);

}  // namespace cairn::model
