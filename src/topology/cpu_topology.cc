#include "topology/cpu_topology.h"

#include <hwloc.h>
#include <pthread.h>
#include <sched.h>

#include <fstream>
#include <map>
#include <thread>

#include "base/strings.h"

namespace tessera {
namespace {

int ancestor_index(hwloc_topology_t topo, hwloc_obj_type_t type, hwloc_obj_t pu) {
  hwloc_obj_t o = hwloc_get_ancestor_obj_by_type(topo, type, pu);
  return o == nullptr ? -1 : static_cast<int>(o->logical_index);
}

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
  std::vector<std::vector<CpuPu>> per_core;
  for (int c = 0; c < ncores; ++c) {
    hwloc_obj_t core = hwloc_get_obj_by_type(topo, HWLOC_OBJ_CORE, static_cast<unsigned>(c));
    std::vector<CpuPu> pus;
    for (hwloc_obj_t pu = hwloc_get_next_obj_inside_cpuset_by_type(topo, core->cpuset, HWLOC_OBJ_PU, nullptr);
         pu != nullptr; pu = hwloc_get_next_obj_inside_cpuset_by_type(topo, core->cpuset, HWLOC_OBJ_PU, pu)) {
      if (have_allowed && !CPU_ISSET(pu->os_index, &allowed)) continue;
      CpuPu p;
      p.os_index = pu->os_index;
      p.core = static_cast<int>(core->logical_index);
      p.l2 = ancestor_index(topo, HWLOC_OBJ_L2CACHE, pu);
      p.l3 = ancestor_index(topo, HWLOC_OBJ_L3CACHE, pu);
      // NUMA nodes hang beside the tree in hwloc 2, not above the PU:
      // the node whose cpuset holds this PU.
      for (hwloc_obj_t n = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, nullptr); n != nullptr;
           n = hwloc_get_next_obj_by_type(topo, HWLOC_OBJ_NUMANODE, n))
        if (hwloc_bitmap_isset(n->cpuset, pu->os_index)) p.numa = static_cast<int>(n->logical_index);
      if (p.l2 >= 0 || p.l3 >= 0) t.caches_known = true;
      if (t.llc_kb == 0)
        for (hwloc_obj_type_t level : {HWLOC_OBJ_L3CACHE, HWLOC_OBJ_L2CACHE}) {
          hwloc_obj_t cache = hwloc_get_ancestor_obj_by_type(topo, level, pu);
          if (cache != nullptr && cache->attr != nullptr && cache->attr->cache.size > 0) {
            t.llc_kb = static_cast<double>(cache->attr->cache.size) / 1024;
            break;
          }
        }
      pus.push_back(p);
    }
    if (!pus.empty()) per_core.push_back(pus);
  }
  t.packages = std::max(1, hwloc_get_nbobjs_by_type(topo, HWLOC_OBJ_PACKAGE));
  hwloc_topology_destroy(topo);
  if (per_core.empty()) {  // no core objects: fall back to the allowed CPUs
    unsigned n = std::max(1u, std::thread::hardware_concurrency());
    for (unsigned i = 0; i < n; ++i) {
      CpuPu p;
      p.os_index = i;
      per_core.push_back({p});
    }
  }
  // Round-robin over cores: first PU of every core, then second PUs, ...
  for (size_t depth = 0;; ++depth) {
    bool any = false;
    for (const auto& pus : per_core)
      if (depth < pus.size()) {
        t.pu_order.push_back(pus[depth].os_index);
        t.pu_info.push_back(pus[depth]);
        any = true;
      }
    if (!any) break;
  }
  t.cores = static_cast<int>(per_core.size());
  t.pus = static_cast<int>(t.pu_order.size());
  t.summary = str_cat(t.packages, t.packages == 1 ? " package, " : " packages, ", t.cores,
                      t.cores == 1 ? " core, " : " cores, ", t.pus, t.pus == 1 ? " PU" : " PUs");
  return t;
}

}  // namespace

std::string CpuTopology::shape() const {
  std::vector<int> os, core, l2, l3, numa;
  for (const CpuPu& p : pu_info) {
    os.push_back(static_cast<int>(p.os_index));
    core.push_back(p.core);
    l2.push_back(p.l2);
    l3.push_back(p.l3);
    numa.push_back(p.numa);
  }
  return str_cat("pus=", str_join(os, ","), ";core=", str_join(core, ","), ";l2=", str_join(l2, ","),
                 ";l3=", str_join(l3, ","), ";numa=", str_join(numa, ","));
}

const CpuTopology& cpu_topology() {
  static const CpuTopology t = read_topology();
  return t;
}

bool pin_current_thread_to_pu(unsigned os_index) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(os_index, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0;
}

bool pin_current_thread(int slot) {
  const CpuTopology& t = cpu_topology();
  if (t.pu_order.empty()) return false;
  return pin_current_thread_to_pu(t.pu_order[static_cast<size_t>(slot) % t.pu_order.size()]);
}

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      size_t colon = line.find(':');
      if (colon != std::string::npos) {
        std::string m = line.substr(colon + 1);
        m.erase(0, m.find_first_not_of(' '));
        return m;
      }
    }
  }
  return "unknown-cpu";
}

std::string cpu_id() {
  // "cpu family", "model" and "stepping" of the first processor.
  std::map<std::string, std::string> id;
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line) && !line.empty()) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string k = line.substr(0, colon), v = line.substr(colon + 1);
    k.erase(k.find_last_not_of(" \t") + 1);
    v.erase(0, v.find_first_not_of(' '));
    id[k] = v;
  }
  std::string key = str_cat(cpu_model_name(), "-f", id["cpu family"], "m", id["model"], "s", id["stepping"]);
  for (char& c : key)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-') c = '_';
  return key;
}

}  // namespace tessera
