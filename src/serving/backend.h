// serving/backend.h — the seam every front-end talks to.
// Owns the request/event vocabulary between front-ends (HTTP, gRPC) and
// whatever runs the model: LocalBackend (an engine in this process),
// cluster::RemoteBackend (one worker over gRPC) and cluster::ClusterBackend (the
// controller, spreading requests over workers). Failures are cairn::Status
// values (InvalidArgument, NotFound, Unavailable, Internal, with the offending
// field in param). Knows nothing of HTTP or JSON; front-ends translate to and
// from these types.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "core/histogram.h"
#include "core/status.h"
#include "kv/transfer.h"

namespace cairn::serving {

using Token = int32_t;
using RequestId = uint64_t;

struct ChatMessage {
  std::string role;
  std::string content;
  // Raw JSON of extra fields (tool_calls, name, tool_call_id...) for templates.
  std::string extra_json;
};

struct SamplingOptions {
  float temperature = 1.0f;  // 0: greedy
  int32_t top_k = 0;         // 0: off
  float top_p = 1.0f;
  float min_p = 0.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  float repetition_penalty = 1.0f;
  std::map<Token, float> logit_bias;
  std::optional<uint64_t> seed;
};

enum class ToolChoice { Auto, None, Required, Named };

struct GenerateRequest {
  std::string model;  // empty: the only model served
  // Exactly one of: raw text, token ids, or chat messages (rendered with the
  // model's chat template by the backend).
  std::variant<std::string, std::vector<Token>, std::vector<ChatMessage>> prompt;
  std::string tools_json;        // chat: OpenAI `tools` array as JSON, or empty
  // chat: OpenAI tool_choice. None leaves the tools out of the prompt and
  // the output unparsed; Required and Named constrain the output to calls
  // (of tool_choice_name for Named) through the grammar engine.
  ToolChoice tool_choice = ToolChoice::Auto;
  std::string tool_choice_name;
  bool parallel_tool_calls = true;
  // chat: a JSON object of extra chat-template variables (e.g.
  // {"enable_thinking": false}), or empty.
  std::string chat_template_kwargs_json;
  bool add_generation_prompt = true;
  int32_t max_tokens = -1;       // -1: until the context is full
  std::vector<std::string> stop;
  bool ignore_eos = false;
  bool speculative = true;  // false: no speculative decoding (engine::EngineRequest::speculative)
  SamplingOptions sampling;
  int32_t top_logprobs = -1;     // -1: no logprobs; 0..20: chosen (+ top-N)
  std::string user;
  // Structured output: GBNF text (grammar/grammar.h) the output must follow,
  // as the API layer made it from response_format, a JSON schema, a regular
  // expression, choices or a grammar; empty: free text.
  std::string grammar;

  // Prefill → decode handoff between cluster workers (set by the
  // controller, never by a client; docs/cluster.md "Prefill and decode
  // workers"). With `handoff`, the worker computes the prompt and the first
  // token, streams the prompt's K/V rows to the decode worker at
  // handoff->peer under handoff->id while it computes, and ends with a
  // FinishEvent whose reason is "handoff". With `resume`, the worker
  // continues a request whose first tokens were generated elsewhere
  // (engine::EngineRequest::forced / import_kv).
  struct Handoff {
    std::string peer;  // host:port of the decode worker's Worker service
    std::string id;    // names the transfer there
  };
  struct Resume {
    std::string handoff_id;  // the transfer to take the prompt's K/V from; empty: recompute
    std::vector<Token> forced;  // tokens already generated and sent, in order (at least one)
    std::shared_ptr<const kv::ImportedKv> kv;  // filled by the worker from handoff_id
  };
  std::optional<Handoff> handoff;
  std::optional<Resume> resume;
};

struct TopLogprob {
  Token id;
  std::string text;  // the token's bytes (may be an incomplete UTF-8 sequence)
  float logprob;
};

// One sampled token. `text` is the newly completed UTF-8 text (may be empty
// while a multi-byte character or a possible stop string is held back).
struct TokenEvent {
  Token id;
  std::string text;
  float logprob = 0;
  std::vector<TopLogprob> top;
};

struct Usage {
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;
  int32_t cached_prompt_tokens = 0;
};

struct FinishEvent {
  std::string reason;  // "stop" (EOS or stop string), "length", "cancelled"; "handoff" (above)
  std::string text;    // any held-back text released at the end
  Usage usage;
  // reason "handoff": empty when the decode worker acknowledged every K/V
  // row; else why the transfer failed (the controller then resumes
  // without it, recomputing the prompt).
  std::string handoff_error;
};

// How to read a chat request's output, as the backend that rendered its
// prompt knows it: the tool-call format of the model's template (a name
// chat/tool_calls.h knows; empty: tool calls are not parsed), the tags
// around reasoning that is split out of the content (empty: none is), and
// whether the prompt already opened it (the output then starts inside it).
struct OutputSyntax {
  std::string tool_format;
  std::string reasoning_open, reasoning_close;
  bool starts_in_reasoning = false;
};

// Receives a request's events, in order, from the engine thread. Must never
// block: implementations queue the event and wake their connection.
class EventSink {
 public:
  virtual ~EventSink() = default;
  // Before any token of a chat request (never for text or token prompts).
  virtual void on_start(const OutputSyntax& syntax) { (void)syntax; }
  virtual void on_token(const TokenEvent& ev) = 0;
  virtual void on_finish(const FinishEvent& ev) = 0;  // last event on success
  // Last event on failure; the message is one line and never echoes the
  // whole request.
  virtual void on_error(const Status& err) = 0;
  // Requests with `handoff` only: the prompt's K/V rows, in order from
  // position 0 (kv::KvRun; geometry and prompt on the first run only).
  virtual void on_kv(kv::KvRun run) { (void)run; }
};

struct ModelInfo {
  std::string id;
  int32_t n_ctx = 0;
  int32_t n_vocab = 0;
  int64_t created = 0;  // unix seconds when loaded
  std::string parent = {};  // a LoRA adapter's base model id; empty for a model
  std::string root = {};    // a LoRA adapter's file; empty for a model
  // What the model is and can do (zero / empty where unknown, e.g. a remote worker's).
  int32_t n_ctx_train = 0;
  int32_t n_embd = 0;
  int64_t n_params = 0;
  std::string arch = {};
  bool generates = true;      // serves completions (false: --embeddings, or no LM head)
  std::string pooling = {};   // embeddings' pooling ("mean", "cls", "last", "rank"); empty: none
  std::string chat_template = {};  // the Jinja source chat requests render with
};

// Embeddings (POST /v1/embeddings) and reranking (POST /v1/rerank): every
// input pooled into one vector, or with `query` set, each input a document
// scored against the query by the model's classification head.
using EmbedInput = std::variant<std::string, std::vector<Token>>;
struct EmbedRequest {
  std::string model;  // empty: the only model served
  std::vector<EmbedInput> inputs;
  std::optional<std::string> query;  // rerank
  bool normalize = true;             // embeddings: scaled to unit length (L2)
};

struct EmbedResult {
  std::vector<std::vector<float>> vectors;  // per input: the embedding, or (rerank) the scores
  int32_t prompt_tokens = 0;
};

// Receives an embedding request's answer: exactly one call, on any thread;
// must never block.
class EmbedSink {
 public:
  virtual ~EmbedSink() = default;
  virtual void on_done(EmbedResult result) = 0;
  virtual void on_error(const Status& err) = 0;
};

enum class HealthState { Loading, Ready, Draining };

struct Health {
  HealthState state = HealthState::Loading;
  int32_t running = 0;
  int32_t waiting = 0;
};

// Counters and histograms for /metrics, sampled by the front-end.
using Histogram = cairn::Histogram;

struct BackendStats {
  uint64_t prompt_tokens_total = 0;
  uint64_t generated_tokens_total = 0;
  int32_t running = 0;
  int32_t waiting = 0;
  int32_t kv_blocks_used = 0;
  int32_t kv_blocks_total = 0;
  uint64_t prefix_cache_queries = 0;  // prompt tokens looked up
  uint64_t prefix_cache_hits = 0;     // prompt tokens found cached
  uint64_t preemptions = 0;
  uint64_t spec_draft_tokens_total = 0;     // speculative draft tokens verified
  uint64_t spec_accepted_tokens_total = 0;  // of those, accepted
  uint64_t requests_cancelled = 0;  // ended by a cancel (a client gone, a stop button)
  uint64_t embedding_inputs_total = 0;
  uint64_t embedding_tokens_total = 0;
  Histogram time_to_first_token_s;
  Histogram inter_token_latency_s;
  Histogram queue_time_s;
  Histogram e2e_latency_s;
};

class Backend {
 public:
  virtual ~Backend() = default;
  // Validates synchronously (bad input never reaches the engine) and queues.
  // Errors: InvalidArgument (bad input), NotFound (unknown model),
  // Unavailable (queue full or draining).
  virtual Result<RequestId> submit(GenerateRequest req, std::shared_ptr<EventSink> sink) = 0;
  virtual void cancel(RequestId id) = 0;  // idempotent, any thread (embeddings too)
  // Validates and queues an embedding or rerank request (errors as submit).
  virtual Result<RequestId> embed(EmbedRequest req, std::shared_ptr<EmbedSink> sink) {
    (void)req;
    (void)sink;
    return Status::invalid_argument("this server does not make embeddings");
  }
  virtual std::vector<ModelInfo> models() const = 0;
  virtual Health health() const = 0;
  virtual BackendStats stats() const = 0;

  // /tokenize and /detokenize. parse_special: special-token text in `text`
  // ("<|im_start|>") becomes that token, as llama.cpp's server does by
  // default; false tokenizes it as plain text.
  virtual Result<std::vector<Token>> tokenize(const std::string& model, const std::string& text,
                                              bool add_special,
                                              bool parse_special = true) const = 0;
  // Each token's bytes as the text holds them (special tokens rendered), for
  // /tokenize's with_pieces; a piece may be part of a UTF-8 character.
  virtual Result<std::vector<std::string>> token_pieces(const std::string& model,
                                                        const std::vector<Token>& tokens) const {
    (void)model;
    (void)tokens;
    return Status::invalid_argument("this server cannot give token pieces");
  }
  virtual Result<std::string> detokenize(const std::string& model,
                                         const std::vector<Token>& tokens) const = 0;
  // /apply-template: the prompt a chat request renders to (its messages,
  // tools, tool_choice and chat_template_kwargs), without generating.
  virtual Result<std::string> apply_template(const GenerateRequest& req) const {
    (void)req;
    return Status::invalid_argument("this server cannot render chat templates");
  }
  // The K/V geometry of `model`'s cache (empty: the only model), for
  // checking a handoff's rows before they are buffered; Unavailable where no
  // local cache exists.
  virtual Result<kv::KvGeometry> kv_geometry(const std::string& model) const {
    (void)model;
    return Status::unavailable("this server holds no K/V cache");
  }
  // Stops accepting (submit gives Unavailable); running requests continue.
  virtual void start_draining() = 0;

  // Extra Prometheus text lines for /metrics (e.g. the controller's
  // per-worker gauges), each ending in '\n'; empty for most backends.
  virtual std::string extra_metrics() const { return {}; }
};

}  // namespace cairn::serving
