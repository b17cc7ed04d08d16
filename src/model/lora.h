// model/lora.h — LoRA adapters: the GGUF adapter files llama.cpp's converter writes.
// Owns reading and validating an adapter against its base model (general.type
// "adapter", adapter.type "lora", adapter.lora.alpha, `<tensor>.lora_a` /
// `.lora_b` pairs whose shapes fit the base tensor), merging adapters into the
// base's weights at load (the merged tensors requantized to the base's type),
// and the low-rank products a forward adds at run time. A weight W (rows out,
// columns in) becomes W + scale * B A, A of rank r rows by in columns, B of
// out rows by r columns, scale = user scale * alpha / r (alpha 0: user scale).
// The token embedding's pair is stored flipped (A: n_vocab rows of r, B:
// n_embd rows of r): row t of the table gains scale * B (row t of A).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/thread_pool.h"
#include "gguf/gguf.h"
#include "kernels/kernels.h"

namespace cairn::model {

// One adapted tensor: the pair as views of the adapter's file.
struct LoraPair {
  kernels::WeightMatrix a;  // rank rows of in columns (token_embd: n_vocab rows of rank)
  kernels::WeightMatrix b;  // out rows of rank columns (token_embd: n_embd rows of rank)
  float scale = 0.0f;
  // An expert tensor's pair ([in, r, E] and [r, out, E]): a and b hold each
  // expert's rows after the previous one's. Merged only, never at run time.
  int64_t experts = 1;
  int64_t rank() const { return a.rows == 0 ? 0 : b.cols; }
};

// An adapter file opened for a base model. `scale` multiplies alpha / rank.
struct LoraAdapter {
  std::string name;  // what requests call it (--lora-modules NAME=FILE; the path for --lora)
  std::string path;
  float alpha = 0.0f;
  float user_scale = 1.0f;
  std::shared_ptr<const gguf::File> file;  // the pairs point into its mapping
  std::map<std::string, LoraPair> pairs;   // by base tensor name, e.g. "blk.0.attn_q.weight"

  const LoraPair* find(const std::string& tensor) const {
    const auto it = pairs.find(tensor);
    return it == pairs.end() ? nullptr : &it->second;
  }
  // Sum of the pairs' bytes (what the adapter adds to memory).
  uint64_t bytes() const;
};

// Opens `path` and checks it against `base`: an adapter of the base's
// architecture, a LoRA, every tensor a `.lora_a` / `.lora_b` of a base
// matrix (norm vectors are skipped, as the reference does), both halves
// present, 2-D, of a type cairn computes, with shapes that fit the base
// tensor. Errors (one line) name the file and the tensor.
Result<std::shared_ptr<const LoraAdapter>> open_lora(const std::string& path, std::string name,
                                                     float scale, const gguf::File& base);

// "FILE" or "FILE:SCALE" (--lora); the scale must be a finite number.
struct LoraSpec {
  std::string path;
  float scale = 1.0f;
  std::string name;  // --lora-modules NAME=FILE; empty for --lora
};
Result<LoraSpec> parse_lora_flag(const std::string& text);
// "NAME=FILE" or "NAME=FILE:SCALE" (--lora-modules).
Result<LoraSpec> parse_lora_module_flag(const std::string& text);

// Adds every adapter's scale * B A to the base tensors it names, in float, and
// stores each result in the base tensor's own type (a quantized tensor is
// requantized once, after all adapters are added), through
// gguf::File::replace_tensor_data: the model built from `base` afterwards
// computes with the merged weights, expert tensors included (each expert
// with its own pair).
Status merge_loras(gguf::File& base, const std::vector<std::shared_ptr<const LoraAdapter>>& adapters,
                   int n_threads);

// ---- run time ----------------------------------------------------------------

// Rows of a batch that one adapter applies to, and the scratch its products
// use; reused across layers and forwards.
struct LoraRows {
  std::vector<int32_t> rows;  // row indices into the activations, ascending
  std::vector<float> in, mid, out;
};

// y[rows[i]] += pair.scale * B (A x[rows[i]]) for every listed row; x rows
// of pair.a.cols floats at x + row * x_stride, y rows of pair.b.rows floats
// at y + row * y_stride. The products run through kernels::matmul, so any
// computable type of A and B works.
void lora_add(const LoraPair& pair, const float* x, int64_t x_stride, float* y, int64_t y_stride,
              LoraRows& rows, ThreadPool& pool);

// The token embedding's delta: x[rows[i]] += scale * B (row tokens[rows[i]]
// of A), x rows of n_embd floats.
void lora_add_embedding(const LoraPair& pair, const int32_t* tokens, float* x, int64_t n_embd,
                        LoraRows& rows, ThreadPool& pool);

}  // namespace cairn::model
