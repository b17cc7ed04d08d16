#include "core/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace cairn {

// One job at a time. Workers sleep on a condition variable (spinning would steal
// cores from the engine and the network threads); a worker that wakes joins the
// job only while it is still open, so a late waker can never run a finished
// job's function or be waited for.
struct ThreadPool::Impl {
  std::vector<std::thread> workers;
  std::mutex mu;
  std::condition_variable wake;
  std::condition_variable idle;
  uint64_t generation = 0;
  bool open = false;
  bool stop = false;
  int participants = 0;  // workers inside the current job

  const std::function<void(int64_t, int64_t)>* fn = nullptr;
  int64_t n = 0;
  int64_t chunk = 1;
  int64_t n_chunks = 0;
  std::atomic<int64_t> next{0};
  std::exception_ptr error;

  // Claims chunks until none are left. An exception is kept (the first one) and
  // rethrown on the calling thread, so no worker ever dies of one.
  void run_chunks() {
    for (;;) {
      const int64_t c = next.fetch_add(1, std::memory_order_relaxed);
      if (c >= n_chunks) return;
      const int64_t begin = c * chunk;
      const int64_t end = std::min(n, begin + chunk);
      try {
        (*fn)(begin, end);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mu);
        if (!error) error = std::current_exception();
      }
    }
  }

  void worker_loop() {
    uint64_t seen = 0;
    std::unique_lock<std::mutex> lock(mu);
    for (;;) {
      wake.wait(lock, [&] { return stop || generation != seen; });
      if (stop) return;
      seen = generation;
      if (!open) continue;
      ++participants;
      lock.unlock();
      run_chunks();
      lock.lock();
      if (--participants == 0) idle.notify_one();
    }
  }
};

ThreadPool::ThreadPool(int n_threads) : impl_(new Impl) {
  if (n_threads <= 0) n_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 1; i < n_threads; ++i) impl_->workers.emplace_back([this] { impl_->worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(impl_->mu);
    impl_->stop = true;
  }
  impl_->wake.notify_all();
  for (std::thread& t : impl_->workers) t.join();
  delete impl_;
}

int ThreadPool::size() const { return static_cast<int>(impl_->workers.size()) + 1; }

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  Impl& p = *impl_;
  if (p.workers.empty() || n == 1) {
    fn(0, n);
    return;
  }
  // A few chunks per thread so a thread descheduled by the OS does not hold up the rest.
  const int64_t want = std::min<int64_t>(n, static_cast<int64_t>(size()) * 4);
  {
    std::lock_guard<std::mutex> lock(p.mu);
    p.fn = &fn;
    p.n = n;
    p.chunk = (n + want - 1) / want;
    p.n_chunks = (n + p.chunk - 1) / p.chunk;
    p.next.store(0, std::memory_order_relaxed);
    p.error = nullptr;
    p.open = true;
    ++p.generation;
  }
  p.wake.notify_all();
  p.run_chunks();
  std::exception_ptr error;
  {
    // Every chunk is claimed now; those still running belong to participants.
    std::unique_lock<std::mutex> lock(p.mu);
    p.idle.wait(lock, [&] { return p.participants == 0; });
    p.open = false;
    p.fn = nullptr;
    error = p.error;
    p.error = nullptr;
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace cairn
