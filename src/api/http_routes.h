// api/http_routes.h — the HTTP endpoints: route table, authentication, CORS.
// Owns the route table (one row per endpoint: method, path, whether it needs
// the API key, and its handler), the API key check, CORS headers, request
// counters for /metrics, and every endpoint that answers at once (/health,
// /metrics, /v1/models, /tokenize, /detokenize). Generation requests come back
// validated, for the HTTP server to run. Errors become responses through
// to_http_error only. Knows nothing of sockets or Beast, so all of this is
// testable without a network.
#pragma once

#include <atomic>
#include <mutex>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "api/openai_request.h"
#include "api/openai_response.h"
#include "serving/backend.h"

namespace cairn::api {

struct HttpRequest {
  std::string method;         // "GET", "POST", ...
  std::string target;         // path plus optional query
  std::string authorization;  // the Authorization header, or empty
  std::string origin;         // the Origin header, or empty
  std::string body;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
};

struct HttpRoutesOptions {
  std::string api_key;      // empty: no authentication
  std::string cors_origin;  // empty: CORS off; "*" allowed
  ParseLimits limits;
  int retry_after_s = 1;    // Retry-After on 503
};

// A generation request that passed validation, with the route it came from.
struct GenerateJob {
  std::string route;
  ParsedGenerate request;
};

class HttpRoutes {
 public:
  // What a request comes to: a response to send now, or a generation to run.
  using Outcome = std::variant<HttpResponse, GenerateJob>;

  HttpRoutes(serving::Backend& backend, HttpRoutesOptions options);

  Outcome handle(const HttpRequest& req);

  // An OpenAI-shaped error response (with CORS and Retry-After as needed).
  HttpResponse error_response(const Status& e, const std::string& origin) const;
  // Adds CORS headers when the request's origin is allowed.
  void add_cors(HttpResponse& r, const std::string& origin) const;
  // Records a finished request for /metrics.
  void count(const std::string& route, int status);
  // New generation requests get 503 from now on.
  void set_draining() { draining_ = true; }
  bool draining() const { return draining_; }
  // The route name used for counting: the path when known, else "other".
  static std::string route_name(const std::string& target);

 private:
  // One row of the route table. A handler's response gets CORS headers from
  // handle(); its error becomes an error response there.
  struct Route {
    const char* method;
    const char* path;
    bool needs_auth;
    Result<Outcome> (HttpRoutes::*handler)(const HttpRequest& req, const char* path);
  };
  static const Route kRoutes[];
  static const Route* find_route(const std::string& path);

  Result<Outcome> health(const HttpRequest& req, const char* path);
  Result<Outcome> metrics(const HttpRequest& req, const char* path);
  Result<Outcome> list_models(const HttpRequest& req, const char* path);
  Result<Outcome> tokenize(const HttpRequest& req, const char* path);
  Result<Outcome> detokenize(const HttpRequest& req, const char* path);
  Result<Outcome> completions(const HttpRequest& req, const char* path);
  Result<Outcome> chat_completions(const HttpRequest& req, const char* path);
  // The JSON body of a request that needs the model: 503 while draining or
  // loading, 400 when the body is not a JSON object.
  Result<nlohmann::json> model_request_body(const HttpRequest& req) const;
  Result<Outcome> generate(Endpoint endpoint, const HttpRequest& req, const char* path);

  serving::Backend& backend_;
  HttpRoutesOptions opt_;
  std::atomic<bool> draining_{false};
  std::mutex counts_mu_;
  RequestCounts counts_;
};

// Constant-time comparison of secrets: the time taken does not depend on
// where the first differing byte is.
bool secret_equal(const std::string& a, const std::string& b);

}  // namespace cairn::api
