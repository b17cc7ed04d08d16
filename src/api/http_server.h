// api/http_server.h — the HTTP server (OpenAI and MindSpore Serving REST) on Boost.Beast/Asio.
// Owns sockets, HTTP/1.1 parsing and limits (body, header, timeouts), SSE
// streaming, disconnect -> Backend::cancel / ServableRuntime::cancel, and
// graceful drain. A few I/O threads serve every connection; idle or slow
// clients cost memory, never threads. Speaks only to serving::Backend and
// servable::ServableRuntime and never blocks the engine or a servable call:
// events are queued and posted to the connection's strand. Beast stays inside
// the .cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "api/http_routes.h"
#include "core/status.h"
#include "servable/runtime.h"
#include "serving/backend.h"

namespace cairn::api {

struct ServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 8080;  // 0: any free port (see HttpServer::port)
  HttpRoutesOptions routes;
  uint64_t max_body_bytes = 8ull << 20;    // 413 beyond, chunked bodies too
  uint32_t max_header_bytes = 16u << 10;   // 431 beyond
  double request_timeout_s = 600;          // reading a request; a whole generation
  double drain_seconds = 30;
  int threads = 2;
  bool handle_signals = false;  // SIGTERM / SIGINT start a drain (a second one stops at once)
};

class HttpServer {
 public:
  // Binds and starts the I/O threads; the server is serving when this returns.
  // `servables` (may be null: /model/... then answers 404) serves MindSpore
  // Serving's REST routes and must outlive the server.
  static Result<std::unique_ptr<HttpServer>> start(serving::Backend& backend, ServerOptions options,
                                                   servable::ServableRuntime* servables = nullptr);
  ~HttpServer();  // stops at once (no drain) and joins the threads

  uint16_t port() const;
  const std::string& host() const;
  // Starts a drain: new requests get 503, running ones finish (up to
  // drain_seconds), then the server stops. Any thread.
  void drain();
  // Stops at once: running requests are cancelled. Any thread.
  void stop();
  // Blocks until the server has stopped (after a drain or stop()).
  void wait();
  // Generation requests and servable calls in flight (for tests and drain).
  int active_requests() const;

  struct Impl;  // opaque: keeps Beast out of this header

 private:
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace cairn::api
