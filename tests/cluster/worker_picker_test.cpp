// tests/cluster/worker_picker_test.cpp — the worker-picking policies and the prefix key.
#include "cluster/worker_picker.h"

#include <gtest/gtest.h>

#include <map>
#include <set>

namespace cairn::cluster {
namespace {

WorkerView worker(const std::string& id, int64_t outstanding, int32_t queue = 0,
                  int32_t kv_used = 0, int32_t kv_total = 100) {
  WorkerView w;
  w.id = id;
  w.name = id;
  w.address = "127.0.0.1:" + std::to_string(1000 + id.size() * 7 + id.back());
  w.outstanding = outstanding;
  w.status.set_state(v1::WorkerStatus::READY);
  w.status.set_queue_length(queue);
  w.status.set_kv_blocks_used(kv_used);
  w.status.set_kv_blocks_total(kv_total);
  return w;
}

TEST(WorkerPicker, ParsesPolicyNames) {
  EXPECT_EQ(parse_route_policy("shortest-queue"), RoutePolicy::ShortestQueue);
  EXPECT_EQ(parse_route_policy("round-robin"), RoutePolicy::RoundRobin);
  EXPECT_EQ(parse_route_policy("prefix-affinity"), RoutePolicy::PrefixAffinity);
  EXPECT_FALSE(parse_route_policy("random").has_value());
  EXPECT_FALSE(parse_route_policy("").has_value());
  EXPECT_STREQ(route_policy_name(RoutePolicy::RoundRobin), "round-robin");
}

TEST(WorkerPicker, EmptyCandidatesPickNothing) {
  for (auto p :
       {RoutePolicy::ShortestQueue, RoutePolicy::RoundRobin, RoutePolicy::PrefixAffinity}) {
    WorkerPickerOptions o;
    o.policy = p;
    WorkerPicker r(o);
    EXPECT_EQ(r.pick({}, "x"), -1);
  }
}

TEST(WorkerPicker, ShortestQueueCountsOutstandingAndReportedQueue) {
  WorkerPickerOptions o;
  o.policy = RoutePolicy::ShortestQueue;
  WorkerPicker r(o);
  EXPECT_EQ(r.pick({worker("a", 3), worker("b", 1), worker("c", 2)}, ""), 1);
  // b's own report of a long queue outweighs the controller's low count.
  EXPECT_EQ(r.pick({worker("a", 3), worker("b", 1, 5), worker("c", 2)}, ""), 2);
}

TEST(WorkerPicker, ShortestQueueBreaksTiesByKvUsage) {
  WorkerPickerOptions o;
  o.policy = RoutePolicy::ShortestQueue;
  WorkerPicker r(o);
  EXPECT_EQ(r.pick({worker("a", 1, 0, 90), worker("b", 1, 0, 10), worker("c", 2, 0, 0)}, ""), 1);
  // Unknown pool size counts as empty.
  EXPECT_EQ(r.pick({worker("a", 1, 0, 5), worker("b", 1, 0, 0, 0)}, ""), 1);
}

TEST(WorkerPicker, RoundRobinCycles) {
  WorkerPickerOptions o;
  o.policy = RoutePolicy::RoundRobin;
  WorkerPicker r(o);
  std::vector<WorkerView> ws = {worker("a", 9), worker("b", 0), worker("c", 0)};
  std::vector<int> picks;
  for (int i = 0; i < 6; ++i) picks.push_back(r.pick(ws, ""));
  EXPECT_EQ(picks, (std::vector<int>{0, 1, 2, 0, 1, 2}));
}

TEST(WorkerPicker, PrefixAffinityIsStableAndSpreadsKeys) {
  WorkerPickerOptions o;
  o.policy = RoutePolicy::PrefixAffinity;
  WorkerPicker r(o);
  std::vector<WorkerView> ws = {worker("a", 0), worker("b", 0), worker("c", 0)};
  std::map<std::string, int> chosen;
  std::set<int> used;
  for (int k = 0; k < 60; ++k) {
    const std::string key = "prompt-" + std::to_string(k);
    const int p = r.pick(ws, key);
    ASSERT_GE(p, 0);
    chosen[key] = p;
    used.insert(p);
    EXPECT_EQ(r.pick(ws, key), p);  // same key, same worker
  }
  EXPECT_EQ(used.size(), 3u);  // 60 keys do not all land on one worker

  // Rendezvous hashing: dropping worker c moves only c's keys.
  std::vector<WorkerView> ab = {ws[0], ws[1]};
  for (const auto& [key, p] : chosen) {
    if (p != 2) {
      EXPECT_EQ(r.pick(ab, key), p) << key;
    }
  }
  // The order of the candidates does not matter.
  std::vector<WorkerView> reversed = {ws[2], ws[1], ws[0]};
  for (const auto& [key, p] : chosen) EXPECT_EQ(r.pick(reversed, key), 2 - p) << key;
}

TEST(WorkerPicker, PrefixAffinityFallsBackWhenTheChosenWorkerIsMuchBusier) {
  WorkerPickerOptions opt;
  opt.policy = RoutePolicy::PrefixAffinity;
  opt.affinity_margin = 4;
  WorkerPicker r(opt);
  std::vector<WorkerView> ws = {worker("a", 0), worker("b", 0)};
  const int home = r.pick(ws, "shared prefix");
  const int other = 1 - home;
  ws[static_cast<size_t>(home)].outstanding = 4;  // within the margin: stays
  EXPECT_EQ(r.pick(ws, "shared prefix"), home);
  ws[static_cast<size_t>(home)].outstanding = 5;  // beyond: the least loaded
  EXPECT_EQ(r.pick(ws, "shared prefix"), other);
}

TEST(WorkerPicker, PrefixKeyCutsThePromptAndCoversEveryPromptKind) {
  serving::GenerateRequest a, b, c;
  a.prompt = std::string(1000, 'x') + "tail one";
  b.prompt = std::string(1000, 'x') + "tail two";
  EXPECT_EQ(prefix_key(a, 256), prefix_key(b, 256));
  EXPECT_NE(prefix_key(a, 2000), prefix_key(b, 2000));
  c.model = "other";
  c.prompt = std::string(1000, 'x');
  EXPECT_NE(prefix_key(a, 256), prefix_key(c, 256));  // the model is part of the key

  serving::GenerateRequest t1, t2;
  t1.prompt = std::vector<serving::Token>{1, 2, 3, 4};
  t2.prompt = std::vector<serving::Token>{1, 2, 3, 5};
  EXPECT_NE(prefix_key(t1, 100), prefix_key(t2, 100));
  EXPECT_EQ(prefix_key(t1, 4), prefix_key(t2, 4));

  serving::GenerateRequest m1, m2;
  m1.prompt = std::vector<serving::ChatMessage>{{"system", "be brief", ""}, {"user", "hi", ""}};
  m2.prompt = std::vector<serving::ChatMessage>{{"system", "be brief", ""}, {"user", "yo", ""}};
  EXPECT_NE(prefix_key(m1, 100), prefix_key(m2, 100));
  EXPECT_EQ(prefix_key(m1, 10), prefix_key(m2, 10));
  EXPECT_LE(prefix_key(m1, 10).size(), 11u);
}

TEST(WorkerPicker, DecodePickTakesTheMostFreeBlocksLessWhatIsInFlight) {
  EXPECT_EQ(pick_most_free_kv({}, 16), -1);
  // b has the most free blocks at its heartbeat...
  std::vector<WorkerView> c = {worker("a", 0, 0, 60), worker("b", 0, 0, 20), worker("c", 0, 0, 50)};
  EXPECT_EQ(pick_most_free_kv(c, 16), 1);
  // ...until requests in flight there are counted (80 - 3 * 16 = 32 < 50).
  c[1].outstanding = 3;
  EXPECT_EQ(free_kv_estimate(c[1], 16), 32);
  EXPECT_EQ(pick_most_free_kv(c, 16), 2);
  // Ties go to the lower load.
  c[0].status.set_kv_blocks_used(50);
  c[2].status.set_queue_length(2);
  EXPECT_EQ(pick_most_free_kv(c, 16), 0);
}

TEST(WorkerPicker, RoleDefaultsToBoth) {
  WorkerView w = worker("a", 0);
  EXPECT_EQ(w.role(), "both");
  w.status.set_role("prefill");
  EXPECT_EQ(w.role(), "prefill");
  w.status.set_role("decode");
  EXPECT_EQ(w.role(), "decode");
  w.status.set_role("something-new");
  EXPECT_EQ(w.role(), "both");
}

}  // namespace
}  // namespace cairn::cluster
