// bench/collective.cpp — collective::Group's all-reduce and all-gather on
// loopback: per-call latency and bus bandwidth with 2 and 4 ranks (threads of
// this process, each with its own gloo device and sockets, meeting through a
// MemoryStore: the same TCP path as agents in separate processes). Ranks call
// back to back, as agents do inside a forward; a rank that sleeps between
// calls pays this host's thread wake-up on top (see docs/distributed.md).
// Bus bandwidth follows the NCCL convention: an all-reduce moves 2(n-1)/n of
// the buffer per rank, an all-gather (n-1)/n of the gathered output.
//   build/bench/bench_collective [--seconds S]
#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "collective/group.h"

namespace {

using cairn::collective::Group;
using cairn::collective::MemoryStore;
using clock_type = std::chrono::steady_clock;

enum class Op { AllReduce, AllGather };

// Median over 5 timed blocks of `iters` calls each, in microseconds per call.
double measure(Op op, int ranks, size_t bytes, double seconds) {
  static int next = 0;
  MemoryStore store;
  const std::string prefix = "bench" + std::to_string(next++);
  std::vector<std::unique_ptr<Group>> groups(static_cast<size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      auto g = Group::connect(store, prefix, r, ranks);
      if (g.is_ok()) groups[size_t(r)] = std::move(*g);
    });
  for (auto& t : threads) t.join();
  threads.clear();
  for (auto& g : groups)
    if (!g) return -1;
  const size_t floats = std::max<size_t>(1, bytes / 4);
  // Calibrate on rank 0's view: how many calls fill a block of seconds / 5.
  int64_t iters = 10;
  std::vector<double> blocks(5);
  std::barrier sync(ranks);
  bool failed = false;
  for (int r = 0; r < ranks; ++r)
    threads.emplace_back([&, r] {
      Group& g = *groups[size_t(r)];
      std::vector<float> in(floats, 1.0f), out(floats * size_t(ranks));
      auto one = [&] {
        return op == Op::AllReduce ? g.all_reduce_sum(in.data(), floats)
                                   : g.all_gather(in.data(), floats * 4, out.data());
      };
      for (int i = 0; i < 10; ++i) (void)one();
      sync.arrive_and_wait();
      if (r == 0) {  // calibration: everyone runs these calls together
        const auto t0 = clock_type::now();
        for (int i = 0; i < 10; ++i) (void)one();
        const double per = std::chrono::duration<double>(clock_type::now() - t0).count() / 10;
        iters = std::max<int64_t>(5, int64_t(seconds / 5 / std::max(per, 1e-7)));
      } else {
        for (int i = 0; i < 10; ++i) (void)one();
      }
      sync.arrive_and_wait();
      for (auto& b : blocks) {
        sync.arrive_and_wait();
        const auto t0 = clock_type::now();
        for (int64_t i = 0; i < iters; ++i)
          if (!one().is_ok()) failed = true;
        if (r == 0) b = std::chrono::duration<double, std::micro>(clock_type::now() - t0).count() / double(iters);
      }
    });
  for (auto& t : threads) t.join();
  if (failed) return -1;
  std::sort(blocks.begin(), blocks.end());
  return blocks[2];
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 1.0;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::strcmp(argv[i], "--seconds") == 0) seconds = std::atof(argv[i + 1]);
  std::printf("%-11s %5s %10s %12s %10s\n", "op", "ranks", "bytes", "us/call", "bus GB/s");
  for (Op op : {Op::AllReduce, Op::AllGather})
    for (int ranks : {2, 4})
      for (size_t bytes : {size_t(4), size_t(4096), size_t(65536), size_t(1) << 20, size_t(16) << 20}) {
        const double us = measure(op, ranks, bytes, seconds);
        const double n = ranks;
        const double moved = op == Op::AllReduce ? 2 * (n - 1) / n * double(bytes) : (n - 1) * double(bytes);
        std::printf("%-11s %5d %10zu %12.1f %10.3f\n", op == Op::AllReduce ? "all-reduce" : "all-gather", ranks,
                    bytes, us, us > 0 ? moved / (us * 1e3) : 0.0);
        std::fflush(stdout);
      }
}
