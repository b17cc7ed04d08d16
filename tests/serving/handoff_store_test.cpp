// HandoffStore: the checks on incoming transfers, the byte cap, expiry, and
// the counters; over a stub backend that only answers kv_geometry.
#include "serving/handoff_store.h"

#include <gtest/gtest.h>

#include <thread>

namespace cairn::serving {
namespace {

using Clock = std::chrono::steady_clock;

kv::KvGeometry geometry() {
  kv::KvGeometry g;
  g.n_layer = 2;
  g.row_elems = 4;
  g.elem_bytes = 2;
  g.block_tokens = 16;
  return g;  // 32 bytes a position
}

class GeometryBackend final : public Backend {
 public:
  Result<RequestId> submit(GenerateRequest, std::shared_ptr<EventSink>) override {
    return Status::internal("unused");
  }
  void cancel(RequestId) override {}
  std::vector<ModelInfo> models() const override { return {}; }
  Health health() const override { return {}; }
  BackendStats stats() const override { return {}; }
  Result<std::vector<Token>> tokenize(const std::string&, const std::string&, bool,
                                      bool) const override {
    return Status::internal("unused");
  }
  Result<std::string> detokenize(const std::string&, const std::vector<Token>&) const override {
    return Status::internal("unused");
  }
  void start_draining() override {}
  Result<kv::KvGeometry> kv_geometry(const std::string& model) const override {
    if (!model.empty() && model != "m") return Status::not_found("no model " + model, "model");
    return geometry();
  }
};

kv::KvRows rows(int32_t first, int32_t n, uint8_t fill = 7) {
  kv::KvRows r;
  r.first = first;
  r.n = n;
  r.bytes.assign((size_t)geometry().bytes_for(n), (char)fill);
  return r;
}

struct Fixture {
  GeometryBackend backend;
  HandoffCounters counters;
  Clock::time_point t = Clock::now();
  HandoffStore store;
  explicit Fixture(HandoffStoreOptions o = {})
      : store(backend, with_clock(std::move(o), &t), &counters) {}
  static HandoffStoreOptions with_clock(HandoffStoreOptions o, Clock::time_point* t) {
    o.clock = [t] { return *t; };
    return o;
  }
};

TEST(HandoffStore, WholeTransferIsTakenOnce) {
  Fixture f;
  ASSERT_TRUE(f.store.begin("a", "m", geometry(), {1, 2, 3, 4, 5}).is_ok());
  EXPECT_EQ(f.store.bytes(), geometry().bytes_for(5));
  ASSERT_TRUE(f.store.append("a", rows(0, 3)).is_ok());
  // Not whole yet: take refuses and leaves it.
  EXPECT_EQ(f.store.take("a").status().code(), StatusCode::NotFound);
  ASSERT_TRUE(f.store.append("a", rows(3, 2, 9)).is_ok());
  ASSERT_TRUE(f.store.finish("a").is_ok());
  auto kv = f.store.take("a");
  ASSERT_TRUE(kv.is_ok()) << kv.status().message();
  EXPECT_EQ((*kv)->prompt, (std::vector<Token>{1, 2, 3, 4, 5}));
  ASSERT_EQ((*kv)->runs.size(), 2u);
  EXPECT_EQ((*kv)->runs[1].bytes[0], 9);
  EXPECT_TRUE((*kv)->check().is_ok());
  EXPECT_EQ(f.store.take("a").status().code(), StatusCode::NotFound);
  EXPECT_EQ(f.store.bytes(), 0);
  EXPECT_EQ(f.store.size(), 0u);
  auto s = f.counters.snapshot();
  EXPECT_EQ(s.received, 1u);
  EXPECT_EQ(s.bytes_received, (uint64_t)geometry().bytes_for(5));
  EXPECT_EQ(s.expired, 0u);
}

TEST(HandoffStore, GeometryMismatchNamesTheField) {
  Fixture f;
  kv::KvGeometry g = geometry();
  g.n_layer = 3;
  Status s = f.store.begin("a", "m", g, {1});
  EXPECT_EQ(s.code(), StatusCode::InvalidArgument);
  EXPECT_NE(s.message().find("layer count"), std::string::npos) << s.message();
  g = geometry();
  g.block_tokens = 32;
  s = f.store.begin("a", "m", g, {1});
  EXPECT_NE(s.message().find("block size"), std::string::npos) << s.message();
  g = geometry();
  g.version = 99;
  s = f.store.begin("a", "m", g, {1});
  EXPECT_NE(s.message().find("version"), std::string::npos) << s.message();
  EXPECT_EQ(f.store.begin("a", "other", geometry(), {1}).code(), StatusCode::NotFound);
  EXPECT_EQ(f.store.size(), 0u);
  EXPECT_EQ(f.counters.snapshot().expired, 4u);  // refused transfers count as dropped
}

TEST(HandoffStore, RefusesBadSizesAndIds) {
  HandoffStoreOptions o;
  o.max_prompt_tokens = 8;
  Fixture f(o);
  EXPECT_EQ(f.store.begin("", "m", geometry(), {1}).code(), StatusCode::InvalidArgument);
  EXPECT_EQ(f.store.begin(std::string(300, 'x'), "m", geometry(), {1}).code(),
            StatusCode::InvalidArgument);
  EXPECT_EQ(f.store.begin("a", "m", geometry(), {}).code(), StatusCode::InvalidArgument);
  EXPECT_EQ(f.store.begin("a", "m", geometry(), std::vector<Token>(9, 1)).code(),
            StatusCode::InvalidArgument);
  EXPECT_EQ(f.store.begin("a", "m", geometry(), {1, -2}).code(), StatusCode::InvalidArgument);
  ASSERT_TRUE(f.store.begin("a", "m", geometry(), {1, 2}).is_ok());
  EXPECT_EQ(f.store.begin("a", "m", geometry(), {1, 2}).code(), StatusCode::InvalidArgument);
  EXPECT_EQ(f.store.append("nope", rows(0, 1)).code(), StatusCode::NotFound);
  EXPECT_EQ(f.store.finish("nope").code(), StatusCode::NotFound);
}

TEST(HandoffStore, BadRunsDropTheTransfer) {
  Fixture f;
  auto again = [&] {
    f.store.drop_incomplete("a");
    ASSERT_TRUE(f.store.begin("a", "m", geometry(), {1, 2, 3, 4}).is_ok());
  };
  again();
  EXPECT_EQ(f.store.append("a", rows(1, 1)).code(), StatusCode::InvalidArgument);  // a gap
  EXPECT_EQ(f.store.size(), 0u);
  again();
  EXPECT_EQ(f.store.append("a", rows(0, 5)).code(),
            StatusCode::InvalidArgument);  // past the prompt
  again();
  EXPECT_EQ(f.store.append("a", rows(0, 0)).code(), StatusCode::InvalidArgument);  // empty
  again();
  kv::KvRows r = rows(0, 2);
  r.bytes.pop_back();
  EXPECT_EQ(f.store.append("a", r).code(), StatusCode::InvalidArgument);  // short bytes
  again();
  r = rows(0, 2);
  r.first = -1;
  EXPECT_EQ(f.store.append("a", r).code(), StatusCode::InvalidArgument);
  again();
  ASSERT_TRUE(f.store.append("a", rows(0, 2)).is_ok());
  EXPECT_EQ(f.store.finish("a").code(), StatusCode::InvalidArgument);  // incomplete
  EXPECT_EQ(f.store.size(), 0u);
  EXPECT_EQ(f.store.bytes(), 0);
  again();
  ASSERT_TRUE(f.store.append("a", rows(0, 4)).is_ok());
  ASSERT_TRUE(f.store.finish("a").is_ok());
  EXPECT_EQ(f.store.append("a", rows(4, 1)).code(), StatusCode::InvalidArgument);
  EXPECT_EQ(f.store.take("a").status().code(), StatusCode::NotFound);
}

TEST(HandoffStore, IncompleteStreamIsDroppedWholeOneIsKept) {
  Fixture f;
  ASSERT_TRUE(f.store.begin("a", "m", geometry(), {1, 2}).is_ok());
  ASSERT_TRUE(f.store.append("a", rows(0, 1)).is_ok());
  f.store.drop_incomplete("a");
  EXPECT_EQ(f.store.size(), 0u);
  EXPECT_EQ(f.counters.snapshot().expired, 1u);
  ASSERT_TRUE(f.store.begin("b", "m", geometry(), {1}).is_ok());
  ASSERT_TRUE(f.store.append("b", rows(0, 1)).is_ok());
  ASSERT_TRUE(f.store.finish("b").is_ok());
  f.store.drop_incomplete("b");  // the stream ended after `last`: kept
  EXPECT_TRUE(f.store.take("b").is_ok());
}

TEST(HandoffStore, ByteCapRefusesAsUnavailable) {
  HandoffStoreOptions o;
  o.max_bytes = geometry().bytes_for(10);
  Fixture f(o);
  ASSERT_TRUE(f.store.begin("a", "m", geometry(), std::vector<Token>(6, 1)).is_ok());
  Status s = f.store.begin("b", "m", geometry(), std::vector<Token>(5, 1));
  EXPECT_EQ(s.code(), StatusCode::Unavailable);
  EXPECT_NE(s.message().find("handoff buffer full"), std::string::npos) << s.message();
  ASSERT_TRUE(f.store.begin("c", "m", geometry(), std::vector<Token>(4, 1)).is_ok());
  f.store.drop_incomplete("a");  // room again
  EXPECT_TRUE(f.store.begin("b", "m", geometry(), std::vector<Token>(5, 1)).is_ok());
}

TEST(HandoffStore, EntriesExpireAfterTheirLastActivity) {
  HandoffStoreOptions o;
  o.timeout_ms = 1000;
  Fixture f(o);
  ASSERT_TRUE(f.store.begin("a", "m", geometry(), {1, 2}).is_ok());
  f.t += std::chrono::milliseconds(800);
  ASSERT_TRUE(f.store.append("a", rows(0, 1)).is_ok());  // activity: the clock restarts
  f.t += std::chrono::milliseconds(800);
  ASSERT_TRUE(f.store.append("a", rows(1, 1)).is_ok());
  ASSERT_TRUE(f.store.finish("a").is_ok());
  f.t += std::chrono::milliseconds(1000);
  EXPECT_EQ(f.store.take("a").status().code(), StatusCode::NotFound);
  EXPECT_EQ(f.store.bytes(), 0);
  EXPECT_EQ(f.counters.snapshot().expired, 1u);
  // An unfinished one too, found by any later call.
  ASSERT_TRUE(f.store.begin("b", "m", geometry(), {1}).is_ok());
  f.t += std::chrono::milliseconds(1500);
  EXPECT_EQ(f.store.size(), 1u);
  EXPECT_EQ(f.store.append("b", rows(0, 1)).code(), StatusCode::NotFound);
  EXPECT_EQ(f.store.size(), 0u);
  EXPECT_EQ(f.counters.snapshot().expired, 2u);
}

TEST(HandoffStore, ConcurrentTransfers) {
  Fixture f;
  std::vector<std::thread> threads;
  std::atomic<int> taken{0};
  for (int i = 0; i < 8; ++i)
    threads.emplace_back([&, i] {
      const std::string id = "t" + std::to_string(i);
      for (int k = 0; k < 50; ++k) {
        ASSERT_TRUE(f.store.begin(id, "", geometry(), {1, 2, 3}).is_ok());
        ASSERT_TRUE(f.store.append(id, rows(0, 1)).is_ok());
        ASSERT_TRUE(f.store.append(id, rows(1, 2)).is_ok());
        ASSERT_TRUE(f.store.finish(id).is_ok());
        if (f.store.take(id).is_ok()) ++taken;
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(taken.load(), 400);
  EXPECT_EQ(f.store.bytes(), 0);
  EXPECT_EQ(f.counters.snapshot().received, 400u);
}

TEST(HandoffCounters, HistogramBuckets) {
  HandoffCounters c;
  c.observe_seconds(0.0005);
  c.observe_seconds(0.001);  // on a bound: that bucket (le)
  c.observe_seconds(0.2);
  c.observe_seconds(100);
  auto s = c.snapshot();
  ASSERT_EQ(s.seconds.counts.size(), s.seconds.bounds.size() + 1);
  EXPECT_EQ(s.seconds.counts[0], 2u);
  EXPECT_EQ(s.seconds.counts[7], 1u);  // (0.1, 0.25]
  EXPECT_EQ(s.seconds.counts.back(), 1u);
  EXPECT_EQ(s.seconds.count, 4u);
  EXPECT_NEAR(s.seconds.sum, 100.2015, 1e-9);
}

}  // namespace
}  // namespace cairn::serving
