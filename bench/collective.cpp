// bench/collective.cpp — collective::Group's all-reduce and all-gather on
// loopback: latency of small messages and bandwidth of large ones, with 2 and
// 4 ranks (threads of this process, each with its own sockets, meeting
// through a MemoryStore: the same TCP path as agents in separate processes).
// Bus bandwidth follows the NCCL convention: all-reduce moves 2(n-1)/n of the
// buffer per rank, all-gather (n-1)/n of the gathered output.
#include <benchmark/benchmark.h>

#include <barrier>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "collective/group.h"

namespace {

using cairn::collective::Group;
using cairn::collective::MemoryStore;

enum class Op { AllReduce, AllGather };

void BM_Collective(benchmark::State& state, Op op) {
  const int ranks = int(state.range(0));
  const size_t bytes = size_t(state.range(1));
  static int next_group = 0;
  MemoryStore store;
  const std::string prefix = "bench" + std::to_string(next_group++) + "/";
  std::vector<std::unique_ptr<Group>> groups(static_cast<size_t>(ranks));
  {
    std::vector<std::thread> joins;
    for (int r = 0; r < ranks; ++r)
      joins.emplace_back([&, r] {
        auto g = Group::connect(store, prefix, r, ranks);
        if (g.is_ok()) groups[size_t(r)] = std::move(*g);
      });
    for (auto& t : joins) t.join();
  }
  for (auto& g : groups)
    if (!g) {
      state.SkipWithError("the group did not form");
      return;
    }
  const size_t floats = std::max<size_t>(1, bytes / 4);
  std::vector<std::vector<float>> in(size_t(ranks), std::vector<float>(floats, 1.0f));
  std::vector<std::vector<float>> out(size_t(ranks), std::vector<float>(floats * size_t(ranks)));
  // Ranks 1.. loop on their own threads, in step with rank 0 (timed here).
  std::barrier sync(ranks);
  bool stop = false;
  auto one = [&](int r) {
    Group& g = *groups[size_t(r)];
    if (op == Op::AllReduce) return g.all_reduce_sum(in[size_t(r)].data(), floats);
    return g.all_gather(in[size_t(r)].data(), floats * 4, out[size_t(r)].data());
  };
  std::vector<std::thread> others;
  for (int r = 1; r < ranks; ++r)
    others.emplace_back([&, r] {
      for (;;) {
        sync.arrive_and_wait();
        if (stop) return;
        (void)one(r);
      }
    });
  for (auto _ : state) {
    sync.arrive_and_wait();
    if (!one(0).is_ok()) {
      state.SkipWithError("collective failed");
      break;
    }
  }
  stop = true;
  sync.arrive_and_wait();
  for (auto& t : others) t.join();
  const double n = ranks, moved = op == Op::AllReduce ? 2.0 * (n - 1) / n * double(floats * 4)
                                                       : (n - 1) / n * double(floats * 4) * n;
  state.counters["bus_GB/s"] =
      benchmark::Counter(moved * double(state.iterations()) / 1e9, benchmark::Counter::kIsRate);
}

void args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"ranks", "bytes"});
  for (int ranks : {2, 4})
    for (int64_t bytes : {int64_t(4), int64_t(4096), int64_t(65536), int64_t(1) << 20, int64_t(16) << 20})
      b->Args({ranks, bytes});
  b->UseRealTime()->Unit(benchmark::kMicrosecond);
}

BENCHMARK_CAPTURE(BM_Collective, all_reduce, Op::AllReduce)->Apply(args);
BENCHMARK_CAPTURE(BM_Collective, all_gather, Op::AllGather)->Apply(args);

}  // namespace

BENCHMARK_MAIN();
