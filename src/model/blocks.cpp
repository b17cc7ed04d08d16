// model/blocks.cpp — shared decoder blocks: weight lookup and the pieces of a forward pass.
#include "model/blocks.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <utility>

#include "core/half.h"
#include "core/quant.h"
#include "core/quant_blocks.h"
#include "kernels/type_ops.h"
#include "model/attention.h"

namespace cairn::model {
namespace {

std::string dims_str(const std::vector<int64_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

// Every single-matrix projection of the forward pass goes through here.
void project(const kernels::WeightMatrix& w, const float* x, int64_t n_tokens, float* out,
             ThreadPool& pool, NextWeights next) {
  const kernels::MatmulJob job{&w, out};
  kernels::matmul_many({&job, 1}, x, n_tokens, pool, next);
}

// GELU's tanh form as the reference computes it: for |x| < 10, looked up in
// a table of F16 results indexed by x rounded to F16 (ggml's GGML_GELU_FP16).
const uint16_t* gelu_f16_table() {
  static const std::vector<uint16_t> table = [] {
    std::vector<uint16_t> t(65536);
    constexpr float kA = 0.044715f, kSqrt2OverPi = 0.79788456080286535587989211986876f;
    for (uint32_t i = 0; i < 65536; ++i) {
      const float x = f16_to_f32((uint16_t)i);
      t[i] = f32_to_f16(0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * x * (1.0f + kA * x * x))));
    }
    return t;
  }();
  return table.data();
}

// Row t of gelu(gate[t]) * up[t] (GeGLU).
class GegluRows final : public kernels::RowMaker {
 public:
  GegluRows(const float* gate, const float* up, int64_t n) : gate_(gate), up_(up), n_(n) {}
  void make(int64_t t, float* row) const override {
    const uint16_t* table = gelu_f16_table();
    const float* g = gate_ + t * n_;
    const float* u = up_ + t * n_;
    for (int64_t i = 0; i < n_; ++i) {
      const float x = g[i];
      row[i] = x <= -10.0f  ? 0.0f
               : x >= 10.0f ? x * u[i]
                            : f16_to_f32(table[f32_to_f16(x)]) * u[i];
    }
  }

 private:
  const float* gate_;
  const float* up_;
  int64_t n_;
};

// Each adapter's product for the pair `member` names, added to y on its rows
// of x (rows of `in` floats).
void add_lora(LayerLoras lora, const LoraPair* LayerLora::*member, const float* x, int64_t in,
              float* y, int64_t y_stride, ThreadPool& pool) {
  for (const ActiveLora& a : lora)
    if (const LoraPair* p = a.layer->*member; p && !a.rows->rows.empty())
      lora_add(*p, x, in, y, y_stride, *a.rows, pool);
}

// The same where the input rows are made (normed rows, the FFN's product),
// not stored: made again into ws.lora_in for the adapters' rows only.
void add_lora(LayerLoras lora, const LoraPair* LayerLora::*member, const kernels::RowMaker& make,
              int64_t in, float* y, int64_t y_stride, Workspace& ws, ThreadPool& pool) {
  for (const ActiveLora& a : lora) {
    const LoraPair* p = a.layer->*member;
    if (!p || a.rows->rows.empty()) continue;
    const int64_t last = a.rows->rows.back();
    if ((int64_t)ws.lora_in.size() < (last + 1) * in) ws.lora_in.resize((size_t)((last + 1) * in));
    for (int32_t t : a.rows->rows) make.make(t, ws.lora_in.data() + (int64_t)t * in);
    lora_add(*p, ws.lora_in.data(), in, y, y_stride, *a.rows, pool);
  }
}

void add_bias(float* rows, const std::vector<float>& bias, int64_t n_tokens) {
  if (bias.empty()) return;
  const int64_t n = (int64_t)bias.size();
  for (int64_t t = 0; t < n_tokens; ++t) kernels::add(rows + t * n, bias.data(), n);
}

}  // namespace

namespace {

// The tensor's data as `rows` rows of `cols`, once its shape was checked.
Result<kernels::WeightMatrix> matrix_view(const gguf::TensorInfo* t, const std::string& name,
                                          int64_t cols, int64_t rows) {
  const TypeOps* ops = type_ops(t->type);
  if (!ops || !ops->vec_dot || !ops->to_float || !kernels::matmul_supported(t->type))
    return Status::error("tensor '" + name + "' has type " + std::string(type_info(t->type).name) +
                         ", which cairn cannot compute with");
  auto stride = row_bytes(t->type, cols);
  if (!stride)
    return Status::error("tensor '" + name + "': row of " + std::to_string(cols) +
                         " elements is not a whole number of " +
                         std::string(type_info(t->type).name) + " blocks");
  if (!t->data || *stride * (uint64_t)rows > t->n_bytes)
    return Status::error("tensor '" + name + "' data is smaller than its shape");
  kernels::WeightMatrix w;
  w.type = t->type;
  w.data = t->data;
  w.rows = rows;
  w.cols = cols;
  w.row_stride = *stride;
  return w;
}

// The 1-D tensor `name` of n elements as a matrix of one row (a gate's weights).
Result<kernels::WeightMatrix> find_row(const gguf::File& f, const std::string& name, int64_t n) {
  const gguf::TensorInfo* t = f.find_tensor(name);
  if (!t) return Status::error("tensor '" + name + "' is missing");
  if (t->dims != std::vector<int64_t>{n})
    return Status::error("tensor '" + name + "' has shape " + dims_str(t->dims) + ", expected [" +
                         std::to_string(n) + "]");
  return matrix_view(t, name, n, 1);
}

}  // namespace

Result<kernels::WeightMatrix> find_matrix(const gguf::File& f, const std::string& name,
                                          int64_t cols, int64_t rows) {
  const gguf::TensorInfo* t = f.find_tensor(name);
  if (!t) return Status::error("tensor '" + name + "' is missing");
  const std::vector<int64_t> want = {cols, rows};
  if (t->dims != want)
    return Status::error("tensor '" + name + "' has shape " + dims_str(t->dims) + ", expected " +
                         dims_str(want));
  return matrix_view(t, name, cols, rows);
}

Result<std::vector<float>> find_vector(const gguf::File& f, const std::string& name, int64_t n) {
  const gguf::TensorInfo* t = f.find_tensor(name);
  if (!t) return Status::error("tensor '" + name + "' is missing");
  if (t->dims != std::vector<int64_t>{n})
    return Status::error("tensor '" + name + "' has shape " + dims_str(t->dims) + ", expected [" +
                         std::to_string(n) + "]");
  const TypeOps* ops = type_ops(t->type);
  auto bytes = row_bytes(t->type, n);
  if (!ops || !ops->to_float || !bytes)
    return Status::error("tensor '" + name + "' has type " + std::string(type_info(t->type).name) +
                         ", which cairn cannot read as " + std::to_string(n) + " floats");
  if (!t->data || *bytes > t->n_bytes)
    return Status::error("tensor '" + name + "' data is smaller than its shape");
  std::vector<float> out((size_t)n);
  ops->to_float(t->data, out.data(), n);
  return out;
}

namespace {

// Rows [begin, begin + n) of m: a view into the same memory.
kernels::WeightMatrix rows_of(kernels::WeightMatrix m, int64_t begin, int64_t n) {
  m.data = static_cast<const uint8_t*>(m.data) + (size_t)begin * m.row_stride;
  m.rows = n;
  return m;
}

// Columns [begin, begin + n) of every row: a strided view (the kernels step
// rows by row_stride), possible only on whole blocks of the type.
Result<kernels::WeightMatrix> cols_of(kernels::WeightMatrix m, int64_t begin, int64_t n,
                                      const std::string& name) {
  const TypeInfo& ti = type_info(m.type);
  if (begin % ti.block_elems != 0 || n % ti.block_elems != 0)
    return Status::error("tensor '" + name + "' (" + std::string(ti.name) + ", blocks of " +
                         std::to_string(ti.block_elems) + ") cannot be cut at columns [" +
                         std::to_string(begin) + ", " + std::to_string(begin + n) +
                         "): use fewer tensor-parallel ranks");
  m.data = static_cast<const uint8_t*>(m.data) + *row_bytes(m.type, begin);
  m.cols = n;
  return m;
}

std::vector<float> slice(const std::vector<float>& v, int64_t begin, int64_t n) {
  return std::vector<float>(v.begin() + begin, v.begin() + begin + n);
}

}  // namespace

Result<DecoderWeights> load_decoder_weights(const gguf::File& f, const HParams& hp,
                                            const DecoderOptions& options,
                                            const ShardSpec& shard, int64_t n_ctx) {
  CAIRN_ASSIGN_OR_RETURN(const HParams local, shard_hparams(hp, shard));
  DecoderWeights w;
  TensorSizes sizes;
  sizes.embd = hp.n_embd;
  sizes.vocab = hp.n_vocab;
  sizes.q = hp.n_head * hp.head_dim;
  sizes.kv = hp.kv_row_elems();
  sizes.ff = hp.n_ff;
  sizes.head = hp.head_dim;
  sizes.rope_pairs = kernels::rope_pairs(hp.head_dim, hp.n_rot);
  sizes.expert = hp.n_expert;
  sizes.ff_exp = hp.n_ff_exp;
  sizes.ff_shexp = hp.n_ff_shexp;
  sizes.heads = hp.n_head;
  if (options.oai && shard.tp_size > 1)
    return Status::error("a gpt-oss model cannot be split over tensor-parallel ranks");
  if (options.moe && (hp.n_expert < 1 || hp.n_expert_used < 1 || hp.n_expert_used > hp.n_expert ||
                      hp.n_ff_exp < 1))
    return Status::error("a mixture-of-experts model needs expert_count, expert_used_count in [1, "
                         "expert_count] and an expert feed-forward length");
  if (options.moe && options.shared_expert && hp.n_ff_shexp < 1)
    return Status::error("metadata '" + hp.arch +
                         ".expert_shared_feed_forward_length' is missing, and so is '" + hp.arch +
                         ".feed_forward_length' that would stand in for it");
  if (options.moe && shard.tp_size > 1)
    return Status::error("a mixture-of-experts model cannot be split over tensor-parallel ranks");
  // Each tensor by its table row: name and shape come from model/tensor_names.h.
  const auto matrix = [&](TensorRole role, int64_t layer = -1) {
    const TensorSpec& s = tensor_spec(role);
    return find_matrix(f, tensor_name(role, layer), sizes.of(s.cols), sizes.of(s.rows));
  };
  const auto vector = [&](TensorRole role, int64_t layer = -1) {
    return find_vector(f, tensor_name(role, layer), sizes.of(tensor_spec(role).cols));
  };
  // This rank's share of the heads and of the FFN (the whole of them unless
  // the model is cut for tensor parallelism).
  const int64_t nq = local.n_head * hp.head_dim, q0 = shard.tp_rank * nq;
  const int64_t nkv = local.kv_row_elems(), kv0 = shard.tp_rank * nkv;
  const int64_t nff = local.n_ff, ff0 = shard.tp_rank * nff;
  const bool last_stage = shard.layer_begin + local.n_layer == hp.n_layer;

  using R = TensorRole;
  CAIRN_ASSIGN_OR_RETURN(w.tok_embd, matrix(R::TokEmbd));
  if (options.scale_embd) w.embd_scale = std::sqrt((float)hp.n_embd);
  // Llama 3.1/3.2's per-pair RoPE divisors, where the file has them; the
  // long/short factors of long-context Phi-3 files are another scheme.
  if (f.find_tensor(tensor_name(R::RopeFreqs))) {
    if (sizes.rope_pairs == 0)
      return Status::error("tensor '" + tensor_name(R::RopeFreqs) +
                           "' is present but the model rotates no dimensions");
    CAIRN_ASSIGN_OR_RETURN(w.rope_freqs, vector(R::RopeFreqs));
    for (float x : w.rope_freqs)
      if (!(x > 0.0f) || !std::isfinite(x))
        return Status::error("tensor '" + tensor_name(R::RopeFreqs) +
                             "' holds a factor that is not a positive finite number");
  }
  constexpr const char* kLong = "rope_factors_long.weight";
  constexpr const char* kShort = "rope_factors_short.weight";
  for (const char* name : {kLong, kShort}) {
    if (!f.find_tensor(name)) continue;
    if (!options.rope_factor_pair)
      return Status::error(std::string("tensor '") + name +
                           "': long-context RoPE factors (LongRoPE) are not supported for " +
                           hp.arch + (hp.arch == "llama" ? " without rope.scaling.type longrope" : ""));
    if (sizes.rope_pairs == 0)
      return Status::error(std::string("tensor '") + name +
                           "' is present but the model rotates no dimensions");
  }
  // The reference's choice: rope_freqs.weight where present, else the long
  // factors when the served context exceeds the original one, else the short
  // (none when that tensor is absent).
  if (options.rope_factor_pair && w.rope_freqs.empty()) {
    const int64_t served = n_ctx > 0 ? std::min(n_ctx, hp.n_ctx_train) : hp.n_ctx_train;
    const char* name = served > hp.n_ctx_orig_yarn ? kLong : kShort;
    if (f.find_tensor(name)) {
      CAIRN_ASSIGN_OR_RETURN(w.rope_freqs, find_vector(f, name, sizes.rope_pairs));
      for (float x : w.rope_freqs)
        if (!(x > 0.0f) || !std::isfinite(x))
          return Status::error(std::string("tensor '") + name +
                               "' holds a factor that is not a positive finite number");
    }
  }
  if (last_stage) {
    CAIRN_ASSIGN_OR_RETURN(w.output_norm, vector(R::OutputNorm));
    if (hp.tied_output) {
      w.output = w.tok_embd;
    } else {
      CAIRN_ASSIGN_OR_RETURN(w.output, matrix(R::Output));
    }
    const auto [v0, v1] = vocab_range(hp.n_vocab, shard.tp_rank, shard.tp_size);
    w.output = rows_of(w.output, v0, v1 - v0);
  }
  w.layers.resize((size_t)local.n_layer);
  for (int64_t i = 0; i < local.n_layer; ++i) {
    const int64_t il = shard.layer_begin + i;
    LayerWeights& l = w.layers[(size_t)i];
    CAIRN_ASSIGN_OR_RETURN(l.attn_norm, vector(R::AttnNorm, il));
    if (options.fused_qkv) {
      // Views of the rows of one [Q; K; V] matrix: nothing is copied.
      kernels::WeightMatrix qkv;
      CAIRN_ASSIGN_OR_RETURN(qkv, matrix(R::AttnQkv, il));
      l.attn.wq = rows_of(qkv, q0, nq);
      l.attn.wk = rows_of(qkv, sizes.q + kv0, nkv);
      l.attn.wv = rows_of(qkv, sizes.q + sizes.kv + kv0, nkv);
    } else {
      CAIRN_ASSIGN_OR_RETURN(l.attn.wq, matrix(R::AttnQ, il));
      CAIRN_ASSIGN_OR_RETURN(l.attn.wk, matrix(R::AttnK, il));
      CAIRN_ASSIGN_OR_RETURN(l.attn.wv, matrix(R::AttnV, il));
      l.attn.wq = rows_of(l.attn.wq, q0, nq);
      l.attn.wk = rows_of(l.attn.wk, kv0, nkv);
      l.attn.wv = rows_of(l.attn.wv, kv0, nkv);
    }
    CAIRN_ASSIGN_OR_RETURN(l.attn.wo, matrix(R::AttnOutput, il));
    CAIRN_ASSIGN_OR_RETURN(l.attn.wo, cols_of(l.attn.wo, q0, nq, tensor_name(R::AttnOutput, il)));
    if (options.oai) {
      CAIRN_ASSIGN_OR_RETURN(l.attn.bo, vector(R::AttnOutputBias, il));
      CAIRN_ASSIGN_OR_RETURN(l.attn.sinks, vector(R::AttnSinks, il));
    }
    if (options.qk_norm) {  // one weight per head element, the same for every head
      CAIRN_ASSIGN_OR_RETURN(l.attn.q_norm, vector(R::AttnQNorm, il));
      CAIRN_ASSIGN_OR_RETURN(l.attn.k_norm, vector(R::AttnKNorm, il));
    }
    l.attn.prescale_q = options.prescale_q;
    if (options.qkv_bias) {
      CAIRN_ASSIGN_OR_RETURN(l.attn.bq, vector(R::AttnQBias, il));
      CAIRN_ASSIGN_OR_RETURN(l.attn.bk, vector(R::AttnKBias, il));
      CAIRN_ASSIGN_OR_RETURN(l.attn.bv, vector(R::AttnVBias, il));
      l.attn.bq = slice(l.attn.bq, q0, nq);
      l.attn.bk = slice(l.attn.bk, kv0, nkv);
      l.attn.bv = slice(l.attn.bv, kv0, nkv);
    }
    l.attn.window = hp.is_swa(il) ? hp.n_swa : 0;
    l.attn.swa_rope = hp.is_swa(il) && (hp.rope_freq_base_swa != hp.rope_freq_base ||
                                        hp.rope_freq_scale_swa != hp.rope_freq_scale);
    if (options.post_norms) {
      CAIRN_ASSIGN_OR_RETURN(l.attn_post_norm, vector(R::AttnPostNorm, il));
      CAIRN_ASSIGN_OR_RETURN(l.ffn_post_norm, vector(R::FfnPostNorm, il));
    }
    l.ffn.geglu = options.geglu;
    CAIRN_ASSIGN_OR_RETURN(l.ffn_norm, vector(options.oai ? R::AttnPostNorm : R::FfnNorm, il));
    if (options.moe) {
      MoeWeights& m = l.moe;
      m.n_expert = hp.n_expert;
      m.n_used = hp.n_expert_used;
      m.n_embd = hp.n_embd;
      m.n_ff = hp.n_ff_exp;
      m.norm_topk = options.norm_topk;
      m.scale = 0.0f;  // the reference applies no expert_weights_scale to these architectures
      CAIRN_ASSIGN_OR_RETURN(m.router, matrix(R::FfnGateInp, il));
      const auto experts = [&](TensorRole role) {
        const TensorSpec& s = tensor_spec(role);
        return expert_views(f, tensor_name(role, il), sizes.of(s.cols), sizes.of(s.rows),
                            sizes.of(s.slabs));
      };
      CAIRN_ASSIGN_OR_RETURN(m.gate, experts(R::FfnGateExps));
      CAIRN_ASSIGN_OR_RETURN(m.up, experts(R::FfnUpExps));
      CAIRN_ASSIGN_OR_RETURN(m.down, experts(R::FfnDownExps));
      if (options.oai) {
        m.gating = MoeGating::SoftmaxChosen;
        m.activation = MoeActivation::SwigluOai;
        CAIRN_ASSIGN_OR_RETURN(m.router_bias, vector(R::FfnGateInpBias, il));
        // One bias row per expert: 2-D tensors read as floats.
        const auto rows = [&](TensorRole role) -> Result<std::vector<float>> {
          CAIRN_ASSIGN_OR_RETURN(const kernels::WeightMatrix b, matrix(role, il));
          std::vector<float> out((size_t)(b.rows * b.cols));
          for (int64_t r = 0; r < b.rows; ++r) kernels::get_row(b, r, out.data() + r * b.cols);
          return out;
        };
        CAIRN_ASSIGN_OR_RETURN(m.gate_bias, rows(R::FfnGateExpsBias));
        CAIRN_ASSIGN_OR_RETURN(m.up_bias, rows(R::FfnUpExpsBias));
        CAIRN_ASSIGN_OR_RETURN(m.down_bias, rows(R::FfnDownExpsBias));
      }
      if (options.shared_expert) {
        m.shared = true;
        m.n_ff_shared = hp.n_ff_shexp;
        // The gate's weights are a vector in the file: one row of a matrix here.
        CAIRN_ASSIGN_OR_RETURN(m.shared_gate_inp,
                               find_row(f, tensor_name(R::FfnGateInpShexp, il), hp.n_embd));
        CAIRN_ASSIGN_OR_RETURN(m.shared_gate, matrix(R::FfnGateShexp, il));
        CAIRN_ASSIGN_OR_RETURN(m.shared_up, matrix(R::FfnUpShexp, il));
        CAIRN_ASSIGN_OR_RETURN(m.shared_down, matrix(R::FfnDownShexp, il));
      }
      continue;
    }
    if (options.fused_ffn) {  // [gate; up] in one matrix: two views of its rows
      kernels::WeightMatrix gate_up;
      CAIRN_ASSIGN_OR_RETURN(gate_up, matrix(R::FfnGateUp, il));
      l.ffn.gate = rows_of(gate_up, ff0, nff);
      l.ffn.up = rows_of(gate_up, sizes.ff + ff0, nff);
    } else {
      CAIRN_ASSIGN_OR_RETURN(l.ffn.gate, matrix(R::FfnGate, il));
      CAIRN_ASSIGN_OR_RETURN(l.ffn.up, matrix(R::FfnUp, il));
      l.ffn.gate = rows_of(l.ffn.gate, ff0, nff);
      l.ffn.up = rows_of(l.ffn.up, ff0, nff);
    }
    CAIRN_ASSIGN_OR_RETURN(l.ffn.down, matrix(R::FfnDown, il));
    CAIRN_ASSIGN_OR_RETURN(l.ffn.down, cols_of(l.ffn.down, ff0, nff, tensor_name(R::FfnDown, il)));
  }
  return w;
}

void Workspace::reserve(const HParams& hp, int64_t n) {
  const auto sz = [n](int64_t width) { return (size_t)(n * width); };
  x.resize(sz(hp.n_embd));
  xn.resize(sz(hp.n_embd));
  tmp.resize(sz(hp.n_embd));
  q.resize(sz(hp.n_head * hp.head_dim));
  attn.resize(sz(hp.n_head * hp.head_dim));
  k.resize(sz(hp.kv_row_elems()));
  v.resize(sz(hp.kv_row_elems()));
  gate.resize(sz(hp.n_ff));
  up.resize(sz(hp.n_ff));
}

Status validate_batch(const HParams& hp, const Batch& b, const KvView& kv) {
  const size_t n = b.tokens.size();
  if (n == 0) return Status::error("batch is empty");
  if (b.positions.size() != n || b.seqs.size() != n || b.wants_logits.size() != n ||
      (!b.adapters.empty() && b.adapters.size() != n))
    return Status::error("batch fields have different lengths");
  if (kv.dtype() != TensorType::F16 && kv.dtype() != TensorType::F32 &&
      kv.dtype() != TensorType::Q8_0)
    return Status::error("KV view type " + std::string(type_info(kv.dtype()).name) +
                         " is not supported (f16, f32, q8_0)");
  if (kv.dtype() == TensorType::Q8_0)
    CAIRN_RETURN_IF_ERROR(kv::check_kv_type(kv.dtype(), hp.kv_row_elems(), hp.head_dim));
  if ((kv.n_layer() != 0 && kv.n_layer() != hp.n_layer) ||
      (kv.row_elems() != 0 && kv.row_elems() != hp.kv_row_elems()))
    return Status::error("KV view is shaped for " + std::to_string(kv.n_layer()) + " layers of " +
                         std::to_string(kv.row_elems()) + "-wide rows; the model needs " +
                         std::to_string(hp.n_layer) + " of " + std::to_string(hp.kv_row_elems()));
  // A view that dropped a layer's older rows serves only a layer that never reads them.
  for (int64_t il = 0; il < hp.n_layer; ++il)
    if (const int64_t w = kv.kept_window((int)il); w > 0 && (!hp.is_swa(il) || hp.n_swa > w))
      return Status::error("KV view keeps only the last " + std::to_string(w) +
                           " positions of layer " + std::to_string(il) + ", which " +
                           (hp.is_swa(il) ? "slides over " + std::to_string(hp.n_swa)
                                          : std::string("attends to all of them")));
  std::vector<std::pair<SeqId, int32_t>> slots;
  slots.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const std::string at = "batch entry " + std::to_string(i) + ": ";
    if (b.tokens[i] < 0 || b.tokens[i] >= hp.n_vocab)
      return Status::error(at + "token " + std::to_string(b.tokens[i]) +
                           " is outside the vocabulary of " + std::to_string(hp.n_vocab));
    const int64_t cap = kv.capacity(b.seqs[i]);
    if (cap <= 0)
      return Status::error(at + "sequence " + std::to_string(b.seqs[i]) + " has no KV space");
    if (b.positions[i] < 0 || b.positions[i] >= cap)
      return Status::error(at + "position " + std::to_string(b.positions[i]) + " of sequence " +
                           std::to_string(b.seqs[i]) + " is outside its KV capacity " +
                           std::to_string(cap));
    slots.emplace_back(b.seqs[i], b.positions[i]);
  }
  std::sort(slots.begin(), slots.end());
  for (size_t i = 1; i < slots.size(); ++i)
    if (slots[i] == slots[i - 1])
      return Status::error("batch has two tokens at position " + std::to_string(slots[i].second) +
                           " of sequence " + std::to_string(slots[i].first));
  return Status::ok();
}

void embed(const kernels::WeightMatrix& tok_embd, const Batch& batch, float* x) {
  for (size_t t = 0; t < batch.size(); ++t)
    kernels::get_row(tok_embd, batch.tokens[t], x + t * (size_t)tok_embd.cols);
}

namespace {

// fn(begin, end) over token rows: on the pool for a prefill-sized batch (else the
// other cores idle), on this thread for a few tokens (waking the pool costs more).
template <typename Fn>
void for_token_rows(ThreadPool& pool, int64_t n_tokens, const Fn& fn) {
  if (n_tokens >= 8) {
    pool.parallel_for(n_tokens, fn);
  } else {
    fn(0, n_tokens);
  }
}

}  // namespace

void add_rows(float* x, const float* y, int64_t n_tokens, int64_t n, ThreadPool& pool) {
  for_token_rows(pool, n_tokens, [&](int64_t begin, int64_t end) {
    kernels::add(x + begin * n, y + begin * n, (end - begin) * n);
  });
}

void rope_tables(const HParams& hp, const std::vector<float>& freq_factors, const Batch& batch,
                 Workspace& ws, ThreadPool& pool) {
  const int64_t pairs = kernels::rope_pairs(hp.head_dim, hp.n_rot);
  const int64_t T = (int64_t)batch.size();
  ws.rope_cs.resize((size_t)(T * 2 * pairs));
  if (pairs == 0) return;
  // The loader checked its size (rope_pairs floats).
  const float* factors = freq_factors.empty() ? nullptr : freq_factors.data();
  const auto table = [&](std::vector<float>& out, float base, float scale) {
    out.resize((size_t)(T * 2 * pairs));
    // YaRN's ramp is measured in this table's base (the reference's rope op
    // takes each layer's base, and the ext and attention factors of the context).
    kernels::RopeYarn yarn;
    if (hp.rope_yarn()) {
      yarn.ext_factor = hp.yarn_ext_factor;
      yarn.attn_factor = hp.yarn_attn_factor;
      kernels::rope_yarn_corr_dims(2 * pairs, hp.n_ctx_orig_yarn, base, hp.yarn_beta_fast,
                                   hp.yarn_beta_slow, yarn.corr_low, yarn.corr_high);
    }
    for_token_rows(pool, T, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        float* cs = out.data() + t * 2 * pairs;
        if (hp.rope_yarn())
          kernels::rope_angles_yarn(hp.head_dim, hp.n_rot, batch.positions[(size_t)t], base, scale,
                                    yarn, cs, cs + pairs, factors);
        else
          kernels::rope_angles(hp.head_dim, hp.n_rot, batch.positions[(size_t)t], base, scale, cs,
                               cs + pairs, factors);
      }
    });
  };
  table(ws.rope_cs, hp.rope_freq_base, hp.rope_freq_scale);
  if (!hp.swa_layers.empty() && (hp.rope_freq_base_swa != hp.rope_freq_base ||
                                 hp.rope_freq_scale_swa != hp.rope_freq_scale))
    table(ws.rope_cs_swa, hp.rope_freq_base_swa, hp.rope_freq_scale_swa);
}

void attention(const HParams& hp, const AttentionWeights& w, const std::vector<float>& norm,
               int layer, const Batch& batch, KvView& kv, Workspace& ws, ThreadPool& pool,
               NextWeights next, LayerLoras lora) {
  const int64_t T = (int64_t)batch.size();
  const int64_t hd = hp.head_dim;
  const int64_t nq = hp.n_head * hd;
  const int64_t nkv = hp.kv_row_elems();

  const kernels::MatmulJob qkv[] = {
      {&w.wq, ws.q.data()}, {&w.wk, ws.k.data()}, {&w.wv, ws.v.data()}};
  const kernels::WeightMatrix* const wo[] = {&w.wo};
  const kernels::NormedRows normed(ws.x.data(), norm.data(), hp.n_embd, hp.norm_eps);
  kernels::matmul_many(qkv, normed, ws.xn.data(), T, pool, wo);
  if (!lora.empty()) {  // the reference adds adapters' products before the biases
    add_lora(lora, &LayerLora::q, normed, hp.n_embd, ws.q.data(), nq, ws, pool);
    add_lora(lora, &LayerLora::k, normed, hp.n_embd, ws.k.data(), nkv, ws, pool);
    add_lora(lora, &LayerLora::v, normed, hp.n_embd, ws.v.data(), nkv, ws, pool);
  }
  add_bias(ws.q.data(), w.bq, T);
  add_bias(ws.k.data(), w.bk, T);
  add_bias(ws.v.data(), w.bv, T);

  // RoPE and the K/V write per token are independent (KvView allows concurrent
  // writes of different rows): spread a prefill's cold-line stores over the pool.
  const int64_t pairs = kernels::rope_pairs(hd, hp.n_rot);
  const float q_scale = hp.attn_scale > 0 ? hp.attn_scale : 1.0f / std::sqrt((float)hd);
  const std::vector<float>& rope_cs = w.swa_rope ? ws.rope_cs_swa : ws.rope_cs;
  const auto rope_and_write = [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      float* q = ws.q.data() + t * nq;
      float* k = ws.k.data() + t * nkv;
      if (!w.q_norm.empty()) {  // qwen3: each head's vector normed on its own
        for (int64_t h = 0; h < hp.n_head; ++h)
          kernels::rms_norm(q + h * hd, w.q_norm.data(), hd, hp.norm_eps, q + h * hd);
        for (int64_t h = 0; h < hp.n_head_kv; ++h)
          kernels::rms_norm(k + h * hd, w.k_norm.data(), hd, hp.norm_eps, k + h * hd);
      }
      const float* cs = rope_cs.data() + t * 2 * pairs;
      kernels::rope_qk_angles(q, hp.n_head, k, hp.n_head_kv, hd, hp.n_rot, cs, cs + pairs,
                              hp.rope_style);
      if (w.prescale_q)
        for (int64_t i = 0; i < nq; ++i) q[i] *= q_scale;
      kv.write(layer, batch.seqs[(size_t)t], batch.positions[(size_t)t], ws.k.data() + t * nkv,
               ws.v.data() + t * nkv);
    }
  };
  for_token_rows(pool, T, rope_and_write);

  AttnShape shape;
  shape.n_head = hp.n_head;
  shape.n_head_kv = hp.n_head_kv;
  shape.head_dim = hd;
  shape.scale = w.prescale_q ? 1.0f : q_scale;
  shape.softcap = hp.attn_softcap;
  shape.window = w.window;
  shape.sinks = w.sinks.empty() ? nullptr : w.sinks.data();
  attend(kv, layer, batch.seqs, batch.positions, ws.q.data(), shape, ws.attn.data(), pool);

  project(w.wo, ws.attn.data(), T, ws.tmp.data(), pool, next);
  add_lora(lora, &LayerLora::o, ws.attn.data(), nq, ws.tmp.data(), hp.n_embd, pool);
  add_bias(ws.tmp.data(), w.bo, T);
}

void ffn_swiglu(const HParams& hp, const FfnWeights& w, const std::vector<float>& norm, int64_t T,
                Workspace& ws, ThreadPool& pool, NextWeights next, LayerLoras lora) {
  const kernels::MatmulJob gate_up[] = {{&w.gate, ws.gate.data()}, {&w.up, ws.up.data()}};
  const kernels::WeightMatrix* const down[] = {&w.down};
  const kernels::NormedRows normed(ws.x.data(), norm.data(), hp.n_embd, hp.norm_eps);
  kernels::matmul_many(gate_up, normed, ws.xn.data(), T, pool, down);
  const int64_t ff = hp.n_ff;
  if (!lora.empty()) {
    add_lora(lora, &LayerLora::gate, normed, hp.n_embd, ws.gate.data(), ff, ws, pool);
    add_lora(lora, &LayerLora::up, normed, hp.n_embd, ws.up.data(), ff, ws, pool);
  }
  // Rows made into gate itself where the kernel takes floats: silu_mul is
  // elementwise, so each row may overwrite its own gate row. The adapters'
  // rows of the product are made first, while gate is intact.
  const kernels::MatmulJob down_job{&w.down, ws.tmp.data()};
  const GegluRows geglu(ws.gate.data(), ws.up.data(), ff);
  const kernels::SwigluRows swiglu(ws.gate.data(), ws.up.data(), ff);
  const kernels::RowMaker& act = w.geglu ? static_cast<const kernels::RowMaker&>(geglu) : swiglu;
  std::vector<float>& act_rows = ws.lora_in;
  bool any_down = false;
  for (const ActiveLora& a : lora) any_down |= a.layer->down && !a.rows->rows.empty();
  if (any_down) {
    if ((int64_t)act_rows.size() < T * ff) act_rows.resize((size_t)(T * ff));
    for (const ActiveLora& a : lora)
      if (a.layer->down)
        for (int32_t t : a.rows->rows) act.make(t, act_rows.data() + (int64_t)t * ff);
  }
  kernels::matmul_many({&down_job, 1}, act, ws.gate.data(), T, pool, next);
  if (any_down) add_lora(lora, &LayerLora::down, act_rows.data(), ff, ws.tmp.data(), hp.n_embd, pool);
}

void norm_rows(const HParams& hp, const std::vector<float>& norm, float* rows, int64_t T,
               ThreadPool& pool) {
  for_token_rows(pool, T, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t)
      kernels::rms_norm(rows + t * hp.n_embd, norm.data(), hp.n_embd, hp.norm_eps,
                        rows + t * hp.n_embd);
  });
}

void scale_rows(float* x, float s, int64_t T, int64_t n, ThreadPool& pool) {
  for_token_rows(pool, T, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin * n; i < end * n; ++i) x[i] *= s;
  });
}

void ffn_moe(const HParams& hp, const MoeWeights& w, const std::vector<float>& norm, int64_t T,
             Workspace& ws, ThreadPool& pool) {
  for_token_rows(pool, T, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t)
      kernels::rms_norm(ws.x.data() + t * hp.n_embd, norm.data(), hp.n_embd, hp.norm_eps,
                        ws.xn.data() + t * hp.n_embd);
  });
  moe_forward(w, ws.xn.data(), T, ws.tmp.data(), pool);
}

int64_t keep_output_rows(const Batch& batch, Workspace& ws, int64_t n_embd) {
  int64_t r = 0;
  for (size_t t = 0; t < batch.size(); ++t) {
    if (!batch.wants_logits[t]) continue;
    if ((int64_t)t != r)
      std::copy_n(ws.x.data() + (int64_t)t * n_embd, n_embd, ws.x.data() + r * n_embd);
    ++r;
  }
  return r;
}

void output_logits(const HParams& hp, const DecoderWeights& w, const Batch& batch, Workspace& ws,
                   ThreadPool& pool, Logits& out, NextWeights next, LayerLoras lora) {
  out.n_vocab = hp.n_vocab;
  out.batch_index.clear();
  for (size_t t = 0; t < batch.size(); ++t)
    if (batch.wants_logits[t]) out.batch_index.push_back((int32_t)t);
  const int64_t R = (int64_t)out.batch_index.size();
  out.data.resize((size_t)(R * hp.n_vocab));
  if (R == 0) return;
  ws.out_rows.resize((size_t)(R * hp.n_embd));
  const kernels::MatmulJob job{&w.output, out.data.data()};
  const kernels::NormedRows normed(ws.x.data(), w.output_norm.data(), hp.n_embd, hp.norm_eps);
  kernels::matmul_many({&job, 1}, normed, ws.out_rows.data(), R, pool, next);
  add_lora(lora, &LayerLora::o, normed, hp.n_embd, out.data.data(), hp.n_vocab, ws, pool);
  if (hp.final_softcap > 0) {  // the reference's order: / cap (as * 1/cap), tanh, * cap
    const float cap = hp.final_softcap, inv = 1.0f / cap;
    for (float& v : out.data) v = std::tanh(v * inv) * cap;
  }
}

void output_hidden(const HParams& hp, const DecoderWeights& w, const Batch& batch, Workspace& ws,
                   ThreadPool& pool, Logits& out) {
  out.n_vocab = hp.n_embd;
  out.batch_index.clear();
  for (size_t t = 0; t < batch.size(); ++t)
    if (batch.wants_logits[t]) out.batch_index.push_back((int32_t)t);
  const int64_t R = (int64_t)out.batch_index.size();
  out.data.resize((size_t)(R * hp.n_embd));
  // keep_output_rows put the rows that want output first in ws.x.
  for_token_rows(pool, R, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r)
      kernels::rms_norm(ws.x.data() + r * hp.n_embd, w.output_norm.data(), hp.n_embd, hp.norm_eps,
                        out.data.data() + r * hp.n_embd);
  });
}

void gelu_inplace(float* x, int64_t n) {
  const uint16_t* table = gelu_f16_table();
  for (int64_t i = 0; i < n; ++i)
    x[i] = x[i] <= -10.0f ? 0.0f : x[i] >= 10.0f ? x[i] : f16_to_f32(table[f32_to_f16(x[i])]);
}

}  // namespace cairn::model
