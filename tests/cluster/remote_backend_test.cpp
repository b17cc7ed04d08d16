// RemoteBackend against a real in-process Worker service (api::make_worker_service)
// over loopback gRPC, with a scripted backend behind it.
#include "cluster/remote_backend.h"

#include <grpcpp/impl/service_type.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <variant>

#include "api/grpc_server.h"
#include "api/grpc_worker_service.h"
#include "cluster/cluster_backend.h"
#include "serving_test_util.h"

namespace cairn::cluster {
namespace {

using namespace std::chrono_literals;
using cairn::test::RecordingEmbedSink;
using cairn::test::RecordingSink;

// The worker side: requests wait until the test plays their events.
class ScriptedBackend final : public serving::Backend {
 public:
  Result<serving::RequestId> submit(serving::GenerateRequest req,
                                    std::shared_ptr<serving::EventSink> sink) override {
    std::lock_guard<std::mutex> l(mu_);
    if (const auto* text = std::get_if<std::string>(&req.prompt); text && *text == "bad")
      return Status::error(StatusCode::InvalidArgument, "bad prompt", "prompt");
    const serving::RequestId id = next_++;
    live_[id] = std::move(sink);
    cv_.notify_all();
    return id;
  }
  Result<serving::RequestId> embed(serving::EmbedRequest req,
                                   std::shared_ptr<serving::EmbedSink> sink) override {
    std::lock_guard<std::mutex> l(mu_);
    const auto* text =
        req.inputs.empty() ? nullptr : std::get_if<std::string>(&req.inputs.front());
    if (text && *text == "bad")
      return Status::error(StatusCode::InvalidArgument, "bad input", "input");
    const serving::RequestId id = next_++;
    embeds_[id] = {std::move(req), std::move(sink)};
    cv_.notify_all();
    return id;
  }
  // Waits (bounded) until an embedding request arrives and hands it over.
  std::optional<std::pair<serving::EmbedRequest, std::shared_ptr<serving::EmbedSink>>>
  next_embed() {
    std::unique_lock<std::mutex> l(mu_);
    if (!cv_.wait_for(l, 5s, [&] { return !embeds_.empty(); })) return std::nullopt;
    auto it = embeds_.begin();
    auto out = it->second;
    embeds_.erase(it);
    return out;
  }
  bool wait_embeds(size_t n) {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, 5s, [&] { return embeds_.size() == n; });
  }
  void cancel(serving::RequestId id) override {
    std::shared_ptr<serving::EventSink> sink;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (auto e = embeds_.find(id); e != embeds_.end()) {
        auto embed_sink = e->second.second;
        embeds_.erase(e);
        ++cancels_;
        embed_sink->on_error(Status::error(StatusCode::Cancelled, "cancelled"));
        return;
      }
      auto it = live_.find(id);
      if (it == live_.end()) return;
      sink = it->second;
      live_.erase(it);
      ++cancels_;
    }
    serving::FinishEvent f;
    f.reason = "cancelled";
    sink->on_finish(f);
  }
  std::vector<serving::ModelInfo> models() const override { return {{"m", 64, 100, 1}}; }
  serving::Health health() const override { return {serving::HealthState::Ready, 0, 0}; }
  serving::BackendStats stats() const override { return {}; }
  // One token per byte, and one more when parse_special is false.
  Result<std::vector<serving::Token>> tokenize(const std::string&, const std::string& text, bool,
                                               bool parse_special = true) const override {
    return std::vector<serving::Token>(text.size() + (parse_special ? 0 : 1), 5);
  }
  Result<std::vector<std::string>> token_pieces(
      const std::string&, const std::vector<serving::Token>& tokens) const override {
    std::vector<std::string> out;
    for (serving::Token t : tokens) out.push_back("p" + std::to_string(t));
    return out;
  }
  Result<std::string> detokenize(const std::string& model,
                                 const std::vector<serving::Token>& t) const override {
    if (model == "nope") return Status::error(StatusCode::NotFound, "no such model", "model");
    return std::string(t.size(), 'q');
  }
  void start_draining() override {}

  // Waits (bounded) until a request arrives and hands its sink over.
  std::shared_ptr<serving::EventSink> next_request() {
    std::unique_lock<std::mutex> l(mu_);
    if (!cv_.wait_for(l, 5s, [&] { return !live_.empty(); })) return nullptr;
    auto it = live_.begin();
    auto sink = it->second;
    live_.erase(it);
    return sink;
  }
  bool wait_live(size_t n) {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, 5s, [&] { return live_.size() == n; });
  }
  int cancels() {
    std::lock_guard<std::mutex> l(mu_);
    return cancels_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<serving::RequestId, std::shared_ptr<serving::EventSink>> live_;
  using Embed = std::pair<serving::EmbedRequest, std::shared_ptr<serving::EmbedSink>>;
  std::map<serving::RequestId, Embed> embeds_;
  serving::RequestId next_ = 1;
  int cancels_ = 0;
};

struct Worker {
  ScriptedBackend backend;
  std::unique_ptr<grpc::Service> service = api::make_worker_service(backend);
  std::unique_ptr<api::GrpcServer> server;
  Worker() {
    auto s = api::GrpcServer::start({}, {service.get()});
    EXPECT_TRUE(s.is_ok()) << s.status().message();
    if (s.is_ok()) server = std::move(s.value());
  }
  ~Worker() {
    if (server) server->shutdown(0);
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(server->port()); }
};

RemoteBackendOptions opts(const std::string& address, double timeout_s = 600,
                          std::function<void()> on_broken = {}) {
  RemoteBackendOptions o;
  o.address = address;
  o.request_timeout_s = timeout_s;
  o.rpc_timeout_s = 2;
  o.on_broken = std::move(on_broken);
  return o;
}

serving::GenerateRequest request(const std::string& prompt = "hello") {
  serving::GenerateRequest r;
  r.prompt = prompt;
  r.max_tokens = 8;
  return r;
}

TEST(RemoteBackend, StreamsTokensAndFinish) {
  Worker w;
  ASSERT_TRUE(w.server);
  RemoteBackend remote(opts(w.address()));
  auto rec = std::make_shared<RecordingSink>();
  auto id = remote.submit(request(), rec);
  ASSERT_TRUE(id.is_ok());
  auto sink = w.backend.next_request();
  ASSERT_TRUE(sink);
  sink->on_token({1, "Once", -0.5f, {}});
  sink->on_token({2, " upon", -0.1f, {}});
  serving::FinishEvent fin;
  fin.reason = "length";
  fin.usage.completion_tokens = 2;
  sink->on_finish(fin);
  ASSERT_TRUE(rec->wait(10));
  EXPECT_EQ(rec->text, "Once upon");
  ASSERT_TRUE(rec->finish);
  EXPECT_EQ(rec->finish->reason, "length");
  EXPECT_EQ(rec->finish->usage.completion_tokens, 2);
  EXPECT_FALSE(rec->error);
}

TEST(RemoteBackend, WorkerRefusalArrivesAsAnErrorEvent) {
  Worker w;
  ASSERT_TRUE(w.server);
  std::atomic<int> broken{0};
  RemoteBackend remote(opts(w.address(), 600, [&] { broken++; }));
  auto rec = std::make_shared<RecordingSink>();
  ASSERT_TRUE(remote.submit(request("bad"), rec).is_ok());
  ASSERT_TRUE(rec->wait(10));
  ASSERT_TRUE(rec->error);
  EXPECT_EQ(rec->error->code(), StatusCode::InvalidArgument);
  EXPECT_EQ(broken.load(), 0);  // the worker answered: it is not broken
}

TEST(RemoteBackend, CancelStopsTheRequestOnTheWorker) {
  Worker w;
  ASSERT_TRUE(w.server);
  RemoteBackend remote(opts(w.address()));
  auto rec = std::make_shared<RecordingSink>();
  auto id = remote.submit(request(), rec);
  ASSERT_TRUE(id.is_ok());
  ASSERT_TRUE(w.backend.wait_live(1));
  remote.cancel(*id);
  ASSERT_TRUE(rec->wait(10));
  ASSERT_TRUE(rec->finish);
  EXPECT_EQ(rec->finish->reason, "cancelled");
  // The worker notices the cancelled call within its poll interval.
  for (int i = 0; i < 250 && w.backend.cancels() == 0; ++i) std::this_thread::sleep_for(20ms);
  EXPECT_EQ(w.backend.cancels(), 1);
  EXPECT_EQ(remote.active_calls(), 0);
}

TEST(RemoteBackend, UnreachableWorkerIsUnavailableAndBroken) {
  // A port that was just free: nothing listens there.
  std::string address;
  {
    Worker w;
    ASSERT_TRUE(w.server);
    address = w.address();
  }
  std::atomic<int> broken{0};
  RemoteBackend remote(opts(address, 600, [&] { broken++; }));
  auto rec = std::make_shared<RecordingSink>();
  ASSERT_TRUE(remote.submit(request(), rec).is_ok());
  ASSERT_TRUE(rec->wait(10));
  ASSERT_TRUE(rec->error);
  EXPECT_EQ(rec->error->code(), StatusCode::Unavailable);
  EXPECT_EQ(broken.load(), 1);
  EXPECT_TRUE(remote.models().empty());
  EXPECT_EQ(remote.health().state, serving::HealthState::Loading);
}

TEST(RemoteBackend, WorkerGoingAwayMidStreamEndsWithAnError) {
  auto w = std::make_unique<Worker>();
  ASSERT_TRUE(w->server);
  std::atomic<int> broken{0};
  RemoteBackend remote(opts(w->address(), 600, [&] { broken++; }));
  auto rec = std::make_shared<RecordingSink>();
  ASSERT_TRUE(remote.submit(request(), rec).is_ok());
  auto sink = w->backend.next_request();
  ASSERT_TRUE(sink);
  sink->on_token({1, "Once", 0, {}});
  ASSERT_TRUE(rec->wait_text("Once"));
  w->server->shutdown(0);  // cancels the running call on the worker side
  ASSERT_TRUE(rec->wait(10));
  EXPECT_TRUE(rec->error || (rec->finish && rec->finish->reason != "length"));
  w.reset();
}

TEST(RemoteBackend, DeadlineEndsASlowRequest) {
  Worker w;
  ASSERT_TRUE(w.server);
  RemoteBackend remote(opts(w.address(), 0.3));
  auto rec = std::make_shared<RecordingSink>();
  ASSERT_TRUE(remote.submit(request(), rec).is_ok());
  ASSERT_TRUE(rec->wait(10));
  ASSERT_TRUE(rec->error);
  EXPECT_EQ(rec->error->code(), StatusCode::Unavailable);
  EXPECT_NE(rec->error->message().find("in time"), std::string::npos) << rec->error->message();
}

TEST(RemoteBackend, DestructionCancelsCallsInFlight) {
  Worker w;
  ASSERT_TRUE(w.server);
  auto rec = std::make_shared<RecordingSink>();
  {
    RemoteBackend remote(opts(w.address()));
    for (int i = 0; i < 4; ++i) ASSERT_TRUE(remote.submit(request(), rec).is_ok());
    ASSERT_TRUE(w.backend.wait_live(4));
  }  // must not hang
  EXPECT_TRUE(rec->finish || rec->error);
}

TEST(RemoteBackend, UnaryCallsReachTheWorker) {
  Worker w;
  ASSERT_TRUE(w.server);
  RemoteBackend remote(opts(w.address()));
  auto t = remote.tokenize("m", "abcd", true);
  ASSERT_TRUE(t.is_ok());
  EXPECT_EQ(t->size(), 4u);
  auto plain = remote.tokenize("m", "abcd", true, /*parse_special=*/false);  // reaches the worker
  ASSERT_TRUE(plain.is_ok());
  EXPECT_EQ(plain->size(), 5u);
  auto pieces = remote.token_pieces("m", {1, 2});
  ASSERT_TRUE(pieces.is_ok());
  EXPECT_EQ(*pieces, (std::vector<std::string>{"p1", "p2"}));
  auto d = remote.detokenize("m", {1, 2, 3});
  ASSERT_TRUE(d.is_ok());
  EXPECT_EQ(*d, "qqq");
  auto missing = remote.detokenize("nope", {1});
  ASSERT_FALSE(missing.is_ok());
  EXPECT_EQ(missing.status().code(), StatusCode::NotFound);
  auto models = remote.models();
  ASSERT_EQ(models.size(), 1u);
  EXPECT_EQ(models[0].id, "m");
  EXPECT_EQ(remote.health().state, serving::HealthState::Ready);
}

// The whole controller path in one process: a ClusterBackend whose first
// worker is gone retries on the live one, and the dead one is dropped.
TEST(ClusterOverGrpc, UnreachableWorkerIsDroppedAndTheRequestRetried) {
  std::string dead;
  {
    Worker w;
    ASSERT_TRUE(w.server);
    dead = w.address();
  }
  Worker live;
  ASSERT_TRUE(live.server);
  Registry registry;
  v1::WorkerStatus st;
  st.set_state(v1::WorkerStatus::READY);
  st.add_models()->set_id("m");
  ASSERT_TRUE(registry.register_worker("dead", dead, st).is_ok());  // first: picked on the tie
  ASSERT_TRUE(registry.register_worker("live", live.address(), st).is_ok());
  ClusterOptions opt;
  opt.rpc_timeout_s = 2;
  auto rec = std::make_shared<RecordingSink>();
  {
    ClusterBackend cluster(registry, opt);
    ASSERT_TRUE(cluster.submit(request(), rec).is_ok());
    auto sink = live.backend.next_request();
    ASSERT_TRUE(sink) << "the request never reached the live worker";
    sink->on_token({1, "hi", 0, {}});
    serving::FinishEvent fin;
    fin.reason = "stop";
    sink->on_finish(fin);
    ASSERT_TRUE(rec->wait(10));
    EXPECT_EQ(rec->text, "hi");
    ASSERT_TRUE(rec->finish);
    EXPECT_FALSE(rec->error);
    auto workers = registry.list();
    ASSERT_EQ(workers.size(), 1u);
    EXPECT_EQ(workers[0].name, "live");
    EXPECT_EQ(cluster.in_flight(), 0);
  }
}

TEST(RemoteBackend, EmbedCarriesTheRequestAndTheVectors) {
  Worker w;
  ASSERT_TRUE(w.server);
  RemoteBackend remote(opts(w.address()));
  serving::EmbedRequest req;
  req.model = "m";
  req.inputs = {std::string("doc one"), std::vector<serving::Token>{4, 5, 6}};
  req.query = "what";
  req.normalize = false;
  auto rec = std::make_shared<RecordingEmbedSink>();
  ASSERT_TRUE(remote.embed(req, rec).is_ok());
  auto got = w.backend.next_embed();
  ASSERT_TRUE(got);
  EXPECT_EQ(got->first.model, "m");
  ASSERT_EQ(got->first.inputs.size(), 2u);
  EXPECT_EQ(std::get<std::string>(got->first.inputs[0]), "doc one");
  EXPECT_EQ(std::get<std::vector<serving::Token>>(got->first.inputs[1]),
            (std::vector<serving::Token>{4, 5, 6}));
  EXPECT_EQ(got->first.query, std::optional<std::string>("what"));
  EXPECT_FALSE(got->first.normalize);
  // Floats travel bit for bit.
  const std::vector<std::vector<float>> vectors = {{0.1f, -3.5e-7f, 1e30f}, {-0.0f}};
  got->second->on_done({vectors, 9});
  ASSERT_TRUE(rec->wait(10));
  ASSERT_TRUE(rec->result) << (rec->error ? rec->error->message() : "");
  EXPECT_EQ(rec->result->vectors, vectors);
  EXPECT_EQ(rec->result->prompt_tokens, 9);
  EXPECT_EQ(rec->answers, 1);
  for (int i = 0; i < 250 && remote.active_calls() > 0; ++i) std::this_thread::sleep_for(4ms);
  EXPECT_EQ(remote.active_calls(), 0);
}

TEST(RemoteBackend, EmbedRefusalKeepsItsCodeAndParam) {
  Worker w;
  ASSERT_TRUE(w.server);
  std::atomic<int> broken{0};
  RemoteBackend remote(opts(w.address(), 600, [&] { broken++; }));
  serving::EmbedRequest req;
  req.inputs = {std::string("bad")};
  auto rec = std::make_shared<RecordingEmbedSink>();
  ASSERT_TRUE(remote.embed(req, rec).is_ok());
  ASSERT_TRUE(rec->wait(10));
  ASSERT_TRUE(rec->error);
  EXPECT_EQ(rec->error->code(), StatusCode::InvalidArgument);
  EXPECT_EQ(rec->error->param(), "input");
  EXPECT_EQ(broken.load(), 0);
  // An empty request is refused by the worker's own check.
  auto empty = std::make_shared<RecordingEmbedSink>();
  ASSERT_TRUE(remote.embed(serving::EmbedRequest{}, empty).is_ok());
  ASSERT_TRUE(empty->wait(10));
  ASSERT_TRUE(empty->error);
  EXPECT_EQ(empty->error->code(), StatusCode::InvalidArgument);
}

TEST(RemoteBackend, EmbedCancelStopsTheRequestOnTheWorker) {
  Worker w;
  ASSERT_TRUE(w.server);
  RemoteBackend remote(opts(w.address()));
  serving::EmbedRequest req;
  req.inputs = {std::string("slow")};
  auto rec = std::make_shared<RecordingEmbedSink>();
  auto id = remote.embed(req, rec);
  ASSERT_TRUE(id.is_ok());
  ASSERT_TRUE(w.backend.wait_embeds(1));
  remote.cancel(*id);
  ASSERT_TRUE(rec->wait(10));
  ASSERT_TRUE(rec->error);
  EXPECT_EQ(rec->error->code(), StatusCode::Cancelled);
  for (int i = 0; i < 250 && w.backend.cancels() == 0; ++i) std::this_thread::sleep_for(20ms);
  EXPECT_EQ(w.backend.cancels(), 1);
  EXPECT_EQ(rec->answers, 1);
}

TEST(RemoteBackend, EmbedToAnUnreachableWorkerIsUnavailableAndBroken) {
  std::string address;
  {
    Worker w;
    ASSERT_TRUE(w.server);
    address = w.address();
  }
  std::atomic<int> broken{0};
  RemoteBackend remote(opts(address, 600, [&] { broken++; }));
  serving::EmbedRequest req;
  req.inputs = {std::string("x")};
  auto rec = std::make_shared<RecordingEmbedSink>();
  ASSERT_TRUE(remote.embed(req, rec).is_ok());
  ASSERT_TRUE(rec->wait(10));
  ASSERT_TRUE(rec->error);
  EXPECT_EQ(rec->error->code(), StatusCode::Unavailable);
  EXPECT_EQ(broken.load(), 1);
}

TEST(RemoteBackend, DestructionCancelsEmbedCallsInFlight) {
  Worker w;
  ASSERT_TRUE(w.server);
  auto rec = std::make_shared<RecordingEmbedSink>();
  {
    RemoteBackend remote(opts(w.address()));
    serving::EmbedRequest req;
    req.inputs = {std::string("slow")};
    ASSERT_TRUE(remote.embed(req, rec).is_ok());
    ASSERT_TRUE(w.backend.wait_embeds(1));
  }
  EXPECT_EQ(rec->answers, 1);  // answered before the destructor returned
}

TEST(ClusterOverGrpc, UnreachableWorkerIsDroppedAndTheEmbeddingRetried) {
  std::string dead;
  {
    Worker w;
    ASSERT_TRUE(w.server);
    dead = w.address();
  }
  Worker live;
  ASSERT_TRUE(live.server);
  Registry registry;
  v1::WorkerStatus st;
  st.set_state(v1::WorkerStatus::READY);
  auto* m = st.add_models();
  m->set_id("m");
  m->set_embeddings_only(true);
  ASSERT_TRUE(registry.register_worker("dead", dead, st).is_ok());  // first: picked on the tie
  ASSERT_TRUE(registry.register_worker("live", live.address(), st).is_ok());
  ClusterOptions opt;
  opt.rpc_timeout_s = 2;
  auto rec = std::make_shared<RecordingEmbedSink>();
  {
    ClusterBackend cluster(registry, opt);
    serving::EmbedRequest req;
    req.inputs = {std::string("x")};
    ASSERT_TRUE(cluster.embed(req, rec).is_ok());
    auto got = live.backend.next_embed();
    ASSERT_TRUE(got) << "the request never reached the live worker";
    got->second->on_done({{{0.5f, 0.5f}}, 1});
    ASSERT_TRUE(rec->wait(10));
    ASSERT_TRUE(rec->result);
    EXPECT_EQ(rec->result->vectors, (std::vector<std::vector<float>>{{0.5f, 0.5f}}));
    auto workers = registry.list();
    ASSERT_EQ(workers.size(), 1u);
    EXPECT_EQ(workers[0].name, "live");
    EXPECT_EQ(cluster.in_flight(), 0);
  }
}

}  // namespace
}  // namespace cairn::cluster
