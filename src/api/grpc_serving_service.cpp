// api/grpc_serving_service.cpp — cairn.v1.Serving: Predict, PredictStream, ListServables.
// The Serving service uses gRPC's callback API: a call holds no thread while
// the engine generates, and a client that cancels (or whose deadline passes)
// reaches OnCancel, which cancels that call's backend requests. Inputs are
// turned into an OpenAI-shaped JSON body and validated by parse_generate, so
// the gRPC and HTTP front-ends accept and refuse exactly the same values.
// Calls naming a servable from a servable_config.py go to grpc_servable_calls.
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

#include "api/grpc_servable_calls.h"
#include "api/grpc_serving_common.h"
#include "api/openai_request.h"
#include "api/openai_response.h"
#include "cairn/v1/serving.grpc.pb.h"
#include "core/status.h"
#include "rpc/convert.h"

namespace cairn::api {
namespace {

using nlohmann::json;
using namespace grpc_serving;  // NOLINT: the shared helpers of the Serving service

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
    "max_tokens",       "temperature",       "top_p",        "top_k",       "min_p",
    "seed",             "stop",              "ignore_eos",   "presence_penalty",
    "frequency_penalty", "response_format",  "guided_json",  "json_schema", "guided_regex",
    "guided_choice",    "guided_grammar",    "grammar",      "chat_template_kwargs",
    "speculative"};

// Inputs given as JSON text (an object or a list), as the OpenAI body holds them.
bool is_json_input(const std::string& name) {
  return name == "response_format" || name == "guided_choice" || name == "chat_template_kwargs";
}
// Inputs that are plain text: a schema's text, a regex, a GBNF grammar.
bool is_text_input(const std::string& name) {
  return name == "guided_json" || name == "json_schema" || name == "guided_regex" ||
         name == "guided_grammar" || name == "grammar";
}

bool is_common_input(const std::string& name) {
  for (const char* n : kCommonInputs)
    if (name == n) return true;
  return false;
}

// One instance to a GenerateRequest, or the first problem found.
Result<serving::GenerateRequest> parse_instance(const v1::Instance& inst, const Target& t) {
  const bool chat = t.method == Method::Chat;
  const char* prompt_name = chat ? "messages" : "prompt";
  RequestJson body = RequestJson::object();
  body["model"] = t.model;
  for (const auto& [name, value] : inst.items()) {
    if (name != prompt_name && !is_common_input(name))
      return Status::invalid_argument("unknown input " + shown(name) + " for method " +
                                      (chat ? "chat" : "generate") + " (inputs: " + prompt_name +
                                      ", max_tokens, temperature, top_p, top_k, min_p, seed, stop, "
                                      "ignore_eos, speculative, presence_penalty, frequency_penalty, "
                                      "response_format, guided_json, json_schema, guided_regex, "
                                      "guided_choice, guided_grammar, grammar" +
                                      (chat ? ", chat_template_kwargs)" : ")"));
    const bool text_input = name == prompt_name;
    if (text_input && value.kind_case() != v1::Value::kStringValue)
      return Status::invalid_argument("input '" + name + "' must be a string");
    switch (value.kind_case()) {
      case v1::Value::kStringValue: {
        const std::string& s = value.string_value();
        if (name == "messages") {
          RequestJson msgs = RequestJson::parse(s, nullptr, /*allow_exceptions=*/false);
          if (msgs.is_discarded() || !msgs.is_array())
            return Status::invalid_argument(
                "input 'messages' must be a JSON array of {role, content} objects");
          body[name] = std::move(msgs);
        } else if (name == "stop" && !s.empty() && s.front() == '[') {
          // A JSON array of strings; a stop string that merely starts with
          // '[' but is not one stays a plain string.
          RequestJson arr = RequestJson::parse(s, nullptr, /*allow_exceptions=*/false);
          body[name] = (!arr.is_discarded() && arr.is_array()) ? arr : RequestJson(s);
        } else if (is_json_input(name)) {
          RequestJson j = RequestJson::parse(s, nullptr, /*allow_exceptions=*/false);
          if (j.is_discarded())
            return Status::invalid_argument("input '" + name + "' must be JSON text");
          body[name] = std::move(j);
        } else if (text_input || name == "stop" || is_text_input(name)) {
          body[name] = s;
        } else {
          return Status::invalid_argument("input '" + name + "' must be a " +
                                          (name == "ignore_eos" || name == "speculative" ? "bool" : "number") +
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

class ServingService final : public v1::Serving::CallbackService {
 public:
  ServingService(serving::Backend& backend, servable::ServableRuntime* servables)
      : backend_(backend), servables_(servables) {}

  grpc::ServerUnaryReactor* Predict(grpc::CallbackServerContext*, const v1::PredictRequest* req,
                                    v1::PredictReply* reply) override {
    if (is_servable(*req)) return predict_servable(*servables_, *req, reply);
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
    if (is_servable(*req)) return predict_stream_servable(*servables_, *req);
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
      // A servable's own GGUF model is named after it; the servable's methods win.
      if (servables_ && servables_->has_servable(m.id)) continue;
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
