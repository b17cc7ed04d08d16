// A Backend for the HTTP tests: answers at once or holds requests until the
// test releases them, and records every submit and cancel.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>

#include "serving/backend.h"

namespace cairn::api::test {

class FakeBackend : public serving::Backend {
 public:
  enum class Mode { Answer, Hold, Refuse };

  void set_mode(Mode m) {
    std::lock_guard<std::mutex> lock(mu_);
    mode_ = m;
  }

  Result<serving::RequestId> submit(serving::GenerateRequest req,
                                    std::shared_ptr<serving::EventSink> sink) override {
    std::unique_lock<std::mutex> lock(mu_);
    if (draining_ || mode_ == Mode::Refuse)
      return Status::error(StatusCode::Unavailable, "queue full");
    const serving::RequestId id = ++next_id_;
    submitted_.push_back(req);
    if (mode_ == Mode::Hold) {
      held_[id] = sink;
      cv_.notify_all();
      return id;
    }
    lock.unlock();
    answer(*sink);
    return id;
  }

  void cancel(serving::RequestId id) override {
    std::shared_ptr<serving::EventSink> sink;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = held_.find(id);
      if (it == held_.end()) return;  // finished already: cancel is idempotent
      sink = it->second;
      held_.erase(it);
      cancelled_.push_back(id);
      cv_.notify_all();
    }
    serving::FinishEvent f;
    f.reason = "cancelled";
    sink->on_finish(f);
  }

  std::vector<serving::ModelInfo> models() const override {
    serving::ModelInfo m;
    m.id = "fake";
    m.n_ctx = 128;
    m.n_vocab = 100;
    m.created = 1;
    return {m};
  }
  serving::Health health() const override {
    std::lock_guard<std::mutex> lock(mu_);
    serving::Health h;
    h.state = draining_ ? serving::HealthState::Draining : serving::HealthState::Ready;
    h.running = static_cast<int32_t>(held_.size());
    return h;
  }
  serving::BackendStats stats() const override {
    std::lock_guard<std::mutex> lock(mu_);
    serving::BackendStats s;
    s.running = static_cast<int32_t>(held_.size());
    s.kv_blocks_total = 10;
    return s;
  }
  Result<std::vector<serving::Token>> tokenize(const std::string&, const std::string& text, bool,
                                               bool = true) const override {
    std::vector<serving::Token> out;
    for (unsigned char c : text) out.push_back(c % 100);
    return out;
  }
  Result<std::string> detokenize(const std::string&,
                                 const std::vector<serving::Token>& tokens) const override {
    return std::string(tokens.size(), 'x');
  }
  // "p<id>", except token 99 ('c'), whose piece is a lone UTF-8 lead byte.
  Result<std::vector<std::string>> token_pieces(
      const std::string&, const std::vector<serving::Token>& tokens) const override {
    std::vector<std::string> out;
    for (serving::Token t : tokens) out.push_back(t == 99 ? "\xC3" : "p" + std::to_string(t));
    return out;
  }
  void start_draining() override {
    std::lock_guard<std::mutex> lock(mu_);
    draining_ = true;
  }

  // Finishes every held request normally.
  void release_all() {
    std::map<serving::RequestId, std::shared_ptr<serving::EventSink>> held;
    {
      std::lock_guard<std::mutex> lock(mu_);
      held.swap(held_);
    }
    for (auto& [id, sink] : held) answer(*sink);
  }

  // Sends one token to every held request, then fails it as a worker lost
  // mid-generation does.
  void fail_all_after_a_token() {
    std::map<serving::RequestId, std::shared_ptr<serving::EventSink>> held;
    {
      std::lock_guard<std::mutex> lock(mu_);
      held.swap(held_);
    }
    for (auto& [id, sink] : held) {
      sink->on_token(serving::TokenEvent{1, "Hello", -0.5f, {}});
      sink->on_error(Status::error(StatusCode::Unavailable, "worker lost"));
    }
  }

  size_t submitted() const {
    std::lock_guard<std::mutex> lock(mu_);
    return submitted_.size();
  }
  serving::GenerateRequest last_request() const {
    std::lock_guard<std::mutex> lock(mu_);
    return submitted_.back();
  }
  bool wait_held(size_t n, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return held_.size() >= n; });
  }
  bool wait_cancelled(size_t n, std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return cancelled_.size() >= n; });
  }
  size_t cancelled() const {
    std::lock_guard<std::mutex> lock(mu_);
    return cancelled_.size();
  }

 private:
  static void answer(serving::EventSink& sink) {
    serving::TokenEvent a{1, "Hello", -0.5f, {}};
    serving::TokenEvent b{2, " world", -0.25f, {}};
    sink.on_token(a);
    sink.on_token(b);
    serving::FinishEvent f;
    f.reason = "length";
    f.usage.prompt_tokens = 3;
    f.usage.completion_tokens = 2;
    sink.on_finish(f);
  }

  mutable std::mutex mu_;
  std::condition_variable cv_;
  Mode mode_ = Mode::Answer;
  bool draining_ = false;
  serving::RequestId next_id_ = 0;
  std::vector<serving::GenerateRequest> submitted_;
  std::map<serving::RequestId, std::shared_ptr<serving::EventSink>> held_;
  std::vector<serving::RequestId> cancelled_;
};

}  // namespace cairn::api::test
