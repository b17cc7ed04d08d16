// Engine: the threaded loop end to end on the demo model and, when present,
// the shared stories260K model and its golden continuations.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "engine_test_util.h"

namespace cairn::engine {
namespace {

using model::load_model;
using model::LoadedModel;
using test_support::demo;
using test_support::greedy;
using test_support::make_kv;
using test_support::RecordingSink;

// The single-sequence Generator is the reference for what one request yields.
std::vector<Token> reference(const LoadedModel& m, const std::vector<Token>& prompt, int n) {
  Generator gen(*m.model, *m.tokenizer);
  GenerateOptions o;
  o.max_tokens = n;
  o.ignore_eos = true;
  o.sampling.temperature = 0;
  auto r = gen.generate_tokens(prompt, o);
  EXPECT_TRUE(r.is_ok()) << r.status().message();
  return r.is_ok() ? r->tokens : std::vector<Token>{};
}

std::vector<std::vector<Token>> prompts(const Tokenizer& tok, int n) {
  static const char* kTexts[] = {"the little dog",      "once upon a time there was",
                                 "she went home",       "a king and his best horse",
                                 "what is the problem", "we can see the fire from here"};
  std::vector<std::vector<Token>> out;
  for (int i = 0; i < n; ++i) {
    std::string text = kTexts[i % std::size(kTexts)];
    for (int j = 0; j < i / (int)std::size(kTexts); ++j) text += " and more";
    out.push_back(tok.encode(text, true));
  }
  return out;
}

struct EngineParts {
  std::unique_ptr<kv::PagedKvCache> kv;
  std::unique_ptr<Engine> engine;
};

EngineParts start(LoadedModel& m, int32_t blocks, EngineConfig cfg) {
  EngineParts p;
  p.kv = make_kv(*m.model, blocks);
  p.engine = std::make_unique<Engine>(*m.model, *m.tokenizer, *p.kv, cfg);
  p.engine->start();
  return p;
}

// Runs `reqs` concurrently; returns each sink once all ended.
std::vector<std::shared_ptr<RecordingSink>> run_all(Engine& e, std::vector<EngineRequest> reqs) {
  std::vector<std::shared_ptr<RecordingSink>> sinks;
  for (auto& r : reqs) {
    sinks.push_back(std::make_shared<RecordingSink>());
    auto id = e.submit(std::move(r), sinks.back());
    EXPECT_TRUE(id.is_ok()) << id.status().message();
  }
  for (auto& s : sinks) EXPECT_TRUE(s->wait());
  return sinks;
}

// Waits until the engine published a snapshot where `pred` holds.
template <typename Pred>
bool eventually(const Engine& e, Pred pred, double seconds = 30) {
  const auto until = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < until) {
    if (pred(e.stats())) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return pred(e.stats());
}

TEST(Engine, GreedyRequestMatchesTheSingleSequenceGenerator) {
  auto& m = demo();
  auto p = start(m, 256, {});
  const auto prompt = m.tokenizer->encode("the little dog", true);
  auto sinks = run_all(*p.engine, {greedy(prompt, 24)});
  auto& s = *sinks[0];
  ASSERT_TRUE(s.error.empty()) << s.error;
  EXPECT_EQ(s.tokens, reference(m, prompt, 24));
  EXPECT_EQ(s.end.reason, EndReason::Length);
  EXPECT_EQ(s.end.prompt_tokens, (int32_t)prompt.size());
  EXPECT_EQ(s.end.completion_tokens, 24);
  std::vector<Token> all = prompt;
  all.insert(all.end(), s.tokens.begin(), s.tokens.end());
  EXPECT_EQ(m.tokenizer->decode(prompt) + s.text, m.tokenizer->decode(all));
  EXPECT_TRUE(eventually(*p.engine, [](const EngineStats& st) {
    return st.running == 0 && st.kv.blocks_used == 0 && st.requests_finished == 1;
  }));
  const auto st = p.engine->stats();
  EXPECT_EQ(st.generated_tokens_total, 24u);
  EXPECT_EQ(st.time_to_first_token_s.count, 1u);
  EXPECT_EQ(st.inter_token_latency_s.count, 23u);
  EXPECT_EQ(st.e2e_latency_s.count, 1u);
  EXPECT_EQ(st.queue_time_s.count, 1u);
}

TEST(Engine, ThirtyTwoConcurrentGreedyRequestsMatchTheirSoloRuns) {
  auto& m = demo();
  // A small batch budget forces chunked prefill interleaved with decodes.
  auto p = start(m, 512, {48, 64, 0});
  auto ps = prompts(*m.tokenizer, 33);
  std::vector<EngineRequest> reqs;
  for (auto& pr : ps) reqs.push_back(greedy(pr, 20));
  auto sinks = run_all(*p.engine, std::move(reqs));
  for (size_t i = 0; i < ps.size(); ++i) {
    ASSERT_TRUE(sinks[i]->error.empty()) << sinks[i]->error;
    EXPECT_EQ(sinks[i]->tokens, reference(m, ps[i], 20)) << "request " << i;
  }
  EXPECT_TRUE(eventually(*p.engine, [](const EngineStats& st) {
    return st.running == 0 && st.waiting == 0 && st.kv.blocks_used == 0;
  }));
  EXPECT_GT(p.engine->stats().steps, 20u);
  EXPECT_LT(p.engine->stats().steps, 33u * 20u);  // batched: far fewer steps than tokens
}

TEST(Engine, PreemptionUnderATinyPoolKeepsGreedyOutputIdentical) {
  auto& m = demo();
  // 8 blocks = 128 tokens; 6 requests of ~10 + 40 tokens need ~4 blocks each.
  auto p = start(m, 8, {64, 16, 128});
  auto ps = prompts(*m.tokenizer, 6);
  std::vector<EngineRequest> reqs;
  for (auto& pr : ps) reqs.push_back(greedy(pr, 40));
  auto sinks = run_all(*p.engine, std::move(reqs));
  for (size_t i = 0; i < ps.size(); ++i) {
    ASSERT_TRUE(sinks[i]->error.empty()) << sinks[i]->error;
    EXPECT_EQ(sinks[i]->tokens, reference(m, ps[i], 40)) << "request " << i;
    EXPECT_EQ(sinks[i]->end.completion_tokens, 40);
  }
  EXPECT_TRUE(eventually(*p.engine, [](const EngineStats& st) { return st.kv.blocks_used == 0; }));
  EXPECT_GT(p.engine->stats().preemptions, 0u);
}

TEST(Engine, CancellationFreesBlocksWithinAStep) {
  auto& m = demo();
  auto p = start(m, 256, {64, 4, 0});
  const auto prompt = m.tokenizer->encode("once upon a time there was", true);
  std::vector<std::shared_ptr<RecordingSink>> sinks;
  std::vector<RequestId> ids;
  for (int i = 0; i < 6; ++i) {  // 4 run, 2 wait (max_seqs 4)
    sinks.push_back(std::make_shared<RecordingSink>());
    auto id = p.engine->submit(greedy(prompt, -1), sinks.back());
    ASSERT_TRUE(id.is_ok());
    ids.push_back(*id);
  }
  ASSERT_TRUE(sinks[0]->wait_tokens(3));
  for (RequestId id : ids) p.engine->cancel(id);
  for (auto& s : sinks) {
    ASSERT_TRUE(s->wait());
    EXPECT_TRUE(s->error.empty());
    EXPECT_EQ(s->end.reason, EndReason::Cancelled);
  }
  EXPECT_TRUE(eventually(*p.engine, [](const EngineStats& st) {
    return st.running == 0 && st.waiting == 0 && st.kv.blocks_used == 0 &&
           st.requests_cancelled == 6;
  }));
  p.engine->cancel(ids[0]);  // idempotent
  p.engine->cancel(999999);  // unknown: ignored
  auto again = run_all(*p.engine, {greedy(prompt, 3)});
  EXPECT_EQ(again[0]->tokens.size(), 3u);
}

TEST(Engine, PrefixReuseGivesIdenticalOutputAndCountsHits) {
  auto& m = demo();
  auto p = start(m, 256, {});
  std::string text;
  for (int i = 0; i < 12; ++i) text += "the little dog ran home to his house ";
  const auto prompt = m.tokenizer->encode(text, true);
  ASSERT_GT(prompt.size(), 64u);
  auto first = run_all(*p.engine, {greedy(prompt, 16)});
  const auto before = p.engine->stats().kv;
  auto second = run_all(*p.engine, {greedy(prompt, 16)});
  EXPECT_EQ(first[0]->tokens, second[0]->tokens);
  EXPECT_EQ(first[0]->end.cached_prompt_tokens, 0);
  EXPECT_GE(second[0]->end.cached_prompt_tokens, (int32_t)(prompt.size() / 16 * 16) - 16);
  EXPECT_TRUE(eventually(*p.engine, [&](const EngineStats& st) {
    return st.kv.prefix_hits >= before.prefix_hits + prompt.size() / 16 * 16 - 16;
  }));
  // A prompt that shares the prefix but goes on differently still matches its solo run.
  auto longer = prompt;
  const auto tail = m.tokenizer->encode("what is the problem", false);
  longer.insert(longer.end(), tail.begin(), tail.end());
  auto third = run_all(*p.engine, {greedy(longer, 16)});
  EXPECT_GT(third[0]->end.cached_prompt_tokens, 0);
  EXPECT_EQ(third[0]->tokens, reference(m, longer, 16));
}

TEST(Engine, StopStringEndsTheRequestAndIsNotSent) {
  auto& m = demo();
  auto p = start(m, 256, {});
  const auto prompt = m.tokenizer->encode("the little dog", true);
  auto free_run = run_all(*p.engine, {greedy(prompt, 30)});
  const std::string full = free_run[0]->text;
  ASSERT_GT(full.size(), 20u);
  // A stop string that straddles a token boundary in the middle of the text.
  size_t boundary = 0;
  for (size_t i = 0; i + 1 < free_run[0]->pieces.size() && boundary < full.size() / 2; ++i)
    boundary += free_run[0]->pieces[i].size();
  const std::string stop = full.substr(boundary - 2, 4);
  auto req = greedy(prompt, 30);
  req.stop = {stop};
  auto stopped = run_all(*p.engine, {req});
  auto& s = *stopped[0];
  EXPECT_EQ(s.end.reason, EndReason::Stop);
  EXPECT_EQ(s.text, full.substr(0, full.find(stop)));
  EXPECT_LT(s.tokens.size(), 30u);
}

TEST(Engine, ContextFullEndsWithLength) {
  auto& m = demo();
  auto p = start(m, 64, {512, 8, 32});
  const auto prompt = m.tokenizer->encode("the little dog", true);
  auto sinks = run_all(*p.engine, {greedy(prompt, -1)});
  EXPECT_EQ(sinks[0]->end.reason, EndReason::Length);
  EXPECT_EQ(sinks[0]->end.prompt_tokens + sinks[0]->end.completion_tokens, 32);
  // A prompt of n_ctx - 1 with one new token still works.
  std::vector<Token> longest(31, prompt.back());
  longest[0] = prompt[0];
  auto one = run_all(*p.engine, {greedy(longest, 1)});
  EXPECT_TRUE(one[0]->error.empty()) << one[0]->error;
  EXPECT_EQ(one[0]->tokens.size(), 1u);
  EXPECT_EQ(one[0]->end.reason, EndReason::Length);
}

TEST(Engine, SubmitRejectsBadRequests) {
  auto& m = demo();
  auto p = start(m, 64, {512, 8, 32});
  auto sink = std::make_shared<RecordingSink>();
  auto expect_error = [&](EngineRequest r, const std::string& part) {
    auto id = p.engine->submit(std::move(r), sink);
    ASSERT_FALSE(id.is_ok()) << part;
    EXPECT_NE(id.status().message().find(part), std::string::npos) << id.status().message();
  };
  expect_error(greedy({}, 4), "empty");
  expect_error(greedy({1, 100000}, 4), "100000");
  expect_error(greedy({1, -3}, 4), "-3");
  expect_error(greedy({1, 2}, 0), "max_tokens");
  expect_error(greedy(std::vector<Token>(30, 5), 3), "30 tokens");
  auto nan = greedy({1, 2}, 4);
  nan.sampling.temperature = std::nanf("");
  expect_error(nan, "temperature");
  auto bias = greedy({1, 2}, 4);
  bias.sampling.logit_bias[9999] = 1;
  expect_error(bias, "logit_bias");
  EXPECT_FALSE(p.engine->submit(greedy({1, 2}, 4), nullptr).is_ok());
  EXPECT_EQ(sink->ends, 0);
}

TEST(Engine, LogprobsAndSeededSamplingRepeat) {
  auto& m = demo();
  auto p = start(m, 256, {});
  EngineRequest r = greedy(m.tokenizer->encode("the little dog", true), 12);
  r.sampling.temperature = 0.8f;
  r.sampling.seed = 1234;
  r.sampling.n_logprobs = 3;
  r.logprobs = true;
  auto a = run_all(*p.engine, {r, r});
  EXPECT_EQ(a[0]->tokens, a[1]->tokens);
  ASSERT_EQ(a[0]->samples.size(), 12u);
  for (size_t i = 0; i < a[0]->samples.size(); ++i) {
    const auto& s = a[0]->samples[i];
    EXPECT_EQ(s.token, a[0]->tokens[i]);
    EXPECT_LE(s.logprob, 0.0f);
    ASSERT_EQ(s.top.size(), 3u);
    EXPECT_GE(s.top[0].logprob, s.top[1].logprob);
  }
}

TEST(Engine, StopFailsWhatIsLeftAndStepRunsWithoutAThread) {
  auto& m = demo();
  auto kv = make_kv(*m.model, 64);
  auto sink = std::make_shared<RecordingSink>();
  {
    Engine e(*m.model, *m.tokenizer, *kv, {});
    const auto prompt = m.tokenizer->encode("the little dog", true);
    ASSERT_TRUE(e.submit(greedy(prompt, 5), sink).is_ok());
    EXPECT_TRUE(e.step());  // prefill + first token, on this thread
    EXPECT_EQ(sink->n_tokens(), 1u);
  }  // destroyed mid-request
  EXPECT_EQ(sink->ends, 1);
  EXPECT_FALSE(sink->error.empty());
  EXPECT_EQ(kv->stats().blocks_used, 0);
}

// Golden: stories260K's greedy continuations, alone and among 32 others.
TEST(EngineGolden, StoriesAloneAndAmongThirtyTwo) {
  CAIRN_REQUIRE_SHARED("golden/stories260K.json");
  const auto shared = *test::shared_dir();
  auto loaded = load_model((shared / "models" / "stories260K.gguf").string());
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
  std::ifstream f(shared / "golden" / "stories260K.json");
  auto doc = nlohmann::json::parse(f);
  std::vector<EngineRequest> reqs;
  std::vector<std::vector<Token>> want;
  for (const auto& c : doc["cases"]) {
    auto r =
        greedy(c["prompt_tokens"].get<std::vector<Token>>(), c["n_predict"].get<int32_t>(), false);
    reqs.push_back(r);
    want.push_back(c["tokens"].get<std::vector<Token>>());
  }
  auto p = start(*loaded, 1024, {64, 64, 0});
  for (size_t i = 0; i < reqs.size(); ++i) {
    auto alone = run_all(*p.engine, {reqs[i]});
    EXPECT_EQ(alone[0]->tokens, want[i]) << "case " << i << " alone";
    EXPECT_EQ(alone[0]->text, doc["cases"][i]["text"].get<std::string>());
  }
  std::vector<EngineRequest> many;
  for (int k = 0; k < 33; ++k) many.push_back(reqs[(size_t)k % reqs.size()]);
  auto sinks = run_all(*p.engine, many);
  for (size_t k = 0; k < sinks.size(); ++k)
    EXPECT_EQ(sinks[k]->tokens, want[k % want.size()]) << "request " << k << " of 33";

  // A pool of one context (8 blocks) for all six at once: preempted and
  // recomputed sequences still produce the golden tokens.
  auto tiny = start(*loaded, 8, {32, 8, 0});
  auto squeezed = run_all(*tiny.engine, reqs);
  for (size_t i = 0; i < squeezed.size(); ++i)
    EXPECT_EQ(squeezed[i]->tokens, want[i]) << "case " << i << " in a tiny pool";
  EXPECT_GT(tiny.engine->stats().preemptions, 0u);
}

}  // namespace
}  // namespace cairn::engine

namespace cairn::engine {
namespace {

// Constrained decoding through the engine: sampled at temperature 1 with
// different grammars in one batch, every output is a sentence of its own
// grammar, and an end token comes only where the grammar may end.
TEST(Engine, GrammarsConstrainEachSequenceOfABatch) {
  auto& m = demo();
  auto p = start(m, 512, {});
  const std::vector<std::string> grammars = {
      R"(root ::= "{" ws "\"n\":" ws [0-9]{1,3} ws "}"
ws ::= " "?)",
      R"(root ::= ("yes" | "no") "!")",
      R"(root ::= [a-z]{3,6} ( " " [a-z]{3,6} ){0,3} ".")"};
  std::vector<EngineRequest> reqs;
  std::vector<std::shared_ptr<const grammar::Grammar>> compiled;
  for (int i = 0; i < 12; ++i) {
    auto g = grammar::parse_gbnf(grammars[(size_t)i % grammars.size()]);
    ASSERT_TRUE(g) << g.status().message();
    compiled.push_back(std::make_shared<const grammar::Grammar>(std::move(*g)));
    EngineRequest r = greedy(m.tokenizer->encode("the little dog", true), 40);
    r.sampling.temperature = 1.0f;
    r.sampling.seed = 100 + (uint64_t)i;
    r.ignore_eos = false;
    r.grammar = compiled.back();
    reqs.push_back(r);
  }
  auto sinks = run_all(*p.engine, reqs);
  int ended = 0;
  for (size_t i = 0; i < sinks.size(); ++i) {
    grammar::Matcher mt(compiled[i]);
    const std::string text = m.tokenizer->decode(sinks[i]->tokens);
    // The demo tokenizer may put a space before the first piece: the
    // grammar saw the pieces' bytes, token by token.
    std::string bytes;
    for (Token t : sinks[i]->tokens) bytes += m.tokenizer->token_to_piece(t);
    EXPECT_TRUE(mt.accept(bytes)) << i << ": '" << bytes << "'";
    if (sinks[i]->end.reason == EndReason::Stop) {
      EXPECT_TRUE(mt.can_end()) << i << ": '" << bytes << "'";
      ++ended;
    }
    EXPECT_TRUE(sinks[i]->error.empty()) << sinks[i]->error;
    (void)text;
  }
  EXPECT_EQ(ended, (int)sinks.size());  // each grammar ends well before 40 tokens
}

}  // namespace
}  // namespace cairn::engine
