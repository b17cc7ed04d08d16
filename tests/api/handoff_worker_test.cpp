// Prefill → decode handoff between two Worker services in one process: each a
// LocalBackend on the demo model behind a port-0 GrpcServer, talking over
// real channels. The prefill worker pushes a request's K/V rows to the
// decode worker (PushKv), which resumes it; and every refusal of PushKv.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "api/grpc_server.h"
#include "api/grpc_worker_service.h"
#include "cairn/v1/worker.grpc.pb.h"
#include "modelgen/demo_model.h"
#include "rpc/convert.h"
#include "serving/handoff_store.h"
#include "serving/local_backend.h"
#include "served_worker.h"
#include "test_util.h"

namespace cairn::api {
namespace {

using Clock = std::chrono::steady_clock;

std::chrono::system_clock::time_point in_seconds(double s) {
  return std::chrono::system_clock::now() +
         std::chrono::duration_cast<std::chrono::system_clock::duration>(
             std::chrono::duration<double>(s));
}

template <class F>
bool eventually(F cond, double seconds = 20) {
  const auto end = Clock::now() + std::chrono::duration<double>(seconds);
  while (Clock::now() < end) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return cond();
}

const std::string& demo_path() {
  static const std::string path = [] {
    auto p = modelgen::ensure_demo_model(::cairn::test::temp_dir("handoff-worker"));
    EXPECT_TRUE(p.is_ok()) << p.status().message();
    return p.is_ok() ? *p : std::string();
  }();
  return path;
}

// One worker: backend, counters, (decode side) store, service and server.
struct Worker {
  std::unique_ptr<serving::LocalBackend> backend;
  serving::HandoffCounters counters;
  std::unique_ptr<serving::HandoffStore> store;
  cairn::test::ServedWorker served;
  // served's, for short
  std::string address;
  v1::Worker::Stub* stub = nullptr;

  Worker(const std::string& role, int64_t chunk_bytes = 0, const std::string& model = {}) {
    serving::LocalBackendOptions o;
    o.model_path = model.empty() ? demo_path() : model;
    o.model_name = "demo";
    o.threads = 1;
    o.n_ctx = model.empty() ? 512 : 0;  // 0: the model's
    auto b = serving::LocalBackend::create(o);
    EXPECT_TRUE(b.is_ok()) << b.status().message();
    if (!b.is_ok()) return;
    backend = std::move(*b);
    if (role != "prefill")
      store = std::make_unique<serving::HandoffStore>(*backend, serving::HandoffStoreOptions{},
                                                      &counters);
    WorkerServiceOptions wo;
    wo.handoff_store = store.get();
    wo.handoff_counters = &counters;
    wo.role = role;
    wo.handoff_timeout_ms = 20000;
    if (chunk_bytes > 0) wo.kv_push_chunk_bytes = chunk_bytes;
    const Status started = served.start(*backend, wo);
    EXPECT_TRUE(started.is_ok()) << started.message();
    address = served.address;
    stub = served.stub.get();
  }
  ~Worker() { served.stop(); }
  kv::KvGeometry geometry() const { return *backend->kv_geometry(""); }
};

struct Outcome {
  std::vector<serving::Token> ids;
  std::string text;
  std::optional<v1::FinishEvent> finish;
  std::optional<v1::Error> error;
  grpc::Status status;
};

Outcome generate(Worker& w, const serving::GenerateRequest& r) {
  grpc::ClientContext ctx;
  ctx.set_deadline(in_seconds(60));
  auto reader = w.stub->Generate(&ctx, rpc::to_proto(r, ""));
  Outcome out;
  v1::GenerateEvent ev;
  while (reader->Read(&ev)) {
    if (ev.has_token()) {
      out.ids.push_back(ev.token().id());
      out.text += ev.token().text();
    }
    if (ev.has_finish()) {
      out.finish = ev.finish();
      out.text += ev.finish().text();
    }
    if (ev.has_error()) out.error = ev.error();
  }
  out.status = reader->Finish();
  return out;
}

serving::GenerateRequest greedy(int max_tokens) {
  serving::GenerateRequest r;
  // Longer than one 16-token block, so the rows come in several runs.
  r.prompt = std::string(
      "the quick brown fox jumps over the lazy dog while the cat sleeps on the warm mat and "
      "the bird sings in the tall tree");
  r.max_tokens = max_tokens;
  r.ignore_eos = true;
  r.sampling.temperature = 0;
  return r;
}

// Pushes raw messages to `w`'s PushKv and returns the reply (status in `st`).
v1::KvPushReply push(Worker& w, const std::vector<v1::KvPush>& msgs, grpc::Status* st = nullptr) {
  grpc::ClientContext ctx;
  ctx.set_deadline(in_seconds(30));
  v1::KvPushReply reply;
  auto writer = w.stub->PushKv(&ctx, &reply);
  for (const auto& m : msgs)
    if (!writer->Write(m)) break;
  writer->WritesDone();
  grpc::Status s = writer->Finish();
  if (st) *st = s;
  EXPECT_TRUE(s.ok()) << s.error_message();
  return reply;
}

v1::KvPush first_msg(const std::string& id, const kv::KvGeometry& g,
                     std::vector<serving::Token> prompt, int32_t n, bool last) {
  v1::KvPush m;
  m.set_handoff_id(id);
  *m.mutable_header() = rpc::to_proto(rpc::KvHeader{"demo", g, std::move(prompt)});
  m.set_first(0);
  m.set_n(n);
  m.set_rows(std::string((size_t)g.bytes_for(n), '\0'));
  m.set_last(last);
  return m;
}

// Byte `o` of layer `l`'s K (t = 0) or V (t = 1) row at position `pos`: every
// byte says where it belongs, so a run reassembled wrongly shows.
uint8_t row_byte(int l, int t, int pos, int64_t o) {
  return (uint8_t)((l * 13 + t * 7 + pos * 3 + o) & 0xff);
}

kv::KvRows make_rows(const kv::KvGeometry& g, int32_t first, int32_t n) {
  kv::KvRows r;
  r.first = first;
  r.n = n;
  const int64_t rb = g.row_bytes();
  r.bytes.resize((size_t)g.bytes_for(n));
  for (int l = 0; l < g.n_layer; ++l)
    for (int t = 0; t < 2; ++t)
      for (int j = 0; j < n; ++j)
        for (int64_t o = 0; o < rb; ++o)
          r.bytes[(size_t)(((int64_t)l * 2 + t) * n * rb + j * rb + o)] =
              row_byte(l, t, first + j, o);
  return r;
}

bool rows_are_right(const kv::KvGeometry& g, const kv::KvRows& r) {
  const int64_t rb = g.row_bytes();
  for (int l = 0; l < g.n_layer; ++l)
    for (int t = 0; t < 2; ++t)
      for (int j = 0; j < r.n; ++j)
        for (int64_t o = 0; o < rb; ++o)
          if ((uint8_t)r.bytes[(size_t)(((int64_t)l * 2 + t) * r.n * rb + j * rb + o)] !=
              row_byte(l, t, r.first + j, o))
            return false;
  return true;
}

// The engine's side of a handoff without the engine: a token-prompt request
// with `handoff` gets runs [0, 16), [16, 32), its one token, the rest of the
// rows and a "handoff" finish (or, with end_at_first, a "length" finish
// after two runs and the token), all from submit.
class ExportingBackend final : public serving::Backend {
 public:
  explicit ExportingBackend(kv::KvGeometry g) : g_(g) {}
  bool end_at_first = false;

  Result<serving::RequestId> submit(serving::GenerateRequest req,
                                    std::shared_ptr<serving::EventSink> sink) override {
    auto prompt = std::get<std::vector<serving::Token>>(req.prompt);
    const int32_t n = (int32_t)prompt.size();
    if (req.handoff) {
      kv::KvRun first{g_, prompt, make_rows(g_, 0, std::min(16, n))};
      sink->on_kv(std::move(first));
      if (n > 16) sink->on_kv(kv::KvRun{{}, {}, make_rows(g_, 16, std::min(16, n - 16))});
    }
    sink->on_token(serving::TokenEvent{7, "x", 0, {}});
    serving::FinishEvent f;
    if (end_at_first) {
      f.reason = "length";
    } else {
      if (req.handoff && n > 32) sink->on_kv(kv::KvRun{{}, {}, make_rows(g_, 32, n - 32)});
      f.reason = req.handoff ? "handoff" : "length";
    }
    sink->on_finish(f);
    return ++id_;
  }
  void cancel(serving::RequestId) override {}
  std::vector<serving::ModelInfo> models() const override { return {}; }
  serving::Health health() const override { return {}; }
  serving::BackendStats stats() const override { return {}; }
  Result<std::vector<serving::Token>> tokenize(const std::string&, const std::string&, bool,
                                               bool) const override {
    return Status::internal("unused");
  }
  Result<std::string> detokenize(const std::string&,
                                 const std::vector<serving::Token>&) const override {
    return Status::internal("unused");
  }
  void start_draining() override {}

 private:
  kv::KvGeometry g_;
  serving::RequestId id_ = 0;
};

// The prefill side's service over a backend that exports like the engine:
// the runs reach the decode worker split into small messages and are
// reassembled there byte for byte; the token reaches the caller first.
TEST(HandoffWorker, PushedRowsArriveWholeAndInOrder) {
  Worker d("decode");
  ASSERT_TRUE(d.stub);
  const kv::KvGeometry g = d.geometry();
  ExportingBackend fake(g);
  serving::HandoffCounters counters;
  WorkerServiceOptions wo;
  wo.handoff_counters = &counters;
  wo.role = "prefill";
  wo.kv_push_chunk_bytes = g.bytes_for(5);  // 5 positions a message
  cairn::test::ServedWorker served;
  ASSERT_TRUE(served.start(fake, wo).is_ok());
  v1::Worker::Stub* stub = served.stub.get();

  std::vector<serving::Token> prompt(40);
  for (int i = 0; i < 40; ++i) prompt[i] = i + 1;
  serving::GenerateRequest r;
  r.model = "demo";
  r.prompt = prompt;
  r.handoff = serving::GenerateRequest::Handoff{d.address, "pushed"};
  grpc::ClientContext ctx;
  ctx.set_deadline(in_seconds(30));
  auto reader = stub->Generate(&ctx, rpc::to_proto(r, ""));
  v1::GenerateEvent ev;
  std::vector<std::string> kinds;
  std::string handoff_error = "<none>";
  while (reader->Read(&ev)) {
    if (ev.has_token()) kinds.push_back("token");
    if (ev.has_finish()) {
      kinds.push_back(ev.finish().reason());
      handoff_error = ev.finish().handoff_error();
    }
    if (ev.has_error()) kinds.push_back("error: " + ev.error().message());
  }
  ASSERT_TRUE(reader->Finish().ok());
  EXPECT_EQ(kinds, (std::vector<std::string>{"token", "handoff"}));
  EXPECT_EQ(handoff_error, "");

  auto taken = d.store->take("pushed");
  ASSERT_TRUE(taken.is_ok()) << taken.status().message();
  const kv::ImportedKv& kv = **taken;
  EXPECT_EQ(kv.prompt, prompt);
  EXPECT_TRUE(kv.check().is_ok());
  EXPECT_EQ(kv.runs.size(), 10u);  // 16 = 5+5+5+1, 16 likewise, 8 = 5+3
  for (const auto& run : kv.runs) EXPECT_TRUE(rows_are_right(g, run)) << run.first << "+" << run.n;
  const auto cs = counters.snapshot();
  EXPECT_EQ(cs.sent, 1u);
  EXPECT_EQ(cs.bytes_sent, (uint64_t)g.bytes_for(40));
  EXPECT_EQ(cs.seconds.count, 1u);
  EXPECT_EQ(d.counters.snapshot().received, 1u);
  EXPECT_EQ(d.counters.snapshot().bytes_received, (uint64_t)g.bytes_for(40));

  // Ended at the first token: the push is cancelled and D drops its part.
  fake.end_at_first = true;
  r.handoff->id = "cut";
  grpc::ClientContext ctx2;
  ctx2.set_deadline(in_seconds(30));
  auto reader2 = stub->Generate(&ctx2, rpc::to_proto(r, ""));
  std::string reason;
  while (reader2->Read(&ev))
    if (ev.has_finish()) reason = ev.finish().reason();
  ASSERT_TRUE(reader2->Finish().ok());
  EXPECT_EQ(reason, "length");
  EXPECT_TRUE(eventually([&] { return d.store->size() == 0; }));
  EXPECT_EQ(d.store->take("cut").status().code(), StatusCode::NotFound);
  EXPECT_EQ(counters.snapshot().sent, 1u);
  EXPECT_EQ(counters.snapshot().send_failed, 0u);

  // A decode worker that refuses (a model it does not serve): the Generate
  // call still succeeds, the finish says why.
  fake.end_at_first = false;
  r.model = "other";
  r.handoff->id = "refused";
  grpc::ClientContext ctx3;
  ctx3.set_deadline(in_seconds(30));
  auto reader3 = stub->Generate(&ctx3, rpc::to_proto(r, ""));
  handoff_error.clear();
  kinds.clear();
  while (reader3->Read(&ev)) {
    if (ev.has_token()) kinds.push_back("token");
    if (ev.has_finish()) {
      kinds.push_back(ev.finish().reason());
      handoff_error = ev.finish().handoff_error();
    }
  }
  ASSERT_TRUE(reader3->Finish().ok());
  EXPECT_EQ(kinds, (std::vector<std::string>{"token", "handoff"}));
  EXPECT_NE(handoff_error.find("refused"), std::string::npos) << handoff_error;
  EXPECT_NE(handoff_error.find("other"), std::string::npos) << handoff_error;
  EXPECT_EQ(counters.snapshot().send_failed, 1u);
  EXPECT_EQ(d.store->size(), 0u);

  // An unreachable decode worker: the same, and quickly.
  r.model = "demo";
  r.handoff->peer = "127.0.0.1:1";
  grpc::ClientContext ctx4;
  ctx4.set_deadline(in_seconds(30));
  auto reader4 = stub->Generate(&ctx4, rpc::to_proto(r, ""));
  handoff_error.clear();
  while (reader4->Read(&ev))
    if (ev.has_finish()) handoff_error = ev.finish().handoff_error();
  ASSERT_TRUE(reader4->Finish().ok());
  EXPECT_NE(handoff_error, "");
  EXPECT_EQ(handoff_error.find('\n'), std::string::npos);
  EXPECT_EQ(counters.snapshot().send_failed, 2u);
}

// The whole feature: prefill on P, the rows pushed to D, decode on D; the
// tokens and text together are those of one worker doing it all.
// Needs the engine's export/import (EngineRequest::export_kv, import_kv).
TEST(HandoffWorker, PrefillThenDecodeEqualsOneWorker) {
  Worker d("decode");
  ASSERT_TRUE(d.stub);
  // Three positions a message: every run is split over several.
  Worker p("prefill", d.geometry().bytes_for(3));
  ASSERT_TRUE(p.stub);

  const int kMax = 12;
  Outcome whole = generate(d, greedy(kMax));
  ASSERT_TRUE(whole.status.ok()) << whole.status.error_message();
  ASSERT_EQ(whole.ids.size(), (size_t)kMax);

  serving::GenerateRequest pre = greedy(kMax);
  pre.handoff = serving::GenerateRequest::Handoff{d.address, "h-1"};
  Outcome first = generate(p, pre);
  ASSERT_TRUE(first.status.ok()) << first.status.error_message();
  ASSERT_FALSE(first.error) << first.error->message();
  ASSERT_TRUE(first.finish);
  ASSERT_EQ(first.finish->reason(), "handoff") << "the engine did not hand the request off";
  EXPECT_EQ(first.finish->handoff_error(), "");
  ASSERT_EQ(first.ids.size(), 1u);
  EXPECT_EQ(first.ids[0], whole.ids[0]);
  EXPECT_EQ(d.store->size(), 1u);

  serving::GenerateRequest dec = greedy(kMax);
  dec.resume = serving::GenerateRequest::Resume{};
  dec.resume->handoff_id = "h-1";
  dec.resume->forced = first.ids;
  Outcome rest = generate(d, dec);
  ASSERT_TRUE(rest.status.ok()) << rest.status.error_message();
  ASSERT_FALSE(rest.error) << rest.error->message();
  ASSERT_TRUE(rest.finish);
  EXPECT_EQ(rest.finish->reason(), "length");
  std::vector<serving::Token> joined = first.ids;
  joined.insert(joined.end(), rest.ids.begin(), rest.ids.end());
  EXPECT_EQ(joined, whole.ids);
  EXPECT_EQ(first.text + rest.text, whole.text);
  EXPECT_EQ(d.store->size(), 0u);

  const auto ps = p.counters.snapshot();
  const auto ds = d.counters.snapshot();
  EXPECT_EQ(ps.sent, 1u);
  EXPECT_EQ(ps.send_failed, 0u);
  EXPECT_GT(ps.bytes_sent, 0u);
  EXPECT_EQ(ps.seconds.count, 1u);
  EXPECT_EQ(ds.received, 1u);
  EXPECT_EQ(ds.bytes_received, ps.bytes_sent);
  EXPECT_EQ(ds.resumed, 1u);
  EXPECT_EQ(ds.expired, 0u);

  // Taken once: a second resume of the same id finds nothing.
  Outcome again = generate(d, dec);
  EXPECT_EQ(again.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(again.status.error_message().find("not found"), std::string::npos);
}

// One request through P then D, against the same request on D alone: the
// tokens and text together must be the same.
void expect_handoff_matches(Worker& p, Worker& d, serving::GenerateRequest r,
                            const std::string& id) {
  Outcome whole = generate(d, r);
  ASSERT_TRUE(whole.status.ok()) << whole.status.error_message();
  ASSERT_TRUE(whole.finish);
  serving::GenerateRequest pre = r;
  pre.handoff = serving::GenerateRequest::Handoff{d.address, id};
  Outcome first = generate(p, pre);
  ASSERT_TRUE(first.status.ok()) << first.status.error_message();
  ASSERT_TRUE(first.finish);
  if (whole.ids.size() <= 1) {  // ended at its first token: nothing to hand off
    EXPECT_EQ(first.ids, whole.ids);
    return;
  }
  ASSERT_EQ(first.finish->reason(), "handoff") << "the engine did not hand the request off";
  ASSERT_EQ(first.finish->handoff_error(), "");
  ASSERT_EQ(first.ids.size(), 1u);
  serving::GenerateRequest dec = r;
  dec.resume = serving::GenerateRequest::Resume{};
  dec.resume->handoff_id = id;
  dec.resume->forced = first.ids;
  Outcome rest = generate(d, dec);
  ASSERT_TRUE(rest.status.ok()) << rest.status.error_message();
  ASSERT_TRUE(rest.finish);
  EXPECT_EQ(rest.finish->reason(), whole.finish->reason());
  std::vector<serving::Token> joined = first.ids;
  joined.insert(joined.end(), rest.ids.begin(), rest.ids.end());
  EXPECT_EQ(joined, whole.ids);
  EXPECT_EQ(first.text + rest.text, whole.text);
}

// The same on a real model and tokenizer (stories260K, when ../shared has
// it): greedy, and seeded sampling (the decode side replays the first
// token's random draw). Needs the engine's export/import.
TEST(HandoffWorker, StoriesThroughTheHandoffEqualOneWorker) {
  auto shared = ::cairn::test::shared_dir();
  if (!shared || !std::filesystem::exists(*shared / "models" / "stories260K.gguf"))
    GTEST_SKIP() << "no ../shared/models/stories260K.gguf";
  const std::string model = (*shared / "models" / "stories260K.gguf").string();
  Worker d("decode", 0, model);
  ASSERT_TRUE(d.stub);
  Worker p("prefill", 0, model);
  ASSERT_TRUE(p.stub);
  serving::GenerateRequest r;
  r.prompt = std::string(
      "Once upon a time, there was a little girl named Lily. She loved to play outside in the "
      "park with her friends. One day, she saw a big");
  r.max_tokens = 40;
  r.sampling.temperature = 0;
  expect_handoff_matches(p, d, r, "greedy");
  r.sampling.temperature = 0.9f;
  r.sampling.top_p = 0.95f;
  r.sampling.seed = 1234;
  expect_handoff_matches(p, d, r, "seeded");
  r.stop = {"."};
  expect_handoff_matches(p, d, r, "stop");
  EXPECT_EQ(d.store->size(), 0u);
}

// Many handoffs at once between the same two workers: each request's rows go
// to its own transfer and every output matches. Needs the engine's export/import.
TEST(HandoffWorker, ConcurrentHandoffsStayApart) {
  Worker d("decode");
  ASSERT_TRUE(d.stub);
  Worker p("prefill", d.geometry().bytes_for(7));
  ASSERT_TRUE(p.stub);
  const char* kPrompts[] = {"the quick brown fox", "a cat sat on the mat and looked at the dog",
                            "one two three four five six seven eight nine ten eleven twelve",
                            "hello world"};
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i)
    threads.emplace_back([&, i] {
      serving::GenerateRequest r = greedy(10);
      r.prompt = std::string(kPrompts[i % 4]) + " " + std::to_string(i);
      expect_handoff_matches(p, d, r, "c" + std::to_string(i));
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(d.store->size(), 0u);
  EXPECT_EQ(p.counters.snapshot().sent, 8u);
  EXPECT_EQ(d.counters.snapshot().resumed, 8u);
}

// A decode worker that cannot be reached: the first token still reaches the
// caller and the handoff's finish says why the rows did not arrive.
// Needs the engine's export.
TEST(HandoffWorker, UnreachablePeerIsReportedAtTheFinish) {
  Worker p("prefill");
  ASSERT_TRUE(p.stub);
  serving::GenerateRequest pre = greedy(8);
  pre.handoff = serving::GenerateRequest::Handoff{"127.0.0.1:1", "h-x"};
  Outcome first = generate(p, pre);
  ASSERT_TRUE(first.status.ok()) << first.status.error_message();
  ASSERT_TRUE(first.finish);
  ASSERT_EQ(first.finish->reason(), "handoff") << "the engine did not hand the request off";
  EXPECT_EQ(first.ids.size(), 1u);
  EXPECT_NE(first.finish->handoff_error(), "");
  EXPECT_EQ(first.finish->handoff_error().find('\n'), std::string::npos);
  EXPECT_EQ(p.counters.snapshot().send_failed, 1u);
  EXPECT_EQ(p.counters.snapshot().sent, 0u);
}

// A request that ends at its first token needs no decode worker: whatever
// was pushed is cancelled and dropped there.
TEST(HandoffWorker, RequestEndingAtTheFirstTokenLeavesNothingBehind) {
  Worker d("decode");
  ASSERT_TRUE(d.stub);
  Worker p("prefill");
  ASSERT_TRUE(p.stub);
  serving::GenerateRequest pre = greedy(1);
  pre.handoff = serving::GenerateRequest::Handoff{d.address, "h-2"};
  Outcome first = generate(p, pre);
  ASSERT_TRUE(first.status.ok()) << first.status.error_message();
  ASSERT_TRUE(first.finish);
  EXPECT_EQ(first.finish->reason(), "length");
  EXPECT_EQ(first.finish->handoff_error(), "");
  EXPECT_TRUE(eventually([&] { return d.store->size() == 0; }));
  EXPECT_EQ(p.counters.snapshot().sent, 0u);
}

TEST(HandoffWorker, GeometryMismatchIsRefusedNamingTheField) {
  Worker d("decode");
  ASSERT_TRUE(d.stub);
  kv::KvGeometry g = d.geometry();
  g.n_layer += 1;
  auto reply = push(d, {first_msg("g", g, {1, 2}, 2, true)});
  ASSERT_TRUE(reply.has_error());
  EXPECT_EQ(reply.error().kind(), v1::Error::INVALID_REQUEST);
  EXPECT_NE(reply.error().message().find("layer count"), std::string::npos)
      << reply.error().message();
  EXPECT_EQ(d.store->size(), 0u);
  EXPECT_EQ(d.counters.snapshot().expired, 1u);
}

TEST(HandoffWorker, PushKvRefusesMalformedStreamsAndKeepsNothing) {
  Worker d("decode");
  ASSERT_TRUE(d.stub);
  const kv::KvGeometry g = d.geometry();

  // No header first.
  v1::KvPush bare;
  bare.set_n(1);
  EXPECT_TRUE(push(d, {bare}).has_error());
  // The stream ends before `last`.
  auto r = push(d, {first_msg("a", g, {1, 2, 3}, 1, false)});
  ASSERT_TRUE(r.has_error());
  EXPECT_NE(r.error().message().find("last"), std::string::npos) << r.error().message();
  // Bytes that do not match the positions.
  v1::KvPush m = first_msg("b", g, {1, 2}, 2, true);
  m.mutable_rows()->pop_back();
  EXPECT_TRUE(push(d, {m}).has_error());
  // n = 0, a gap, a header again, rows after `last`.
  m = first_msg("c", g, {1, 2}, 0, false);
  m.clear_rows();
  EXPECT_TRUE(push(d, {m}).has_error());
  v1::KvPush next;
  next.set_first(2);
  next.set_n(1);
  next.set_rows(std::string((size_t)g.bytes_for(1), '\0'));
  EXPECT_TRUE(push(d, {first_msg("d", g, {1, 2, 3, 4}, 1, false), next}).has_error());
  v1::KvPush again = first_msg("e", g, {1, 2}, 1, false);
  again.set_first(1);
  EXPECT_TRUE(push(d, {first_msg("e", g, {1, 2}, 1, false), again}).has_error());
  next.set_first(2);
  EXPECT_TRUE(push(d, {first_msg("f", g, {1, 2}, 2, true), next}).has_error());
  // A negative token id in the header's prompt.
  EXPECT_TRUE(push(d, {first_msg("h", g, {1, -2}, 2, true)}).has_error());
  EXPECT_EQ(d.store->size(), 0u);
  EXPECT_EQ(d.store->bytes(), 0);

  // And a sound one is kept, in two messages.
  v1::KvPush tail;
  tail.set_first(1);
  tail.set_n(2);
  tail.set_rows(std::string((size_t)g.bytes_for(2), '\0'));
  tail.set_last(true);
  r = push(d, {first_msg("ok", g, {1, 2, 3}, 1, false), tail});
  EXPECT_FALSE(r.has_error()) << r.error().message();
  EXPECT_EQ(r.bytes(), g.bytes_for(3));
  EXPECT_EQ(d.store->size(), 1u);
  // "f" was whole before its extra message, then dropped.
  EXPECT_EQ(d.counters.snapshot().received, 2u);
}

TEST(HandoffWorker, ResumeTakesTheRowsOnceAndRolesAreEnforced) {
  Worker d("decode");
  ASSERT_TRUE(d.stub);
  const kv::KvGeometry g = d.geometry();
  // Rows of another prompt: taken, then left unused (the prompt is recomputed).
  auto r = push(d, {first_msg("r", g, {1, 2, 3}, 3, true)});
  ASSERT_FALSE(r.has_error()) << r.error().message();
  serving::GenerateRequest dec = greedy(4);
  dec.resume = serving::GenerateRequest::Resume{};
  dec.resume->handoff_id = "r";
  dec.resume->forced = {5};
  Outcome out = generate(d, dec);
  ASSERT_TRUE(out.status.ok()) << out.status.error_message();
  ASSERT_TRUE(out.finish);
  EXPECT_EQ(d.store->size(), 0u);
  EXPECT_EQ(d.counters.snapshot().resumed, 1u);
  out = generate(d, dec);
  EXPECT_EQ(out.status.error_code(), grpc::StatusCode::UNAVAILABLE);
  EXPECT_NE(out.status.error_message().find("handoff r not found"), std::string::npos);
  // Without an id the request resumes by recomputing.
  dec.resume->handoff_id.clear();
  out = generate(d, dec);
  EXPECT_TRUE(out.status.ok()) << out.status.error_message();
  // A decode worker hands nothing off.
  serving::GenerateRequest pre = greedy(4);
  pre.handoff = serving::GenerateRequest::Handoff{"127.0.0.1:1", "z"};
  EXPECT_EQ(generate(d, pre).status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);

  // A prefill worker keeps no rows.
  Worker p("prefill");
  ASSERT_TRUE(p.stub);
  r = push(p, {first_msg("p", g, {1}, 1, true)});
  ASSERT_TRUE(r.has_error());
  EXPECT_EQ(r.error().kind(), v1::Error::UNAVAILABLE);
  // Status carries the role and the counters.
  grpc::ClientContext ctx;
  ctx.set_deadline(in_seconds(10));
  v1::WorkerStatus st;
  ASSERT_TRUE(d.stub->Status(&ctx, v1::StatusRequest{}, &st).ok());
  EXPECT_EQ(st.role(), "decode");
  EXPECT_EQ(st.handoff().resumed(), 1u);
  EXPECT_EQ(st.handoff().received(), 1u);
}

}  // namespace
}  // namespace cairn::api
