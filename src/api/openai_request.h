// api/openai_request.h — OpenAI request bodies to serving::GenerateRequest.
// Owns parsing and validation of /v1/completions, /v1/chat/completions,
// /tokenize and /detokenize bodies: pure functions from JSON to requests or an
// OpenAI-shaped error. Must never touch sockets or the backend, and never put
// the whole request (or long user strings) into an error message.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "serving/backend.h"

namespace cairn::api {

// An error as the client sees it: HTTP status plus OpenAI's error object.
struct ApiError {
  int status = 400;
  std::string message;
  std::string type = "invalid_request_error";
  std::string param;
  std::string code;
};

ApiError bad_request(std::string message, std::string param = {});
// Maps a backend refusal to its status: InvalidRequest 400, NotFound 404,
// Unavailable 503, Internal 500.
ApiError from_backend_error(const serving::Error& err);

enum class Endpoint { Completions, Chat };

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
  int32_t choices() const { return static_cast<int32_t>(prompts.size()) * n; }
};

// Parses a body into a JSON object: malformed JSON, invalid UTF-8 and
// non-object bodies are 400s.
std::variant<nlohmann::json, ApiError> parse_json_object(std::string_view body);

// Resolves `model` (absent: the only served model) to a served model, or 400/404.
std::variant<serving::ModelInfo, ApiError> resolve_model(
    const nlohmann::json& body, const std::vector<serving::ModelInfo>& models);

std::variant<ParsedGenerate, ApiError> parse_generate(
    Endpoint endpoint, const nlohmann::json& body,
    const std::vector<serving::ModelInfo>& models, const ParseLimits& limits = {});

struct TokenizeRequest {
  std::string model;
  std::string text;
  bool add_special = true;
};
std::variant<TokenizeRequest, ApiError> parse_tokenize(
    const nlohmann::json& body, const std::vector<serving::ModelInfo>& models);

struct DetokenizeRequest {
  std::string model;
  std::vector<serving::Token> tokens;
};
std::variant<DetokenizeRequest, ApiError> parse_detokenize(
    const nlohmann::json& body, const std::vector<serving::ModelInfo>& models);

}  // namespace cairn::api
