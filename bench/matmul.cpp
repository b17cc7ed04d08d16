// Matmul throughput per weight type and token count: weights streamed (GB/s)
// and multiply-accumulates per second, on the kernels the active ISA selects.
#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "core/quant.h"
#include "kernels/kernels.h"

namespace {

using namespace cairn;

void BM_Matmul(benchmark::State& state, TensorType type, int64_t rows, int64_t cols) {
  const int64_t tokens = state.range(0);
  const int threads = (int)state.range(1);
  const TypeOps* ops = type_ops(type);
  const size_t rb = *row_bytes(type, cols);
  std::mt19937 rng(1);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> row((size_t)cols);
  std::vector<uint8_t> data(rb * (size_t)rows);
  for (int64_t r = 0; r < rows; ++r) {
    for (float& f : row) f = dist(rng);
    ops->from_float(row.data(), data.data() + r * rb, cols);
  }
  std::vector<float> x((size_t)(tokens * cols));
  for (float& f : x) f = dist(rng);
  std::vector<float> out((size_t)(tokens * rows));
  kernels::WeightMatrix w{type, data.data(), rows, cols, rb, nullptr};
  kernels::prepare_weight(w);
  ThreadPool pool(threads);
  for (auto _ : state) {
    kernels::matmul(w, x.data(), tokens, out.data(), pool);
    benchmark::DoNotOptimize(out.data());
  }
  state.counters["weight_GB/s"] = benchmark::Counter((double)data.size(), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GMAC/s"] = benchmark::Counter((double)(rows * cols * tokens) / 1e9, benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(w.packed ? "packed" : "type-table");
}

void Args(benchmark::internal::Benchmark* b) {
  for (int threads : {1, 2})
    for (int tokens : {1, 16, 128}) b->Args({tokens, threads});
  b->UseRealTime();
}

BENCHMARK_CAPTURE(BM_Matmul, q4_0_5632x2048, TensorType::Q4_0, 5632, 2048)->Apply(Args);
BENCHMARK_CAPTURE(BM_Matmul, q8_0_5632x2048, TensorType::Q8_0, 5632, 2048)->Apply(Args);
// Bigger than any cache: decode speed against DRAM.
BENCHMARK_CAPTURE(BM_Matmul, q4_0_65536x4096, TensorType::Q4_0, 65536, 4096)->Args({1, 1})->Args({1, 2})->UseRealTime();
BENCHMARK_CAPTURE(BM_Matmul, q8_0_32768x4096, TensorType::Q8_0, 32768, 4096)->Args({1, 1})->Args({1, 2})->UseRealTime();
BENCHMARK_CAPTURE(BM_Matmul, q4_k_5632x2048, TensorType::Q4_K, 5632, 2048)->Apply(Args);
BENCHMARK_CAPTURE(BM_Matmul, f16_2048x2048, TensorType::F16, 2048, 2048)->Apply(Args);

}  // namespace

BENCHMARK_MAIN();
