// model/llama.cpp — the `llama` architecture's loader.
// The `llama` architecture (Llama 2/3, Mistral, TinyLlama): the shared pre-norm
// decoder with Norm-style RoPE (llama.cpp's converter permutes Q/K for it), GQA
// and a SwiGLU FFN; no projection biases. With attention.sliding_window
// present and positive (Mistral 7B v0.1), every layer sees only its last
// `window` positions, as Hugging Face transformers and vLLM run it; the
// reference llama.cpp ignores that key for llama and attends to everything.
#include "model/arch.h"

namespace cairn::model {

Status read_llama_hparams(const MetaReader& m, HParams& hp) {
  const std::string key = m.key("attention.sliding_window");
  auto window = m.file().get_uint(key);
  if (!window) return window.status().with_context("metadata '" + key + "'");
  if (window->value_or(0) == 0) return Status::ok();  // absent or 0: full attention
  CAIRN_ASSIGN_OR_RETURN(hp.n_swa, m.count("attention.sliding_window", int64_t{1} << 28));
  hp.swa_layers.assign((size_t)hp.n_layer, 1);
  // The same RoPE as the file's (no rope_cs_swa table).
  hp.rope_freq_base_swa = hp.rope_freq_base;
  hp.rope_freq_scale_swa = hp.rope_freq_scale;
  return Status::ok();
}

Result<std::unique_ptr<Model>> load_llama(std::shared_ptr<const gguf::File> file, HParams hp,
                                          const LoadOptions& options) {
  DecoderOptions d;
  d.rope_factor_pair = hp.rope_longrope;  // as the reference loads them for llama
  return load_decoder(std::move(file), std::move(hp), options, d);
}

}  // namespace cairn::model
