// tests/core/thread_pool_test.cpp — the kernel thread pool: splits, exceptions, sleep and wake, nesting, pinning, shutdown.
#include "core/thread_pool.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <utility>
#include <vector>

namespace cairn {
namespace {

struct Range {
  int64_t begin, end;
};

// Runs one parallel_for and returns its ranges, checking coverage on the way.
std::vector<Range> covered_once(ThreadPool& pool, int64_t n, int64_t grain) {
  std::vector<std::atomic<int>> hits(static_cast<size_t>(std::max<int64_t>(n, 0)));
  std::mutex mu;
  std::vector<Range> ranges;
  pool.parallel_for(
      n,
      [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e && i >= 0 && i < n; ++i) hits[static_cast<size_t>(i)]++;
        std::lock_guard<std::mutex> lock(mu);
        ranges.push_back({b, e});
      },
      grain);
  for (const Range& r : ranges) {
    EXPECT_LT(r.begin, r.end) << "empty or reversed range, n=" << n;
    EXPECT_GE(r.begin, 0);
    EXPECT_LE(r.end, n);
  }
  for (int64_t i = 0; i < n; ++i)
    EXPECT_EQ(hits[static_cast<size_t>(i)].load(), 1) << "n=" << n << " i=" << i;
  return ranges;
}

TEST(ThreadPool, CoversEveryIndexExactlyOnce) {
  for (int threads : {1, 2, 3, 4, 7}) {
    ThreadPool pool(threads);
    ASSERT_EQ(pool.size(), threads);
    for (int64_t grain : {0, 1, 3, 1000}) {
      for (int64_t n : {-3, 0, 1, 2, 3, 5, 6, 7, 8, 64, 1000, 100003}) {
        SCOPED_TRACE(testing::Message() << "threads=" << threads << " grain=" << grain);
        const std::vector<Range> ranges = covered_once(pool, n, grain);
        if (n <= 0) {
          EXPECT_TRUE(ranges.empty());
        }
        for (const Range& r : ranges) {
          if (grain > 0) {
            EXPECT_LE(r.end - r.begin, grain);
          }
        }
      }
    }
  }
}

TEST(ThreadPool, StaticSplitIsOneRangePerThreadWithSizesWithinOne) {
  for (int threads : {2, 3, 4}) {
    ThreadPool pool(threads);
    for (int64_t n : {2, 3, 4, 5, 11, 100, 4097}) {
      std::vector<Range> ranges = covered_once(pool, n, 0);
      std::sort(ranges.begin(), ranges.end(),
                [](const Range& a, const Range& b) { return a.begin < b.begin; });
      ASSERT_EQ(ranges.size(), static_cast<size_t>(std::min<int64_t>(n, threads))) << n;
      int64_t lo = INT64_MAX, hi = 0;
      for (const Range& r : ranges) {
        lo = std::min(lo, r.end - r.begin);
        hi = std::max(hi, r.end - r.begin);
      }
      EXPECT_LE(hi - lo, 1) << "threads=" << threads << " n=" << n;
    }
  }
}

// Kernels rely on a static split landing the same rows on the same thread (so
// each core keeps its weight rows in cache), call after call. Only the caller
// may stand in for a late worker; a worker never runs another worker's rows.
TEST(ThreadPool, StaticSplitKeepsEachRangeOnItsOwnWorker) {
  ThreadPool pool(3);
  const std::thread::id caller = std::this_thread::get_id();
  std::map<int64_t, std::set<std::thread::id>> runners;
  std::mutex mu;
  for (int rep = 0; rep < 300; ++rep) {
    pool.parallel_for(1000, [&](int64_t b, int64_t) {
      std::lock_guard<std::mutex> lock(mu);
      runners[b].insert(std::this_thread::get_id());
    });
  }
  ASSERT_EQ(runners.size(), 3u);
  EXPECT_EQ(runners[0], std::set<std::thread::id>{caller});
  std::set<std::thread::id> workers;
  for (const auto& [b, ids] : runners) {
    std::set<std::thread::id> own = ids;
    own.erase(caller);
    EXPECT_LE(own.size(), 1u) << "range " << b << " ran on two workers";
    for (const std::thread::id& id : own) EXPECT_TRUE(workers.insert(id).second);
  }
}

TEST(ThreadPool, RunCallsEveryShareOnceNoWorkerTwice) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (int rep = 0; rep < 50; ++rep) {
      std::vector<std::atomic<int>> calls(static_cast<size_t>(threads));
      std::vector<std::thread::id> ids(static_cast<size_t>(threads));
      std::atomic<int> bad_count{0};
      pool.run([&](int t, int nt) {
        if (nt != threads || t < 0 || t >= threads) {
          ++bad_count;
          return;
        }
        calls[static_cast<size_t>(t)]++;
        ids[static_cast<size_t>(t)] = std::this_thread::get_id();
      });
      ASSERT_EQ(bad_count.load(), 0);
      for (int t = 0; t < threads; ++t) ASSERT_EQ(calls[static_cast<size_t>(t)].load(), 1) << t;
      EXPECT_EQ(ids[0], std::this_thread::get_id()) << "the caller runs share 0";
      for (int t = 1; t < threads; ++t) {
        for (int u = t + 1; u < threads; ++u) {
          if (ids[static_cast<size_t>(t)] != ids[0]) {
            EXPECT_NE(ids[static_cast<size_t>(t)], ids[static_cast<size_t>(u)]) << t << " " << u;
          }
        }
      }
    }
  }
}

TEST(ThreadPool, ExceptionReachesCallerAndPoolSurvives) {
  ThreadPool pool(3);
  // Thrown by a worker's share (index 50 is in the middle range) and by the caller's.
  for (int64_t where : {50, 0, 99}) {
    for (int64_t grain : {0, 7}) {
      EXPECT_THROW(pool.parallel_for(
                       100,
                       [&](int64_t b, int64_t e) {
                         if (b <= where && where < e) throw std::runtime_error("boom");
                       },
                       grain),
                   std::runtime_error);
      std::atomic<int64_t> sum{0};
      pool.parallel_for(100, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) sum += i;
      });
      EXPECT_EQ(sum.load(), 4950);
    }
  }
  // Every thread throws: exactly one exception arrives.
  EXPECT_THROW(pool.run([](int, int) { throw std::logic_error("all"); }), std::logic_error);
  EXPECT_THROW(pool.run([](int t, int) {
    if (t == 2) throw std::out_of_range("worker");
  }),
               std::out_of_range);
  std::atomic<int> ran{0};
  pool.run([&](int, int) { ++ran; });
  EXPECT_EQ(ran.load(), 3);
}

TEST(ThreadPool, HundredThousandTinyJobsInARow) {
  ThreadPool pool(2);
  const std::thread::id caller = std::this_thread::get_id();
  int64_t good = 0, by_worker = 0;
  std::vector<int> v(64, -1);
  std::vector<std::thread::id> who(64);
  for (int rep = 0; rep < 100000; ++rep) {
    // A few hundred ns per share, so a polling worker usually claims its own.
    auto write = [&](size_t i) {
      volatile uint32_t x = static_cast<uint32_t>(i);
      for (int k = 0; k < 8; ++k) x = x * 2654435761u + 1;
      v[i] = rep;
      who[i] = std::this_thread::get_id();
    };
    if (rep % 2 == 0) {
      pool.parallel_for(64, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) write(static_cast<size_t>(i));
      });
    } else {
      pool.run([&](int t, int nt) {
        for (size_t i = static_cast<size_t>(t); i < v.size(); i += static_cast<size_t>(nt))
          write(i);
      });
    }
    // Complete on return: no worker may still be writing the previous job.
    good += std::count(v.begin(), v.end(), rep) == 64;
    by_worker += who[1] != caller;
  }
  EXPECT_EQ(good, 100000);
  std::printf("jobs whose index 1 ran on the worker: %lld of 100000\n",
              static_cast<long long>(by_worker));
}

// Workers that have gone to sleep must wake for the next job, every time.
TEST(ThreadPool, JobsAfterWorkersFellAsleep) {
  ThreadPoolOptions never_spin;
  never_spin.spin_us = 0;
  ThreadPool sleepy(3, never_spin);
  std::atomic<int64_t> count{0};
  for (int rep = 0; rep < 20000; ++rep) sleepy.run([&](int, int) { ++count; });
  EXPECT_EQ(count.load(), 60000);

  ThreadPoolOptions short_spin;
  short_spin.spin_us = 20;
  ThreadPool pool(2, short_spin);
  for (int rep = 0; rep < 20; ++rep) {
    std::this_thread::sleep_for(std::chrono::microseconds(rep % 2 ? 500 : 5));
    std::atomic<int> ran{0};
    pool.run([&](int, int) { ++ran; });
    ASSERT_EQ(ran.load(), 2) << rep;
  }
}

// A job longer than the caller's polling and yielding windows: the caller
// sleeps and the last worker must wake it.
TEST(ThreadPool, CallerWaitsOutALongWorkerShare) {
  ThreadPool pool(2);
  for (int rep = 0; rep < 3; ++rep) {
    std::atomic<int> done{0};
    pool.run([&](int t, int) {
      if (t == 1) std::this_thread::sleep_for(std::chrono::milliseconds(20));
      ++done;
    });
    EXPECT_EQ(done.load(), 2);
  }
}

// A warm-up request far larger than any cache (a terabyte of addresses:
// prefetches never fault) must end when the next job arrives: the worker then
// still runs its own share, the caller (whose request is ignored) never
// stalls, and the pool is destroyed at once.
TEST(ThreadPool, WarmAfterShareStopsAtTheNextJob) {
  static const char buffer[4096] = {};
  constexpr size_t kHuge = size_t{1} << 40;
  ThreadPool pool(2);
  int worker_ran_share1 = 0;
  for (int rep = 0; rep < 20; ++rep) {
    std::thread::id share1;
    std::atomic<int> done{0};
    pool.run([&](int t, int) {
      ThreadPool::warm_after_share(buffer, kHuge);
      if (t == 1) share1 = std::this_thread::get_id();
      // Gives a free worker ample time to claim share 1 before the caller would.
      if (t == 0) std::this_thread::sleep_for(std::chrono::milliseconds(2));
      ++done;
    });
    ASSERT_EQ(done.load(), 2);
    // From the second job on, the worker has a huge request behind it.
    if (rep > 0 && share1 != std::this_thread::get_id()) ++worker_ran_share1;
  }
  // A worker stuck warming (seconds for a terabyte) would leave every share 1
  // to the caller.
  EXPECT_GT(worker_ran_share1, 0);
  pool.run([](int t, int) {
    if (t == 1) ThreadPool::warm_after_share(buffer, kHuge);
  });
  // Leaving scope joins the worker while it warms: stop is a new generation.
}

// Outside a job, and on threads that are not workers, a request does nothing.
TEST(ThreadPool, WarmAfterShareOutsideAJobIsIgnored) {
  static const char buffer[4096] = {};
  ThreadPool::warm_after_share(buffer, size_t{1} << 40);
  ThreadPool pool(2);
  std::atomic<int> done{0};
  pool.run([&](int, int) { ++done; });
  EXPECT_EQ(done.load(), 2);
}

TEST(ThreadPool, DestructionWhileIdleSpinningOrSleeping) {
  for (int rep = 0; rep < 200; ++rep) {
    ThreadPool fresh(3);  // destroyed before its workers may even have started
  }
  for (int rep = 0; rep < 200; ++rep) {
    ThreadPool pool(2);
    pool.run([](int, int) {});  // workers are polling when it goes
  }
  for (int spin_us : {0, 100}) {
    ThreadPoolOptions o;
    o.spin_us = spin_us;
    ThreadPool pool(3, o);
    pool.run([](int, int) {});
    std::this_thread::sleep_for(std::chrono::milliseconds(3));  // workers asleep on the futex
  }
  SUCCEED();
}

TEST(ThreadPool, TwoPoolsUsedAtOnceDoNotDeadlock) {
  ThreadPool a(2), b(2);
  std::atomic<int64_t> sum_a{0}, sum_b{0};
  std::thread other([&] {
    for (int rep = 0; rep < 2000; ++rep)
      b.parallel_for(10, [&](int64_t x, int64_t y) { sum_b += y - x; });
  });
  for (int rep = 0; rep < 2000; ++rep)
    a.parallel_for(10, [&](int64_t x, int64_t y) { sum_a += y - x; });
  other.join();
  EXPECT_EQ(sum_a.load(), 20000);
  EXPECT_EQ(sum_b.load(), 20000);
  // One pool's job calling into another pool from every thread at once.
  std::atomic<int64_t> nested{0};
  a.run([&](int, int) { b.parallel_for(100, [&](int64_t x, int64_t y) { nested += y - x; }); });
  EXPECT_EQ(nested.load(), 200);
}

TEST(ThreadPool, NestedOrConcurrentCallsOnOnePoolRunInline) {
  ThreadPool pool(3);
  std::vector<std::atomic<int>> hits(30 * 30);
  pool.parallel_for(30, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      pool.parallel_for(30, [&](int64_t b2, int64_t e2) {
        for (int64_t j = b2; j < e2; ++j) hits[static_cast<size_t>(i * 30 + j)]++;
      });
  });
  for (auto& h : hits) ASSERT_EQ(h.load(), 1);

  std::atomic<int> runs{0};
  pool.run([&](int, int) { pool.run([&](int, int) { ++runs; }); });
  EXPECT_EQ(runs.load(), 9);

  std::atomic<int64_t> total{0};
  auto hammer = [&] {
    for (int rep = 0; rep < 3000; ++rep)
      pool.parallel_for(7, [&](int64_t b, int64_t e) { total += e - b; });
  };
  std::thread t1(hammer), t2(hammer);
  hammer();
  t1.join();
  t2.join();
  EXPECT_EQ(total.load(), 3 * 3000 * 7);
}

TEST(ThreadPool, MoreThreadsThanCpusStillWorks) {
  ThreadPool pool(9);
  EXPECT_EQ(pool.size(), 9);
  std::atomic<int64_t> sum{0};
  for (int rep = 0; rep < 2000; ++rep)
    pool.parallel_for(100, [&](int64_t b, int64_t e) { sum += e - b; });
  EXPECT_EQ(sum.load(), 200000);
}

cpu_set_t current_affinity() {
  cpu_set_t set;
  CPU_ZERO(&set);
  EXPECT_EQ(pthread_getaffinity_np(pthread_self(), sizeof(set), &set), 0);
  return set;
}

// Runs fn on every share, share 0 waiting (a bounded while) for the others to
// start, so each share almost surely runs on its own worker. Returns whether
// share t ran on a thread other than the caller's.
std::vector<uint8_t> run_on_workers(ThreadPool& pool, const std::function<void(int)>& fn) {
  const std::thread::id caller = std::this_thread::get_id();
  std::vector<uint8_t> on_worker(static_cast<size_t>(pool.size()), 0);
  std::atomic<int> started{0};
  pool.run([&](int t, int nt) {
    on_worker[static_cast<size_t>(t)] = std::this_thread::get_id() != caller;
    fn(t);
    if (t != 0) {
      ++started;
      return;
    }
    const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    while (started.load() < nt - 1 && std::chrono::steady_clock::now() < give_up)
      std::this_thread::yield();
  });
  return on_worker;
}

TEST(ThreadPool, WorkersArePinnedToAllowedCpusOnly) {
  const cpu_set_t allowed = current_affinity();
  const int n = std::min(ThreadPool::default_size(), 4);
  if (n < 2) GTEST_SKIP() << "one allowed CPU: no worker to pin";
  ThreadPool pool(n);
  std::vector<cpu_set_t> masks(static_cast<size_t>(n));
  const std::vector<uint8_t> on_worker =
      run_on_workers(pool, [&](int t) { masks[static_cast<size_t>(t)] = current_affinity(); });
  std::set<int> used;
  for (int t = 1; t < n; ++t) {
    if (!on_worker[static_cast<size_t>(t)]) continue;  // a late worker: nothing to see
    cpu_set_t& m = masks[static_cast<size_t>(t)];
    cpu_set_t inter;
    CPU_AND(&inter, &m, &allowed);
    EXPECT_TRUE(CPU_EQUAL(&inter, &m)) << "worker " << t << " may run outside the allowed set";
    if (pool.pinned_workers() == n - 1) {
      ASSERT_EQ(CPU_COUNT(&m), 1) << "worker " << t;
      for (int c = 0; c < CPU_SETSIZE; ++c)
        if (CPU_ISSET(c, &m)) used.insert(c);
      EXPECT_FALSE(CPU_ISSET(*used.begin(), &masks[0]) && CPU_COUNT(&masks[0]) == 1)
          << "the caller is never pinned";
    }
  }
  EXPECT_EQ(pool.pinned_workers(), n - 1) << "pinning failed here; allowed, but unexpected";
  if (pool.pinned_workers() == n - 1) {
    EXPECT_EQ(used.size(),
              static_cast<size_t>(std::count(on_worker.begin() + 1, on_worker.end(), 1)));
  }

  ThreadPoolOptions unpinned;
  unpinned.pin = false;
  ThreadPool free_pool(2, unpinned);
  EXPECT_EQ(free_pool.pinned_workers(), 0);
  cpu_set_t worker_mask = allowed;
  run_on_workers(free_pool, [&](int t) {
    if (t == 1) worker_mask = current_affinity();
  });
  EXPECT_TRUE(CPU_EQUAL(&worker_mask, &allowed));
}

TEST(ThreadPool, DefaultSizeIsTheAllowedCpuCount) {
  const cpu_set_t allowed = current_affinity();
  EXPECT_EQ(ThreadPool::default_size(), CPU_COUNT(&allowed));
  ThreadPool zero(0), negative(-4);
  EXPECT_EQ(zero.size(), ThreadPool::default_size());
  EXPECT_EQ(negative.size(), ThreadPool::default_size());
}

}  // namespace
}  // namespace cairn
