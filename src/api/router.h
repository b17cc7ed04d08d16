// api/router.h — routes, authentication, CORS and the non-streaming endpoints.
// Owns the route table (path -> methods -> handler), the API key check, CORS
// headers, request counters for /metrics, and every endpoint that answers at
// once (/health, /metrics, /v1/models, /tokenize, /detokenize). Generation
// requests come back validated, for the HTTP server to run. Knows nothing of
// sockets or Beast, so all of this is testable without a network.
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

struct RouterOptions {
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

class Router {
 public:
  Router(serving::Backend& backend, RouterOptions options);

  std::variant<HttpResponse, GenerateJob> handle(const HttpRequest& req);

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
  serving::Backend& backend_;
  RouterOptions opt_;
  std::atomic<bool> draining_{false};
  std::mutex counts_mu_;
  RequestCounts counts_;
};

// Constant-time comparison of secrets: the time taken does not depend on
// where the first differing byte is.
bool secret_equal(const std::string& a, const std::string& b);

}  // namespace cairn::api
