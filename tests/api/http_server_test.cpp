// The HTTP server over real loopback sockets against a fake backend: limits,
// auth, CORS, routes, streaming, cancellation on disconnect, idle clients, drain.
#include "api/http_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <thread>

#include "fake_backend.h"

namespace cairn::api {
namespace {

using nlohmann::json;
using test::FakeBackend;

class Socket {
 public:
  explicit Socket(uint16_t port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ok_ = fd_ >= 0 && ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~Socket() { close(); }
  Socket(const Socket&) = delete;
  Socket& operator=(const Socket&) = delete;
  bool ok() const { return ok_; }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  bool send(const std::string& s) {
    size_t off = 0;
    while (off < s.size()) {
      ssize_t n = ::send(fd_, s.data() + off, s.size() - off, MSG_NOSIGNAL);
      if (n <= 0) return false;
      off += static_cast<size_t>(n);
    }
    return true;
  }
  // Reads until `done(received)` holds, the peer closes, or the timeout passes.
  template <typename Done>
  std::string read_until(Done done, int timeout_ms = 10000) {
    auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (!done(buf_)) {
      int left = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(
                                      until - std::chrono::steady_clock::now())
                                      .count());
      if (left <= 0) break;
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, left) <= 0) break;
      char tmp[65536];
      ssize_t n = ::recv(fd_, tmp, sizeof tmp, 0);
      if (n <= 0) {
        eof_ = true;
        break;
      }
      buf_.append(tmp, static_cast<size_t>(n));
    }
    return buf_;
  }
  // One complete response (Content-Length or chunked), removed from the buffer.
  std::string response(int timeout_ms = 10000) {
    auto complete = [](const std::string& b) { return response_length(b) != std::string::npos; };
    read_until(complete, timeout_ms);
    size_t len = response_length(buf_);
    if (len == std::string::npos) len = buf_.size();
    std::string r = buf_.substr(0, len);
    buf_.erase(0, len);
    return r;
  }
  bool eof() const { return eof_; }
  void drop(size_t n) { buf_.erase(0, n); }

 private:
  static size_t response_length(const std::string& b) {
    size_t h = b.find("\r\n\r\n");
    if (h == std::string::npos) return std::string::npos;
    std::string head = b.substr(0, h);
    for (char& c : head) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    auto cl = head.find("content-length: ");
    if (cl != std::string::npos) {
      size_t n = std::stoul(head.substr(cl + 16));
      return b.size() >= h + 4 + n ? h + 4 + n : std::string::npos;
    }
    auto end = b.find("\r\n0\r\n\r\n", h);
    return end == std::string::npos ? std::string::npos : end + 7;
  }

  int fd_ = -1;
  bool ok_ = false;
  bool eof_ = false;
  std::string buf_;
};

int status_of(const std::string& r) { return r.size() > 12 ? std::atoi(r.c_str() + 9) : 0; }
std::string body_of(const std::string& r) {
  auto h = r.find("\r\n\r\n");
  return h == std::string::npos ? "" : r.substr(h + 4);
}
bool has_header(const std::string& r, const std::string& line) {
  return r.substr(0, r.find("\r\n\r\n")).find("\r\n" + line) != std::string::npos;
}

std::string post(const std::string& path, const std::string& body, const std::string& extra = "") {
  return "POST " + path + " HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n" + extra +
         "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}
std::string get(const std::string& path, const std::string& extra = "") {
  return "GET " + path + " HTTP/1.1\r\nHost: x\r\n" + extra + "\r\n";
}

class ServerTest : public ::testing::Test {
 protected:
  void start(ServerOptions o = {}) {
    o.port = 0;
    o.threads = 2;
    auto s = HttpServer::start(backend, std::move(o));
    ASSERT_TRUE(s.is_ok()) << s.status().message();
    server = std::move(s.value());
  }
  std::string exchange(const std::string& request) {
    Socket s(server->port());
    EXPECT_TRUE(s.ok());
    s.send(request);
    return s.response();
  }
  FakeBackend backend;
  std::unique_ptr<HttpServer> server;
};

TEST_F(ServerTest, CompletionNonStreaming) {
  start();
  auto r = exchange(post("/v1/completions", R"({"prompt":"hi","max_tokens":2})"));
  ASSERT_EQ(status_of(r), 200) << r;
  json j = json::parse(body_of(r));
  EXPECT_EQ(j["choices"][0]["text"], "Hello world");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["total_tokens"], 5);
  EXPECT_EQ(j["model"], "fake");
  EXPECT_EQ(backend.last_request().max_tokens, 2);
}

TEST_F(ServerTest, ChatStreamingIsSseEndingWithDone) {
  start();
  auto r = exchange(post("/v1/chat/completions",
                         R"({"messages":[{"role":"user","content":"hi"}],"stream":true,
                             "stream_options":{"include_usage":true}})"));
  ASSERT_EQ(status_of(r), 200) << r;
  EXPECT_TRUE(has_header(r, "Content-Type: text/event-stream"));
  EXPECT_TRUE(has_header(r, "Transfer-Encoding: chunked"));
  const std::string b = body_of(r);
  EXPECT_NE(b.find("\"role\":\"assistant\""), std::string::npos);
  EXPECT_NE(b.find("\"content\":\"Hello\""), std::string::npos);
  EXPECT_NE(b.find("\"finish_reason\":\"length\""), std::string::npos);
  EXPECT_NE(b.find("\"usage\":{"), std::string::npos);
  EXPECT_NE(b.find("data: [DONE]\n\n"), std::string::npos);
}

TEST_F(ServerTest, NChoicesAreMergedByIndex) {
  start();
  auto r = exchange(post("/v1/completions", R"({"prompt":["a","b"],"n":2,"seed":7})"));
  ASSERT_EQ(status_of(r), 200) << r;
  json j = json::parse(body_of(r));
  ASSERT_EQ(j["choices"].size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(j["choices"][i]["index"], i);
  EXPECT_EQ(backend.submitted(), 4u);
  EXPECT_EQ(j["usage"]["prompt_tokens"], 6);  // two prompts, counted once each
  EXPECT_EQ(j["usage"]["completion_tokens"], 8);
}

TEST_F(ServerTest, KeepAliveServesSeveralRequests) {
  start();
  Socket s(server->port());
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(s.send(post("/v1/completions", R"({"prompt":"hi"})")));
    auto r = s.response();
    ASSERT_EQ(status_of(r), 200) << i << r;
  }
  ASSERT_TRUE(s.send(get("/health")));
  EXPECT_EQ(status_of(s.response()), 200);
}

TEST_F(ServerTest, ExpectContinueGetsContinueBeforeTheBody) {
  start();
  Socket s(server->port());
  const std::string body = R"({"prompt":"hi"})";
  s.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: " +
         std::to_string(body.size()) + "\r\n\r\n");
  auto interim = s.read_until([](const std::string& b) { return b.find("\r\n\r\n") != std::string::npos; });
  EXPECT_EQ(interim.rfind("HTTP/1.1 100 Continue\r\n\r\n", 0), 0u) << interim;
  s.drop(interim.find("\r\n\r\n") + 4);
  s.send(body);
  auto r = s.response();
  EXPECT_EQ(status_of(r), 200) << r;
}

TEST_F(ServerTest, RoutesAndMethods) {
  start();
  auto r404 = exchange(get("/nope"));
  EXPECT_EQ(status_of(r404), 404);
  EXPECT_EQ(json::parse(body_of(r404))["error"]["type"], "not_found_error");
  auto r405 = exchange(get("/v1/completions"));
  EXPECT_EQ(status_of(r405), 405);
  EXPECT_TRUE(has_header(r405, "Allow: POST"));
  EXPECT_EQ(status_of(exchange(post("/health", "{}"))), 405);
  auto models = exchange(get("/v1/models"));
  ASSERT_EQ(status_of(models), 200);
  EXPECT_EQ(json::parse(body_of(models))["data"][0]["id"], "fake");
  auto health = exchange(get("/health"));
  EXPECT_EQ(status_of(health), 200);
  auto tok = exchange(post("/tokenize", R"({"prompt":"abc"})"));
  ASSERT_EQ(status_of(tok), 200);
  EXPECT_EQ(json::parse(body_of(tok))["count"], 3);
  // with_pieces: llama.cpp's objects; a piece that is not UTF-8 as its bytes.
  auto pieces = exchange(post("/tokenize", R"({"prompt":"abc","with_pieces":true})"));
  ASSERT_EQ(status_of(pieces), 200);
  EXPECT_EQ(json::parse(body_of(pieces))["tokens"],
            json::parse(R"([{"id":97,"piece":"p97"},{"id":98,"piece":"p98"},)"
                        R"({"id":99,"piece":[195]}])"));
  auto detok = exchange(post("/detokenize", R"({"tokens":[1,2]})"));
  ASSERT_EQ(status_of(detok), 200);
  EXPECT_EQ(json::parse(body_of(detok))["prompt"], "xx");
  exchange(post("/v1/completions", R"({"prompt":"hi"})"));
  // The server counts a request once its response is written, which may be
  // just after the client has read it: poll briefly for the count.
  auto metrics = exchange(get("/metrics"));
  for (int i = 0; i < 100 && body_of(metrics).find("route=\"/v1/completions\",status=\"200\"} 1") ==
                                 std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    metrics = exchange(get("/metrics"));
  }
  ASSERT_EQ(status_of(metrics), 200);
  EXPECT_TRUE(has_header(metrics, "Content-Type: text/plain; version=0.0.4; charset=utf-8"));
  EXPECT_NE(body_of(metrics).find("cairn_http_requests_total{route=\"/v1/completions\",status=\"200\"} 1"),
            std::string::npos);
  EXPECT_NE(body_of(metrics).find("cairn_http_requests_total{route=\"other\",status=\"404\"} 1"),
            std::string::npos);
  EXPECT_NE(body_of(metrics).find("cairn_kv_blocks_total{model=\"fake\"} 10"), std::string::npos);
}

TEST_F(ServerTest, BadInputNeverReachesTheBackend) {
  start();
  const std::pair<std::string, int> cases[] = {
      {"{not json", 400},
      {"[1]", 400},
      {R"({"prompt":""})", 400},
      {R"({"prompt":"a","model":"other"})", 404},
      {R"({"prompt":"a","max_tokens":0})", 400},
      {R"({"prompt":"a","temperature":-1})", 400},
      {R"({"prompt":[100]})", 400},
      {std::string("{\"prompt\":\"\xc3\x28\"}"), 400},
      {R"({"prompt":"a","n":10000})", 400},
  };
  for (const auto& [body, status] : cases) {
    auto r = exchange(post("/v1/completions", body));
    EXPECT_EQ(status_of(r), status) << body;
    json j = json::parse(body_of(r));
    EXPECT_TRUE(j["error"].contains("message"));
    EXPECT_TRUE(j["error"].contains("type"));
    EXPECT_TRUE(j["error"].contains("param"));
    EXPECT_TRUE(j["error"].contains("code"));
  }
  EXPECT_EQ(backend.submitted(), 0u);
  EXPECT_EQ(status_of(exchange(post("/v1/completions", R"({"prompt":"ok","whatever":1})"))), 200);
}

TEST_F(ServerTest, BodyLimitGives413WithAndWithoutContentLength) {
  ServerOptions o;
  o.max_body_bytes = 1000;
  start(o);
  auto r = exchange(post("/v1/completions", "{\"prompt\":\"" + std::string(2000, 'a') + "\"}"));
  EXPECT_EQ(status_of(r), 413) << r;
  EXPECT_EQ(json::parse(body_of(r))["error"]["code"], "request_too_large");
  // Chunked: no Content-Length, the limit is found while reading.
  Socket s(server->port());
  s.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n");
  for (int i = 0; i < 5; ++i) s.send("190\r\n" + std::string(400, 'a') + "\r\n");
  auto c = s.response();
  EXPECT_EQ(status_of(c), 413) << c;
  EXPECT_EQ(backend.submitted(), 0u);
}

TEST_F(ServerTest, HeaderLimitGives431) {
  ServerOptions o;
  o.max_header_bytes = 2048;
  start(o);
  auto r = exchange(get("/health", "X-Big: " + std::string(4096, 'b') + "\r\n"));
  EXPECT_EQ(status_of(r), 431) << r;
}

TEST_F(ServerTest, ApiKeyGuardsEverythingButHealth) {
  ServerOptions o;
  o.routes.api_key = "sk-secret";
  start(o);
  const std::string body = R"({"prompt":"hi"})";
  auto none = exchange(post("/v1/completions", body));
  EXPECT_EQ(status_of(none), 401);
  EXPECT_EQ(json::parse(body_of(none))["error"]["code"], "invalid_api_key");
  EXPECT_EQ(status_of(exchange(post("/v1/completions", body, "Authorization: Bearer sk-secreX\r\n"))), 401);
  EXPECT_EQ(status_of(exchange(post("/v1/completions", body, "Authorization: sk-secret\r\n"))), 401);
  EXPECT_EQ(status_of(exchange(get("/v1/models"))), 401);
  EXPECT_EQ(status_of(exchange(get("/metrics"))), 401);
  EXPECT_EQ(status_of(exchange(post("/tokenize", R"({"prompt":"a"})"))), 401);
  EXPECT_EQ(status_of(exchange(get("/health"))), 200);
  EXPECT_EQ(backend.submitted(), 0u);
  EXPECT_EQ(status_of(exchange(post("/v1/completions", body, "Authorization: Bearer sk-secret\r\n"))), 200);
}

// A part the server depends on (a distributed servable's agents) that cannot
// serve makes /health a 503 that says why, and 200 again once it can.
TEST_F(ServerTest, HealthReportsAnUnavailablePart) {
  ServerOptions o;
  auto reason = std::make_shared<std::string>("distributed model: waiting for agent ranks 3");
  o.routes.unavailable = [reason] { return *reason; };
  start(o);
  auto down = exchange(get("/health"));
  EXPECT_EQ(status_of(down), 503);
  EXPECT_TRUE(has_header(down, "Retry-After: 1"));
  const json j = json::parse(body_of(down));
  EXPECT_EQ(j["status"], "unavailable");
  EXPECT_EQ(j["reason"], *reason);
  reason->clear();
  auto up = exchange(get("/health"));
  EXPECT_EQ(status_of(up), 200);
  EXPECT_FALSE(json::parse(body_of(up)).contains("reason"));
}

TEST_F(ServerTest, CorsOffByDefault) {
  start();
  auto r = exchange(get("/v1/models", "Origin: http://evil.example\r\n"));
  EXPECT_EQ(r.find("Access-Control-Allow-Origin"), std::string::npos);
  auto pre = exchange("OPTIONS /v1/completions HTTP/1.1\r\nHost: x\r\nOrigin: http://a.example\r\n\r\n");
  EXPECT_EQ(status_of(pre), 405);
}

TEST_F(ServerTest, CorsWhenConfigured) {
  ServerOptions o;
  o.routes.cors_origin = "http://app.example";
  o.routes.api_key = "k";
  start(o);
  auto pre = exchange(
      "OPTIONS /v1/chat/completions HTTP/1.1\r\nHost: x\r\nOrigin: http://app.example\r\n"
      "Access-Control-Request-Method: POST\r\n\r\n");
  EXPECT_EQ(status_of(pre), 204) << pre;
  EXPECT_TRUE(has_header(pre, "Access-Control-Allow-Origin: http://app.example"));
  EXPECT_NE(pre.find("Access-Control-Allow-Headers: Authorization"), std::string::npos);
  auto r = exchange(get("/v1/models", "Origin: http://app.example\r\nAuthorization: Bearer k\r\n"));
  EXPECT_EQ(status_of(r), 200);
  EXPECT_TRUE(has_header(r, "Access-Control-Allow-Origin: http://app.example"));
  auto other = exchange(get("/v1/models", "Origin: http://evil.example\r\nAuthorization: Bearer k\r\n"));
  EXPECT_EQ(other.find("Access-Control-Allow-Origin"), std::string::npos);
}

TEST_F(ServerTest, FullQueueGives503WithRetryAfter) {
  start();
  backend.set_mode(FakeBackend::Mode::Refuse);
  auto r = exchange(post("/v1/completions", R"({"prompt":"hi"})"));
  EXPECT_EQ(status_of(r), 503);
  EXPECT_TRUE(has_header(r, "Retry-After: 1"));
  EXPECT_EQ(json::parse(body_of(r))["error"]["type"], "server_error");
}

TEST_F(ServerTest, DisconnectCancelsTheRequest) {
  start();
  backend.set_mode(FakeBackend::Mode::Hold);
  {
    Socket s(server->port());
    s.send(post("/v1/completions", R"({"prompt":"hi","stream":true})"));
    ASSERT_TRUE(backend.wait_held(1));
  }
  EXPECT_TRUE(backend.wait_cancelled(1)) << "streaming client went away, no cancel";
  {
    Socket s(server->port());
    s.send(post("/v1/chat/completions", R"({"messages":[{"role":"user","content":"x"}],"n":2})"));
    ASSERT_TRUE(backend.wait_held(2));
  }
  EXPECT_TRUE(backend.wait_cancelled(3)) << "non-streaming client went away, no cancel";
  for (int i = 0; i < 100 && server->active_requests() != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(server->active_requests(), 0);
}

TEST_F(ServerTest, ThousandIdleConnectionsDoNotBlockARequest) {
  rlimit lim{};
  getrlimit(RLIMIT_NOFILE, &lim);
  if (lim.rlim_cur < 2600 && lim.rlim_max >= 2600) {
    lim.rlim_cur = std::min<rlim_t>(lim.rlim_max, 4096);
    setrlimit(RLIMIT_NOFILE, &lim);
  }
  if (lim.rlim_cur < 2600) GTEST_SKIP() << "skipped: the file descriptor limit is below 2600";
  start();
  std::vector<std::unique_ptr<Socket>> idle;
  for (int i = 0; i < 1000; ++i) {
    idle.push_back(std::make_unique<Socket>(server->port()));
    ASSERT_TRUE(idle.back()->ok()) << i;
    if (i % 2) idle.back()->send("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Le");  // half a header
  }
  auto t0 = std::chrono::steady_clock::now();
  auto r = exchange(post("/v1/completions", R"({"prompt":"hi"})"));
  auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
  EXPECT_EQ(status_of(r), 200);
  EXPECT_LT(ms.count(), 2000);
}

TEST_F(ServerTest, SlowRequestTimesOut) {
  ServerOptions o;
  o.request_timeout_s = 0.3;
  start(o);
  Socket s(server->port());
  s.send("POST /v1/completions HTTP/1.1\r\nHost: x\r\n");
  auto t0 = std::chrono::steady_clock::now();
  s.read_until([](const std::string&) { return false; }, 3000);
  EXPECT_TRUE(s.eof()) << "a request that never completes must not hold its connection";
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(2500));
}

TEST_F(ServerTest, DrainFinishesRunningStreamsAndRefusesNewOnes) {
  ServerOptions o;
  o.drain_seconds = 20;
  start(o);
  backend.set_mode(FakeBackend::Mode::Hold);
  Socket stream(server->port());
  stream.send(post("/v1/completions", R"({"prompt":"hi","stream":true})"));
  ASSERT_TRUE(backend.wait_held(1));
  server->drain();
  auto refused = exchange(post("/v1/completions", R"({"prompt":"hi"})"));
  EXPECT_EQ(status_of(refused), 503);
  EXPECT_EQ(status_of(exchange(get("/health"))), 503);
  backend.release_all();
  auto r = stream.response();
  EXPECT_EQ(status_of(r), 200);
  EXPECT_NE(r.find("data: [DONE]"), std::string::npos);
  auto t0 = std::chrono::steady_clock::now();
  server->wait();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
}

TEST_F(ServerTest, DrainDeadlineStopsAnyway) {
  ServerOptions o;
  o.drain_seconds = 0.3;
  start(o);
  backend.set_mode(FakeBackend::Mode::Hold);
  Socket stream(server->port());
  stream.send(post("/v1/completions", R"({"prompt":"hi","stream":true})"));
  ASSERT_TRUE(backend.wait_held(1));
  server->drain();
  server->wait();
  server.reset();  // a connection cut at the deadline cancels its request
  EXPECT_EQ(backend.cancelled(), 1u);
}

}  // namespace
}  // namespace cairn::api
