// tests/serving_test_util.h — event sinks for tests that drive a serving::Backend.
// Owns the one recording sink the serving, cluster and API tests share (and a
// sink that drops everything). Events arrive on the backend's thread; the
// waits return once the awaited event is in, and fields are read after that.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "serving/backend.h"

namespace cairn::test {

// Records every event of one request.
class RecordingSink final : public serving::EventSink {
 public:
  void on_start(const serving::OutputSyntax& s) override {
    std::lock_guard lk(mu_);
    syntax = s;
    tokens_before_start = tokens.size();
  }
  void on_token(const serving::TokenEvent& ev) override {
    std::lock_guard lk(mu_);
    tokens.push_back(ev);
    text += ev.text;
    cv_.notify_all();
  }
  void on_finish(const serving::FinishEvent& ev) override {
    std::lock_guard lk(mu_);
    finish = ev;
    finishes.push_back(ev);
    text += ev.text;
    ++ends;
    cv_.notify_all();
  }
  void on_error(const Status& err) override {
    std::lock_guard lk(mu_);
    error = err;
    errors.push_back(err);
    ++ends;
    cv_.notify_all();
  }

  // Waits until the request ended (true) or `seconds` passed (false).
  bool wait(double seconds = 60) {
    std::unique_lock lk(mu_);
    return cv_.wait_for(lk, std::chrono::duration<double>(seconds), [&] { return ends > 0; });
  }
  // Waits until at least `n` tokens arrived or the request ended.
  bool wait_tokens(size_t n, double seconds = 60) {
    std::unique_lock lk(mu_);
    return cv_.wait_for(lk, std::chrono::duration<double>(seconds),
                        [&] { return tokens.size() >= n || ends > 0; });
  }
  // Waits until the text so far is exactly `want`.
  bool wait_text(const std::string& want, double seconds = 5) {
    std::unique_lock lk(mu_);
    return cv_.wait_for(lk, std::chrono::duration<double>(seconds), [&] { return text == want; });
  }

  // The token ids so far.
  std::vector<serving::Token> ids() {
    std::lock_guard lk(mu_);
    std::vector<serving::Token> out;
    for (const auto& t : tokens) out.push_back(t.id);
    return out;
  }
  // The finish reason, "error: <message>" after an error, empty while running.
  std::string reason() {
    std::lock_guard lk(mu_);
    if (error) return "error: " + error->message();
    return finish ? finish->reason : std::string();
  }

  std::optional<serving::OutputSyntax> syntax;  // chat requests: before any token
  size_t tokens_before_start = 0;
  std::vector<serving::TokenEvent> tokens;
  std::string text;                            // tokens' text, then the finish's
  std::optional<serving::FinishEvent> finish;  // the last finish
  std::optional<Status> error;                 // the last error
  std::vector<serving::FinishEvent> finishes;  // all of them: a request must end once
  std::vector<Status> errors;
  int ends = 0;  // finishes and errors

 private:
  std::mutex mu_;
  std::condition_variable cv_;
};

// Drops every event.
class NullSink final : public serving::EventSink {
 public:
  void on_token(const serving::TokenEvent&) override {}
  void on_finish(const serving::FinishEvent&) override {}
  void on_error(const Status&) override {}
};

// Records an embedding request's one answer (and how many came: must be 1).
class RecordingEmbedSink final : public serving::EmbedSink {
 public:
  void on_done(serving::EmbedResult r) override {
    std::lock_guard lk(mu_);
    result = std::move(r);
    ++answers;
    cv_.notify_all();
  }
  void on_error(const Status& err) override {
    std::lock_guard lk(mu_);
    error = err;
    ++answers;
    cv_.notify_all();
  }
  bool wait(double seconds = 60) {
    std::unique_lock lk(mu_);
    return cv_.wait_for(lk, std::chrono::duration<double>(seconds), [&] { return answers > 0; });
  }

  std::optional<serving::EmbedResult> result;
  std::optional<Status> error;
  int answers = 0;

 private:
  std::mutex mu_;
  std::condition_variable cv_;
};

}  // namespace cairn::test
