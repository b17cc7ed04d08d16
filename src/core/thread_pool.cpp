// core/thread_pool.cpp — ThreadPool: worker start-up and pinning, dispatch of parallel_for jobs, and shutdown.
#include "core/thread_pool.h"

#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <system_error>
#include <thread>
#include <vector>

#include "core/cpu_topology.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace cairn {

namespace {

constexpr int kMaxThreads = 1024;
// A caller still waiting for workers this long after the polling window
// sleeps: a job that runs for seconds (e.g. quantizing a model) must not keep
// a core busy-waiting.
constexpr auto kCallerExtraPoll = std::chrono::microseconds(1000);
// While polling, give the CPU away this often: on a loaded machine the thread
// we wait for may be queued behind us on the same CPU. With nothing else
// runnable sched_yield returns at once, so an idle machine loses ~1 us in 20.
constexpr auto kYieldEvery = std::chrono::microseconds(20);

using Clock = std::chrono::steady_clock;

// Lines a waiting worker requests between two looks for the next job: 512
// bytes take ~15 ns at a core's streaming rate, well under a job's wake-up.
constexpr size_t kWarmBatch = 512;

// What warm_after_share asked of this thread; only workers ever act on it.
struct WarmRequest {
  uintptr_t base = 0;
  size_t bytes = 0;
};
thread_local bool tl_is_worker = false;
thread_local WarmRequest tl_warm;

// Tells the core this is a wait loop: it frees the pipeline for the other
// hyper-thread and avoids the memory-order flush when the line finally changes.
inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#else
  std::atomic_signal_fence(std::memory_order_seq_cst);
#endif
}

// Polls done() for up to `window`; false when it never came true.
template <class Done>
bool poll_until(const Done& done, Clock::duration window) {
  if (done()) return true;
  if (window <= Clock::duration::zero()) return false;
  const Clock::time_point start = Clock::now();
  Clock::time_point next_yield = start + kYieldEvery;
  for (unsigned i = 1;; ++i) {
    if (done()) return true;
    cpu_relax();
    if (i % 16 == 0) {
      const Clock::time_point now = Clock::now();
      if (now - start >= window) return false;
      if (now >= next_yield) {
        sched_yield();
        next_yield = now + kYieldEvery;
      }
    }
  }
}

// Raw futex rather than std::atomic::wait: the pool does its own bounded
// polling first, and libstdc++'s wait adds spinning and yields of its own.
static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t) &&
              std::atomic<uint32_t>::is_always_lock_free);

void futex_wait(std::atomic<uint32_t>& word, uint32_t expected) {
  // Returns at once when word != expected; spurious returns are fine: callers loop.
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT_PRIVATE, expected, nullptr,
          nullptr, 0);
}

void futex_wake(std::atomic<uint32_t>& word, int count) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE_PRIVATE, count, nullptr,
          nullptr, 0);
}

std::vector<int> allowed_cpus() {
  std::vector<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) cpus.push_back(c);
  }
  return cpus;
}

bool pin_current_thread(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
}

bool pinning_disabled_by_env() {
  const char* v = std::getenv("CAIRN_PIN");
  return v != nullptr && std::strcmp(v, "0") == 0;
}

}  // namespace

// One job at a time. The caller writes the job, then bumps `gen`; workers
// poll (then sleep on) `gen`. Share t of job g goes to whoever first moves
// claims[t] from g-1 to g: worker t as soon as it sees g, or else the caller
// once its own share is done. So a worker that is asleep or descheduled (a
// loaded machine) is skipped instead of waited for, and on an idle machine
// each worker still gets its own share every time. Whoever finishes a share
// decrements `pending`; the caller returns when it reaches 0. A worker reads
// the job fields only after winning a claim, and the job cannot complete (so
// the fields cannot be rewritten) while a claimed share is running. Hot words
// get their own cache lines so polling one does not bounce another.
struct ThreadPool::Impl {
  enum class Kind { Static, Dynamic, Run };

  struct alignas(64) Slot {
    std::atomic<uint32_t> claim{0};  // the last generation whose share t was taken
    std::exception_ptr error;        // written by the one who ran share t
  };

  int n_threads = 1;
  Clock::duration spin{};
  std::vector<std::thread> workers;
  std::unique_ptr<Slot[]> slots;
  std::atomic<int> pinned{0};

  // The job: written by the caller before it bumps gen, read after a claim.
  Kind kind = Kind::Static;
  const std::function<void(int64_t, int64_t)>* range_fn = nullptr;
  const std::function<void(int, int)>* run_fn = nullptr;
  int64_t n = 0;
  int64_t grain = 0;
  int64_t n_chunks = 0;

  alignas(64) std::atomic<uint32_t> gen{0};
  std::atomic<bool> stop{false};
  alignas(64) std::atomic<int> sleepers{0};  // workers inside (or entering) futex_wait on gen
  alignas(64) std::atomic<int64_t> next_chunk{0};
  alignas(64) std::atomic<uint32_t> pending{0};  // shares 1.. not yet finished
  std::atomic<bool> caller_sleeping{false};
  alignas(64) std::atomic<bool> busy{false};  // a job is running: later calls run inline

  // Thread t's share of [0, n) under the static split: sizes within 1.
  void static_range(int t, int64_t& begin, int64_t& end) const {
    const int64_t q = n / n_threads, r = n % n_threads;
    begin = t * q + std::min<int64_t>(t, r);
    end = begin + q + (t < r ? 1 : 0);
  }

  bool claim(int t, uint32_t g) {
    uint32_t expected = g - 1;
    return slots[static_cast<size_t>(t)].claim.compare_exchange_strong(
        expected, g, std::memory_order_acq_rel, std::memory_order_relaxed);
  }

  void do_share(int t) {
    try {
      switch (kind) {
        case Kind::Static: {
          int64_t b, e;
          static_range(t, b, e);
          if (b < e) (*range_fn)(b, e);
          break;
        }
        case Kind::Dynamic:
          for (;;) {
            const int64_t c = next_chunk.fetch_add(1, std::memory_order_relaxed);
            if (c >= n_chunks) break;
            const int64_t b = c * grain;
            (*range_fn)(b, std::min(n, b + grain));
          }
          break;
        case Kind::Run:
          (*run_fn)(t, n_threads);
          break;
      }
    } catch (...) {
      slots[static_cast<size_t>(t)].error = std::current_exception();
    }
  }

  // A share 1.. is done. The last one wakes a caller that gave up polling
  // (Dekker with wait_for_shares: both sides are seq_cst).
  void finish_share() {
    if (pending.fetch_sub(1, std::memory_order_seq_cst) == 1 &&
        caller_sleeping.load(std::memory_order_seq_cst))
      futex_wake(pending, 1);
  }

  // Returns a generation other than `seen` once the caller has published one.
  uint32_t wait_for_job(uint32_t seen) {
    uint32_t g = seen;
    if (poll_until([&] { return (g = gen.load(std::memory_order_acquire)) != seen; }, spin))
      return g;
    // Dekker with publish(): either we see the new generation here, or the
    // caller sees sleepers > 0 and wakes us (both sides are seq_cst).
    sleepers.fetch_add(1, std::memory_order_seq_cst);
    while ((g = gen.load(std::memory_order_seq_cst)) == seen) futex_wait(gen, seen);
    sleepers.fetch_sub(1, std::memory_order_relaxed);
    return g;
  }

  // Pulls the share's warm-up request into this core's caches until a new
  // job (or stop) is published.
  void warm(uint32_t seen) {
    const WarmRequest r = tl_warm;
    tl_warm = {};
    for (size_t o = 0; o < r.bytes; o += kWarmBatch) {
      if (gen.load(std::memory_order_relaxed) != seen) return;
      const size_t end = std::min(r.bytes, o + kWarmBatch);
      // Integer arithmetic: the range is only a hint, so its end is not trusted.
      for (size_t i = o; i < end; i += 64)
        __builtin_prefetch(reinterpret_cast<const char*>(r.base + i), 0, 2);
    }
  }

  void worker_loop(int t, int cpu) {
    if (cpu >= 0 && pin_current_thread(cpu)) pinned.fetch_add(1, std::memory_order_relaxed);
    tl_is_worker = true;
    uint32_t seen = 0;  // no job is published before the constructor returns
    for (;;) {
      seen = wait_for_job(seen);
      if (stop.load(std::memory_order_acquire)) return;
      if (!claim(t, seen)) continue;  // the caller took our share: we were late
      do_share(t);
      finish_share();
      if (tl_warm.bytes != 0) warm(seen);
    }
  }

  // Publishes the job written into the fields; returns its generation.
  uint32_t publish() {
    pending.store(static_cast<uint32_t>(n_threads - 1), std::memory_order_relaxed);
    const uint32_t g = gen.fetch_add(1, std::memory_order_seq_cst) + 1;  // releases the fields
    if (sleepers.load(std::memory_order_seq_cst) > 0) futex_wake(gen, INT_MAX);
    return g;
  }

  void wait_for_shares() {
    if (poll_until([&] { return pending.load(std::memory_order_acquire) == 0; },
                   spin + kCallerExtraPoll))
      return;
    caller_sleeping.store(true, std::memory_order_seq_cst);
    for (uint32_t p; (p = pending.load(std::memory_order_seq_cst)) != 0;) futex_wait(pending, p);
    caller_sleeping.store(false, std::memory_order_relaxed);
  }

  // Runs share 0 here, then every share no worker has claimed yet, waits for
  // the rest, and rethrows the lowest-indexed share's exception, if any.
  void run_job() {
    const uint32_t g = publish();
    do_share(0);
    for (int t = 1; t < n_threads; ++t) {
      if (claim(t, g)) {
        do_share(t);
        finish_share();
      }
    }
    wait_for_shares();
    std::exception_ptr first;
    for (int t = 0; t < n_threads; ++t) {
      std::exception_ptr& e = slots[static_cast<size_t>(t)].error;
      if (e && !first) first = e;
      e = nullptr;
    }
    range_fn = nullptr;
    run_fn = nullptr;
    busy.store(false, std::memory_order_release);
    if (first) std::rethrow_exception(first);
  }

  bool try_begin() { return !busy.exchange(true, std::memory_order_acquire); }
};

// One thread per physical core: the kernels are bound by memory (decode) or
// by the vector units (prompts), which a core's SMT siblings share.
int ThreadPool::default_size() {
  const std::vector<int> cpus = allowed_cpus();
  if (!cpus.empty()) return std::min(count_cores(read_cpu_places(cpus)), kMaxThreads);
  return static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 1024u));
}

ThreadPool::ThreadPool(int n_threads, ThreadPoolOptions options) : impl_(new Impl) {
  if (n_threads <= 0) n_threads = default_size();
  n_threads = std::min(n_threads, kMaxThreads);
  const std::vector<int> cpus = cpus_by_core(read_cpu_places(allowed_cpus()));
  const bool fits = static_cast<size_t>(n_threads) <= cpus.size();
  const bool pin = options.pin && fits && !pinning_disabled_by_env();
  impl_->spin =
      fits ? std::chrono::microseconds(std::max(0, options.spin_us)) : Clock::duration::zero();
  impl_->slots = std::make_unique<Impl::Slot[]>(static_cast<size_t>(n_threads));
  // Worker i takes the i-th CPU in core order (separate physical cores
  // first); the caller is expected on the first.
  for (int i = 1; i < n_threads; ++i) {
    const int cpu = pin ? cpus[static_cast<size_t>(i)] : -1;
    try {
      impl_->workers.emplace_back([this, i, cpu] { impl_->worker_loop(i, cpu); });
    } catch (const std::system_error&) {
      break;  // out of threads: run with the ones we have
    }
  }
  impl_->n_threads = static_cast<int>(impl_->workers.size()) + 1;
}

ThreadPool::~ThreadPool() {
  impl_->stop.store(true, std::memory_order_relaxed);
  impl_->gen.fetch_add(1, std::memory_order_seq_cst);  // releases stop
  futex_wake(impl_->gen, INT_MAX);
  for (std::thread& t : impl_->workers) t.join();
  delete impl_;
}

int ThreadPool::size() const { return impl_->n_threads; }

int ThreadPool::pinned_workers() const { return impl_->pinned.load(std::memory_order_relaxed); }

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn,
                              int64_t grain) {
  if (n <= 0) return;
  Impl& p = *impl_;
  if (p.n_threads == 1 || n == 1 || (grain > 0 && grain >= n) || !p.try_begin()) {
    if (grain <= 0) {
      fn(0, n);
    } else {
      for (int64_t b = 0; b < n; b += grain) fn(b, std::min(n, b + grain));
    }
    return;
  }
  p.range_fn = &fn;
  p.n = n;
  if (grain > 0) {
    p.kind = Impl::Kind::Dynamic;
    p.grain = grain;
    p.n_chunks = (n + grain - 1) / grain;
    p.next_chunk.store(0, std::memory_order_relaxed);
  } else {
    p.kind = Impl::Kind::Static;
  }
  p.run_job();
}

void ThreadPool::warm_after_share(const void* p, size_t bytes) {
  if (tl_is_worker) tl_warm = {reinterpret_cast<uintptr_t>(p), bytes};
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
  Impl& p = *impl_;
  if (p.n_threads == 1 || !p.try_begin()) {
    for (int t = 0; t < p.n_threads; ++t) fn(t, p.n_threads);
    return;
  }
  p.run_fn = &fn;
  p.kind = Impl::Kind::Run;
  p.run_job();
}

}  // namespace cairn
