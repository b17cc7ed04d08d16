// model/llama.cpp — the `llama` architecture's loader.
// The `llama` architecture (Llama 2/3, Mistral, TinyLlama): the shared pre-norm
// decoder with Norm-style RoPE (llama.cpp's converter permutes Q/K for it), GQA
// and a SwiGLU FFN; no projection biases.
#include "model/arch.h"

namespace cairn::model {

Result<std::unique_ptr<Model>> load_llama(std::shared_ptr<const gguf::File> file, HParams hp,
                                          const LoadOptions& options) {
  return load_decoder(std::move(file), std::move(hp), options, DecoderOptions{.qkv_bias = false});
}

}  // namespace cairn::model
