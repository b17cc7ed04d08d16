// model/decoder.cpp — the llama-family decoder model: its forward pass over the shared blocks.
// The pre-norm decoder shared by the llama-family architectures: RMSNorm,
// attention with RoPE and GQA, SwiGLU FFN, residual adds, output head (tied to
// the embedding when output.weight is absent), or a mixture-of-experts FFN
// (model/moe.h) in its place. Architectures differ only in the facts
// DecoderOptions carries, so each stays a few lines.
#include <algorithm>
#include <array>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/float_order.h"
#include "model/arch.h"
#include "model/blocks.h"

namespace cairn::model {
namespace {

class DecoderModel final : public Model {
 public:
  DecoderModel(std::shared_ptr<const gguf::File> file, HParams hp, HParams local, ShardSpec shard,
               DecoderWeights w, const DecoderOptions& options, int n_threads)
      : Model(std::move(hp), shard),
        local_(std::move(local)),
        file_(std::move(file)),
        w_(std::move(w)),
        fused_ffn_(options.fused_ffn),
        pool_(n_threads) {
    out_hp_ = local_;
    out_hp_.n_vocab = w_.output.rows;
  }

  Status forward(const Batch& batch, KvView& kv, Logits& out) override {
    return run(batch, kv, StageIo{}, out, /*hidden=*/false);
  }

  // The whole model only: a shard's last stage holds a slice of the rows'
  // producers, not the rows.
  Status forward_hidden(const Batch& batch, KvView& kv, Logits& out) override {
    if (shard_.tp_size > 1 || shard_.layer_begin != 0 || local_.n_layer != hparams_.n_layer)
      return Status::error("embeddings cannot be made by a model cut into shards");
    return run(batch, kv, StageIo{}, out, /*hidden=*/true);
  }

  Status set_adapters(std::vector<std::shared_ptr<const LoraAdapter>> adapters) override {
    if (adapters.empty()) {
      loras_.clear();
      n_adapters_ = 0;
      return Status::ok();
    }
    if (shard_.tp_size > 1 || shard_.layer_begin != 0 || local_.n_layer != hparams_.n_layer)
      return Status::error("LoRA adapters cannot be applied to a model cut into shards");
    if (adapters.size() > 65535) return Status::error("more than 65535 LoRA adapters");
    std::vector<RuntimeLora> loras;
    for (auto& a : adapters) {
      auto r = runtime_lora(std::move(a));
      if (!r) return r.status();
      loras.push_back(std::move(*r));
    }
    loras_ = std::move(loras);
    n_adapters_ = loras_.size();
    return Status::ok();
  }

  Status forward_stage(const Batch& batch, KvView& kv, const StageIo& io, Logits& out) override {
    return run(batch, kv, io, out, /*hidden=*/false);
  }

  // forward_stage, or (hidden) forward_hidden's output-normed rows in place
  // of the output head's logits.
  Status run(const Batch& batch, KvView& kv, const StageIo& io, Logits& out, bool hidden) {
    CAIRN_RETURN_IF_ERROR(validate_batch(local_, batch, kv));
    for (uint16_t a : batch.adapters)
      if (a > loras_.size())
        return Status::error("batch names LoRA adapter " + std::to_string(a) + " of " +
                             std::to_string(loras_.size()));
    const kernels::order::OneTokenOrder::Scope order(batch.one_token_order);
    const bool first = shard_.layer_begin == 0;
    const bool last = shard_.layer_begin + local_.n_layer == hparams_.n_layer;
    if (!first && !io.hidden_in) return Status::error("a later pipeline stage needs the previous stage's rows");
    if (!last && !io.hidden_out) return Status::error("an earlier pipeline stage needs somewhere to put its rows");
    const bool tp = shard_.tp_size > 1;
    if (tp && !io.comm) return Status::error("a tensor-parallel shard needs its ranks' collectives");
    const HParams& hp = local_;
    const int64_t T = (int64_t)batch.size();
    ws_.reserve(hp, T);
    const bool adapted = active_loras(batch);
    if (first) {
      embed(w_.tok_embd, batch, ws_.x.data());
      if (adapted)  // before gemma's scale, as the reference adds it
        for (size_t k = 0; k < loras_.size(); ++k)
          if (loras_[k].embd)
            lora_add_embedding(*loras_[k].embd, batch.tokens.data(), ws_.x.data(), hp.n_embd,
                               lora_rows_[k], pool_);
      if (w_.embd_scale != 0) scale_rows(ws_.x.data(), w_.embd_scale, T, hp.n_embd, pool_);
    } else {
      std::copy_n(io.hidden_in, (size_t)(T * hp.n_embd), ws_.x.data());
    }
    rope_tables(hp, w_.rope_freqs, batch, ws_, pool_);
    // The row-parallel projections (output and down) leave each rank a
    // partial sum of the whole product: the ranks add theirs up.
    const auto reduce = [&](int64_t rows) -> Status {
      return tp ? io.comm->all_reduce_sum(ws_.tmp.data(), (size_t)(rows * hp.n_embd)) : Status::ok();
    };
    // Each block names the weights the next projection reads (a memory hint).
    const auto qkv = [](const LayerWeights& l) {
      return std::array<const kernels::WeightMatrix*, 3>{&l.attn.wq, &l.attn.wk, &l.attn.wv};
    };
    const std::array<const kernels::WeightMatrix*, 1> output = {&w_.output};
    const int n_layer = (int)hp.n_layer;
    for (int il = 0; il < n_layer; ++il) {
      const LayerWeights& l = w_.layers[(size_t)il];
      const bool moe = l.moe.n_expert > 0;
      const std::array<const kernels::WeightMatrix*, 2> gate_up = {&l.ffn.gate, &l.ffn.up};
      const LayerLoras lora = adapted ? layer_loras(il, lora_rows_) : LayerLoras{};
      attention(hp, l.attn, l.attn_norm, il, batch, kv, ws_, pool_,
                moe ? NextWeights{} : NextWeights{gate_up}, lora);
      CAIRN_RETURN_IF_ERROR(reduce(T));
      if (!l.attn_post_norm.empty()) norm_rows(hp, l.attn_post_norm, ws_.tmp.data(), T, pool_);
      add_rows(ws_.x.data(), ws_.tmp.data(), T, hp.n_embd, pool_);
      const bool compact = last && il + 1 == n_layer;
      const int64_t n = compact ? keep_output_rows(batch, ws_, hp.n_embd) : T;
      // The compacted rows are the output rows: their adapters' row lists.
      const LayerLoras ffn_lora =
          !adapted ? LayerLoras{} : compact ? layer_loras(il, lora_out_rows_) : lora;
      if (moe) {  // never cut for tensor parallelism: nothing to reduce
        ffn_moe(hp, l.moe, l.ffn_norm, n, ws_, pool_);
      } else if (il + 1 < n_layer) {
        ffn_swiglu(hp, l.ffn, l.ffn_norm, n, ws_, pool_, qkv(w_.layers[(size_t)il + 1]), ffn_lora);
      } else {
        ffn_swiglu(hp, l.ffn, l.ffn_norm, n, ws_, pool_, output, ffn_lora);
      }
      CAIRN_RETURN_IF_ERROR(reduce(n));
      if (!l.ffn_post_norm.empty()) norm_rows(hp, l.ffn_post_norm, ws_.tmp.data(), n, pool_);
      add_rows(ws_.x.data(), ws_.tmp.data(), n, hp.n_embd, pool_);
    }
    if (!last) {
      io.hidden_out->assign(ws_.x.begin(), ws_.x.begin() + T * hp.n_embd);
      return Status::ok();
    }
    if (hidden) {
      output_hidden(hp, w_, batch, ws_, pool_, out);
      return Status::ok();
    }
    if (!tp) {
      output_logits(hp, w_, batch, ws_, pool_, out, qkv(w_.layers[0]),
                    adapted ? output_loras() : LayerLoras{});
      return Status::ok();
    }
    return gather_logits(batch, *io.comm, out);
  }

  std::vector<std::span<const uint8_t>> weight_streams() const override {
    std::vector<std::span<const uint8_t>> s;
    for (const LayerWeights& l : w_.layers) {
      for (const kernels::WeightMatrix* m : {&l.attn.wq, &l.attn.wk, &l.attn.wv, &l.attn.wo})
        s.push_back(kernels::weight_stream(*m));
      if (l.moe.n_expert == 0) {
        for (const kernels::WeightMatrix* m : {&l.ffn.gate, &l.ffn.up, &l.ffn.down})
          s.push_back(kernels::weight_stream(*m));
        continue;
      }
      // A token reads the router, n_used experts (here the first ones) and
      // the shared expert.
      s.push_back(kernels::weight_stream(l.moe.router));
      for (int64_t e = 0; e < l.moe.n_used; ++e)
        for (const auto* m : {&l.moe.gate, &l.moe.up, &l.moe.down})
          s.push_back(kernels::weight_stream((*m)[(size_t)e]));
      if (l.moe.shared)
        for (const kernels::WeightMatrix* m :
             {&l.moe.shared_gate_inp, &l.moe.shared_gate, &l.moe.shared_up, &l.moe.shared_down})
          s.push_back(kernels::weight_stream(*m));
    }
    if (w_.output.rows > 0) s.push_back(kernels::weight_stream(w_.output));
    return s;
  }

 private:
  // One adapter as the forward applies it: its pairs by layer (fused
  // tensors' pairs cut into the parts the weights are cut into).
  struct RuntimeLora {
    std::shared_ptr<const LoraAdapter> adapter;
    std::vector<LayerLora> layers;
    const LoraPair* embd = nullptr;
    LayerLora output;  // the output head's pair in `o`
    std::vector<std::unique_ptr<LoraPair>> parts;
  };

  Result<RuntimeLora> runtime_lora(std::shared_ptr<const LoraAdapter> adapter) {
    RuntimeLora r;
    r.layers.resize((size_t)local_.n_layer);
    const HParams& hp = local_;
    const auto refuse = [&](const std::string& tensor, const std::string& why) {
      return Status::error(adapter->path + ": tensor '" + tensor + "': " + why +
                           " (merge the adapter at load with --lora instead)");
    };
    // B's rows [begin, begin + n) with A shared: one part of a fused tensor.
    const auto part = [&](const LoraPair& p, int64_t begin, int64_t n) {
      auto q = std::make_unique<LoraPair>(p);
      q->b.data = static_cast<const uint8_t*>(p.b.data) + (size_t)begin * p.b.row_stride;
      q->b.rows = n;
      r.parts.push_back(std::move(q));
      return r.parts.back().get();
    };
    for (const auto& [name, pair] : adapter->pairs) {
      if (name == "token_embd.weight") {
        r.embd = &pair;
        continue;
      }
      if (name == "output.weight") {
        r.output.o = &pair;
        continue;
      }
      const std::string prefix = "blk.";
      const size_t dot = name.find('.', prefix.size());
      if (name.compare(0, prefix.size(), prefix) != 0 || dot == std::string::npos)
        return refuse(name, "not a tensor cairn adapts at run time");
      int64_t il = -1;
      try {
        il = std::stoll(name.substr(prefix.size(), dot - prefix.size()));
      } catch (...) {
        return refuse(name, "not a tensor cairn adapts at run time");
      }
      if (il < 0 || il >= hp.n_layer) return refuse(name, "no such layer");
      const std::string role = name.substr(dot + 1);
      LayerLora& l = r.layers[(size_t)il];
      const bool moe = w_.layers[(size_t)il].moe.n_expert > 0;
      const int64_t nq = hp.n_head * hp.head_dim, nkv = hp.kv_row_elems();
      if (role == "attn_q.weight") {
        l.q = &pair;
      } else if (role == "attn_k.weight") {
        l.k = &pair;
      } else if (role == "attn_v.weight") {
        l.v = &pair;
      } else if (role == "attn_qkv.weight") {
        l.q = part(pair, 0, nq);
        l.k = part(pair, nq, nkv);
        l.v = part(pair, nq + nkv, nkv);
      } else if (role == "attn_output.weight") {
        l.o = &pair;
      } else if (moe) {
        return refuse(name, "LoRA on a mixture-of-experts FFN is not applied at run time");
      } else if (role == "ffn_gate.weight") {
        l.gate = &pair;
      } else if (role == "ffn_up.weight" && fused_ffn_) {  // gate rows first (phi3)
        l.gate = part(pair, 0, hp.n_ff);
        l.up = part(pair, hp.n_ff, hp.n_ff);
      } else if (role == "ffn_up.weight") {
        l.up = &pair;
      } else if (role == "ffn_down.weight") {
        l.down = &pair;
      } else {
        return refuse(name, "not a tensor cairn adapts at run time");
      }
    }
    r.adapter = std::move(adapter);
    return r;
  }

  // Sorts the batch's tokens (and its output rows) by adapter; false when
  // every token runs on the base model.
  bool active_loras(const Batch& batch) {
    if (loras_.empty()) return false;
    bool any = false;
    for (uint16_t a : batch.adapters) any |= a != 0;
    if (!any) return false;
    lora_rows_.resize(loras_.size());
    lora_out_rows_.resize(loras_.size());
    for (size_t k = 0; k < loras_.size(); ++k) {
      lora_rows_[k].rows.clear();
      lora_out_rows_[k].rows.clear();
    }
    int32_t out_row = 0;
    for (size_t t = 0; t < batch.size(); ++t) {
      const uint16_t a = batch.adapters[t];
      if (a != 0) lora_rows_[a - 1].rows.push_back((int32_t)t);
      if (batch.wants_logits[t]) {
        if (a != 0) lora_out_rows_[a - 1].rows.push_back(out_row);
        ++out_row;
      }
    }
    return true;
  }

  LayerLoras layer_loras(int il, std::vector<LoraRows>& rows) {
    active_.clear();
    for (size_t k = 0; k < loras_.size(); ++k)
      if (!rows[k].rows.empty()) active_.push_back({&loras_[k].layers[(size_t)il], &rows[k]});
    return active_;
  }

  LayerLoras output_loras() {
    active_.clear();
    for (size_t k = 0; k < loras_.size(); ++k)
      if (loras_[k].output.o && !lora_out_rows_[k].rows.empty())
        active_.push_back({&loras_[k].output, &lora_out_rows_[k]});
    return active_;
  }

  // Each rank's logits for its vocabulary range, padded to one chunk per
  // rank, gathered and laid out as the whole vocabulary's rows.
  Status gather_logits(const Batch& batch, ShardComm& comm, Logits& out) {
    output_logits(out_hp_, w_, batch, ws_, pool_, local_logits_, {});
    const int64_t R = (int64_t)local_logits_.rows();
    const int64_t V = hparams_.n_vocab;
    const int tp = shard_.tp_size;
    const int64_t chunk = vocab_range(V, 0, tp).second;
    padded_.assign((size_t)(R * chunk), 0.0f);
    for (int64_t r = 0; r < R; ++r)
      std::copy_n(local_logits_.data.data() + r * out_hp_.n_vocab, out_hp_.n_vocab,
                  padded_.data() + r * chunk);
    gathered_.resize((size_t)(tp * R * chunk));
    CAIRN_RETURN_IF_ERROR(comm.all_gather(padded_.data(), padded_.size(), gathered_.data()));
    out.n_vocab = V;
    out.batch_index = local_logits_.batch_index;
    out.data.resize((size_t)(R * V));
    for (int rank = 0; rank < tp; ++rank) {
      const auto [v0, v1] = vocab_range(V, rank, tp);
      for (int64_t r = 0; r < R; ++r)
        std::copy_n(gathered_.data() + ((int64_t)rank * R + r) * chunk, v1 - v0,
                    out.data.data() + r * V + v0);
    }
    return Status::ok();
  }
  HParams local_;   // this shard's layers, heads and FFN width (the whole model's when not cut)
  HParams out_hp_;  // local_ with n_vocab = this shard's vocabulary rows
  std::shared_ptr<const gguf::File> file_;  // the weights point into its mapping
  DecoderWeights w_;
  bool fused_ffn_ = false;
  std::vector<RuntimeLora> loras_;
  std::vector<LoraRows> lora_rows_, lora_out_rows_;  // per adapter: batch rows, output rows
  std::vector<ActiveLora> active_;
  ThreadPool pool_;
  Workspace ws_;
  Logits local_logits_;
  std::vector<float> padded_, gathered_;
};

}  // namespace

Result<std::unique_ptr<Model>> load_decoder(std::shared_ptr<const gguf::File> file, HParams hp,
                                            const LoadOptions& options,
                                            const DecoderOptions& decoder) {
  if (!hp.causal)
    return Status::error("metadata '" + hp.arch +
                         ".attention.causal' is false: a " + hp.arch +
                         " decoder runs causal attention only");
  const ShardSpec& shard = options.shard;
  auto local = shard_hparams(hp, shard);
  if (!local) return local.status();
  auto w = load_decoder_weights(*file, hp, decoder, shard, options.n_ctx);
  if (!w) return w.status();
  const bool first = shard.layer_begin == 0;
  const bool whole = first && local->n_layer == hp.n_layer && shard.tp_size == 1;
  // Repacked copies for the fastest kernels of this CPU; the embedding table
  // is only ever read a row at a time, so it stays as mapped.
  // Once packed, a matrix's mapped bytes are never read again (get_row reads
  // only the embedding table, which a tied output shares), so they leave
  // resident memory instead of doubling the model's footprint. A shard's
  // column slices span its rows' whole extent in the file.
  const auto prepare = [&](kernels::WeightMatrix& m, bool keep_mapped) {
    if (m.rows == 0) return;
    const size_t extent = m.row_stride * (size_t)(m.rows - 1) + *row_bytes(m.type, m.cols);
    file->prefetch_pages(m.data, extent);
    kernels::prepare_weight(m);
    if (m.packed && !keep_mapped) file->drop_pages(m.data, extent);
  };
  // Matrices are packed by all the load's threads at once, each taking the
  // next one as it finishes (sizes differ, so no fixed split).
  std::vector<std::pair<kernels::WeightMatrix*, bool>> todo;
  for (LayerWeights& l : w->layers) {
    for (kernels::WeightMatrix* m :
         {&l.attn.wq, &l.attn.wk, &l.attn.wv, &l.attn.wo, &l.ffn.gate, &l.ffn.up, &l.ffn.down})
      todo.push_back({m, false});
    MoeWeights& moe = l.moe;  // each expert's slab is a matrix of its own
    for (auto* experts : {&moe.gate, &moe.up, &moe.down})
      for (kernels::WeightMatrix& m : *experts) todo.push_back({&m, false});
    for (kernels::WeightMatrix* m :
         {&moe.router, &moe.shared_gate, &moe.shared_up, &moe.shared_down, &moe.shared_gate_inp})
      todo.push_back({m, false});
  }
  todo.push_back({&w->output, hp.tied_output && first});
  {
    ThreadPool pool(std::max(1, options.n_threads));
    pool.parallel_for(
        (int64_t)todo.size(),
        [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) prepare(*todo[(size_t)i].first, todo[(size_t)i].second);
        },
        /*grain=*/1);
  }
  // Decode reads one embedding row per token, likely on an untouched page:
  // fault the table in now, not one page per decode step (docs/performance.md).
  // A shard leaves it to be paged in as tokens use it: its memory is its share.
  if (whole)
    file->prefetch_pages(w->tok_embd.data, w->tok_embd.row_stride * (size_t)w->tok_embd.rows);
  return std::unique_ptr<Model>(new DecoderModel(std::move(file), std::move(hp), std::move(*local),
                                                 shard, std::move(*w), decoder, options.n_threads));
}

}  // namespace cairn::model
