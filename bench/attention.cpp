// Attention of one layer, TinyLlama-1.1B shape (32 query heads, 4 KV heads,
// head_dim 64, F16 cache), per path: a decode token at context N, a batch
// of 32 or 512 tokens of one prompt ending at N (the tinyBLAS orders; K
// transposed once per call; Prompt512Hd128: head_dim 128 and 8 KV heads, as Llama-3-8B and
// Mistral-7B), and a decode step of 16 sequences each at N. Multiply the decode time
// by 22 layers for the attention cost per decoded token with its rows in cache; DecodeCold times
// all 22 layers with them out of cache, as a forward meets them. Arguments: context, threads
// (with 1 thread, CPU time is the work itself even on a busy machine).
// Gemma2Decode_*: a gemma2 decode token's attention at a long context, before
// (every position kept, scalar path) and after (sliding layers keep their
// window, SIMD path), with the K/V bytes per sequence (docs/performance.md).
//   bench_attention [--benchmark_filter=Decode]   (CAIRN_ISA caps the paths)
#include "model/attention.h"

#include <benchmark/benchmark.h>

#include <cmath>
#include <memory>
#include <random>
#include <vector>

#include "core/thread_pool.h"
#include "kv/contiguous_kv.h"
#include "kv/kv_cache.h"

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
  TensorType dtype;
  Setup(int64_t n_ctx, int threads, int seqs, int layers = 1, int64_t head_dim = 64,
        int64_t n_head_kv = 4, TensorType kv_type = TensorType::F16)
      : pool(threads), n_seqs(seqs), dtype(kv_type) {
    hp.n_layer = layers;
    hp.n_head = 32;
    hp.n_head_kv = n_head_kv;
    hp.head_dim = head_dim;
    hp.n_embd = 32 * head_dim;
    auto made = ContiguousKvCache::create(hp.kv_shape(), n_seqs, n_ctx, dtype);
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
// kv_type: how the rows are stored (F16, or Q8_0 for --kv-type q8_0).
void run(benchmark::State& st, AttnPath path, int64_t n_tokens, bool distinct = false,
         int64_t head_dim = 64, TensorType kv_type = TensorType::F16) {
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
      s->hp.head_dim != head_dim || s->dtype != kv_type)
    s = std::make_unique<Setup>(n_ctx, threads, n_seqs, 1, head_dim, n_kv, kv_type);
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
void decode_cold(benchmark::State& st, TensorType kv_type) {
  const int64_t n_ctx = st.range(0);
  if (!attention_path_supported(AttnPath::Avx512, 64)) {
    st.SkipWithError("path not available on this CPU / CAIRN_ISA");
    return;
  }
  constexpr int kLayers = 22;
  Setup s(n_ctx, (int)st.range(1), 1, kLayers, 64, 4, kv_type);
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

// Gemma2-2B's attention (8 query heads, 4 KV heads, head_dim 256, scores
// soft-capped at 50, sliding layers with a window of 4096 alternating with
// global ones), one decode token at context N over 2 sliding + 2 global
// layers, the K/V in the paged cache the server uses. Before: every position
// of every layer kept, the gemma layers on the scalar path (what they had);
// after: the sliding layers keep only their window, attention on the SIMD
// path. Counters: kv_MB_seq (the sequence's K/V in the pool, these 4 layers;
// x 6.5 for the model's 26) and tok_s (decode tokens per second of this
// attention alone, wall time, 4 layers; the model's 26 would be 6.5 times
// slower).
struct GemmaSetup {
  HParams hp;
  std::unique_ptr<kv::PagedKvCache> kv;
  std::vector<float> q, out;
  ThreadPool pool;
  int64_t n_ctx;
  bool windowed;
  kv::KvShape shape;
  GemmaSetup(int64_t ctx, int threads, bool windowed_)
      : pool(threads), n_ctx(ctx), windowed(windowed_) {
    hp.n_layer = 4;
    hp.n_head = 8;
    hp.n_head_kv = 4;
    hp.head_dim = 256;
    hp.n_embd = 2304;
    hp.n_swa = 4096;
    hp.swa_layers = {1, 0, 1, 0};
    shape = windowed ? hp.paged_kv_shape() : hp.kv_shape();
    kv::KvConfig cfg;
    cfg.prefix_cache = false;
    cfg.pool_bytes = (ctx / 16 + 2) * kv::PagedKvCache::tables(shape) *
                     kv::PagedKvCache::block_bytes(shape);
    auto made = kv::PagedKvCache::create(shape, cfg);
    kv.reset(made->release());
    std::mt19937 rng(1);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> k((size_t)hp.kv_row_elems()), v(k.size());
    std::vector<Token> tok(1, 0);
    // Prompt-sized chunks, committed, as the engine fills a sequence.
    for (int32_t p0 = 0; p0 < ctx; p0 += 512) {
      const int32_t n = (int32_t)std::min<int64_t>(512, ctx - p0);
      kv->reserve(0, n);
      for (int32_t p = p0; p < p0 + n; ++p)
        for (int l = 0; l < 4; ++l) {
          for (size_t i = 0; i < k.size(); ++i) k[i] = u(rng), v[i] = u(rng);
          kv->write(l, 0, p, k.data(), v.data());
        }
      std::vector<Token> ids((size_t)n, 1);
      kv->commit(0, ids);
    }
    // The decode token is position ctx - 1 (its row written above).
    q.resize((size_t)(hp.n_head * hp.head_dim));
    for (float& x : q) x = u(rng);
    out.resize(q.size());
  }
};

void gemma2_decode(benchmark::State& st, AttnPath path, bool windowed) {
  const int64_t n_ctx = st.range(0);
  if (!attention_path_supported(path, 256)) {
    st.SkipWithError("path not available on this CPU / CAIRN_ISA");
    return;
  }
  static std::unique_ptr<GemmaSetup> s;
  if (!s || s->n_ctx != n_ctx || s->pool.size() != (int)st.range(1) || s->windowed != windowed)
    s = std::make_unique<GemmaSetup>(n_ctx, (int)st.range(1), windowed);
  const SeqId seq = 0;
  const int32_t pos = (int32_t)(n_ctx - 1);
  for (auto _ : st) {
    for (int l = 0; l < 4; ++l) {
      AttnShape sh{8, 4, 256, 0.0625f};
      sh.softcap = 50.0f;
      sh.window = s->hp.is_swa(l) ? s->hp.n_swa : 0;
      attend(*s->kv, l, {&seq, 1}, {&pos, 1}, s->q.data(), sh, s->out.data(), s->pool, path);
    }
    benchmark::DoNotOptimize(s->out.data());
  }
  st.counters["kv_MB_seq"] =
      (double)s->kv->stats().blocks_used * (double)kv::PagedKvCache::block_bytes(s->shape) / 1e6;
  st.counters["tok_s"] = benchmark::Counter((double)st.iterations(), benchmark::Counter::kIsRate);
}

void Gemma2Decode_Before_Scalar(benchmark::State& st) {
  gemma2_decode(st, AttnPath::Scalar, false);
}
void Gemma2Decode_After_Avx512(benchmark::State& st) { gemma2_decode(st, AttnPath::Avx512, true); }
void Gemma2Decode_After_Avx2(benchmark::State& st) { gemma2_decode(st, AttnPath::Avx2, true); }

void DecodeCold_Avx512(benchmark::State& st) { decode_cold(st, TensorType::F16); }
// --kv-type q8_0: the same layers with Q8_0 rows (kernels/attention_q8).
void DecodeColdQ8_Avx512(benchmark::State& st) { decode_cold(st, TensorType::Q8_0); }
void DecodeQ8_Scalar(benchmark::State& st) {
  run(st, AttnPath::Scalar, 1, false, 64, TensorType::Q8_0);
}
void DecodeQ8_Avx2(benchmark::State& st) {
  run(st, AttnPath::Avx2, 1, false, 64, TensorType::Q8_0);
}
void DecodeQ8_Avx512(benchmark::State& st) {
  run(st, AttnPath::Avx512, 1, false, 64, TensorType::Q8_0);
}
void Batch32Q8_Avx512(benchmark::State& st) {
  run(st, AttnPath::Avx512, 32, false, 64, TensorType::Q8_0);
}
void Prompt512Q8_Avx512(benchmark::State& st) {
  run(st, AttnPath::Avx512, 512, false, 64, TensorType::Q8_0);
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
BENCHMARK(DecodeQ8_Scalar)->Args({2048, 2})->Unit(benchmark::kMicrosecond);
BENCHMARK(DecodeQ8_Avx2)->Args({512, 1})->Args({2048, 2})->Unit(benchmark::kMicrosecond);
BENCHMARK(DecodeQ8_Avx512)->Args({512, 1})->Args({2048, 2})->Unit(benchmark::kMicrosecond);
BENCHMARK(DecodeColdQ8_Avx512)->Args({512, 2})->Args({2048, 2})->Unit(benchmark::kMicrosecond);
BENCHMARK(Batch32Q8_Avx512)->Args({512, 2})->Unit(benchmark::kMicrosecond);
BENCHMARK(Prompt512Q8_Avx512)->Args({512, 2})->Args({2048, 2})->Unit(benchmark::kMillisecond);
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
BENCHMARK(Gemma2Decode_Before_Scalar)
    ->Args({8192, 1})
    ->Args({8192, 2})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(Gemma2Decode_After_Avx512)
    ->Args({8192, 1})
    ->Args({8192, 2})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(Gemma2Decode_After_Avx2)
    ->Args({8192, 1})
    ->Args({8192, 2})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
