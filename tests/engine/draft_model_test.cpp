// Speculative decoding with a draft model (engine/draft_model.h): greedy
// output token for token the plain path's on every golden model of
// stories260K's vocabulary (alone, batched, mixed with opted-out requests),
// the token distribution at temperature > 0 unchanged, a draft of another
// vocabulary refused at load, a draft K/V pool that runs out costing drafts
// only, and the draft's K/V given back when sequences end or are cancelled.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "engine/draft_model.h"
#include "engine_test_util.h"

namespace cairn::engine {
namespace {

using model::LoadedModel;
using test_support::demo;
using test_support::greedy;
using test_support::make_kv;
using test_support::RecordingSink;

struct Outcome {
  std::vector<std::shared_ptr<RecordingSink>> sinks;
  EngineStats stats;
  kv::KvStats kv;
  kv::KvStats draft_kv;
  size_t draft_tracked = 0;
};

// The draft model's config; `draft` null: the plain path (or lookup alone).
EngineConfig config(model::Model* draft, int32_t draft_max = 8, int64_t draft_pool = 0,
                    int32_t lookup = 0, float p_min = 0) {
  EngineConfig c;
  c.max_batch_tokens = 64;
  c.max_seqs = 64;
  c.spec_lookup_max = lookup;
  if (draft) {
    DraftModelConfig dc;
    dc.n_ctx = 4096;
    dc.max_seqs = 64;
    dc.pool_bytes = draft_pool;
    dc.p_min = p_min;
    auto made = DraftModel::create(*draft, dc);
    EXPECT_TRUE(made.is_ok()) << made.status().message();
    if (made.is_ok()) c.draft_model = std::move(*made);
    c.spec_draft_max = draft_max;
  }
  return c;
}

// Runs `reqs` at once on a fresh engine and cache; returns when all ended.
Outcome run(LoadedModel& m, const std::vector<EngineRequest>& reqs, EngineConfig cfg,
            int32_t blocks = 512) {
  auto kv = make_kv(*m.model, blocks);
  auto draft = std::dynamic_pointer_cast<DraftModel>(cfg.draft_model);
  Engine e(*m.model, *m.tokenizer, *kv, cfg);
  e.start();
  Outcome r;
  for (const auto& q : reqs) {
    r.sinks.push_back(std::make_shared<RecordingSink>());
    auto id = e.submit(q, r.sinks.back());
    EXPECT_TRUE(id.is_ok()) << id.status().message();
    if (!id.is_ok()) r.sinks.pop_back();
  }
  // (Thousands of requests on a loaded 2-core host: minutes, not a hang.)
  for (auto& s : r.sinks) EXPECT_TRUE(s->wait(900));
  e.stop();
  r.stats = e.stats();
  r.kv = kv->stats();
  if (draft) r.draft_kv = draft->kv().stats(), r.draft_tracked = draft->tracked();
  return r;
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
  }
}

LoadedModel load_shared(const std::string& name) {
  auto path = *test::shared_dir() / "models" / (name + ".gguf");
  auto loaded = model::load_model(path.string(), model::LoadOptions{2, {}});
  EXPECT_TRUE(loaded.is_ok()) << name << ": " << loaded.status().message();
  return loaded.is_ok() ? std::move(*loaded) : LoadedModel{};
}

// Every golden model of stories260K's vocabulary, with stories260K as the
// draft: greedy output identical alone and all at once, with every other
// request opted out in a second batch; the draft's K/V all given back.
// stories260K drafting for itself is accepted (nearly) always.
TEST(DraftModelGolden, GreedyOutputIdenticalOnEveryGoldenModel) {
  CAIRN_REQUIRE_SHARED("models/stories260K.gguf");
  const auto shared = *test::shared_dir();
  LoadedModel draft = load_shared("stories260K");
  ASSERT_TRUE(draft.model);
  int models = 0;
  for (const auto& entry : std::filesystem::directory_iterator(shared / "golden")) {
    const std::string name = entry.path().stem().string();
    const auto gguf = shared / "models" / (name + ".gguf");
    if (entry.path().extension() != ".json" || !std::filesystem::exists(gguf)) continue;
    LoadedModel target = load_shared(name);
    ASSERT_TRUE(target.model);
    if (!check_same_vocabulary(*target.tokenizer, target.model->hparams().n_vocab,
                               *draft.tokenizer, draft.model->hparams().n_vocab)
             .is_ok())
      continue;  // another vocabulary: stories260K cannot draft for it
    std::ifstream f(entry.path());
    auto doc = nlohmann::json::parse(f);
    std::vector<EngineRequest> reqs;
    for (const auto& c : doc["cases"])
      reqs.push_back(greedy(c["prompt_tokens"].get<std::vector<Token>>(),
                            std::min(c["n_predict"].get<int32_t>(), 64), false));
    const Outcome plain = run(target, reqs, config(nullptr));
    const Outcome spec = run(target, reqs, config(draft.model.get()));
    expect_same_outputs(plain, spec, name + " batched");
    EXPECT_GT(spec.stats.spec_draft_tokens_total, 0u) << name;
    EXPECT_EQ(spec.kv.blocks_used, 0) << name;
    EXPECT_EQ(spec.draft_kv.blocks_used, 0) << name;
    EXPECT_EQ(spec.draft_tracked, 0u) << name;
    std::vector<EngineRequest> mixed = reqs;
    for (size_t i = 0; i < mixed.size(); i += 2) mixed[i].speculative = false;
    const Outcome mix = run(target, mixed, config(draft.model.get(), 4));
    expect_same_outputs(plain, mix, name + " mixed");
    uint64_t drafted = spec.stats.spec_draft_tokens_total;
    uint64_t accepted = spec.stats.spec_accepted_tokens_total;
    for (size_t i = 0; i < reqs.size(); ++i) {
      const Outcome one = run(target, {reqs[i]}, config(draft.model.get()));
      const Outcome plain_one = run(target, {reqs[i]}, config(nullptr));
      expect_same_outputs(plain_one, one, name + " alone");
      drafted += one.stats.spec_draft_tokens_total;
      accepted += one.stats.spec_accepted_tokens_total;
    }
    if (name == "stories260K") {
      EXPECT_GT((double)accepted, 0.9 * (double)drafted) << "a model drafting for itself";
      // The golden continuations themselves.
      size_t i = 0;
      for (const auto& c : doc["cases"]) {
        auto want = c["tokens"].get<std::vector<Token>>();
        if ((int32_t)want.size() > 64) want.resize(64);
        auto got = spec.sinks[i++]->tokens;
        got.resize(std::min(got.size(), want.size()));
        EXPECT_EQ(got, want) << "golden case " << i - 1;
      }
    }
    ++models;
    std::printf("  %-24s %2zu requests, drafted %5llu accepted %5llu\n", name.c_str(),
                reqs.size(), (unsigned long long)drafted, (unsigned long long)accepted);
  }
  EXPECT_GT(models, 1);
}

// A draft of another vocabulary (aidreams260K's 512 tokens are not
// stories260K's) is refused at load, naming the first differing token.
TEST(DraftModel, OtherVocabularyRefusedAtLoad) {
  CAIRN_REQUIRE_SHARED("models/aidreams260K.gguf");
  const auto shared = *test::shared_dir();
  for (const char* target_name : {"stories260K", "syn-llama-gqa-f32"}) {
    if (!std::filesystem::exists(shared / "models" / (std::string(target_name) + ".gguf")))
      continue;
    LoadedModel target = load_shared(target_name);
    ASSERT_TRUE(target.model);
    auto d = DraftModel::load((shared / "models" / "aidreams260K.gguf").string(), 2,
                              *target.tokenizer, target.model->hparams().n_vocab, {});
    ASSERT_FALSE(d.is_ok()) << target_name;
    EXPECT_NE(d.status().message().find("vocabulary differs"), std::string::npos)
        << d.status().message();
    EXPECT_NE(d.status().message().find("token "), std::string::npos) << d.status().message();
    // The same file as target and draft is accepted.
    auto same = DraftModel::load((shared / "models" / (std::string(target_name) + ".gguf")).string(),
                                 2, *target.tokenizer, target.model->hparams().n_vocab, {});
    EXPECT_TRUE(same.is_ok()) << same.status().message();
  }
}

// The demo model's vocabulary: a gemma2 of the same vocabulary drafts
// (random weights: a poor draft), the demo model for itself (a good one).
std::vector<EngineRequest> demo_requests(LoadedModel& m, int n) {
  const char* texts[] = {"the little dog", "once upon a time there was", "she went home",
                         "a king and his best horse", "what is the problem"};
  std::vector<EngineRequest> reqs;
  for (int i = 0; i < n; ++i) reqs.push_back(greedy(m.tokenizer->encode(texts[i % 5], true), 20 + 5 * i));
  return reqs;
}

TEST(DraftModel, MixedBatchWithLookupAndOptOutsEqualsThePlainPath) {
  auto& m = demo();
  auto& other = test_support::gemma2_swa16();
  auto reqs = demo_requests(m, 10);
  for (size_t i = 0; i < reqs.size(); i += 3) reqs[i].speculative = false;
  reqs[4].sampling.repetition_penalty = 1.3f;
  reqs[5].sampling.n_logprobs = 2, reqs[5].logprobs = true;
  const Outcome plain = run(m, reqs, config(nullptr));
  for (model::Model* d : {m.model.get(), other.model.get()}) {
    const Outcome spec = run(m, reqs, config(d));
    expect_same_outputs(plain, spec, "draft model");
    const Outcome both = run(m, reqs, config(d, 6, 0, 4));
    expect_same_outputs(plain, both, "draft model and lookup");
    EXPECT_GT(spec.stats.spec_draft_tokens_total, 0u);
    EXPECT_LE(spec.stats.spec_accepted_tokens_total, spec.stats.spec_draft_tokens_total);
    EXPECT_EQ(spec.draft_kv.blocks_used, 0);
    EXPECT_EQ(both.draft_kv.blocks_used, 0);
    if (d == m.model.get()) {  // a model drafting for itself: kept nearly always
      EXPECT_GT((double)spec.stats.spec_accepted_tokens_total,
                0.9 * (double)spec.stats.spec_draft_tokens_total);
    }
  }
}

// A draft pool of kMinBlocks blocks (64 positions) for ten sequences: most
// find no room and propose nothing; output and errors are the plain path's.
TEST(DraftModel, ExhaustedDraftPoolOnlyCostsDrafts) {
  auto& m = demo();
  const auto reqs = demo_requests(m, 10);
  const int64_t tiny = kv::kMinBlocks * kv::PagedKvCache::block_bytes(m.model->kv_shape());
  const Outcome plain = run(m, reqs, config(nullptr));
  const Outcome spec = run(m, reqs, config(m.model.get(), 8, tiny));
  expect_same_outputs(plain, spec, "tiny draft pool");
  EXPECT_EQ(spec.draft_kv.blocks_total, kv::kMinBlocks);
  EXPECT_EQ(spec.draft_kv.blocks_used, 0);
  EXPECT_GT(spec.stats.spec_draft_tokens_total, 0u);  // the short ones still fit
}

// p_min: a draft stops at a token below it (1: never drafts), output unchanged.
TEST(DraftModel, MinimumProbabilityShortensDrafts) {
  auto& m = demo();
  const auto reqs = demo_requests(m, 6);
  const Outcome plain = run(m, reqs, config(nullptr));
  const Outcome none = run(m, reqs, config(m.model.get(), 8, 0, 0, 1.0f));
  expect_same_outputs(plain, none, "p_min 1");
  EXPECT_EQ(none.stats.spec_draft_tokens_total, 0u);
  EXPECT_EQ(none.draft_kv.blocks_used, 0);
  const Outcome low = run(m, reqs, config(m.model.get(), 8, 0, 0, 1e-6f));
  expect_same_outputs(plain, low, "p_min 1e-6");
  EXPECT_GT(low.stats.spec_draft_tokens_total, 0u);
}

// Cancelled, stopped and finished sequences give the draft's K/V back.
TEST(DraftModel, EndedAndCancelledSequencesReleaseDraftRows) {
  auto& m = demo();
  auto kv = make_kv(*m.model, 256);
  EngineConfig cfg = config(m.model.get());
  auto draft = std::dynamic_pointer_cast<DraftModel>(cfg.draft_model);
  ASSERT_TRUE(draft);
  Engine e(*m.model, *m.tokenizer, *kv, cfg);
  auto prompt = m.tokenizer->encode("once upon a time", true);
  auto a = std::make_shared<RecordingSink>(), b = std::make_shared<RecordingSink>();
  auto id_a = e.submit(greedy(prompt, -1), a);
  ASSERT_TRUE(id_a.is_ok()) << id_a.status().message();
  ASSERT_TRUE(e.submit(greedy(prompt, 12), b).is_ok());
  // Stepped on this thread: the draft's state is read between steps.
  for (int i = 0; i < 200 && b->ends == 0; ++i) e.step();
  ASSERT_EQ(b->ends, 1);
  EXPECT_EQ(draft->tracked(), 1u);  // a's
  EXPECT_GT(draft->kv().stats().blocks_used, 0);
  e.cancel(*id_a);
  e.step();
  EXPECT_EQ(a->end.reason, EndReason::Cancelled);
  EXPECT_EQ(draft->tracked(), 0u);
  EXPECT_EQ(draft->kv().stats().blocks_used, 0);
  // A sequence left running when the engine stops.
  auto c = std::make_shared<RecordingSink>();
  ASSERT_TRUE(e.submit(greedy(prompt, -1), c).is_ok());
  for (int i = 0; i < 5; ++i) e.step();
  EXPECT_EQ(draft->tracked(), 1u);
  e.stop();
  EXPECT_FALSE(c->error.empty());
  EXPECT_EQ(draft->tracked(), 0u);
  EXPECT_EQ(draft->kv().stats().blocks_used, 0);
  EXPECT_GT(e.stats().spec_draft_tokens_total, 0u);
  EXPECT_GT(e.stats().spec_accepted_tokens_total, 0u);
}

// Temperature > 0: tokens 2-4 of each request are verified against the
// draft's greedy guesses; over many seeds their distribution must match the
// plain path's (a two-sample chi-squared test at p = 1e-3), plain and with
// top-k/top-p and penalties, for a draft often kept (the model itself) and
// one almost never kept (gemma2: the residual distribution alone).
TEST(DraftModel, SampledDistributionMatchesThePlainPath) {
  auto& m = demo();
  auto& other = test_support::gemma2_swa16();
  const auto prompt = m.tokenizer->encode("once upon a time there was a", true);
  constexpr int kSeeds = 1500;
  for (int variant = 0; variant < 2; ++variant) {
    std::vector<EngineRequest> reqs;
    for (int s = 0; s < kSeeds; ++s) {
      EngineRequest r;
      r.prompt = prompt;
      r.max_tokens = 4;
      r.ignore_eos = true;
      // Cool enough that the draft's argmax is often kept (the demo
      // model's random weights give flat distributions at 1.0).
      r.sampling.temperature = variant == 0 ? 0.15f : 0.3f;
      if (variant == 1)
        r.sampling.top_k = 40, r.sampling.top_p = 0.9f, r.sampling.repetition_penalty = 1.2f;
      r.sampling.seed = 7919ull * (uint64_t)s + 13;
      reqs.push_back(r);
    }
    const Outcome plain = run(m, reqs, config(nullptr), 2048);
    for (model::Model* d : {m.model.get(), other.model.get()}) {
      if (variant == 1 && d == other.model.get()) continue;  // (the test's time)
      const Outcome spec = run(m, reqs, config(d, 3), 2048);
      std::printf("  variant %d draft %s: drafted %llu accepted %llu\n", variant,
                  d == m.model.get() ? "self" : "gemma2",
                  (unsigned long long)spec.stats.spec_draft_tokens_total,
                  (unsigned long long)spec.stats.spec_accepted_tokens_total);
      EXPECT_GT(spec.stats.spec_draft_tokens_total, (uint64_t)kSeeds);
      EXPECT_EQ(spec.draft_kv.blocks_used, 0);
      for (size_t pos = 1; pos < 4; ++pos) {
        std::map<Token, std::pair<double, double>> counts;
        for (int s = 0; s < kSeeds; ++s) {
          ASSERT_EQ(plain.sinks[s]->tokens.size(), 4u);
          ASSERT_EQ(spec.sinks[s]->tokens.size(), 4u);
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
}

}  // namespace
}  // namespace cairn::engine
