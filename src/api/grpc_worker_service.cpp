// api/grpc_worker_service.cpp — the cairn.v1.Worker service a controller calls.
#include "api/grpc_worker_service.h"

#include <grpcpp/grpcpp.h>

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

using Event =
    std::variant<serving::OutputSyntax, serving::TokenEvent, serving::FinishEvent, cairn::Status>;

// How often a waiting handler looks at its call's cancellation: gRPC offers
// no wake-up on cancel to a sync handler, so this bounds how long a request
// whose client went away keeps running.
constexpr auto kPollInterval = std::chrono::milliseconds(20);

// The hand-off from the engine thread to one Generate handler. The engine
// only locks, appends and notifies; the handler converts and writes.
class StreamSink final : public serving::EventSink {
 public:
  void on_start(const serving::OutputSyntax& syntax) override { push(syntax); }
  void on_token(const serving::TokenEvent& ev) override { push(ev); }
  void on_finish(const serving::FinishEvent& ev) override { push(ev); }
  void on_error(const cairn::Status& err) override { push(err); }

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

grpc::Status invalid_argument(const std::string& message) {
  return rpc::to_grpc_status(cairn::Status::invalid_argument(message));
}

grpc::Status call_cancelled(const std::string& message) {
  return rpc::to_grpc_status(cairn::Status::error(StatusCode::Cancelled, message));
}

class WorkerService final : public v1::Worker::Service {
 public:
  explicit WorkerService(serving::Backend& backend) : backend_(backend) {}

  grpc::Status Generate(grpc::ServerContext* ctx, const v1::GenerateRequest* msg,
                        grpc::ServerWriter<v1::GenerateEvent>* writer) override {
    const std::string& id = msg->request_id();
    if (id.size() > kMaxRequestIdBytes)
      return invalid_argument("request_id is longer than " + std::to_string(kMaxRequestIdBytes) +
                              " bytes");
    auto parsed = rpc::from_proto(*msg);
    if (!parsed.is_ok()) return rpc::to_grpc_status(parsed.status());

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

    auto submitted = backend_.submit(std::move(parsed).value(), sink);
    if (!submitted.is_ok()) return rpc::to_grpc_status(submitted.status());
    const serving::RequestId rid = *submitted;

    bool cancelled = false;  // backend.cancel already called
    auto cancel_once = [&] {
      if (!cancelled) backend_.cancel(rid);
      cancelled = true;
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
        } else if (auto* fin = std::get_if<serving::FinishEvent>(&ev)) {
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
    *out = rpc::worker_status(backend_);
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
  serving::Backend& backend_;
  std::mutex mu_;
  std::map<std::string, std::shared_ptr<StreamSink>> running_;  // by the caller's request_id
};

}  // namespace

std::unique_ptr<grpc::Service> make_worker_service(serving::Backend& backend) {
  return std::make_unique<WorkerService>(backend);
}

}  // namespace cairn::api
