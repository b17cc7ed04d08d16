// Speculative decoding by prompt lookup inside the engine: greedy output
// token for token the plain path's (golden models, mixed batches with
// opted-out requests, stops in the middle of a draft), the K/V accounting
// and prefix cache untouched by rejected drafts, and the token distribution
// at temperature > 0 unchanged.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "engine_test_util.h"

namespace cairn::engine {
namespace {

using model::LoadedModel;
using test_support::demo;
using test_support::greedy;
using test_support::make_kv;
using test_support::RecordingSink;

EngineConfig config(int32_t lookup, int32_t batch_tokens = 64, int32_t seqs = 64) {
  EngineConfig c;
  c.max_batch_tokens = batch_tokens;
  c.max_seqs = seqs;
  c.spec_lookup_max = lookup;
  return c;
}

struct Outcome {
  std::vector<std::shared_ptr<RecordingSink>> sinks;
  EngineStats stats;
  kv::KvStats kv;
};

// Runs `reqs` at once on a fresh engine and cache; returns when all ended.
Outcome run(LoadedModel& m, const std::vector<EngineRequest>& reqs, EngineConfig cfg,
        int32_t blocks = 512) {
  auto kv = make_kv(*m.model, blocks);
  Engine e(*m.model, *m.tokenizer, *kv, cfg);
  e.start();
  Outcome r;
  for (const auto& q : reqs) {
    r.sinks.push_back(std::make_shared<RecordingSink>());
    auto id = e.submit(q, r.sinks.back());
    EXPECT_TRUE(id.is_ok()) << id.status().message();
    if (!id.is_ok()) r.sinks.pop_back();
  }
  for (auto& s : r.sinks) EXPECT_TRUE(s->wait());
  e.stop();
  r.stats = e.stats();
  r.kv = kv->stats();
  return r;
}

// The prompt twice (the second time without its first token, the BOS):
// text that repeats its input, where lookup finds drafts.
std::vector<Token> twice(const std::vector<Token>& p) {
  std::vector<Token> out = p;
  out.insert(out.end(), p.begin() + 1, p.end());
  return out;
}

void expect_same_outputs(const Outcome& plain, const Outcome& spec, const std::string& what) {
  ASSERT_EQ(plain.sinks.size(), spec.sinks.size());
  for (size_t i = 0; i < plain.sinks.size(); ++i) {
    const RecordingSink& a = *plain.sinks[i];
    const RecordingSink& b = *spec.sinks[i];
    EXPECT_EQ(a.error, b.error) << what << " request " << i;
    EXPECT_EQ(a.tokens, b.tokens) << what << " request " << i;
    EXPECT_EQ(a.text, b.text) << what << " request " << i;
    EXPECT_EQ(a.end.reason, b.end.reason) << what << " request " << i;
    EXPECT_EQ(a.end.completion_tokens, b.end.completion_tokens) << what << " request " << i;
  }
}

// Every golden model: greedy continuations of prompts that repeat
// themselves, alone and all at once, identical with lookup on and off;
// drafts were accepted. Attention and F32 products take the reference's
// one-token float orders for a batch of one token and others for several; a
// lone stream's verification chunk stands for one-token steps and takes the
// one-token orders (model::Batch::one_token_order), so it matches alone too.
TEST(SpeculativeGolden, GreedyOutputIdenticalOnEveryGoldenModel) {
  CAIRN_REQUIRE_SHARED("golden/stories260K.json");
  const auto shared = *test::shared_dir();
  int models = 0;
  for (const auto& entry : std::filesystem::directory_iterator(shared / "golden")) {
    const std::string name = entry.path().stem().string();
    const auto gguf = shared / "models" / (name + ".gguf");
    if (entry.path().extension() != ".json" || !std::filesystem::exists(gguf)) continue;
    auto loaded = model::load_model(gguf.string(), model::LoadOptions{2, {}});
    ASSERT_TRUE(loaded.is_ok()) << name << ": " << loaded.status().message();
    std::ifstream f(entry.path());
    auto doc = nlohmann::json::parse(f);
    std::vector<EngineRequest> reqs;
    std::vector<std::vector<Token>> golden;
    for (const auto& c : doc["cases"]) {
      const auto prompt = c["prompt_tokens"].get<std::vector<Token>>();
      const int32_t n = std::min(c["n_predict"].get<int32_t>(), 48);
      reqs.push_back(greedy(prompt, c["n_predict"].get<int32_t>(), false));
      golden.push_back(c["tokens"].get<std::vector<Token>>());
      reqs.push_back(greedy(twice(prompt), n, false));
    }
    const Outcome plain = run(*loaded, reqs, config(0));
    const Outcome spec = run(*loaded, reqs, config(8));
    uint64_t drafted = spec.stats.spec_draft_tokens_total;
    uint64_t accepted = spec.stats.spec_accepted_tokens_total;
    for (size_t i = 0; i < reqs.size(); ++i) {
      const Outcome plain_one = run(*loaded, {reqs[i]}, config(0));
      const Outcome one = run(*loaded, {reqs[i]}, config(8));
      drafted += one.stats.spec_draft_tokens_total;
      accepted += one.stats.spec_accepted_tokens_total;
      EXPECT_EQ(one.kv.blocks_used, 0) << name;
      EXPECT_EQ(spec.sinks[i]->tokens, plain.sinks[i]->tokens) << name << " request " << i;
      EXPECT_EQ(spec.sinks[i]->text, plain.sinks[i]->text) << name << " request " << i;
      EXPECT_EQ(one.sinks[0]->tokens, plain_one.sinks[0]->tokens) << name << " request " << i
                                                                  << " alone";
    }
    if (name == "stories260K") {
      for (size_t i = 0; i < golden.size(); ++i)
        EXPECT_EQ(spec.sinks[2 * i]->tokens, golden[i]) << name << " golden case " << i;
    }
    EXPECT_GT(accepted, 0u) << name;
    EXPECT_EQ(plain.stats.spec_draft_tokens_total, 0u) << name;
    EXPECT_EQ(spec.kv.blocks_used, 0) << name;
    ++models;
    std::printf("  %-22s %2zu requests, drafted %5llu accepted %5llu\n", name.c_str(),
                reqs.size(), (unsigned long long)drafted,
                (unsigned long long)accepted);
  }
  EXPECT_GT(models, 0);
}

// A batch of requests of different lengths, some opted out, one ended by a
// stop string and one by an end token in the middle of a draft, one with
// logprobs, one with penalties, one with a grammar: each equals its plain run.
TEST(Speculative, MixedBatchEqualsThePlainPathPerRequest) {
  auto& m = demo();
  const char* texts[] = {"the little dog the little dog the little dog",
                         "once upon a time there was a time there was",
                         "she went home", "a king and his best horse and his best horse",
                         "what is the problem what is"};
  std::vector<EngineRequest> reqs;
  for (int i = 0; i < 10; ++i) {
    auto r = greedy(m.tokenizer->encode(texts[i % 5], true), 20 + 7 * i);
    r.speculative = i % 3 != 2;  // some opt out
    if (i == 4) r.sampling.n_logprobs = 3, r.logprobs = true;
    if (i == 6) r.sampling.repetition_penalty = 1.3f, r.sampling.frequency_penalty = 0.5f;
    reqs.push_back(r);
  }
  // Stops taken from the plain output: a stop string after a few tokens, and
  // an end token (ignore_eos off) where the output has one.
  const Outcome probe = run(m, reqs, config(0));
  {
    auto& s = *probe.sinks[0];
    ASSERT_GT(s.pieces.size(), 12u);
    std::string head;
    for (size_t i = 0; i < 9; ++i) head += s.pieces[i];
    EngineRequest r = reqs[0];
    r.stop = {s.text.substr(head.size() - 2, 3)};
    reqs.push_back(r);
    r = reqs[1];
    r.ignore_eos = false;
    reqs.push_back(r);
    r = reqs[3];
    r.max_tokens = 5;
    reqs.push_back(r);
    // A grammar: each row's mask follows the accepted drafts.
    auto g = grammar::parse_gbnf(R"(root ::= [a-z ]{1,60} ".")");
    ASSERT_TRUE(g) << g.status().message();
    r = reqs[0];
    r.ignore_eos = false;
    r.grammar = std::make_shared<const grammar::Grammar>(std::move(*g));
    reqs.push_back(r);
  }
  const Outcome plain = run(m, reqs, config(0));
  const Outcome spec = run(m, reqs, config(6));
  expect_same_outputs(plain, spec, "mixed");
  EXPECT_EQ(spec.sinks[10]->end.reason, EndReason::Stop);
  EXPECT_TRUE(spec.sinks.back()->error.empty()) << spec.sinks.back()->error;
  EXPECT_GT(spec.sinks.back()->tokens.size(), 3u);
  EXPECT_GT(spec.stats.spec_accepted_tokens_total, 0u);
  // Each emitted token's logprobs are its own row's.
  ASSERT_EQ(plain.sinks[4]->samples.size(), spec.sinks[4]->samples.size());
  for (size_t i = 0; i < plain.sinks[4]->samples.size(); ++i) {
    const auto& a = plain.sinks[4]->samples[i];
    const auto& b = spec.sinks[4]->samples[i];
    EXPECT_NEAR(a.logprob, b.logprob, 1e-4) << "token " << i;
    ASSERT_EQ(a.top.size(), b.top.size());
    for (size_t k = 0; k < a.top.size(); ++k) {
      EXPECT_EQ(a.top[k].token, b.top[k].token);
      EXPECT_NEAR(a.top[k].logprob, b.top[k].logprob, 1e-4);
    }
  }
  EXPECT_EQ(spec.kv.blocks_used, 0);
  // A small step budget (drafts squeezed out by the other sequences' tokens)
  // and a tiny pool (preemption) change nothing either.
  const Outcome squeezed = run(m, reqs, config(6, 12, 64));
  expect_same_outputs(plain, squeezed, "budget of 12 tokens");
  const Outcome tiny = run(m, reqs, config(6, 64, 64), 16);
  expect_same_outputs(plain, tiny, "tiny pool");
  EXPECT_EQ(tiny.kv.blocks_used, 0);
}

// A sliding-window model (gemma2: layers over 16 positions), its cache
// dropping blocks past the window: drafts written past the committed length
// and given back change nothing, alone, in a batch and in a small pool.
TEST(Speculative, SlidingWindowModelGreedyIdentical) {
  auto& m = test_support::gemma2_swa16();
  const kv::KvShape windowed = m.model->hparams().paged_kv_shape();
  auto outcome = [&](const std::vector<EngineRequest>& reqs, int32_t lookup, int32_t blocks) {
    const int64_t bytes = (int64_t)blocks * kv::PagedKvCache::tables(windowed) *
                          kv::PagedKvCache::block_bytes(windowed);
    auto kv = kv::PagedKvCache::create(windowed, {bytes, 16, true});
    EXPECT_TRUE(kv.is_ok());
    Engine e(*m.model, *m.tokenizer, **kv, config(lookup));
    e.start();
    Outcome r;
    for (const auto& q : reqs) {
      r.sinks.push_back(std::make_shared<RecordingSink>());
      EXPECT_TRUE(e.submit(q, r.sinks.back()).is_ok());
    }
    for (auto& sk : r.sinks) EXPECT_TRUE(sk->wait());
    e.stop();
    r.stats = e.stats();
    r.kv = (*kv)->stats();
    return r;
  };
  std::vector<EngineRequest> reqs;
  for (uint32_t seed = 1; seed <= 4; ++seed) {
    std::mt19937 rng(seed);
    std::vector<Token> unit(24 + 7 * seed);
    for (Token& t : unit) t = (Token)(3 + rng() % 200);
    std::vector<Token> prompt;
    for (int k = 0; k < 3; ++k) prompt.insert(prompt.end(), unit.begin(), unit.end());
    reqs.push_back(greedy(prompt, 50));
  }
  const Outcome plain = outcome(reqs, 0, 128);
  const Outcome spec = outcome(reqs, 8, 128);
  expect_same_outputs(plain, spec, "gemma2 sliding");
  EXPECT_GT(spec.stats.spec_accepted_tokens_total, 0u);
  EXPECT_EQ(spec.kv.blocks_used, 0);
  const Outcome small = outcome(reqs, 8, 20);
  expect_same_outputs(plain, small, "gemma2 sliding, small pool");
  EXPECT_EQ(small.kv.blocks_used, 0);
  for (const auto& q : reqs) {
    const Outcome a = outcome({q}, 0, 64), b = outcome({q}, 8, 64);
    expect_same_outputs(a, b, "gemma2 sliding alone");
  }
}

// Rejected drafts never reach the prefix cache: a request that reuses the
// blocks a speculative run left behind continues exactly as a fresh cache's.
TEST(Speculative, RejectedRowsNeverEnterThePrefixCache) {
  auto& m = demo();
  const auto prompt = m.tokenizer->encode("the little dog the little dog the little dog", true);
  auto kv = make_kv(*m.model, 256);
  Engine e(*m.model, *m.tokenizer, *kv, config(8));
  e.start();
  auto first = std::make_shared<RecordingSink>();
  ASSERT_TRUE(e.submit(greedy(prompt, 60), first).is_ok());
  ASSERT_TRUE(first->wait());
  // (The blocks go back in the step that sent the end.)
  EngineStats st = e.stats();
  for (int i = 0; i < 1000 && st.kv.blocks_used != 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    st = e.stats();
  }
  EXPECT_GT(st.spec_draft_tokens_total, st.spec_accepted_tokens_total);  // some rejected
  EXPECT_GT(st.spec_accepted_tokens_total, 0u);
  EXPECT_EQ(st.kv.blocks_used, 0);
  // The whole first output as the next prompt: its blocks come from the cache.
  std::vector<Token> next = prompt;
  next.insert(next.end(), first->tokens.begin(), first->tokens.end());
  auto second = std::make_shared<RecordingSink>();
  auto q = greedy(next, 20);
  q.speculative = false;
  ASSERT_TRUE(e.submit(q, second).is_ok());
  ASSERT_TRUE(second->wait());
  EXPECT_GT(second->end.cached_prompt_tokens, 32);
  e.stop();
  const Outcome fresh = run(m, {q}, config(0));
  EXPECT_EQ(second->tokens, fresh.sinks[0]->tokens);
  EXPECT_EQ(kv->stats().blocks_used, 0);
}

// Temperature > 0: the second token of each request is mostly verified
// against a draft (the prompt pairs a marker token with many tokens the
// first may be, so lookup proposes the marker), so its distribution over
// many seeds must match the plain path's (a two-sample chi-squared test at
// p = 1e-3), with top-k/top-p too.
TEST(Speculative, SampledDistributionMatchesThePlainPath) {
  auto& m = demo();
  const int32_t V = (int32_t)m.model->hparams().n_vocab;
  const Token z = m.tokenizer->encode("the", false).at(0);
  std::vector<Token> prompt = {m.tokenizer->encode("a", true).at(0)};
  for (Token t = 0; t < std::min(V, 480); ++t)
    if (!m.tokenizer->is_eog(t) && t != z) prompt.push_back(z), prompt.push_back(t);
  prompt.push_back(z), prompt.push_back(z);
  prompt.push_back(z);
  constexpr int kSeeds = 2000;
  for (int variant = 0; variant < 2; ++variant) {
    std::vector<EngineRequest> reqs;
    for (int s = 0; s < kSeeds; ++s) {
      EngineRequest r;
      r.prompt = prompt;
      r.max_tokens = 3;  // room for one draft after the first token
      r.ignore_eos = true;
      r.sampling.temperature = variant == 0 ? 1.0f : 0.9f;
      if (variant == 1) r.sampling.top_k = 40, r.sampling.top_p = 0.9f;
      r.sampling.seed = 7919ull * (uint64_t)s + 1;
      // The marker likely everywhere (the same bias on both paths): drafts
      // of it are often kept, often not.
      r.sampling.logit_bias[z] = 6.0f;
      reqs.push_back(r);
    }
    const Outcome plain = run(m, reqs, config(0), 2048);
    const Outcome spec = run(m, reqs, config(4), 2048);
    EXPECT_GT(spec.stats.spec_draft_tokens_total, (uint64_t)kSeeds / 10);
    std::printf("  V %d variant %d: drafted %llu accepted %llu\n", V, variant,
                (unsigned long long)spec.stats.spec_draft_tokens_total,
                (unsigned long long)spec.stats.spec_accepted_tokens_total);
    EXPECT_GT(spec.stats.spec_accepted_tokens_total, 0u);
    // Second (and third) tokens: counts per token, both runs.
    for (size_t pos = 1; pos < 3; ++pos) {
      std::map<Token, std::pair<double, double>> counts;
      for (int s = 0; s < kSeeds; ++s) {
        ASSERT_EQ(plain.sinks[s]->tokens.size(), 3u);
        ASSERT_EQ(spec.sinks[s]->tokens.size(), 3u);
        counts[plain.sinks[s]->tokens[pos]].first += 1;
        counts[spec.sinks[s]->tokens[pos]].second += 1;
      }
      const auto chi = test_support::chi_squared_two_sample(counts);
      ASSERT_GE(chi.bins, 2);
      EXPECT_LT(chi.stat, chi.critical)
          << "variant " << variant << " token " << pos << ": " << chi.bins << " bins";
    }
  }
}

}  // namespace
}  // namespace cairn::engine
