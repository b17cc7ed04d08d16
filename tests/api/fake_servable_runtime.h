// tests/api/fake_servable_runtime.h — a ServableRuntime for front-end tests, with no Python.
// One servable, "calc", versions 1 and 2, whose methods behave by name:
//   add    (x1, x2: float32 tensors of one shape) -> y = x1 + x2, and
//          version: the version that ran (int); an instance with bad
//          inputs fails alone (InvalidArgument).
//   echo   every input back as an output of the same name.
//   stream (prompt: str) -> text streams "<prompt>-a", "-b" through on_text
//          when the call streams, then text = "<prompt>-a-b".
//   hold   never finishes until cancelled; then every instance fails with
//          Cancelled.
// Calls run on threads of their own (joined by the destructor); the last
// call and the cancelled ids are recorded for the test to inspect.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "servable/runtime.h"

namespace cairn::api::test {

class FakeServableRuntime final : public servable::ServableRuntime {
 public:
  ~FakeServableRuntime() override {
    std::vector<uint64_t> held;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& [id, h] : held_) held.push_back(id);
    }
    for (auto id : held) cancel(id);
    for (auto& t : threads_) t.join();
  }

  bool has_servable(const std::string& name) const override { return name == "calc"; }

  std::vector<servable::ServableInfo> servables() const override {
    servable::ServableInfo info;
    info.name = "calc";
    info.versions = {1, 2};
    info.methods = {{"add", {"x1", "x2"}, {"y", "version"}, {}},
                    {"echo", {}, {}, {}},
                    {"stream", {"prompt"}, {"text"}, {"text"}},
                    {"hold", {}, {}, {}}};
    return {info};
  }

  Result<uint64_t> predict(servable::PredictCall call,
                           std::shared_ptr<servable::PredictSink> sink) override {
    if (call.servable != "calc")
      return Status::not_found("unknown servable '" + call.servable + "'");
    if (call.version > 2)
      return Status::not_found("version " + std::to_string(call.version) +
                               " of servable 'calc' is not loaded");
    const uint64_t version = call.version == 0 ? 2 : call.version;
    if (call.method != "add" && call.method != "echo" && call.method != "stream" &&
        call.method != "hold")
      return Status::not_found("unknown method '" + call.method + "' of servable 'calc'");
    if (call.instances.empty() || call.instances.size() > servable::kMaxPredictInstances)
      return Status::invalid_argument("bad instance count");
    std::lock_guard<std::mutex> lock(mu_);
    const uint64_t id = ++next_id_;
    last_ = call;
    ++calls_;
    if (call.method == "hold") {
      held_[id] = Held{sink, call.instances.size(), version};
      cv_.notify_all();
      return id;
    }
    threads_.emplace_back([call = std::move(call), sink, version] {
      std::vector<servable::InstanceResult> results;
      for (size_t k = 0; k < call.instances.size(); ++k)
        results.push_back(run_one(call, k, *sink, version));
      sink->on_done(version, std::move(results));
    });
    return id;
  }

  void cancel(uint64_t call_id) override {
    std::optional<Held> h;
    {
      std::lock_guard<std::mutex> lock(mu_);
      cancelled_.insert(call_id);
      cv_.notify_all();
      auto it = held_.find(call_id);
      if (it == held_.end()) return;
      h = std::move(it->second);
      held_.erase(it);
    }
    std::vector<servable::InstanceResult> results;
    for (size_t k = 0; k < h->instances; ++k)
      results.push_back(Status::error(StatusCode::Cancelled, "the call was cancelled"));
    h->sink->on_done(h->version, std::move(results));
  }

  // Test-side views.
  servable::PredictCall last_call() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_;
  }
  size_t calls() {
    std::lock_guard<std::mutex> lock(mu_);
    return calls_;
  }
  bool wait_held(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [&] { return held_.size() >= n; });
  }
  bool wait_cancelled(size_t n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(10), [&] { return cancelled_.size() >= n; });
  }

 private:
  struct Held {
    std::shared_ptr<servable::PredictSink> sink;
    size_t instances = 0;
    uint64_t version = 0;
  };

  static servable::InstanceResult run_one(const servable::PredictCall& call, size_t k,
                                          servable::PredictSink& sink, uint64_t version) {
    const values::Instance& in = call.instances[k];
    if (call.method == "echo") return in;
    if (call.method == "stream") {
      auto it = in.find("prompt");
      const auto* prompt = it == in.end() ? nullptr : std::get_if<std::string>(&it->second);
      if (!prompt) return Status::invalid_argument("input 'prompt' must be a str");
      if (call.stream) {
        sink.on_text(k, "text", *prompt + "-a");
        sink.on_text(k, "text", "-b");
      }
      return values::Instance{{"text", *prompt + "-a-b"}};
    }
    // add
    auto get = [&](const char* name) -> const values::Tensor* {
      auto it = in.find(name);
      return it == in.end() ? nullptr : std::get_if<values::Tensor>(&it->second);
    };
    const values::Tensor* a = get("x1");
    const values::Tensor* b = get("x2");
    if (!a || !b || a->dtype != values::DType::Float32 || b->dtype != values::DType::Float32 ||
        a->shape != b->shape)
      return Status::invalid_argument("x1 and x2 must be float32 tensors of one shape");
    std::vector<float> y(static_cast<size_t>(a->element_count()));
    for (size_t i = 0; i < y.size(); ++i) y[i] = a->as<float>()[i] + b->as<float>()[i];
    return values::Instance{{"y", values::make_tensor(y, a->shape)},
                            {"version", static_cast<int64_t>(version)}};
  }

  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t next_id_ = 0;
  size_t calls_ = 0;
  servable::PredictCall last_;
  std::map<uint64_t, Held> held_;
  std::set<uint64_t> cancelled_;
  std::vector<std::thread> threads_;
};

}  // namespace cairn::api::test
