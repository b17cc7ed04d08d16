// core/thread_pool.h — a fixed pool of worker threads for data-parallel kernels.
// parallel_for splits [0, n) into contiguous chunks, runs them on the pool and
// the calling thread, and returns when all are done. Never called re-entrantly.
#pragma once

#include <cstdint>
#include <functional>

namespace cairn {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);  // total threads including the caller; <=0: hardware
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const;
  // fn(begin, end) over disjoint ranges covering [0, n).
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn);

 private:
  struct Impl;
  Impl* impl_;
};

}  // namespace cairn
