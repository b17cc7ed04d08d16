// model/bert.cpp — the `bert` architecture: an encoder for embeddings and
// reranking, in the tensor layout llama.cpp's converter writes. Token,
// token-type (row 0: "sentence A") and learned position embeddings, their
// LayerNorm, then post-norm layers: non-causal attention with biases, the
// residual and attn_output_norm, a GELU FFN with biases, the residual and
// layer_output_norm. No output head: forward_hidden gives the last layer's
// rows; a reranker's classification head (cls, tanh, cls.output) is classify().
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/sgemm.h"
#include "model/arch.h"

namespace cairn::model {
namespace {

struct BertLayer {
  kernels::WeightMatrix wq, wk, wv, wo, up, down;
  std::vector<float> bq, bk, bv, bo, b_up, b_down;  // empty: no bias
  std::vector<float> attn_norm_w, attn_norm_b, out_norm_w, out_norm_b;
};

struct BertWeights {
  kernels::WeightMatrix tok_embd, pos_embd;
  std::vector<float> type_row0;  // token_types.weight's first row; empty when absent
  std::vector<float> embd_norm_w, embd_norm_b;
  std::vector<BertLayer> layers;
  kernels::WeightMatrix cls, cls_out;  // rows 0 when absent
  std::vector<float> cls_b, cls_out_b;
};

// ggml_norm's LayerNorm (mean, then the mean of squared deviations), times
// w plus b, in place. No kernel exists for it; rows are short next to the matmuls.
void layer_norm(float* x, const std::vector<float>& w, const std::vector<float>& b, int64_t n,
                float eps) {
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += x[i];
  const float mean = (float)(sum / (double)n);
  double sq = 0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] -= mean;
    sq += (double)x[i] * x[i];
  }
  const float scale = 1.0f / std::sqrt((float)(sq / (double)n) + eps);
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] * scale * w[(size_t)i] + b[(size_t)i];
}

void add_bias_rows(float* rows, const std::vector<float>& bias, int64_t n_rows) {
  if (bias.empty()) return;
  const int64_t n = (int64_t)bias.size();
  for (int64_t t = 0; t < n_rows; ++t) kernels::add(rows + t * n, bias.data(), n);
}

Result<std::vector<float>> optional_vector(const gguf::File& f, const std::string& name,
                                           int64_t n) {
  if (!f.find_tensor(name)) return std::vector<float>{};
  return find_vector(f, name, n);
}

Result<BertWeights> load_bert_weights(const gguf::File& f, const HParams& hp) {
  BertWeights w;
  const int64_t E = hp.n_embd, nq = hp.n_head * hp.head_dim, nkv = hp.kv_row_elems();
  CAIRN_ASSIGN_OR_RETURN(w.tok_embd, find_matrix(f, "token_embd.weight", E, hp.n_vocab));
  CAIRN_ASSIGN_OR_RETURN(w.pos_embd, find_matrix(f, "position_embd.weight", E, hp.n_ctx_train));
  if (const gguf::TensorInfo* t = f.find_tensor("token_types.weight")) {
    if (t->dims.size() != 2 || t->dims[1] < 1)
      return Status::error("tensor 'token_types.weight' must be 2-D [n_embd, n_token_types]");
    kernels::WeightMatrix types;
    CAIRN_ASSIGN_OR_RETURN(types, find_matrix(f, "token_types.weight", E, t->dims[1]));
    w.type_row0.resize((size_t)E);
    kernels::get_row(types, 0, w.type_row0.data());
  }
  CAIRN_ASSIGN_OR_RETURN(w.embd_norm_w, find_vector(f, "token_embd_norm.weight", E));
  CAIRN_ASSIGN_OR_RETURN(w.embd_norm_b, find_vector(f, "token_embd_norm.bias", E));
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    BertLayer l;
    CAIRN_ASSIGN_OR_RETURN(l.wq, find_matrix(f, p + "attn_q.weight", E, nq));
    CAIRN_ASSIGN_OR_RETURN(l.wk, find_matrix(f, p + "attn_k.weight", E, nkv));
    CAIRN_ASSIGN_OR_RETURN(l.wv, find_matrix(f, p + "attn_v.weight", E, nkv));
    CAIRN_ASSIGN_OR_RETURN(l.wo, find_matrix(f, p + "attn_output.weight", nq, E));
    CAIRN_ASSIGN_OR_RETURN(l.up, find_matrix(f, p + "ffn_up.weight", E, hp.n_ff));
    CAIRN_ASSIGN_OR_RETURN(l.down, find_matrix(f, p + "ffn_down.weight", hp.n_ff, E));
    CAIRN_ASSIGN_OR_RETURN(l.bq, optional_vector(f, p + "attn_q.bias", nq));
    CAIRN_ASSIGN_OR_RETURN(l.bk, optional_vector(f, p + "attn_k.bias", nkv));
    CAIRN_ASSIGN_OR_RETURN(l.bv, optional_vector(f, p + "attn_v.bias", nkv));
    CAIRN_ASSIGN_OR_RETURN(l.bo, optional_vector(f, p + "attn_output.bias", E));
    CAIRN_ASSIGN_OR_RETURN(l.b_up, optional_vector(f, p + "ffn_up.bias", hp.n_ff));
    CAIRN_ASSIGN_OR_RETURN(l.b_down, optional_vector(f, p + "ffn_down.bias", E));
    CAIRN_ASSIGN_OR_RETURN(l.attn_norm_w, find_vector(f, p + "attn_output_norm.weight", E));
    CAIRN_ASSIGN_OR_RETURN(l.attn_norm_b, find_vector(f, p + "attn_output_norm.bias", E));
    CAIRN_ASSIGN_OR_RETURN(l.out_norm_w, find_vector(f, p + "layer_output_norm.weight", E));
    CAIRN_ASSIGN_OR_RETURN(l.out_norm_b, find_vector(f, p + "layer_output_norm.bias", E));
    w.layers.push_back(std::move(l));
  }
  // The reranker's head: cls [n_embd, n_embd] (+ bias), cls.output
  // [n_embd, n_cls_out] (+ bias). Either may be absent, as in the reference.
  if (f.find_tensor("cls.weight")) {
    CAIRN_ASSIGN_OR_RETURN(w.cls, find_matrix(f, "cls.weight", E, E));
    CAIRN_ASSIGN_OR_RETURN(w.cls_b, optional_vector(f, "cls.bias", E));
  }
  if (const gguf::TensorInfo* t = f.find_tensor("cls.output.weight")) {
    if (t->dims.size() != 2 || t->dims[1] < 1 || t->dims[1] > 65536)
      return Status::error("tensor 'cls.output.weight' must be 2-D [n_embd, n_cls_out] with "
                           "1 to 65536 outputs");
    CAIRN_ASSIGN_OR_RETURN(w.cls_out, find_matrix(f, "cls.output.weight", E, t->dims[1]));
    CAIRN_ASSIGN_OR_RETURN(w.cls_out_b, optional_vector(f, "cls.output.bias", t->dims[1]));
  }
  return w;
}

class BertModel final : public Model {
 public:
  BertModel(std::shared_ptr<const gguf::File> file, HParams hp, BertWeights w, int n_threads)
      : Model(std::move(hp)), file_(std::move(file)), w_(std::move(w)), pool_(n_threads) {}

  Status forward(const Batch&, KvView&, Logits&) override {
    return Status::error("'" + hparams_.arch +
                         "' is an embedding model: it has no language-model head to give logits "
                         "(use embeddings or reranking)");
  }

  // Non-causal: each token attends to every token of its sequence in this
  // batch, so the KvView is not read or written (nothing is cached between
  // calls) and every sequence must be whole in the batch.
  Status forward_hidden(const Batch& batch, KvView&, Logits& out) override {
    CAIRN_RETURN_IF_ERROR(validate(batch));
    const HParams& hp = hparams_;
    const int64_t T = (int64_t)batch.size(), E = hp.n_embd;
    const int64_t nq = hp.n_head * hp.head_dim, nkv = hp.kv_row_elems();
    x_.resize((size_t)(T * E));
    tmp_.resize((size_t)(T * E));
    q_.resize((size_t)(T * nq));
    k_.resize((size_t)(T * nkv));
    v_.resize((size_t)(T * nkv));
    attn_.resize((size_t)(T * nq));
    up_.resize((size_t)(T * hp.n_ff));
    // Embeddings: token + type row 0 + position, then their LayerNorm.
    std::vector<float> pos((size_t)E);
    for (int64_t t = 0; t < T; ++t) {
      float* x = x_.data() + t * E;
      kernels::get_row(w_.tok_embd, batch.tokens[(size_t)t], x);
      if (!w_.type_row0.empty()) kernels::add(x, w_.type_row0.data(), E);
      kernels::get_row(w_.pos_embd, batch.positions[(size_t)t], pos.data());
      kernels::add(x, pos.data(), E);
    }
    norm_rows(x_.data(), w_.embd_norm_w, w_.embd_norm_b, T);
    group_sequences(batch);
    const int n_layer = (int)hp.n_layer;
    int64_t n = T;  // rows still computed: all, then only the output rows in the last layer
    for (int il = 0; il < n_layer; ++il) {
      const BertLayer& l = w_.layers[(size_t)il];
      const kernels::MatmulJob qkv[] = {{&l.wq, q_.data()}, {&l.wk, k_.data()}, {&l.wv, v_.data()}};
      kernels::matmul_many(qkv, x_.data(), T, pool_);
      add_bias_rows(q_.data(), l.bq, T);
      add_bias_rows(k_.data(), l.bk, T);
      add_bias_rows(v_.data(), l.bv, T);
      attend_all();
      if (il + 1 == n_layer) n = keep_rows(batch);  // as the reference: only rows it outputs
      if (n == 0) break;
      kernels::matmul(l.wo, attn_.data(), n, tmp_.data(), pool_);
      add_bias_rows(tmp_.data(), l.bo, n);
      kernels::add(x_.data(), tmp_.data(), n * E);
      norm_rows(x_.data(), l.attn_norm_w, l.attn_norm_b, n);
      kernels::matmul(l.up, x_.data(), n, up_.data(), pool_);
      add_bias_rows(up_.data(), l.b_up, n);
      pool_.parallel_for(n, [&](int64_t b, int64_t e) {
        gelu_inplace(up_.data() + b * hp.n_ff, (e - b) * hp.n_ff);
      });
      kernels::matmul(l.down, up_.data(), n, tmp_.data(), pool_);
      add_bias_rows(tmp_.data(), l.b_down, n);
      kernels::add(x_.data(), tmp_.data(), n * E);
      norm_rows(x_.data(), l.out_norm_w, l.out_norm_b, n);
    }
    out.n_vocab = E;
    out.batch_index.clear();
    for (size_t t = 0; t < batch.size(); ++t)
      if (batch.wants_logits[t]) out.batch_index.push_back((int32_t)t);
    out.data.assign(x_.begin(), x_.begin() + (int64_t)out.batch_index.size() * E);
    return Status::ok();
  }

  // cls (+ bias), tanh, cls.output (+ bias): the reference's RANK head.
  Status classify(std::span<const float> pooled, std::vector<float>& scores) override {
    if (w_.cls_out.rows == 0) return Status::error("this model has no classification head");
    const int64_t E = hparams_.n_embd;
    if ((int64_t)pooled.size() != E)
      return Status::error("classify takes one pooled row of " + std::to_string(E) +
                           " floats, got " + std::to_string(pooled.size()));
    std::vector<float> h(pooled.begin(), pooled.end());
    if (w_.cls.rows > 0) {
      std::vector<float> y((size_t)E);
      kernels::matmul(w_.cls, h.data(), 1, y.data(), pool_);
      add_bias_rows(y.data(), w_.cls_b, 1);
      for (float& v : y) v = std::tanh(v);
      h = std::move(y);
    }
    scores.assign((size_t)w_.cls_out.rows, 0.0f);
    kernels::matmul(w_.cls_out, h.data(), 1, scores.data(), pool_);
    add_bias_rows(scores.data(), w_.cls_out_b, 1);
    return Status::ok();
  }

  std::vector<std::span<const uint8_t>> weight_streams() const override {
    std::vector<std::span<const uint8_t>> s;
    for (const BertLayer& l : w_.layers)
      for (const kernels::WeightMatrix* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.up, &l.down})
        s.push_back(kernels::weight_stream(*m));
    return s;
  }

 private:
  Status validate(const Batch& b) const {
    const size_t n = b.tokens.size();
    if (n == 0) return Status::error("batch is empty");
    if (b.positions.size() != n || b.seqs.size() != n || b.wants_logits.size() != n ||
        (!b.adapters.empty() && b.adapters.size() != n))
      return Status::error("batch fields have different lengths");
    for (uint16_t a : b.adapters)
      if (a != 0) return Status::error("'" + hparams_.arch + "' cannot apply LoRA adapters");
    std::vector<std::pair<SeqId, int32_t>> slots;
    slots.reserve(n);
    for (size_t i = 0; i < n; ++i) {
      const std::string at = "batch entry " + std::to_string(i) + ": ";
      if (b.tokens[i] < 0 || b.tokens[i] >= hparams_.n_vocab)
        return Status::error(at + "token " + std::to_string(b.tokens[i]) +
                             " is outside the vocabulary of " + std::to_string(hparams_.n_vocab));
      if (b.positions[i] < 0 || b.positions[i] >= hparams_.n_ctx_train)
        return Status::error(at + "position " + std::to_string(b.positions[i]) +
                             " is outside the model's context of " +
                             std::to_string(hparams_.n_ctx_train));
      slots.emplace_back(b.seqs[i], b.positions[i]);
    }
    // Sorted by sequence then position, each sequence must read 0, 1, 2, ...
    std::sort(slots.begin(), slots.end());
    for (size_t i = 0; i < slots.size(); ++i) {
      const bool first = i == 0 || slots[i].first != slots[i - 1].first;
      const int32_t want = first ? 0 : slots[i - 1].second + 1;
      if (slots[i].second != want)
        return Status::error("sequence " + std::to_string(slots[i].first) +
                             " is not whole in the batch (a non-causal model sees a sequence "
                             "all at once: positions 0 to n-1, each once); found position " +
                             std::to_string(slots[i].second) + " where " + std::to_string(want) +
                             " belongs");
    }
    return Status::ok();
  }

  void norm_rows(float* rows, const std::vector<float>& w, const std::vector<float>& b,
                 int64_t n) {
    const int64_t E = hparams_.n_embd;
    const float eps = hparams_.norm_eps;
    pool_.parallel_for(n, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) layer_norm(rows + t * E, w, b, E, eps);
    });
  }

  // Batch rows of each sequence, in batch order.
  void group_sequences(const Batch& batch) {
    seq_rows_.clear();
    std::vector<std::pair<SeqId, int32_t>> order;
    for (size_t t = 0; t < batch.size(); ++t) order.emplace_back(batch.seqs[t], (int32_t)t);
    std::stable_sort(order.begin(), order.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    for (size_t i = 0; i < order.size(); ++i) {
      if (i == 0 || order[i].first != order[i - 1].first) seq_rows_.emplace_back();
      seq_rows_.back().push_back(order[i].second);
    }
  }

  // attn_[t] = softmax(q[t] . K_s / sqrt(head_dim)) V_s over the rows of t's
  // sequence s, per head; one job per (sequence, head).
  void attend_all() {
    const HParams& hp = hparams_;
    const int64_t hd = hp.head_dim, nq = hp.n_head * hd, nkv = hp.kv_row_elems();
    const float scale = 1.0f / std::sqrt((float)hd);
    const int64_t jobs = (int64_t)seq_rows_.size() * hp.n_head;
    pool_.parallel_for(jobs, [&](int64_t begin, int64_t end) {
      // Per (sequence, head): scores = scale · Q Kᵀ and out = softmax(scores) V
      // as two small GEMMs, which read each K and V row once per block of
      // queries instead of once per query (the per-pair dot products with
      // their horizontal sums cost more than every weight matrix).
      std::vector<float> scores, gathered;
      std::vector<uint8_t> pack;
      for (int64_t j = begin; j < end; ++j) {
        const std::vector<int32_t>& rows = seq_rows_[(size_t)(j / hp.n_head)];
        const int64_t h = j % hp.n_head, hk = h * hp.n_head_kv / hp.n_head;
        const int64_t n = (int64_t)rows.size();
        bool contiguous = true;
        for (int64_t i = 1; i < n && contiguous; ++i) contiguous = rows[(size_t)i] == rows[0] + i;
        // Q, K, V and the output of this head: in place when the sequence's
        // rows are one run of the batch, else gathered into [n][hd] blocks.
        const float *q, *k, *v;
        float* o;
        int64_t ldq = nq, ldkv = nkv, ldo = nq;
        if (contiguous) {
          q = q_.data() + rows[0] * nq + h * hd;
          k = k_.data() + rows[0] * nkv + hk * hd;
          v = v_.data() + rows[0] * nkv + hk * hd;
          o = attn_.data() + rows[0] * nq + h * hd;
        } else {
          gathered.resize((size_t)(4 * n * hd));
          float* g = gathered.data();
          for (int64_t i = 0; i < n; ++i) {
            const int64_t t = rows[(size_t)i];
            std::copy_n(q_.data() + t * nq + h * hd, hd, g + i * hd);
            std::copy_n(k_.data() + t * nkv + hk * hd, hd, g + (n + i) * hd);
            std::copy_n(v_.data() + t * nkv + hk * hd, hd, g + (2 * n + i) * hd);
          }
          q = g;
          k = g + n * hd;
          v = g + 2 * n * hd;
          o = g + 3 * n * hd;
          ldq = ldkv = ldo = hd;
        }
        scores.resize((size_t)(n * n));
        pack.resize(std::max(kernels::sgemm_scratch_bytes(hd, n), kernels::sgemm_scratch_bytes(n, hd)) + 64);
        void* scratch = pack.data() + (64 - reinterpret_cast<uintptr_t>(pack.data()) % 64) % 64;
        kernels::SgemmEpilogue scaled;
        scaled.alpha = scale;
        kernels::sgemm(n, n, hd, q, ldq, 1, k, 1, ldkv, scores.data(), n, scaled, scratch, nullptr);
        for (int64_t i = 0; i < n; ++i) kernels::softmax(scores.data() + i * n, n);
        kernels::sgemm(n, hd, n, scores.data(), n, 1, v, ldkv, 1, o, ldo, kernels::SgemmEpilogue{},
                       scratch, nullptr);
        if (!contiguous)
          for (int64_t i = 0; i < n; ++i)
            std::copy_n(o + i * hd, hd, attn_.data() + rows[(size_t)i] * nq + h * hd);
      }
    }, /*grain=*/1);
  }

  // Moves the rows that want output (residual and attention output) to the
  // front, in batch order; returns their count.
  int64_t keep_rows(const Batch& batch) {
    const int64_t E = hparams_.n_embd, nq = hparams_.n_head * hparams_.head_dim;
    int64_t r = 0;
    for (size_t t = 0; t < batch.size(); ++t) {
      if (!batch.wants_logits[t]) continue;
      if ((int64_t)t != r) {
        std::copy_n(x_.data() + (int64_t)t * E, E, x_.data() + r * E);
        std::copy_n(attn_.data() + (int64_t)t * nq, nq, attn_.data() + r * nq);
      }
      ++r;
    }
    return r;
  }

  std::shared_ptr<const gguf::File> file_;  // the weights point into its mapping
  BertWeights w_;
  ThreadPool pool_;
  std::vector<float> x_, tmp_, q_, k_, v_, attn_, up_;
  std::vector<std::vector<int32_t>> seq_rows_;
};

}  // namespace

Status read_bert_hparams(const MetaReader& m, HParams& hp) {
  // An encoder: attention sees the whole sequence unless the file says otherwise.
  auto causal = m.file().get_bool(m.key("attention.causal"));
  if (!causal) return causal.status().with_context("metadata '" + m.key("attention.causal") + "'");
  if (causal->value_or(false))
    return Status::error("metadata '" + m.key("attention.causal") +
                         "' is true: causal BERT models are not supported");
  hp.causal = false;
  hp.has_lm_head = false;
  return Status::ok();
}

Result<std::unique_ptr<Model>> load_bert(std::shared_ptr<const gguf::File> file, HParams hp,
                                         const LoadOptions& options) {
  if (options.shard.tp_size != 1 || options.shard.layer_begin != 0 ||
      (options.shard.layer_end >= 0 && options.shard.layer_end != hp.n_layer))
    return Status::error("'bert' models cannot be cut into shards");
  auto w = load_bert_weights(*file, hp);
  if (!w) return w.status();
  for (BertLayer& l : w->layers)
    for (kernels::WeightMatrix* m : {&l.wq, &l.wk, &l.wv, &l.wo, &l.up, &l.down})
      kernels::prepare_weight(*m);
  hp.n_cls_out = w->cls_out.rows;
  return std::unique_ptr<Model>(
      new BertModel(std::move(file), std::move(hp), std::move(*w), options.n_threads));
}

}  // namespace cairn::model
