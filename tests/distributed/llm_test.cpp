// tests/distributed/llm_test.cpp — a GGUF LLM cut over agents, in one
// process: the Coordinator on a loopback gRPC server, four agents as
// threads (tensor parallel 2 x pipeline parallel 2) loading their shards of
// one file written here, and the worker's side as the engine drives it: a
// tables-only paged cache handing out blocks and a DistributedLlm sending
// each step. Greedy tokens and logits against the whole model in this
// process; a prefix found in the cache; a re-formed group failing the
// sequences that started before it; an agent with another model refused.
#include <gtest/gtest.h>
#include <grpcpp/grpcpp.h>

#include <cmath>
#include <filesystem>
#include <thread>

#include "distributed/agent.h"
#include "distributed/coordinator.h"
#include "distributed/distributed_llm.h"
#include "distributed/llm_step.h"
#include "kv/contiguous_kv.h"
#include "kv/kv_cache.h"
#include "modelgen/demo_model.h"
#include "modelgen/model_builder.h"
#include "test_util.h"

namespace cairn::distributed {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

std::string write_model(const fs::path& dir, const std::string& name, int64_t dim) {
  modelgen::RandomModelSpec s;
  s.dim = dim;
  s.layers = 4;
  s.heads = 4;
  s.kv_heads = 2;
  s.ffn = 2 * dim;
  s.ctx = 256;
  s.seed = 11;
  const std::string path = (dir / name).string();
  auto made = modelgen::write_random_model(s, modelgen::demo_vocab(), path);
  EXPECT_TRUE(made.is_ok()) << made.status().message();
  return path;
}

model::HParams hparams_of(const std::string& path) {
  auto f = gguf::File::open(path);
  EXPECT_TRUE(f.is_ok());
  auto hp = model::Model::read_hparams(**f);
  EXPECT_TRUE(hp.is_ok());
  return *hp;
}

// The worker: its Agents service, and the engine's view of the model.
struct Worker {
  std::shared_ptr<Coordinator> coordinator;
  std::unique_ptr<grpc::Server> server;
  std::string address;
  std::unique_ptr<kv::PagedKvCache> cache;
  std::unique_ptr<model::Model> model;
  std::vector<std::thread> agents;
  std::vector<Status> results = std::vector<Status>(8);

  Worker(const std::string& path, int ranks, int stages) {
    const model::HParams hp = hparams_of(path);
    CoordinatorOptions o;
    o.rank_size = ranks;
    o.stage_size = stages;
    o.group_timeout = 3000ms;
    o.llm_fingerprint = llm_fingerprint(hp);
    o.kv_blocks = 32;
    auto c = Coordinator::create(o);
    EXPECT_TRUE(c.is_ok()) << c.status().message();
    coordinator = std::move(*c);
    grpc::ServerBuilder sb;
    int port = 0;
    sb.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    sb.RegisterService(coordinator.get());
    server = sb.BuildAndStart();
    address = "127.0.0.1:" + std::to_string(port);
    kv::KvConfig cfg;
    cfg.pool_bytes = kv::PagedKvCache::block_bytes(hp.kv_shape()) * 32;
    cfg.tables_only = true;
    cfg.storage_generation = [c = coordinator] { return c->epoch(); };
    auto made = kv::PagedKvCache::create(hp.kv_shape(), cfg);
    EXPECT_TRUE(made.is_ok()) << made.status().message();
    cache = std::move(*made);
    model = make_distributed_llm(coordinator, hp);
  }
  ~Worker() {
    coordinator->shutdown();
    server->Shutdown(std::chrono::system_clock::now() + 2s);
    for (auto& t : agents) t.join();
  }
  void start_agent(int rank, const std::string& file, size_t slot) {
    agents.emplace_back([this, rank, file, slot] {
      AgentOptions o;
      o.distributed_address = address;
      o.rank = rank;
      o.model_file = file;
      o.threads = 1;
      o.join_timeout_s = 10;
      results[slot] = run_agent(o);
    });
  }
};

struct Whole {
  std::unique_ptr<model::Model> model;
  std::unique_ptr<kv::ContiguousKvCache> kv;
  explicit Whole(const std::string& path) {
    auto f = gguf::File::open(path);
    EXPECT_TRUE(f.is_ok());
    auto m = model::Model::load(std::shared_ptr<const gguf::File>(std::move(*f)), model::LoadOptions{1, {}});
    EXPECT_TRUE(m.is_ok()) << m.status().message();
    model = std::move(*m);
    auto k = kv::ContiguousKvCache::create(model->kv_shape(), 4, 128);
    EXPECT_TRUE(k.is_ok());
    kv = std::move(*k);
  }
};

Token argmax(std::span<const float> row) {
  return (Token)(std::max_element(row.begin(), row.end()) - row.begin());
}

// Greedy decoding of `prompt` as sequence `seq` on both sides, as the engine
// would (reserve, forward, commit); returns the largest logit difference.
double greedy_both(Worker& w, Whole& whole, SeqId seq, const std::vector<Token>& prompt, int steps,
                   std::vector<Token>* tokens) {
  const int32_t reused = w.cache->reuse_prefix(seq, prompt);
  model::Batch bw, bd;
  for (size_t i = 0; i < prompt.size(); ++i) bw.add(prompt[i], (int32_t)i, seq, i + 1 == prompt.size());
  for (size_t i = (size_t)reused; i < prompt.size(); ++i) bd.add(prompt[i], (int32_t)i, seq, i + 1 == prompt.size());
  EXPECT_TRUE(w.cache->reserve(seq, (int32_t)bd.size()));
  double worst = 0;
  int32_t pos = (int32_t)prompt.size();
  std::vector<Token> committed(prompt.begin() + reused, prompt.end());
  for (int s = 0; s < steps; ++s) {
    model::Logits lw, ld;
    Status a = whole.model->forward(bw, *whole.kv, lw);
    Status b = w.model->forward(bd, *w.cache, ld);
    EXPECT_TRUE(a.is_ok()) << a.message();
    EXPECT_TRUE(b.is_ok()) << b.message();
    if (!a.is_ok() || !b.is_ok() || ld.rows() != 1) return INFINITY;
    w.cache->commit(seq, committed);
    for (size_t i = 0; i < lw.row(0).size(); ++i)
      worst = std::max(worst, (double)std::fabs(lw.row(0)[i] - ld.row(0)[i]));
    const Token next = argmax(ld.row(0));
    tokens->push_back(next);
    EXPECT_EQ(next, argmax(lw.row(0))) << "step " << s;
    bw.clear();
    bd.clear();
    bw.add(next, pos, seq, true);
    bd.add(next, pos, seq, true);
    ++pos;
    committed = {next};
    EXPECT_TRUE(w.cache->reserve(seq, 1));
  }
  return worst;
}

TEST(DistributedLlm, TwoByTwoAgentsGiveTheWholeModelsTokens) {
  const fs::path dir = test::temp_dir("dllm");
  const std::string path = write_model(dir, "m.gguf", 128);
  Worker w(path, 4, 2);
  for (int r = 0; r < 4; ++r) w.start_agent(r, path, (size_t)r);
  ASSERT_TRUE(w.coordinator->wait_ready(60s).is_ok()) << w.coordinator->state();
  Whole whole(path);
  std::vector<Token> prompt;
  for (int i = 0; i < 37; ++i) prompt.push_back((Token)(3 + (i * 7) % 250));
  std::vector<Token> got;
  const double worst = greedy_both(w, whole, 1, prompt, 8, &got);
  EXPECT_LT(worst, 1e-3);
  // The same prompt again: its two full blocks come from the prefix index,
  // the agents read the rows they wrote for sequence 1.
  std::vector<Token> again;
  EXPECT_LT(greedy_both(w, whole, 2, prompt, 4, &again), 1e-3);
  EXPECT_EQ(w.cache->stats().prefix_hits, 32u);
  EXPECT_EQ(std::vector<Token>(got.begin(), got.begin() + 4), again);
  // Two sequences in one step: one micro-batch per stage, sent together;
  // each row's logits are the whole model's for that sequence.
  model::Batch both;
  for (int i = 0; i < 9; ++i) both.add((Token)(40 + i), i, 3, i == 8);
  for (int i = 0; i < 5; ++i) both.add((Token)(90 + i), i, 4, i == 4);
  ASSERT_TRUE(w.cache->reserve(3, 9));
  ASSERT_TRUE(w.cache->reserve(4, 5));
  model::Logits ld, l3, l4;
  ASSERT_TRUE(w.model->forward(both, *w.cache, ld).is_ok());
  model::Batch b3, b4;
  for (int i = 0; i < 9; ++i) b3.add((Token)(40 + i), i, 3, i == 8);
  for (int i = 0; i < 5; ++i) b4.add((Token)(90 + i), i, 0, i == 4);
  ASSERT_TRUE(whole.model->forward(b3, *whole.kv, l3).is_ok());
  ASSERT_TRUE(whole.model->forward(b4, *whole.kv, l4).is_ok());
  ASSERT_EQ(ld.rows(), 2u);
  EXPECT_EQ(ld.batch_index, (std::vector<int32_t>{8, 13}));
  for (size_t i = 0; i < l3.row(0).size(); ++i) {
    EXPECT_NEAR(ld.row(0)[i], l3.row(0)[i], 1e-3);
    EXPECT_NEAR(ld.row(1)[i], l4.row(0)[i], 1e-3);
  }
  const RunStats st = w.coordinator->stats();
  EXPECT_EQ(st.forwards, 14u);
  EXPECT_GT(st.agent_comm_bytes, 0u);
  EXPECT_GT(st.agent_comm_ns, 0u);
}

TEST(DistributedLlm, SequencesFromBeforeAReformFail) {
  const fs::path dir = test::temp_dir("dllm_reform");
  const std::string path = write_model(dir, "m.gguf", 64);
  Worker w(path, 2, 1);
  for (int r = 0; r < 2; ++r) w.start_agent(r, path, (size_t)r);
  ASSERT_TRUE(w.coordinator->wait_ready(60s).is_ok()) << w.coordinator->state();
  std::vector<Token> prompt;
  for (int i = 0; i < 20; ++i) prompt.push_back((Token)(5 + i));
  model::Batch b;
  for (int i = 0; i < 20; ++i) b.add(prompt[(size_t)i], i, 7, i == 19);
  ASSERT_TRUE(w.cache->reserve(7, 20));
  model::Logits out;
  ASSERT_TRUE(w.model->forward(b, *w.cache, out).is_ok());
  w.cache->commit(7, prompt);
  // A step the agents cannot read fails on every rank, and the group
  // re-forms (the ranks may have stopped at different collectives).
  const uint64_t before = w.coordinator->epoch();
  auto broken = w.coordinator->run({});
  ASSERT_FALSE(broken.is_ok());
  EXPECT_NE(broken.status().message().find("a step has"), std::string::npos) << broken.status().message();
  ASSERT_TRUE(w.coordinator->wait_ready(30s).is_ok());
  EXPECT_GT(w.coordinator->epoch(), before);
  // Sequence 7's rows were in the old group's agents: its next step fails.
  model::Batch next;
  next.add(42, 20, 7, true);
  ASSERT_TRUE(w.cache->reserve(7, 1));
  Status st = w.model->forward(next, *w.cache, out);
  EXPECT_EQ(st.code(), StatusCode::Unavailable);
  EXPECT_NE(st.message().find("re-formed since sequence 7 started"), std::string::npos) << st.message();
  w.cache->release(7);
  // Its prompt's full block is no longer found; a new sequence runs.
  EXPECT_EQ(w.cache->reuse_prefix(8, prompt), 0);
  ASSERT_TRUE(w.cache->reserve(8, 20));
  for (auto& s : b.seqs) s = 8;
  EXPECT_TRUE(w.model->forward(b, *w.cache, out).is_ok());
}

TEST(DistributedLlm, AnAgentWithAnotherModelIsRefused) {
  const fs::path dir = test::temp_dir("dllm_refuse");
  const std::string path = write_model(dir, "m.gguf", 64);
  const std::string other = write_model(dir, "other.gguf", 128);
  Worker w(path, 2, 1);
  w.start_agent(0, other, 0);
  w.agents.back().join();
  w.agents.pop_back();
  EXPECT_FALSE(w.results[0].is_ok());
  EXPECT_NE(w.results[0].message().find("this servable's is llama"), std::string::npos) << w.results[0].message();
}

}  // namespace
}  // namespace cairn::distributed
