// The CPU as hwloc describes it: which processing units (PUs, hardware
// threads) this process may run on, ordered one PU per core first (so that
// N vEUs land on N distinct cores while there are cores left), then the
// remaining SMT siblings; and for each PU the core, L2, L3 and NUMA node
// it belongs to, where hwloc knows them. Virtual machines often hide the
// caches (no cache objects at all): the host map (host_map.h) measures
// what this leaves unknown.
//
// Thread-safety: cpu_topology() is computed once, then read-only.
#pragma once

#include <string>
#include <vector>

namespace tessera {

// One allowed PU. Group ids are hwloc's logical indexes: two PUs with the
// same id share that core or cache; -1 where hwloc has no such object.
struct CpuPu {
  unsigned os_index = 0;
  int core = -1;
  int l2 = -1;
  int l3 = -1;
  int numa = 0;
};

struct CpuTopology {
  int cores = 1;                   // cores with at least one allowed PU
  int pus = 1;                     // allowed PUs
  int packages = 1;
  std::vector<unsigned> pu_order;  // OS indices of PUs, placement order
  std::vector<CpuPu> pu_info;      // the same PUs, same order
  bool caches_known = false;       // hwloc reported L2 or L3 objects
  double llc_kb = 0;               // the first PU's last-level cache (L3, else L2), KB; 0 = unknown
  std::string summary;             // "1 package, 2 cores, 2 PUs"

  // What identifies this shape of host beside the CPU model: the allowed
  // PUs in placement order with their groups, e.g.
  // "pus=0,1;core=0,1;l2=0,1;l3=0,0;numa=0,0". Equal shapes give equal
  // strings.
  std::string shape() const;
};

const CpuTopology& cpu_topology();

// Pins the calling thread to the PU at position `slot` of pu_order (modulo
// its size); false if the OS refused.
bool pin_current_thread(int slot);
// Pins the calling thread to the PU with this OS index.
bool pin_current_thread_to_pu(unsigned os_index);

// "AMD EPYC 9B14" from /proc/cpuinfo, or "unknown-cpu".
std::string cpu_model_name();
// The model name with family, model and stepping, e.g. "AMD_EPYC-f25m17s1":
// a model name alone ("AMD EPYC" under some hypervisors) names several
// generations of different speed. Only letters, digits, '-' and '_'.
std::string cpu_id();

}  // namespace tessera
