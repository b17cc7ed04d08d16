// core/cpu_topology.h — which physical core each CPU the process may use
// belongs to, so the thread pool defaults to one thread per physical core and
// pins its workers to distinct cores before it doubles up on SMT siblings.
// Read from Linux sysfs; where it cannot be read (some containers), every CPU
// counts as a core of its own.
#pragma once

#include <string>
#include <vector>

namespace cairn {

struct CpuPlace {
  int cpu = 0;
  int package = 0;  // physical_package_id
  int core = 0;     // core_id, unique within its package only
};

// The place of each of `cpus`, from root/cpuN/topology/{physical_package_id,
// core_id}. A CPU whose files are missing or malformed gets a core no other
// CPU shares.
std::vector<CpuPlace> read_cpu_places(const std::vector<int>& cpus,
                                      const std::string& root = "/sys/devices/system/cpu");

// Distinct physical cores (package, core) among `places`.
int count_cores(const std::vector<CpuPlace>& places);

// The CPUs in pinning order: the first CPU (in the given order) of each
// physical core, then each core's second CPU, and so on. Workers pinned in
// this order land on separate cores while there are cores left, whether the
// kernel numbers siblings next to each other (0,1 on one core) or a core
// count apart (0 and 8).
std::vector<int> cpus_by_core(const std::vector<CpuPlace>& places);

}  // namespace cairn
