// Prefill → decode handoff between two engines: the prefill engine exports a
// prompt's K/V rows and its first token, the decode engine imports them and
// continues. The joined output must equal one engine's, token for token and
// byte for byte, and every block must go back to each pool.
#include <gtest/gtest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "engine_test_util.h"
#include "modelgen/model_builder.h"

namespace cairn::engine {
namespace {

using test_support::demo;
using test_support::greedy;
using test_support::RecordingSink;

// A RecordingSink that also keeps the exported runs.
class ExportSink final : public SequenceSink {
 public:
  void on_token(const TokenOutput& out) override { rec->on_token(out); }
  void on_end(const EndOutput& out) override { rec->on_end(out); }
  void on_error(const Status& err) override { rec->on_error(err); }
  void on_kv(kv::KvRun run) override {
    if (run.rows.first == 0) {
      imported.geometry = run.geometry;
      imported.prompt = run.prompt;
    }
    tokens_when_run.push_back(rec->n_tokens());
    imported.runs.push_back(std::move(run.rows));
  }
  std::shared_ptr<RecordingSink> rec = std::make_shared<RecordingSink>();
  kv::ImportedKv imported;
  std::vector<size_t> tokens_when_run;  // tokens reported before each run
};

// One position's K/V bytes in the demo model.
int64_t demo_geometry_bytes() {
  const kv::KvShape shape = demo().model->kv_shape();
  return 2 * (int64_t)shape.n_layer * shape.row_elems * 2;
}

struct Side {
  std::unique_ptr<kv::PagedKvCache> kv;
  std::unique_ptr<Engine> engine;
};

Side make_side(model::LoadedModel& m, int32_t blocks, EngineConfig cfg = {},
               TensorType kv_type = TensorType::F16) {
  kv::KvShape shape = m.model->kv_shape();
  shape.dtype = kv_type;
  auto kv = kv::PagedKvCache::create(shape, {blocks * kv::PagedKvCache::block_bytes(shape), 16, true});
  EXPECT_TRUE(kv.is_ok()) << kv.status().message();
  Side s;
  s.kv = std::move(*kv);
  s.engine = std::make_unique<Engine>(*m.model, *m.tokenizer, *s.kv, cfg);
  return s;
}

// Steps `e` on this thread until `done` holds (at most 5000 steps).
template <class F>
void step_until(Engine& e, F done) {
  for (int i = 0; i < 5000 && !done(); ++i) e.step();
  ASSERT_TRUE(done()) << "the engine never finished";
}

struct Outcome {
  std::vector<Token> tokens;
  std::string text;
  EndOutput end;
  std::string error;
};

Outcome run_single(Side& s, const EngineRequest& req) {
  auto sink = std::make_shared<RecordingSink>();
  auto id = s.engine->submit(req, sink);
  EXPECT_TRUE(id.is_ok()) << id.status().message();
  step_until(*s.engine, [&] { return sink->ends > 0; });
  return {sink->tokens, sink->text, sink->end, sink->error};
}

// Runs `req` on `p` as the prefill side of a handoff until it ends.
std::shared_ptr<ExportSink> prefill(Side& p, const EngineRequest& req) {
  EngineRequest pre = req;
  pre.export_kv = true;
  auto exp = std::make_shared<ExportSink>();
  auto id = p.engine->submit(pre, exp);
  EXPECT_TRUE(id.is_ok()) << id.status().message();
  step_until(*p.engine, [&] { return exp->rec->ends > 0; });
  return exp;
}

// Prefill on `p`, decode on `d`; the joined outcome.
Outcome run_handoff(Side& p, Side& d, const EngineRequest& req, int64_t* bytes = nullptr) {
  auto exp = prefill(p, req);
  Outcome out{exp->rec->tokens, exp->rec->text, exp->rec->end, exp->rec->error};
  if (!out.error.empty() || out.end.reason != EndReason::Handoff) return out;
  EXPECT_EQ(out.tokens.size(), 1u);
  // The first token leaves before the last run of rows.
  EXPECT_FALSE(exp->tokens_when_run.empty());
  if (!exp->tokens_when_run.empty()) {
    EXPECT_EQ(exp->tokens_when_run.back(), 1u);
    for (size_t i = 0; i + 1 < exp->tokens_when_run.size(); ++i)
      EXPECT_EQ(exp->tokens_when_run[i], 0u) << "run " << i << " came after the first token";
  }
  EXPECT_TRUE(exp->imported.check().is_ok()) << exp->imported.check().message();
  if (bytes) *bytes = exp->imported.bytes();

  EngineRequest post = req;
  post.forced = out.tokens;
  post.import_kv = std::make_shared<const kv::ImportedKv>(std::move(exp->imported));
  auto sink = std::make_shared<RecordingSink>();
  auto rid = d.engine->submit(post, sink);
  EXPECT_TRUE(rid.is_ok()) << rid.status().message();
  if (!rid.is_ok()) return {{}, {}, {}, rid.status().message()};
  step_until(*d.engine, [&] { return sink->ends > 0; });
  out.tokens.insert(out.tokens.end(), sink->tokens.begin(), sink->tokens.end());
  out.text += sink->text;
  out.end = sink->end;
  out.error = sink->error;
  return out;
}

void expect_same(const Outcome& got, const Outcome& want, const std::string& what) {
  EXPECT_EQ(got.error, want.error) << what;
  EXPECT_EQ(got.tokens, want.tokens) << what;
  EXPECT_EQ(got.text, want.text) << what;
  EXPECT_EQ(got.end.reason, want.end.reason) << what;
  EXPECT_EQ(got.end.prompt_tokens, want.end.prompt_tokens) << what;
  EXPECT_EQ(got.end.completion_tokens, want.end.completion_tokens) << what;
}

TEST(Handoff, GoldenModelsContinueTokenForToken) {
  CAIRN_REQUIRE_SHARED("golden/stories260K.json");
  const auto shared = *test::shared_dir();
  for (const char* name : {"stories260K", "syn-llama-gqa-q8_0", "syn-qwen2-f32"}) {
    const auto golden = shared / "golden" / (std::string(name) + ".json");
    if (!std::filesystem::exists(golden)) continue;
    auto loaded = model::load_model((shared / "models" / (std::string(name) + ".gguf")).string(),
                                    model::LoadOptions{2, {}});
    ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
    std::ifstream f(golden);
    auto doc = nlohmann::json::parse(f);
    // Small prompt chunks on the prefill side: several runs per prompt.
    Side single = make_side(*loaded, 512), p = make_side(*loaded, 512, {8, 8, 0}),
         d = make_side(*loaded, 512);
    int i = 0;
    for (const auto& c : doc["cases"]) {
      auto req = greedy(c["prompt_tokens"].get<std::vector<Token>>(),
                        c["n_predict"].get<int32_t>(), false);
      const auto want = c["tokens"].get<std::vector<Token>>();
      Outcome alone = run_single(single, req);
      EXPECT_EQ(alone.tokens, want) << name << " case " << i;
      Outcome split = run_handoff(p, d, req);
      expect_same(split, alone, std::string(name) + " case " + std::to_string(i));
      ++i;
    }
    EXPECT_EQ(p.kv->stats().blocks_used, 0) << name;
    EXPECT_EQ(d.kv->stats().blocks_used, 0) << name;
  }
}

TEST(Handoff, LongChunkedPromptSeededSamplingAndStopStrings) {
  auto& m = demo();
  // The decode side copies the rows in over several steps (5 positions each).
  EngineConfig slow_import;
  slow_import.import_bytes_per_step = 5 * demo_geometry_bytes();
  Side single = make_side(m, 256), p = make_side(m, 256, {16, 8, 0}),
       d = make_side(m, 256, slow_import);
  std::vector<Token> prompt;
  for (int i = 0; i < 6; ++i) {
    auto part = m.tokenizer->encode("once upon a time the little dog ran to the park and ", i == 0);
    prompt.insert(prompt.end(), part.begin(), part.end());
  }
  ASSERT_GT(prompt.size(), 60u);
  EngineRequest req = greedy(prompt, 24);
  int64_t bytes = 0;
  expect_same(run_handoff(p, d, req, &bytes), run_single(single, req), "greedy");
  EXPECT_EQ(bytes, p.engine->kv_geometry().bytes_for((int64_t)prompt.size()));

  // A seeded sample continues with the same random numbers.
  req.sampling.temperature = 0.9f;
  req.sampling.top_k = 40;
  req.sampling.seed = 1234;
  req.sampling.presence_penalty = 0.5f;
  expect_same(run_handoff(p, d, req), run_single(single, req), "seeded");

  // Stop strings: the text held back after the first token is released by
  // the decode side exactly as one engine would.
  Outcome free_run = run_single(single, greedy(prompt, 24));
  ASSERT_GE(free_run.text.size(), 8u);
  EngineRequest stopping = greedy(prompt, 24);
  stopping.stop = {free_run.text.substr(free_run.text.size() / 2, 3)};
  expect_same(run_handoff(p, d, stopping), run_single(single, stopping), "stop string");
  EXPECT_EQ(d.kv->stats().blocks_used, 0);
}

TEST(Handoff, SlidingWindowModel) {
  auto* loaded = &test_support::gemma2_swa16();
  Side single = make_side(*loaded, 256), p = make_side(*loaded, 256, {16, 8, 0}),
       d = make_side(*loaded, 256);
  std::vector<Token> prompt;
  for (int i = 0; i < 5; ++i) {
    auto part = loaded->tokenizer->encode("the big cat sat on a warm mat and looked at birds ", i == 0);
    prompt.insert(prompt.end(), part.begin(), part.end());
  }
  ASSERT_GT(prompt.size(), 48u);  // well past the window
  EngineRequest req = greedy(prompt, 20);
  expect_same(run_handoff(p, d, req), run_single(single, req), "gemma2 window 16");
  EXPECT_EQ(p.kv->stats().blocks_used, 0);
  EXPECT_EQ(d.kv->stats().blocks_used, 0);
}

TEST(Handoff, RecomputedResumeContinuesFromAnyToken) {
  // Without rows (the transfer failed, or the decode worker died), the
  // prompt and the tokens already sent are recomputed and the rest follows.
  auto& m = demo();
  Side single = make_side(m, 128), d = make_side(m, 128);
  EngineRequest req = greedy(m.tokenizer->encode("the little dog", true), 20);
  req.stop = {"zzqq"};
  Outcome whole = run_single(single, req);
  ASSERT_EQ(whole.tokens.size(), 20u);
  for (size_t k : {1u, 7u, 19u}) {
    EngineRequest rest = req;
    rest.forced.assign(whole.tokens.begin(), whole.tokens.begin() + (std::ptrdiff_t)k);
    Outcome tail = run_single(d, rest);
    std::vector<Token> joined(whole.tokens.begin(), whole.tokens.begin() + (std::ptrdiff_t)k);
    joined.insert(joined.end(), tail.tokens.begin(), tail.tokens.end());
    EXPECT_EQ(joined, whole.tokens) << "after " << k;
    EXPECT_EQ(tail.end.completion_tokens, 20) << "after " << k;
  }
  EXPECT_EQ(d.kv->stats().blocks_used, 0);
}

TEST(Handoff, RefusesWhatDoesNotFit) {
  auto& m = demo();
  Side p = make_side(m, 128), d = make_side(m, 128);
  EngineRequest req = greedy(m.tokenizer->encode("the little dog ran", true), 8);
  auto exp = prefill(p, req);
  ASSERT_EQ(exp->rec->end.reason, EndReason::Handoff);
  const kv::ImportedKv good = exp->imported;
  auto sink = std::make_shared<RecordingSink>();
  auto submit = [&](const kv::ImportedKv& rows, std::vector<Token> forced,
                    std::vector<Token> prompt) {
    EngineRequest r = req;
    r.prompt = std::move(prompt);
    r.forced = std::move(forced);
    r.import_kv = std::make_shared<const kv::ImportedKv>(rows);
    auto got = d.engine->submit(r, sink);
    return got.is_ok() ? std::string() : got.status().message();
  };
  const std::vector<Token> first = exp->rec->tokens;
  kv::ImportedKv bad = good;
  bad.geometry.n_layer += 1;
  EXPECT_NE(submit(bad, first, req.prompt).find("layer count"), std::string::npos);
  bad = good;
  bad.geometry.block_tokens = 32;
  EXPECT_NE(submit(bad, first, req.prompt).find("block size"), std::string::npos);
  bad = good;
  bad.runs.back().bytes.pop_back();
  EXPECT_NE(submit(bad, first, req.prompt).find("bytes"), std::string::npos);
  auto other = req.prompt;
  other.back() = other.back() == 5 ? 6 : 5;
  EXPECT_NE(submit(good, first, other).find("another prompt"), std::string::npos);
  EXPECT_NE(submit(good, {}, req.prompt).find("first token"), std::string::npos);
  EXPECT_NE(submit(good, {1 << 30}, req.prompt).find("vocabulary"), std::string::npos);
  // A forced end-of-text token would have ended the request on the prefill side.
  EngineRequest ends = req;
  ends.ignore_eos = false;
  ends.forced = {m.tokenizer->eos()};
  auto refused = d.engine->submit(ends, sink);
  ASSERT_FALSE(refused.is_ok());
  EXPECT_NE(refused.status().message().find("already end"), std::string::npos);
  EngineRequest both = req;
  both.export_kv = true;
  both.forced = first;
  EXPECT_FALSE(d.engine->submit(both, sink).is_ok());
  EXPECT_EQ(sink->ends, 0);
  EXPECT_EQ(d.kv->stats().blocks_used, 0);
}

TEST(Handoff, ImportWaitsForWholeBlocksAndCancelFreesThem) {
  auto& m = demo();
  // 8 blocks of 16 tokens: a running sequence holding most of them keeps the
  // import waiting (no over-commit) until it ends.
  Side p = make_side(m, 64), d = make_side(m, 8);
  std::vector<Token> prompt;
  for (int i = 0; i < 3; ++i) {
    auto part = m.tokenizer->encode("the little dog ran to the big tree and sat ", i == 0);
    prompt.insert(prompt.end(), part.begin(), part.end());
  }
  EngineRequest req = greedy(prompt, 8);
  auto exp = prefill(p, req);
  ASSERT_EQ(exp->rec->end.reason, EndReason::Handoff);
  const auto rows = std::make_shared<const kv::ImportedKv>(exp->imported);

  auto hog = std::make_shared<RecordingSink>();
  std::vector<Token> long_prompt;
  for (int i = 0; i < 7; ++i) {
    auto part = m.tokenizer->encode("a cat and a dog played in the sun all day ", i == 0);
    long_prompt.insert(long_prompt.end(), part.begin(), part.end());
  }
  ASSERT_TRUE(d.engine->submit(greedy(long_prompt, 20), hog).is_ok());
  d.engine->step();
  const int32_t hog_blocks = d.kv->stats().blocks_used;
  ASSERT_GT(hog_blocks + d.kv->blocks_for((int32_t)prompt.size() + 1), 8);

  EngineRequest post = req;
  post.forced = exp->rec->tokens;
  post.import_kv = rows;
  auto sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE(d.engine->submit(post, sink).is_ok());
  d.engine->step();
  EXPECT_EQ(d.engine->stats().waiting, 1);
  EXPECT_EQ(sink->n_tokens(), 0u);
  step_until(*d.engine, [&] { return sink->ends > 0; });
  EXPECT_TRUE(sink->error.empty()) << sink->error;
  EXPECT_EQ(sink->tokens.size() + 1, 8u);

  // Cancelled right after admission: the imported blocks go back too.
  auto cancelled = std::make_shared<RecordingSink>();
  auto id = d.engine->submit(post, cancelled);
  ASSERT_TRUE(id.is_ok());
  d.engine->step();  // admitted, rows written
  EXPECT_GT(d.kv->stats().blocks_used, 0);
  d.engine->cancel(*id);
  step_until(*d.engine, [&] { return cancelled->ends > 0; });
  EXPECT_EQ(cancelled->end.reason, EndReason::Cancelled);
  step_until(*d.engine, [&] { return hog->ends > 0; });
  EXPECT_EQ(d.kv->stats().blocks_used, 0);
  EXPECT_EQ(p.kv->stats().blocks_used, 0);
}

TEST(Handoff, LongImportsAreCopiedOverSeveralStepsWhileOthersDecode) {
  auto& m = demo();
  EngineConfig slow_import;
  slow_import.import_bytes_per_step = 8 * demo_geometry_bytes();  // 8 positions a step
  Side p = make_side(m, 256), d = make_side(m, 256, slow_import);
  std::vector<Token> prompt;
  for (int i = 0; i < 4; ++i) {
    auto part = m.tokenizer->encode("the little dog ran to the big tree and sat ", i == 0);
    prompt.insert(prompt.end(), part.begin(), part.end());
  }
  EngineRequest req = greedy(prompt, 6);
  auto exp = prefill(p, req);
  ASSERT_EQ(exp->rec->end.reason, EndReason::Handoff);

  // A stream already decoding on the decode side keeps a token every step.
  auto other = std::make_shared<RecordingSink>();
  ASSERT_TRUE(d.engine->submit(greedy(m.tokenizer->encode("once upon", true), 40), other).is_ok());
  d.engine->step();
  EngineRequest post = req;
  post.forced = exp->rec->tokens;
  post.import_kv = std::make_shared<const kv::ImportedKv>(exp->imported);
  auto sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE(d.engine->submit(post, sink).is_ok());
  const size_t steps_needed = (prompt.size() + 7) / 8;
  for (size_t s = 0; s + 1 < steps_needed; ++s) {
    const size_t before = other->n_tokens();
    d.engine->step();
    EXPECT_EQ(sink->n_tokens(), 0u) << "step " << s;
    EXPECT_EQ(other->n_tokens(), before + 1) << "step " << s;
  }
  d.engine->step();  // the last rows, and the forced token's forward
  EXPECT_EQ(sink->n_tokens(), 1u);
  step_until(*d.engine, [&] { return sink->ends > 0 && other->ends > 0; });
  Side single = make_side(m, 256);
  Outcome alone = run_single(single, req);
  std::vector<Token> joined = exp->rec->tokens;
  joined.insert(joined.end(), sink->tokens.begin(), sink->tokens.end());
  EXPECT_EQ(joined, alone.tokens);
  EXPECT_EQ(d.kv->stats().blocks_used, 0);
}

// Speculative decoding on both sides: the prefill side never drafts (its
// export holds only the prompt's rows), the decode side drafts after the
// handed-over rows and forced token; the joined output is the plain one.
TEST(Handoff, SpeculativeDecodeSideContinuesTokenForToken) {
  auto& m = demo();
  EngineConfig spec;
  spec.spec_lookup_max = 8;
  Side single = make_side(m, 256), p = make_side(m, 256, spec), d = make_side(m, 256, spec);
  for (const char* text : {"the little dog the little dog the little dog",
                           "a king and his best horse and his best horse and his"}) {
    auto req = greedy(m.tokenizer->encode(text, true), 40);
    const Outcome alone = run_single(single, req);
    const Outcome split = run_handoff(p, d, req);
    expect_same(split, alone, text);
  }
  EXPECT_EQ(p.engine->stats().spec_draft_tokens_total, 0u);
  EXPECT_GT(d.engine->stats().spec_accepted_tokens_total, 0u);
  EXPECT_EQ(p.kv->stats().blocks_used, 0);
  EXPECT_EQ(d.kv->stats().blocks_used, 0);
}

// --kv-type q8_0 on both sides: the rows move as Q8_0 bytes and the joined
// output equals one q8_0 engine's. Between a q8_0 and an f16 cache (either
// way) the import is refused, naming the flag: bytes of one layout are never
// written into the other.
TEST(Handoff, Q8RowsMoveBetweenQ8CachesOnly) {
  auto& m = demo();
  Side p = make_side(m, 128, {}, TensorType::Q8_0), d = make_side(m, 128, {}, TensorType::Q8_0);
  Side single = make_side(m, 128, {}, TensorType::Q8_0);
  EngineRequest req = greedy(m.tokenizer->encode("the little dog ran to the park", true), 12);
  const Outcome want = run_single(single, req);
  ASSERT_TRUE(want.error.empty()) << want.error;
  int64_t bytes = 0;
  expect_same(run_handoff(p, d, req, &bytes), want, "q8_0 -> q8_0");
  EXPECT_EQ(bytes, d.engine->kv_geometry().bytes_for((int64_t)req.prompt.size()));
  EXPECT_EQ(d.engine->kv_geometry().dtype, TensorType::Q8_0);

  Side f16 = make_side(m, 128);
  for (auto [from, to] : {std::pair<Side*, Side*>{&p, &f16}, {&f16, &p}}) {
    auto exp = prefill(*from, req);
    ASSERT_EQ(exp->rec->end.reason, EndReason::Handoff);
    EngineRequest post = req;
    post.forced = exp->rec->tokens;
    post.import_kv = std::make_shared<const kv::ImportedKv>(exp->imported);
    auto got = to->engine->submit(post, std::make_shared<RecordingSink>());
    ASSERT_FALSE(got.is_ok());
    EXPECT_NE(got.status().message().find("K/V cache type"), std::string::npos)
        << got.status().message();
    EXPECT_NE(got.status().message().find("--kv-type"), std::string::npos);
    EXPECT_EQ(to->kv->stats().blocks_used, 0);
  }
}

}  // namespace
}  // namespace cairn::engine
