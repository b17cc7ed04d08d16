// Constrained decoding's cost per token: the mask of a JSON schema's grammar
// over real vocabularies (../shared/tokenizer: llama's 32k SentencePiece and
// Qwen2's 151k byte-level BPE), at a few points of an output, and the time to
// compile the schema. Prints measurements; not a test.
//   build/bench/bench_grammar [--benchmark_filter=...]
#include <benchmark/benchmark.h>

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "grammar/grammar.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"
#include "grammar/token_mask.h"
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

}  // namespace

BENCHMARK_MAIN();
