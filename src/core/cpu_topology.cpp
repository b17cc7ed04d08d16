// core/cpu_topology.cpp — reads the allowed CPUs' core and package ids from sysfs and orders CPUs one per core first.
#include "core/cpu_topology.h"

#include <charconv>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <utility>

namespace cairn {
namespace {

// A non-negative integer alone on the file's first line (getline drops the
// newline), else nullopt.
std::optional<int> read_id(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  while (!line.empty() && line.back() == ' ') line.pop_back();
  int v = 0;
  const auto [end, ec] = std::from_chars(line.data(), line.data() + line.size(), v);
  if (ec != std::errc() || end != line.data() + line.size() || v < 0) return std::nullopt;
  return v;
}

}  // namespace

std::vector<CpuPlace> read_cpu_places(const std::vector<int>& cpus, const std::string& root) {
  std::vector<CpuPlace> places;
  places.reserve(cpus.size());
  for (int cpu : cpus) {
    const std::string dir = root + "/cpu" + std::to_string(cpu) + "/topology/";
    const std::optional<int> package = read_id(dir + "physical_package_id");
    const std::optional<int> core = read_id(dir + "core_id");
    if (package && core) {
      places.push_back({cpu, *package, *core});
    } else {
      // A package id no real one has (they are >= 0), so no CPU shares it.
      places.push_back({cpu, -1 - cpu, 0});
    }
  }
  return places;
}

int count_cores(const std::vector<CpuPlace>& places) {
  std::set<std::pair<int, int>> cores;
  for (const CpuPlace& p : places) cores.insert({p.package, p.core});
  return static_cast<int>(cores.size());
}

std::vector<int> cpus_by_core(const std::vector<CpuPlace>& places) {
  // Each CPU's rank within its core (0 for the first seen), then stable by rank.
  std::map<std::pair<int, int>, int> seen;
  std::vector<std::pair<int, int>> ranked;  // (rank, cpu), in input order
  ranked.reserve(places.size());
  for (const CpuPlace& p : places) ranked.push_back({seen[{p.package, p.core}]++, p.cpu});
  std::vector<int> order;
  order.reserve(places.size());
  for (int rank = 0; order.size() < ranked.size(); ++rank)
    for (const auto& [r, cpu] : ranked)
      if (r == rank) order.push_back(cpu);
  return order;
}

}  // namespace cairn
