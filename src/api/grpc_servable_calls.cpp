// api/grpc_servable_calls.cpp — Serving calls of servables: values in, the runtime's results out.
#include "api/grpc_servable_calls.h"

#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "api/grpc_serving_common.h"

namespace cairn::api {
namespace {

using namespace grpc_serving;  // NOLINT: the shared helpers of the Serving service

// The request's instances as the runtime takes them. An instance whose values
// do not convert keeps its error and is left out of the runtime's call; the
// others run, and `index` maps the call's instances back to the request's.
struct ServableInputs {
  std::vector<values::Instance> run;
  std::vector<size_t> index;   // run[k] is request instance index[k]
  std::vector<Status> errors;  // per request instance; ok: it runs
};

// The request as a whole, before anything is converted (the runtime checks
// the count again; this keeps a huge request from being converted first).
Status check_servable_request(const v1::PredictRequest& req) {
  if (req.instances_size() == 0) return Status::invalid_argument("the request has no instances");
  if (static_cast<size_t>(req.instances_size()) > servable::kMaxPredictInstances)
    return Status::invalid_argument(
        "the request has " + std::to_string(req.instances_size()) + " instances, at most " +
        std::to_string(servable::kMaxPredictInstances) + " are allowed");
  return Status::ok();
}

ServableInputs convert_instances(const v1::PredictRequest& req) {
  ServableInputs in;
  const size_t n = static_cast<size_t>(req.instances_size());
  in.errors.resize(n);
  for (size_t i = 0; i < n; ++i) {
    auto inst = rpc::from_proto(req.instances(static_cast<int>(i)));
    if (!inst.is_ok()) {
      in.errors[i] = call_error(inst.status()).with_context("instance " + std::to_string(i));
      continue;
    }
    in.run.push_back(std::move(inst).value());
    in.index.push_back(i);
  }
  return in;
}

// What a servable call shares between its reactor (gRPC threads) and the
// runtime's sink (the runtime's threads). As in CallBase, the reactor and the
// reply are touched only until Finish, which is called once, outside the lock.
class ServableCall : public std::enable_shared_from_this<ServableCall> {
 public:
  ServableCall(servable::ServableRuntime& runtime, const v1::PredictRequest& req,
               std::vector<Status> errors, std::vector<size_t> index)
      : runtime_(runtime),
        spec_(req.servable_spec()),
        errors_(std::move(errors)),
        index_(std::move(index)),
        position_(errors_.size(), SIZE_MAX) {
    for (size_t k = 0; k < index_.size(); ++k) position_[index_[k]] = k;
  }
  virtual ~ServableCall() = default;

  // Text of the runtime's instance k (a position in `index`).
  virtual void on_text(size_t k, const std::string& output, const std::string& text) = 0;
  virtual void on_done(uint64_t version, std::vector<servable::InstanceResult> results) = 0;
  // The runtime refused the whole call.
  virtual void fail(const Status& err) = 0;

  // Starts the runtime's call (or, with no instance left to run, ends this
  // one at once).
  void start(std::vector<values::Instance> run, bool stream);
  void cancel_all();

 protected:
  class Sink;
  virtual void finish_cancelled() = 0;  // called once, outside the lock

  // The reply instance for request instance i, or its error. Reads only what
  // is fixed before the runtime call starts, so it needs no lock.
  // `results` are the runtime's, in the order of index_.
  Status fill_instance(size_t i, std::vector<servable::InstanceResult>& results,
                       v1::Instance& out) const {
    if (!errors_[i].is_ok()) return errors_[i];
    const size_t k = position_[i];
    if (k >= results.size())
      return Status::internal("the servable gave no result for instance " + std::to_string(i));
    if (!results[k].is_ok()) return call_error(results[k].status());
    out = rpc::to_proto(*results[k]);
    return Status::ok();
  }
  void set_reply_spec(v1::PredictReply& reply, uint64_t version) const {
    auto* spec = reply.mutable_servable_spec();
    spec->set_name(spec_.name());
    spec->set_method_name(spec_.method_name());
    spec->set_version_number(version);
  }

  servable::ServableRuntime& runtime_;
  const v1::ServableSpec spec_;
  const std::vector<Status> errors_;  // per request instance
  const std::vector<size_t> index_;   // the runtime's instance k is request instance index_[k]
  std::vector<size_t> position_;      // per request instance: its k, or SIZE_MAX (fixed)

  std::mutex mu_;
  std::optional<uint64_t> id_;  // the runtime's call, once predict returned
  bool done_ = false;           // on_done (or a failure) arrived
  bool over_ = false;           // Finish called or about to be
};

class ServableCall::Sink final : public servable::PredictSink {
 public:
  explicit Sink(std::shared_ptr<ServableCall> call) : call_(std::move(call)) {}
  void on_text(size_t instance, const std::string& output, const std::string& text) override {
    call_->on_text(instance, output, text);
  }
  void on_done(uint64_t version, std::vector<servable::InstanceResult> results) override {
    call_->on_done(version, std::move(results));
  }

 private:
  std::shared_ptr<ServableCall> call_;
};

void ServableCall::start(std::vector<values::Instance> run, bool stream) {
  if (run.empty()) {  // every instance failed to convert: nothing to run
    on_done(spec_.version_number(), {});
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (over_) return;  // cancelled before it started
  }
  servable::PredictCall call;
  call.servable = spec_.name();
  call.version = spec_.version_number();
  call.method = spec_.method_name();
  call.instances = std::move(run);
  call.stream = stream;
  auto id = runtime_.predict(std::move(call), std::make_shared<Sink>(shared_from_this()));
  if (!id.is_ok()) {
    fail(call_error(id.status()));
    return;
  }
  bool cancel_now = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    id_ = *id;
    cancel_now = over_ && !done_;  // cancelled while predict ran
  }
  if (cancel_now) runtime_.cancel(*id);
}

void ServableCall::cancel_all() {
  std::optional<uint64_t> running;
  bool finish = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!done_) running = id_;
    finish = !over_;
    over_ = true;
  }
  // Outside the lock: the runtime may deliver on_done inline.
  if (running) runtime_.cancel(*running);
  if (finish) finish_cancelled();
}

// Predict: one reply when the runtime's call is done.
class ServableUnaryCall final : public ServableCall {
 public:
  ServableUnaryCall(servable::ServableRuntime& runtime, const v1::PredictRequest& req,
                    ServableInputs& in, grpc::ServerUnaryReactor* reactor, v1::PredictReply* reply)
      : ServableCall(runtime, req, std::move(in.errors), std::move(in.index)),
        reactor_(reactor),
        reply_(reply) {}

  void on_text(size_t, const std::string&, const std::string&) override {}
  void on_done(uint64_t version, std::vector<servable::InstanceResult> results) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
      if (over_) return;
      over_ = true;
      set_reply_spec(*reply_, version);
      std::vector<Status> errors(errors_.size());
      bool any_error = false;
      for (size_t i = 0; i < errors_.size(); ++i) {
        errors[i] = fill_instance(i, results, *reply_->add_instances());
        any_error = any_error || !errors[i].is_ok();
      }
      if (any_error)
        for (const auto& e : errors) {
          auto* m = reply_->add_error_msg();  // code 0, no message: this one succeeded
          if (!e.is_ok()) set_error(*m, e);
        }
    }
    reactor_->Finish(grpc::Status::OK);
  }
  void fail(const Status& err) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
      if (over_) return;
      over_ = true;
      reply_->mutable_servable_spec()->CopyFrom(spec_);
      set_error(*reply_->add_error_msg(), err);
    }
    reactor_->Finish(grpc::Status::OK);
  }

 private:
  void finish_cancelled() override { reactor_->Finish(cancelled_status()); }

  grpc::ServerUnaryReactor* reactor_;
  v1::PredictReply* reply_;
};

using ServableUnaryReactor = CancellableReactor<grpc::ServerUnaryReactor, ServableUnaryCall>;

// PredictStream: text replies as the runtime streams, then one final reply
// per instance; written one at a time, as StreamCall does.
class ServableStreamCall final : public ServableCall {
 public:
  ServableStreamCall(servable::ServableRuntime& runtime, const v1::PredictRequest& req,
                     ServableInputs& in, grpc::ServerWriteReactor<v1::PredictReply>* reactor)
      : ServableCall(runtime, req, std::move(in.errors), std::move(in.index)), reactor_(reactor) {}

  void on_text(size_t k, const std::string& output, const std::string& text) override {
    if (k >= index_.size()) return;  // not an instance of this call
    v1::PredictReply reply;
    reply.set_instance_index(static_cast<uint32_t>(index_[k]));
    (*reply.add_instances()->mutable_items())[output].set_string_value(text);
    std::vector<v1::PredictReply> one;
    one.push_back(std::move(reply));
    push(std::move(one), false);
  }
  void on_done(uint64_t version, std::vector<servable::InstanceResult> results) override {
    std::vector<v1::PredictReply> finals(errors_.size());
    for (size_t i = 0; i < finals.size(); ++i) {
      auto& reply = finals[i];
      set_reply_spec(reply, version);
      reply.set_instance_index(static_cast<uint32_t>(i));
      reply.set_final(true);
      v1::Instance inst;
      Status err = fill_instance(i, results, inst);
      if (err.is_ok())
        *reply.add_instances() = std::move(inst);
      else
        set_error(*reply.add_error_msg(), err);
    }
    push(std::move(finals), true);
  }
  void fail(const Status& err) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      done_ = true;
      if (over_) return;
      over_ = true;  // nothing was written: predict refused before any event
    }
    reactor_->Finish(rpc::to_grpc_status(err));
  }

  // gRPC finished the previous write.
  void write_done(bool ok) {
    const v1::PredictReply* next = nullptr;
    bool finish_ok = false;
    bool finish_cancel = false;
    std::optional<uint64_t> running;
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.pop_front();
      if (!ok || cancel_pending_) {
        // The stream broke or was cancelled while this write was out.
        finish_cancel = true;
        over_ = true;
        if (!ok && !done_) running = id_;
      } else if (!queue_.empty()) {
        next = &queue_.front();
      } else {
        writing_ = false;
        finish_ok = done_ && !over_;
        if (finish_ok) over_ = true;
      }
    }
    if (next) {
      reactor_->StartWrite(next);
    } else if (finish_ok) {
      reactor_->Finish(grpc::Status::OK);
    } else if (finish_cancel) {
      if (running) runtime_.cancel(*running);
      reactor_->Finish(cancelled_status());
    }
  }

 private:
  void push(std::vector<v1::PredictReply> replies, bool last) {
    const v1::PredictReply* start = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (done_) return;
      if (last) done_ = true;
      if (over_) return;
      for (auto& r : replies) queue_.push_back(std::move(r));
      if (!writing_ && !queue_.empty()) {
        writing_ = true;
        start = &queue_.front();
      }
    }
    if (start) reactor_->StartWrite(start);
  }
  void finish_cancelled() override {
    bool now = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      // With a write out, gRPC reports it done (not ok) and write_done finishes.
      if (writing_)
        cancel_pending_ = true;
      else
        now = true;
    }
    if (now) reactor_->Finish(cancelled_status());
  }

  grpc::ServerWriteReactor<v1::PredictReply>* reactor_;
  std::deque<v1::PredictReply> queue_;  // front: the write in flight
  bool writing_ = false;
  bool cancel_pending_ = false;
};

class ServableStreamReactor final
    : public CancellableReactor<grpc::ServerWriteReactor<v1::PredictReply>, ServableStreamCall> {
 public:
  void OnWriteDone(bool ok) override { current()->write_done(ok); }
};

}  // namespace

grpc::ServerUnaryReactor* predict_servable(servable::ServableRuntime& runtime,
                                         const v1::PredictRequest& req, v1::PredictReply* reply) {
  auto* reactor = new ServableUnaryReactor();
  if (Status st = check_servable_request(req); !st.is_ok()) {
    reply->mutable_servable_spec()->CopyFrom(req.servable_spec());
    set_error(*reply->add_error_msg(), st);
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }
  ServableInputs in = convert_instances(req);
  auto run = std::move(in.run);
  auto call = std::make_shared<ServableUnaryCall>(runtime, req, in, reactor, reply);
  reactor->set_call(call);
  call->start(std::move(run), /*stream=*/false);
  return reactor;
}

grpc::ServerWriteReactor<v1::PredictReply>* predict_stream_servable(
  servable::ServableRuntime& runtime, const v1::PredictRequest& req) {
  auto* reactor = new ServableStreamReactor();
  if (Status st = check_servable_request(req); !st.is_ok()) {
    reactor->Finish(rpc::to_grpc_status(st));
    return reactor;
  }
  ServableInputs in = convert_instances(req);
  auto run = std::move(in.run);
  auto call = std::make_shared<ServableStreamCall>(runtime, req, in, reactor);
  reactor->set_call(call);
  call->start(std::move(run), /*stream=*/true);
  return reactor;
}

}  // namespace cairn::api
