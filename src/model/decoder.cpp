// model/decoder.cpp — the llama-family decoder model: its forward pass over the shared blocks.
// The pre-norm decoder shared by the llama-family architectures: RMSNorm,
// attention with RoPE and GQA, SwiGLU FFN, residual adds, output head (tied to
// the embedding when output.weight is absent). Architectures differ only in
// the facts DecoderOptions carries, so each stays a few lines.
#include <array>
#include <memory>

#include "model/arch.h"
#include "model/blocks.h"

namespace cairn::model {
namespace {

class DecoderModel final : public Model {
 public:
  DecoderModel(std::shared_ptr<const gguf::File> file, HParams hp, DecoderWeights w, int n_threads)
      : Model(std::move(hp)), file_(std::move(file)), w_(std::move(w)), pool_(n_threads) {}

  Status forward(const Batch& batch, KvView& kv, Logits& out) override {
    CAIRN_RETURN_IF_ERROR(validate_batch(hparams_, batch, kv));
    const HParams& hp = hparams_;
    const int64_t T = (int64_t)batch.size();
    ws_.reserve(hp, T);
    embed(w_.tok_embd, batch, ws_.x.data());
    rope_tables(hp, batch, ws_, pool_);
    // Each block names the weights the next projection reads (a memory hint).
    const auto qkv = [](const LayerWeights& l) {
      return std::array<const kernels::WeightMatrix*, 3>{&l.attn.wq, &l.attn.wk, &l.attn.wv};
    };
    const std::array<const kernels::WeightMatrix*, 1> output = {&w_.output};
    for (int il = 0; il < (int)hp.n_layer; ++il) {
      const LayerWeights& l = w_.layers[(size_t)il];
      const std::array<const kernels::WeightMatrix*, 2> gate_up = {&l.ffn.gate, &l.ffn.up};
      attention(hp, l.attn, l.attn_norm, il, batch, kv, ws_, pool_, gate_up);
      add_rows(ws_.x.data(), ws_.tmp.data(), T, hp.n_embd, pool_);
      const int64_t n = il + 1 == (int)hp.n_layer ? keep_output_rows(batch, ws_, hp.n_embd) : T;
      if (il + 1 < (int)hp.n_layer) {
        ffn_swiglu(hp, l.ffn, l.ffn_norm, n, ws_, pool_, qkv(w_.layers[(size_t)il + 1]));
      } else {
        ffn_swiglu(hp, l.ffn, l.ffn_norm, n, ws_, pool_, output);
      }
      add_rows(ws_.x.data(), ws_.tmp.data(), n, hp.n_embd, pool_);
    }
    output_logits(hp, w_, batch, ws_, pool_, out, qkv(w_.layers[0]));
    return Status::ok();
  }

  std::vector<std::span<const uint8_t>> weight_streams() const override {
    std::vector<std::span<const uint8_t>> s;
    for (const LayerWeights& l : w_.layers) {
      for (const kernels::WeightMatrix* m :
           {&l.attn.wq, &l.attn.wk, &l.attn.wv, &l.attn.wo, &l.ffn.gate, &l.ffn.up, &l.ffn.down})
        s.push_back(kernels::weight_stream(*m));
    }
    s.push_back(kernels::weight_stream(w_.output));
    return s;
  }

 private:
  std::shared_ptr<const gguf::File> file_;  // the weights point into its mapping
  DecoderWeights w_;
  ThreadPool pool_;
  Workspace ws_;
};

}  // namespace

Result<std::unique_ptr<Model>> load_decoder(std::shared_ptr<const gguf::File> file, HParams hp,
                                            const LoadOptions& options,
                                            const DecoderOptions& decoder) {
  auto w = load_decoder_weights(*file, hp, decoder.qkv_bias);
  if (!w) return w.status();
  // Repacked copies for the fastest kernels of this CPU; the embedding table
  // is only ever read a row at a time, so it stays as mapped.
  // Once packed, a matrix's mapped bytes are never read again (get_row reads
  // only the embedding table, which a tied output shares), so they leave
  // resident memory instead of doubling the model's footprint.
  const auto prepare = [&](kernels::WeightMatrix& m, bool keep_mapped) {
    file->prefetch_pages(m.data, m.row_stride * (size_t)m.rows);
    kernels::prepare_weight(m);
    if (m.packed && !keep_mapped) file->drop_pages(m.data, m.row_stride * (size_t)m.rows);
  };
  for (LayerWeights& l : w->layers) {
    for (kernels::WeightMatrix* m :
         {&l.attn.wq, &l.attn.wk, &l.attn.wv, &l.attn.wo, &l.ffn.gate, &l.ffn.up, &l.ffn.down})
      prepare(*m, false);
  }
  prepare(w->output, hp.tied_output);
  // Decode reads one embedding row per token, likely on an untouched page:
  // fault the table in now, not one page per decode step (docs/performance.md).
  file->prefetch_pages(w->tok_embd.data, w->tok_embd.row_stride * (size_t)w->tok_embd.rows);
  return std::unique_ptr<Model>(
      new DecoderModel(std::move(file), std::move(hp), std::move(*w), options.n_threads));
}

}  // namespace cairn::model
