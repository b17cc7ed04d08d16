// api/http_server.cpp — connections, HTTP/1.1 framing, SSE and draining on Beast.
// The only translation unit that includes Beast: everything template-heavy
// stays here so the rest of the API layer compiles quickly.
#include "api/http_server.h"

#include <spdlog/spdlog.h>

#include <atomic>
#include <boost/asio/dispatch.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <chrono>
#include <csignal>
#include <mutex>
#include <optional>
#include <thread>

#include "api/event_queue.h"
#include "api/generation.h"
#include "api/servable_json.h"

namespace cairn::api {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using beast::error_code;

namespace {

std::chrono::steady_clock::duration seconds(double s) {
  if (!(s > 0)) s = 0;
  if (s > 1e7) s = 1e7;  // "forever", without overflowing the clock
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(s));
}

// Status line and headers; Content-Length when the body is known, chunked otherwise.
std::string head(int status, const std::string& content_type,
                 const std::vector<std::pair<std::string, std::string>>& headers,
                 std::optional<size_t> content_length, bool keep_alive) {
  std::string h = "HTTP/1.1 " + std::to_string(status) + " " +
                  std::string(http::obsolete_reason(static_cast<http::status>(status))) + "\r\n";
  h += "Server: cairn\r\n";
  if (!content_type.empty()) h += "Content-Type: " + content_type + "\r\n";
  for (const auto& [k, v] : headers) h += k + ": " + v + "\r\n";
  if (content_length)
    h += "Content-Length: " + std::to_string(*content_length) + "\r\n";
  else
    h += "Transfer-Encoding: chunked\r\nCache-Control: no-cache\r\nX-Accel-Buffering: no\r\n";
  if (!keep_alive) h += "Connection: close\r\n";
  h += "\r\n";
  return h;
}

std::string chunk(const std::string& data) {
  if (data.empty()) return {};
  char size[20];
  std::snprintf(size, sizeof size, "%zx\r\n", data.size());
  return size + data + "\r\n";
}

// Closed under its mutex before the io_context goes away, so an engine thread
// delivering a late event never posts to a destroyed executor.
struct PostGate {
  std::mutex mu;
  bool open = true;
};

}  // namespace

class Connection;

struct HttpServer::Impl {
  net::io_context ioc;  // first: destroyed last, after everything that posts to it
  serving::Backend& backend;
  servable::ServableRuntime* servables;  // may be null
  ServerOptions opt;
  HttpRoutes routes;
  tcp::acceptor acceptor;
  std::optional<net::signal_set> signals;
  net::steady_timer drain_timer;
  net::steady_timer accept_retry;
  std::shared_ptr<PostGate> gate = std::make_shared<PostGate>();
  std::vector<std::thread> threads;
  std::mutex join_mu;
  std::atomic<int> active{0};
  std::atomic<bool> draining{false};
  std::atomic<bool> stopped{false};
  uint16_t bound_port = 0;

  Impl(serving::Backend& b, ServerOptions o, servable::ServableRuntime* s)
      : ioc(std::max(1, o.threads)),
        backend(b),
        servables(s),
        opt(std::move(o)),
        routes(b, opt.routes, s),
        acceptor(net::make_strand(ioc)),
        drain_timer(ioc),
        accept_retry(ioc) {}

  void do_accept();
  void begin_drain();
  void job_started() { ++active; }
  void job_ended() {
    if (--active == 0 && draining) finish();
  }
  void finish() {
    if (stopped.exchange(true)) return;
    spdlog::info("server stopping ({} requests still running)", active.load());
    ioc.stop();
  }
  void join() {
    std::lock_guard<std::mutex> lock(join_mu);
    for (auto& t : threads)
      if (t.joinable()) t.join();
  }
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket socket, HttpServer::Impl& srv)
      : srv_(srv),
        backend_(srv.backend),
        servables_(srv.servables),
        stream_(std::move(socket)),
        timer_(stream_.get_executor()) {}

  ~Connection() {
    // Only at shutdown can a connection die mid-request; its requests must not outlive it.
    if (job_active_) cancel_running();
  }

  void start() {
    error_code ec;
    stream_.socket().set_option(tcp::no_delay(true), ec);  // SSE tokens leave at once
    net::dispatch(stream_.get_executor(), [self = shared_from_this()] { self->do_read(); });
  }

 private:
  enum class Then { Nothing, ReadNext, Close, Linger };

  void do_read() {
    if (closed_) return;
    parser_.emplace();
    parser_->header_limit(srv_.opt.max_header_bytes);
    parser_->body_limit(srv_.opt.max_body_bytes);
    stream_.expires_after(seconds(srv_.opt.request_timeout_s));
    http::async_read_header(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](error_code ec, size_t) { self->on_header(ec); });
  }

  // curl and others wait for "100 Continue" before sending a large body.
  void on_header(error_code ec) {
    if (ec) return on_read(ec);
    auto read_body = [self = shared_from_this()] {
      http::async_read(self->stream_, self->buffer_, *self->parser_,
                       [self](error_code e, size_t) { self->on_read(e); });
    };
    if (!beast::iequals(parser_->get()[http::field::expect], "100-continue")) return read_body();
    static const std::string kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
    net::async_write(stream_, net::buffer(kContinue),
                     [self = shared_from_this(), read_body](error_code e, size_t) {
                       if (e) return self->close();
                       read_body();
                     });
  }

  void on_read(error_code ec) {
    if (ec) {
      const bool got_some = parser_ && parser_->got_some();
      // The target, once the request line was read, picks the error's shape.
      if (got_some) error_target_ = std::string(parser_->get().target());
      if (ec == http::error::header_limit)
        return respond_error(
            Status::error(StatusCode::HeadersTooLarge, "request headers are too large"));
      if (ec == http::error::body_limit)
        return respond_error(Status::error(
            StatusCode::BodyTooLarge,
            "request body is larger than " + std::to_string(srv_.opt.max_body_bytes) + " bytes"));
      // A timeout has already closed the socket (tcp_stream does): nothing can be sent.
      if (got_some && ec != http::error::end_of_stream && ec != net::error::eof &&
          ec != net::error::connection_reset && ec != net::error::operation_aborted &&
          ec != beast::error::timeout && ec != http::error::partial_message)
        return respond_error(Status::error(StatusCode::MalformedRequest, "malformed HTTP request"));
      return close();
    }
    stream_.expires_never();
    auto& msg = parser_->get();
    keep_alive_ = msg.keep_alive();
    HttpRequest req;
    req.method = std::string(msg.method_string());
    req.target = std::string(msg.target());
    req.authorization = std::string(msg[http::field::authorization]);
    req.origin = std::string(msg[http::field::origin]);
    req.if_none_match = std::string(msg[http::field::if_none_match]);
    req.body = std::move(msg.body());
    parser_.reset();
    origin_ = req.origin;
    const std::string route = HttpRoutes::route_name(req.target);
    auto outcome = srv_.routes.handle(req);
    if (auto* r = std::get_if<HttpResponse>(&outcome)) {
      srv_.routes.count(route, r->status);
      return respond(std::move(*r), !keep_alive_);
    }
    if (auto* p = std::get_if<PredictJob>(&outcome)) return start_predict(std::move(*p));
    if (auto* d = std::get_if<DeferredJob>(&outcome)) return start_deferred(std::move(*d));
    start_job(std::move(std::get<GenerateJob>(outcome)));
  }

  void respond_error(const Status& e) {
    keep_alive_ = false;  // the stream's position is unknown after a refused request
    HttpResponse r = srv_.routes.error_response_for(error_target_, e, origin_);
    srv_.routes.count("other", r.status);
    send(head(r.status, r.content_type, r.headers, r.body.size(), false) + r.body);
    // The client may still be sending the body we refused: closing now would
    // reset the connection and lose the response, so read and discard first.
    then_ = Then::Linger;
    if (!write_in_flight_) after_writes();
  }

  void linger() {
    error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    stream_.expires_after(std::chrono::seconds(2));
    discard();
  }

  void discard() {
    buffer_.clear();
    stream_.async_read_some(buffer_.prepare(16384),
                            [self = shared_from_this()](error_code ec, size_t) {
                              if (ec) return self->close();
                              self->discard();
                            });
  }

  void respond(HttpResponse r, bool close_after) {
    send(head(r.status, r.content_type, r.headers, r.body.size(), !close_after) + r.body);
    then_ = close_after ? Then::Close : Then::ReadNext;
    if (!write_in_flight_) after_writes();
  }

  void start_job(GenerateJob job) {
    auto& req = job.request;
    ResponseMeta meta;
    meta.endpoint = req.endpoint;
    meta.id = new_response_id(req.endpoint);
    meta.created = std::chrono::duration_cast<std::chrono::seconds>(
                       std::chrono::system_clock::now().time_since_epoch())
                       .count();
    meta.model = req.model;
    meta.logprobs = req.logprobs;
    begin_job(job.route, /*servable=*/false, req.stream);
    gen_ = std::make_unique<Generation>(req, meta);

    auto gate = srv_.gate;
    std::weak_ptr<Connection> weak = shared_from_this();
    const uint64_t serial = serial_;
    queue_ = std::make_shared<EventQueue>([gate, weak, serial] {
      std::lock_guard<std::mutex> lock(gate->mu);
      if (!gate->open) return;
      if (auto c = weak.lock()) {
        auto ex = c->stream_.get_executor();
        // The handler takes the only extra reference, so the connection is never
        // destroyed on the engine thread.
        net::post(ex, [c = std::move(c), serial] { c->on_events(serial); });
      }
    });

    ids_.clear();
    const int32_t n = req.n;
    for (size_t p = 0; p < req.prompts.size(); ++p) {
      for (int32_t j = 0; j < n; ++j) {
        serving::GenerateRequest r = req.prompts[p];
        // With a fixed seed, n > 1 choices would all be the same sample otherwise.
        if (r.sampling.seed && j > 0) r.sampling.seed = *r.sampling.seed + static_cast<uint64_t>(j);
        const int32_t index = static_cast<int32_t>(p) * n + j;
        auto res = backend_.submit(std::move(r), std::make_shared<QueueSink>(queue_, index));
        if (!res.is_ok()) {
          for (auto id : ids_) backend_.cancel(id);
          HttpResponse refused = srv_.routes.error_response(res.status(), origin_);
          end_job(refused.status);
          return respond(std::move(refused), !keep_alive_);
        }
        ids_.push_back(*res);
      }
    }

    arm_timeout(serial);
    if (streaming_) {
      HttpResponse h;
      h.content_type = "text/event-stream";
      srv_.routes.add_cors(h, origin_);
      send(head(200, h.content_type, h.headers, std::nullopt, keep_alive_) + chunk(gen_->opening()));
    }
    watch();
  }

  // A servable method call: ServableRuntime::predict resolves and checks it at
  // once (an error is an ordinary JSON response), then its events arrive
  // through a PredictQueue posted to this strand.
  void start_predict(PredictJob job) {
    begin_job(job.route, /*servable=*/true, job.call.stream);

    auto gate = srv_.gate;
    std::weak_ptr<Connection> weak = shared_from_this();
    const uint64_t serial = serial_;
    pqueue_ = std::make_shared<PredictQueue>([gate, weak, serial] {
      std::lock_guard<std::mutex> lock(gate->mu);
      if (!gate->open) return;
      if (auto c = weak.lock()) {
        auto ex = c->stream_.get_executor();
        net::post(ex, [c = std::move(c), serial] { c->on_predict_events(serial); });
      }
    });
    // HttpRoutes only makes a PredictJob when a runtime is set.
    auto sink = std::make_shared<PredictQueueSink>(pqueue_);
    auto res = servables_->predict(std::move(job.call), std::move(sink));
    if (!res.is_ok()) {
      HttpResponse refused = srv_.routes.servable_error_response(res.status(), origin_);
      end_job(refused.status);
      return respond(std::move(refused), !keep_alive_);
    }
    call_id_ = *res;

    arm_timeout(serial);
    if (streaming_) {
      HttpResponse h;
      h.content_type = "text/event-stream";
      srv_.routes.add_cors(h, origin_);
      send(head(200, h.content_type, h.headers, std::nullopt, keep_alive_));
    }
    watch();
  }

  // The state of a request that runs past this read (a generation, a
  // servable call, a deferred answer): events carry the new serial, so
  // those of an earlier request on this connection are ignored.
  void begin_job(const std::string& route, bool servable, bool streaming) {
    servable_job_ = servable;
    streaming_ = streaming;
    route_ = route;
    gen_.reset();
    ids_.clear();
    call_id_.reset();
    job_active_ = true;
    job_ending_ = false;
    counted_ = false;
    ++serial_;
    srv_.job_started();
  }

  void arm_timeout(uint64_t serial) {
    timer_.expires_after(seconds(srv_.opt.request_timeout_s));
    timer_.async_wait([self = shared_from_this(), serial](error_code ec) {
      if (!ec) self->on_timeout(serial);
    });
  }

  // A request the backend answers in one piece (embeddings, rerank): the
  // answer is posted to this strand and formatted here.
  void start_deferred(DeferredJob job) {
    begin_job(job.route, /*servable=*/false, /*streaming=*/false);

    auto gate = srv_.gate;
    std::weak_ptr<Connection> weak = shared_from_this();
    const uint64_t serial = serial_;
    DeferredReply reply = [gate, weak, serial](std::function<HttpResponse()> make) {
      std::lock_guard<std::mutex> lock(gate->mu);
      if (!gate->open) return;
      if (auto c = weak.lock()) {
        auto ex = c->stream_.get_executor();
        net::post(ex, [c = std::move(c), serial, make = std::move(make)] {
          c->on_deferred(serial, make);
        });
      }
    };
    auto res = job.start(std::move(reply));
    if (!res.is_ok()) {
      HttpResponse refused = srv_.routes.error_response(res.status(), origin_);
      end_job(refused.status);
      return respond(std::move(refused), !keep_alive_);
    }
    ids_.push_back(*res);
    arm_timeout(serial);
    watch();
  }

  void on_deferred(uint64_t serial, const std::function<HttpResponse()>& make) {
    if (serial != serial_ || !job_active_ || job_ending_ || closed_) return;
    job_ending_ = true;
    ids_.clear();  // answered: nothing left to cancel
    HttpResponse r = make();
    send(head(r.status, r.content_type, r.headers, r.body.size(), keep_alive_) + r.body);
    end_status_ = r.status;
    count_once(r.status);
    then_ = keep_alive_ ? Then::ReadNext : Then::Close;
    if (!write_in_flight_) after_writes();
  }

  void on_predict_events(uint64_t serial) {
    if (serial != serial_ || !job_active_ || job_ending_ || closed_ || !pqueue_) return;
    PredictQueue::Batch batch = pqueue_->take();
    if (streaming_) {
      std::string out;
      for (const auto& t : batch.texts)
        out += sse_data(stream_text_json(t.instance, t.output, t.text));
      if (!out.empty()) send(chunk(out));
    }
    if (!batch.done) return;
    job_ending_ = true;
    call_id_.reset();  // finished: nothing left to cancel
    const std::string body = dump_json(predict_reply_json(*batch.done));
    if (streaming_) {
      send(chunk("data: " + body + "\n\n" + kSseDone) + "0\r\n\r\n");
    } else {
      HttpResponse r;
      r.body = body;
      // The version that ran (0 in the path means the newest at the time).
      r.headers.emplace_back("X-Servable-Version", std::to_string(batch.version));
      srv_.routes.add_cors(r, origin_);
      send(head(r.status, r.content_type, r.headers, r.body.size(), keep_alive_) + r.body);
    }
    end_status_ = 200;
    count_once(200);
    then_ = keep_alive_ ? Then::ReadNext : Then::Close;
    if (!write_in_flight_) after_writes();
  }

  // Cancels whatever the current request started, in the backend or the runtime.
  void cancel_running() {
    for (auto id : ids_) backend_.cancel(id);
    if (call_id_ && servables_) servables_->cancel(*call_id_);
  }

  // While a request runs, a pending read notices the client going away.
  void watch() {
    if (watching_ || closed_) return;
    watching_ = true;
    stream_.async_read_some(buffer_.prepare(4096),
                            [self = shared_from_this()](error_code ec, size_t n) {
                              self->on_watch(ec, n);
                            });
  }

  void on_watch(error_code ec, size_t n) {
    watching_ = false;
    if (ec) {
      if (ec == net::error::operation_aborted && read_after_watch_) {
        read_after_watch_ = false;
        return do_read();
      }
      if (job_active_) return abort_job(499);  // client closed: nginx's "client closed request"
      return close();
    }
    buffer_.commit(n);  // a pipelined request: parsed once this one is answered
    if (buffer_.size() > srv_.opt.max_body_bytes + srv_.opt.max_header_bytes) {
      if (job_active_) return abort_job(413);
      return close();
    }
    if (job_active_) return watch();
    if (read_after_watch_) {
      read_after_watch_ = false;
      do_read();
    }
  }

  void on_events(uint64_t serial) {
    if (serial != serial_ || !job_active_ || job_ending_ || closed_) return;
    std::string out;
    for (auto& [index, ev] : queue_->take()) out += gen_->on_event(index, ev);
    if (streaming_ && !out.empty()) send(chunk(out));
    if (!gen_->done()) return;
    job_ending_ = true;
    cancel_running();  // a failed choice stops its siblings
    const int status = gen_->status();
    if (streaming_) {
      send(chunk(gen_->closing()) + "0\r\n\r\n");
    } else {
      HttpResponse r;
      r.status = status;
      r.body = gen_->closing();
      if (status == 503) r.headers.emplace_back("Retry-After", "1");
      srv_.routes.add_cors(r, origin_);
      send(head(r.status, r.content_type, r.headers, r.body.size(), keep_alive_) + r.body);
    }
    end_status_ = status;
    count_once(status);
    then_ = keep_alive_ ? Then::ReadNext : Then::Close;
    if (!write_in_flight_) after_writes();
  }

  void on_timeout(uint64_t serial) {
    if (serial != serial_ || !job_active_ || job_ending_) return;
    if (streaming_) return abort_job(504);
    cancel_running();
    job_ending_ = true;
    const Status late =
        Status::error(StatusCode::DeadlineExceeded, "the request did not finish in time");
    HttpResponse r = servable_job_ ? srv_.routes.servable_error_response(late, origin_)
                                   : srv_.routes.error_response(late, origin_);
    keep_alive_ = false;
    send(head(r.status, r.content_type, r.headers, r.body.size(), false) + r.body);
    end_status_ = 504;
    count_once(504);
    then_ = Then::Close;
    if (!write_in_flight_) after_writes();
  }

  // Counted when the outcome is known, before the client can see it.
  void count_once(int status) {
    if (counted_) return;
    counted_ = true;
    srv_.routes.count(route_, status);
  }

  // Ends the request's accounting: counted, drain notified, late events ignored.
  void end_job(int status) {
    if (!job_active_) return;
    job_active_ = false;
    ++serial_;
    timer_.cancel();
    gen_.reset();
    queue_.reset();
    pqueue_.reset();
    call_id_.reset();
    count_once(status);
    srv_.job_ended();
  }

  void abort_job(int status) {
    cancel_running();
    end_job(status);
    close();
  }

  void send(std::string bytes) {
    if (closed_ || bytes.empty()) return;
    out_ += bytes;
    if (!write_in_flight_) do_write();
  }

  void do_write() {
    writing_.swap(out_);
    out_.clear();
    write_in_flight_ = true;
    net::async_write(stream_, net::buffer(writing_),
                     [self = shared_from_this()](error_code ec, size_t) { self->on_write(ec); });
  }

  void on_write(error_code ec) {
    write_in_flight_ = false;
    writing_.clear();
    if (ec) {
      if (job_active_) return abort_job(499);
      return close();
    }
    if (!out_.empty()) return do_write();
    after_writes();
  }

  // Everything queued has been written: finish the request, then read the next or close.
  void after_writes() {
    if (then_ == Then::Nothing) return;
    const Then then = then_;
    then_ = Then::Nothing;
    if (job_active_ && job_ending_) end_job(end_status_);
    if (then == Then::Close) return close();
    if (then == Then::Linger) return linger();
    if (watching_) {
      // The watch read must end before the parser may read the socket.
      read_after_watch_ = true;
      error_code ec;
      stream_.socket().cancel(ec);
      return;
    }
    do_read();
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.socket().close(ec);
  }

  HttpServer::Impl& srv_;
  serving::Backend& backend_;
  servable::ServableRuntime* servables_;
  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  net::steady_timer timer_;
  std::string origin_;
  std::string error_target_;  // the refused request's target, for the error's shape

  bool job_active_ = false;
  bool job_ending_ = false;
  bool counted_ = false;
  int end_status_ = 200;
  uint64_t serial_ = 0;
  std::string route_;
  std::shared_ptr<EventQueue> queue_;
  std::vector<serving::RequestId> ids_;
  std::unique_ptr<Generation> gen_;
  bool streaming_ = false;
  // A servable call (servable_job_): its events and its id for cancel().
  bool servable_job_ = false;
  std::shared_ptr<PredictQueue> pqueue_;
  std::optional<uint64_t> call_id_;

  bool watching_ = false;
  bool read_after_watch_ = false;
  bool keep_alive_ = true;
  bool closed_ = false;

  std::string out_, writing_;
  bool write_in_flight_ = false;
  Then then_ = Then::Nothing;
};

void HttpServer::Impl::do_accept() {
  acceptor.async_accept(net::make_strand(ioc), [this](error_code ec, tcp::socket socket) {
    if (ec == net::error::operation_aborted || stopped) return;
    if (ec) {
      // Usually out of file descriptors: wait a little instead of spinning.
      spdlog::warn("accept failed: {}", ec.message());
      accept_retry.expires_after(std::chrono::milliseconds(100));
      accept_retry.async_wait([this](error_code e) {
        if (!e) do_accept();
      });
      return;
    }
    std::make_shared<Connection>(std::move(socket), *this)->start();
    do_accept();
  });
}

void HttpServer::Impl::begin_drain() {
  if (draining.exchange(true)) return;
  spdlog::info("draining: refusing new requests, waiting up to {} s for {} running", opt.drain_seconds,
               active.load());
  routes.set_draining();
  backend.start_draining();
  net::post(ioc, [this] {
    if (active == 0) return finish();
    drain_timer.expires_after(seconds(opt.drain_seconds));
    drain_timer.async_wait([this](error_code ec) {
      if (!ec) finish();
    });
  });
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() {
  stop();
  impl_->join();
  std::lock_guard<std::mutex> lock(impl_->gate->mu);
  impl_->gate->open = false;
}

Result<std::unique_ptr<HttpServer>> HttpServer::start(serving::Backend& backend,
                                                      ServerOptions options,
                                                      servable::ServableRuntime* servables) {
  auto impl = std::make_unique<Impl>(backend, std::move(options), servables);
  Impl& s = *impl;
  error_code ec;
  auto addr = net::ip::make_address(s.opt.host, ec);
  if (ec) return Status::error("invalid --host '" + s.opt.host + "': " + ec.message());
  tcp::endpoint ep(addr, s.opt.port);
  s.acceptor.open(ep.protocol(), ec);
  if (!ec) s.acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) s.acceptor.bind(ep, ec);
  if (!ec) s.acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec)
    return Status::error("cannot listen on " + s.opt.host + ":" + std::to_string(s.opt.port) +
                         ": " + ec.message());
  s.bound_port = s.acceptor.local_endpoint().port();
  if (s.opt.handle_signals) {
    s.signals.emplace(s.ioc, SIGINT, SIGTERM);
    // The first signal drains; a second one stops at once.
    struct Rearm {
      Impl* s;
      void operator()(error_code e, int sig) const {
        if (e) return;
        spdlog::info("received signal {}", sig);
        if (s->draining) return s->finish();
        s->begin_drain();
        s->signals->async_wait(*this);
      }
    };
    s.signals->async_wait(Rearm{&s});
  }
  s.do_accept();
  for (int i = 0; i < std::max(1, s.opt.threads); ++i)
    s.threads.emplace_back([&s] { s.ioc.run(); });
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

uint16_t HttpServer::port() const { return impl_->bound_port; }
const std::string& HttpServer::host() const { return impl_->opt.host; }
void HttpServer::drain() { impl_->begin_drain(); }
void HttpServer::stop() { impl_->finish(); }
void HttpServer::wait() { impl_->join(); }
int HttpServer::active_requests() const { return impl_->active.load(); }

}  // namespace cairn::api
