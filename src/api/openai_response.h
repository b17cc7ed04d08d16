// api/openai_response.h — OpenAI response bodies, SSE framing and /metrics text.
// Owns the exact JSON shapes clients parse: completion and chat responses,
// streaming chunks, errors (to_http_error: the one mapping from Status to an
// HTTP status and error body), usage, both logprobs shapes, and the Prometheus
// exposition of BackendStats. Pure functions and plain state: never touches
// sockets or the backend.
#pragma once

#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "api/openai_request.h"
#include "chat/tool_calls.h"
#include "core/status.h"
#include "serving/backend.h"

namespace cairn::api {

// JSON text; invalid UTF-8 (a token's partial bytes) is replaced, never thrown on.
std::string dump_json(const nlohmann::json& j);

// An error as the client sees it: the HTTP status and OpenAI's error body,
// {"error": {"message", "type", "param", "code"}}.
struct HttpError {
  int status = 500;
  nlohmann::json body;
};

// The one place a Status becomes an HTTP error (type; code; param is the
// Status's, null when empty):
//   InvalidArgument   400 invalid_request_error
//   NotFound          404 invalid_request_error  model_not_found
//   Unavailable       503 server_error           service_unavailable
//   Internal          500 server_error
//   Unauthenticated   401 authentication_error   invalid_api_key
//   NoRoute           404 not_found_error        not_found
//   MethodNotAllowed  405 invalid_request_error  method_not_allowed
//   BodyTooLarge      413 invalid_request_error  request_too_large
//   HeadersTooLarge   431 invalid_request_error  request_header_fields_too_large
//   MalformedRequest  400 invalid_request_error  bad_request
//   DeadlineExceeded  504 server_error           timeout
//   Cancelled         499 invalid_request_error  cancelled (never sent: the client is gone)
HttpError to_http_error(const Status& status);

// One Server-Sent Event carrying `j`, and the stream's terminator.
std::string sse_data(const nlohmann::json& j);
inline constexpr const char* kSseDone = "data: [DONE]\n\n";

// Identity of one response: shared by all of its chunks.
struct ResponseMeta {
  Endpoint endpoint = Endpoint::Completions;
  std::string id;  // "cmpl-..." / "chatcmpl-..."
  int64_t created = 0;
  std::string model;
  bool logprobs = false;
};

// A fresh response id with the endpoint's prefix.
std::string new_response_id(Endpoint endpoint);

// Everything one choice produced, gathered for a non-streaming response.
struct ChoiceResult {
  std::string text;
  // Chat output read for reasoning and tool calls (serving::OutputSyntax);
  // unset: `text` is the content as it is.
  std::optional<chat::ParsedOutput> parsed;
  std::vector<serving::TokenEvent> tokens;  // kept only when logprobs were asked for
  std::string finish_reason;                // empty while running
  serving::Usage usage;
};

nlohmann::json usage_json(int64_t prompt_tokens, int64_t completion_tokens, int64_t cached = 0);

// Usage over all choices: completion tokens summed; prompt tokens counted once
// per prompt (choices index = prompt * n + j), as OpenAI counts n > 1.
nlohmann::json total_usage(const std::vector<ChoiceResult>& choices, int32_t n);

// The whole non-streaming response.
nlohmann::json full_response(const ResponseMeta& meta, const std::vector<ChoiceResult>& choices,
                             int32_t n);

// Streaming: the chat role chunk that opens each choice; one token's chunk
// (text may be empty when logprobs are carried); the finishing chunk; the
// usage-only chunk (choices: []) for stream_options.include_usage.
nlohmann::json role_chunk(const ResponseMeta& meta, int32_t index);
nlohmann::json token_chunk(const ResponseMeta& meta, int32_t index,
                           const serving::TokenEvent& ev, int64_t text_offset);
// Streaming chat: one parsed piece of output (content, reasoning or a tool
// call's name or arguments) as a chunk; logprobs (if asked) of the token
// that released it, or null.
nlohmann::json delta_chunk(const ResponseMeta& meta, int32_t index, const chat::OutputDelta& d,
                           const serving::TokenEvent* logprobs_of);
nlohmann::json finish_chunk(const ResponseMeta& meta, int32_t index, const std::string& text,
                            const std::string& finish_reason);
nlohmann::json usage_chunk(const ResponseMeta& meta, const nlohmann::json& usage);

// POST /v1/embeddings' answer: one entry per input, as floats or base64 of
// little-endian float32 (what OpenAI's SDKs decode).
nlohmann::json embeddings_response(const std::string& model, const serving::EmbedResult& result,
                                   bool base64);
// POST /v1/rerank's answer: documents by relevance, best first, top_n of them.
nlohmann::json rerank_response(const RerankRequest& request, const serving::EmbedResult& result);

// Request counts kept by the HTTP layer, keyed by (route, status).
using RequestCounts = std::map<std::pair<std::string, int>, uint64_t>;

// Prometheus text format (version 0.0.4).
std::string metrics_text(const serving::BackendStats& stats, const RequestCounts& requests,
                         const std::string& model);

}  // namespace cairn::api
