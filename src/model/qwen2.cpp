// model/qwen2.cpp — the `qwen2` architecture's loader.
// The `qwen2` architecture (Qwen 2 / 2.5): the llama decoder plus biases on the
// Q, K and V projections; NeoX-style RoPE (rotating halves, not pairs; the
// style is in the architecture table); tied output in the small Qwens.
#include "model/arch.h"

namespace cairn::model {

Result<std::unique_ptr<Model>> load_qwen2(std::shared_ptr<const gguf::File> file, HParams hp,
                                          const LoadOptions& options) {
  return load_decoder(std::move(file), std::move(hp), options, DecoderOptions{.qkv_bias = true});
}

}  // namespace cairn::model
