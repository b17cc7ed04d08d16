// api/http_routes.cpp — the route table and the endpoints that answer at once.
#include "api/http_routes.h"

#include <chrono>
#include <cstring>

#include "grammar/text.h"
#include "webui/assets.h"

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

// The route table: one row per endpoint (method, path, prefix, auth, error shape, handler).
const HttpRoutes::Route HttpRoutes::kRoutes[] = {
    {"POST", "/v1/completions", false, true, false, &HttpRoutes::completions},
    {"POST", "/v1/chat/completions", false, true, false, &HttpRoutes::chat_completions},
    {"GET", "/v1/models", false, true, false, &HttpRoutes::list_models},
    {"GET", "/health", false, false, false, &HttpRoutes::health},
    {"GET", "/metrics", false, true, false, &HttpRoutes::metrics},
    {"POST", "/tokenize", false, true, false, &HttpRoutes::tokenize},
    {"POST", "/detokenize", false, true, false, &HttpRoutes::detokenize},
    {"POST", "/apply-template", false, true, false, &HttpRoutes::apply_template},
    {"GET", "/props", false, true, false, &HttpRoutes::props},
    {"POST", "/v1/embeddings", false, true, false, &HttpRoutes::embeddings},
    {"POST", "/embeddings", false, true, false, &HttpRoutes::embeddings},
    {"POST", "/v1/rerank", false, true, false, &HttpRoutes::rerank},
    {"POST", "/rerank", false, true, false, &HttpRoutes::rerank},
    // MindSpore Serving: /model/<servable>[/version/<n>]:<method>
    {"POST", "/model", true, true, true, &HttpRoutes::predict},
    // The browser chat page: no key needed to load it (it asks for one on 401).
    {"GET", "/", false, false, false, &HttpRoutes::webui},
    {"GET", "/ui", true, false, false, &HttpRoutes::webui},
};

const HttpRoutes::Route* HttpRoutes::find_route(const std::string& path) {
  for (const auto& r : kRoutes) {
    if (path == r.path) return &r;
    const size_t n = std::strlen(r.path);
    if (r.prefix && path.size() > n && path.compare(0, n, r.path) == 0 && path[n] == '/')
      return &r;
  }
  return nullptr;
}

HttpRoutes::HttpRoutes(serving::Backend& backend, HttpRoutesOptions options,
                       servable::ServableRuntime* servables)
    : backend_(backend), opt_(std::move(options)), servables_(servables) {}

std::string HttpRoutes::route_name(const std::string& target) {
  const Route* r = find_route(path_of(target));
  return r ? r->path : "other";
}

bool HttpRoutes::is_servable_target(const std::string& target) {
  const Route* r = find_route(path_of(target));
  return r && r->servable_errors;
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

HttpResponse HttpRoutes::servable_error_response(const Status& status,
                                                const std::string& origin) const {
  HttpResponse r = error_response(status, origin);
  r.body = dump_json(servable_error_json(status));
  return r;
}

HttpResponse HttpRoutes::error_response_for(const std::string& target, const Status& status,
                                            const std::string& origin) const {
  return is_servable_target(target) ? servable_error_response(status, origin)
                                    : error_response(status, origin);
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
  auto fail = [&](const Status& e) {
    return route->servable_errors ? servable_error_response(e, req.origin)
                                  : error_response(e, req.origin);
  };
  if (req.method != route->method) {
    HttpResponse r = fail(
        Status::error(StatusCode::MethodNotAllowed,
                      "method " + req.method.substr(0, 16) + " is not allowed on " +
                          path.substr(0, 256)));
    r.headers.emplace_back("Allow", route->method);
    return r;
  }
  if (route->needs_auth && !opt_.api_key.empty()) {
    static const std::string kBearer = "Bearer ";
    const bool has_bearer = req.authorization.rfind(kBearer, 0) == 0;
    const std::string given = has_bearer ? req.authorization.substr(kBearer.size()) : std::string();
    if (!has_bearer || !secret_equal(given, opt_.api_key))
      return fail(Status::error(StatusCode::Unauthenticated, "missing or invalid API key"));
  }

  Result<Outcome> outcome = (this->*route->handler)(req, route->path);
  if (!outcome.is_ok()) return fail(outcome.status());
  if (auto* r = std::get_if<HttpResponse>(&*outcome)) add_cors(*r, req.origin);
  return std::move(outcome).value();
}

Result<HttpRoutes::Outcome> HttpRoutes::health(const HttpRequest&, const char*) {
  serving::Health h = backend_.health();
  const char* state = h.state == serving::HealthState::Ready      ? "ready"
                      : h.state == serving::HealthState::Loading ? "loading"
                                                                  : "draining";
  if (draining_) state = "draining";
  bool ok = h.state == serving::HealthState::Ready && !draining_;
  const std::string unavailable = ok && opt_.unavailable ? opt_.unavailable() : std::string();
  if (!unavailable.empty()) {
    state = "unavailable";
    ok = false;
  }
  json body = {{"status", state}, {"running", h.running}, {"waiting", h.waiting}};
  if (!unavailable.empty()) body["reason"] = unavailable;
  if (servables_) {
    // A servable whose config failed to load is reported here; the others serve on.
    json list = json::array();
    for (const auto& s : servables_->servables()) {
      json one = {{"name", s.name}, {"versions", s.versions}};
      if (!s.load_error.empty()) one["load_error"] = s.load_error;
      list.push_back(std::move(one));
    }
    body["servables"] = std::move(list);
  }
  HttpResponse r = json_response(ok ? 200 : 503, body);
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
  if (opt_.extra_metrics) r.body += opt_.extra_metrics();
  return Outcome(std::move(r));
}

Result<HttpRoutes::Outcome> HttpRoutes::list_models(const HttpRequest&, const char*) {
  json data = json::array();
  for (const auto& m : backend_.models()) {
    json entry = {{"id", m.id},
                  {"object", "model"},
                  {"created", m.created},
                  {"owned_by", "cairn"},
                  {"max_model_len", m.n_ctx}};
    // llama.cpp's server lists the same facts under "meta".
    json meta = {{"n_ctx", m.n_ctx}, {"n_vocab", m.n_vocab}};
    if (m.n_ctx_train > 0) meta["n_ctx_train"] = m.n_ctx_train;
    if (m.n_embd > 0) meta["n_embd"] = m.n_embd;
    if (m.n_params > 0) meta["n_params"] = m.n_params;
    if (!m.arch.empty()) meta["architecture"] = m.arch;
    if (!m.pooling.empty()) meta["pooling"] = m.pooling;
    meta["generates"] = m.generates;
    entry["meta"] = std::move(meta);
    if (!m.parent.empty()) {  // a LoRA adapter, as vLLM lists them
      entry["parent"] = m.parent;
      entry["root"] = m.root;
    }
    data.push_back(std::move(entry));
  }
  return Outcome(json_response(200, {{"object", "list"}, {"data", std::move(data)}}));
}

Result<RequestJson> HttpRoutes::model_request_body(const HttpRequest& req) const {
  if (draining_) return Status::unavailable("the server is shutting down");
  if (backend_.health().state == serving::HealthState::Loading)
    return Status::unavailable("the model is still loading");
  return parse_json_object(req.body);
}

Result<HttpRoutes::Outcome> HttpRoutes::tokenize(const HttpRequest& req, const char*) {
  CAIRN_ASSIGN_OR_RETURN(const RequestJson body, model_request_body(req));
  const auto models = backend_.models();
  CAIRN_ASSIGN_OR_RETURN(const TokenizeRequest tr, parse_tokenize(body, models));
  CAIRN_ASSIGN_OR_RETURN(const auto toks,
                         backend_.tokenize(tr.model, tr.text, tr.add_special, tr.parse_special));
  int32_t ctx = 0;
  for (const auto& m : models)
    if (m.id == tr.model) ctx = m.n_ctx;
  json tokens = toks;
  if (tr.with_pieces) {  // llama.cpp's form: a piece that is not UTF-8 is its byte values
    CAIRN_ASSIGN_OR_RETURN(const auto pieces, backend_.token_pieces(tr.model, toks));
    tokens = json::array();
    for (size_t i = 0; i < toks.size() && i < pieces.size(); ++i) {
      json piece = pieces[i];
      if (!grammar::valid_utf8(pieces[i])) {
        piece = json::array();
        for (unsigned char c : pieces[i]) piece.push_back(static_cast<int>(c));
      }
      tokens.push_back({{"id", toks[i]}, {"piece", std::move(piece)}});
    }
  }
  return Outcome(json_response(
      200, {{"tokens", std::move(tokens)}, {"count", toks.size()}, {"max_model_len", ctx}}));
}

Result<HttpRoutes::Outcome> HttpRoutes::detokenize(const HttpRequest& req, const char*) {
  CAIRN_ASSIGN_OR_RETURN(const RequestJson body, model_request_body(req));
  CAIRN_ASSIGN_OR_RETURN(const DetokenizeRequest dr, parse_detokenize(body, backend_.models()));
  CAIRN_ASSIGN_OR_RETURN(std::string text, backend_.detokenize(dr.model, dr.tokens));
  return Outcome(json_response(200, {{"prompt", std::move(text)}}));
}

// llama.cpp's server route: a chat request's rendered prompt, nothing generated.
Result<HttpRoutes::Outcome> HttpRoutes::apply_template(const HttpRequest& req, const char*) {
  CAIRN_ASSIGN_OR_RETURN(const RequestJson body, model_request_body(req));
  CAIRN_ASSIGN_OR_RETURN(const ParsedGenerate parsed,
                         parse_generate(Endpoint::Chat, body, backend_.models(), opt_.limits));
  CAIRN_ASSIGN_OR_RETURN(std::string prompt, backend_.apply_template(parsed.prompts.at(0)));
  return Outcome(json_response(200, {{"prompt", std::move(prompt)}}));
}

// llama.cpp's server route: what the server runs with, for UIs and scripts.
Result<HttpRoutes::Outcome> HttpRoutes::props(const HttpRequest&, const char*) {
  const auto models = backend_.models();
  json body = json::object();
  if (!models.empty()) {
    const auto& m = models.front();
    body["model_alias"] = m.id;
    body["n_ctx"] = m.n_ctx;
    body["model_path"] = m.id;
    body["chat_template"] = m.chat_template;
    body["embedding"] = !m.generates;
    if (!m.pooling.empty()) body["pooling"] = m.pooling;
    json meta = {{"n_ctx_train", m.n_ctx_train}, {"n_embd", m.n_embd}, {"n_vocab", m.n_vocab},
                 {"n_params", m.n_params}, {"architecture", m.arch}};
    body["model_meta"] = std::move(meta);
  }
  // The sampling a request gets for every field it leaves out.
  const serving::SamplingOptions defaults;
  body["default_generation_settings"] = {
      {"n_ctx", models.empty() ? 0 : models.front().n_ctx},
      {"params",
       {{"temperature", defaults.temperature},
        {"top_k", defaults.top_k},
        {"top_p", defaults.top_p},
        {"min_p", defaults.min_p},
        {"presence_penalty", defaults.presence_penalty},
        {"frequency_penalty", defaults.frequency_penalty},
        {"repetition_penalty", defaults.repetition_penalty},
        {"max_tokens", -1}}}};
  json ids = json::array();
  for (const auto& m : models) ids.push_back(m.id);
  body["models"] = std::move(ids);
  body["api_key_required"] = !opt_.api_key.empty();
  body["build_info"] = "cairn";
  return Outcome(json_response(200, body));
}

namespace {

// Hands an embedding request's answer to the HTTP server, which formats it
// on its own thread.
class DeferredEmbedSink final : public serving::EmbedSink {
 public:
  using Format = std::function<HttpResponse(const Result<serving::EmbedResult>&)>;
  DeferredEmbedSink(DeferredReply reply, Format format)
      : reply_(std::move(reply)), format_(std::move(format)) {}
  void on_done(serving::EmbedResult result) override { deliver(std::move(result)); }
  void on_error(const Status& err) override { deliver(err); }

 private:
  void deliver(Result<serving::EmbedResult> r) {
    auto shared = std::make_shared<Result<serving::EmbedResult>>(std::move(r));
    reply_([format = format_, shared] { return format(*shared); });
  }
  DeferredReply reply_;
  Format format_;
};

}  // namespace

// An embedding job for the backend whose answer `to_json` turns into the
// response body, on the connection's thread.
template <typename Parsed>
HttpRoutes::Outcome HttpRoutes::deferred_embed(
    const char* path, const std::string& origin, std::shared_ptr<Parsed> parsed,
    nlohmann::json (*to_json)(const Parsed&, const serving::EmbedResult&)) {
  DeferredJob job;
  job.route = path;
  job.start = [this, parsed, origin, to_json](DeferredReply reply) -> Result<serving::RequestId> {
    auto format = [this, parsed, origin, to_json](const Result<serving::EmbedResult>& r) {
      if (!r.is_ok()) return error_response(r.status(), origin);
      HttpResponse out = json_response(200, to_json(*parsed, *r));
      add_cors(out, origin);
      return out;
    };
    serving::EmbedRequest request = parsed->request;  // rerank's documents stay for the answer
    return backend_.embed(std::move(request),
                          std::make_shared<DeferredEmbedSink>(std::move(reply), format));
  };
  return Outcome(std::move(job));
}

Result<HttpRoutes::Outcome> HttpRoutes::embeddings(const HttpRequest& req, const char* path) {
  CAIRN_ASSIGN_OR_RETURN(const RequestJson body, model_request_body(req));
  CAIRN_ASSIGN_OR_RETURN(EmbeddingsRequest parsed, parse_embeddings(body, backend_.models()));
  return deferred_embed<EmbeddingsRequest>(
      path, req.origin, std::make_shared<EmbeddingsRequest>(std::move(parsed)),
      [](const EmbeddingsRequest& p, const serving::EmbedResult& r) {
        return embeddings_response(p.model, r, p.base64);
      });
}

Result<HttpRoutes::Outcome> HttpRoutes::rerank(const HttpRequest& req, const char* path) {
  CAIRN_ASSIGN_OR_RETURN(const RequestJson body, model_request_body(req));
  CAIRN_ASSIGN_OR_RETURN(RerankRequest parsed, parse_rerank(body, backend_.models()));
  return deferred_embed<RerankRequest>(path, req.origin,
                                       std::make_shared<RerankRequest>(std::move(parsed)),
                                       &rerank_response);
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
  CAIRN_ASSIGN_OR_RETURN(const RequestJson body, model_request_body(req));
  CAIRN_ASSIGN_OR_RETURN(ParsedGenerate parsed,
                         parse_generate(endpoint, body, backend_.models(), opt_.limits));
  if (parsed.echo)
    for (const auto& p : parsed.prompts) {
      if (const auto* text = std::get_if<std::string>(&p.prompt)) {
        parsed.echo_text.push_back(*text);
      } else if (const auto* ids = std::get_if<std::vector<serving::Token>>(&p.prompt)) {
        CAIRN_ASSIGN_OR_RETURN(std::string text, backend_.detokenize(p.model, *ids));
        parsed.echo_text.push_back(std::move(text));
      }
    }
  return Outcome(GenerateJob{path, std::move(parsed)});
}

Result<HttpRoutes::Outcome> HttpRoutes::predict(const HttpRequest& req, const char* path) {
  if (!servables_) return Status::not_found("no servables are served");
  CAIRN_ASSIGN_OR_RETURN(ModelPath where, parse_model_path(path_of(req.target)));
  if (draining_) return Status::unavailable("the server is shutting down");
  if (!servables_->has_servable(where.servable))
    return Status::not_found("servable '" + where.servable.substr(0, 128) + "' is not served");
  CAIRN_ASSIGN_OR_RETURN(PredictBody body, parse_predict_body(req.body, opt_.servable_limits));
  servable::PredictCall call;
  call.servable = std::move(where.servable);
  call.version = where.version;
  call.method = std::move(where.method);
  call.instances = std::move(body.instances);
  call.stream = body.stream;
  return Outcome(PredictJob{path, std::move(call)});
}

Result<HttpRoutes::Outcome> HttpRoutes::webui(const HttpRequest& req, const char*) {
  const std::string path = path_of(req.target);
  // "/ui/status" is the status page; any other "/ui/<file>" is that file.
  std::string name = "index.html";
  if (path == "/ui/status")
    name = "status.html";
  else if (path.size() > 4)
    name = path.substr(4);
  const auto asset = name.find('/') == std::string::npos ? webui::find_asset(name) : std::nullopt;
  if (!asset) return Status::not_found("no web UI file at " + path.substr(0, 256));
  HttpResponse r;
  r.content_type = std::string(asset->content_type);
  // Nothing inline, nothing from elsewhere: model text the page shows cannot run code.
  r.headers.emplace_back("Content-Security-Policy",
                         "default-src 'self'; script-src 'self'; style-src 'self'; "
                         "img-src 'self' data:; connect-src 'self'; object-src 'none'; "
                         "base-uri 'none'; form-action 'self'; frame-ancestors 'none'");
  r.headers.emplace_back("X-Content-Type-Options", "nosniff");
  r.headers.emplace_back("Referrer-Policy", "no-referrer");
  // Revalidated on every load (the files change with the binary), 304 when unchanged.
  r.headers.emplace_back("Cache-Control", "no-cache");
  r.headers.emplace_back("ETag", std::string(asset->etag));
  if (req.if_none_match == asset->etag) {
    r.status = 304;
    r.content_type.clear();
    return Outcome(std::move(r));
  }
  r.body = std::string(asset->bytes);
  return Outcome(std::move(r));
}

}  // namespace cairn::api
