// distributed/llm_shard.cpp — see llm_shard.h.
#include "distributed/llm_shard.h"

#include <chrono>

#include "distributed/llm_step.h"

namespace cairn::distributed {

namespace {

using clock = std::chrono::steady_clock;

// model::ShardComm over a collective group, timing every call.
class GroupComm final : public model::ShardComm {
 public:
  GroupComm(collective::Group* g, CommStats* stats) : g_(g), stats_(stats) {}
  Status all_reduce_sum(float* data, size_t n) override {
    const auto t0 = clock::now();
    Status st = g_ ? g_->all_reduce_sum(data, n) : Status::unavailable("not in a group");
    note(t0, n * sizeof(float));
    return st;
  }
  Status all_gather(const float* in, size_t n, float* out) override {
    const auto t0 = clock::now();
    Status st = g_ ? g_->all_gather(in, n * sizeof(float), out) : Status::unavailable("not in a group");
    note(t0, n * sizeof(float));
    return st;
  }

 private:
  void note(clock::time_point t0, size_t bytes) {
    if (!stats_) return;
    stats_->ns += (uint64_t)std::chrono::duration_cast<std::chrono::nanoseconds>(clock::now() - t0).count();
    stats_->bytes += bytes;
  }
  collective::Group* g_;
  CommStats* stats_;
};

}  // namespace

Result<std::unique_ptr<LlmShard>> LlmShard::load(const std::string& path, int rank, int rank_size,
                                                 int stage_size, int threads, int32_t kv_blocks,
                                                 int32_t block_tokens) {
  auto opened = gguf::File::open(path);
  if (!opened.is_ok()) return opened.status().with_context(path);
  std::shared_ptr<const gguf::File> file(std::move(*opened));
  CAIRN_ASSIGN_OR_RETURN(const model::HParams hp, model::Model::read_hparams(*file));
  model::LoadOptions o;
  o.n_threads = threads;
  CAIRN_ASSIGN_OR_RETURN(o.shard, model::shard_for_rank(hp, rank, rank_size, stage_size));
  auto m = model::Model::load(file, o);
  if (!m.is_ok()) return m.status().with_context(path);
  std::unique_ptr<LlmShard> s(new LlmShard);
  s->file_ = std::move(file);
  s->model_ = std::move(*m);
  auto kv = kv::BlockTableKv::create(s->model_->kv_shape(), kv_blocks, block_tokens);
  if (!kv.is_ok()) return kv.status().with_context("K/V pool");
  s->kv_ = std::move(*kv);
  return s;
}

bool LlmShard::last_stage() const {
  const model::ShardSpec& s = model_->shard();
  return s.layer_end < 0 || s.layer_end == model_->hparams().n_layer;
}

std::string LlmShard::describe() const {
  const model::ShardSpec& s = model_->shard();
  const int64_t end = s.layer_end < 0 ? model_->hparams().n_layer : s.layer_end;
  return "layers [" + std::to_string(s.layer_begin) + ", " + std::to_string(end) + ") of " +
         std::to_string(model_->hparams().n_layer) + ", tensor-parallel rank " + std::to_string(s.tp_rank) +
         " of " + std::to_string(s.tp_size) + "; K/V pool " + std::to_string(kv_->pool_bytes() >> 20) +
         " MiB (committed as used)";
}

Status LlmShard::forward(const std::vector<values::Tensor>& inputs, const std::vector<float>* hidden_in,
                         collective::Group* group, std::vector<float>* hidden_out, model::Logits* logits,
                         CommStats* stats) {
  CAIRN_ASSIGN_OR_RETURN(LlmStep step, decode_step(inputs));
  if (!first_stage()) {
    const size_t want = step.batch.size() * (size_t)model_->hparams().n_embd;
    if (!hidden_in || hidden_in->size() != want)
      return Status::invalid_argument("the previous stage sent " + std::to_string(hidden_in ? hidden_in->size() : 0) +
                                      " floats, not " + std::to_string(want));
  }
  CAIRN_RETURN_IF_ERROR(kv_->set_tables(std::move(step.tables)));
  GroupComm comm(group, stats);
  model::StageIo io;
  io.hidden_in = first_stage() ? nullptr : hidden_in->data();
  io.hidden_out = last_stage() ? nullptr : hidden_out;
  io.comm = &comm;
  model::Logits local;
  return model_->forward_stage(step.batch, *kv_, io, logits ? *logits : local);
}

}  // namespace cairn::distributed
