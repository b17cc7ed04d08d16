// modelgen/lora_builder.h — writing LoRA adapter files with random weights.
// Owns the adapter layout llama.cpp's converter writes (general.type
// "adapter", adapter.type "lora", adapter.lora.alpha, `<tensor>.lora_a` of
// dims [in, rank] and `.lora_b` of dims [rank, out], [in, rank, E] and
// [rank, out, E] for an expert tensor; the token embedding's pair flipped,
// [rank, n_vocab] and [rank, n_embd]) for the tensors a caller
// names in a base model. Used by `cairn make-lora` and tests; never applies
// an adapter (model/lora.h does).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor_type.h"
#include "gguf/gguf.h"

namespace cairn::modelgen {

struct RandomLoraSpec {
  int64_t rank = 8;
  float alpha = 16.0f;  // 0: none written (the scale is then the user's alone)
  // Tensor roles adapted in every layer, e.g. "attn_q" (blk.N.attn_q.weight),
  // an expert tensor such as "ffn_up_exps", and the whole-model tensors
  // "output" and "token_embd". Every role must name a tensor of the base.
  std::vector<std::string> targets = {"attn_q", "attn_v"};
  TensorType type = TensorType::F32;  // of lora_a and lora_b: F32, F16, BF16 or Q8_0
  // Uniform weights in +-a_scale / sqrt(in) (A) and +-b_scale / sqrt(rank)
  // (B), so B A x is about b_scale * a_scale times |x| whatever the shapes.
  float a_scale = 1.0f;
  float b_scale = 0.5f;
  uint64_t seed = 0;
};

// The adapter for `base` (its general.architecture and tensor shapes), as
// bytes of a GGUF file. Errors name an unknown role or a bad size.
Result<std::vector<uint8_t>> random_lora(const gguf::File& base, const RandomLoraSpec& spec);

}  // namespace cairn::modelgen
