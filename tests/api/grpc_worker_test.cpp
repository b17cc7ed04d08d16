// The Worker gRPC service end to end in one process: a LocalBackend on the
// demo model, the service on a port-0 GrpcServer, and a real channel.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "api/grpc_server.h"
#include "api/grpc_worker_service.h"
#include "cairn/v1/worker.grpc.pb.h"
#include "fake_backend.h"
#include "modelgen/demo_model.h"
#include "rpc/convert.h"
#include "serving/local_backend.h"
#include "served_worker.h"
#include "serving_test_util.h"
#include "test_util.h"

namespace cairn::api {
namespace {

using Clock = std::chrono::steady_clock;
using cairn::test::RecordingSink;

std::chrono::system_clock::time_point in_seconds(double s) {
  return std::chrono::system_clock::now() +
         std::chrono::duration_cast<std::chrono::system_clock::duration>(
             std::chrono::duration<double>(s));
}

// Polls `cond` until it holds or `seconds` pass (the backend offers no
// notification for "request freed").
template <class F>
bool eventually(F cond, double seconds = 20) {
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < end) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return cond();
}

class GrpcWorkerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto dir = ::cairn::test::temp_dir("grpc-worker");
    auto path = modelgen::ensure_demo_model(dir);
    ASSERT_TRUE(path.is_ok()) << path.status().message();
    serving::LocalBackendOptions o;
    o.model_path = *path;
    o.model_name = "demo";
    o.threads = 1;
    o.n_ctx = 512;
    auto b = serving::LocalBackend::create(o);
    ASSERT_TRUE(b.is_ok()) << b.status().message();
    backend_ = b.value().release();
  }
  static void TearDownTestSuite() {
    delete backend_;
    backend_ = nullptr;
  }

  void SetUp() override {
    ASSERT_NE(backend_, nullptr);
    ASSERT_TRUE(served_.start(*backend_).is_ok());
    stub_ = served_.stub.get();
  }
  void TearDown() override {
    served_.stop();
    // Every test leaves the engine idle for the next one.
    EXPECT_TRUE(eventually([] {
      auto h = backend_->health();
      return h.running == 0 && h.waiting == 0;
    }));
  }

  static v1::GenerateRequest request(const std::string& id, int max_tokens) {
    serving::GenerateRequest r;
    r.prompt = std::string("the quick brown fox");
    r.max_tokens = max_tokens;
    r.ignore_eos = true;
    r.sampling.temperature = 0;
    return rpc::to_proto(r, id);
  }

  static serving::LocalBackend* backend_;
  cairn::test::ServedWorker served_;
  v1::Worker::Stub* stub_ = nullptr;  // served_'s
};

serving::LocalBackend* GrpcWorkerTest::backend_ = nullptr;

TEST_F(GrpcWorkerTest, GenerateStreamsTheSameTokensAsTheBackend) {
  auto direct = std::make_shared<RecordingSink>();
  serving::GenerateRequest r;
  r.prompt = std::string("the quick brown fox");
  r.max_tokens = 12;
  r.ignore_eos = true;
  r.sampling.temperature = 0;
  ASSERT_TRUE(backend_->submit(r, direct).is_ok());
  ASSERT_TRUE(direct->wait());
  ASSERT_EQ(direct->reason(), "length");
  ASSERT_EQ(direct->ids().size(), 12u);

  grpc::ClientContext ctx;
  ctx.set_deadline(in_seconds(60));
  auto reader = stub_->Generate(&ctx, request("a", 12));
  v1::GenerateEvent ev;
  std::vector<serving::Token> ids;
  int finishes = 0;
  std::string reason;
  int completion_tokens = 0;
  while (reader->Read(&ev)) {
    ASSERT_EQ(finishes, 0) << "an event after the finish";
    if (ev.has_token()) ids.push_back(ev.token().id());
    if (ev.has_finish()) {
      ++finishes;
      reason = ev.finish().reason();
      completion_tokens = ev.finish().usage().completion_tokens();
    }
    ASSERT_FALSE(ev.has_error()) << ev.error().message();
  }
  grpc::Status st = reader->Finish();
  ASSERT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(finishes, 1);
  EXPECT_EQ(reason, "length");
  EXPECT_EQ(completion_tokens, 12);
  EXPECT_EQ(ids, direct->ids());
}

TEST_F(GrpcWorkerTest, BadRequestsGetInvalidArgument) {
  auto call = [&](const v1::GenerateRequest& req) {
    grpc::ClientContext ctx;
    ctx.set_deadline(in_seconds(30));
    auto reader = stub_->Generate(&ctx, req);
    v1::GenerateEvent ev;
    int events = 0;
    while (reader->Read(&ev)) ++events;
    EXPECT_EQ(events, 0);
    return reader->Finish();
  };
  v1::GenerateRequest no_prompt;  // no oneof set
  no_prompt.set_max_tokens(4);
  EXPECT_EQ(call(no_prompt).error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  v1::GenerateRequest bad_token = request("b", 4);
  bad_token.mutable_tokens()->add_ids(1 << 30);
  EXPECT_EQ(call(bad_token).error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  v1::GenerateRequest long_id = request(std::string(kMaxRequestIdBytes + 1, 'x'), 4);
  EXPECT_EQ(call(long_id).error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  v1::GenerateRequest unknown_model = request("c", 4);
  unknown_model.set_model("no-such-model");
  EXPECT_EQ(call(unknown_model).error_code(), grpc::StatusCode::NOT_FOUND);

  // The service still answers properly afterwards.
  v1::StatusRequest sreq;
  v1::WorkerStatus sres;
  grpc::ClientContext ctx;
  ctx.set_deadline(in_seconds(10));
  EXPECT_TRUE(stub_->Status(&ctx, sreq, &sres).ok());
}

// Cancellation against a backend that holds requests until told, so the
// timing of "still running" is the test's, not the demo model's speed.
class GrpcWorkerHoldTest : public ::testing::Test {
 protected:
  void SetUp() override {
    backend_.set_mode(test::FakeBackend::Mode::Hold);
    ASSERT_TRUE(served_.start(backend_).is_ok());
    stub_ = served_.stub.get();
  }
  void TearDown() override {
    backend_.release_all();
    served_.stop();
  }
  static v1::GenerateRequest request(const std::string& id) {
    v1::GenerateRequest r;
    r.set_request_id(id);
    r.set_text("hi");
    r.set_max_tokens(10);
    return r;
  }
  test::FakeBackend backend_;
  cairn::test::ServedWorker served_;
  v1::Worker::Stub* stub_ = nullptr;  // served_'s
};

TEST_F(GrpcWorkerHoldTest, ClientCancelFreesTheRequest) {
  grpc::ClientContext ctx;
  ctx.set_deadline(in_seconds(60));
  auto reader = stub_->Generate(&ctx, request("long"));
  ASSERT_TRUE(backend_.wait_held(1));
  ctx.TryCancel();
  v1::GenerateEvent ev;
  while (reader->Read(&ev)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(backend_.wait_cancelled(1));
  EXPECT_EQ(backend_.health().running, 0);
}

TEST_F(GrpcWorkerHoldTest, ClientDeadlineCancelsTheRequest) {
  grpc::ClientContext ctx;
  // Long enough for the call to reach the backend on a loaded machine.
  ctx.set_deadline(in_seconds(1.5));
  auto reader = stub_->Generate(&ctx, request("slow"));
  ASSERT_TRUE(backend_.wait_held(1));
  v1::GenerateEvent ev;
  while (reader->Read(&ev)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::DEADLINE_EXCEEDED);
  EXPECT_TRUE(backend_.wait_cancelled(1));
}

TEST_F(GrpcWorkerHoldTest, CancelByIdEndsTheStreamWithCancelled) {
  grpc::ClientContext ctx;
  ctx.set_deadline(in_seconds(60));
  auto reader = stub_->Generate(&ctx, request("victim"));
  ASSERT_TRUE(backend_.wait_held(1));

  v1::CancelRequest creq;
  creq.set_request_id("victim");
  v1::CancelResponse cres;
  {
    grpc::ClientContext cctx;
    cctx.set_deadline(in_seconds(10));
    ASSERT_TRUE(stub_->Cancel(&cctx, creq, &cres).ok());
  }
  EXPECT_TRUE(cres.found());
  v1::GenerateEvent ev;
  std::string reason;
  while (reader->Read(&ev)) {
    if (ev.has_finish()) reason = ev.finish().reason();
  }
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_EQ(reason, "cancelled");
  EXPECT_EQ(backend_.cancelled(), 1u);

  // Unknown (or finished) ids: found = false, still OK (idempotent).
  grpc::ClientContext cctx;
  cctx.set_deadline(in_seconds(10));
  ASSERT_TRUE(stub_->Cancel(&cctx, creq, &cres).ok());
  EXPECT_FALSE(cres.found());
}

TEST_F(GrpcWorkerHoldTest, DuplicateRunningRequestIdIsRefused) {
  grpc::ClientContext ctx;
  ctx.set_deadline(in_seconds(60));
  auto reader = stub_->Generate(&ctx, request("dup"));
  ASSERT_TRUE(backend_.wait_held(1));
  v1::GenerateEvent ev;
  {
    grpc::ClientContext ctx2;
    ctx2.set_deadline(in_seconds(30));
    auto second = stub_->Generate(&ctx2, request("dup"));
    while (second->Read(&ev)) {
    }
    EXPECT_EQ(second->Finish().error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  }
  EXPECT_EQ(backend_.submitted(), 1u);
  backend_.release_all();
  int tokens = 0;
  while (reader->Read(&ev)) tokens += ev.has_token();
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_EQ(tokens, 2);
}

TEST_F(GrpcWorkerHoldTest, SubmitErrorsBecomeTheCallStatus) {
  backend_.set_mode(test::FakeBackend::Mode::Refuse);
  grpc::ClientContext ctx;
  ctx.set_deadline(in_seconds(10));
  auto reader = stub_->Generate(&ctx, request("x"));
  v1::GenerateEvent ev;
  EXPECT_FALSE(reader->Read(&ev));
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::UNAVAILABLE);
}

TEST_F(GrpcWorkerHoldTest, ShutdownCancelsRunningCallsAfterTheGrace) {
  grpc::ClientContext ctx;
  ctx.set_deadline(in_seconds(60));
  auto reader = stub_->Generate(&ctx, request("held"));
  ASSERT_TRUE(backend_.wait_held(1));
  const auto t0 = Clock::now();
  served_.server->shutdown(0.2);
  EXPECT_LT(Clock::now() - t0, std::chrono::seconds(5));
  EXPECT_TRUE(backend_.wait_cancelled(1));
  v1::GenerateEvent ev;
  while (reader->Read(&ev)) {
  }
  EXPECT_FALSE(reader->Finish().ok());
}

TEST_F(GrpcWorkerTest, StatusReportsModelAndLoad) {
  v1::StatusRequest req;
  v1::WorkerStatus st;
  grpc::ClientContext ctx;
  ctx.set_deadline(in_seconds(10));
  ASSERT_TRUE(stub_->Status(&ctx, req, &st).ok());
  ASSERT_EQ(st.models_size(), 1);
  EXPECT_EQ(st.models(0).id(), "demo");
  EXPECT_EQ(st.models(0).n_ctx(), 512);
  EXPECT_EQ(st.state(), v1::WorkerStatus::READY);
  EXPECT_GT(st.kv_blocks_total(), 0);
}

TEST_F(GrpcWorkerTest, TokenizeAndDetokenizeRoundTrip) {
  auto direct = backend_->tokenize("", "hello world", true);
  ASSERT_TRUE(direct.is_ok());
  v1::TokenizeRequest treq;
  treq.set_text("hello world");
  treq.set_add_special(true);
  v1::TokenizeResponse tres;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(in_seconds(10));
    ASSERT_TRUE(stub_->Tokenize(&ctx, treq, &tres).ok());
  }
  EXPECT_FALSE(tres.has_error());
  EXPECT_EQ(std::vector<serving::Token>(tres.tokens().begin(), tres.tokens().end()), *direct);

  v1::DetokenizeRequest dreq;
  for (auto t : tres.tokens()) dreq.add_tokens(t);
  v1::DetokenizeResponse dres;
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(in_seconds(10));
    ASSERT_TRUE(stub_->Detokenize(&ctx, dreq, &dres).ok());
  }
  EXPECT_FALSE(dres.has_error());
  EXPECT_NE(dres.text().find("hello world"), std::string::npos) << dres.text();

  // pieces: one per token, the text's bytes (BOS rendered).
  {
    v1::DetokenizeRequest preq = dreq;
    preq.set_pieces(true);
    v1::DetokenizeResponse pres;
    grpc::ClientContext ctx;
    ctx.set_deadline(in_seconds(10));
    ASSERT_TRUE(stub_->Detokenize(&ctx, preq, &pres).ok());
    EXPECT_FALSE(pres.has_error());
    ASSERT_EQ(pres.pieces_size(), tres.tokens_size());
    std::string joined;
    for (const auto& p : pres.pieces()) joined += p;
    EXPECT_NE(joined.find("hello world"), std::string::npos) << joined;
  }

  // A bad model or token is an error in the response, not a broken call.
  treq.set_model("no-such-model");
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(in_seconds(10));
    ASSERT_TRUE(stub_->Tokenize(&ctx, treq, &tres).ok());
  }
  EXPECT_TRUE(tres.has_error());
  EXPECT_EQ(tres.error().kind(), v1::Error::NOT_FOUND);
  dreq.add_tokens(-5);
  {
    grpc::ClientContext ctx;
    ctx.set_deadline(in_seconds(10));
    ASSERT_TRUE(stub_->Detokenize(&ctx, dreq, &dres).ok());
  }
  EXPECT_TRUE(dres.has_error());
}

TEST(GrpcServerTest, PortInUseAndBadAddressesAreErrors) {
  test::FakeBackend backend;
  auto service = make_worker_service(backend);
  EXPECT_FALSE(GrpcServer::start(GrpcServerOptions{}, {}).is_ok());
  auto first = GrpcServer::start(GrpcServerOptions{}, {service.get()});
  ASSERT_TRUE(first.is_ok()) << first.status().message();
  const int port = (*first)->port();
  ASSERT_GT(port, 0);
  GrpcServerOptions again;
  again.address = "127.0.0.1:" + std::to_string(port);
  auto second = GrpcServer::start(again, {service.get()});
  ASSERT_FALSE(second.is_ok());
  EXPECT_NE(second.status().message().find(again.address), std::string::npos);

  for (const char* bad : {"", "localhost", "127.0.0.1:", "127.0.0.1:99999", "http://x:1",
                          "127.0.0.1:12a", "::1:80"}) {
    GrpcServerOptions o;
    o.address = bad;
    auto s = GrpcServer::start(o, {service.get()});
    EXPECT_FALSE(s.is_ok()) << bad;
  }
  GrpcServerOptions unbindable;
  unbindable.address = "192.0.2.1:0";  // TEST-NET: not an address of this host
  EXPECT_FALSE(GrpcServer::start(unbindable, {service.get()}).is_ok());
  (*first)->shutdown(0);
  (*first)->shutdown(0);  // idempotent
}

TEST(GrpcServerTest, SplitHostPort) {
  std::string host;
  int port = -1;
  ASSERT_TRUE(split_host_port("[::1]:8080", &host, &port));
  EXPECT_EQ(host, "[::1]");
  EXPECT_EQ(port, 8080);
  ASSERT_TRUE(split_host_port("localhost:0", &host, &port));
  EXPECT_EQ(host, "localhost");
  EXPECT_EQ(port, 0);
  EXPECT_FALSE(split_host_port("[::1:80", &host, &port));
  EXPECT_FALSE(split_host_port(":80", &host, &port));
}

}  // namespace
}  // namespace cairn::api
