// tests/core/cpu_topology_test.cpp — physical-core counting and CPU order from synthetic and fake-sysfs topologies.
#include "core/cpu_topology.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/thread_pool.h"

namespace cairn {
namespace {

namespace fs = std::filesystem;

// Two threads per core, the kernel numbering siblings next to each other
// (0 and 1 on core 0): workers must take 0, 2, 4, 6 before any sibling.
TEST(CpuTopology, AdjacentSiblingsGoAfterOneCpuPerCore) {
  std::vector<CpuPlace> places;
  for (int cpu = 0; cpu < 8; ++cpu) places.push_back({cpu, 0, cpu / 2});
  EXPECT_EQ(count_cores(places), 4);
  EXPECT_EQ(cpus_by_core(places), (std::vector<int>{0, 2, 4, 6, 1, 3, 5, 7}));
}

// Siblings a core count apart (0 and 4 on core 0): the order stays as it is.
TEST(CpuTopology, DistantSiblingsKeepTheirOrder) {
  std::vector<CpuPlace> places;
  for (int cpu = 0; cpu < 8; ++cpu) places.push_back({cpu, 0, cpu % 4});
  EXPECT_EQ(count_cores(places), 4);
  EXPECT_EQ(cpus_by_core(places), (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
}

// core_id repeats across packages: (0, 0) and (1, 0) are two cores. An
// affinity mask that leaves out some CPUs counts only the cores it touches.
TEST(CpuTopology, CoresAreCountedPerPackageAndOnlyWhereAllowed) {
  const std::vector<CpuPlace> places = {{0, 0, 0}, {1, 1, 0}, {2, 0, 0}, {5, 1, 3}};
  EXPECT_EQ(count_cores(places), 3);
  EXPECT_EQ(cpus_by_core(places), (std::vector<int>{0, 1, 5, 2}));
  EXPECT_EQ(count_cores({}), 0);
  EXPECT_TRUE(cpus_by_core({}).empty());
}

// A fake sysfs: CPUs 0-3 as two cores of two threads; CPU 4's files are
// missing and CPU 5's are malformed, so each counts as a core of its own.
TEST(CpuTopology, ReadsSysfsAndTreatsUnreadableCpusAsOwnCores) {
  const fs::path root =
      fs::temp_directory_path() / ("cairn_topology_" + std::to_string(::getpid()));
  fs::remove_all(root);
  const auto write = [&](int cpu, const std::string& package, const std::string& core) {
    const fs::path dir = root / ("cpu" + std::to_string(cpu)) / "topology";
    fs::create_directories(dir);
    std::ofstream(dir / "physical_package_id") << package;
    std::ofstream(dir / "core_id") << core;
  };
  write(0, "0\n", "0\n");
  write(1, "0\n", "1\n");
  write(2, "0\n", "0\n");
  write(3, "0\n", "1\n");
  write(5, "0\n", "x7\n");
  const std::vector<CpuPlace> places = read_cpu_places({0, 1, 2, 3, 4, 5}, root.string());
  fs::remove_all(root);
  ASSERT_EQ(places.size(), 6u);
  EXPECT_EQ(places[2].package, 0);
  EXPECT_EQ(places[2].core, 0);
  EXPECT_EQ(count_cores(places), 4);  // two real cores, then CPUs 4 and 5 alone
  EXPECT_EQ(cpus_by_core(places), (std::vector<int>{0, 1, 4, 5, 2, 3}));
}

// On this machine: the default pool is one thread per physical core the
// process may use, never more than the CPUs it may use.
TEST(CpuTopology, DefaultPoolSizeIsThePhysicalCores) {
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  const int cores = count_cores(read_cpu_places(cpus));
  EXPECT_GE(cores, 1);
  EXPECT_LE(cores, (int)cpus.size());
  EXPECT_EQ(ThreadPool::default_size(), cores);
}

}  // namespace
}  // namespace cairn
