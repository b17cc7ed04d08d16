// bench/matmul.cpp — matmul throughput per weight type and token count.
// Matmul throughput per weight type and token count: weights streamed (GB/s)
// and multiply-accumulates per second, on the kernels the active ISA selects.
#include <benchmark/benchmark.h>

#include <chrono>
#include <memory>
#include <random>
#include <span>
#include <vector>

#include "core/cpu_features.h"
#include "core/quant.h"
#include "core/simd.h"
#include "kernels/bandwidth_probe.h"
#include "kernels/kernels.h"
#include "kernels/type_ops.h"

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
// token: the weight stream as the model issues it, 89 calls with a pool
// hand-off each. Nothing else of a forward pass runs in between. `tokens`
// rows at once: a batched decode step (every sequence's one token).
struct DecodeMatmuls {
  static constexpr int64_t kDim = 2048, kKv = 256, kFf = 5632, kVocab = 32000, kLayers = 22;
  struct Layer {
    std::unique_ptr<RandomMatrix> q, k, v, o, gate, up, down;
  };
  std::vector<Layer> layers;
  std::unique_ptr<RandomMatrix> head;
  std::vector<float> x, a, b, c, g, u, logits;
  size_t bytes = 0;  // what the calls stream (packed copies where there are)
  int64_t tokens = 1;

  explicit DecodeMatmuls(TensorType type, int64_t n_tokens = 1)
      : layers((size_t)kLayers), tokens(n_tokens) {
    std::mt19937 rng(3);
    const auto make = [&](int64_t rows, int64_t cols) {
      auto m = std::make_unique<RandomMatrix>(type, rows, cols, rng);
      bytes += kernels::weight_stream(m->w).size();
      return m;
    };
    for (Layer& l : layers) {
      l.q = make(kDim, kDim), l.k = make(kKv, kDim), l.v = make(kKv, kDim), l.o = make(kDim, kDim);
      l.gate = make(kFf, kDim), l.up = make(kFf, kDim), l.down = make(kDim, kFf);
    }
    head = make(kVocab, kDim);
    const size_t n = (size_t)tokens;
    x.assign(n * kFf, 0.5f), a.resize(n * kDim), b.resize(n * kKv);
    c.resize(n * kKv), g.resize(n * kFf), u.resize(n * kFf);
    logits.resize(n * kVocab);
  }

  void token(ThreadPool& pool) {
    for (Layer& l : layers) {
      const kernels::MatmulJob qkv[] = {
          {&l.q->w, a.data()}, {&l.k->w, b.data()}, {&l.v->w, c.data()}};
      kernels::matmul_many(qkv, x.data(), tokens, pool);
      kernels::matmul(l.o->w, a.data(), tokens, x.data(), pool);
      const kernels::MatmulJob gu[] = {{&l.gate->w, g.data()}, {&l.up->w, u.data()}};
      kernels::matmul_many(gu, x.data(), tokens, pool);
      kernels::matmul(l.down->w, g.data(), tokens, x.data(), pool);
      for (float& f : x) f = 0.5f;  // keep the activations finite
    }
    kernels::matmul(head->w, x.data(), tokens, logits.data(), pool);
  }

  // The same bytes read by plain 64-byte loads, each thread summing its half
  // of every matrix in the calls' order, with no hand-off between matrices:
  // what the memory gives a stream of exactly these bytes.
  uint64_t loads(ThreadPool& pool) {
    std::vector<const kernels::WeightMatrix*> order;
    for (Layer& l : layers)
      for (auto* m : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down}) order.push_back(&(*m)->w);
    order.push_back(&head->w);
    std::vector<uint64_t> sums((size_t)pool.size(), 0);
    pool.run([&](int share, int shares) {
      for (const kernels::WeightMatrix* w : order) {
        const std::span<const uint8_t> s = kernels::weight_stream(*w);
        const size_t words = s.size() / 8;
        const size_t b0 = words * share / shares, b1 = words * (share + 1) / shares;
        sums[(size_t)share] += kernels::sum_words(reinterpret_cast<const uint64_t*>(s.data()) + b0,
                                                  b1 - b0, active_isa());
      }
    });
    uint64_t total = 0;
    for (uint64_t v : sums) total += v;
    return total;
  }
  // The same plain loads in the calls token() makes (Q/K/V, O, gate/up, down;
  // the head), each a pool job whose threads split its bytes in halves and
  // meet at its end: what the memory gives with decode's hand-offs, so
  // kernel/handoff is the kernels' own share of the gap to the stream.
  uint64_t handoff_loads(ThreadPool& pool) {
    std::vector<std::vector<const kernels::WeightMatrix*>> calls;
    for (Layer& l : layers) {
      calls.push_back({&l.q->w, &l.k->w, &l.v->w});
      calls.push_back({&l.o->w});
      calls.push_back({&l.gate->w, &l.up->w});
      calls.push_back({&l.down->w});
    }
    calls.push_back({&head->w});
    std::vector<uint64_t> sums((size_t)pool.size(), 0);
    for (const auto& call : calls) {
      size_t total_bytes = 0;
      for (auto* w : call) total_bytes += kernels::weight_stream(*w).size();
      pool.run([&](int share, int shares) {
        const size_t b0 = total_bytes * share / shares, b1 = total_bytes * (share + 1) / shares;
        size_t at = 0;
        for (auto* w : call) {
          const auto s = kernels::weight_stream(*w);
          const size_t lo = std::max(at, b0), hi = std::min(at + s.size(), b1);
          if (lo < hi)
            sums[(size_t)share] += kernels::sum_words(
                reinterpret_cast<const uint64_t*>(s.data() + ((lo - at) & ~size_t{7})),
                (hi - lo) / 8, active_isa());
          at += s.size();
        }
      });
    }
    uint64_t total = 0;
    for (uint64_t v : sums) total += v;
    return total;
  }
};

// 1 or 2 threads; against it the one-matrix rows above show the cost of
// splitting the stream into calls.
void BM_DecodeMatmulSequence(benchmark::State& state, TensorType type) {
  DecodeMatmuls d(type);
  ThreadPool pool((int)state.range(0));
  for (auto _ : state) {
    d.token(pool);
    benchmark::DoNotOptimize(d.logits.data());
  }
  state.counters["weight_GB/s"] =
      benchmark::Counter((double)d.bytes, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["tok/s"] = benchmark::Counter(1.0, benchmark::Counter::kIsIterationInvariantRate);
}

// A batched decode step's matmuls (range(0) tokens, range(1) threads): the
// weights come from DRAM once per step and serve every token, so this sits
// between the memory limit (one token) and the arithmetic one (a prompt).
void BM_BatchedDecodeSequence(benchmark::State& state, TensorType type) {
  DecodeMatmuls d(type, state.range(0));
  ThreadPool pool((int)state.range(1));
  int64_t macs = 0;
  for (auto _ : state) {
    d.token(pool);
    benchmark::DoNotOptimize(d.logits.data());
  }
  for (const auto& l : d.layers)
    for (auto* m : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down})
      macs += (*m)->w.rows * (*m)->w.cols;
  macs += d.head->w.rows * d.head->w.cols;
  state.counters["tok/s"] =
      benchmark::Counter((double)d.tokens, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["GMAC/s"] = benchmark::Counter((double)macs * (double)d.tokens / 1e9,
                                                benchmark::Counter::kIsIterationInvariantRate);
}

// The decode sequence against plain loads over the same bytes, alternated
// token by token so all see the same host (whose bandwidth moves by a factor
// of two within minutes): kernel_GB/s / loads_GB/s is the share of the
// memory's streaming rate the kernels reach, with their pool hand-offs;
// handoff_GB/s, the loads split into the same calls, is what the hand-offs
// alone leave of it.
void BM_DecodeMatmulsVsLoads(benchmark::State& state, TensorType type) {
  DecodeMatmuls d(type);
  ThreadPool pool((int)state.range(0));
  double kernel_s = 0, loads_s = 0, handoff_s = 0;
  uint64_t sink = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    d.token(pool);
    const auto t1 = std::chrono::steady_clock::now();
    sink += d.loads(pool);
    const auto t2 = std::chrono::steady_clock::now();
    sink += d.handoff_loads(pool);
    const auto t3 = std::chrono::steady_clock::now();
    handoff_s += std::chrono::duration<double>(t3 - t2).count();
    kernel_s += std::chrono::duration<double>(t1 - t0).count();
    loads_s += std::chrono::duration<double>(t2 - t1).count();
    benchmark::DoNotOptimize(d.logits.data());
  }
  benchmark::DoNotOptimize(sink);
  const double n = (double)state.iterations();
  state.counters["kernel_GB/s"] = (double)d.bytes * n / kernel_s / 1e9;
  state.counters["loads_GB/s"] = (double)d.bytes * n / loads_s / 1e9;
  state.counters["kernel/loads"] = loads_s / kernel_s;
  state.counters["handoff_GB/s"] = (double)d.bytes * n / handoff_s / 1e9;
  state.counters["kernel/handoff"] = handoff_s / kernel_s;
}

// A prompt's projections whose input is made row by row (kernels::RowMaker):
// RMSNorm -> Q/K/V (2048 -> 2048 + 256 + 256) and SwiGLU -> down (5632 ->
// 2048), TinyLlama-shaped, `tokens` tokens. Each iteration runs both ways in
// turn (which goes first alternates): rows made as the kernel quantizes them
// (made) and every row made into a float matrix first, then quantized from it
// (materialized, what the model did before). made/materialized < 1: the
// fusion saves that share of the call.
void BM_MadeRows(benchmark::State& state, TensorType type, bool swiglu) {
  const int64_t tokens = state.range(0);
  ThreadPool pool((int)state.range(1));
  std::mt19937 rng(5);
  constexpr int64_t kDim = 2048, kKv = 256, kFf = 5632;
  const int64_t cols = swiglu ? kFf : kDim;
  std::vector<std::unique_ptr<RandomMatrix>> m;
  if (swiglu) {
    m.push_back(std::make_unique<RandomMatrix>(type, kDim, kFf, rng));
  } else {
    for (int64_t rows : {kDim, kKv, kKv})
      m.push_back(std::make_unique<RandomMatrix>(type, rows, kDim, rng));
  }
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> a((size_t)(tokens * cols)), b(a.size()), norm_w((size_t)cols),
      scratch(a.size());
  for (float& f : a) f = dist(rng);
  for (float& f : b) f = dist(rng);
  for (float& f : norm_w) f = 1.0f + 0.1f * dist(rng);
  std::vector<std::vector<float>> outs;
  std::vector<kernels::MatmulJob> jobs;
  for (auto& mat : m) {
    outs.emplace_back((size_t)(tokens * mat->w.rows));
    jobs.push_back({&mat->w, outs.back().data()});
  }
  const kernels::NormedRows norm_rows(a.data(), norm_w.data(), cols, 1e-5f);
  const kernels::SwigluRows swiglu_rows(a.data(), b.data(), cols);
  const kernels::RowMaker& rows = swiglu ? (const kernels::RowMaker&)swiglu_rows : norm_rows;
  double made_s = 0, materialized_s = 0;
  int64_t it = 0;
  for (auto _ : state) {
    for (int k = 0; k < 2; ++k) {
      const bool made = (k == 0) == (it % 2 == 0);
      const auto t0 = std::chrono::steady_clock::now();
      if (made) {
        kernels::matmul_many(jobs, rows, scratch.data(), tokens, pool);
      } else {
        pool.parallel_for(tokens, [&](int64_t t0_, int64_t t1_) {
          for (int64_t t = t0_; t < t1_; ++t) rows.make(t, scratch.data() + t * cols);
        });
        kernels::matmul_many(jobs, scratch.data(), tokens, pool);
      }
      (made ? made_s : materialized_s) +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
    ++it;
    benchmark::DoNotOptimize(outs[0].data());
  }
  const double n = (double)state.iterations();
  state.counters["made_ms"] = made_s / n * 1e3;
  state.counters["materialized_ms"] = materialized_s / n * 1e3;
  state.counters["made/materialized"] = made_s / materialized_s;
}
BENCHMARK_CAPTURE(BM_MadeRows, q4_0_norm_qkv, TensorType::Q4_0, false)
    ->Args({512, 2})
    ->Args({64, 2})
    ->MinTime(4.0)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_MadeRows, q4_0_swiglu_down, TensorType::Q4_0, true)
    ->Args({512, 2})
    ->Args({64, 2})
    ->MinTime(4.0)
    ->UseRealTime();

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
    for (int tokens : {1, 4, 16, 128}) b->Args({tokens, threads});
  b->UseRealTime();
}

BENCHMARK_CAPTURE(BM_Matmul, q4_0_5632x2048, TensorType::Q4_0, 5632, 2048)->Apply(Args);
BENCHMARK_CAPTURE(BM_Matmul, q8_0_5632x2048, TensorType::Q8_0, 5632, 2048)->Apply(Args);
// The FFN down shape: rows wider than one chunk of the packed layout.
BENCHMARK_CAPTURE(BM_Matmul, q4_0_2048x5632, TensorType::Q4_0, 2048, 5632)->Apply(Args);
BENCHMARK_CAPTURE(BM_Matmul, q8_0_2048x5632, TensorType::Q8_0, 2048, 5632)->Apply(Args);
// Bigger than the L3 (151 MB / 137 MB): decode speed against DRAM, though part
// still hits L3 across repeats: compare the decode sequence below with a larger matrix.
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
BENCHMARK_CAPTURE(BM_DecodeMatmulSequence, bf16_tinyllama, TensorType::BF16)->Arg(2)->UseRealTime();
BENCHMARK_CAPTURE(BM_DecodeMatmulSequence, f16_tinyllama, TensorType::F16)->Arg(2)->UseRealTime();
void BatchArgs(benchmark::internal::Benchmark* b) {
  for (int tokens : {4, 8, 16}) b->Args({tokens, 2});
  b->UseRealTime();
}
BENCHMARK_CAPTURE(BM_BatchedDecodeSequence, q4_0_tinyllama, TensorType::Q4_0)->Apply(BatchArgs);
BENCHMARK_CAPTURE(BM_BatchedDecodeSequence, q8_0_tinyllama, TensorType::Q8_0)->Apply(BatchArgs);
BENCHMARK_CAPTURE(BM_DecodeMatmulsVsLoads, q4_0_tinyllama, TensorType::Q4_0)
    ->Arg(2)
    ->MinTime(5.0)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_DecodeMatmulsVsLoads, q8_0_tinyllama, TensorType::Q8_0)
    ->Arg(2)
    ->MinTime(5.0)
    ->UseRealTime();
// K-quant weights take minutes to quantize for the whole sequence.
BENCHMARK_CAPTURE(BM_DecodeMatmulsVsLoads, q4_k_tinyllama, TensorType::Q4_K)
    ->Arg(2)
    ->MinTime(5.0)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_DecodeMatmulsVsLoads, q6_k_tinyllama, TensorType::Q6_K)
    ->Arg(2)
    ->MinTime(5.0)
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Matmul, q4_k_5632x2048, TensorType::Q4_K, 5632, 2048)->Apply(Args);
BENCHMARK_CAPTURE(BM_Matmul, q6_k_5632x2048, TensorType::Q6_K, 5632, 2048)->Apply(Args);
// The types of downloaded files beyond those (type-table kernels: row dot products).
BENCHMARK_CAPTURE(BM_Matmul, q4_1_5632x2048, TensorType::Q4_1, 5632, 2048)->Apply(Args);
BENCHMARK_CAPTURE(BM_Matmul, q5_0_5632x2048, TensorType::Q5_0, 5632, 2048)->Apply(Args);
BENCHMARK_CAPTURE(BM_Matmul, q5_1_5632x2048, TensorType::Q5_1, 5632, 2048)->Apply(Args);
BENCHMARK_CAPTURE(BM_Matmul, iq4_nl_5632x2048, TensorType::IQ4_NL, 5632, 2048)->Apply(Args);
BENCHMARK_CAPTURE(BM_Matmul, mxfp4_5632x2048, TensorType::MXFP4, 5632, 2048)->Apply(Args);
BENCHMARK_CAPTURE(BM_Matmul, q2_k_5632x2048, TensorType::Q2_K, 5632, 2048)->Apply(Args);
BENCHMARK_CAPTURE(BM_Matmul, q3_k_5632x2048, TensorType::Q3_K, 5632, 2048)->Apply(Args);
BENCHMARK_CAPTURE(BM_Matmul, q5_k_5632x2048, TensorType::Q5_K, 5632, 2048)->Apply(Args);
BENCHMARK_CAPTURE(BM_Matmul, iq4_xs_5632x2048, TensorType::IQ4_XS, 5632, 2048)->Apply(Args);
BENCHMARK_CAPTURE(BM_Matmul, f16_2048x2048, TensorType::F16, 2048, 2048)->Apply(Args);
BENCHMARK_CAPTURE(BM_Matmul, bf16_5632x2048, TensorType::BF16, 5632, 2048)->Apply(Args);
BENCHMARK_CAPTURE(BM_Matmul, f16_32768x4096, TensorType::F16, 32768, 4096)
    ->Args({1, 1})
    ->Args({1, 2})
    ->UseRealTime();
BENCHMARK_CAPTURE(BM_Matmul, bf16_32768x4096, TensorType::BF16, 32768, 4096)
    ->Args({1, 1})
    ->Args({1, 2})
    ->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
