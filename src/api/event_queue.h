// api/event_queue.h — the sinks the HTTP layer gives the backend and the servable runtime.
// Owns the hand-off from the engine's (or a servable call's) threads to a
// connection: events are queued under a short lock and the connection is woken
// once per batch of events. Must never block the engine or call into the
// connection directly.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "servable/runtime.h"
#include "serving/backend.h"

namespace cairn::api {

using Event = std::variant<serving::TokenEvent, serving::FinishEvent, Status, serving::OutputSyntax>;

// Events of all choices of one HTTP request, tagged by choice index.
class EventQueue {
 public:
  // `wake` runs on the pushing thread when the queue turns non-empty; it must
  // only schedule work (e.g. post to the connection's strand).
  explicit EventQueue(std::function<void()> wake) : wake_(std::move(wake)) {}

  void push(int32_t index, Event ev) {
    bool was_empty;
    {
      std::lock_guard<std::mutex> lock(mu_);
      was_empty = events_.empty();
      events_.emplace_back(index, std::move(ev));
    }
    if (was_empty) wake_();
  }

  std::vector<std::pair<int32_t, Event>> take() {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::pair<int32_t, Event>> out;
    out.swap(events_);
    return out;
  }

 private:
  std::mutex mu_;
  std::vector<std::pair<int32_t, Event>> events_;
  std::function<void()> wake_;
};

class QueueSink : public serving::EventSink {
 public:
  QueueSink(std::shared_ptr<EventQueue> queue, int32_t index)
      : queue_(std::move(queue)), index_(index) {}
  void on_start(const serving::OutputSyntax& syntax) override { queue_->push(index_, syntax); }
  void on_token(const serving::TokenEvent& ev) override { queue_->push(index_, ev); }
  void on_finish(const serving::FinishEvent& ev) override { queue_->push(index_, ev); }
  void on_error(const Status& err) override { queue_->push(index_, err); }

 private:
  std::shared_ptr<EventQueue> queue_;
  int32_t index_;
};

// One servable call's events: streamed text pieces, then the results.
class PredictQueue {
 public:
  struct Text {
    size_t instance;
    std::string output;
    std::string text;
  };
  struct Batch {
    std::vector<Text> texts;
    std::optional<std::vector<servable::InstanceResult>> done;  // set once, last
    uint64_t version = 0;
  };

  // `wake` as for EventQueue: it may only schedule work.
  explicit PredictQueue(std::function<void()> wake) : wake_(std::move(wake)) {}

  void push_text(size_t instance, const std::string& output, const std::string& text) {
    push([&](Batch& b) { b.texts.push_back({instance, output, text}); });
  }
  void push_done(uint64_t version, std::vector<servable::InstanceResult> results) {
    push([&](Batch& b) {
      b.version = version;
      b.done = std::move(results);
    });
  }
  Batch take() {
    std::lock_guard<std::mutex> lock(mu_);
    Batch out;
    std::swap(out, pending_);
    return out;
  }

 private:
  template <typename F>
  void push(F add) {
    bool was_empty;
    {
      std::lock_guard<std::mutex> lock(mu_);
      was_empty = pending_.texts.empty() && !pending_.done;
      add(pending_);
    }
    if (was_empty) wake_();
  }

  std::mutex mu_;
  Batch pending_;
  std::function<void()> wake_;
};

class PredictQueueSink : public servable::PredictSink {
 public:
  explicit PredictQueueSink(std::shared_ptr<PredictQueue> queue) : queue_(std::move(queue)) {}
  void on_text(size_t instance, const std::string& output, const std::string& text) override {
    queue_->push_text(instance, output, text);
  }
  void on_done(uint64_t version, std::vector<servable::InstanceResult> results) override {
    queue_->push_done(version, std::move(results));
  }

 private:
  std::shared_ptr<PredictQueue> queue_;
};

}  // namespace cairn::api
