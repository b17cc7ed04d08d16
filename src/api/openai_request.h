// api/openai_request.h — OpenAI request bodies to serving::GenerateRequest.
// Owns parsing and validation of /v1/completions, /v1/chat/completions,
// /tokenize and /detokenize bodies: pure functions from JSON to requests or a
// Status naming the offending field in param (InvalidArgument, or NotFound for
// an unknown model); api/openai_response.h turns it into the client's error.
// Must never touch sockets or the backend, and never put the whole request (or
// long user strings) into an error message.
#pragma once

#include <cstdint>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "serving/backend.h"

namespace cairn::api {

enum class Endpoint { Completions, Chat };

// Request bodies keep the client's key order: tools, message fields and schemas
// reach chat templates (tojson) and the grammar compiler as the client wrote them.
using RequestJson = nlohmann::ordered_json;

struct ParseLimits {
  int32_t max_n = 16;            // choices per prompt
  int32_t max_choices = 128;     // prompts x n
  int32_t max_stop = 16;
  size_t max_stop_bytes = 256;
  int32_t max_top_logprobs = 20;
  size_t max_logit_bias = 1024;
};

// A validated generation request: one GenerateRequest per prompt; each is
// submitted `n` times. Choice index = prompt_index * n + j.
struct ParsedGenerate {
  Endpoint endpoint = Endpoint::Completions;
  std::string model;  // the served model's id, for responses
  std::vector<serving::GenerateRequest> prompts;
  int32_t n = 1;
  bool stream = false;
  bool include_usage = false;
  bool logprobs = false;  // top_logprobs of the requests is >= 0
  // Completions' echo: each choice's text starts with its prompt's. Token
  // prompts' text is filled in by whoever can detokenize (http_routes).
  bool echo = false;
  std::vector<std::string> echo_text;  // per prompt, once filled
  int32_t choices() const { return static_cast<int32_t>(prompts.size()) * n; }
};

// Nesting beyond this is refused while parsing: copying or printing a JSON
// value recurses, so no deeper value may reach the code after the parser.
inline constexpr int kMaxJsonDepth = 256;

// Parses a body into a JSON object: malformed JSON, invalid UTF-8, nesting
// deeper than kMaxJsonDepth and non-object bodies are InvalidArgument.
// RequestJson keeps the keys in body order (servables, whose inputs are
// looked up by name, take nlohmann::json).
template <typename Json = RequestJson>
Result<Json> parse_json_object(std::string_view body) {
  bool too_deep = false;
  // The parser itself does not recurse; the callback stops keeping values
  // past the limit, so nothing that deep is ever built.
  typename Json::parser_callback_t depth_check = [&too_deep](int depth, typename Json::parse_event_t,
                                                             Json&) {
    if (depth > kMaxJsonDepth) too_deep = true;
    return !too_deep;
  };
  // The parser validates UTF-8 inside strings, so invalid bytes fail here.
  Json j = Json::parse(body.begin(), body.end(), depth_check, /*allow_exceptions=*/false);
  if (too_deep)
    return Status::invalid_argument("the request body nests deeper than " +
                                    std::to_string(kMaxJsonDepth) + " levels");
  if (j.is_discarded())
    return Status::invalid_argument("request body is not valid JSON (or not valid UTF-8)");
  if (!j.is_object()) return Status::invalid_argument("request body must be a JSON object");
  return j;
}

// Resolves `model` (absent: the only served model) to a served model, or
// InvalidArgument / NotFound.
Result<serving::ModelInfo> resolve_model(const RequestJson& body,
                                         const std::vector<serving::ModelInfo>& models);

Result<ParsedGenerate> parse_generate(Endpoint endpoint, const RequestJson& body,
                                      const std::vector<serving::ModelInfo>& models,
                                      const ParseLimits& limits = {});

struct TokenizeRequest {
  std::string model;
  std::string text;
  bool add_special = true;
  // As llama.cpp's server: special-token text ("<|im_start|>") is that token
  // unless parse_special is false (Hugging Face's encode also matches it).
  bool parse_special = true;
  bool with_pieces = false;  // tokens as {"id", "piece"} objects
};
Result<TokenizeRequest> parse_tokenize(const RequestJson& body,
                                       const std::vector<serving::ModelInfo>& models);

struct DetokenizeRequest {
  std::string model;
  std::vector<serving::Token> tokens;
};
Result<DetokenizeRequest> parse_detokenize(const RequestJson& body,
                                           const std::vector<serving::ModelInfo>& models);

// POST /v1/embeddings (OpenAI's shape): `input` as a string, a list of
// strings, a list of token ids or a list of such lists; encoding_format
// "float" or "base64"; `dimensions` only as the model's own width.
struct EmbeddingsRequest {
  std::string model;
  serving::EmbedRequest request;
  bool base64 = false;
};
inline constexpr size_t kMaxEmbeddingInputs = 2048;  // OpenAI's limit per request
Result<EmbeddingsRequest> parse_embeddings(const RequestJson& body,
                                           const std::vector<serving::ModelInfo>& models);

// POST /v1/rerank (the shape llama.cpp's server and Jina take): a query,
// documents (strings or {"text": ...}), top_n and return_documents.
struct RerankRequest {
  std::string model;
  serving::EmbedRequest request;  // query set, one input per document
  std::vector<std::string> documents;
  std::optional<int64_t> top_n;
  bool return_documents = true;
};
Result<RerankRequest> parse_rerank(const RequestJson& body,
                                   const std::vector<serving::ModelInfo>& models);

}  // namespace cairn::api
