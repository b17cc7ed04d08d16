// modelgen/model_builder.h — writing GGUF models with random weights.
// Owns a generated llama/qwen2 model's metadata, its weight scales, the choice
// of tensor type per tensor (with fallbacks where a row does not fit a block
// size) and the streamed, atomic write (temp file + rename): one tensor's rows
// at a time, so a 1B-parameter model never sits in memory. Tensor names,
// shapes and order are the loader's (model/tensor_names.h).
// Used by `cairn make-model`, the built-in demo model and tests. Never loads
// or runs a model; never invents a tokenizer (the caller brings a VocabSource).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor_type.h"
#include "gguf/gguf.h"
#include "gguf/gguf_writer.h"

namespace cairn::modelgen {

// llama.cpp's mixed K-quant file types, the ones most published models ship in.
enum class KMix { None, Q3_K_M, Q4_K_M, Q5_K_M };

struct RandomModelSpec {
  // "llama", "qwen2" (q/k/v biases, NeoX RoPE, base 1e6), "qwen3" (per-head
  // Q/K norms, NeoX, base 1e6), "phi3" (fused attn_qkv and gate/up, NeoX),
  // the mixture-of-experts "qwen2moe" (qwen2's attention, a shared
  // expert) and "qwen3moe" (qwen3's attention), or "gemma2" (post-norms,
  // GeGLU, output tied to token_embd, sliding-window and soft-capping keys)
  // or "gemma3" (gemma2's with per-head Q/K norms, no attention soft-capping,
  // RoPE base 1e6 for the global layers and 10000 for the sliding ones)
  // or "bert" (an encoder for embeddings: token, token-type and position
  // embeddings, post-LayerNorm layers with biases, GELU FFN, no output head;
  // see `pooling`)
  std::string arch = "llama";
  // <arch>.pooling_type written into the file: "mean", "cls", "last" or
  // "rank" (bert only: adds a reranker's classification head, cls then
  // cls.output with one score); empty: bert gets "mean", decoders no key.
  std::string pooling;
  std::string name;            // general.name; a default names the shape
  int64_t dim = 256;           // embedding length
  int64_t layers = 2;
  int64_t heads = 4;
  int64_t kv_heads = 4;
  int64_t ffn = 512;
  int64_t ctx = 2048;                 // <arch>.context_length
  // Head size; 0: dim / heads. Another value is written as
  // attention.key_length / value_length (Qwen3's heads are wider).
  int64_t head_dim = 0;
  // "llama3": a rope_freqs.weight of Llama 3.1's per-pair frequency divisors
  // (factor 8, low/high frequency factors 1 and 4, original context 8192);
  // empty: none.
  std::string rope_freqs;
  // Mixture of experts (qwen2moe, qwen3moe only; 0: the default): expert
  // count (8), experts per token (2), one expert's FFN width and the shared
  // expert's (qwen2moe) (both `ffn`). The router (ffn_gate_inp) stays F32
  // whatever `type` is, as llama.cpp's quantizer leaves it.
  int64_t experts = 0;
  int64_t experts_used = 0;
  int64_t expert_ffn = 0;
  int64_t shared_ffn = 0;
  // Gemma (0: the default): attention.sliding_window (gemma2: 4096; gemma3:
  // none), attn_logit_softcapping (gemma2: 50) and final_logit_softcapping
  // (gemma2: 30; gemma3: none).
  // llama: attention.sliding_window for every layer (Mistral 7B v0.1's); 0: none.
  int64_t sliding_window = 0;
  // Layers from `quiet_from` on (-1: none) have their output projections
  // (attn_output, ffn_down) scaled by `quiet_scale`: they nudge the residual
  // stream rather than steer it. Every tensor's values depend only on the
  // seed, its name and shape, so such a model and one of its first
  // quiet_from layers (same seed and shape) agree most of the time: a
  // target and draft pair for speculative decoding's benchmark.
  int64_t quiet_from = -1;
  float quiet_scale = 1.0f;
  float attn_softcap = 0.0f;
  float final_softcap = 0.0f;
  // RoPE scaling keys: rope.scaling.type ("linear", "yarn" or, phi3 only,
  // "longrope"; empty: none written), rope.scaling.factor (longrope: the
  // largest long factor instead, and the converter's attn_factor) and, for
  // yarn and longrope, rope.scaling.original_context_length (0: ctx / factor).
  std::string rope_scaling;
  float rope_scaling_factor = 0.0f;
  int64_t rope_orig_ctx = 0;
  TensorType type = TensorType::F32;  // of every 2-D weight; norms and biases stay F32
  // A llama.cpp K-quant mix instead of one type (`type` is then its base:
  // Q3_K, Q4_K or Q5_K): the per-tensor choices of mix_type below.
  KMix mix = KMix::None;
  uint64_t seed = 0;
};

// The tokenizer half of a model file: its size, which rows are byte tokens
// (their output rows are zero, as in the shared synthetic models, so greedy
// text stays valid UTF-8), and a function that writes the tokenizer.* keys.
struct VocabSource {
  int64_t n_vocab = 0;
  std::vector<uint8_t> is_byte_token;  // n_vocab entries, 0/1
  std::string model;                   // tokenizer.ggml.model ("bert": WordPiece), or empty
  std::function<void(gguf::Writer&)> write_metadata;
};

// Every tokenizer.* key of `file` (kept alive by the returned source).
Result<VocabSource> vocab_from_gguf(std::shared_ptr<const gguf::File> file);

struct TensorFallback {
  std::string tensor;
  TensorType wanted;
  TensorType used;
};

struct BuildSummary {
  uint64_t n_params = 0;
  uint64_t bytes = 0;                     // file size
  std::vector<TensorFallback> fallbacks;  // tensors not stored in spec.type
};

// One-line error naming the bad field, or ok.
Status validate(const RandomModelSpec& spec);

// Llama 3.1's RoPE frequency divisors for n_rot rotated dimensions (n_rot / 2
// values): 1 for wavelengths under original_ctx / high_freq_factor, `factor`
// above original_ctx / low_freq_factor, a smooth blend between.
std::vector<float> llama3_rope_factors(int64_t n_rot, double base, double factor = 8.0,
                                       double low_freq_factor = 1.0,
                                       double high_freq_factor = 4.0,
                                       double original_ctx = 8192.0);

// The type a 2-D tensor of row length `row` gets when `wanted` is asked for.
// Like llama.cpp's quantizer, a row that is not a multiple of the block size
// falls back: Q2_K/Q3_K to Q4_0, Q4_K to Q5_0, Q5_K to Q5_1, Q6_K to Q8_0,
// IQ4_XS to IQ4_NL, and to F16 when even that block does not fit.
TensorType storage_type(TensorType wanted, int64_t row);

// A mix's type for one tensor before any fallback, as llama.cpp's quantizer
// picks it for a llama-family model: Q4_K_M and Q5_K_M put the output, and
// attn_v and ffn_down of the layers more_bits_layer names, in Q6_K; Q3_K_M
// puts the output in Q6_K, attn_output in Q4_K, attn_v in Q5_K for the first
// two layers and Q4_K after, ffn_down in Q5_K for the first sixteenth of the
// layers and Q4_K after; a fused attn_qkv goes one step up (Q4_K, Q5_K, Q6_K).
// `role` is one of "output", "attn_v", "attn_output", "attn_qkv", "ffn_down",
// or anything else (the base type). The experts' and the shared expert's down
// projections (ffn_down_exps, ffn_down_shexp) take ffn_down's rule, as in
// llama.cpp, which matches them by that part of their names.
TensorType mix_type(KMix mix, TensorType base, std::string_view role, int64_t layer, int64_t n_layers);

// llama.cpp's rule for the layers whose attn_v and ffn_down Q4_K_M stores in
// Q6_K: the first and last eighth of the layers, and every third in between.
bool more_bits_layer(int64_t layer, int64_t n_layers);

// Writes the model to `path` via a temp file in the same folder and a rename,
// so a reader never sees a half-written file and concurrent writers of the
// same deterministic content are safe. Same spec + vocab = same bytes, for
// any `n_threads` (threads quantize rows; <= 0: all cores).
Result<BuildSummary> write_random_model(const RandomModelSpec& spec, const VocabSource& vocab,
                                        const std::string& path, int n_threads = 1);

}  // namespace cairn::modelgen
