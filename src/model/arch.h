// model/arch.h — internal to src/model: the table of architectures.
// Each architecture file (llama.cpp, qwen2.cpp, qwen3.cpp, ...) provides a loader; the table
// maps general.architecture to it and to the per-architecture facts that the
// hyper-parameter reader needs. Adding an architecture = one file + one row.
#pragma once

#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "core/status.h"
#include "gguf/gguf.h"
#include "kernels/kernels.h"
#include "model/blocks.h"
#include "model/model.h"

namespace cairn::model {

// Typed reads of <arch>.* metadata keys with the checks every architecture shares.
class MetaReader {
 public:
  MetaReader(const gguf::File& f, std::string arch) : f_(f), arch_(std::move(arch)) {}

  const gguf::File& file() const { return f_; }
  std::string key(std::string_view suffix) const { return arch_ + "." + std::string(suffix); }

  // A positive integer in [1, max]; `fallback` when absent (0: required; a
  // negative fallback says "absent" to the caller).
  Result<int64_t> count(std::string_view suffix, int64_t max, int64_t fallback = 0) const {
    const std::string k = key(suffix);
    auto v = f_.get_uint(k);
    if (!v) return v.status().with_context("metadata '" + k + "'");
    if (!v->has_value()) {
      if (fallback != 0) return fallback;
      return Status::error("metadata '" + k + "' is missing");
    }
    const uint64_t n = **v;
    if (n == 0) return Status::error("metadata '" + k + "' must be positive, got 0");
    if (n > (uint64_t)max)
      return Status::error("metadata '" + k + "' = " + std::to_string(n) + " exceeds the limit " +
                           std::to_string(max));
    return (int64_t)n;
  }

  // A finite float, `fallback` when absent; required when fallback is NaN.
  Result<double> real(std::string_view suffix, double fallback) const {
    const std::string k = key(suffix);
    auto v = f_.get_float(k);
    if (!v) return v.status().with_context("metadata '" + k + "'");
    if (!v->has_value()) {
      if (std::isnan(fallback)) return Status::error("metadata '" + k + "' is missing");
      return fallback;
    }
    const double x = **v;
    if (!std::isfinite(x)) return Status::error("metadata '" + k + "' is not finite");
    return x;
  }

  Result<std::optional<std::string_view>> text(std::string_view suffix) const {
    const std::string k = key(suffix);
    auto v = f_.get_string(k);
    if (!v) return v.status().with_context("metadata '" + k + "'");
    return *v;
  }

 private:
  const gguf::File& f_;
  std::string arch_;
};

// Reads an architecture's own keys into hp once the shared ones are read.
using ArchHParams = Status (*)(const MetaReader& m, HParams& hp);

using ArchLoader = Result<std::unique_ptr<Model>> (*)(std::shared_ptr<const gguf::File> file,
                                                      HParams hp, const LoadOptions& options);

struct ArchSpec {
  std::string_view name;           // general.architecture
  kernels::RopeStyle rope_style;   // llama's converter permutes Q/K for Norm; qwen2 is Neox
  ArchLoader load;
  // A mixture-of-experts FFN: the expert_* keys are read, feed_forward_length
  // is optional.
  bool moe = false;
  ArchHParams read_extra = nullptr;  // the architecture's own keys, if any
  // The norm's epsilon: RMSNorm's for decoders, LayerNorm's for encoders (bert).
  std::string_view eps_key = "attention.layer_norm_rms_epsilon";
};

// Gemma's interleaved sliding-window layers (hp.swa_layers), as the
// reference's set_swa_pattern: layer il slides unless il % period == period -
// 1 (period 0: every layer); the period is attention.sliding_window_pattern
// when a scalar, else `default_period`.
Status read_swa_pattern(const MetaReader& m, HParams& hp, uint64_t default_period);

// nullptr when the architecture is unknown.
const ArchSpec* find_arch(std::string_view name);

// DecoderOptions (model/blocks.h): what sets one llama-family decoder apart.
Result<std::unique_ptr<Model>> load_decoder(std::shared_ptr<const gguf::File> file, HParams hp,
                                            const LoadOptions& options,
                                            const DecoderOptions& decoder);

Result<std::unique_ptr<Model>> load_llama(std::shared_ptr<const gguf::File> file, HParams hp,
                                          const LoadOptions& options);
Status read_llama_hparams(const MetaReader& m, HParams& hp);
Result<std::unique_ptr<Model>> load_qwen2(std::shared_ptr<const gguf::File> file, HParams hp,
                                          const LoadOptions& options);
Result<std::unique_ptr<Model>> load_qwen3(std::shared_ptr<const gguf::File> file, HParams hp,
                                          const LoadOptions& options);
Result<std::unique_ptr<Model>> load_qwen2moe(std::shared_ptr<const gguf::File> file, HParams hp,
                                             const LoadOptions& options);
Result<std::unique_ptr<Model>> load_qwen3moe(std::shared_ptr<const gguf::File> file, HParams hp,
                                             const LoadOptions& options);
Result<std::unique_ptr<Model>> load_gemma2(std::shared_ptr<const gguf::File> file, HParams hp,
                                           const LoadOptions& options);
Status read_gemma2_hparams(const MetaReader& m, HParams& hp);
Result<std::unique_ptr<Model>> load_gemma3(std::shared_ptr<const gguf::File> file, HParams hp,
                                           const LoadOptions& options);
Status read_gemma3_hparams(const MetaReader& m, HParams& hp);
Result<std::unique_ptr<Model>> load_gptoss(std::shared_ptr<const gguf::File> file, HParams hp,
                                           const LoadOptions& options);
Status read_gptoss_hparams(const MetaReader& m, HParams& hp);
Result<std::unique_ptr<Model>> load_bert(std::shared_ptr<const gguf::File> file, HParams hp,
                                         const LoadOptions& options);
Status read_bert_hparams(const MetaReader& m, HParams& hp);
Result<std::unique_ptr<Model>> load_phi3(std::shared_ptr<const gguf::File> file, HParams hp,
                                         const LoadOptions& options);

}  // namespace cairn::model
