// servable/task_pool.h — threads for method calls and Python stages.
// Owns a pool that grows when every thread is busy (up to a cap), because a
// method call's driver blocks while its stages run, and a Python stage that
// runs past its deadline may hold its thread for a long time: neither may
// keep other calls waiting. Idle threads beyond the minimum exit after a
// while. Never knows what a task is.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace cairn::servable {

class TaskPool {
 public:
  explicit TaskPool(size_t min_threads = 4, size_t max_threads = 512);
  ~TaskPool();  // runs what is queued, then joins every thread
  TaskPool(const TaskPool&) = delete;
  TaskPool& operator=(const TaskPool&) = delete;

  void post(std::function<void()> task);

 private:
  void worker();

  const size_t min_threads_;
  const size_t max_threads_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::condition_variable exited_cv_;
  std::deque<std::function<void()>> queue_;
  size_t threads_ = 0;
  size_t idle_ = 0;
  bool stopping_ = false;
};

}  // namespace cairn::servable
