// bench/sgemm.cpp — float32 GEMM throughput (kernels/sgemm.h) in GFLOP/s.
// C[M,N] = A[M,K]·B[K,N] with B packed once (constant weights), on a pool of
// 2 threads, for the tensor models' shapes: an MLP of 4096 hidden (K = N =
// 4096) and a BERT-style encoder (K = N = 768), M from one row to a batch of
// 8 sequences of 128 tokens.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "kernels/sgemm.h"

namespace {

using namespace cairn;

void BM_Sgemm(benchmark::State& state) {
  const int64_t m = state.range(0), kn = state.range(1);
  const int threads = int(state.range(2));
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> d(-1.0f, 1.0f);
  std::vector<float> a(size_t(m * kn)), b(size_t(kn * kn)), c(size_t(m * kn));
  for (float& x : a) x = d(rng);
  for (float& x : b) x = d(rng);
  const kernels::PackedB pb = kernels::pack_b(b.data(), kn, kn, false);
  ThreadPool pool(threads);
  for (auto _ : state) {
    kernels::sgemm_packed(m, a.data(), kn, 1, pb.view(), c.data(), kn, {}, &pool);
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * double(m) * double(kn) * double(kn) * double(state.iterations()) / 1e9,
      benchmark::Counter::kIsRate);
  state.SetLabel(isa_name(kernels::sgemm_isa()));
}

BENCHMARK(BM_Sgemm)
    ->ArgNames({"M", "K=N", "threads"})
    ->ArgsProduct({{1, 8, 32, 1024}, {4096, 768}, {1, 2}})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
