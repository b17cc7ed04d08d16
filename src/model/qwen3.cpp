// model/qwen3.cpp — the `qwen3` architecture's loader.
// The `qwen3` architecture (Qwen 3 dense): the qwen2 decoder without Q/K/V
// biases, plus an RMSNorm of every head's query and key vector (weights of
// head_dim floats, the layers' epsilon) between the projections and RoPE;
// NeoX-style RoPE; heads may be wider than embedding_length / head_count
// (attention.key_length).
#include "model/arch.h"
#include "model/tensor_names.h"

namespace cairn::model {

Result<std::unique_ptr<Model>> load_qwen3(std::shared_ptr<const gguf::File> file, HParams hp,
                                          const LoadOptions& options) {
  // The reference would add Q/K/V biases if a file had them; none is known
  // to, and leaving them out would be silently wrong.
  for (TensorRole r : {TensorRole::AttnQBias, TensorRole::AttnKBias, TensorRole::AttnVBias})
    if (file->find_tensor(tensor_name(r, 0)))
      return Status::error("tensor '" + tensor_name(r, 0) +
                           "': Q/K/V biases in a qwen3 model are not supported");
  return load_decoder(std::move(file), std::move(hp), options,
                      DecoderOptions{.qkv_bias = false, .qk_norm = true});
}

}  // namespace cairn::model
