// tests/cluster/registry_test.cpp — the controller's worker registry: registration, limits, heartbeats, expiry, counters.
#include "cluster/registry.h"

#include <gtest/gtest.h>

namespace cairn::cluster {
namespace {

v1::WorkerStatus ready_status(const std::string& model = "m") {
  v1::WorkerStatus st;
  st.set_state(v1::WorkerStatus::READY);
  st.add_models()->set_id(model);
  return st;
}

struct FakeClock {
  int64_t now = 1000;
  Registry::Clock fn() {
    return [this] { return now; };
  }
};

TEST(Registry, RegisterAssignsDistinctIdsAndListsInOrder) {
  FakeClock clock;
  Registry reg({}, clock.fn());
  auto a = reg.register_worker("a", "127.0.0.1:1001", ready_status());
  auto b = reg.register_worker("b", "127.0.0.1:1002", ready_status());
  ASSERT_TRUE(a.is_ok()) << a.status().message();
  ASSERT_TRUE(b.is_ok());
  EXPECT_NE(*a, *b);
  auto list = reg.list();
  ASSERT_EQ(list.size(), 2u);
  EXPECT_EQ(list[0].id, *a);
  EXPECT_EQ(list[0].name, "a");
  EXPECT_EQ(list[1].address, "127.0.0.1:1002");
  EXPECT_TRUE(list[0].ready());
  EXPECT_TRUE(list[0].serves("m"));
  EXPECT_TRUE(list[0].serves(""));
  EXPECT_FALSE(list[0].serves("other"));
}

TEST(Registry, IdsDifferAcrossRegistries) {
  // A worker holding an id from a controller that restarted must not be
  // mistaken for a worker of the new one.
  Registry r1, r2;
  auto a = r1.register_worker("a", "127.0.0.1:1001", ready_status());
  auto b = r2.register_worker("a", "127.0.0.1:1001", ready_status());
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  EXPECT_NE(*a, *b);
  EXPECT_FALSE(r2.heartbeat(*a, ready_status()));
}

TEST(Registry, RefusesMalformedRegistrations) {
  Registry reg;
  const v1::WorkerStatus st = ready_status();
  EXPECT_FALSE(reg.register_worker("a", "", st).is_ok());
  EXPECT_FALSE(reg.register_worker("a", "localhost", st).is_ok());
  EXPECT_FALSE(reg.register_worker("a", "localhost:0", st).is_ok());
  EXPECT_FALSE(reg.register_worker("a", "localhost:70000", st).is_ok());
  EXPECT_FALSE(reg.register_worker("a", "localhost:12x", st).is_ok());
  EXPECT_FALSE(reg.register_worker("a", "host name:1", st).is_ok());
  EXPECT_FALSE(reg.register_worker(std::string(300, 'n'), "h:1", st).is_ok());
  EXPECT_FALSE(reg.register_worker("a", std::string(300, 'h') + ":1", st).is_ok());
  v1::WorkerStatus negative = st;
  negative.set_running(-1);
  EXPECT_FALSE(reg.register_worker("a", "h:1", negative).is_ok());
  v1::WorkerStatus many;
  for (int i = 0; i < 65; ++i) many.add_models()->set_id("m" + std::to_string(i));
  EXPECT_FALSE(reg.register_worker("a", "h:1", many).is_ok());
  v1::WorkerStatus unnamed;
  unnamed.add_models();
  EXPECT_FALSE(reg.register_worker("a", "h:1", unnamed).is_ok());
  EXPECT_TRUE(reg.list().empty());
  EXPECT_TRUE(reg.register_worker("", "[::1]:5", st).is_ok());
  EXPECT_EQ(reg.list().at(0).name, "[::1]:5");  // an empty name reads as the address
}

TEST(Registry, RefusesBeyondMaxWorkers) {
  RegistryOptions opt;
  opt.max_workers = 2;
  Registry reg(opt);
  EXPECT_TRUE(reg.register_worker("a", "h:1", ready_status()).is_ok());
  EXPECT_TRUE(reg.register_worker("b", "h:2", ready_status()).is_ok());
  EXPECT_FALSE(reg.register_worker("c", "h:3", ready_status()).is_ok());
}

TEST(Registry, SameAddressReplacesTheOldEntry) {
  Registry reg;
  auto a = reg.register_worker("a", "h:1", ready_status());
  auto b = reg.register_worker("a", "h:1", ready_status());
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  auto list = reg.list();
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].id, *b);
  EXPECT_FALSE(reg.heartbeat(*a, ready_status()));
}

TEST(Registry, HeartbeatUpdatesStatusAndUnknownIdsAreReported) {
  FakeClock clock;
  Registry reg({}, clock.fn());
  auto id = reg.register_worker("a", "h:1", ready_status());
  ASSERT_TRUE(id.is_ok());
  v1::WorkerStatus st = ready_status();
  st.set_running(7);
  clock.now += 500;
  EXPECT_TRUE(reg.heartbeat(*id, st));
  clock.now += 200;
  auto list = reg.list();
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].status.running(), 7);
  EXPECT_EQ(list[0].last_heartbeat_ms_ago, 200);
  EXPECT_FALSE(reg.heartbeat("nope", st));
  v1::WorkerStatus bad = st;
  bad.set_waiting(-3);
  EXPECT_FALSE(reg.heartbeat(*id, bad));
  EXPECT_EQ(reg.list()[0].status.waiting(), 0);
}

TEST(Registry, ExpiresAfterTimeoutOfSilence) {
  FakeClock clock;
  RegistryOptions opt;
  opt.timeout_ms = 6000;
  Registry reg(opt, clock.fn());
  auto a = reg.register_worker("a", "h:1", ready_status());
  auto b = reg.register_worker("b", "h:2", ready_status());
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  const uint64_t v0 = reg.membership_version();
  clock.now += 4000;
  EXPECT_TRUE(reg.heartbeat(*b, ready_status()));
  clock.now += 2000;  // a: exactly 6000 ms of silence, still alive
  EXPECT_EQ(reg.list().size(), 2u);
  clock.now += 1;
  auto list = reg.list();
  ASSERT_EQ(list.size(), 1u);
  EXPECT_EQ(list[0].id, *b);
  EXPECT_GT(reg.membership_version(), v0);
  EXPECT_FALSE(reg.heartbeat(*a, ready_status()));
}

TEST(Registry, DeregisterAndMarkFailedDropAtOnce) {
  Registry reg;
  auto a = reg.register_worker("a", "h:1", ready_status());
  auto b = reg.register_worker("b", "h:2", ready_status());
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  EXPECT_TRUE(reg.deregister(*a));
  EXPECT_FALSE(reg.deregister(*a));
  reg.mark_failed(*b);
  reg.mark_failed(*b);  // idempotent
  EXPECT_TRUE(reg.list().empty());
  EXPECT_FALSE(reg.heartbeat(*b, ready_status()));
}

TEST(Registry, OutstandingCountsAndRoutedTotals) {
  Registry reg;
  auto a = reg.register_worker("a", "h:1", ready_status());
  ASSERT_TRUE(a.is_ok());
  reg.add_outstanding(*a, +1);
  reg.add_outstanding(*a, +1);
  reg.add_outstanding(*a, -1);
  reg.add_outstanding("unknown", +1);
  auto w = reg.list().at(0);
  EXPECT_EQ(w.outstanding, 1);
  EXPECT_EQ(w.routed_total, 2u);
  reg.add_outstanding(*a, -5);  // never negative
  EXPECT_EQ(reg.list().at(0).outstanding, 0);
}

}  // namespace
}  // namespace cairn::cluster
