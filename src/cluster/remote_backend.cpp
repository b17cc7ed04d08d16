// cluster/remote_backend.cpp — a Backend that forwards to one worker over gRPC.
#include "cluster/remote_backend.h"

#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <map>
#include <mutex>
#include <random>

#include "cairn/v1/worker.grpc.pb.h"
#include "rpc/convert.h"

namespace cairn::cluster {

namespace {

std::chrono::system_clock::time_point deadline_after(double seconds) {
  return std::chrono::system_clock::now() +
         std::chrono::microseconds(static_cast<int64_t>(seconds * 1e6));
}

}  // namespace

// A call in flight, as cancel() and the destructor see it.
class Call {
 public:
  virtual ~Call() = default;
  virtual void cancel() = 0;
};

// One Generate call. Keeps itself alive (self_) until gRPC reports OnDone;
// cancel() holds another reference while it calls TryCancel.
class GenerateCall final : public Call, public grpc::ClientReadReactor<v1::GenerateEvent> {
 public:
  GenerateCall(RemoteBackend::Impl* owner, serving::RequestId id,
               std::shared_ptr<serving::EventSink> sink);

  void start(std::shared_ptr<GenerateCall> self, v1::Worker::Stub* stub, double timeout_s) {
    self_ = std::move(self);
    ctx_.set_deadline(deadline_after(timeout_s));
    stub->async()->Generate(&ctx_, &request_, this);
    StartRead(&event_);
    StartCall();
  }

  void cancel() override {
    cancelled_.store(true);
    ctx_.TryCancel();
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // the stream ended: OnDone follows with the status
    if (!ended_) {
      switch (event_.event_case()) {
        case v1::GenerateEvent::kStart:
          sink_->on_start(rpc::from_proto(event_.start()));
          break;
        case v1::GenerateEvent::kToken:
          sink_->on_token(rpc::from_proto(event_.token()));
          break;
        case v1::GenerateEvent::kFinish:
          ended_ = true;
          sink_->on_finish(rpc::from_proto(event_.finish()));
          break;
        case v1::GenerateEvent::kError:
          ended_ = true;
          sink_->on_error(rpc::from_proto(event_.error()));
          break;
        default:
          break;  // an event kind from a newer worker: skip it
      }
    }
    StartRead(&event_);
  }

  void OnDone(const grpc::Status& status) override;

  v1::GenerateRequest request_;

 private:
  // Declared first, so destroyed last: tells the owner once the ClientContext
  // (which holds a reference on the channel's completion queue) is gone.
  struct Alive {
    RemoteBackend::Impl* owner;
    ~Alive();
  } alive_;
  RemoteBackend::Impl* owner_;
  serving::RequestId id_;
  std::shared_ptr<serving::EventSink> sink_;
  grpc::ClientContext ctx_;
  v1::GenerateEvent event_;
  bool ended_ = false;  // the sink got its last event
  std::atomic<bool> cancelled_{false};
  std::shared_ptr<GenerateCall> self_;
};

struct RemoteBackend::Impl {
  RemoteBackendOptions options;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Worker::Stub> stub;
  std::string id_prefix;
  std::atomic<uint64_t> next_id{1};

  mutable std::mutex mu;
  std::condition_variable idle;
  std::map<serving::RequestId, std::shared_ptr<Call>> calls;  // not yet done
  int objects = 0;  // GenerateCall and EmbedCall objects not yet destroyed
  bool stopping = false;

  void call_done(serving::RequestId id) {
    std::lock_guard<std::mutex> lock(mu);
    calls.erase(id);
  }
  void object_gone() {
    std::lock_guard<std::mutex> lock(mu);
    if (--objects == 0) idle.notify_all();  // under the lock: ~RemoteBackend may be waiting
  }

  std::optional<v1::WorkerStatus> status() const {
    grpc::ClientContext ctx;
    ctx.set_deadline(deadline_after(options.rpc_timeout_s));
    v1::StatusRequest req;
    v1::WorkerStatus st;
    if (!stub->Status(&ctx, req, &st).ok()) return std::nullopt;
    return st;
  }
};

// The status of a failed call as the client should see it; tells the owner
// when the worker could not be reached. Shared by Generate and Embed.
static Status call_failure(RemoteBackend::Impl* owner, const grpc::Status& status) {
  // UNAVAILABLE with the connection no longer up: the worker is gone or
  // unreachable. (A worker that is up but refuses, e.g. a full queue,
  // answers UNAVAILABLE over a READY channel and is not dropped.)
  if (status.error_code() == grpc::StatusCode::UNAVAILABLE && owner->options.on_broken &&
      owner->channel->GetState(false) != GRPC_CHANNEL_READY)
    owner->options.on_broken();
  Status err = rpc::from_grpc_status(status);
  if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED)
    err = Status::error(err.code(), "the request did not finish in time", err.param());
  else if (status.error_code() == grpc::StatusCode::UNAVAILABLE)
    err = err.with_context("worker " + owner->options.address + " failed");
  return err;
}

// One unary Embed call. gRPC's callback holds a reference (self) until it
// has run, so the object outlives the call; cancel() cancels the call.
class EmbedCall final : public Call {
 public:
  EmbedCall(RemoteBackend::Impl* owner, serving::RequestId id,
            std::shared_ptr<serving::EmbedSink> sink)
      : alive_{owner}, owner_(owner), id_(id), sink_(std::move(sink)) {
    std::lock_guard<std::mutex> lock(owner->mu);
    ++owner->objects;
  }

  void start(std::shared_ptr<EmbedCall> self, v1::Worker::Stub* stub, double timeout_s) {
    ctx_.set_deadline(deadline_after(timeout_s));
    stub->async()->Embed(&ctx_, &request_, &response_,
                         [self = std::move(self)](grpc::Status status) mutable {
                           self->done(status);
                           self.reset();  // may delete the call: nothing below
                         });
  }

  void cancel() override {
    cancelled_.store(true);
    ctx_.TryCancel();
  }

  v1::EmbedRequest request_;

 private:
  void done(const grpc::Status& status) {
    if (cancelled_.load()) {
      sink_->on_error(Status::error(StatusCode::Cancelled, "the request was cancelled"));
    } else if (!status.ok()) {
      sink_->on_error(call_failure(owner_, status));
    } else if (response_.has_error() && !response_.error().message().empty()) {
      sink_->on_error(rpc::from_proto(response_.error()));
    } else {
      sink_->on_done(rpc::from_proto(response_));
    }
    sink_.reset();
    owner_->call_done(id_);
  }

  // Declared first, so destroyed last (as in GenerateCall).
  struct Alive {
    RemoteBackend::Impl* owner;
    ~Alive() { owner->object_gone(); }
  } alive_;
  RemoteBackend::Impl* owner_;
  serving::RequestId id_;
  std::shared_ptr<serving::EmbedSink> sink_;
  grpc::ClientContext ctx_;
  v1::EmbedResponse response_;
  std::atomic<bool> cancelled_{false};
};

GenerateCall::GenerateCall(RemoteBackend::Impl* owner, serving::RequestId id,
                           std::shared_ptr<serving::EventSink> sink)
    : alive_{owner}, owner_(owner), id_(id), sink_(std::move(sink)) {
  std::lock_guard<std::mutex> lock(owner->mu);
  ++owner->objects;
}

GenerateCall::Alive::~Alive() { owner->object_gone(); }

void GenerateCall::OnDone(const grpc::Status& status) {
  if (!ended_) {
    ended_ = true;
    if (cancelled_.load()) {
      serving::FinishEvent fin;
      fin.reason = "cancelled";
      sink_->on_finish(fin);
    } else if (status.ok()) {
      sink_->on_error(Status::internal("the worker ended the stream without a result"));
    } else {
      sink_->on_error(call_failure(owner_, status));
    }
  }
  sink_.reset();
  owner_->call_done(id_);
  self_.reset();  // may delete this: nothing below
}

RemoteBackend::RemoteBackend(RemoteBackendOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  grpc::ChannelArguments args;
  // Each RemoteBackend gets its own connection state: a worker that comes back
  // at the same address is not held up by the backoff of a dead one.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  args.SetMaxReceiveMessageSize(64 << 20);
  impl_->channel =
      grpc::CreateCustomChannel(impl_->options.address, grpc::InsecureChannelCredentials(), args);
  impl_->stub = v1::Worker::NewStub(impl_->channel);
  std::random_device rd;
  char buf[32];
  std::snprintf(buf, sizeof buf, "c%08x%08x-", static_cast<unsigned>(rd()),
                static_cast<unsigned>(rd()));
  impl_->id_prefix = buf;
}

RemoteBackend::~RemoteBackend() {
  std::vector<std::shared_ptr<Call>> live;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stopping = true;
    for (auto& [id, call] : impl_->calls) live.push_back(call);
  }
  for (auto& call : live) call->cancel();
  live.clear();
  // Every call object, ClientContext included, must be gone before the
  // channel (and the completion queue its calls reference) is destroyed.
  std::unique_lock<std::mutex> lock(impl_->mu);
  impl_->idle.wait(lock, [&] { return impl_->objects == 0; });
}

Result<serving::RequestId> RemoteBackend::submit(serving::GenerateRequest req,
                                                 std::shared_ptr<serving::EventSink> sink) {
  const serving::RequestId id = impl_->next_id.fetch_add(1);
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    if (impl_->stopping) return Status::unavailable("the connection to the worker is closing");
  }
  auto call = std::make_shared<GenerateCall>(impl_.get(), id, std::move(sink));
  call->request_ = rpc::to_proto(req, impl_->id_prefix + std::to_string(id));
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->calls.emplace(id, call);
  }
  call->start(call, impl_->stub.get(), impl_->options.request_timeout_s);
  return id;
}

Result<serving::RequestId> RemoteBackend::embed(serving::EmbedRequest req,
                                                std::shared_ptr<serving::EmbedSink> sink) {
  if (!sink) return Status::internal("no embedding sink");
  const serving::RequestId id = impl_->next_id.fetch_add(1);
  auto call = std::make_shared<EmbedCall>(impl_.get(), id, std::move(sink));
  call->request_ = rpc::to_proto(req);
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    // Checked under the lock that registers the call, so the destructor
    // either sees it (and cancels it) or this refuses.
    if (impl_->stopping) return Status::unavailable("the connection to the worker is closing");
    impl_->calls.emplace(id, call);
  }
  call->start(call, impl_->stub.get(), impl_->options.request_timeout_s);
  return id;
}

void RemoteBackend::cancel(serving::RequestId id) {
  std::shared_ptr<Call> call;
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    auto it = impl_->calls.find(id);
    if (it == impl_->calls.end()) return;
    call = it->second;
  }
  call->cancel();  // outside the lock: gRPC may run callbacks that take it
}

std::vector<serving::ModelInfo> RemoteBackend::models() const {
  std::vector<serving::ModelInfo> out;
  if (auto st = impl_->status())
    for (const auto& m : st->models()) out.push_back(rpc::from_proto(m));
  return out;
}

serving::Health RemoteBackend::health() const {
  if (auto st = impl_->status()) return rpc::health_of(*st);
  return serving::Health{};
}

serving::BackendStats RemoteBackend::stats() const {
  if (auto st = impl_->status()) return rpc::stats_of(*st);
  return serving::BackendStats{};
}

Result<std::vector<serving::Token>> RemoteBackend::tokenize(const std::string& model,
                                                            const std::string& text,
                                                            bool add_special,
                                                            bool parse_special) const {
  grpc::ClientContext ctx;
  ctx.set_deadline(deadline_after(impl_->options.rpc_timeout_s));
  v1::TokenizeRequest req;
  req.set_model(model);
  req.set_text(text);
  req.set_add_special(add_special);
  req.set_parse_special(parse_special);
  v1::TokenizeResponse resp;
  grpc::Status s = impl_->stub->Tokenize(&ctx, req, &resp);
  if (!s.ok()) return rpc::from_grpc_status(s);
  if (resp.has_error() && !resp.error().message().empty()) return rpc::from_proto(resp.error());
  return std::vector<serving::Token>(resp.tokens().begin(), resp.tokens().end());
}

Result<std::string> RemoteBackend::detokenize(const std::string& model,
                                              const std::vector<serving::Token>& tokens) const {
  grpc::ClientContext ctx;
  ctx.set_deadline(deadline_after(impl_->options.rpc_timeout_s));
  v1::DetokenizeRequest req;
  req.set_model(model);
  for (serving::Token t : tokens) req.add_tokens(t);
  v1::DetokenizeResponse resp;
  grpc::Status s = impl_->stub->Detokenize(&ctx, req, &resp);
  if (!s.ok()) return rpc::from_grpc_status(s);
  if (resp.has_error() && !resp.error().message().empty()) return rpc::from_proto(resp.error());
  return resp.text();
}

Result<std::vector<std::string>> RemoteBackend::token_pieces(
    const std::string& model, const std::vector<serving::Token>& tokens) const {
  grpc::ClientContext ctx;
  ctx.set_deadline(deadline_after(impl_->options.rpc_timeout_s));
  v1::DetokenizeRequest req;
  req.set_model(model);
  req.set_pieces(true);
  for (serving::Token t : tokens) req.add_tokens(t);
  v1::DetokenizeResponse resp;
  grpc::Status s = impl_->stub->Detokenize(&ctx, req, &resp);
  if (!s.ok()) return rpc::from_grpc_status(s);
  if (resp.has_error() && !resp.error().message().empty()) return rpc::from_proto(resp.error());
  if (resp.pieces_size() != static_cast<int>(tokens.size()))
    return Status::unavailable("the worker gave no token pieces (an older worker?)");
  return std::vector<std::string>(resp.pieces().begin(), resp.pieces().end());
}

void RemoteBackend::start_draining() {
  std::lock_guard<std::mutex> lock(impl_->mu);
  impl_->stopping = true;
}

const std::string& RemoteBackend::address() const { return impl_->options.address; }

int RemoteBackend::active_calls() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return static_cast<int>(impl_->calls.size());
}

}  // namespace cairn::cluster
