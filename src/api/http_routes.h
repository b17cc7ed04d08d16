// api/http_routes.h — the HTTP endpoints: route table, authentication, CORS.
// Owns the route table (one row per endpoint: method, path or path prefix,
// whether it needs the API key, and its handler), the API key check, CORS
// headers, request counters for /metrics, and every endpoint that answers at
// once (/health, /metrics, /v1/models, /props, /tokenize, /detokenize,
// /apply-template, the web UI's files at / and /ui/). Embeddings and rerank
// come back as deferred jobs. Generation
// requests and servable method calls (MindSpore Serving's POST
// /model/<servable>[/version/<n>]:<method>) come back validated, for the HTTP
// server to run. Errors become responses through to_http_error only (the
// /model routes answer {"error_msg": ...} bodies, as MindSpore does). Knows
// nothing of sockets or Beast, so all of this is testable without a network.
#pragma once

#include <atomic>
#include <mutex>
#include <functional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "api/openai_request.h"
#include "api/openai_response.h"
#include "api/servable_json.h"
#include "serving/backend.h"
#include "servable/runtime.h"

namespace cairn::api {

struct HttpRequest {
  std::string method;         // "GET", "POST", ...
  std::string target;         // path plus optional query
  std::string authorization;  // the Authorization header, or empty
  std::string origin;         // the Origin header, or empty
  std::string if_none_match;  // the If-None-Match header (web UI assets), or empty
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
  ServableJsonLimits servable_limits;
  // Why a part the server depends on cannot serve now ("" when it can): a
  // distributed servable missing agents. Non-empty makes /health a 503
  // with status "unavailable" and this reason. Called from I/O threads.
  std::function<std::string()> unavailable;
  // More Prometheus text for /metrics (a distributed worker's agent
  // counters); called from I/O threads.
  std::function<std::string()> extra_metrics;
};

// A generation request that passed validation, with the route it came from.
struct GenerateJob {
  std::string route;
  ParsedGenerate request;
};

// A servable method call that passed validation, with the route it came from
// ("/model"); the HTTP server runs it through ServableRuntime::predict.
struct PredictJob {
  std::string route;
  servable::PredictCall call;
};

// A request the backend answers later in one piece (embeddings, rerank).
// `start` submits it and returns the backend's request id (cancelled if
// the client goes away); the backend's answer comes through `reply`, from
// any thread, once, as a function the HTTP server calls on its own thread
// to make the response (so large bodies are not formatted on the engine's).
using DeferredReply = std::function<void(std::function<HttpResponse()> make)>;
struct DeferredJob {
  std::string route;
  std::function<Result<serving::RequestId>(DeferredReply reply)> start;
};

class HttpRoutes {
 public:
  // What a request comes to: a response to send now, a generation or a
  // servable method call to run, or a request answered later.
  using Outcome = std::variant<HttpResponse, GenerateJob, PredictJob, DeferredJob>;

  // `servables` may be null: then /model/... answers 404 "no servables are served".
  HttpRoutes(serving::Backend& backend, HttpRoutesOptions options,
             servable::ServableRuntime* servables = nullptr);

  Outcome handle(const HttpRequest& req);

  // An OpenAI-shaped error response (with CORS and Retry-After as needed).
  HttpResponse error_response(const Status& e, const std::string& origin) const;
  // The same for the /model routes: MindSpore Serving's {"error_msg": "..."}
  // body with to_http_error's status and headers.
  HttpResponse servable_error_response(const Status& e, const std::string& origin) const;
  // The error response in the shape the route of `target` uses.
  HttpResponse error_response_for(const std::string& target, const Status& e,
                                  const std::string& origin) const;
  // Adds CORS headers when the request's origin is allowed.
  void add_cors(HttpResponse& r, const std::string& origin) const;
  // Records a finished request for /metrics.
  void count(const std::string& route, int status);
  // New generation requests get 503 from now on.
  void set_draining() { draining_ = true; }
  bool draining() const { return draining_; }
  // The route name used for counting: the route's path when known ("/model"
  // for every servable call), else "other".
  static std::string route_name(const std::string& target);
  // True for a target under /model/, whose errors are {"error_msg": ...}.
  static bool is_servable_target(const std::string& target);

 private:
  // One row of the route table. A prefix row matches `path` itself and every
  // path below `path` + "/". A handler's response gets CORS headers from
  // handle(); its error becomes an error response there.
  struct Route {
    const char* method;
    const char* path;
    bool prefix;
    bool needs_auth;
    bool servable_errors;  // errors as {"error_msg": ...}
    Result<Outcome> (HttpRoutes::*handler)(const HttpRequest& req, const char* path);
  };
  static const Route kRoutes[];
  static const Route* find_route(const std::string& path);

  Result<Outcome> health(const HttpRequest& req, const char* path);
  Result<Outcome> metrics(const HttpRequest& req, const char* path);
  Result<Outcome> list_models(const HttpRequest& req, const char* path);
  Result<Outcome> tokenize(const HttpRequest& req, const char* path);
  Result<Outcome> detokenize(const HttpRequest& req, const char* path);
  Result<Outcome> apply_template(const HttpRequest& req, const char* path);
  Result<Outcome> props(const HttpRequest& req, const char* path);
  Result<Outcome> embeddings(const HttpRequest& req, const char* path);
  Result<Outcome> rerank(const HttpRequest& req, const char* path);
  Result<Outcome> completions(const HttpRequest& req, const char* path);
  Result<Outcome> chat_completions(const HttpRequest& req, const char* path);
  Result<Outcome> predict(const HttpRequest& req, const char* path);
  // The browser chat page's files (webui/): "/" and "/ui/<file>".
  Result<Outcome> webui(const HttpRequest& req, const char* path);
  // The JSON body of a request that needs the model: 503 while draining or
  // loading, 400 when the body is not a JSON object.
  Result<RequestJson> model_request_body(const HttpRequest& req) const;
  Result<Outcome> generate(Endpoint endpoint, const HttpRequest& req, const char* path);
  template <typename Parsed>
  Outcome deferred_embed(const char* path, const std::string& origin,
                         std::shared_ptr<Parsed> parsed,
                         nlohmann::json (*to_json)(const Parsed&, const serving::EmbedResult&));

  serving::Backend& backend_;
  HttpRoutesOptions opt_;
  servable::ServableRuntime* servables_;
  std::atomic<bool> draining_{false};
  std::mutex counts_mu_;
  RequestCounts counts_;
};

// Constant-time comparison of secrets: the time taken does not depend on
// where the first differing byte is.
bool secret_equal(const std::string& a, const std::string& b);

}  // namespace cairn::api
