// The web UI's routes: / and /ui/<file> without the API key, CSP and ETag
// headers, 304 on a matching If-None-Match, 404 for unknown files.
#include <gtest/gtest.h>

#include <string>

#include "api/http_routes.h"
#include "fake_backend.h"

namespace cairn::api {
namespace {

HttpRequest get(const std::string& target) {
  HttpRequest r;
  r.method = "GET";
  r.target = target;
  return r;
}

HttpResponse response(HttpRoutes::Outcome o) {
  auto* r = std::get_if<HttpResponse>(&o);
  EXPECT_NE(r, nullptr);
  return r ? *r : HttpResponse{};
}

std::string header(const HttpResponse& r, const std::string& name) {
  for (const auto& [k, v] : r.headers)
    if (k == name) return v;
  return "";
}

TEST(WebUiRoutes, PagesNeedNoKeyButTheApiStillDoes) {
  test::FakeBackend backend;
  HttpRoutesOptions opt;
  opt.api_key = "secret";
  HttpRoutes routes(backend, opt);
  for (const char* target : {"/", "/?x=1", "/ui/status", "/ui/chat.js", "/ui/style.css"}) {
    auto r = response(routes.handle(get(target)));
    EXPECT_EQ(r.status, 200) << target;
    EXPECT_FALSE(r.body.empty()) << target;
    EXPECT_NE(header(r, "Content-Security-Policy").find("default-src 'self'"), std::string::npos);
    EXPECT_FALSE(header(r, "ETag").empty());
  }
  EXPECT_EQ(response(routes.handle(get("/"))).content_type, "text/html; charset=utf-8");
  EXPECT_EQ(response(routes.handle(get("/ui/chat.js"))).content_type,
            "text/javascript; charset=utf-8");
  EXPECT_EQ(response(routes.handle(get("/v1/models"))).status, 401);
}

TEST(WebUiRoutes, UnknownFilesAre404AndOtherMethods405) {
  test::FakeBackend backend;
  HttpRoutes routes(backend, {});
  EXPECT_EQ(response(routes.handle(get("/ui/x"))).status, 404);
  EXPECT_EQ(response(routes.handle(get("/ui/../index.html"))).status, 404);
  EXPECT_EQ(response(routes.handle(get("/index.html"))).status, 404);
  HttpRequest post = get("/");
  post.method = "POST";
  EXPECT_EQ(response(routes.handle(post)).status, 405);
}

TEST(WebUiRoutes, MatchingETagIs304) {
  test::FakeBackend backend;
  HttpRoutes routes(backend, {});
  auto first = response(routes.handle(get("/")));
  HttpRequest again = get("/");
  again.if_none_match = header(first, "ETag");
  auto second = response(routes.handle(again));
  EXPECT_EQ(second.status, 304);
  EXPECT_TRUE(second.body.empty());
  again.if_none_match = "\"other\"";
  EXPECT_EQ(response(routes.handle(again)).status, 200);
}

}  // namespace
}  // namespace cairn::api
