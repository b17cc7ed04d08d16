// model/arch.h — internal to src/model: the table of architectures.
// Each architecture file (llama.cpp, qwen2.cpp, qwen3.cpp, ...) provides a loader; the table
// maps general.architecture to it and to the per-architecture facts that the
// hyper-parameter reader needs. Adding an architecture = one file + one row.
#pragma once

#include <memory>
#include <string_view>

#include "core/status.h"
#include "gguf/gguf.h"
#include "kernels/kernels.h"
#include "model/blocks.h"
#include "model/model.h"

namespace cairn::model {

using ArchLoader = Result<std::unique_ptr<Model>> (*)(std::shared_ptr<const gguf::File> file,
                                                      HParams hp, const LoadOptions& options);

struct ArchSpec {
  std::string_view name;           // general.architecture
  kernels::RopeStyle rope_style;   // llama's converter permutes Q/K for Norm; qwen2 is Neox
  ArchLoader load;
  // A mixture-of-experts FFN: the expert_* keys are read, feed_forward_length
  // is optional.
  bool moe = false;
};

// nullptr when the architecture is unknown.
const ArchSpec* find_arch(std::string_view name);

// DecoderOptions (model/blocks.h): what sets one llama-family decoder apart.
Result<std::unique_ptr<Model>> load_decoder(std::shared_ptr<const gguf::File> file, HParams hp,
                                            const LoadOptions& options,
                                            const DecoderOptions& decoder);

Result<std::unique_ptr<Model>> load_llama(std::shared_ptr<const gguf::File> file, HParams hp,
                                          const LoadOptions& options);
Result<std::unique_ptr<Model>> load_qwen2(std::shared_ptr<const gguf::File> file, HParams hp,
                                          const LoadOptions& options);
Result<std::unique_ptr<Model>> load_qwen3(std::shared_ptr<const gguf::File> file, HParams hp,
                                          const LoadOptions& options);
Result<std::unique_ptr<Model>> load_qwen2moe(std::shared_ptr<const gguf::File> file, HParams hp,
                                             const LoadOptions& options);
Result<std::unique_ptr<Model>> load_qwen3moe(std::shared_ptr<const gguf::File> file, HParams hp,
                                             const LoadOptions& options);
Result<std::unique_ptr<Model>> load_phi3(std::shared_ptr<const gguf::File> file, HParams hp,
                                         const LoadOptions& options);

}  // namespace cairn::model
