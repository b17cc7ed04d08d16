// bench_pool: what one fork/join of the kernel thread pool costs. A decode step
// of a 22-layer model makes ~200 of them, so at ~20 ms per token every 10 us of
// barrier costs about 10% of the step.
//
// BM_*Empty is the bare barrier, but with nothing to do the caller may finish
// the whole job before a worker notices it, so it flatters any pool. The
// *2us* cases give each range 2 us of work (a busy wait on the clock), so the
// ideal is 2 us with every thread taking part and 4 us when the caller ends up
// doing both halves: time - 2 us is the real cost of the barrier.
//
// On a shared machine the mean is mostly other people's load; the p10_ns and
// p50_ns counters (per-call quantiles, each call timed alone) show what a call
// costs when it is not preempted.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "core/thread_pool.h"

namespace {

void busy_for(std::chrono::nanoseconds d) {
  const auto end = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < end) {
  }
}

// Times each call of `body` alone and reports the 10th and 50th percentiles.
template <class Body>
void timed_calls(benchmark::State& state, const Body& body) {
  std::vector<double> ns;
  ns.reserve(1 << 20);
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    body();
    const auto t1 = std::chrono::steady_clock::now();
    if (ns.size() < ns.capacity())
      ns.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count());
  }
  if (ns.empty()) return;
  std::sort(ns.begin(), ns.end());
  state.counters["p10_ns"] = ns[ns.size() / 10];
  state.counters["p50_ns"] = ns[ns.size() / 2];
}

void BM_ParallelForEmpty(benchmark::State& state) {
  cairn::ThreadPool pool(static_cast<int>(state.range(0)));
  timed_calls(state, [&] { pool.parallel_for(pool.size(), [](int64_t, int64_t) {}); });
}
BENCHMARK(BM_ParallelForEmpty)->Arg(1)->Arg(2)->UseRealTime();

void BM_ParallelFor2usPerRange(benchmark::State& state) {
  cairn::ThreadPool pool(static_cast<int>(state.range(0)));
  const std::thread::id caller = std::this_thread::get_id();
  int64_t ranges = 0, on_workers = 0;
  timed_calls(state, [&] {
    pool.parallel_for(pool.size(), [&](int64_t, int64_t) {
      busy_for(std::chrono::microseconds(2));
      if (std::this_thread::get_id() != caller) ++on_workers;  // one worker at most per range
    });
    ranges += pool.size() - 1;
  });
  state.counters["worker_share"] =
      ranges > 0 ? static_cast<double>(on_workers) / static_cast<double>(ranges) : 0.0;
}
BENCHMARK(BM_ParallelFor2usPerRange)->Arg(1)->Arg(2)->UseRealTime();

void BM_Run2usPerShare(benchmark::State& state) {
  cairn::ThreadPool pool(static_cast<int>(state.range(0)));
  timed_calls(state, [&] { pool.run([](int, int) { busy_for(std::chrono::microseconds(2)); }); });
}
BENCHMARK(BM_Run2usPerShare)->Arg(1)->Arg(2)->UseRealTime();

// 2048 rows of 16 floats: about a decode matmul slice's worth of loop overhead.
void BM_ParallelForSmallWork(benchmark::State& state) {
  cairn::ThreadPool pool(static_cast<int>(state.range(0)));
  std::vector<float> data(static_cast<size_t>(2048) * 16, 1.0f);
  for (auto _ : state) {
    pool.parallel_for(2048, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        float s = 0;
        for (int k = 0; k < 16; ++k) s += data[static_cast<size_t>(r * 16 + k)];
        benchmark::DoNotOptimize(s);
      }
    });
  }
}
BENCHMARK(BM_ParallelForSmallWork)->Arg(1)->Arg(2)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
