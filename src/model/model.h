// model/model.h — transformer architectures over memory-mapped GGUF weights.
// Owns hyper-parameters read (and validated) from GGUF metadata, the weight
// tensors (kept in their GGUF type, never copied), and one forward pass over a
// ragged batch of tokens from many sequences. K/V storage is NOT owned here:
// forward reads and writes it through KvView, which a cache implements. Never
// tokenizes, samples or schedules; never touches a socket.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "core/tensor_type.h"
#include "gguf/gguf.h"
#include "kernels/kernels.h"
#include "kv/kv_view.h"

namespace cairn {

namespace model {

// How an embedding is made from a sequence's final hidden rows; the values
// are GGUF's <arch>.pooling_type (llama.cpp's enum).
enum class Pooling : int32_t {
  Unspecified = -1,  // the file does not say (decoders): the server's default applies
  None = 0,          // every token's row
  Mean = 1,
  Cls = 2,   // the first token's row
  Last = 3,  // the last token's row
  Rank = 4,  // the first token's row through the classification head (rerankers)
};

struct HParams {
  std::string arch;         // general.architecture, e.g. "llama", "qwen2", "qwen3"
  int64_t n_vocab = 0;      // rows of token_embd.weight
  int64_t n_embd = 0;       // <arch>.embedding_length
  int64_t n_layer = 0;      // <arch>.block_count
  int64_t n_head = 0;       // <arch>.attention.head_count
  int64_t n_head_kv = 0;    // <arch>.attention.head_count_kv (default n_head)
  int64_t n_ff = 0;         // <arch>.feed_forward_length
  int64_t n_ctx_train = 0;  // <arch>.context_length
  int64_t head_dim = 0;     // <arch>.attention.key_length, default n_embd / n_head
  int64_t n_rot = 0;        // <arch>.rope.dimension_count (default head_dim)
  float rope_freq_base = 10000.0f;
  float rope_freq_scale = 1.0f;  // 1 / <arch>.rope.scaling.factor (linear and yarn scaling)
  // YaRN (rope.scaling.type "yarn"), as the reference's rope op takes it
  // (kernels::RopeYarn): the blend weight (0 without YaRN), the factor cos and
  // sin are multiplied by (rope.scaling.attn_factor too, with any scaling),
  // the correction betas and the context the ramp is measured against.
  float yarn_ext_factor = 0.0f;
  float yarn_attn_factor = 1.0f;
  float yarn_beta_fast = 32.0f;
  float yarn_beta_slow = 1.0f;
  int64_t n_ctx_orig_yarn = 0;  // rope.scaling.original_context_length (default context_length)
  bool rope_longrope = false;   // rope.scaling.type "longrope" (rope_factors_long/short)
  float norm_eps = 1e-5f;        // <arch>.attention.layer_norm_rms_epsilon
  kernels::RopeStyle rope_style = kernels::RopeStyle::Norm;
  bool tied_output = false;  // output.weight absent: token_embd.weight is used
  // Mixture of experts (qwen2moe, qwen3moe; all 0 in a dense model).
  int64_t n_expert = 0;       // <arch>.expert_count
  int64_t n_expert_used = 0;  // <arch>.expert_used_count, in [1, n_expert]
  int64_t n_ff_exp = 0;       // <arch>.expert_feed_forward_length (default n_ff / n_expert_used)
  int64_t n_ff_shexp = 0;     // <arch>.expert_shared_feed_forward_length (default n_ff)
  // Sliding-window layers (gemma2, gemma3; llama with attention.sliding_window,
  // every layer; 0 or empty otherwise).
  int64_t n_swa = 0;                   // <arch>.attention.sliding_window
  std::vector<uint8_t> swa_layers;     // n_layer entries, 1: the layer sees its last n_swa positions
  float rope_freq_base_swa = 10000.0f;  // the sliding layers' RoPE
  float rope_freq_scale_swa = 1.0f;
  float attn_scale = 0.0f;     // Q's scale before attention; 0: 1/sqrt(head_dim)
  float attn_softcap = 0.0f;   // scores = cap * tanh(scores / cap) before the softmax; 0: none
  float final_softcap = 0.0f;  // the logits likewise; 0: none
  // Embedding models (bert): attention sees the whole sequence
  // (<arch>.attention.causal, default true), the pooling the file asks for,
  // whether there is a language-model head (forward() gives logits) and how
  // many scores the classification head of a reranker makes (0: none).
  bool causal = true;
  Pooling pooling = Pooling::Unspecified;
  bool has_lm_head = true;
  int64_t n_cls_out = 0;

  int64_t kv_row_elems() const { return n_head_kv * head_dim; }  // one K (or V) row per token
  kv::KvShape kv_shape() const { return {(int32_t)n_layer, (int32_t)kv_row_elems()}; }
  // RoPE through kernels::rope_angles_yarn rather than rope_angles.
  bool rope_yarn() const { return yarn_ext_factor != 0.0f || yarn_attn_factor != 1.0f; }
  // kv_shape() with the sliding layers and their window, for a paged cache
  // that keeps only each sliding layer's window (kv/kv_cache.h).
  kv::KvShape paged_kv_shape() const {
    kv::KvShape s = kv_shape();
    if (n_swa > 0 && n_swa <= INT32_MAX && (int64_t)swa_layers.size() == n_layer) {
      s.window = (int32_t)n_swa;
      s.sliding = swa_layers;
    }
    return s;
  }
  bool is_swa(int64_t il) const {
    return il >= 0 && il < (int64_t)swa_layers.size() && swa_layers[(size_t)il] != 0;
  }
};

// One entry per token; tokens of one sequence may be interleaved with others.
// Owns its vectors so a scheduler can clear() and refill one Batch every step.
struct Batch {
  std::vector<Token> tokens;
  std::vector<int32_t> positions;  // position of each token in its sequence
  std::vector<SeqId> seqs;
  std::vector<uint8_t> wants_logits;  // 0/1 (not vector<bool>: spans must work)
  // The LoRA adapter each token runs with (Model::set_adapters: id i + 1 is
  // adapter i, 0 the base model); empty: every token runs on the base model.
  std::vector<uint16_t> adapters;
  // Every row in the float orders of a one-token batch (kernels/float_order.h
  // OneTokenOrder): speculative verification of a lone stream's drafts.
  bool one_token_order = false;

  void add(Token t, int32_t pos, SeqId seq, bool logits, uint16_t adapter = 0) {
    tokens.push_back(t);
    positions.push_back(pos);
    seqs.push_back(seq);
    wants_logits.push_back(logits ? 1 : 0);
    adapters.push_back(adapter);
  }
  void clear() {
    tokens.clear();
    positions.clear();
    seqs.clear();
    wants_logits.clear();
    adapters.clear();
    one_token_order = false;
  }
  size_t size() const { return tokens.size(); }
};

// K/V storage is the kv layer's interface (kv/kv_view.h).
using kv::KvView;

// Vocab-sized float rows for the tokens that asked for them, in batch order.
struct Logits {
  int64_t n_vocab = 0;
  std::vector<int32_t> batch_index;  // batch_index[r]: the batch entry row r belongs to
  std::vector<float> data;           // rows() * n_vocab

  size_t rows() const { return batch_index.size(); }
  std::span<const float> row(size_t r) const {
    return {data.data() + r * (size_t)n_vocab, (size_t)n_vocab};
  }
};

// One agent's part of a model cut for tensor and pipeline parallelism
// (src/distributed): the layers of its pipeline stage and, in each, its
// tensor-parallel rank's slice: query and K/V heads [r * n / tp, (r + 1) * n
// / tp) (rows of Q/K/V, columns of the output projection), the same share of
// the FFN (rows of gate and up, columns of down), and a contiguous range of
// the vocabulary (rows of the output head). The default is the whole model.
struct ShardSpec {
  int tp_rank = 0;
  int tp_size = 1;
  int64_t layer_begin = 0;
  int64_t layer_end = -1;  // -1: through the last layer
};

// Collectives over the tensor-parallel ranks of one stage (rank order).
class ShardComm {
 public:
  virtual ~ShardComm() = default;
  // data[i] = the sum over ranks of their data[i].
  virtual Status all_reduce_sum(float* data, size_t n) = 0;
  // out[r * n + i] = rank r's in[i].
  virtual Status all_gather(const float* in, size_t n, float* out) = 0;
};

// What a shard's forward takes and gives besides the batch and its K/V.
struct StageIo {
  // The residual rows [T, n_embd] the previous stage made; null on the first
  // stage, which embeds the batch's tokens.
  const float* hidden_in = nullptr;
  // Every stage but the last: receives the rows [T, n_embd] for the next
  // one (and no logits are made).
  std::vector<float>* hidden_out = nullptr;
  ShardComm* comm = nullptr;  // required when the shard's tp_size > 1
};

struct LoraAdapter;  // model/lora.h

struct LoadOptions {
  int n_threads = 0;  // threads of the model's kernel pool, caller included; <=0: hardware
  ShardSpec shard;    // the whole model unless set
  // Tokens per sequence the caller will serve (at most context_length); 0:
  // context_length. LongRoPE files (phi3's rope_factors_long/short) take the
  // long factors when it exceeds rope.scaling.original_context_length, as the
  // reference decides by its context size.
  int64_t n_ctx = 0;
};

class Model {
 public:
  virtual ~Model() = default;

  // Reads general.architecture, picks the architecture from the table, reads and
  // validates hyper-parameters and weight tensors. The model keeps `file` alive
  // (weights point into its mapping). Errors name the metadata key or tensor.
  static Result<std::unique_ptr<Model>> load(std::shared_ptr<const gguf::File> file,
                                             const LoadOptions& options = {});

  // Hyper-parameters only, without loading weights' types (for `cairn gguf` etc.).
  static Result<HParams> read_hparams(const gguf::File& file);

  const HParams& hparams() const { return hparams_; }

  // Runs every token of `batch` through the network; fills `out` with one row per
  // token whose wants_logits is set. Errors (bad token id, position beyond the
  // view's capacity, malformed batch) are reported before any K/V is written.
  virtual Status forward(const Batch& batch, KvView& kv, Logits& out) = 0;

  // As forward, but `out` gets the final hidden rows (after the output norm;
  // out.n_vocab is n_embd) of the tokens whose wants_logits is set: what
  // embeddings are pooled from. A non-causal model (hparams().causal false)
  // needs each sequence whole in the batch, from position 0, and says so
  // otherwise. A model without this path says so.
  virtual Status forward_hidden(const Batch& batch, KvView& kv, Logits& out);

  // A reranker's classification head (hparams().n_cls_out > 0) over one
  // pooled row of n_embd: n_cls_out scores. A model without one says so.
  virtual Status classify(std::span<const float> pooled, std::vector<float>& scores);

  // A shard's part of a forward (see ShardSpec): the first stage embeds the
  // tokens, the others start from io.hidden_in; the last stage fills `out`
  // with the whole vocabulary's logits (gathered from its tensor-parallel
  // ranks), the others io.hidden_out. `kv` holds this shard's layers and K/V
  // heads only (kv_shape()). A model that cannot be cut says so.
  virtual Status forward_stage(const Batch& batch, KvView& kv, const StageIo& io, Logits& out);

  // LoRA adapters applied at run time, chosen per token by Batch::adapters
  // (id i + 1 is adapters[i]): they share the base weights, so requests of
  // several adapters and of the base model batch together. Replaces any
  // earlier set. Errors name a tensor the model cannot adapt at run time
  // (a model that cannot adapt any says so); nothing changes then.
  virtual Status set_adapters(std::vector<std::shared_ptr<const LoraAdapter>> adapters);
  size_t n_adapters() const { return n_adapters_; }

  // The shard this model was loaded as, and the K/V geometry it computes with
  // (the whole model's hparams().kv_shape() unless it is a shard).
  const ShardSpec& shard() const { return shard_; }
  kv::KvShape kv_shape() const;

  // The bytes one token's forward reads from its weight matrices (packed
  // copies where they exist), in the forward's order; the embedding table,
  // read one row per token, is left out (a tied output head, read whole, is
  // in). For probes that must read the same memory as decode: on a host whose
  // pages differ in speed, a fresh buffer is not the model's memory.
  virtual std::vector<std::span<const uint8_t>> weight_streams() const = 0;

 protected:
  explicit Model(HParams hp, ShardSpec shard = {}) : hparams_(std::move(hp)), shard_(shard) {}
  HParams hparams_;
  ShardSpec shard_;
  size_t n_adapters_ = 0;
};

// Names of the architectures load() understands ("llama", "qwen2", ...).
std::vector<std::string_view> supported_architectures();

// The hyper-parameters one shard computes with: its stage's layer count, its
// heads and FFN width (n_vocab stays the whole vocabulary's). Errors (one
// line) when the model cannot be cut so: heads or FFN width not divisible by
// tp_size, a layer range outside the model, a vocabulary smaller than tp_size,
// a mixture-of-experts model cut for tensor parallelism (its stages may be cut).
Result<HParams> shard_hparams(const HParams& hp, const ShardSpec& shard);

// Agent `rank` of rank_size in stage_size pipeline stages (MindSpore's
// layout: stage = rank / (rank_size / stage_size), tensor-parallel rank the
// remainder); stage s holds layers [s * n_layer / S, (s + 1) * n_layer / S).
// Errors as shard_hparams, and when there are more stages than layers.
Result<ShardSpec> shard_for_rank(const HParams& hp, int rank, int rank_size, int stage_size);

// The vocabulary rows [begin, end) of rank tp_rank's output head: chunks of
// ceil(n_vocab / tp_size), the last one shorter.
std::pair<int64_t, int64_t> vocab_range(int64_t n_vocab, int tp_rank, int tp_size);

}  // namespace model
}  // namespace cairn
