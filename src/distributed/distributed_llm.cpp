// distributed/distributed_llm.cpp — see distributed_llm.h.
#include "distributed/distributed_llm.h"

#include <algorithm>
#include <unordered_map>
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
    CAIRN_RETURN_IF_ERROR(run(std::move(step), epoch, out));
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

  // With pipeline stages and several sequences, the step goes as up to one
  // micro-batch per stage (whole sequences each, about equal in tokens), so
  // every stage has work once the first has passed its first one on.
  Status run(LlmStep step, uint64_t epoch, model::Logits& out) {
    const size_t parts = std::min<size_t>((size_t)c_->stage_size(), step.tables.size());
    if (parts <= 1) {
      CAIRN_ASSIGN_OR_RETURN(auto outputs, c_->run(encode_step(step), epoch));
      CAIRN_ASSIGN_OR_RETURN(out, decode_logits(outputs, hparams_.n_vocab));
      return Status::ok();
    }
    // Sequences in order of first appearance, dealt out by token count.
    std::unordered_map<SeqId, size_t> part_of;
    std::vector<size_t> tokens_of(step.tables.size(), 0);
    std::unordered_map<SeqId, size_t> table_of;
    for (size_t i = 0; i < step.tables.size(); ++i) table_of[step.tables[i].seq] = i;
    for (SeqId s : step.batch.seqs) ++tokens_of[table_of[s]];
    const size_t total = step.batch.size();
    size_t done = 0, part = 0;
    std::vector<LlmStep> micro(parts);
    for (size_t i = 0; i < step.tables.size(); ++i) {
      // The next part starts once this one has its share of the tokens, or
      // when each part still to come needs one of the sequences left.
      const size_t left = step.tables.size() - i, parts_after = parts - part - 1;
      if (parts_after > 0 && !micro[part].tables.empty() &&
          (done >= (part + 1) * total / parts || left <= parts_after))
        ++part;
      part_of[step.tables[i].seq] = part;
      done += tokens_of[i];
      micro[part].tables.push_back(std::move(step.tables[i]));
    }
    std::vector<std::vector<int32_t>> origin(parts);  // micro-batch row -> step row
    for (size_t t = 0; t < total; ++t) {
      const size_t p = part_of[step.batch.seqs[t]];
      micro[p].batch.add(step.batch.tokens[t], step.batch.positions[t], step.batch.seqs[t],
                         step.batch.wants_logits[t] != 0);
      origin[p].push_back((int32_t)t);
    }
    std::vector<std::vector<values::Tensor>> inputs;
    for (const LlmStep& m : micro) inputs.push_back(encode_step(m));
    CAIRN_ASSIGN_OR_RETURN(auto outputs, c_->run_pipelined(std::move(inputs), epoch));
    // Rows back in step order.
    std::vector<std::pair<int32_t, std::span<const float>>> rows;
    std::vector<model::Logits> parts_out(parts);
    for (size_t p = 0; p < parts; ++p) {
      CAIRN_ASSIGN_OR_RETURN(parts_out[p], decode_logits(outputs[p], hparams_.n_vocab));
      for (size_t r = 0; r < parts_out[p].rows(); ++r) {
        const int32_t local = parts_out[p].batch_index[r];
        if (local < 0 || (size_t)local >= origin[p].size())
          return Status::internal("the last stage's logits name a batch row that does not exist");
        rows.emplace_back(origin[p][(size_t)local], parts_out[p].row(r));
      }
    }
    std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    out.n_vocab = hparams_.n_vocab;
    out.batch_index.clear();
    out.data.clear();
    out.data.reserve(rows.size() * (size_t)hparams_.n_vocab);
    for (const auto& [index, row] : rows) {
      out.batch_index.push_back(index);
      out.data.insert(out.data.end(), row.begin(), row.end());
    }
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
