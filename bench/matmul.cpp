// Matmul throughput per weight type and token count: weights streamed (GB/s)
// and multiply-accumulates per second, on the kernels the active ISA selects.
#include <benchmark/benchmark.h>

#include <memory>
#include <random>
#include <vector>

#include "core/cpu_features.h"
#include "core/quant.h"
#include "core/simd.h"
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
  state.counters["weight_GB/s"] =
      benchmark::Counter((double)data.size(), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GMAC/s"] = benchmark::Counter((double)(rows * cols * tokens) / 1e9,
                                                benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(w.packed ? "packed" : "type-table");
}

// Random weights of `rows` x `cols` in `type`, packed for the active ISA.
struct RandomMatrix {
  std::vector<uint8_t> data;
  kernels::WeightMatrix w;
  RandomMatrix(TensorType type, int64_t rows, int64_t cols, std::mt19937& rng) {
    const TypeOps* ops = type_ops(type);
    const size_t rb = *row_bytes(type, cols);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> row((size_t)cols);
    data.resize(rb * (size_t)rows);
    for (int64_t r = 0; r < rows; ++r) {
      for (float& f : row) f = dist(rng);
      ops->from_float(row.data(), data.data() + r * rb, cols);
    }
    w = kernels::WeightMatrix{type, data.data(), rows, cols, rb, nullptr};
    kernels::prepare_weight(w);
    if (w.packed) std::vector<uint8_t>().swap(data);  // only the packed copy is read
  }
};

// One decoded token's matmuls of a TinyLlama-1.1B-shaped model (22 layers:
// Q/K/V together, O, gate/up together, down; then the output head), single
// token, 1 or 2 threads: the weight stream as the model issues it, 89 calls with a
// pool hand-off each, against which the one-matrix rows above show the cost
// of splitting the stream. Nothing else of a forward pass runs in between.
void BM_DecodeMatmulSequence(benchmark::State& state, TensorType type) {
  constexpr int64_t kDim = 2048, kKv = 256, kFf = 5632, kVocab = 32000, kLayers = 22;
  std::mt19937 rng(3);
  struct Layer {
    std::unique_ptr<RandomMatrix> q, k, v, o, gate, up, down;
  };
  std::vector<Layer> layers((size_t)kLayers);
  size_t bytes = 0;
  const auto make = [&](int64_t rows, int64_t cols) {
    auto m = std::make_unique<RandomMatrix>(type, rows, cols, rng);
    bytes += *row_bytes(type, cols) * (size_t)rows;
    return m;
  };
  for (Layer& l : layers) {
    l.q = make(kDim, kDim), l.k = make(kKv, kDim), l.v = make(kKv, kDim), l.o = make(kDim, kDim);
    l.gate = make(kFf, kDim), l.up = make(kFf, kDim), l.down = make(kDim, kFf);
  }
  auto head = make(kVocab, kDim);
  std::vector<float> x((size_t)kFf, 0.5f), a((size_t)kDim), b((size_t)kKv), c((size_t)kKv),
      g((size_t)kFf), u((size_t)kFf), logits((size_t)kVocab);
  ThreadPool pool((int)state.range(0));
  for (auto _ : state) {
    for (Layer& l : layers) {
      const kernels::MatmulJob qkv[] = {
          {&l.q->w, a.data()}, {&l.k->w, b.data()}, {&l.v->w, c.data()}};
      kernels::matmul_many(qkv, x.data(), 1, pool);
      kernels::matmul(l.o->w, a.data(), 1, x.data(), pool);
      const kernels::MatmulJob gu[] = {{&l.gate->w, g.data()}, {&l.up->w, u.data()}};
      kernels::matmul_many(gu, x.data(), 1, pool);
      kernels::matmul(l.down->w, g.data(), 1, x.data(), pool);
      for (float& f : x) f = 0.5f;  // keep the activations finite
    }
    kernels::matmul(head->w, x.data(), 1, logits.data(), pool);
    benchmark::DoNotOptimize(logits.data());
  }
  state.counters["weight_GB/s"] =
      benchmark::Counter((double)bytes, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["tok/s"] = benchmark::Counter(1.0, benchmark::Counter::kIsIterationInvariantRate);
}

#if defined(__x86_64__)
// The ceiling of the int8 kernels: one core issuing independent 512-bit
// vpdpbusd from registers only (12 accumulators, nothing loaded).
CAIRN_SIMD_FN("avx512f,avx512bw,avx512vnni")
void BM_VnniPeak(benchmark::State& state) {
  if (!isa_enabled(Isa::Avx512Vnni)) {
    state.SkipWithError("no AVX-512 VNNI here");
    return;
  }
  __m512i acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_epi32(i);
  __m512i w = _mm512_set1_epi8(3), x = _mm512_set1_epi8(5);
  constexpr int64_t kRounds = 1 << 20;
  for (auto _ : state) {
    for (int64_t n = 0; n < kRounds; ++n) {
#pragma GCC unroll 12
      for (int i = 0; i < 12; ++i) acc[i] = _mm512_dpbusd_epi32(acc[i], w, x);
      asm volatile("" : "+v"(w), "+v"(x));  // keeps the loop from being folded away
    }
  }
  int32_t sum = 0;
  for (const __m512i& a : acc) sum += _mm512_reduce_add_epi32(a);
  benchmark::DoNotOptimize(sum);
  state.counters["G_vpdpbusd/s"] =
      benchmark::Counter(12.0 * kRounds / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_VnniPeak)->UseRealTime();
#endif

void Args(benchmark::internal::Benchmark* b) {
  for (int threads : {1, 2})
    for (int tokens : {1, 16, 128}) b->Args({tokens, threads});
  b->UseRealTime();
}

BENCHMARK_CAPTURE(BM_Matmul, q4_0_5632x2048, TensorType::Q4_0, 5632, 2048)->Apply(Args);
BENCHMARK_CAPTURE(BM_Matmul, q8_0_5632x2048, TensorType::Q8_0, 5632, 2048)->Apply(Args);
// The FFN down shape: rows wider than one chunk of the packed layout.
BENCHMARK_CAPTURE(BM_Matmul, q4_0_2048x5632, TensorType::Q4_0, 2048, 5632)->Apply(Args);
BENCHMARK_CAPTURE(BM_Matmul, q8_0_2048x5632, TensorType::Q8_0, 2048, 5632)->Apply(Args);
// Bigger than the L3 (151 MB / 137 MB): decode speed against DRAM. Measured on
// this host, part of such a matrix is still served from L3 across repeats (a
// 604 MB one streamed 26 vs 34-38 GB/s on one thread), so compare the decode
// sequence below with a larger matrix, not with these rows.
BENCHMARK_CAPTURE(BM_Matmul, q4_0_65536x4096, TensorType::Q4_0, 65536, 4096)
    ->Args({1, 1})
    ->Args({1, 2})
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Matmul, q8_0_32768x4096, TensorType::Q8_0, 32768, 4096)
    ->Args({1, 1})
    ->Args({1, 2})
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_DecodeMatmulSequence, q4_0_tinyllama, TensorType::Q4_0)
    ->Arg(1)
    ->Arg(2)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_DecodeMatmulSequence, q8_0_tinyllama, TensorType::Q8_0)->Arg(2)->UseRealTime();
BENCHMARK_CAPTURE(BM_Matmul, q4_k_5632x2048, TensorType::Q4_K, 5632, 2048)->Apply(Args);
BENCHMARK_CAPTURE(BM_Matmul, f16_2048x2048, TensorType::F16, 2048, 2048)->Apply(Args);

}  // namespace

BENCHMARK_MAIN();
