// bench/kquant.cpp — K-quant dot-product throughput.
// K-quant dot-product throughput, one thread: GB/s of Q4_K / Q6_K weights
// processed against one Q8_K activation row, for the scalar, AVX2 and AVX-512
// VNNI kernels (one row at a time, and the many-rows entry). Two sizes: a
// matrix that stays in L2 (kernel speed) and one far larger than the caches
// (what decode sees). Paths this CPU lacks are skipped.
//   build-kq/bench/bench_kquant --benchmark_min_time=0.3
#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <vector>

#include "core/cpu_features.h"
#include "core/quant.h"
#include "core/quant_blocks.h"
#include "kernels/row_dot.h"

namespace {

using cairn::Isa;
using cairn::TensorType;
using DotFn = float (*)(int64_t, const void*, const void*);
using RowsFn = void (*)(int64_t, const void*, size_t, int64_t, const void*, float*);

constexpr int64_t kCols = 2048;

struct Data {
  std::vector<unsigned char> w, a;
  size_t row_bytes = 0;
  int64_t rows = 0;
};

// Weights quantized from Gaussian data (so scales are realistic), one activation row.
const Data& data(TensorType t, int64_t rows) {
  static Data cache[2][3];
  Data& d = cache[t == TensorType::Q6_K][rows > 1024 ? (rows > 65536 ? 2 : 1) : 0];
  if (d.rows == rows) return d;
  const cairn::TypeOps* ops = cairn::scalar_type_ops(t);
  d.rows = rows;
  d.row_bytes = *cairn::row_bytes(t, kCols);
  d.w.resize(d.row_bytes * static_cast<size_t>(rows));
  std::mt19937 rng(1);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> f(kCols);
  // Quantize a few distinct rows and tile them: quantizing 64 MB is slow.
  for (int64_t r = 0; r < rows; ++r) {
    if (r < 16) {
      for (float& x : f) x = g(rng);
      ops->from_float(f.data(), &d.w[static_cast<size_t>(r) * d.row_bytes], kCols);
    } else {
      std::memcpy(&d.w[static_cast<size_t>(r) * d.row_bytes], &d.w[static_cast<size_t>(r % 16) * d.row_bytes],
                  d.row_bytes);
    }
  }
  for (float& x : f) x = g(rng);
  d.a.resize(*cairn::row_bytes(TensorType::Q8_K, kCols));
  cairn::scalar_type_ops(TensorType::Q8_K)->from_float(f.data(), d.a.data(), kCols);
  return d;
}

void run(benchmark::State& state, TensorType t, Isa need, DotFn dot, RowsFn rows_fn) {
  if (cairn::detected_isa() < need) {
    state.SkipWithError("not supported by this CPU");
    return;
  }
  const int64_t rows = state.range(0);
  const Data& d = data(t, rows);
  std::vector<float> out(static_cast<size_t>(rows));
  for (auto _ : state) {
    if (rows_fn) {
      rows_fn(kCols, d.w.data(), d.row_bytes, rows, d.a.data(), out.data());
    } else {
      for (int64_t r = 0; r < rows; ++r) out[static_cast<size_t>(r)] = dot(kCols, &d.w[static_cast<size_t>(r) * d.row_bytes], d.a.data());
    }
    benchmark::DoNotOptimize(out.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * static_cast<int64_t>(d.w.size()));
}

namespace q = cairn::quant;
namespace v = cairn::quant::avx512vnni;

// 128 rows: ~150-210 KB (L2); 32768 rows: ~38-54 MB (about the L3); 196608
// rows: ~230-320 MB (DRAM, as decode sees it).
#define KQ_BENCH(name, type, isa, dot, rows)                                                  \
  void name(benchmark::State& s) { run(s, type, isa, dot, rows); }                            \
  BENCHMARK(name)->Arg(128)->Arg(32768)->Arg(196608)->Unit(benchmark::kMicrosecond)

KQ_BENCH(Q4_K_scalar, TensorType::Q4_K, Isa::Scalar, q::q4_k_dot_q8_k, nullptr);
KQ_BENCH(Q4_K_avx2, TensorType::Q4_K, Isa::Avx2, q::avx2::q4_k_dot_q8_k, nullptr);
KQ_BENCH(Q4_K_avx512vnni, TensorType::Q4_K, Isa::Avx512Vnni, v::q4_k_dot_q8_k, nullptr);
KQ_BENCH(Q4_K_avx512vnni_rows, TensorType::Q4_K, Isa::Avx512Vnni, nullptr, v::q4_k_dot_rows);
KQ_BENCH(Q6_K_scalar, TensorType::Q6_K, Isa::Scalar, q::q6_k_dot_q8_k, nullptr);
KQ_BENCH(Q6_K_avx2, TensorType::Q6_K, Isa::Avx2, q::avx2::q6_k_dot_q8_k, nullptr);
KQ_BENCH(Q6_K_avx512vnni, TensorType::Q6_K, Isa::Avx512Vnni, v::q6_k_dot_q8_k, nullptr);
KQ_BENCH(Q6_K_avx512vnni_rows, TensorType::Q6_K, Isa::Avx512Vnni, nullptr, v::q6_k_dot_rows);

}  // namespace

BENCHMARK_MAIN();
