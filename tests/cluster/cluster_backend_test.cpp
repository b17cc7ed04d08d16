// tests/cluster/cluster_backend_test.cpp — ClusterBackend over fake workers: dispatch, retry, relay.
#include "cluster/cluster_backend.h"

#include <gtest/gtest.h>

#include <atomic>
#include <map>
#include <mutex>
#include <thread>

#include "serving_test_util.h"

namespace cairn::cluster {
namespace {

// The tests drive fake workers from this thread, so no waits are needed.
using cairn::test::RecordingEmbedSink;
using cairn::test::RecordingSink;

// A worker whose requests the test finishes by hand.
class FakeWorker final : public serving::Backend {
 public:
  std::map<serving::RequestId, std::shared_ptr<serving::EventSink>> live;
  std::vector<serving::RequestId> cancelled;
  std::optional<Status> refuse;  // submit answers this instead
  std::function<void()> on_broken;
  int submits = 0;
  std::map<serving::RequestId, serving::GenerateRequest> reqs;  // every accepted request
  std::function<void(serving::RequestId)> during_submit;  // runs before submit returns

  Result<serving::RequestId> submit(serving::GenerateRequest req,
                                    std::shared_ptr<serving::EventSink> sink) override {
    ++submits;
    if (refuse) return *refuse;
    const serving::RequestId id = next_++;
    live[id] = std::move(sink);
    reqs[id] = std::move(req);
    if (during_submit) during_submit(id);
    return id;
  }
  Result<serving::RequestId> embed(serving::EmbedRequest req,
                                   std::shared_ptr<serving::EmbedSink> sink) override {
    ++submits;
    if (refuse) return *refuse;
    const serving::RequestId id = next_++;
    embeds[id] = {std::move(req), std::move(sink)};
    return id;
  }
  using Embed = std::pair<serving::EmbedRequest, std::shared_ptr<serving::EmbedSink>>;
  std::map<serving::RequestId, Embed> embeds;
  void cancel(serving::RequestId id) override { cancelled.push_back(id); }
  std::vector<serving::ModelInfo> models() const override { return {}; }
  serving::Health health() const override { return {}; }
  serving::BackendStats stats() const override { return {}; }
  Result<std::vector<serving::Token>> tokenize(const std::string&, const std::string& text, bool,
                                               bool = true) const override {
    return std::vector<serving::Token>(text.size(), 7);
  }
  Result<std::string> detokenize(const std::string&,
                                 const std::vector<serving::Token>& t) const override {
    return std::string(t.size(), 'z');
  }
  void start_draining() override {}

  // Helpers that play the worker's side of one request.
  std::shared_ptr<serving::EventSink> take_one() {
    EXPECT_FALSE(live.empty());
    auto it = live.begin();
    auto sink = it->second;
    live.erase(it);
    return sink;
  }
  void token(serving::EventSink& s, const std::string& text) {
    serving::TokenEvent ev{1, text, 0, {}};
    s.on_token(ev);
  }
  void finish(serving::EventSink& s) {
    serving::FinishEvent f;
    f.reason = "stop";
    s.on_finish(f);
  }
  void token_id(serving::EventSink& s, serving::Token id, const std::string& text) {
    serving::TokenEvent ev{id, text, 0, {}};
    s.on_token(ev);
  }
  // The prefill worker's end: its first token went out, the rows too (or not).
  void handoff(serving::EventSink& s, int32_t cached, const std::string& error = "") {
    serving::FinishEvent f;
    f.reason = "handoff";
    f.usage.prompt_tokens = 4;
    f.usage.completion_tokens = 1;
    f.usage.cached_prompt_tokens = cached;
    f.handoff_error = error;
    s.on_finish(f);
  }
  // The one live request's GenerateRequest (the test checks there is one).
  const serving::GenerateRequest& live_req() {
    EXPECT_EQ(live.size(), 1u);
    return reqs.at(live.begin()->first);
  }

 private:
  serving::RequestId next_ = 100;
};

v1::WorkerStatus ready(const std::string& model = "m", int queue = 0) {
  v1::WorkerStatus st;
  st.set_state(v1::WorkerStatus::READY);
  auto* m = st.add_models();
  m->set_id(model);
  m->set_n_ctx(512);
  st.set_queue_length(queue);
  st.set_running(1);
  st.set_kv_blocks_used(3);
  st.set_kv_blocks_total(10);
  st.set_requests_total(5);
  st.set_prefix_cache_hits(11);
  return st;
}

v1::WorkerStatus embeddings_only(const std::string& model = "m") {
  v1::WorkerStatus st = ready(model);
  st.mutable_models(0)->set_embeddings_only(true);
  st.mutable_models(0)->set_pooling("cls");
  return st;
}

serving::EmbedRequest embed_request(const std::string& model = "") {
  serving::EmbedRequest r;
  r.model = model;
  r.inputs = {std::string("hello"), std::vector<serving::Token>{1, 2}};
  return r;
}

struct Cluster {
  Registry registry;
  std::map<std::string, std::shared_ptr<FakeWorker>> by_address;
  std::unique_ptr<ClusterBackend> backend;

  explicit Cluster(ClusterOptions opt = {}) {
    backend = std::make_unique<ClusterBackend>(
        registry, opt, [this](const WorkerView& w, std::function<void()> on_broken) {
          auto& fake = by_address[w.address];
          if (!fake) fake = std::make_shared<FakeWorker>();
          fake->on_broken = std::move(on_broken);
          return fake;
        });
  }
  std::string add(const std::string& address, v1::WorkerStatus st = ready()) {
    auto id = registry.register_worker(address, address, st);
    EXPECT_TRUE(id.is_ok());
    by_address.emplace(address, std::make_shared<FakeWorker>());
    return *id;
  }
  FakeWorker& at(const std::string& address) { return *by_address.at(address); }
};

serving::GenerateRequest request(const std::string& prompt = "hello",
                                 const std::string& model = "") {
  serving::GenerateRequest r;
  r.model = model;
  r.prompt = prompt;
  return r;
}

TEST(ClusterBackend, NoWorkersMeansUnavailableAndLoading) {
  Cluster c;
  auto sink = std::make_shared<RecordingSink>();
  auto res = c.backend->submit(request(), sink);
  ASSERT_FALSE(res.is_ok());
  EXPECT_EQ(res.status().code(), StatusCode::Unavailable);
  EXPECT_EQ(c.backend->health().state, serving::HealthState::Loading);
  EXPECT_TRUE(c.backend->models().empty());
  EXPECT_EQ(sink->ends, 0);  // a refused submit sends no events
}

TEST(ClusterBackend, UnknownModelIsNotFound) {
  Cluster c;
  c.add("h:1");
  auto res = c.backend->submit(request("x", "nope"), std::make_shared<RecordingSink>());
  ASSERT_FALSE(res.is_ok());
  EXPECT_EQ(res.status().code(), StatusCode::NotFound);
  EXPECT_EQ(res.status().param(), "model");
}

TEST(ClusterBackend, ForwardsEventsAndCountsPerWorker) {
  Cluster c;
  const std::string id = c.add("h:1");
  auto sink = std::make_shared<RecordingSink>();
  auto res = c.backend->submit(request("hi", "m"), sink);
  ASSERT_TRUE(res.is_ok());
  EXPECT_EQ(c.backend->in_flight(), 1);
  EXPECT_EQ(c.registry.list()[0].outstanding, 1);
  auto& w = c.at("h:1");
  auto s = w.take_one();
  w.token(*s, "Once");
  w.token(*s, " upon");
  w.finish(*s);
  EXPECT_EQ(sink->text, "Once upon");
  ASSERT_EQ(sink->finishes.size(), 1u);
  EXPECT_TRUE(sink->errors.empty());
  EXPECT_EQ(c.backend->in_flight(), 0);
  auto view = c.registry.list()[0];
  EXPECT_EQ(view.outstanding, 0);
  EXPECT_EQ(view.routed_total, 1u);
  // Late events from a misbehaving worker never reach the client twice.
  w.finish(*s);
  EXPECT_EQ(sink->finishes.size(), 1u);
}

TEST(ClusterBackend, ShortestQueueSpreadsConcurrentRequests) {
  Cluster c;
  c.add("h:1");
  c.add("h:2");
  std::vector<std::shared_ptr<RecordingSink>> sinks;
  for (int i = 0; i < 10; ++i) {
    sinks.push_back(std::make_shared<RecordingSink>());
    ASSERT_TRUE((c.backend->submit(request(), sinks.back())).is_ok());
  }
  EXPECT_EQ(c.at("h:1").live.size(), 5u);
  EXPECT_EQ(c.at("h:2").live.size(), 5u);
}

TEST(ClusterBackend, RetriesOnAnotherWorkerWhenTheFirstFailsBeforeAnyToken) {
  Cluster c;
  const std::string id1 = c.add("h:1");
  c.add("h:2");
  ClusterOptions unused;
  (void)unused;
  auto sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE(c.backend->submit(request(), sink).is_ok());
  FakeWorker* first = c.at("h:1").live.empty() ? &c.at("h:2") : &c.at("h:1");
  FakeWorker* second = first == &c.at("h:1") ? &c.at("h:2") : &c.at("h:1");
  auto s = first->take_one();
  first->on_broken();  // the stream broke: the worker is dropped at once
  s->on_error(Status::error(StatusCode::Unavailable, "socket closed"));
  EXPECT_EQ(sink->ends, 0) << "the client must not notice";
  EXPECT_EQ(c.registry.list().size(), 1u);
  ASSERT_EQ(second->live.size(), 1u);
  auto s2 = second->take_one();
  second->token(*s2, "ok");
  second->finish(*s2);
  EXPECT_EQ(sink->text, "ok");
  EXPECT_EQ(sink->finishes.size(), 1u);
  EXPECT_EQ(c.backend->in_flight(), 0);
  (void)id1;
}

TEST(ClusterBackend, ErrorAfterATokenReachesTheClient) {
  Cluster c;
  c.add("h:1");
  c.add("h:2");
  auto sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE(c.backend->submit(request(), sink).is_ok());
  FakeWorker* w = c.at("h:1").live.empty() ? &c.at("h:2") : &c.at("h:1");
  auto s = w->take_one();
  w->token(*s, "Once");
  s->on_error(Status::error(StatusCode::Unavailable, "socket closed"));
  ASSERT_EQ(sink->errors.size(), 1u);
  EXPECT_EQ(sink->errors[0].code(), StatusCode::Unavailable);
  EXPECT_NE(sink->errors[0].message().find("socket closed"), std::string::npos);
  EXPECT_EQ(c.at("h:1").submits + c.at("h:2").submits, 1);  // no retry after a token
  EXPECT_EQ(c.backend->in_flight(), 0);
}

TEST(ClusterBackend, InvalidRequestErrorsAreNotRetried) {
  Cluster c;
  c.add("h:1");
  c.add("h:2");
  auto sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE(c.backend->submit(request(), sink).is_ok());
  FakeWorker* w = c.at("h:1").live.empty() ? &c.at("h:2") : &c.at("h:1");
  w->take_one()->on_error(
      Status::error(StatusCode::InvalidArgument, "max_tokens too large", "max_tokens"));
  ASSERT_EQ(sink->errors.size(), 1u);
  EXPECT_EQ(sink->errors[0].code(), StatusCode::InvalidArgument);
  EXPECT_EQ(sink->errors[0].param(), "max_tokens");
  EXPECT_EQ(c.registry.list().size(), 2u);
}

TEST(ClusterBackend, AttemptsAreBounded) {
  ClusterOptions opt;
  opt.max_attempts = 2;
  Cluster c(opt);
  c.add("h:1");
  c.add("h:2");
  c.add("h:3");
  auto sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE(c.backend->submit(request(), sink).is_ok());
  for (int attempt = 0; attempt < 2; ++attempt) {
    FakeWorker* w = nullptr;
    for (auto& [addr, fake] : c.by_address)
      if (!fake->live.empty()) w = fake.get();
    ASSERT_NE(w, nullptr) << "attempt " << attempt;
    w->take_one()->on_error(
        Status::error(StatusCode::Unavailable, "busy " + std::to_string(attempt)));
  }
  ASSERT_EQ(sink->errors.size(), 1u);
  EXPECT_EQ(sink->errors[0].message(), "busy 1");
  int submits = 0;
  for (auto& [addr, fake] : c.by_address) submits += fake->submits;
  EXPECT_EQ(submits, 2);
}

TEST(ClusterBackend, SynchronousRefusalTriesTheNextWorker) {
  Cluster c;
  c.add("h:1");
  c.add("h:2");
  c.at("h:1").refuse = Status::error(StatusCode::Unavailable, "queue full");
  c.at("h:2").refuse = Status::error(StatusCode::Unavailable, "queue full");
  auto res = c.backend->submit(request(), std::make_shared<RecordingSink>());
  ASSERT_FALSE(res.is_ok());
  EXPECT_EQ(res.status().message(), "queue full");
  c.at("h:2").refuse.reset();
  auto ok = c.backend->submit(request(), std::make_shared<RecordingSink>());
  EXPECT_TRUE(ok.is_ok());
  EXPECT_EQ(c.at("h:2").live.size(), 1u);
  EXPECT_EQ(c.backend->in_flight(), 1);
  for (auto& v : c.registry.list()) EXPECT_EQ(v.outstanding, v.address == "h:2" ? 1 : 0);
}

TEST(ClusterBackend, QueueLimitGivesUnavailable) {
  ClusterOptions opt;
  opt.max_queue = 2;
  Cluster c(opt);
  c.add("h:1");
  EXPECT_TRUE((c.backend->submit(request(), std::make_shared<RecordingSink>())).is_ok());
  EXPECT_TRUE((c.backend->submit(request(), std::make_shared<RecordingSink>())).is_ok());
  auto res = c.backend->submit(request(), std::make_shared<RecordingSink>());
  ASSERT_FALSE(res.is_ok());
  EXPECT_EQ(res.status().code(), StatusCode::Unavailable);
  auto& w = c.at("h:1");
  w.finish(*w.take_one());
  EXPECT_TRUE((c.backend->submit(request(), std::make_shared<RecordingSink>())).is_ok());
}

TEST(ClusterBackend, CancelReachesTheWorker) {
  Cluster c;
  c.add("h:1");
  auto res = c.backend->submit(request(), std::make_shared<RecordingSink>());
  ASSERT_TRUE(res.is_ok());
  c.backend->cancel(*res);
  c.backend->cancel(*res);
  c.backend->cancel(999999);  // unknown: ignored
  auto& w = c.at("h:1");
  ASSERT_GE(w.cancelled.size(), 1u);
  EXPECT_EQ(w.cancelled[0], w.live.begin()->first);
}

TEST(ClusterBackend, CancelledRequestIsNotRetried) {
  Cluster c;
  c.add("h:1");
  c.add("h:2");
  auto sink = std::make_shared<RecordingSink>();
  auto res = c.backend->submit(request(), sink);
  ASSERT_TRUE(res.is_ok());
  c.backend->cancel(*res);
  FakeWorker* w = c.at("h:1").live.empty() ? &c.at("h:2") : &c.at("h:1");
  w->take_one()->on_error(Status::error(StatusCode::Unavailable, "cancelled"));
  EXPECT_EQ(sink->errors.size(), 1u);
  EXPECT_EQ(c.at("h:1").submits + c.at("h:2").submits, 1);
}

TEST(ClusterBackend, DrainingRefusesNewWork) {
  Cluster c;
  c.add("h:1");
  c.backend->start_draining();
  auto res = c.backend->submit(request(), std::make_shared<RecordingSink>());
  ASSERT_FALSE(res.is_ok());
  EXPECT_EQ(res.status().code(), StatusCode::Unavailable);
  EXPECT_EQ(c.backend->health().state, serving::HealthState::Draining);
}

TEST(ClusterBackend, ModelsHealthStatsAndMetricsAggregateWorkers) {
  Cluster c;
  c.add("h:1", ready("a"));
  c.add("h:2", ready("b"));
  v1::WorkerStatus loading = ready("c");
  loading.set_state(v1::WorkerStatus::LOADING);
  c.add("h:3", loading);
  auto models = c.backend->models();
  ASSERT_EQ(models.size(), 2u);  // the loading worker's model is not offered yet
  EXPECT_EQ(models[0].id, "a");
  EXPECT_EQ(models[1].id, "b");
  EXPECT_EQ(models[0].n_ctx, 512);
  auto h = c.backend->health();
  EXPECT_EQ(h.state, serving::HealthState::Ready);
  EXPECT_EQ(h.running, 3);
  auto s = c.backend->stats();
  EXPECT_EQ(s.kv_blocks_used, 9);
  EXPECT_EQ(s.kv_blocks_total, 30);
  EXPECT_EQ(s.prefix_cache_hits, 33u);
  const std::string m = c.backend->extra_metrics();
  EXPECT_NE(m.find("cairn_workers 3\n"), std::string::npos) << m;
  EXPECT_NE(m.find("cairn_worker_prefix_cache_hits_total{worker_id=\""), std::string::npos);
  EXPECT_NE(m.find("name=\"h:2\",address=\"h:2\"} 11\n"), std::string::npos) << m;
  EXPECT_NE(m.find("# TYPE cairn_worker_outstanding gauge"), std::string::npos);
}

TEST(ClusterBackend, MetricsEscapeLabelValues) {
  Cluster c;
  auto id = c.registry.register_worker("a\"b\\c", "h:1", ready());
  ASSERT_TRUE(id.is_ok());
  const std::string m = c.backend->extra_metrics();
  EXPECT_NE(m.find("name=\"a\\\"b\\\\c\""), std::string::npos) << m;
}

TEST(ClusterBackend, TokenizeGoesToAWorker) {
  Cluster c;
  c.add("h:1");
  auto t = c.backend->tokenize("", "abc", true);
  ASSERT_TRUE(t.is_ok());
  EXPECT_EQ(t->size(), 3u);
  auto d = c.backend->detokenize("m", {1, 2});
  ASSERT_TRUE(d.is_ok());
  EXPECT_EQ(*d, "zz");
  auto missing = c.backend->tokenize("nope", "abc", true);
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().code(), StatusCode::NotFound);
}

TEST(ClusterBackend, EmbedReachesAWorkerAndAnswersTheClient) {
  Cluster c;
  c.add("h:1", embeddings_only());
  auto sink = std::make_shared<RecordingEmbedSink>();
  ASSERT_TRUE(c.backend->embed(embed_request("m"), sink).is_ok());
  ASSERT_EQ(c.at("h:1").embeds.size(), 1u);
  EXPECT_EQ(c.registry.list()[0].outstanding, 1);
  auto [req, worker_sink] = c.at("h:1").embeds.begin()->second;
  EXPECT_EQ(req.inputs.size(), 2u);
  worker_sink->on_done({{{0.25f, -0.5f}, {1.0f}}, 3});
  ASSERT_EQ(sink->answers, 1);
  ASSERT_TRUE(sink->result);
  EXPECT_EQ(sink->result->vectors, (std::vector<std::vector<float>>{{0.25f, -0.5f}, {1.0f}}));
  EXPECT_EQ(sink->result->prompt_tokens, 3);
  EXPECT_EQ(c.registry.list()[0].outstanding, 0);
  EXPECT_EQ(c.backend->in_flight(), 0);
}

TEST(ClusterBackend, EmbedRetriesOnAnotherWorkerWhenTheFirstIsUnreachable) {
  Cluster c;
  c.add("h:1");
  c.add("h:2");
  auto sink = std::make_shared<RecordingEmbedSink>();
  ASSERT_TRUE(c.backend->embed(embed_request(), sink).is_ok());
  FakeWorker* first = c.at("h:1").embeds.empty() ? &c.at("h:2") : &c.at("h:1");
  FakeWorker* second = first == &c.at("h:1") ? &c.at("h:2") : &c.at("h:1");
  auto s1 = first->embeds.begin()->second.second;
  first->embeds.clear();
  first->on_broken();
  s1->on_error(Status::error(StatusCode::Unavailable, "connection refused"));
  EXPECT_EQ(sink->answers, 0) << "the client must not notice";
  ASSERT_EQ(second->embeds.size(), 1u);
  second->embeds.begin()->second.second->on_done({{{1.0f}}, 1});
  ASSERT_EQ(sink->answers, 1);
  ASSERT_TRUE(sink->result);
  EXPECT_EQ(c.backend->in_flight(), 0);
}

TEST(ClusterBackend, EmbedInvalidArgumentKeepsItsCodeAndIsNotRetried) {
  Cluster c;
  c.add("h:1");
  c.add("h:2");
  auto sink = std::make_shared<RecordingEmbedSink>();
  ASSERT_TRUE(c.backend->embed(embed_request(), sink).is_ok());
  FakeWorker* first = c.at("h:1").embeds.empty() ? &c.at("h:2") : &c.at("h:1");
  first->embeds.begin()->second.second->on_error(
      Status::invalid_argument("input 1 is longer than the context", "input"));
  ASSERT_EQ(sink->answers, 1);
  ASSERT_TRUE(sink->error);
  EXPECT_EQ(sink->error->code(), StatusCode::InvalidArgument);
  EXPECT_EQ(sink->error->param(), "input");
  EXPECT_EQ(c.at("h:1").submits + c.at("h:2").submits, 1);
  EXPECT_EQ(c.backend->in_flight(), 0);
}

TEST(ClusterBackend, EmbedCancelReachesTheWorker) {
  Cluster c;
  c.add("h:1");
  auto sink = std::make_shared<RecordingEmbedSink>();
  auto id = c.backend->embed(embed_request(), sink);
  ASSERT_TRUE(id.is_ok());
  c.backend->cancel(*id);
  ASSERT_EQ(c.at("h:1").cancelled.size(), 1u);
  EXPECT_EQ(c.at("h:1").cancelled[0], c.at("h:1").embeds.begin()->first);
  c.at("h:1").embeds.begin()->second.second->on_error(
      Status::error(StatusCode::Cancelled, "cancelled"));
  ASSERT_EQ(sink->answers, 1);
  EXPECT_EQ(c.at("h:1").submits, 1) << "a cancelled request is not retried";
}

TEST(ClusterBackend, CompletionsSkipEmbeddingsOnlyWorkers) {
  Cluster c;
  c.add("h:1", embeddings_only());
  c.add("h:2");
  for (int i = 0; i < 4; ++i)
    ASSERT_TRUE(c.backend->submit(request("x", "m"), std::make_shared<RecordingSink>()).is_ok());
  EXPECT_EQ(c.at("h:1").submits, 0);
  EXPECT_EQ(c.at("h:2").submits, 4);
}

TEST(ClusterBackend, CompletionToAnEmbeddingsOnlyClusterIsAnInvalidArgument) {
  Cluster c;
  c.add("h:1", embeddings_only("bge"));
  for (const std::string model : {"bge", ""}) {
    auto res = c.backend->submit(request("x", model), std::make_shared<RecordingSink>());
    ASSERT_FALSE(res.is_ok());
    EXPECT_EQ(res.status().code(), StatusCode::InvalidArgument);
    EXPECT_EQ(res.status().param(), "model");
    EXPECT_NE(res.status().message().find("'bge' is served for embeddings only"), std::string::npos)
        << res.status().message();
  }
  EXPECT_EQ(c.at("h:1").submits, 0);
  // Embeddings still go there.
  auto embedded = c.backend->embed(embed_request("bge"), std::make_shared<RecordingEmbedSink>());
  EXPECT_TRUE(embedded.is_ok());
}

TEST(ClusterBackend, ModelsCarryWhatTheWorkerSaysOfThem) {
  Cluster c;
  v1::WorkerStatus st = embeddings_only("bge");
  st.mutable_models(0)->set_n_embd(128);
  st.mutable_models(0)->set_arch("bert");
  c.add("h:1", st);
  auto models = c.backend->models();
  ASSERT_EQ(models.size(), 1u);
  EXPECT_FALSE(models[0].generates);
  EXPECT_EQ(models[0].pooling, "cls");
  EXPECT_EQ(models[0].n_embd, 128);
  EXPECT_EQ(models[0].arch, "bert");
}

// --- Prefill → decode (docs/cluster.md "Prefill and decode workers") ---

// Counts on_start too (RecordingSink keeps only the last syntax).
class StartCountingSink final : public serving::EventSink {
 public:
  std::shared_ptr<RecordingSink> rec = std::make_shared<RecordingSink>();
  int starts = 0;
  void on_start(const serving::OutputSyntax& s) override {
    ++starts;
    rec->on_start(s);
  }
  void on_token(const serving::TokenEvent& ev) override { rec->on_token(ev); }
  void on_finish(const serving::FinishEvent& ev) override { rec->on_finish(ev); }
  void on_error(const Status& err) override { rec->on_error(err); }
};

v1::WorkerStatus with_role(const std::string& role, int kv_used = 3, int kv_total = 10) {
  v1::WorkerStatus st = ready();
  st.set_role(role);
  st.set_kv_blocks_used(kv_used);
  st.set_kv_blocks_total(kv_total);
  return st;
}

int64_t outstanding(Cluster& c, const std::string& address) {
  for (const auto& v : c.registry.list())
    if (v.address == address) return v.outstanding;
  return -1;
}

using Tokens = std::vector<serving::Token>;

// The usual PD cluster: `p:1` prefills, d:1..d:n_decode decode (default load).
void add_pd_workers(Cluster& c, int n_decode = 1) {
  c.add("p:1", with_role("prefill"));
  for (int i = 1; i <= n_decode; ++i) c.add("d:" + std::to_string(i), with_role("decode"));
}

// The prefill worker's whole part of a PD request: the first token, 5 ("A"),
// then the handoff of its rows (`cached` of them found cached by the decode side).
FakeWorker& prefill_then_hand_off(Cluster& c, int32_t cached = 0) {
  auto& p = c.at("p:1");
  auto ps = p.take_one();
  p.token_id(*ps, 5, "A");
  p.handoff(*ps, cached);
  return p;
}

TEST(ClusterBackendPd, PrefillThenDecodeOnTheMostFreeBlocksWithEventsInOrder) {
  Cluster c;
  c.add("p:1", with_role("prefill"));
  c.add("d:1", with_role("decode", 8, 10));
  c.add("d:2", with_role("decode", 2, 10));
  auto sink = std::make_shared<StartCountingSink>();
  ASSERT_TRUE(c.backend->submit(request(), sink).is_ok());
  auto& p = c.at("p:1");
  EXPECT_EQ(c.at("d:1").submits + c.at("d:2").submits, 0);
  const serving::GenerateRequest preq = p.live_req();
  ASSERT_TRUE(preq.handoff);
  EXPECT_EQ(preq.handoff->peer, "d:2");  // 8 free blocks against 2
  EXPECT_FALSE(preq.handoff->id.empty());
  EXPECT_FALSE(preq.resume);
  auto ps = p.take_one();
  ps->on_start({});
  p.token_id(*ps, 5, "A");
  EXPECT_EQ(outstanding(c, "p:1"), 1);
  p.handoff(*ps, 3);
  EXPECT_EQ(outstanding(c, "p:1"), 0) << "the prefill attempt ends at its handoff";
  EXPECT_EQ(outstanding(c, "d:2"), 1);
  auto& d = c.at("d:2");
  const serving::GenerateRequest dreq = d.live_req();
  EXPECT_FALSE(dreq.handoff);
  ASSERT_TRUE(dreq.resume);
  EXPECT_EQ(dreq.resume->handoff_id, preq.handoff->id);
  EXPECT_EQ(dreq.resume->forced, Tokens{5});
  EXPECT_EQ(std::get<std::string>(dreq.prompt), "hello");
  auto ds = d.take_one();
  ds->on_start({});  // the client has the prefill worker's
  d.token_id(*ds, 6, "B");
  d.token_id(*ds, 7, "C");
  serving::FinishEvent f;
  f.reason = "stop";
  f.usage = {4, 3, 0};
  ds->on_finish(f);
  EXPECT_EQ(sink->starts, 1);
  EXPECT_EQ(sink->rec->ids(), (Tokens{5, 6, 7}));
  EXPECT_EQ(sink->rec->text, "ABC");
  ASSERT_EQ(sink->rec->finishes.size(), 1u);
  EXPECT_TRUE(sink->rec->errors.empty());
  EXPECT_EQ(sink->rec->finishes[0].reason, "stop");
  EXPECT_EQ(sink->rec->finishes[0].usage.prompt_tokens, 4);
  EXPECT_EQ(sink->rec->finishes[0].usage.completion_tokens, 3);
  EXPECT_EQ(sink->rec->finishes[0].usage.cached_prompt_tokens, 3) << "the prefill worker's hit";
  EXPECT_EQ(c.backend->in_flight(), 0);
  for (const auto& v : c.registry.list()) EXPECT_EQ(v.outstanding, 0) << v.address;
  const std::string m = c.backend->extra_metrics();
  EXPECT_NE(m.find("cairn_pd_requests_total 1\n"), std::string::npos) << m;
  EXPECT_NE(m.find("cairn_pd_handoffs_total 1\n"), std::string::npos) << m;
  EXPECT_NE(m.find("cairn_pd_fallbacks_total{reason=\"transfer\"} 0\n"), std::string::npos) << m;
}

TEST(ClusterBackendPd, HandoffIdsAreUniqueAndABurstSpreadsOverDecodeWorkers) {
  Cluster c;
  add_pd_workers(c, 2);
  ASSERT_TRUE(c.backend->submit(request(), std::make_shared<RecordingSink>()).is_ok());
  ASSERT_TRUE(c.backend->submit(request(), std::make_shared<RecordingSink>()).is_ok());
  auto& p = c.at("p:1");
  ASSERT_EQ(p.reqs.size(), 2u);
  const auto& a = p.reqs.begin()->second;
  const auto& b = std::next(p.reqs.begin())->second;
  ASSERT_TRUE(a.handoff && b.handoff);
  EXPECT_NE(a.handoff->id, b.handoff->id);
  // Equal heartbeats: the first request's reservation sends the second elsewhere.
  EXPECT_NE(a.handoff->peer, b.handoff->peer);
}

TEST(ClusterBackendPd, DedicatedWorkersComeBeforeBothOnes) {
  Cluster c;
  c.add("b:1", with_role("both", 0, 10));
  c.add("p:1", with_role("prefill", 9, 10));
  c.add("d:1", with_role("decode", 9, 10));
  ASSERT_TRUE(c.backend->submit(request(), std::make_shared<RecordingSink>()).is_ok());
  EXPECT_EQ(c.at("b:1").submits, 0);
  ASSERT_EQ(c.at("p:1").live.size(), 1u);
  EXPECT_EQ(c.at("p:1").live_req().handoff->peer, "d:1");
}

TEST(ClusterBackendPd, NoHandoffWithoutBothRoles) {
  for (const std::vector<std::string>& roles :
       {std::vector<std::string>{"", ""}, {"prefill", "both"}, {"decode", "both"}}) {
    Cluster c;
    c.add("h:1", with_role(roles[0]));
    c.add("h:2", with_role(roles[1]));
    ASSERT_TRUE(c.backend->submit(request(), std::make_shared<RecordingSink>()).is_ok());
    for (const auto& [addr, w] : c.by_address)
      for (const auto& [id, r] : w->reqs) {
        EXPECT_FALSE(r.handoff) << roles[0] << "," << roles[1];
        EXPECT_FALSE(r.resume);
      }
    EXPECT_NE(c.backend->extra_metrics().find("cairn_pd_requests_total 0\n"), std::string::npos);
  }
}

TEST(ClusterBackendPd, AClientsHandoffFieldsAreDropped) {
  Cluster c;
  c.add("h:1");
  auto req = request();
  req.handoff = serving::GenerateRequest::Handoff{"evil:1", "x"};
  req.resume = serving::GenerateRequest::Resume{"x", {1}, nullptr};
  ASSERT_TRUE(c.backend->submit(req, std::make_shared<RecordingSink>()).is_ok());
  EXPECT_FALSE(c.at("h:1").live_req().handoff);
  EXPECT_FALSE(c.at("h:1").live_req().resume);
}

TEST(ClusterBackendPd, FirstTokenThatEndsTheRequestNeedsNoDecodeWorker) {
  Cluster c;
  add_pd_workers(c, 2);
  auto sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE(c.backend->submit(request(), sink).is_ok());
  auto& p = c.at("p:1");
  EXPECT_EQ(p.live_req().handoff->peer, "d:1");
  auto ps = p.take_one();
  p.token_id(*ps, 2, "");
  p.finish(*ps);
  EXPECT_EQ(sink->finishes.size(), 1u);
  EXPECT_EQ(c.at("d:1").submits + c.at("d:2").submits, 0);
  // Its reservation is gone: the next request picks d:1 again.
  ASSERT_TRUE(c.backend->submit(request(), std::make_shared<RecordingSink>()).is_ok());
  EXPECT_EQ(p.live_req().handoff->peer, "d:1");
}

TEST(ClusterBackendPd, PrefillLostBeforeTheFirstTokenIsRetriedOnAnotherPrefillWorker) {
  Cluster c;
  c.add("p:1", with_role("prefill"));
  c.add("p:2", with_role("prefill"));
  c.add("d:1", with_role("decode"));
  auto sink = std::make_shared<StartCountingSink>();
  ASSERT_TRUE(c.backend->submit(request(), sink).is_ok());
  FakeWorker* first = c.at("p:1").live.empty() ? &c.at("p:2") : &c.at("p:1");
  FakeWorker* second = first == &c.at("p:1") ? &c.at("p:2") : &c.at("p:1");
  auto s1 = first->take_one();
  first->on_broken();
  s1->on_error(Status::error(StatusCode::Unavailable, "socket closed"));
  EXPECT_EQ(sink->rec->ends, 0);
  EXPECT_EQ(c.at("d:1").submits, 0);
  ASSERT_EQ(second->live.size(), 1u);
  ASSERT_TRUE(second->live_req().handoff);
  EXPECT_EQ(second->live_req().handoff->peer, "d:1");
  auto s2 = second->take_one();
  second->token_id(*s2, 5, "A");
  second->handoff(*s2, 0);
  auto& d = c.at("d:1");
  EXPECT_EQ(d.live_req().resume->forced, Tokens{5});
  d.finish(*d.take_one());
  EXPECT_EQ(sink->rec->finishes.size(), 1u);
  EXPECT_EQ(c.backend->in_flight(), 0);
}

TEST(ClusterBackendPd, WithNoPrefillWorkerLeftADecodeWorkerRunsTheWholeRequest) {
  Cluster c;
  add_pd_workers(c);
  auto sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE(c.backend->submit(request(), sink).is_ok());
  auto& p = c.at("p:1");
  auto ps = p.take_one();
  p.on_broken();
  ps->on_error(Status::unavailable("socket closed"));
  auto& d = c.at("d:1");
  ASSERT_EQ(d.live.size(), 1u);
  EXPECT_FALSE(d.live_req().handoff);
  EXPECT_FALSE(d.live_req().resume);
  auto ds = d.take_one();
  d.token_id(*ds, 5, "A");
  d.finish(*ds);
  EXPECT_EQ(sink->finishes.size(), 1u);
  EXPECT_TRUE(sink->errors.empty());
}

TEST(ClusterBackendPd, PrefillLostAfterTheFirstTokenResumesOnADecodeWorker) {
  Cluster c;
  add_pd_workers(c);
  auto sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE(c.backend->submit(request(), sink).is_ok());
  auto& p = c.at("p:1");
  auto ps = p.take_one();
  p.token_id(*ps, 5, "A");
  ps->on_error(Status::error(StatusCode::Unavailable, "socket closed"));
  EXPECT_EQ(sink->ends, 0);
  auto& d = c.at("d:1");
  ASSERT_TRUE(d.live_req().resume);
  EXPECT_EQ(d.live_req().resume->handoff_id, "") << "recomputed: the rows may be partial";
  EXPECT_EQ(d.live_req().resume->forced, Tokens{5});
  EXPECT_EQ(outstanding(c, "p:1"), 0);
  EXPECT_EQ(outstanding(c, "d:1"), 1);
  auto ds = d.take_one();
  d.token_id(*ds, 6, "B");
  d.finish(*ds);
  EXPECT_EQ(sink->ids(), (Tokens{5, 6}));
  EXPECT_EQ(sink->finishes.size(), 1u);
  EXPECT_NE(c.backend->extra_metrics().find("cairn_pd_fallbacks_total{reason=\"prefill_lost\"} 1\n"),
            std::string::npos);
}

TEST(ClusterBackendPd, AFailedTransferResumesWithoutTheRows) {
  Cluster c;
  add_pd_workers(c);
  auto sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE(c.backend->submit(request(), sink).is_ok());
  auto& p = c.at("p:1");
  auto ps = p.take_one();
  p.token_id(*ps, 5, "A");
  p.handoff(*ps, 2, "the decode worker refused the rows");
  auto& d = c.at("d:1");
  ASSERT_TRUE(d.live_req().resume);
  EXPECT_EQ(d.live_req().resume->handoff_id, "");
  EXPECT_EQ(d.live_req().resume->forced, Tokens{5});
  auto ds = d.take_one();
  serving::FinishEvent f;
  f.reason = "length";
  f.usage = {4, 2, 0};
  d.token_id(*ds, 6, "B");
  ds->on_finish(f);
  ASSERT_EQ(sink->finishes.size(), 1u);
  EXPECT_EQ(sink->finishes[0].usage.cached_prompt_tokens, 2);
  EXPECT_NE(c.backend->extra_metrics().find("cairn_pd_fallbacks_total{reason=\"transfer\"} 1\n"),
            std::string::npos);
}

TEST(ClusterBackendPd, DecodeWorkerLostMidStreamIsReplacedFromTheTokensSoFar) {
  Cluster c;
  c.add("p:1", with_role("prefill"));
  c.add("d:1", with_role("decode", 2, 10));
  c.add("d:2", with_role("decode", 5, 10));
  auto sink = std::make_shared<StartCountingSink>();
  ASSERT_TRUE(c.backend->submit(request(), sink).is_ok());
  auto& p = c.at("p:1");
  auto ps = p.take_one();
  ps->on_start({});
  p.token_id(*ps, 5, "A");
  p.handoff(*ps, 1);
  auto& d1 = c.at("d:1");
  auto s1 = d1.take_one();
  d1.token_id(*s1, 6, "B");
  d1.on_broken();
  s1->on_error(Status::error(StatusCode::Unavailable, "stream broken"));
  EXPECT_EQ(sink->rec->ends, 0) << "the client must not notice";
  auto& d2 = c.at("d:2");
  ASSERT_TRUE(d2.live_req().resume);
  EXPECT_EQ(d2.live_req().resume->handoff_id, "");
  EXPECT_EQ(d2.live_req().resume->forced, (Tokens{5, 6}));
  auto s2 = d2.take_one();
  s2->on_start({});
  d2.token_id(*s2, 7, "C");
  d2.finish(*s2);
  EXPECT_EQ(sink->starts, 1);
  EXPECT_EQ(sink->rec->ids(), (Tokens{5, 6, 7}));
  EXPECT_EQ(sink->rec->finishes.size(), 1u);
  EXPECT_TRUE(sink->rec->errors.empty());
  EXPECT_EQ(c.backend->in_flight(), 0);
  for (const auto& v : c.registry.list()) EXPECT_EQ(v.outstanding, 0) << v.address;
  EXPECT_NE(c.backend->extra_metrics().find("cairn_pd_fallbacks_total{reason=\"decode_lost\"} 1\n"),
            std::string::npos);
}

TEST(ClusterBackendPd, HandoffNotFoundOnTheDecodeWorkerRecomputesElsewhere) {
  Cluster c;
  c.add("p:1", with_role("prefill"));
  c.add("d:1", with_role("decode", 2, 10));
  c.add("d:2", with_role("decode", 5, 10));
  auto sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE(c.backend->submit(request(), sink).is_ok());
  prefill_then_hand_off(c);
  c.at("d:1").take_one()->on_error(Status::unavailable("handoff 'x' not found"));
  auto& d2 = c.at("d:2");
  ASSERT_TRUE(d2.live_req().resume);
  EXPECT_EQ(d2.live_req().resume->handoff_id, "");
  EXPECT_EQ(d2.live_req().resume->forced, Tokens{5});
  EXPECT_EQ(c.registry.list().size(), 3u) << "a missing transfer is no reason to drop the worker";
}

TEST(ClusterBackendPd, WithNoDecodeWorkerLeftAnyGeneratingWorkerContinues) {
  Cluster c;
  add_pd_workers(c);
  auto sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE(c.backend->submit(request(), sink).is_ok());
  auto& p = prefill_then_hand_off(c);
  auto& d = c.at("d:1");
  auto ds = d.take_one();
  d.on_broken();
  ds->on_error(Status::unavailable("socket closed"));
  ASSERT_EQ(p.live.size(), 1u);
  EXPECT_FALSE(p.live_req().handoff);
  ASSERT_TRUE(p.live_req().resume);
  EXPECT_EQ(p.live_req().resume->forced, Tokens{5});
  p.finish(*p.take_one());
  EXPECT_EQ(sink->finishes.size(), 1u);
  EXPECT_TRUE(sink->errors.empty());
}

TEST(ClusterBackendPd, DecodeAttemptsAreBoundedAndThenTheClientGetsAnError) {
  ClusterOptions opt;
  opt.max_attempts = 2;
  Cluster c(opt);
  add_pd_workers(c, 3);
  auto sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE(c.backend->submit(request(), sink).is_ok());
  prefill_then_hand_off(c);
  for (int attempt = 0; attempt < 2; ++attempt) {
    FakeWorker* w = nullptr;
    for (auto& [addr, fake] : c.by_address)
      if (!fake->live.empty()) w = fake.get();
    ASSERT_NE(w, nullptr) << attempt;
    w->take_one()->on_error(Status::unavailable("gone " + std::to_string(attempt)));
  }
  ASSERT_EQ(sink->errors.size(), 1u);
  EXPECT_EQ(sink->ends, 1);
  EXPECT_EQ(sink->errors[0].code(), StatusCode::Unavailable);
  EXPECT_NE(sink->errors[0].message().find("gone 1"), std::string::npos);
  EXPECT_EQ(c.at("d:1").submits + c.at("d:2").submits + c.at("d:3").submits, 2);
  EXPECT_EQ(c.backend->in_flight(), 0);
  for (const auto& v : c.registry.list()) EXPECT_EQ(v.outstanding, 0) << v.address;
}

TEST(ClusterBackendPd, InvalidArgumentFromTheDecodeWorkerIsNotRetried) {
  Cluster c;
  add_pd_workers(c, 2);
  auto sink = std::make_shared<RecordingSink>();
  ASSERT_TRUE(c.backend->submit(request(), sink).is_ok());
  prefill_then_hand_off(c);
  FakeWorker* d = c.at("d:1").live.empty() ? &c.at("d:2") : &c.at("d:1");
  d->take_one()->on_error(Status::invalid_argument("forced token out of range", "resume"));
  ASSERT_EQ(sink->errors.size(), 1u);
  EXPECT_EQ(sink->errors[0].code(), StatusCode::InvalidArgument);
  EXPECT_EQ(c.at("d:1").submits + c.at("d:2").submits, 1);
}

TEST(ClusterBackendPd, CancelDuringPrefillReachesThePrefillWorker) {
  Cluster c;
  add_pd_workers(c);
  auto sink = std::make_shared<RecordingSink>();
  auto id = c.backend->submit(request(), sink);
  ASSERT_TRUE(id.is_ok());
  c.backend->cancel(*id);
  auto& p = c.at("p:1");
  ASSERT_EQ(p.cancelled.size(), 1u);
  EXPECT_EQ(p.cancelled[0], p.live.begin()->first);
  serving::FinishEvent f;
  f.reason = "cancelled";
  p.take_one()->on_finish(f);
  EXPECT_EQ(sink->reason(), "cancelled");
  EXPECT_EQ(c.at("d:1").submits, 0);
  EXPECT_EQ(c.backend->in_flight(), 0);
}

TEST(ClusterBackendPd, CancelBeforeTheHandoffFinishCancelsTheDecodeRequest) {
  Cluster c;
  add_pd_workers(c);
  auto sink = std::make_shared<RecordingSink>();
  auto id = c.backend->submit(request(), sink);
  ASSERT_TRUE(id.is_ok());
  auto& p = c.at("p:1");
  auto ps = p.take_one();
  p.token_id(*ps, 5, "A");
  c.backend->cancel(*id);  // the prefill worker had already finished its part
  p.handoff(*ps, 0);
  auto& d = c.at("d:1");
  ASSERT_EQ(d.live.size(), 1u) << "the rows are claimed, then dropped by the cancel";
  ASSERT_EQ(d.cancelled.size(), 1u);
  EXPECT_EQ(d.cancelled[0], d.live.begin()->first);
  serving::FinishEvent f;
  f.reason = "cancelled";
  d.take_one()->on_finish(f);
  EXPECT_EQ(sink->reason(), "cancelled");
  EXPECT_EQ(sink->ends, 1);
}

TEST(ClusterBackendPd, CancelWhileTheDecodeSubmitIsUnderWayCancelsItOnceItStarts) {
  Cluster c;
  add_pd_workers(c);
  auto sink = std::make_shared<RecordingSink>();
  auto id = c.backend->submit(request(), sink);
  ASSERT_TRUE(id.is_ok());
  auto& d = c.at("d:1");
  d.during_submit = [&](serving::RequestId) { c.backend->cancel(*id); };
  auto& p = prefill_then_hand_off(c);
  EXPECT_TRUE(p.cancelled.empty() || p.cancelled.size() == 1u);
  ASSERT_EQ(d.cancelled.size(), 1u);
  EXPECT_EQ(d.cancelled[0], d.live.begin()->first);
}

TEST(ClusterBackendPd, CancelDuringDecodeReachesTheDecodeWorker) {
  Cluster c;
  add_pd_workers(c);
  auto sink = std::make_shared<RecordingSink>();
  auto id = c.backend->submit(request(), sink);
  ASSERT_TRUE(id.is_ok());
  auto& p = prefill_then_hand_off(c);
  c.backend->cancel(*id);
  EXPECT_TRUE(p.cancelled.empty());
  auto& d = c.at("d:1");
  ASSERT_EQ(d.cancelled.size(), 1u);
  EXPECT_EQ(d.cancelled[0], d.live.begin()->first);
  // A cancelled request whose decode worker then breaks is not moved again.
  d.take_one()->on_error(Status::unavailable("socket closed"));
  EXPECT_EQ(sink->ends, 1);
  EXPECT_EQ(d.submits, 1);
  EXPECT_EQ(p.submits, 1);
}

TEST(ClusterBackendPd, MetricsShowRolesAndHandoffCounters) {
  Cluster c;
  v1::WorkerStatus st = with_role("prefill");
  auto* h = st.mutable_handoff();
  h->set_sent(4);
  h->set_bytes_sent(4096);
  h->set_expired(1);
  for (double b : {0.01, 0.1}) h->add_seconds_bounds(b);
  for (uint64_t n : {1u, 2u, 1u}) h->add_seconds_counts(n);
  h->set_seconds_sum(0.75);
  c.add("p:1", st);
  v1::WorkerStatus dst = with_role("decode");
  dst.mutable_handoff()->set_received(3);
  dst.mutable_handoff()->set_bytes_received(2048);
  c.add("d:1", dst);
  c.add("b:1");
  const std::string m = c.backend->extra_metrics();
  for (const std::string want : {
           "address=\"p:1\",role=\"prefill\"} 1\n",
           "address=\"d:1\",role=\"decode\"} 1\n",
           "address=\"b:1\",role=\"both\"} 1\n",
           "cairn_worker_kv_handoffs_sent_total{worker_id=\"",
           "address=\"p:1\"} 4\n",
           "address=\"p:1\"} 4096\n",
           "# TYPE cairn_worker_kv_handoffs_received_total counter\n",
           "address=\"d:1\"} 2048\n",
           "# TYPE cairn_worker_kv_handoff_expired_total counter\n",
           "# TYPE cairn_worker_kv_handoff_bytes_received_total counter\n",
           "# TYPE cairn_worker_kv_handoff_seconds histogram\n",
           "address=\"p:1\",le=\"0.01\"} 1\n",
           "address=\"p:1\",le=\"0.1\"} 3\n",
           "address=\"p:1\",le=\"+Inf\"} 4\n",
           "address=\"d:1\",le=\"+Inf\"} 0\n",
           "address=\"p:1\"} 0.75\n",
           "# TYPE cairn_pd_fallbacks_total counter\n",
           "cairn_pd_fallbacks_total{reason=\"decode_lost\"} 0\n",
       })
    EXPECT_NE(m.find(want), std::string::npos) << want << "\n" << m;
  EXPECT_NE(m.find("cairn_worker_kv_handoff_seconds_count{worker_id=\""), std::string::npos);
}

// A worker that plays its side of each request on its own thread, with
// failures at set points, for the concurrency test below.
class ThreadedWorker final : public serving::Backend {
 public:
  static constexpr int kLength = 6;  // tokens per request; token i has id 100 + i

  ~ThreadedWorker() override { join(); }

  Result<serving::RequestId> submit(serving::GenerateRequest req,
                                    std::shared_ptr<serving::EventSink> sink) override {
    std::lock_guard<std::mutex> lock(mu_);
    const serving::RequestId id = next_++;
    auto cancelled = std::make_shared<std::atomic<bool>>(false);
    cancels_[id] = cancelled;
    const uint64_t n = count_++;
    threads_.emplace_back([req = std::move(req), sink, cancelled, n] {
      run(req, *sink, *cancelled, n);
    });
    return id;
  }
  void cancel(serving::RequestId id) override {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = cancels_.find(id); it != cancels_.end()) *it->second = true;
  }
  void join() {
    for (;;) {
      std::vector<std::thread> threads;
      {
        std::lock_guard<std::mutex> lock(mu_);
        threads.swap(threads_);
      }
      if (threads.empty()) return;
      for (auto& t : threads) t.join();
    }
  }
  std::vector<serving::ModelInfo> models() const override { return {}; }
  serving::Health health() const override { return {}; }
  serving::BackendStats stats() const override { return {}; }
  Result<std::vector<serving::Token>> tokenize(const std::string&, const std::string&, bool,
                                               bool = true) const override {
    return std::vector<serving::Token>{};
  }
  Result<std::string> detokenize(const std::string&,
                                 const std::vector<serving::Token>&) const override {
    return std::string();
  }
  void start_draining() override {}

 private:
  static void run(const serving::GenerateRequest& req, serving::EventSink& sink,
                  const std::atomic<bool>& cancelled, uint64_t n) {
    auto end_cancelled = [&] {
      serving::FinishEvent f;
      f.reason = "cancelled";
      sink.on_finish(f);
    };
    if (req.handoff) {
      if (n % 7 == 3) return sink.on_error(Status::unavailable("lost before a token"));
      sink.on_token({100, "t", 0, {}});
      if (n % 7 == 5) return sink.on_error(Status::unavailable("lost after a token"));
      if (cancelled) return end_cancelled();
      serving::FinishEvent f;
      f.reason = "handoff";
      if (n % 5 == 1) f.handoff_error = "refused";
      return sink.on_finish(f);
    }
    const int from = req.resume ? static_cast<int>(req.resume->forced.size()) : 0;
    for (int i = from; i < kLength; ++i) {
      if (cancelled) return end_cancelled();
      if (req.resume && n % 5 == 2 && i == from + 1)
        return sink.on_error(Status::unavailable("decode lost"));
      sink.on_token({100 + i, "t", 0, {}});
    }
    serving::FinishEvent f;
    f.reason = "stop";
    sink.on_finish(f);
  }

  std::mutex mu_;
  std::vector<std::thread> threads_;
  std::map<serving::RequestId, std::shared_ptr<std::atomic<bool>>> cancels_;
  serving::RequestId next_ = 1;
  uint64_t count_ = 0;
};

TEST(ClusterBackendPd, ConcurrentFlightsWithFaultsAndCancelsEndOnceEachWithTheRightTokens) {
  Registry registry;
  std::mutex mu;
  std::map<std::string, std::shared_ptr<ThreadedWorker>> workers;
  ClusterOptions opt;
  opt.max_queue = 1000;
  auto backend = std::make_unique<ClusterBackend>(
      registry, opt, [&](const WorkerView& w, std::function<void()>) {
        std::lock_guard<std::mutex> lock(mu);
        auto& slot = workers[w.address];
        if (!slot) slot = std::make_shared<ThreadedWorker>();
        return slot;
      });
  for (const auto& [address, role] : std::vector<std::pair<std::string, std::string>>{
           {"p:1", "prefill"}, {"p:2", "prefill"}, {"d:1", "decode"},
           {"d:2", "decode"}, {"d:3", "decode"}, {"b:1", "both"}})
    ASSERT_TRUE(registry.register_worker(address, address, with_role(role)).is_ok());
  constexpr int kRequests = 300;
  std::vector<std::shared_ptr<RecordingSink>> sinks;
  std::vector<serving::RequestId> ids;
  for (int i = 0; i < kRequests; ++i) {
    sinks.push_back(std::make_shared<RecordingSink>());
    auto id = backend->submit(request(), sinks.back());
    ASSERT_TRUE(id.is_ok()) << id.status().message();
    ids.push_back(*id);
  }
  // Cancels race the workers' threads.
  std::thread canceller([&] {
    for (int i = 0; i < kRequests; i += 4) backend->cancel(ids[static_cast<size_t>(i)]);
  });
  canceller.join();
  int finished = 0, cancelled = 0, errors = 0;
  for (int i = 0; i < kRequests; ++i) {
    auto& s = *sinks[static_cast<size_t>(i)];
    ASSERT_TRUE(s.wait(30)) << "request " << i << " hangs";
    const std::string reason = s.reason();
    if (reason == "stop") {
      ++finished;
      std::vector<serving::Token> want;
      for (int t = 0; t < ThreadedWorker::kLength; ++t) want.push_back(100 + t);
      EXPECT_EQ(s.ids(), want) << "request " << i;
    } else if (reason == "cancelled") {
      ++cancelled;
      EXPECT_EQ(i % 4, 0) << "request " << i;
    } else {
      ++errors;  // a cancelled one's worker failing, or every attempt lost
    }
  }
  for (auto& [address, w] : workers) w->join();
  for (int i = 0; i < kRequests; ++i) EXPECT_EQ(sinks[static_cast<size_t>(i)]->ends, 1) << i;
  EXPECT_GT(finished, kRequests / 2);
  EXPECT_EQ(backend->in_flight(), 0);
  for (const auto& v : registry.list()) EXPECT_EQ(v.outstanding, 0) << v.address;
  // Every fault path ran.
  const std::string m = backend->extra_metrics();
  for (const char* reason : {"transfer", "decode_lost", "prefill_lost"})
    EXPECT_EQ(m.find(std::string("cairn_pd_fallbacks_total{reason=\"") + reason + "\"} 0\n"),
              std::string::npos)
        << reason;
  (void)cancelled;
  (void)errors;
  backend.reset();
}

}  // namespace
}  // namespace cairn::cluster
