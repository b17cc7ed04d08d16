// api/grpc_worker_service.cpp — the cairn.v1.Worker service a controller calls.
#include "api/grpc_worker_service.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <variant>

#include "cairn/v1/worker.grpc.pb.h"
#include "rpc/convert.h"

namespace cairn::api {
namespace {

using Event = std::variant<serving::OutputSyntax, serving::TokenEvent, serving::FinishEvent,
                           cairn::Status, kv::KvRun>;

// How often a waiting handler looks at its call's cancellation: gRPC offers
// no wake-up on cancel to a sync handler, so this bounds how long a request
// whose client went away keeps running.
constexpr auto kPollInterval = std::chrono::milliseconds(20);

// Decode workers whose channels are kept (a cluster has few).
constexpr size_t kMaxCachedChannels = 64;

// The hand-off from the engine thread to one Generate handler. The engine
// only locks, appends and notifies; the handler converts and writes.
class StreamSink final : public serving::EventSink {
 public:
  void on_start(const serving::OutputSyntax& syntax) override { push(syntax); }
  void on_token(const serving::TokenEvent& ev) override { push(ev); }
  void on_finish(const serving::FinishEvent& ev) override { push(ev); }
  void on_error(const cairn::Status& err) override { push(err); }
  void on_kv(kv::KvRun run) override { push(std::move(run)); }

  // Waits up to `timeout` for events (or a Cancel by id) and takes them all.
  std::deque<Event> take(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, timeout, [&] { return !events_.empty() || cancel_requested_; });
    std::deque<Event> out;
    out.swap(events_);
    return out;
  }

  void request_cancel() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      cancel_requested_ = true;
    }
    cv_.notify_all();
  }

  bool cancel_requested() {
    std::lock_guard<std::mutex> lock(mu_);
    return cancel_requested_;
  }

 private:
  void push(Event ev) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      events_.push_back(std::move(ev));
    }
    cv_.notify_all();
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Event> events_;
  bool cancel_requested_ = false;
};

// The hand-off from the engine to one Embed handler: the one answer, stored.
class EmbedWaiter final : public serving::EmbedSink {
 public:
  void on_done(serving::EmbedResult result) override { set(std::move(result)); }
  void on_error(const cairn::Status& err) override { set(err); }

  // Waits up to `timeout` for the answer; true once it is there.
  bool wait(std::chrono::milliseconds timeout) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return answer_.has_value(); });
  }
  Result<serving::EmbedResult> take() {
    std::lock_guard<std::mutex> lock(mu_);
    return std::move(*answer_);
  }

 private:
  void set(Result<serving::EmbedResult> r) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (answer_) return;  // exactly one answer counts
      answer_.emplace(std::move(r));
    }
    cv_.notify_all();
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<Result<serving::EmbedResult>> answer_;
};

// Inside PushKv: a failed step's status goes into the reply's error.
#define CAIRN_GRPC_TRY(expr)              \
  do {                                    \
    const cairn::Status st_ = (expr);     \
    if (!st_.is_ok()) return refuse(st_); \
  } while (0)

grpc::Status invalid_argument(const std::string& message) {
  return rpc::to_grpc_status(cairn::Status::invalid_argument(message));
}

grpc::Status call_cancelled(const std::string& message) {
  return rpc::to_grpc_status(cairn::Status::error(StatusCode::Cancelled, message));
}

// One line of at most 300 bytes, for errors that travel in a FinishEvent.
std::string one_line(std::string s) {
  for (char& c : s)
    if (c == '\n' || c == '\r') c = ' ';
  if (s.size() > 300) s.resize(300);
  return s;
}

// The prefill side's stream of one request's K/V runs to the decode worker.
// Lives on the Generate handler's thread; its writes block on the decode
// worker's flow control, bounded by the call's deadline. After a failure it
// drops every later run and keeps the reason for the handoff's finish.
class KvPusher {
 public:
  KvPusher(std::shared_ptr<grpc::Channel> channel, std::string id, std::string model,
           std::chrono::milliseconds timeout, int64_t chunk_bytes)
      : stub_(v1::Worker::NewStub(std::move(channel))),
        id_(std::move(id)),
        model_(std::move(model)),
        timeout_(timeout),
        chunk_bytes_(chunk_bytes) {}
  ~KvPusher() { cancel(); }
  KvPusher(const KvPusher&) = delete;
  KvPusher& operator=(const KvPusher&) = delete;

  void push(kv::KvRun run) {
    if (!error_.empty() || done_) return;
    if (!writer_) {
      if (run.rows.first != 0 || run.prompt.empty() || run.geometry.n_layer <= 0 ||
          run.geometry.row_elems <= 0 || run.geometry.elem_bytes <= 0)
        return fail_local("the engine's first K/V run carries no geometry or prompt");
      geometry_ = run.geometry;
      prompt_ = std::move(run.prompt);
      started_ = std::chrono::steady_clock::now();
      ctx_.set_deadline(std::chrono::system_clock::now() + timeout_);
      writer_ = stub_->PushKv(&ctx_, &reply_);
    }
    kv::KvRows& r = run.rows;
    if (r.n < 1 || r.first != next_ || (int64_t)r.first + r.n > (int64_t)prompt_.size() ||
        (int64_t)r.bytes.size() != geometry_.bytes_for(r.n))
      return fail_local("the engine exported a malformed K/V run (positions " +
                        std::to_string(r.first) + "+" + std::to_string(r.n) + ")");
    const int64_t per_pos = geometry_.bytes_for(1);
    const int32_t step = (int32_t)std::max<int64_t>(1, chunk_bytes_ / per_pos);
    const int64_t rb = geometry_.row_bytes();
    for (int32_t a = 0; a < r.n; a += step) {
      const int32_t m = std::min(step, r.n - a);
      v1::KvPush msg;
      if (!header_sent_) {
        msg.set_handoff_id(id_);
        rpc::KvHeader h{model_, geometry_, prompt_};
        *msg.mutable_header() = rpc::to_proto(h);
      }
      msg.set_first(r.first + a);
      msg.set_n(m);
      std::string* out = msg.mutable_rows();
      if (m == r.n) {
        *out = std::move(r.bytes);  // the whole run in one message
      } else {
        // Positions [a, a + m) of every layer's K rows, then its V rows.
        out->reserve((size_t)geometry_.bytes_for(m));
        const char* base = r.bytes.data();
        for (int32_t l = 0; l < geometry_.n_layer; ++l) {
          const char* layer = base + (int64_t)l * 2 * r.n * rb;
          out->append(layer + a * rb, (size_t)(m * rb));
          out->append(layer + ((int64_t)r.n + a) * rb, (size_t)(m * rb));
        }
      }
      msg.set_last((int64_t)r.first + a + m == (int64_t)prompt_.size());
      if (!writer_->Write(msg)) return fail_remote();
      header_sent_ = true;
      bytes_ += (int64_t)out->size();
    }
    next_ = r.first + r.n;
  }

  // At the handoff's finish: "" when the decode worker acknowledged every
  // row, else why not (one line).
  std::string finish() {
    if (!error_.empty()) return error_;
    if (!writer_) return "the engine exported no K/V rows";
    if (next_ != (int64_t)prompt_.size()) {
      fail_local("the engine exported " + std::to_string(next_) + " of the prompt's " +
                 std::to_string(prompt_.size()) + " positions");
      return error_;
    }
    writer_->WritesDone();
    const grpc::Status st = writer_->Finish();
    done_ = true;
    if (!st.ok())
      return error_ = one_line("K/V push to the decode worker failed: " + st.error_message());
    if (reply_.has_error())
      return error_ =
                 one_line("the decode worker refused the K/V rows: " + reply_.error().message());
    if (reply_.bytes() != bytes_)
      return error_ = "the decode worker acknowledged " + std::to_string(reply_.bytes()) + " of " +
                      std::to_string(bytes_) + " K/V bytes";
    return {};
  }

  // Abandons the push: the decode worker drops what it holds of it.
  void cancel() {
    if (!writer_ || done_) return;
    // A later finish() reports this rather than touching the closed call.
    if (error_.empty()) error_ = "the K/V push was cancelled";
    ctx_.TryCancel();
    writer_->Finish();
    done_ = true;
  }

  int64_t bytes() const { return bytes_; }
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  }

 private:
  void fail_local(std::string why) {
    error_ = one_line(std::move(why));
    cancel();
  }
  // A write failed: the decode worker answered (refused), or the call broke.
  void fail_remote() {
    const grpc::Status st = writer_->Finish();
    done_ = true;
    if (reply_.has_error())
      error_ = one_line("the decode worker refused the K/V rows: " + reply_.error().message());
    else
      error_ = one_line("K/V push to the decode worker failed: " +
                        (st.ok() ? std::string("the stream closed early") : st.error_message()));
  }

  std::unique_ptr<v1::Worker::Stub> stub_;
  std::string id_, model_;
  std::chrono::milliseconds timeout_;
  int64_t chunk_bytes_;  // row bytes per message (at least one position's)
  grpc::ClientContext ctx_;
  v1::KvPushReply reply_;
  std::unique_ptr<grpc::ClientWriter<v1::KvPush>> writer_;
  kv::KvGeometry geometry_;
  std::vector<serving::Token> prompt_;
  int64_t next_ = 0;
  int64_t bytes_ = 0;
  bool header_sent_ = false;
  bool done_ = false;
  std::string error_;
  std::chrono::steady_clock::time_point started_{};
};

class WorkerService final : public v1::Worker::Service {
 public:
  WorkerService(serving::Backend& backend, WorkerServiceOptions options)
      : backend_(backend), options_(std::move(options)) {
    // Beyond this a message would pass the receiving server's cap.
    options_.kv_push_chunk_bytes = std::clamp<int64_t>(options_.kv_push_chunk_bytes, 1, 8 << 20);
  }

  grpc::Status Generate(grpc::ServerContext* ctx, const v1::GenerateRequest* msg,
                        grpc::ServerWriter<v1::GenerateEvent>* writer) override {
    const std::string& id = msg->request_id();
    if (id.size() > kMaxRequestIdBytes)
      return invalid_argument("request_id is longer than " + std::to_string(kMaxRequestIdBytes) +
                              " bytes");
    auto parsed = rpc::from_proto(*msg);
    if (!parsed.is_ok()) return rpc::to_grpc_status(parsed.status());
    serving::GenerateRequest& req = *parsed;
    if (req.handoff && options_.role == "decode")
      return invalid_argument("this worker decodes only (--role decode): it hands nothing off");
    std::optional<serving::GenerateRequest::Handoff> handoff = req.handoff;

    auto sink = std::make_shared<StreamSink>();
    // Named before submit so that a Cancel racing the submit is not lost.
    if (!id.empty()) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!running_.emplace(id, sink).second)
        return invalid_argument("request_id '" + id.substr(0, 64) + "' is already running");
    }
    struct Unname {
      WorkerService* self;
      const std::string& id;
      ~Unname() {
        if (id.empty()) return;
        std::lock_guard<std::mutex> lock(self->mu_);
        self->running_.erase(id);
      }
    } unname{this, id};
    if (req.resume && !req.resume->handoff_id.empty()) {
      // Taken before submit: a transfer the engine may import is one that
      // arrived whole and was not claimed before.
      const std::string& hid = req.resume->handoff_id;
      auto kv =
          options_.handoff_store
              ? options_.handoff_store->take(hid)
              : Result<std::shared_ptr<const kv::ImportedKv>>(cairn::Status::not_found("no store"));
      if (!kv.is_ok())
        return rpc::to_grpc_status(cairn::Status::error(
            StatusCode::Unavailable,
            "handoff " + hid.substr(0, 64) + " not found: expired, refused or never arrived",
            "resume"));
      req.resume->kv = std::move(*kv);
      if (options_.handoff_counters) ++options_.handoff_counters->resumed;
    }

    auto submitted = backend_.submit(std::move(parsed).value(), sink);
    if (!submitted.is_ok()) return rpc::to_grpc_status(submitted.status());
    const serving::RequestId rid = *submitted;

    bool cancelled = false;  // backend.cancel already called
    // Destroyed (cancelling an unfinished push) on every way out.
    std::unique_ptr<KvPusher> pusher;
    auto cancel_once = [&] {
      if (!cancelled) backend_.cancel(rid);
      cancelled = true;
      if (pusher) pusher->cancel();
    };
    for (;;) {
      std::deque<Event> events = sink->take(kPollInterval);
      if (ctx->IsCancelled()) {
        // The client went away, its deadline passed or the server is
        // shutting down: free the request's sequence and KV blocks now.
        cancel_once();
        return call_cancelled("the call was cancelled");
      }
      // A Cancel by id: the engine answers with a "cancelled" finish, which
      // is streamed like any other end.
      if (sink->cancel_requested()) cancel_once();
      for (auto& ev : events) {
        v1::GenerateEvent out;
        bool last = false;
        if (auto* start = std::get_if<serving::OutputSyntax>(&ev)) {
          out = rpc::to_proto(*start);
        } else if (auto* tok = std::get_if<serving::TokenEvent>(&ev)) {
          out = rpc::to_proto(*tok);
        } else if (auto* run = std::get_if<kv::KvRun>(&ev)) {
          if (!handoff) continue;  // not asked for: never pushed anywhere
          if (!pusher)
            pusher =
                std::make_unique<KvPusher>(channel_to(handoff->peer), handoff->id, msg->model(),
                                           std::chrono::milliseconds(options_.handoff_timeout_ms),
                                           options_.kv_push_chunk_bytes);
          pusher->push(std::move(*run));
          continue;
        } else if (auto* fin = std::get_if<serving::FinishEvent>(&ev)) {
          if (handoff && fin->reason == "handoff") {
            fin->handoff_error = pusher ? pusher->finish() : "the engine exported no K/V rows";
            count_handoff(fin->handoff_error, pusher.get());
          } else if (pusher) {
            pusher->cancel();  // ended at the first token: the decode side needs nothing
          }
          out = rpc::to_proto(*fin);
          last = true;
        } else {
          out = rpc::to_proto(std::get<cairn::Status>(ev));
          last = true;
        }
        if (!writer->Write(out)) {
          cancel_once();
          return call_cancelled("the client stopped reading");
        }
        if (last) return grpc::Status::OK;
      }
    }
  }

  // Failures of the request itself travel in the reply's error (kind, message
  // and param intact); a gRPC error status means the call itself failed.
  grpc::Status Embed(grpc::ServerContext* ctx, const v1::EmbedRequest* msg,
                     v1::EmbedResponse* out) override {
    auto parsed = rpc::from_proto(*msg);
    if (!parsed.is_ok()) {
      *out->mutable_error() = rpc::to_proto_error(parsed.status());
      return grpc::Status::OK;
    }
    auto waiter = std::make_shared<EmbedWaiter>();
    auto submitted = backend_.embed(std::move(parsed).value(), waiter);
    if (!submitted.is_ok()) {
      *out->mutable_error() = rpc::to_proto_error(submitted.status());
      return grpc::Status::OK;
    }
    while (!waiter->wait(kPollInterval)) {
      if (ctx->IsCancelled()) {
        // The controller gave up (cancel, deadline, or it went away): the
        // engine drops the request; the waiter outlives this handler.
        backend_.cancel(*submitted);
        return call_cancelled("the call was cancelled");
      }
    }
    auto r = waiter->take();
    if (!r.is_ok())
      *out->mutable_error() = rpc::to_proto_error(r.status());
    else
      *out = rpc::to_proto(*r);
    return grpc::Status::OK;
  }

  grpc::Status Cancel(grpc::ServerContext*, const v1::CancelRequest* msg,
                      v1::CancelResponse* out) override {
    std::shared_ptr<StreamSink> sink;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = running_.find(msg->request_id());
      if (it != running_.end()) sink = it->second;
    }
    if (sink) sink->request_cancel();
    out->set_found(sink != nullptr);
    return grpc::Status::OK;
  }

  grpc::Status Status(grpc::ServerContext*, const v1::StatusRequest*,
                      v1::WorkerStatus* out) override {
    *out = rpc::worker_status(backend_, options_.role, options_.handoff_counters);
    return grpc::Status::OK;
  }

  // The decode side: one transfer's rows into the store. Refusals travel in
  // the reply's error; whatever did not end with `last` is dropped.
  grpc::Status PushKv(grpc::ServerContext* ctx, grpc::ServerReader<v1::KvPush>* reader,
                      v1::KvPushReply* reply) override {
    auto refuse = [&](const cairn::Status& st) {
      *reply->mutable_error() = rpc::to_proto_error(st);
      return grpc::Status::OK;
    };
    serving::HandoffStore* store = options_.handoff_store;
    if (!store)
      return refuse(cairn::Status::unavailable("this worker takes no K/V handoffs (--role " +
                                               options_.role + ")"));
    v1::KvPush msg;
    if (!reader->Read(&msg)) return refuse(cairn::Status::invalid_argument("no K/V message came"));
    if (msg.handoff_id().empty() || !msg.has_header())
      return refuse(cairn::Status::invalid_argument(
          "the first K/V message must carry the handoff id and the header"));
    const std::string id = msg.handoff_id();
    auto header = rpc::from_proto(msg.header());
    if (!header.is_ok()) {
      if (options_.handoff_counters) ++options_.handoff_counters->expired;
      return refuse(header.status());
    }
    const kv::KvGeometry geometry = header->geometry;
    CAIRN_GRPC_TRY(store->begin(id, header->model, geometry, std::move(header->prompt)));
    bool whole = false;
    struct DropUnlessWhole {
      serving::HandoffStore* store;
      const std::string& id;
      const bool& whole;
      ~DropUnlessWhole() {
        if (!whole) store->drop_incomplete(id);
      }
    } guard{store, id, whole};
    int64_t bytes = 0;
    for (bool first = true;; first = false) {
      if (!first && !reader->Read(&msg)) break;
      if (ctx->IsCancelled()) return call_cancelled("the call was cancelled");
      if (whole) {
        (void)store->take(id);  // a sender that goes on after `last` is not trusted
        return refuse(cairn::Status::invalid_argument("K/V rows came after the last one"));
      }
      if (!first && (msg.has_header() || (!msg.handoff_id().empty() && msg.handoff_id() != id)))
        return refuse(cairn::Status::invalid_argument(
            "only the first K/V message may carry a header or another handoff id"));
      if (msg.n() < 1 || msg.first() < 0)
        return refuse(cairn::Status::invalid_argument(
            "a K/V message must cover at least one position from 0 on"));
      // The geometry equals the local one (begin), so bytes_for cannot overflow.
      if ((int64_t)msg.rows().size() != geometry.bytes_for(msg.n()))
        return refuse(cairn::Status::invalid_argument(
            "a K/V message of " + std::to_string(msg.n()) + " positions has " +
            std::to_string(msg.rows().size()) + " bytes, expected " +
            std::to_string(geometry.bytes_for(msg.n()))));
      kv::KvRows rows;
      rows.first = msg.first();
      rows.n = msg.n();
      rows.bytes.swap(*msg.mutable_rows());  // the message is read anew each time
      bytes += (int64_t)rows.bytes.size();
      CAIRN_GRPC_TRY(store->append(id, std::move(rows)));
      if (msg.last()) {
        CAIRN_GRPC_TRY(store->finish(id));
        whole = true;
      }
    }
    if (!whole)
      return refuse(cairn::Status::invalid_argument("the K/V stream ended before its last row"));
    reply->set_bytes(bytes);
    return grpc::Status::OK;
  }

  grpc::Status Tokenize(grpc::ServerContext*, const v1::TokenizeRequest* msg,
                        v1::TokenizeResponse* out) override {
    const bool parse_special = msg->has_parse_special() ? msg->parse_special() : true;
    auto r = backend_.tokenize(msg->model(), msg->text(), msg->add_special(), parse_special);
    if (!r.is_ok()) {
      *out->mutable_error() = rpc::to_proto_error(r.status());
    } else {
      out->mutable_tokens()->Add(r->begin(), r->end());
    }
    return grpc::Status::OK;
  }

  grpc::Status Detokenize(grpc::ServerContext*, const v1::DetokenizeRequest* msg,
                          v1::DetokenizeResponse* out) override {
    if (static_cast<size_t>(msg->tokens_size()) > rpc::kMaxPromptTokens)
      return invalid_argument("more than " + std::to_string(rpc::kMaxPromptTokens) + " tokens");
    std::vector<serving::Token> ids(msg->tokens().begin(), msg->tokens().end());
    if (msg->pieces()) {
      auto p = backend_.token_pieces(msg->model(), ids);
      if (!p.is_ok()) {
        *out->mutable_error() = rpc::to_proto_error(p.status());
      } else {
        for (auto& piece : *p) out->add_pieces(std::move(piece));
      }
      return grpc::Status::OK;
    }
    auto r = backend_.detokenize(msg->model(), ids);
    if (!r.is_ok()) {
      *out->mutable_error() = rpc::to_proto_error(r.status());
    } else {
      out->set_text(*r);
    }
    return grpc::Status::OK;
  }

 private:
  // One channel per decode worker, kept: a push per request must not pay a
  // connection each time.
  std::shared_ptr<grpc::Channel> channel_to(const std::string& peer) {
    std::lock_guard<std::mutex> lock(mu_);
    // Peers come from requests: the cache stays bounded (calls in flight
    // keep their channel alive).
    if (channels_.size() >= kMaxCachedChannels && !channels_.count(peer)) channels_.clear();
    auto& ch = channels_[peer];
    if (!ch) {
      grpc::ChannelArguments args;
      args.SetMaxSendMessageSize(64 << 20);  // a chunk plus the header's prompt
      args.SetMaxReceiveMessageSize(1 << 20);
      ch = grpc::CreateCustomChannel(peer, grpc::InsecureChannelCredentials(), args);
    }
    return ch;
  }

  void count_handoff(const std::string& error, const KvPusher* pusher) {
    serving::HandoffCounters* c = options_.handoff_counters;
    if (!c) return;
    if (!error.empty()) {
      ++c->send_failed;
      return;
    }
    ++c->sent;
    c->bytes_sent += (uint64_t)pusher->bytes();
    c->observe_seconds(pusher->seconds());
  }

  serving::Backend& backend_;
  WorkerServiceOptions options_;
  std::map<std::string, std::shared_ptr<grpc::Channel>> channels_;  // under mu_
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<StreamSink>> running_;  // by the caller's request_id
};

}  // namespace

std::unique_ptr<grpc::Service> make_worker_service(serving::Backend& backend) {
  return std::make_unique<WorkerService>(backend, WorkerServiceOptions{});
}

std::unique_ptr<grpc::Service> make_worker_service(serving::Backend& backend,
                                                   WorkerServiceOptions options) {
  return std::make_unique<WorkerService>(backend, std::move(options));
}

}  // namespace cairn::api
