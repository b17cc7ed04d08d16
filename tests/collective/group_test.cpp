// tests/collective/group_test.cpp — collective::Group on loopback, its ranks
// as threads of this process meeting through a MemoryStore: every collective
// against the plain result, the rendezvous and a collective bounded by the
// timeout when a rank never comes or goes away, and a group re-formed under
// a new prefix after a rank is replaced.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <numeric>
#include <thread>
#include <vector>

#include "collective/group.h"

namespace cairn::collective {
namespace {

using namespace std::chrono_literals;

GroupOptions quick(std::chrono::milliseconds timeout = 3000ms) {
  GroupOptions o;
  o.timeout = timeout;
  return o;
}

// Runs body(group) on `size` threads, one rank each, after they all joined
// `prefix`; the test fails if any join or body fails.
void with_group(MemoryStore& store, const std::string& prefix, int size,
                const std::function<void(Group&)>& body) {
  std::vector<std::thread> ranks;
  std::atomic<int> joined{0};
  for (int r = 0; r < size; ++r) {
    ranks.emplace_back([&, r] {
      auto g = Group::connect(store, prefix, r, size, quick());
      ASSERT_TRUE(g.is_ok()) << g.status().message();
      ++joined;
      body(**g);
    });
  }
  for (auto& t : ranks) t.join();
  EXPECT_EQ(joined.load(), size);
}

TEST(CollectiveGroup, AllReduceSumsOnEveryRank) {
  MemoryStore store;
  for (int size : {1, 2, 3, 4}) {
    with_group(store, "ar" + std::to_string(size), size, [&](Group& g) {
      // 1000 floats: several of gloo's segments; values distinct per rank.
      std::vector<float> v(1000);
      for (size_t i = 0; i < v.size(); ++i) v[i] = float(g.rank() + 1) * float(i % 7);
      ASSERT_TRUE(g.all_reduce_sum(v.data(), v.size()).is_ok());
      const float ranks_sum = float(size * (size + 1) / 2);
      for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(v[i], ranks_sum * float(i % 7)) << "rank " << g.rank();
    });
  }
}

TEST(CollectiveGroup, AllGatherIsInRankOrder) {
  MemoryStore store;
  with_group(store, "ag", 3, [](Group& g) {
    const int32_t mine[2] = {g.rank() * 10, g.rank() * 10 + 1};
    int32_t all[6] = {};
    ASSERT_TRUE(g.all_gather(mine, sizeof mine, all).is_ok());
    for (int r = 0; r < 3; ++r) {
      EXPECT_EQ(all[2 * r], r * 10);
      EXPECT_EQ(all[2 * r + 1], r * 10 + 1);
    }
  });
}

TEST(CollectiveGroup, BroadcastBarrierAndPointToPoint) {
  MemoryStore store;
  with_group(store, "bp", 3, [](Group& g) {
    double v[3] = {0, 0, 0};
    if (g.rank() == 2) v[0] = 1.5, v[1] = -2, v[2] = 7;
    ASSERT_TRUE(g.broadcast(v, sizeof v, 2).is_ok());
    EXPECT_EQ(v[0], 1.5);
    EXPECT_EQ(v[2], 7);
    ASSERT_TRUE(g.barrier().is_ok());
    // A ring: each rank sends to the next and receives from the previous.
    const int next = (g.rank() + 1) % 3, prev = (g.rank() + 2) % 3;
    std::vector<char> out(100000, char('a' + g.rank())), in(100000, 0);
    std::thread sender([&] { EXPECT_TRUE(g.send(out.data(), out.size(), next, 5).is_ok()); });
    ASSERT_TRUE(g.recv(in.data(), in.size(), prev, 5).is_ok());
    sender.join();
    EXPECT_EQ(in.front(), char('a' + prev));
    EXPECT_EQ(in.back(), char('a' + prev));
  });
}

TEST(CollectiveGroup, BadArgumentsAreRefused) {
  MemoryStore store;
  EXPECT_FALSE(Group::connect(store, "x", 2, 2).is_ok());
  EXPECT_FALSE(Group::connect(store, "x", -1, 2).is_ok());
  EXPECT_FALSE(Group::connect(store, "x", 0, 0).is_ok());
  auto one = Group::connect(store, "solo", 0, 1);
  ASSERT_TRUE(one.is_ok()) << one.status().message();
  float v = 3;
  EXPECT_TRUE((*one)->all_reduce_sum(&v, 1).is_ok());
  EXPECT_EQ(v, 3);
  EXPECT_FALSE((*one)->broadcast(&v, 4, 1).is_ok());
  EXPECT_FALSE((*one)->send(&v, 4, 0, 1).is_ok());
}

TEST(CollectiveGroup, RendezvousWithAMissingRankTimesOut) {
  MemoryStore store;
  const auto t0 = std::chrono::steady_clock::now();
  auto g = Group::connect(store, "missing", 0, 2, quick(500ms));
  const auto waited = std::chrono::steady_clock::now() - t0;
  ASSERT_FALSE(g.is_ok());
  EXPECT_EQ(g.status().code(), StatusCode::Unavailable);
  EXPECT_LT(waited, 5s);
}

// A rank that leaves makes the others' next collective fail within the
// timeout; the survivors and a replacement then meet under a new prefix.
TEST(CollectiveGroup, GroupReformsAfterARankIsReplaced) {
  MemoryStore store;
  std::unique_ptr<Group> kept[2];
  {
    // Rank 2 leaves only once all three joined: a rank that closes while the
    // others still handshake with it fails their rendezvous instead.
    std::atomic<int> joined{0};
    std::atomic<bool> ok[3] = {false, false, false};
    std::vector<std::thread> ranks;
    for (int r = 0; r < 3; ++r) {
      ranks.emplace_back([&, r] {
        auto g = Group::connect(store, "epoch1/", r, 3, quick(2000ms));
        ok[r] = g.is_ok();
        ++joined;
        if (!g.is_ok()) {
          ADD_FAILURE() << g.status().message();
          return;
        }
        if (r < 2) kept[r] = std::move(*g);
        else
          while (joined.load() < 3) std::this_thread::sleep_for(1ms);  // then destroyed: rank 2 dies
      });
    }
    for (auto& t : ranks) t.join();
    ASSERT_TRUE(ok[0] && ok[1] && ok[2]);
  }
  std::thread t([&] {
    float v = 1;
    EXPECT_FALSE(kept[1]->all_reduce_sum(&v, 1).is_ok());
  });
  const auto t0 = std::chrono::steady_clock::now();
  float v = 1;
  Status st = kept[0]->all_reduce_sum(&v, 1);
  t.join();
  EXPECT_FALSE(st.is_ok());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
  kept[0].reset();
  kept[1].reset();
  store.erase_prefix("epoch1/");
  with_group(store, "epoch2/", 3, [](Group& g) {
    float x = 1;
    ASSERT_TRUE(g.all_reduce_sum(&x, 1).is_ok());
    EXPECT_EQ(x, 3);
  });
}

}  // namespace
}  // namespace cairn::collective
