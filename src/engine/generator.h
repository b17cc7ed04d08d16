// engine/generator.h — one sequence from prompt to text, for `cairn run` and tests.
// Owns the single-sequence loop: tokenize (BOS as the file's flags say),
// prefill in chunks, then sample / decode (speculatively when asked) until
// EOS, the token limit or the context is full, streaming complete UTF-8 text
// to a callback. K/V lives in
// a ContiguousKvCache made per call. Never batches several sequences (the
// engine's scheduler does that) and never writes to stdout itself.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "engine/draft.h"
#include "engine/sampler.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace cairn::engine {

struct GenerateOptions {
  int32_t max_tokens = 128;  // -1: until end of generation or a full context
  bool ignore_eos = false;   // keep going past end-of-generation tokens
  SamplingParams sampling;
  // Context to allocate; 0: prompt + max_tokens (max(4096, prompt) when
  // max_tokens is -1). Never more than the model's context_length (when the
  // file states one).
  int64_t n_ctx = 0;
  int32_t prefill_chunk = 512;  // prompt tokens per forward, bounding activation memory
  TensorType kv_type = TensorType::F16;  // how K/V rows are stored (--kv-type: F16 or Q8_0)
  // Speculative decoding (engine/draft.h): up to spec_max drafts per step
  // from `drafts` (sequence id 0), verified in one forward as the engine
  // does (output distribution unchanged; greedy output identical). Null or
  // spec_max 0: off.
  std::shared_ptr<DraftSource> drafts = nullptr;
  int32_t spec_max = 0;
};

enum class FinishReason { Stop, Length };

struct GenerateResult {
  std::vector<Token> prompt_tokens;
  std::vector<Token> tokens;          // generated, including a final EOS if one ended it
  std::vector<SampleResult> samples;  // one per generated token (logprobs)
  std::string text;                   // everything passed to the callback
  FinishReason finish = FinishReason::Length;
  uint64_t seed = 0;
  double prefill_seconds = 0;
  double decode_seconds = 0;
  int64_t draft_tokens = 0;     // drafts verified
  int64_t accepted_tokens = 0;  // of them, kept
};

// Receives each piece of complete text; returning false stops generation
// (the result then ends with FinishReason::Stop).
using TextCallback = std::function<bool(std::string_view piece)>;

class Generator {
 public:
  Generator(model::Model& model, const Tokenizer& tokenizer) : model_(model), tok_(tokenizer) {}

  Result<GenerateResult> generate(std::string_view prompt, const GenerateOptions& options,
                                  const TextCallback& on_text = {});
  // The same loop from token ids (no tokenization), e.g. golden prompt_tokens.
  Result<GenerateResult> generate_tokens(std::vector<Token> prompt, const GenerateOptions& options,
                                         const TextCallback& on_text = {});

 private:
  model::Model& model_;
  const Tokenizer& tok_;
};

}  // namespace cairn::engine
