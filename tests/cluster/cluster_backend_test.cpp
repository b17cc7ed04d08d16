// tests/cluster/cluster_backend_test.cpp — ClusterBackend over fake workers: dispatch, retry, relay.
#include "cluster/cluster_backend.h"

#include <gtest/gtest.h>

#include <map>
#include <mutex>

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

  Result<serving::RequestId> submit(serving::GenerateRequest,
                                    std::shared_ptr<serving::EventSink> sink) override {
    ++submits;
    if (refuse) return *refuse;
    const serving::RequestId id = next_++;
    live[id] = std::move(sink);
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

}  // namespace
}  // namespace cairn::cluster
