// api/http_routes.cpp — the route table and the endpoints that answer at once.
#include "api/http_routes.h"

#include <chrono>

namespace cairn::api {

using nlohmann::json;

bool secret_equal(const std::string& a, const std::string& b) {
  // Compares over the longer length so neither length nor content leaks via timing.
  const size_t n = std::max(a.size(), b.size());
  volatile unsigned char diff = a.size() != b.size() ? 1 : 0;
  for (size_t i = 0; i < n; ++i) {
    unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff = diff | static_cast<unsigned char>(x ^ y);
  }
  return diff == 0;
}

namespace {

std::string path_of(const std::string& target) {
  auto q = target.find('?');
  return q == std::string::npos ? target : target.substr(0, q);
}

HttpResponse json_response(int status, const json& body) {
  HttpResponse r;
  r.status = status;
  r.body = dump_json(body);
  return r;
}

}  // namespace

// The route table: one row per endpoint.
const HttpRoutes::Route HttpRoutes::kRoutes[] = {
    {"POST", "/v1/completions", true, &HttpRoutes::completions},
    {"POST", "/v1/chat/completions", true, &HttpRoutes::chat_completions},
    {"GET", "/v1/models", true, &HttpRoutes::list_models},
    {"GET", "/health", false, &HttpRoutes::health},
    {"GET", "/metrics", true, &HttpRoutes::metrics},
    {"POST", "/tokenize", true, &HttpRoutes::tokenize},
    {"POST", "/detokenize", true, &HttpRoutes::detokenize},
};

const HttpRoutes::Route* HttpRoutes::find_route(const std::string& path) {
  for (const auto& r : kRoutes)
    if (path == r.path) return &r;
  return nullptr;
}

HttpRoutes::HttpRoutes(serving::Backend& backend, HttpRoutesOptions options)
    : backend_(backend), opt_(std::move(options)) {}

std::string HttpRoutes::route_name(const std::string& target) {
  const Route* r = find_route(path_of(target));
  return r ? r->path : "other";
}

void HttpRoutes::add_cors(HttpResponse& r, const std::string& origin) const {
  if (opt_.cors_origin.empty() || origin.empty()) return;
  if (opt_.cors_origin != "*" && origin != opt_.cors_origin) return;
  r.headers.emplace_back("Access-Control-Allow-Origin", opt_.cors_origin == "*" ? "*" : origin);
  if (opt_.cors_origin != "*") r.headers.emplace_back("Vary", "Origin");
}

HttpResponse HttpRoutes::error_response(const Status& status, const std::string& origin) const {
  const HttpError e = to_http_error(status);
  HttpResponse r = json_response(e.status, e.body);
  if (e.status == 503) r.headers.emplace_back("Retry-After", std::to_string(opt_.retry_after_s));
  if (e.status == 401) r.headers.emplace_back("WWW-Authenticate", "Bearer");
  add_cors(r, origin);
  return r;
}

void HttpRoutes::count(const std::string& route, int status) {
  std::lock_guard<std::mutex> lock(counts_mu_);
  ++counts_[{route, status}];
}

HttpRoutes::Outcome HttpRoutes::handle(const HttpRequest& req) {
  const std::string path = path_of(req.target);
  const Route* route = find_route(path);
  if (!route)
    return error_response(Status::error(StatusCode::NoRoute, "no route for this path"), req.origin);

  // CORS preflight: answered before authentication, as browsers send no credentials.
  if (req.method == "OPTIONS" && !opt_.cors_origin.empty()) {
    HttpResponse r;
    r.status = 204;
    r.content_type.clear();
    add_cors(r, req.origin);
    r.headers.emplace_back("Access-Control-Allow-Methods", std::string(route->method) + ", OPTIONS");
    r.headers.emplace_back("Access-Control-Allow-Headers", "Authorization, Content-Type");
    r.headers.emplace_back("Access-Control-Max-Age", "600");
    return r;
  }
  if (req.method != route->method) {
    HttpResponse r = error_response(
        Status::error(StatusCode::MethodNotAllowed,
                      "method " + req.method.substr(0, 16) + " is not allowed on " + path),
        req.origin);
    r.headers.emplace_back("Allow", route->method);
    return r;
  }
  if (route->needs_auth && !opt_.api_key.empty()) {
    static const std::string kBearer = "Bearer ";
    const bool has_bearer = req.authorization.rfind(kBearer, 0) == 0;
    const std::string given = has_bearer ? req.authorization.substr(kBearer.size()) : std::string();
    if (!has_bearer || !secret_equal(given, opt_.api_key))
      return error_response(
          Status::error(StatusCode::Unauthenticated, "missing or invalid API key"), req.origin);
  }

  Result<Outcome> outcome = (this->*route->handler)(req, route->path);
  if (!outcome.is_ok()) return error_response(outcome.status(), req.origin);
  if (auto* r = std::get_if<HttpResponse>(&*outcome)) add_cors(*r, req.origin);
  return std::move(outcome).value();
}

Result<HttpRoutes::Outcome> HttpRoutes::health(const HttpRequest&, const char*) {
  serving::Health h = backend_.health();
  const char* state = h.state == serving::HealthState::Ready      ? "ready"
                      : h.state == serving::HealthState::Loading ? "loading"
                                                                  : "draining";
  if (draining_) state = "draining";
  const bool ok = h.state == serving::HealthState::Ready && !draining_;
  HttpResponse r = json_response(
      ok ? 200 : 503, {{"status", state}, {"running", h.running}, {"waiting", h.waiting}});
  if (!ok) r.headers.emplace_back("Retry-After", std::to_string(opt_.retry_after_s));
  return Outcome(std::move(r));
}

Result<HttpRoutes::Outcome> HttpRoutes::metrics(const HttpRequest&, const char*) {
  RequestCounts counts;
  {
    std::lock_guard<std::mutex> lock(counts_mu_);
    counts = counts_;
  }
  auto models = backend_.models();
  HttpResponse r;
  r.content_type = "text/plain; version=0.0.4; charset=utf-8";
  r.body = metrics_text(backend_.stats(), counts, models.empty() ? "" : models.front().id);
  r.body += backend_.extra_metrics();
  return Outcome(std::move(r));
}

Result<HttpRoutes::Outcome> HttpRoutes::list_models(const HttpRequest&, const char*) {
  json data = json::array();
  for (const auto& m : backend_.models())
    data.push_back({{"id", m.id},
                    {"object", "model"},
                    {"created", m.created},
                    {"owned_by", "cairn"},
                    {"max_model_len", m.n_ctx}});
  return Outcome(json_response(200, {{"object", "list"}, {"data", std::move(data)}}));
}

Result<json> HttpRoutes::model_request_body(const HttpRequest& req) const {
  if (draining_) return Status::unavailable("the server is shutting down");
  if (backend_.health().state == serving::HealthState::Loading)
    return Status::unavailable("the model is still loading");
  return parse_json_object(req.body);
}

Result<HttpRoutes::Outcome> HttpRoutes::tokenize(const HttpRequest& req, const char*) {
  CAIRN_ASSIGN_OR_RETURN(const json body, model_request_body(req));
  const auto models = backend_.models();
  CAIRN_ASSIGN_OR_RETURN(const TokenizeRequest tr, parse_tokenize(body, models));
  CAIRN_ASSIGN_OR_RETURN(const auto toks, backend_.tokenize(tr.model, tr.text, tr.add_special));
  int32_t ctx = 0;
  for (const auto& m : models)
    if (m.id == tr.model) ctx = m.n_ctx;
  return Outcome(
      json_response(200, {{"tokens", toks}, {"count", toks.size()}, {"max_model_len", ctx}}));
}

Result<HttpRoutes::Outcome> HttpRoutes::detokenize(const HttpRequest& req, const char*) {
  CAIRN_ASSIGN_OR_RETURN(const json body, model_request_body(req));
  CAIRN_ASSIGN_OR_RETURN(const DetokenizeRequest dr, parse_detokenize(body, backend_.models()));
  CAIRN_ASSIGN_OR_RETURN(std::string text, backend_.detokenize(dr.model, dr.tokens));
  return Outcome(json_response(200, {{"prompt", std::move(text)}}));
}

Result<HttpRoutes::Outcome> HttpRoutes::completions(const HttpRequest& req, const char* path) {
  return generate(Endpoint::Completions, req, path);
}

Result<HttpRoutes::Outcome> HttpRoutes::chat_completions(const HttpRequest& req,
                                                         const char* path) {
  return generate(Endpoint::Chat, req, path);
}

Result<HttpRoutes::Outcome> HttpRoutes::generate(Endpoint endpoint, const HttpRequest& req,
                                                 const char* path) {
  CAIRN_ASSIGN_OR_RETURN(const json body, model_request_body(req));
  CAIRN_ASSIGN_OR_RETURN(ParsedGenerate parsed,
                         parse_generate(endpoint, body, backend_.models(), opt_.limits));
  return Outcome(GenerateJob{path, std::move(parsed)});
}

}  // namespace cairn::api
