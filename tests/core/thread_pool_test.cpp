#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <vector>

#include "core/thread_pool.h"

namespace cairn {
namespace {

TEST(ThreadPool, CoversEveryIndexExactlyOnce) {
  for (int threads : {1, 2, 4}) {
    ThreadPool pool(threads);
    EXPECT_EQ(pool.size(), threads);
    for (int64_t n : {0, 1, 2, 3, 7, 64, 1000, 100003}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      std::atomic<int> bad_ranges{0};
      pool.parallel_for(n, [&](int64_t b, int64_t e) {
        if (b < 0 || e > n || b >= e) ++bad_ranges;
        for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
      });
      EXPECT_EQ(bad_ranges.load(), 0);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1) << n << " " << i;
    }
  }
}

TEST(ThreadPool, ManySmallJobsBackToBack) {
  // Each call must be complete when it returns, even with workers waking late.
  ThreadPool pool(4);
  int64_t total = 0;
  for (int rep = 0; rep < 2000; ++rep) {
    std::vector<int> v(17, 0);
    pool.parallel_for(17, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) v[static_cast<size_t>(i)] = rep;
    });
    for (int x : v) total += (x == rep);
  }
  EXPECT_EQ(total, 2000 * 17);
}

TEST(ThreadPool, ExceptionReachesCallerAndPoolSurvives) {
  ThreadPool pool(3);
  EXPECT_THROW(pool.parallel_for(100,
                                 [](int64_t b, int64_t e) {
                                   if (b <= 50 && 50 < e) throw std::runtime_error("boom");
                                 }),
               std::runtime_error);
  std::atomic<int64_t> sum{0};
  pool.parallel_for(100, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) sum += i;
  });
  EXPECT_EQ(sum.load(), 4950);
}

TEST(ThreadPool, DefaultSizeUsesHardware) {
  ThreadPool pool(0);
  EXPECT_GE(pool.size(), 1);
}

}  // namespace
}  // namespace cairn
