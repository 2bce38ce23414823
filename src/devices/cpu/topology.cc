#include "devices/cpu/topology.h"

#include <hwloc.h>
#include <pthread.h>
#include <sched.h>

#include <thread>

#include "base/strings.h"

namespace tessera {
namespace {

CpuTopology read_topology() {
  CpuTopology t;
  hwloc_topology_t topo;
  if (hwloc_topology_init(&topo) != 0) return t;
  if (hwloc_topology_load(topo) != 0) {
    hwloc_topology_destroy(topo);
    return t;
  }
  // Restrict to the PUs this process may use (cgroups, taskset).
  cpu_set_t allowed;
  bool have_allowed = sched_getaffinity(0, sizeof allowed, &allowed) == 0;
  const int ncores = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_CORE);
  std::vector<std::vector<unsigned>> per_core;
  for (int c = 0; c < ncores; ++c) {
    hwloc_obj_t core = hwloc_get_obj_by_type(topo, HWLOC_OBJ_CORE, static_cast<unsigned>(c));
    std::vector<unsigned> pus;
    for (hwloc_obj_t pu = hwloc_get_next_obj_inside_cpuset_by_type(topo, core->cpuset, HWLOC_OBJ_PU, nullptr);
         pu != nullptr; pu = hwloc_get_next_obj_inside_cpuset_by_type(topo, core->cpuset, HWLOC_OBJ_PU, pu)) {
      if (!have_allowed || CPU_ISSET(pu->os_index, &allowed)) pus.push_back(pu->os_index);
    }
    if (!pus.empty()) per_core.push_back(pus);
  }
  int packages = hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE);
  hwloc_topology_destroy(topo);
  if (per_core.empty()) {  // no core objects: fall back to the allowed CPUs
    unsigned n = std::max(1u, std::thread::hardware_concurrency());
    for (unsigned i = 0; i < n; ++i) per_core.push_back({i});
  }
  // Round-robin over cores: first PU of every core, then second PUs, ...
  for (size_t depth = 0;; ++depth) {
    bool any = false;
    for (const auto& pus : per_core)
      if (depth < pus.size()) {
        t.pu_order.push_back(pus[depth]);
        any = true;
      }
    if (!any) break;
  }
  t.cores = static_cast<int>(per_core.size());
  t.pus = static_cast<int>(t.pu_order.size());
  t.summary = str_cat(std::max(packages, 1), packages == 1 ? " package, " : " packages, ", t.cores,
                      t.cores == 1 ? " core, " : " cores, ", t.pus, t.pus == 1 ? " PU" : " PUs");
  return t;
}

}  // namespace

const CpuTopology& cpu_topology() {
  static const CpuTopology t = read_topology();
  return t;
}

bool pin_current_thread(int slot) {
  const CpuTopology& t = cpu_topology();
  if (t.pu_order.empty()) return false;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(t.pu_order[static_cast<size_t>(slot) % t.pu_order.size()], &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

}  // namespace tessera
