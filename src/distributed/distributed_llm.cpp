// distributed/distributed_llm.cpp — see distributed_llm.h.
#include "distributed/distributed_llm.h"

#include <unordered_set>

#include "distributed/llm_step.h"
#include "kv/kv_cache.h"

namespace cairn::distributed {

namespace {

class DistributedLlm final : public model::Model {
 public:
  DistributedLlm(std::shared_ptr<Coordinator> c, model::HParams hp) : Model(std::move(hp)), c_(std::move(c)) {}

  Status forward(const model::Batch& batch, model::KvView& kv, model::Logits& out) override {
    const auto* cache = dynamic_cast<const kv::PagedKvCache*>(&kv);
    if (!cache) return Status::internal("a distributed model needs the worker's paged K/V tables");
    const size_t n = batch.size();
    if (n == 0) return Status::error("batch is empty");
    if (batch.positions.size() != n || batch.seqs.size() != n || batch.wants_logits.size() != n)
      return Status::error("batch fields have different lengths");
    const uint64_t epoch = c_->epoch();
    LlmStep step;
    step.batch = batch;
    std::unordered_set<SeqId> seen;
    for (size_t i = 0; i < n; ++i) {
      if (batch.tokens[i] < 0 || batch.tokens[i] >= hparams_.n_vocab)
        return Status::error("token " + std::to_string(batch.tokens[i]) + " is outside the vocabulary of " +
                             std::to_string(hparams_.n_vocab));
      const kv::SeqLayout l = cache->layout(batch.seqs[i]);
      if (batch.positions[i] < 0 || batch.positions[i] >= l.capacity)
        return Status::error("position " + std::to_string(batch.positions[i]) + " of sequence " +
                             std::to_string(batch.seqs[i]) + " is outside its K/V capacity " +
                             std::to_string(l.capacity));
      if (!seen.insert(batch.seqs[i]).second) continue;
      if (l.generation != epoch)
        return Status::unavailable("the distributed model's agents re-formed since sequence " +
                                   std::to_string(batch.seqs[i]) + " started; its K/V is gone");
      step.tables.push_back(kv::SeqTable{batch.seqs[i], std::vector<int32_t>(l.blocks.begin(), l.blocks.end()),
                                         l.writable_from, l.capacity});
    }
    CAIRN_ASSIGN_OR_RETURN(auto outputs, c_->run(encode_step(step), epoch));
    CAIRN_ASSIGN_OR_RETURN(out, decode_logits(outputs, hparams_.n_vocab));
    size_t wanted = 0;
    for (uint8_t w : batch.wants_logits) wanted += w != 0;
    if (out.rows() != wanted)
      return Status::internal("the last stage sent " + std::to_string(out.rows()) + " rows of logits, not " +
                              std::to_string(wanted));
    for (size_t r = 0; r < out.rows(); ++r)
      if (out.batch_index[r] < 0 || (size_t)out.batch_index[r] >= n || !batch.wants_logits[(size_t)out.batch_index[r]])
        return Status::internal("the last stage's logits name a batch row that asked for none");
    return Status::ok();
  }

  // The weights are the agents': nothing here to probe.
  std::vector<std::span<const uint8_t>> weight_streams() const override { return {}; }

 private:
  std::shared_ptr<Coordinator> c_;
};

}  // namespace

std::unique_ptr<model::Model> make_distributed_llm(std::shared_ptr<Coordinator> coordinator, model::HParams hp) {
  return std::make_unique<DistributedLlm>(std::move(coordinator), std::move(hp));
}

}  // namespace cairn::distributed
