// engine/request.h — what the engine is asked to do, and how it answers.
// Owns the engine-side request (prompt ids, limits, stop strings, sampling)
// and the sink interface the engine thread reports each sequence's tokens and
// end through. Knows nothing of HTTP, JSON or chat: the serving layer above
// validates, renders and tokenizes before anything reaches the engine, and
// adapts this sink to serving::EventSink.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "engine/sampler.h"
#include "grammar/grammar.h"
#include "kv/transfer.h"
#include "engine/stop_conditions.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace cairn::engine {

using RequestId = uint64_t;

struct EngineRequest {
  std::vector<Token> prompt;  // non-empty, ids inside the vocabulary
  int32_t max_tokens = -1;    // -1: until end of generation or a full context
  bool ignore_eos = false;
  std::vector<std::string> stop;  // stop strings (never sent, nor any prefix of one)
  // Control tokens' text goes into the output (tool-call markers such as
  // <|python_tag|> and [TOOL_CALLS] are control tokens); end tokens never.
  bool render_special = false;
  SamplingParams sampling;        // n_logprobs > 0 asks for top-N per token
  bool logprobs = false;          // report the chosen token's log-probability
  uint16_t adapter = 0;           // LoRA adapter id (model::Model::set_adapters); 0: the base model
  // Constrained decoding: every token sampled keeps the output a prefix of
  // this grammar's language, and an end-of-generation token comes only
  // where the output is a whole sentence of it. Null: free text.
  std::shared_ptr<const grammar::Grammar> grammar;
  // false: never speculative decoding for this request (the engine's
  // EngineConfig::spec_lookup_max turns it on). Speculation never changes
  // greedy output nor the output distribution; it changes which random
  // numbers a seeded sampled request draws.
  bool speculative = true;

  // Prefill → decode handoff (cluster workers with roles).
  // export_kv: the prefill side. The prompt's K/V rows go to the sink's
  // on_kv as they are computed (whole blocks after each step, the rest
  // after the first token); once the first token is out, a sequence that did
  // not end there ends with EndReason::Handoff, its held-back text kept
  // (the decode side releases it).
  bool export_kv = false;
  // The decode side. `forced` are the tokens already generated (and sent)
  // elsewhere: they are replayed through the stop checks, grammar and
  // sampler without being reported, so the output continues exactly where
  // it left off. `import_kv` (optional: without it the prompt and forced
  // tokens are recomputed) holds the prompt's rows; its prompt must equal
  // `prompt`, and the sequence is admitted only when its blocks can be
  // reserved whole.
  std::vector<Token> forced;
  std::shared_ptr<const kv::ImportedKv> import_kv;
};

// One generated token that is not an end-of-generation token.
struct TokenOutput {
  Token id = -1;
  std::string text;     // text now safe to send (may be empty while held back)
  SampleResult sample;  // chosen token's raw log-probability and the top-N
};

struct EndOutput {
  EndReason reason = EndReason::Stop;
  std::string text;  // held-back text released at the end
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;  // every sampled token, an ending EOS included
  int32_t cached_prompt_tokens = 0;
};

// Called on the engine thread, in order: on_token*, then exactly one of
// on_end / on_error. Must never block (queue and wake, as serving's sinks do).
class SequenceSink {
 public:
  virtual ~SequenceSink() = default;
  virtual void on_token(const TokenOutput& out) = 0;
  virtual void on_end(const EndOutput& out) = 0;
  // Internal unless the cause says otherwise (Unavailable: the model's
  // agents are gone, a retry may succeed).
  virtual void on_error(const Status& error) = 0;
  // export_kv requests only: a run of the prompt's K/V rows, in order from
  // position 0 (the first also carries the geometry and prompt); the last
  // run follows the first token's on_token. Must never block.
  virtual void on_kv(kv::KvRun run) { (void)run; }
};

// An embedding job: each input's final hidden rows pooled into one vector
// (Rank: the classification head's scores), answered in input order. Inputs
// of many jobs share a forward; no K/V outlives it (nothing is cached).
struct EmbedRequest {
  std::vector<std::vector<Token>> inputs;  // each non-empty, inside the vocabulary and context
  model::Pooling pooling = model::Pooling::Mean;  // Mean, Cls, Last or Rank
};

// Called once on the engine thread: on_embeddings or on_error (Cancelled
// when the job was cancelled). Must never block.
class EmbedSink {
 public:
  virtual ~EmbedSink() = default;
  // vectors[i] is input i's pooled row (not normalized); n_tokens counts every input's tokens.
  virtual void on_embeddings(std::vector<std::vector<float>> vectors, int32_t n_tokens) = 0;
  virtual void on_error(const Status& error) = 0;
};

}  // namespace cairn::engine
