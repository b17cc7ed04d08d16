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
#include <vector>

#include "core/status.h"
#include "core/tensor_type.h"
#include "gguf/gguf.h"
#include "kernels/kernels.h"
#include "kv/kv_view.h"

namespace cairn {

namespace model {

struct HParams {
  std::string arch;         // general.architecture, e.g. "llama", "qwen2"
  int64_t n_vocab = 0;      // rows of token_embd.weight
  int64_t n_embd = 0;       // <arch>.embedding_length
  int64_t n_layer = 0;      // <arch>.block_count
  int64_t n_head = 0;       // <arch>.attention.head_count
  int64_t n_head_kv = 0;    // <arch>.attention.head_count_kv (default n_head)
  int64_t n_ff = 0;         // <arch>.feed_forward_length
  int64_t n_ctx_train = 0;  // <arch>.context_length
  int64_t head_dim = 0;     // n_embd / n_head
  int64_t n_rot = 0;        // <arch>.rope.dimension_count (default head_dim)
  float rope_freq_base = 10000.0f;
  float rope_freq_scale = 1.0f;  // 1 / <arch>.rope.scaling.factor for linear scaling
  float norm_eps = 1e-5f;        // <arch>.attention.layer_norm_rms_epsilon
  kernels::RopeStyle rope_style = kernels::RopeStyle::Norm;
  bool tied_output = false;  // output.weight absent: token_embd.weight is used

  int64_t kv_row_elems() const { return n_head_kv * head_dim; }  // one K (or V) row per token
  kv::KvShape kv_shape() const { return {(int32_t)n_layer, (int32_t)kv_row_elems()}; }
};

// One entry per token; tokens of one sequence may be interleaved with others.
// Owns its vectors so a scheduler can clear() and refill one Batch every step.
struct Batch {
  std::vector<Token> tokens;
  std::vector<int32_t> positions;  // position of each token in its sequence
  std::vector<SeqId> seqs;
  std::vector<uint8_t> wants_logits;  // 0/1 (not vector<bool>: spans must work)

  void add(Token t, int32_t pos, SeqId seq, bool logits) {
    tokens.push_back(t);
    positions.push_back(pos);
    seqs.push_back(seq);
    wants_logits.push_back(logits ? 1 : 0);
  }
  void clear() {
    tokens.clear();
    positions.clear();
    seqs.clear();
    wants_logits.clear();
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

struct LoadOptions {
  int n_threads = 0;  // threads of the model's kernel pool, caller included; <=0: hardware
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

  // The bytes one token's forward reads from its weight matrices (packed
  // copies where they exist), in the forward's order; the embedding table,
  // read one row per token, is left out (a tied output head, read whole, is
  // in). For probes that must read the same memory as decode: on a host whose
  // pages differ in speed, a fresh buffer is not the model's memory.
  virtual std::vector<std::span<const uint8_t>> weight_streams() const = 0;

 protected:
  explicit Model(HParams hp) : hparams_(std::move(hp)) {}
  HParams hparams_;
};

// Names of the architectures load() understands ("llama", "qwen2", ...).
std::vector<std::string_view> supported_architectures();

}  // namespace model
}  // namespace cairn
