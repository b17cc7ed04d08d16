// servable/task_pool.cpp — a pool that grows while its threads are busy.
#include "servable/task_pool.h"

#include <chrono>

namespace cairn::servable {

TaskPool::TaskPool(size_t min_threads, size_t max_threads)
    : min_threads_(min_threads), max_threads_(max_threads < 1 ? 1 : max_threads) {}

TaskPool::~TaskPool() {
  std::unique_lock<std::mutex> lock(mu_);
  stopping_ = true;
  cv_.notify_all();
  exited_cv_.wait(lock, [this] { return threads_ == 0; });
}

void TaskPool::post(std::function<void()> task) {
  std::lock_guard<std::mutex> lock(mu_);
  queue_.push_back(std::move(task));
  if (idle_ >= queue_.size() || threads_ >= max_threads_) {
    cv_.notify_one();
    return;
  }
  ++threads_;
  // Detached: the destructor waits for threads_ to reach zero instead of
  // joining, so an idle thread may leave on its own.
  std::thread([this] { worker(); }).detach();
}

void TaskPool::worker() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (queue_.empty()) {
      if (stopping_) break;
      ++idle_;
      const bool woken = cv_.wait_for(lock, std::chrono::seconds(30),
                                      [this] { return !queue_.empty() || stopping_; });
      --idle_;
      if (!woken && threads_ > min_threads_) break;
      continue;
    }
    auto task = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    task();
    task = nullptr;  // captured state goes before the lock is taken again
    lock.lock();
  }
  --threads_;
  exited_cv_.notify_all();
}

}  // namespace cairn::servable
