// api/event_queue.h — the EventSink the HTTP layer gives the backend.
// Owns the hand-off from the engine thread to a connection: events are queued
// under a short lock and the connection is woken once per batch of events.
// Must never block the engine or call into the connection directly.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <utility>
#include <variant>
#include <vector>

#include "serving/backend.h"

namespace cairn::api {

using Event = std::variant<serving::TokenEvent, serving::FinishEvent, Status>;

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
  void on_token(const serving::TokenEvent& ev) override { queue_->push(index_, ev); }
  void on_finish(const serving::FinishEvent& ev) override { queue_->push(index_, ev); }
  void on_error(const Status& err) override { queue_->push(index_, err); }

 private:
  std::shared_ptr<EventQueue> queue_;
  int32_t index_;
};

}  // namespace cairn::api
