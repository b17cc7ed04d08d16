// Attention of one layer, TinyLlama-1.1B shape (32 query heads, 4 KV heads,
// head_dim 64, F16 cache), per path: a decode token at context N, a batch
// of 32 or 512 tokens of one prompt ending at N (the tinyBLAS orders; K
// transposed once per call; Prompt512Hd128: head_dim 128 and 8 KV heads, as Llama-3-8B and
// Mistral-7B), and a decode step of 16 sequences each at N. Multiply the decode time
// by 22 layers for the attention cost per decoded token with its rows in cache; DecodeCold times
// all 22 layers with them out of cache, as a forward meets them. Arguments: context, threads
// (with 1 thread, CPU time is the work itself even on a busy machine).
//   bench_attention [--benchmark_filter=Decode]   (CAIRN_ISA caps the paths)
#include "model/attention.h"

#include <benchmark/benchmark.h>

#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "kv/contiguous_kv.h"

namespace {

using namespace cairn;
using namespace cairn::model;
using cairn::kv::ContiguousKvCache;

struct Setup {
  HParams hp;
  std::unique_ptr<ContiguousKvCache> kv;
  std::vector<float> q, out;
  ThreadPool pool;

  int n_seqs;
  Setup(int64_t n_ctx, int threads, int seqs, int layers = 1, int64_t head_dim = 64,
        int64_t n_head_kv = 4)
      : pool(threads), n_seqs(seqs) {
    hp.n_layer = layers;
    hp.n_head = 32;
    hp.n_head_kv = n_head_kv;
    hp.head_dim = head_dim;
    hp.n_embd = 32 * head_dim;
    auto made = ContiguousKvCache::create(hp.kv_shape(), n_seqs, n_ctx);
    kv.reset(made->release());
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> k((size_t)hp.kv_row_elems()), v(k.size());
    for (SeqId seq = 0; seq < n_seqs; ++seq) {
      for (int32_t p = 0; p < n_ctx; ++p) {
        for (int l = 0; l < layers; ++l) {
          for (size_t i = 0; i < k.size(); ++i) k[i] = u(rng), v[i] = u(rng);
          kv->write(l, seq, p, k.data(), v.data());
        }
      }
    }
    q.resize((size_t)(512 * hp.n_head * hp.head_dim));
    for (float& x : q) x = u(rng);
    out.resize(q.size());
  }
};

// n_tokens of one sequence ending at the context, or (distinct) the last
// position of n_tokens sequences.
// head_dim 128 takes 8 KV heads (Llama-3-8B, Mistral-7B), 64 TinyLlama's 4.
void run(benchmark::State& st, AttnPath path, int64_t n_tokens, bool distinct = false,
         int64_t head_dim = 64) {
  const int64_t n_ctx = st.range(0);
  const int64_t n_kv = head_dim == 64 ? 4 : 8;
  if (!attention_path_supported(path, head_dim)) {
    st.SkipWithError("path not available on this CPU / CAIRN_ISA");
    return;
  }
  const int threads = (int)st.range(1);
  static std::unique_ptr<Setup> s;
  const int n_seqs = distinct ? (int)n_tokens : 1;
  if (!s || s->kv->n_ctx() != n_ctx || s->pool.size() != threads || s->n_seqs != n_seqs ||
      s->hp.head_dim != head_dim)
    s = std::make_unique<Setup>(n_ctx, threads, n_seqs, 1, head_dim, n_kv);
  std::vector<SeqId> seqs((size_t)n_tokens, 0);
  std::vector<int32_t> pos((size_t)n_tokens);
  for (int64_t t = 0; t < n_tokens; ++t) {
    seqs[(size_t)t] = distinct ? (SeqId)t : 0;
    pos[(size_t)t] = (int32_t)(distinct ? n_ctx - 1 : n_ctx - n_tokens + t);
  }
  const AttnShape sh{32, n_kv, head_dim, 1.0f / std::sqrt((float)head_dim)};
  for (auto _ : st) {
    attend(*s->kv, 0, seqs, pos, s->q.data(), sh, s->out.data(), s->pool, path);
    benchmark::DoNotOptimize(s->out.data());
  }
  st.SetItemsProcessed(st.iterations() * n_tokens);  // items = tokens
}

// A decode token's attention over all 22 layers as a forward meets it: the
// K/V rows out of cache (a token's weights stream through between two
// steps), here pushed out by reading 256 MiB before each timed token.
void DecodeCold_Avx512(benchmark::State& st) {
  const int64_t n_ctx = st.range(0);
  if (!attention_path_supported(AttnPath::Avx512, 64)) {
    st.SkipWithError("path not available on this CPU / CAIRN_ISA");
    return;
  }
  constexpr int kLayers = 22;
  Setup s(n_ctx, (int)st.range(1), 1, kLayers);
  std::vector<uint64_t> flush(size_t{32} << 20, 1);
  const SeqId seq = 0;
  const int32_t pos = (int32_t)(n_ctx - 1);
  const AttnShape sh{32, 4, 64, 0.125f};
  uint64_t sink = 0;
  for (auto _ : st) {
    st.PauseTiming();
    for (size_t i = 0; i < flush.size(); i += 8) sink += flush[i];
    st.ResumeTiming();
    for (int l = 0; l < kLayers; ++l)
      attend(*s.kv, l, {&seq, 1}, {&pos, 1}, s.q.data(), sh, s.out.data(), s.pool,
             AttnPath::Avx512);
    benchmark::DoNotOptimize(s.out.data());
  }
  benchmark::DoNotOptimize(sink);
}

void Decode_Scalar(benchmark::State& st) { run(st, AttnPath::Scalar, 1); }
void Decode_Avx2(benchmark::State& st) { run(st, AttnPath::Avx2, 1); }
void Decode_Avx512(benchmark::State& st) { run(st, AttnPath::Avx512, 1); }
void Batch32_Scalar(benchmark::State& st) { run(st, AttnPath::Scalar, 32); }
void Batch32_Avx2(benchmark::State& st) { run(st, AttnPath::Avx2, 32); }
void Batch32_Avx512(benchmark::State& st) { run(st, AttnPath::Avx512, 32); }
void Prompt512_Avx512(benchmark::State& st) { run(st, AttnPath::Avx512, 512); }
void Prompt512Hd128_Avx512(benchmark::State& st) { run(st, AttnPath::Avx512, 512, false, 128); }
void DecodeBatch16_Avx512(benchmark::State& st) { run(st, AttnPath::Avx512, 16, true); }

}  // namespace

BENCHMARK(Decode_Scalar)
    ->Args({512, 1})
    ->Args({512, 2})
    ->Args({2048, 2})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(Decode_Avx2)
    ->Args({512, 1})
    ->Args({512, 2})
    ->Args({2048, 2})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(Decode_Avx512)
    ->Args({80, 1})  // bench-model's mean decode context
    ->Args({80, 2})
    ->Args({512, 1})
    ->Args({512, 2})
    ->Args({2048, 2})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(DecodeCold_Avx512)
    ->Args({80, 2})
    ->Args({512, 2})
    ->Args({2048, 2})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(Batch32_Scalar)->Args({512, 1})->Args({512, 2})->Unit(benchmark::kMicrosecond);
BENCHMARK(Batch32_Avx2)->Args({512, 1})->Args({512, 2})->Unit(benchmark::kMicrosecond);
BENCHMARK(Batch32_Avx512)->Args({512, 1})->Args({512, 2})->Unit(benchmark::kMicrosecond);
BENCHMARK(Prompt512_Avx512)
    ->Args({512, 1})
    ->Args({512, 2})
    ->Args({2048, 2})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(Prompt512Hd128_Avx512)->Args({512, 1})->Args({2048, 2})->Unit(benchmark::kMillisecond);
BENCHMARK(DecodeBatch16_Avx512)->Args({1024, 2})->Unit(benchmark::kMicrosecond);

BENCHMARK_MAIN();
