// api/grpc_serving_service.cpp — cairn.v1.Serving: Predict, PredictStream, ListServables.
// The Serving service uses gRPC's callback API: a call holds no thread while
// the engine generates, and a client that cancels (or whose deadline passes)
// reaches OnCancel, which cancels that call's backend requests. Inputs are
// turned into an OpenAI-shaped JSON body and validated by parse_generate, so
// the gRPC and HTTP front-ends accept and refuse exactly the same values.
#include "api/grpc_serving_service.h"

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "api/openai_request.h"
#include "api/openai_response.h"
#include "cairn/v1/serving.grpc.pb.h"
#include "core/status.h"
#include "rpc/convert.h"

namespace cairn::api {
namespace {

using nlohmann::json;
namespace v1 = cairn::v1;

// An instance's or a whole call's failure. The Serving API carries a message
// and a code, no field name: param is dropped so that the gRPC status (from
// rpc::to_grpc_status) has no details, and the reply's error_code is the HTTP
// status of the same failure (from to_http_error).
Status call_error(const Status& s) { return Status::error(s.code(), s.message()); }

void set_error(v1::ErrorMsg& out, const Status& err) {
  out.set_error_code(to_http_error(err).status);
  out.set_error_msg(err.message());
}

grpc::Status cancelled_status() {
  return rpc::to_grpc_status(Status::error(StatusCode::Cancelled, "the call was cancelled"));
}

// Names echoed in errors are cut short (at a UTF-8 boundary: replies must stay
// valid UTF-8) so a hostile client cannot make the error as large as its input.
std::string shown(const std::string& s) {
  constexpr size_t kMax = 64;
  if (s.size() <= kMax) return "'" + s + "'";
  size_t n = kMax;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return "'" + s.substr(0, n) + "...'";
}

enum class Method { Generate, Chat };

struct Target {
  std::string model;
  Method method = Method::Generate;
  std::vector<serving::ModelInfo> models;
};

// The request as a whole: servable, method, version and instance count.
Result<Target> resolve_target(const v1::PredictRequest& req, const serving::Backend& backend) {
  Target t;
  t.models = backend.models();
  const auto& spec = req.servable_spec();
  if (t.models.empty()) return Status::unavailable("no model is loaded yet");
  if (spec.name().empty()) {
    if (t.models.size() != 1)
      return Status::invalid_argument(
          "the servable name is required when several models are served");
    t.model = t.models.front().id;
  } else {
    for (const auto& m : t.models)
      if (m.id == spec.name()) t.model = m.id;
    if (t.model.empty()) return Status::not_found("unknown servable " + shown(spec.name()));
  }
  if (spec.method_name() == "generate") {
    t.method = Method::Generate;
  } else if (spec.method_name() == "chat") {
    t.method = Method::Chat;
  } else if (spec.method_name().empty()) {
    return Status::invalid_argument("the method name is required (generate or chat)");
  } else {
    return Status::not_found("unknown method " + shown(spec.method_name()) + " of servable " +
                             shown(t.model) + " (methods: generate, chat)");
  }
  if (spec.version_number() > 1)
    return Status::not_found("version " + std::to_string(spec.version_number()) + " of servable " +
                             shown(t.model) + " is not served (only version 1)");
  if (req.instances_size() == 0) return Status::invalid_argument("the request has no instances");
  if (static_cast<size_t>(req.instances_size()) > kMaxServingInstances)
    return Status::invalid_argument("the request has " + std::to_string(req.instances_size()) +
                                    " instances, at most " + std::to_string(kMaxServingInstances) +
                                    " are allowed");
  return t;
}

constexpr const char* kCommonInputs[] = {
    "max_tokens",       "temperature",      "top_p", "top_k", "min_p", "seed", "stop", "ignore_eos",
    "presence_penalty", "frequency_penalty"};

bool is_common_input(const std::string& name) {
  for (const char* n : kCommonInputs)
    if (name == n) return true;
  return false;
}

// One instance to a GenerateRequest, or the first problem found.
Result<serving::GenerateRequest> parse_instance(const v1::Instance& inst, const Target& t) {
  const bool chat = t.method == Method::Chat;
  const char* prompt_name = chat ? "messages" : "prompt";
  json body = json::object();
  body["model"] = t.model;
  for (const auto& [name, value] : inst.items()) {
    if (name != prompt_name && !is_common_input(name))
      return Status::invalid_argument("unknown input " + shown(name) + " for method " +
                                      (chat ? "chat" : "generate") + " (inputs: " + prompt_name +
                                      ", max_tokens, temperature, top_p, top_k, min_p, seed, stop, "
                                      "ignore_eos, presence_penalty, frequency_penalty)");
    const bool text_input = name == prompt_name;
    if (text_input && value.kind_case() != v1::Value::kStringValue)
      return Status::invalid_argument("input '" + name + "' must be a string");
    switch (value.kind_case()) {
      case v1::Value::kStringValue: {
        const std::string& s = value.string_value();
        if (name == "messages") {
          json msgs = json::parse(s, nullptr, /*allow_exceptions=*/false);
          if (msgs.is_discarded() || !msgs.is_array())
            return Status::invalid_argument(
                "input 'messages' must be a JSON array of {role, content} objects");
          body[name] = std::move(msgs);
        } else if (name == "stop" && !s.empty() && s.front() == '[') {
          // A JSON array of strings; a stop string that merely starts with
          // '[' but is not one stays a plain string.
          json arr = json::parse(s, nullptr, /*allow_exceptions=*/false);
          body[name] = (!arr.is_discarded() && arr.is_array()) ? arr : json(s);
        } else if (text_input || name == "stop") {
          body[name] = s;
        } else {
          return Status::invalid_argument("input '" + name + "' must be a " +
                                          (name == "ignore_eos" ? "bool" : "number") +
                                          ", not a string");
        }
        break;
      }
      case v1::Value::kIntValue:
        body[name] = value.int_value();
        break;
      case v1::Value::kDoubleValue:
        body[name] = value.double_value();
        break;
      case v1::Value::kBoolValue:
        body[name] = value.bool_value();
        break;
      case v1::Value::kBytesValue:
        return Status::invalid_argument("input '" + name + "' must not be bytes");
      case v1::Value::kTensorValue:
        return Status::invalid_argument("input '" + name + "' must not be a tensor");
      case v1::Value::KIND_NOT_SET:
        return Status::invalid_argument("input '" + name + "' has no value");
    }
  }
  if (!body.contains(prompt_name))
    return Status::invalid_argument(std::string("input '") + prompt_name + "' is required");
  auto parsed = parse_generate(chat ? Endpoint::Chat : Endpoint::Completions, body, t.models);
  if (!parsed.is_ok()) return call_error(parsed.status());
  auto& p = *parsed;
  if (p.prompts.size() != 1) return Status::invalid_argument("input 'prompt' must be one string");
  return std::move(p.prompts.front());
}

void set_string(v1::Instance& inst, const char* name, std::string value) {
  (*inst.mutable_items())[name].set_string_value(std::move(value));
}
void set_int(v1::Instance& inst, const char* name, int64_t value) {
  (*inst.mutable_items())[name].set_int_value(value);
}

void fill_final(v1::Instance& inst, std::string text, const serving::FinishEvent& f) {
  set_string(inst, "text", std::move(text));
  set_string(inst, "finish_reason", f.reason);
  set_int(inst, "prompt_tokens", f.usage.prompt_tokens);
  set_int(inst, "completion_tokens", f.usage.completion_tokens);
}

void set_spec(v1::PredictReply& reply, const Target& t) {
  reply.mutable_servable_spec()->set_name(t.model);
  reply.mutable_servable_spec()->set_method_name(t.method == Method::Chat ? "chat" : "generate");
  reply.mutable_servable_spec()->set_version_number(1);
}

// What one call shares between its reactor (gRPC threads) and its sinks (the
// engine thread). The reactor and the reply belong to gRPC: they are touched
// only until Finish is called, and Finish is called exactly once, outside the
// lock (gRPC may run reactions such as OnCancel on the calling thread).
class CallBase : public std::enable_shared_from_this<CallBase> {
 public:
  CallBase(serving::Backend& backend, size_t n) : backend_(backend), ids_(n, 0), done_(n, false) {}
  virtual ~CallBase() = default;

  virtual void on_token(size_t i, const serving::TokenEvent& ev) = 0;
  virtual void on_finish(size_t i, const serving::FinishEvent& ev) = 0;
  virtual void on_error(size_t i, const Status& err) = 0;  // err has no param

  // Submits instance i unless the call is already over; a refusal is that
  // instance's error.
  void submit(size_t i, serving::GenerateRequest req);
  // The client went away or its deadline passed: cancels every request.
  void cancel_all();

 protected:
  class Sink;
  virtual void finish_cancelled() = 0;  // called once, outside the lock

  serving::Backend& backend_;
  std::mutex mu_;
  std::vector<serving::RequestId> ids_;  // 0: not submitted (yet)
  std::vector<bool> done_;
  bool over_ = false;  // Finish called or about to be: nothing more goes to gRPC
};

class CallBase::Sink final : public serving::EventSink {
 public:
  Sink(std::shared_ptr<CallBase> call, size_t index) : call_(std::move(call)), index_(index) {}
  void on_token(const serving::TokenEvent& ev) override { call_->on_token(index_, ev); }
  void on_finish(const serving::FinishEvent& ev) override { call_->on_finish(index_, ev); }
  void on_error(const Status& err) override { call_->on_error(index_, call_error(err)); }

 private:
  std::shared_ptr<CallBase> call_;
  size_t index_;
};

void CallBase::submit(size_t i, serving::GenerateRequest req) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (over_) return;
  }
  auto res = backend_.submit(std::move(req), std::make_shared<Sink>(shared_from_this(), i));
  if (!res.is_ok()) {
    on_error(i, call_error(res.status()));
    return;
  }
  const auto id = *res;
  bool cancel_now = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ids_[i] = id;
    cancel_now = over_ && !done_[i];  // cancelled while submit ran
  }
  if (cancel_now) backend_.cancel(id);
}

void CallBase::cancel_all() {
  std::vector<serving::RequestId> running;
  bool finish = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (size_t i = 0; i < ids_.size(); ++i)
      if (ids_[i] != 0 && !done_[i]) running.push_back(ids_[i]);
    finish = !over_;
    over_ = true;
  }
  // Outside the lock: a backend may deliver the "cancelled" finish inline.
  for (auto id : running) backend_.cancel(id);
  if (finish) finish_cancelled();
}

// Predict: collects every instance, then replies once, in request order.
class UnaryCall final : public CallBase {
 public:
  UnaryCall(serving::Backend& backend, size_t n, grpc::ServerUnaryReactor* reactor,
            v1::PredictReply* reply)
      : CallBase(backend, n), reactor_(reactor), reply_(reply), texts_(n), finals_(n), errors_(n) {}

  void on_token(size_t i, const serving::TokenEvent& ev) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (!done_[i]) texts_[i] += ev.text;
  }
  void on_finish(size_t i, const serving::FinishEvent& ev) override {
    bool finish = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (done_[i]) return;
      texts_[i] += ev.text;
      finals_[i] = ev;
      finish = mark_done(i);
    }
    if (finish) reactor_->Finish(grpc::Status::OK);
  }
  void on_error(size_t i, const Status& err) override {
    bool finish = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (done_[i]) return;
      errors_[i] = err;
      finish = mark_done(i);
    }
    if (finish) reactor_->Finish(grpc::Status::OK);
  }

 private:
  // Under the lock. True when this was the last instance: the reply is
  // written here and the caller must call Finish.
  bool mark_done(size_t i) {
    done_[i] = true;
    if (over_) return false;
    for (bool d : done_)
      if (!d) return false;
    over_ = true;
    bool any_error = false;
    for (const auto& e : errors_) any_error = any_error || !e.is_ok();
    for (size_t k = 0; k < done_.size(); ++k) {
      v1::Instance* inst = reply_->add_instances();
      if (errors_[k].is_ok()) fill_final(*inst, std::move(texts_[k]), finals_[k]);
      if (any_error) {
        auto* e = reply_->add_error_msg();  // code 0, no message: this one succeeded
        if (!errors_[k].is_ok()) set_error(*e, errors_[k]);
      }
    }
    return true;
  }
  void finish_cancelled() override { reactor_->Finish(cancelled_status()); }

  grpc::ServerUnaryReactor* reactor_;
  v1::PredictReply* reply_;
  std::vector<std::string> texts_;
  std::vector<serving::FinishEvent> finals_;
  std::vector<Status> errors_;  // ok: no error
};

// Both reactors hand OnCancel to their call; a cancel that comes before the
// call exists is remembered and applied when it is set.
template <typename Base, typename Call>
class CancellableReactor : public Base {
 public:
  void set_call(std::shared_ptr<Call> call) {
    bool cancelled = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      call_ = call;
      cancelled = cancelled_;
    }
    if (cancelled) call->cancel_all();
  }
  void OnCancel() override {
    std::shared_ptr<Call> call;
    {
      std::lock_guard<std::mutex> lock(mu_);
      cancelled_ = true;
      call = call_;
    }
    if (call) call->cancel_all();
  }
  void OnDone() override { delete this; }

 protected:
  std::shared_ptr<Call> current() {
    std::lock_guard<std::mutex> lock(mu_);
    return call_;
  }

 private:
  std::mutex mu_;
  std::shared_ptr<Call> call_;  // null until the request is resolved
  bool cancelled_ = false;
};

using UnaryReactor = CancellableReactor<grpc::ServerUnaryReactor, CallBase>;

// PredictStream: one reply per event, written one at a time (gRPC allows one
// outstanding write); events that arrive meanwhile wait in a queue.
class StreamCall final : public CallBase {
 public:
  StreamCall(serving::Backend& backend, size_t n, grpc::ServerWriteReactor<v1::PredictReply>* r)
      : CallBase(backend, n), reactor_(r) {}

  void on_token(size_t i, const serving::TokenEvent& ev) override {
    v1::PredictReply reply;
    reply.set_instance_index(static_cast<uint32_t>(i));
    set_string(*reply.add_instances(), "text", ev.text);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (streamed_.size() <= i) streamed_.resize(i + 1, false);
      streamed_[i] = true;
    }
    push(i, std::move(reply), false);
  }
  void on_finish(size_t i, const serving::FinishEvent& ev) override {
    v1::PredictReply reply;
    reply.set_instance_index(static_cast<uint32_t>(i));
    fill_final(*reply.add_instances(), ev.text, ev);
    push(i, std::move(reply), true);
  }
  void on_error(size_t i, const Status& err) override {
    v1::PredictReply reply;
    reply.set_instance_index(static_cast<uint32_t>(i));
    set_error(*reply.add_error_msg(), err);
    {
      // An instance that fails after it streamed text (its worker died) also
      // ends the call with that error's status (UNAVAILABLE for a lost
      // worker), so a client that reads only the status still sees it.
      std::lock_guard<std::mutex> lock(mu_);
      if (i < streamed_.size() && streamed_[i] && !failure_) failure_ = err;
    }
    push(i, std::move(reply), true);
  }

  // gRPC finished the previous write.
  void write_done(bool ok) {
    const v1::PredictReply* next = nullptr;
    bool finish_ok = false;
    bool finish_cancel = false;
    std::optional<Status> failure;
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.pop_front();
      if (!ok || cancel_pending_) {
        // The stream broke (client gone, deadline passed) or was cancelled
        // while this write was out: nothing more is written.
        finish_cancel = true;
        over_ = true;
      } else if (!queue_.empty()) {
        next = &queue_.front();
      } else {
        writing_ = false;
        finish_ok = finish_if_all_done();
        failure = failure_;
      }
    }
    if (next) {
      reactor_->StartWrite(next);
    } else if (finish_ok && failure) {
      reactor_->Finish(rpc::to_grpc_status(*failure));
    } else if (finish_ok) {
      reactor_->Finish(grpc::Status::OK);
    } else if (finish_cancel) {
      if (!ok) cancel_requests();
      reactor_->Finish(cancelled_status());
    }
  }

 private:
  void push(size_t i, v1::PredictReply reply, bool last) {
    const v1::PredictReply* start = nullptr;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (done_[i]) return;
      if (last) done_[i] = true;
      if (over_) return;
      queue_.push_back(std::move(reply));  // references to other elements stay valid
      if (!writing_) {
        writing_ = true;
        start = &queue_.front();
      }
    }
    if (start) reactor_->StartWrite(start);
  }
  // Under the lock, with no write outstanding.
  bool finish_if_all_done() {
    if (over_) return false;
    for (bool d : done_)
      if (!d) return false;
    over_ = true;
    return true;
  }
  void cancel_requests() {
    std::vector<serving::RequestId> running;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (size_t i = 0; i < ids_.size(); ++i)
        if (ids_[i] != 0 && !done_[i]) running.push_back(ids_[i]);
    }
    for (auto id : running) backend_.cancel(id);
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
  std::vector<bool> streamed_;          // per instance: text was sent
  std::optional<Status> failure_;       // the first failure after streamed text
  std::deque<v1::PredictReply> queue_;  // front: the write in flight
  bool writing_ = false;
  bool cancel_pending_ = false;
};

class StreamReactor final
    : public CancellableReactor<grpc::ServerWriteReactor<v1::PredictReply>, StreamCall> {
 public:
  void OnWriteDone(bool ok) override { current()->write_done(ok); }
};

// ---- Servables from a servable_config.py (servable/runtime.h) ----

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

class ServingService final : public v1::Serving::CallbackService {
 public:
  ServingService(serving::Backend& backend, servable::ServableRuntime* servables)
      : backend_(backend), servables_(servables) {}

  grpc::ServerUnaryReactor* Predict(grpc::CallbackServerContext*, const v1::PredictRequest* req,
                                    v1::PredictReply* reply) override {
    if (is_servable(*req)) return predict_servable(*req, reply);
    auto* reactor = new UnaryReactor();
    auto target = resolve_target(*req, backend_);
    if (!target.is_ok()) {
      reply->mutable_servable_spec()->CopyFrom(req->servable_spec());
      set_error(*reply->add_error_msg(), target.status());
      reactor->Finish(grpc::Status::OK);
      return reactor;
    }
    const Target& t = *target;
    set_spec(*reply, t);
    const size_t n = static_cast<size_t>(req->instances_size());
    auto call = std::make_shared<UnaryCall>(backend_, n, reactor, reply);
    reactor->set_call(call);
    start(*call, *req, t);
    return reactor;
  }

  grpc::ServerWriteReactor<v1::PredictReply>* PredictStream(
      grpc::CallbackServerContext*, const v1::PredictRequest* req) override {
    if (is_servable(*req)) return predict_stream_servable(*req);
    auto* reactor = new StreamReactor();
    auto target = resolve_target(*req, backend_);
    if (!target.is_ok()) {
      reactor->Finish(rpc::to_grpc_status(target.status()));
      return reactor;
    }
    const Target& t = *target;
    auto call =
        std::make_shared<StreamCall>(backend_, static_cast<size_t>(req->instances_size()), reactor);
    reactor->set_call(call);
    start(*call, *req, t);
    return reactor;
  }

  grpc::ServerUnaryReactor* ListServables(grpc::CallbackServerContext* ctx,
                                          const v1::ListServablesRequest*,
                                          v1::ListServablesReply* reply) override {
    for (const auto& m : backend_.models()) {
      auto* s = reply->add_servables();
      s->set_name(m.id);
      s->add_methods("generate");
      s->add_methods("chat");
      s->set_n_ctx(m.n_ctx);
    }
    if (servables_)
      for (const auto& info : servables_->servables()) {
        auto* s = reply->add_servables();
        s->set_name(info.name);
        for (const auto& m : info.methods) s->add_methods(m.name);
        s->set_n_ctx(0);
        s->mutable_versions()->Add(info.versions.begin(), info.versions.end());
      }
    auto* reactor = ctx->DefaultReactor();
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

 private:
  bool is_servable(const v1::PredictRequest& req) const {
    return servables_ && servables_->has_servable(req.servable_spec().name());
  }

  grpc::ServerUnaryReactor* predict_servable(const v1::PredictRequest& req,
                                             v1::PredictReply* reply) {
    auto* reactor = new ServableUnaryReactor();
    if (Status st = check_servable_request(req); !st.is_ok()) {
      reply->mutable_servable_spec()->CopyFrom(req.servable_spec());
      set_error(*reply->add_error_msg(), st);
      reactor->Finish(grpc::Status::OK);
      return reactor;
    }
    ServableInputs in = convert_instances(req);
    auto run = std::move(in.run);
    auto call = std::make_shared<ServableUnaryCall>(*servables_, req, in, reactor, reply);
    reactor->set_call(call);
    call->start(std::move(run), /*stream=*/false);
    return reactor;
  }

  grpc::ServerWriteReactor<v1::PredictReply>* predict_stream_servable(
      const v1::PredictRequest& req) {
    auto* reactor = new ServableStreamReactor();
    if (Status st = check_servable_request(req); !st.is_ok()) {
      reactor->Finish(rpc::to_grpc_status(st));
      return reactor;
    }
    ServableInputs in = convert_instances(req);
    auto run = std::move(in.run);
    auto call = std::make_shared<ServableStreamCall>(*servables_, req, in, reactor);
    reactor->set_call(call);
    call->start(std::move(run), /*stream=*/true);
    return reactor;
  }

  // Every instance is parsed before any is submitted, so a request with a
  // bad instance costs the engine nothing for the bad one; the good ones run.
  static void start(CallBase& call, const v1::PredictRequest& req, const Target& t) {
    const size_t n = static_cast<size_t>(req.instances_size());
    std::vector<Result<serving::GenerateRequest>> parsed;
    parsed.reserve(n);
    for (size_t i = 0; i < n; ++i)
      parsed.push_back(parse_instance(req.instances(static_cast<int>(i)), t));
    for (size_t i = 0; i < n; ++i) {
      if (!parsed[i].is_ok()) {
        call.on_error(i, parsed[i].status().with_context("instance " + std::to_string(i)));
      } else {
        call.submit(i, std::move(parsed[i]).value());
      }
    }
  }

  serving::Backend& backend_;
  servable::ServableRuntime* servables_;  // null: models only
};

}  // namespace

std::unique_ptr<grpc::Service> make_serving_service(serving::Backend& backend,
                                                    servable::ServableRuntime* servables) {
  return std::make_unique<ServingService>(backend, servables);
}

}  // namespace cairn::api
