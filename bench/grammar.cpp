// Constrained decoding's cost per token: the mask of a JSON schema's grammar
// over real vocabularies (../shared/tokenizer: llama's 32k SentencePiece and
// Qwen2's 151k byte-level BPE), at a few points of an output, and the time to
// compile the schema. Prints measurements; not a test.
//   build/bench/bench_grammar [--benchmark_filter=...]
// With --decode=MODEL.gguf, instead: the engine decoding batches of 1 and 16
// sequences (temperature sampling, a fixed number of tokens each) without and
// with that schema (every sequence its own matcher), tokens/s both ways; a
// missing MODEL is first written TinyLlama-shaped (see make_tinyllama).
//   build/bench/bench_grammar --decode=/tmp/cairn-bench/tl32k-q4_0.gguf [--tokens=64] [--reps=2]
#include <benchmark/benchmark.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "gguf/gguf.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar/token_mask.h"
#include "kv/kv_cache.h"
#include "model/load.h"
#include "modelgen/model_builder.h"
#include "tokenizer/tokenizer.h"

namespace {

using namespace cairn;

// A 10-field nested object, as the issue's benchmark asks.
const char* kSchema = R"({"type": "object", "properties": {
  "id": {"type": "integer", "minimum": 0}, "name": {"type": "string", "maxLength": 40},
  "email": {"type": "string", "format": "email"}, "active": {"type": "boolean"},
  "score": {"type": "number"}, "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 5},
  "role": {"enum": ["admin", "user", "guest"]}, "created": {"type": "string", "format": "date-time"},
  "address": {"type": "object", "properties": {"city": {"type": "string"}, "zip": {"type": "string"}},
              "required": ["city", "zip"]},
  "notes": {"type": ["string", "null"]}},
  "required": ["id", "name", "email", "active", "score", "tags", "role", "created", "address", "notes"]})";

// Outputs so far at which the mask is measured.
const std::vector<std::string> kPrefixes = {"", "{\"id\": 12, \"name\": \"Ann",
                                            "{\"id\": 12, \"name\": \"Ann\", \"email\": \"a@b.c\", \"active\": tr"};

struct Vocab {
  std::unique_ptr<grammar::TokenTrie> trie;
  int32_t n = 0;
};

const Vocab* vocab(const std::string& file) {
  static std::map<std::string, Vocab> cache;
  if (auto it = cache.find(file); it != cache.end()) return it->second.trie ? &it->second : nullptr;
  Vocab& v = cache[file];
  const std::string path = std::string(CAIRN_SHARED_DIR) + "/tokenizer/" + file;
  auto f = gguf::File::open(path);
  if (!f) return nullptr;
  auto tok = Tokenizer::from_gguf(**f);
  if (!tok) return nullptr;
  std::vector<std::string> pieces((size_t)(*tok)->vocab_size());
  std::vector<int32_t> ends;
  for (int32_t t = 0; t < (*tok)->vocab_size(); ++t) {
    if ((*tok)->is_eog(t)) ends.push_back(t);
    else pieces[(size_t)t] = (*tok)->token_to_piece(t);
  }
  v.n = (*tok)->vocab_size();
  v.trie = std::make_unique<grammar::TokenTrie>(pieces, ends);
  return &v;
}

std::shared_ptr<const grammar::Grammar> schema_grammar() {
  static auto g = [] {
    auto text = grammar::json_schema_to_gbnf(nlohmann::ordered_json::parse(kSchema));
    auto gr = grammar::parse_gbnf(*text);
    return std::make_shared<const grammar::Grammar>(std::move(*gr));
  }();
  return g;
}

// The vocabulary and a recognizer past the benchmark's prefix, or null (the
// state says why).
const Vocab* setup(benchmark::State& state, const char* file, std::optional<grammar::Matcher>& m) {
  const Vocab* v = vocab(file);
  if (!v) {
    state.SkipWithError("vocabulary not found under ../shared/tokenizer");
    return nullptr;
  }
  m.emplace(schema_grammar());
  if (!m->accept(kPrefixes[(size_t)state.range(0)])) {
    state.SkipWithError("prefix refused");
    return nullptr;
  }
  return v;
}

void BM_Mask(benchmark::State& state, const char* file) {
  std::optional<grammar::Matcher> matcher;
  const Vocab* v = setup(state, file, matcher);
  if (!v) return;
  const grammar::Matcher& m = *matcher;
  std::vector<uint8_t> mask;
  int32_t allowed = 0;
  for (auto _ : state) allowed = v->trie->fill_mask(m, mask);
  state.counters["vocab"] = v->n;
  state.counters["allowed"] = allowed;
}
BENCHMARK_CAPTURE(BM_Mask, llama_spm_32k, "ggml-vocab-llama-spm.gguf")->DenseRange(0, 2)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_Mask, qwen2_151k, "ggml-vocab-qwen2.gguf")->DenseRange(0, 2)->Unit(benchmark::kMillisecond);

// The original walk (a copy of the parse stacks per trie node), for comparison.
void BM_MaskByCopying(benchmark::State& state, const char* file) {
  std::optional<grammar::Matcher> matcher;
  const Vocab* v = setup(state, file, matcher);
  if (!v) return;
  std::vector<uint8_t> mask;
  for (auto _ : state) v->trie->fill_mask_by_copying(*matcher, mask);
}
BENCHMARK_CAPTURE(BM_MaskByCopying, llama_spm_32k, "ggml-vocab-llama-spm.gguf")->Arg(1)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_MaskByCopying, qwen2_151k, "ggml-vocab-qwen2.gguf")->Arg(1)->Unit(benchmark::kMillisecond);

// A state whose mask is not cached, walked over transitions that earlier
// walks learnt (a server some requests in): table loads only.
void BM_MaskWarmTable(benchmark::State& state, const char* file) {
  std::optional<grammar::Matcher> matcher;
  const Vocab* v = setup(state, file, matcher);
  if (!v) return;
  grammar::StateTable table;
  std::vector<uint8_t> mask;
  v->trie->fill_mask(*matcher, mask, table);
  for (auto _ : state) v->trie->fill_mask(*matcher, mask, table);
  state.counters["states"] = (double)table.size();
  state.counters["table_MiB"] = (double)table.bytes() / (1 << 20);
  state.counters["trie_nodes"] = (double)v->trie->n_nodes();
}
BENCHMARK_CAPTURE(BM_MaskWarmTable, llama_spm_32k, "ggml-vocab-llama-spm.gguf")->DenseRange(0, 2)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_MaskWarmTable, qwen2_151k, "ggml-vocab-qwen2.gguf")->DenseRange(0, 2)->Unit(benchmark::kMillisecond);

// The steps after the first in a state: the mask comes from the cache.
void BM_MaskCached(benchmark::State& state, const char* file) {
  std::optional<grammar::Matcher> matcher;
  const Vocab* v = setup(state, file, matcher);
  if (!v) return;
  const grammar::Matcher& m = *matcher;
  grammar::MaskCache cache;
  std::vector<uint8_t> mask;
  v->trie->fill_mask(m, mask, cache);
  for (auto _ : state) v->trie->fill_mask(m, mask, cache);
}
BENCHMARK_CAPTURE(BM_MaskCached, llama_spm_32k, "ggml-vocab-llama-spm.gguf")->DenseRange(0, 2)->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_MaskCached, qwen2_151k, "ggml-vocab-qwen2.gguf")->DenseRange(0, 2)->Unit(benchmark::kMicrosecond);

void BM_CompileSchema(benchmark::State& state) {
  for (auto _ : state) {
    auto text = grammar::json_schema_to_gbnf(nlohmann::ordered_json::parse(kSchema));
    auto g = grammar::parse_gbnf(*text);
    benchmark::DoNotOptimize(g);
  }
}
BENCHMARK(BM_CompileSchema)->Unit(benchmark::kMicrosecond);

// ---- decode through the engine, without and with the schema

struct CountingSink : engine::SequenceSink {
  int tokens = 0;
  std::vector<Token> ids;
  bool ended = false;
  std::string error;
  void on_token(const engine::TokenOutput& t) override {
    ++tokens;
    ids.push_back(t.id);
  }
  void on_end(const engine::EndOutput&) override { ended = true; }
  void on_error(const Status& e) override {
    ended = true;
    error = e.message();
  }
};

// This process's CPU seconds (every thread): unlike wall time, not counting
// the time a neighbour's process held the cores.
double cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
         1e-6 * (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

struct DecodeRun {
  double seconds = 0;
  double cpu = 0;  // CPU seconds meanwhile
  uint64_t tokens = 0;  // generated after every sequence had its first token
  uint64_t steps = 0;
  std::vector<std::vector<Token>> outputs;  // each sequence's tokens
  double tps() const { return seconds > 0 ? (double)tokens / seconds : 0; }
  double cpu_tps() const { return cpu > 0 ? (double)tokens / cpu : 0; }
};

// `batch` sequences at once, each `max_tokens` long (a grammar may end one
// sooner). Timed from the step after the prefill to the last step.
Result<DecodeRun> decode(engine::Engine& eng, const std::vector<Token>& prompt, int batch,
                         int max_tokens, std::shared_ptr<const grammar::Grammar> g, uint64_t seed) {
  std::vector<std::shared_ptr<CountingSink>> sinks;
  for (int i = 0; i < batch; ++i) {
    engine::EngineRequest r;
    r.prompt = prompt;
    r.max_tokens = max_tokens;
    r.ignore_eos = !g;  // free text runs its full length; the schema may end
    r.sampling.temperature = 1.0f;
    r.sampling.seed = seed + (uint64_t)i;
    r.grammar = g;
    sinks.push_back(std::make_shared<CountingSink>());
    auto id = eng.submit(std::move(r), sinks.back());
    if (!id.is_ok()) return id.status();
  }
  const auto all = [&](auto pred) {
    for (const auto& s : sinks)
      if (!pred(*s)) return false;
    return true;
  };
  while (!all([](const CountingSink& s) { return s.tokens > 0 || s.ended; })) eng.step();
  const uint64_t before = eng.stats().generated_tokens_total;
  const auto t0 = std::chrono::steady_clock::now();
  const double cpu0 = cpu_seconds();
  DecodeRun run;
  while (!all([](const CountingSink& s) { return s.ended; })) {
    eng.step();
    ++run.steps;
  }
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  run.cpu = cpu_seconds() - cpu0;
  run.tokens = eng.stats().generated_tokens_total - before;
  for (const auto& s : sinks) {
    if (!s->error.empty()) return Status::error("a sequence failed: " + s->error);
    run.outputs.push_back(s->ids);
  }
  return run;
}

// TinyLlama 1.1B's shape (llama, 22 layers, dim 2048, 32 heads, 4 K/V heads,
// FFN 5632) in Q4_0 with random weights and llama's 32k vocabulary.
Status make_tinyllama(const std::string& path) {
  auto file = gguf::File::open(std::string(CAIRN_SHARED_DIR) + "/tokenizer/ggml-vocab-llama-spm.gguf");
  if (!file.is_ok()) return file.status();
  auto vocab = modelgen::vocab_from_gguf(std::shared_ptr<const gguf::File>(std::move(*file)));
  if (!vocab.is_ok()) return vocab.status();
  modelgen::RandomModelSpec spec;
  spec.arch = "llama";
  spec.dim = 2048;
  spec.layers = 22;
  spec.heads = 32;
  spec.kv_heads = 4;
  spec.ffn = 5632;
  spec.ctx = 2048;
  spec.type = TensorType::Q4_0;
  auto summary = modelgen::write_random_model(spec, *vocab, path, 0);
  return summary.is_ok() ? Status::ok() : summary.status();
}

int decode_main(const std::string& path, int max_tokens, int reps) {
  if (!std::filesystem::exists(path)) {
    std::printf("writing %s (TinyLlama-shaped, Q4_0, random weights, llama's 32k vocabulary)\n", path.c_str());
    if (Status st = make_tinyllama(path); !st.is_ok()) {
      std::fprintf(stderr, "%s\n", st.message().c_str());
      return 1;
    }
  }
  auto loaded = model::load_model(path);
  if (!loaded.is_ok()) {
    std::fprintf(stderr, "%s\n", loaded.status().message().c_str());
    return 1;
  }
  model::Model& m = *loaded->model;
  const Tokenizer& tok = *loaded->tokenizer;
  const model::HParams& hp = m.hparams();
  std::printf("model %s: %s, %lld layers, dim %lld, heads %lld/%lld, vocab %lld\n", path.c_str(),
              hp.arch.c_str(), (long long)hp.n_layer, (long long)hp.n_embd, (long long)hp.n_head,
              (long long)hp.n_head_kv, (long long)hp.n_vocab);
  const std::vector<Token> prompt =
      tok.encode("Write the user's profile as JSON with id, name, email, active, score, tags, "
                 "role, created, address and notes:\n", true);
  constexpr int kMaxBatch = 16;
  const int64_t ctx = (int64_t)prompt.size() + max_tokens + 16;
  const kv::KvShape shape = hp.paged_kv_shape();
  const int64_t pool = (kMaxBatch * ((ctx + 15) / 16) + kv::kMinBlocks) *
                       kv::PagedKvCache::tables(shape) * kv::PagedKvCache::block_bytes(shape);
  auto kv = kv::PagedKvCache::create(shape, kv::KvConfig{pool, 16, false, nullptr});
  if (!kv.is_ok()) {
    std::fprintf(stderr, "%s\n", kv.status().message().c_str());
    return 1;
  }
  engine::EngineConfig cfg;
  cfg.n_ctx = (int32_t)ctx;
  cfg.max_seqs = kMaxBatch;
  const auto schema = schema_grammar();
  std::printf("prompt %zu tokens, %d generated per sequence (at most), temperature 1\n",
              prompt.size(), max_tokens);
  // The engine's trie (end-of-generation tokens have no bytes), for replays.
  std::vector<std::string> pieces((size_t)hp.n_vocab);
  std::vector<int32_t> ends;
  for (Token t = 0; t < (Token)hp.n_vocab; ++t) {
    if (tok.is_eog(t)) ends.push_back(t);
    else pieces[(size_t)t] = tok.token_to_piece(t);
  }
  const grammar::TokenTrie trie(pieces, ends);
  // The masks the engine computed for `run`, again on this thread with a
  // cache as fresh as the engine's first run's (the engine's is warmer):
  // seconds, the old walk's (a matcher copy per trie node) or the table's.
  const auto replay = [&](const DecodeRun& run, bool copying) {
    grammar::MaskCache cache(size_t{16} << 20);
    std::vector<uint8_t> mask;
    const auto t0 = std::chrono::steady_clock::now();
    for (const auto& out : run.outputs) {
      grammar::Matcher mt(schema);
      for (Token t : out) {
        const std::string key = mt.state_key();
        if (const auto* hit = cache.find(key)) {
          mask = *hit;
        } else {
          if (copying) trie.fill_mask_by_copying(mt, mask);
          else trie.fill_mask(mt, mask, cache.table());
          cache.put(key, mask);
        }
        if (!tok.is_eog(t)) mt.accept(tok.token_to_piece(t));
      }
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };

  std::printf("%-5s %-4s %12s %12s %8s %10s %10s %8s %8s %14s %14s\n", "batch", "rep", "free tok/s",
              "schema tok/s", "ratio", "free/cpu-s", "schema/cpu-s", "ratio", "tokens", "mask ms/token",
              "old ms/token");
  for (int batch : {1, 16}) {
    // One engine per batch size, as a server: its mask cache and state
    // table carry over from one repetition to the next.
    engine::Engine eng(m, tok, **kv, cfg);
    if (auto w = decode(eng, prompt, batch, 4, nullptr, 1); !w.is_ok()) {  // first-touch costs out
      std::fprintf(stderr, "%s\n", w.status().message().c_str());
      return 1;
    }
    std::vector<double> ratios, cpu_ratios, mask_ms_all;
    double free_sum = 0, schema_sum = 0, free_best = 0, schema_best = 0;
    for (int rep = 0; rep < reps; ++rep) {
      // Alternating which goes first, so drift in the machine's load evens out.
      Result<DecodeRun> free_run = Status::error("not run"), schema_run = Status::error("not run");
      for (int k = 0; k < 2; ++k) {
        if ((k == 0) == (rep % 2 == 0))
          free_run = decode(eng, prompt, batch, max_tokens, nullptr, 1000 + (uint64_t)rep * 100);
        else
          schema_run = decode(eng, prompt, batch, max_tokens, schema, 2000 + (uint64_t)rep * 100);
      }
      if (!free_run.is_ok() || !schema_run.is_ok()) {
        std::fprintf(stderr, "%s\n", (free_run.is_ok() ? schema_run.status() : free_run.status()).message().c_str());
        return 1;
      }
      const double n = (double)schema_run->tokens;
      const double mask_ms = 1e3 * replay(*schema_run, false) / n;
      const double old_ms = rep == 0 ? 1e3 * replay(*schema_run, true) / n : 0;
      const double ratio = schema_run->tps() / free_run->tps();
      ratios.push_back(ratio);
      mask_ms_all.push_back(mask_ms);
      free_best = std::max(free_best, free_run->tps());
      schema_best = std::max(schema_best, schema_run->tps());
      free_sum += free_run->tps();
      schema_sum += schema_run->tps();
      cpu_ratios.push_back(schema_run->cpu_tps() / free_run->cpu_tps());
      std::printf("%-5d %-4d %12.2f %12.2f %8.3f %10.2f %10.2f %8.3f %8llu %14.3f %14s\n", batch, rep,
                  free_run->tps(), schema_run->tps(), ratio, free_run->cpu_tps(), schema_run->cpu_tps(),
                  cpu_ratios.back(), (unsigned long long)schema_run->tokens, mask_ms,
                  rep == 0 ? std::to_string(old_ms).substr(0, 8).c_str() : "-");
      std::fflush(stdout);
    }
    std::sort(ratios.begin(), ratios.end());
    std::sort(cpu_ratios.begin(), cpu_ratios.end());
    std::sort(mask_ms_all.begin(), mask_ms_all.end());
    // On a shared machine the runs' speeds swing with the neighbours' load:
    // the best run of each kind is the least disturbed, and the masks'
    // own time (replayed alone) against the best free run bounds what the
    // grammar can cost without the noise.
    const double mask_ms = mask_ms_all[mask_ms_all.size() / 2];
    std::printf("batch %d: best free %.2f tok/s, best schema %.2f tok/s (ratio %.3f); mean ratio of means %.3f, "
                "median ratio %.3f (per CPU second %.3f); masks %.3f ms/token = %.1f %% of a best free "
                "token's %.2f ms\n",
                batch, free_best, schema_best, schema_best / free_best, schema_sum / free_sum,
                ratios[ratios.size() / 2], cpu_ratios[cpu_ratios.size() / 2], mask_ms, 100 * mask_ms * free_best / 1e3, 1e3 / free_best);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model;
  int tokens = 64, reps = 2;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--decode=", 9) == 0) model = argv[i] + 9;
    else if (std::strncmp(argv[i], "--tokens=", 9) == 0) tokens = std::atoi(argv[i] + 9);
    else if (std::strncmp(argv[i], "--reps=", 7) == 0) reps = std::atoi(argv[i] + 7);
  }
  if (!model.empty()) return decode_main(model, std::max(tokens, 1), std::max(reps, 1));
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
