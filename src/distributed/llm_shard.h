// distributed/llm_shard.h — an agent's part of a distributed LLM: the
// layers of its pipeline stage and its tensor-parallel slice of each
// (model.h's ShardSpec), read from the one GGUF file every agent maps, and
// the K/V of those layers and heads at the block ids the worker hands out.
// Runs one step at a time as the worker sends them (llm_step.h); the
// collectives go through its stage's group. Never schedules or samples.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "collective/group.h"
#include "core/status.h"
#include "core/value.h"
#include "kv/block_table_kv.h"
#include "model/model.h"

namespace cairn::distributed {

// Time spent in, and payload bytes handed to, the stage's collectives.
struct CommStats {
  uint64_t ns = 0;
  uint64_t bytes = 0;
};

class LlmShard {
 public:
  // Agent `rank`'s shard for rank_size agents in stage_size stages, with a
  // pool of kv_blocks blocks of block_tokens positions. Errors name the cut
  // that cannot be made or the file.
  static Result<std::unique_ptr<LlmShard>> load(const std::string& path, int rank, int rank_size,
                                                int stage_size, int threads, int32_t kv_blocks,
                                                int32_t block_tokens);

  // One step of llm_step.h's tensors. A later stage gets the previous
  // stage's rows in hidden_in (T * n_embd floats); every stage but the last
  // fills hidden_out, the last one `logits` (every rank of it: the vocabulary
  // slices are gathered). `group` is the stage's (may be null with one rank).
  Status forward(const std::vector<values::Tensor>& inputs, const std::vector<float>* hidden_in,
                 collective::Group* group, std::vector<float>* hidden_out, model::Logits* logits,
                 CommStats* stats);

  bool first_stage() const { return model_->shard().layer_begin == 0; }
  bool last_stage() const;
  // "layers [0, 11) of 22, tensor-parallel rank 1 of 2; K/V pool 88 MiB"
  std::string describe() const;

 private:
  LlmShard() = default;
  std::unique_ptr<model::Model> model_;
  std::shared_ptr<const gguf::File> file_;
  std::unique_ptr<kv::BlockTableKv> kv_;
};

}  // namespace cairn::distributed
