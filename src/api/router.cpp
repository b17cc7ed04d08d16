#include "api/router.h"

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

enum class RouteId { Completions, Chat, Models, Health, Metrics, Tokenize, Detokenize };

struct Route {
  const char* path;
  const char* method;
  RouteId id;
  bool needs_auth;
};

// The route table: one row per endpoint.
constexpr Route kRoutes[] = {
    {"/v1/completions", "POST", RouteId::Completions, true},
    {"/v1/chat/completions", "POST", RouteId::Chat, true},
    {"/v1/models", "GET", RouteId::Models, true},
    {"/health", "GET", RouteId::Health, false},
    {"/metrics", "GET", RouteId::Metrics, true},
    {"/tokenize", "POST", RouteId::Tokenize, true},
    {"/detokenize", "POST", RouteId::Detokenize, true},
};

const Route* find_route(const std::string& path) {
  for (const auto& r : kRoutes)
    if (path == r.path) return &r;
  return nullptr;
}

}  // namespace

Router::Router(serving::Backend& backend, RouterOptions options)
    : backend_(backend), opt_(std::move(options)) {}

std::string Router::route_name(const std::string& target) {
  const Route* r = find_route(path_of(target));
  return r ? r->path : "other";
}

void Router::add_cors(HttpResponse& r, const std::string& origin) const {
  if (opt_.cors_origin.empty() || origin.empty()) return;
  if (opt_.cors_origin != "*" && origin != opt_.cors_origin) return;
  r.headers.emplace_back("Access-Control-Allow-Origin", opt_.cors_origin == "*" ? "*" : origin);
  if (opt_.cors_origin != "*") r.headers.emplace_back("Vary", "Origin");
}

HttpResponse Router::error_response(const Status& status, const std::string& origin) const {
  const HttpError e = to_http_error(status);
  HttpResponse r = json_response(e.status, e.body);
  if (e.status == 503) r.headers.emplace_back("Retry-After", std::to_string(opt_.retry_after_s));
  if (e.status == 401) r.headers.emplace_back("WWW-Authenticate", "Bearer");
  add_cors(r, origin);
  return r;
}

void Router::count(const std::string& route, int status) {
  std::lock_guard<std::mutex> lock(counts_mu_);
  ++counts_[{route, status}];
}

std::variant<HttpResponse, GenerateJob> Router::handle(const HttpRequest& req) {
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

  auto finish = [&](HttpResponse r) -> std::variant<HttpResponse, GenerateJob> {
    add_cors(r, req.origin);
    return r;
  };
  auto fail = [&](const Status& e) -> std::variant<HttpResponse, GenerateJob> {
    return error_response(e, req.origin);
  };

  switch (route->id) {
    case RouteId::Health: {
      serving::Health h = backend_.health();
      const char* state = h.state == serving::HealthState::Ready      ? "ready"
                          : h.state == serving::HealthState::Loading ? "loading"
                                                                      : "draining";
      if (draining_) state = "draining";
      const bool ok = h.state == serving::HealthState::Ready && !draining_;
      HttpResponse r = json_response(
          ok ? 200 : 503, {{"status", state}, {"running", h.running}, {"waiting", h.waiting}});
      if (!ok) r.headers.emplace_back("Retry-After", std::to_string(opt_.retry_after_s));
      return finish(std::move(r));
    }
    case RouteId::Metrics: {
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
      return finish(std::move(r));
    }
    case RouteId::Models: {
      json data = json::array();
      for (const auto& m : backend_.models())
        data.push_back({{"id", m.id},
                        {"object", "model"},
                        {"created", m.created},
                        {"owned_by", "cairn"},
                        {"max_model_len", m.n_ctx}});
      return finish(json_response(200, {{"object", "list"}, {"data", std::move(data)}}));
    }
    default:
      break;
  }

  if (draining_) return fail(Status::unavailable("the server is shutting down"));
  if (backend_.health().state == serving::HealthState::Loading)
    return fail(Status::unavailable("the model is still loading"));
  auto body = parse_json_object(req.body);
  if (!body.is_ok()) return fail(body.status());
  const json& j = *body;
  const auto models = backend_.models();

  if (route->id == RouteId::Tokenize) {
    auto t = parse_tokenize(j, models);
    if (!t.is_ok()) return fail(t.status());
    const TokenizeRequest& tr = *t;
    auto res = backend_.tokenize(tr.model, tr.text, tr.add_special);
    if (!res.is_ok()) return fail(res.status());
    const auto& toks = *res;
    int32_t ctx = 0;
    for (const auto& m : models)
      if (m.id == tr.model) ctx = m.n_ctx;
    return finish(json_response(
        200, {{"tokens", toks}, {"count", toks.size()}, {"max_model_len", ctx}}));
  }
  if (route->id == RouteId::Detokenize) {
    auto d = parse_detokenize(j, models);
    if (!d.is_ok()) return fail(d.status());
    auto res = backend_.detokenize(d->model, d->tokens);
    if (!res.is_ok()) return fail(res.status());
    return finish(json_response(200, {{"prompt", *res}}));
  }

  auto parsed = parse_generate(route->id == RouteId::Chat ? Endpoint::Chat : Endpoint::Completions,
                               j, models, opt_.limits);
  if (!parsed.is_ok()) return fail(parsed.status());
  return GenerateJob{route->path, std::move(parsed).value()};
}

}  // namespace cairn::api
