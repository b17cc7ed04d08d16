// core/thread_pool.h — a fixed pool of persistent worker threads for the
// data-parallel kernels. Owns its threads (created once, pinned to CPUs of the
// process's allowed set, joined on destruction) and the fork/join barrier the
// kernels pay on every call: workers poll for the next job for a short while
// after each one, then sleep on a futex so an idle server does not burn cores.
// The calling thread always does a share of the work, and also runs the share
// of any worker that has not started on it by then (asleep or descheduled):
// a late worker is skipped, never waited for. Never schedules anything
// itself, never knows what the work is, never lets an exception kill a
// thread: the first one thrown reaches the caller.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

namespace cairn {

struct ThreadPoolOptions {
  // How long an idle worker polls for the next job before it sleeps. A decode
  // step issues a job every few tens of microseconds, so polling keeps each
  // wake-up at cache-line latency instead of a futex wake (tens of us); past
  // this it sleeps. Ignored (0) when the pool has more threads than the CPUs
  // it may use: a polling thread would then steal time from a working one.
  int spin_us = 150;
  // Pin worker i to the i-th CPU of the process's allowed set, taken one per
  // physical core before any core's second thread (core/cpu_topology.h; the
  // caller, thread 0, is left alone: it is not ours). Failures are ignored; no
  // pinning when threads outnumber allowed CPUs, or when CAIRN_PIN=0 is set.
  bool pin = true;
};

class ThreadPool {
 public:
  // Total threads including the caller; <= 0: default_size(). At most 1024.
  explicit ThreadPool(int n_threads, ThreadPoolOptions options = {});
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Physical cores among the CPUs this process may run on (its affinity
  // mask; SMT siblings count once), at least 1.
  static int default_size();

  int size() const;
  // Workers that were pinned to a CPU (0 when pinning is off or failed).
  int pinned_workers() const;

  // fn(begin, end) over disjoint non-empty ranges covering [0, n); returns when
  // all are done. grain <= 0: a static split, one contiguous range per thread
  // with sizes within 1 (thread t always gets the same rows for the same n,
  // so each core keeps re-reading the same weights, late workers aside);
  // threads past n get none.
  // grain > 0: chunks of `grain` indices handed out on demand (for uneven work).
  // An exception thrown by fn is rethrown here after every thread has stopped.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t grain = 0);

  // fn(share, size()) once for every share in [0, size()): for kernels that
  // partition their work themselves. Share 0 runs on the caller and share t
  // on worker t, unless worker t is late: then the caller runs it after its
  // own. So fn may keep per-share scratch indexed by share, but must never
  // wait for another share (no barrier inside a job).
  void run(const std::function<void(int, int)>& fn);

  // From inside a job: asks the worker running this share to pull
  // [p, p + bytes) into its caches once the share is done, while it waits for
  // the next job. It stops as soon as a job is published, so the caller never
  // waits for it. Ignored on the calling thread (it goes back to the caller's
  // own work) and outside a job. For kernels that know what a thread reads
  // next: a decode step's next weight matrix, whose first lines would
  // otherwise arrive one memory latency at a time while the stream ramps up.
  static void warm_after_share(const void* p, size_t bytes);

  // Not re-entrant: a call made from inside a job, or while another thread's
  // job is running on this pool, does all its work on the calling thread
  // (correct, serial) rather than deadlocking.

 private:
  struct Impl;
  Impl* impl_;
};

}  // namespace cairn
