// The int8 peak probe. Threads live for the whole measurement and meet at a
// barrier around each pass, so a pass times only the dot products.
#include "kernels/compute_probe.h"

#include <algorithm>
#include <atomic>
#include <barrier>
#include <chrono>
#include <thread>
#include <vector>

#include "core/cpu_features.h"
#include "core/simd.h"

namespace cairn::kernels {
namespace {

constexpr int kAccumulators = 12;  // independent chains: enough to cover the latency
constexpr int64_t kRoundsPerCheck = 1 << 14;

// Rounds of kAccumulators vpdpbusd until `stop`; returns the rounds done and
// folds the accumulators into `sink` so the work cannot be dropped.
CAIRN_SIMD_FN("avx512f,avx512bw,avx512vnni")
int64_t dot_rounds(const std::atomic<bool>& stop, int32_t& sink) {
  __m512i acc[kAccumulators];
  for (int i = 0; i < kAccumulators; ++i) acc[i] = _mm512_set1_epi32(i);
  __m512i w = _mm512_set1_epi8(3), x = _mm512_set1_epi8(5);
  int64_t rounds = 0;
  while (!stop.load(std::memory_order_relaxed)) {
    for (int64_t n = 0; n < kRoundsPerCheck; ++n) {
#pragma GCC unroll 12
      for (int i = 0; i < kAccumulators; ++i) acc[i] = _mm512_dpbusd_epi32(acc[i], w, x);
      asm volatile("" : "+v"(w), "+v"(x));  // keeps the loop from being folded away
    }
    rounds += kRoundsPerCheck;
  }
  int32_t sum = 0;
  for (const __m512i& a : acc) sum += _mm512_reduce_add_epi32(a);
  sink += sum;
  return rounds;
}

}  // namespace

Result<ComputeResult> measure_int8_peak(int threads, int passes, double pass_seconds) {
  if (!isa_enabled(Isa::Avx512Vnni))
    return Status::error("int8 peak probe: needs AVX-512 VNNI (not active on this CPU or cap)");
  if (threads < 1) return Status::error("int8 peak probe: threads must be >= 1");
  if (passes < 1) return Status::error("int8 peak probe: passes must be >= 1");
  if (!(pass_seconds > 0)) return Status::error("int8 peak probe: pass length must be > 0");
  std::vector<int64_t> rounds((size_t)threads, 0);
  std::vector<int32_t> sinks((size_t)threads, 0);
  std::atomic<bool> stop{false};
  std::barrier sync(threads);
  ComputeResult r;
  r.threads = threads;
  r.passes = passes;
  auto body = [&](int t) {
    for (int pass = 0; pass < passes; ++pass) {
      sync.arrive_and_wait();
      const auto t0 = std::chrono::steady_clock::now();
      if (t == 0) {
        // Thread 0 keeps time; the others run until it says stop.
        std::thread timer([&] {
          std::this_thread::sleep_for(std::chrono::duration<double>(pass_seconds));
          stop.store(true, std::memory_order_relaxed);
        });
        rounds[0] = dot_rounds(stop, sinks[0]);
        timer.join();
      } else {
        rounds[(size_t)t] = dot_rounds(stop, sinks[(size_t)t]);
      }
      sync.arrive_and_wait();
      if (t == 0) {
        const double s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        int64_t total = 0;
        for (int64_t n : rounds) total += n;
        const double gmacs = (double)total * kAccumulators * 64 / s / 1e9;
        r.best_gmacs = std::max(r.best_gmacs, gmacs);
        stop.store(false, std::memory_order_relaxed);
      }
    }
  };
  std::vector<std::thread> workers;
  for (int t = 1; t < threads; ++t) workers.emplace_back(body, t);
  body(0);
  for (auto& w : workers) w.join();
  return r;
}

}  // namespace cairn::kernels
