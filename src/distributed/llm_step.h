// distributed/llm_step.h — one forward of a distributed LLM on the wire.
// The worker's engine schedules a batch and its K/V block tables; every
// agent receives both as the tensors of a Run (tokens, positions,
// sequences, which rows want logits, and each sequence's table), runs its
// shard of the layers, and the last stage's first agent answers with the
// logits. Owns that encoding, its checks (an agent trusts nothing it is
// sent), and the fingerprint that says two GGUF files are the same model.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"
#include "core/value.h"
#include "kv/block_table_kv.h"
#include "model/model.h"

namespace cairn::distributed {

struct LlmStep {
  model::Batch batch;
  std::vector<kv::SeqTable> tables;  // one per sequence of the batch
};

std::vector<values::Tensor> encode_step(const LlmStep& step);
// Errors name the tensor that is missing, of the wrong type or length, or
// inconsistent with the others.
Result<LlmStep> decode_step(const std::vector<values::Tensor>& inputs);

std::vector<values::Tensor> encode_logits(const model::Logits& logits);
Result<model::Logits> decode_logits(const std::vector<values::Tensor>& outputs, int64_t n_vocab);

// The hyper-parameters that make two files the same network for sharding
// ("llama: 22 layers, 2048 wide, 32/4 heads of 64, FFN 5632, vocabulary 32000").
std::string llm_fingerprint(const model::HParams& hp);

// Whether `path` starts with GGUF's magic (else an agent reads it as ONNX).
bool is_gguf_file(const std::string& path);

}  // namespace cairn::distributed
