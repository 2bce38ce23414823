// The CPU's topology as far as vEU placement needs it, read once with
// hwloc: which processing units (PUs, hardware threads) this process may
// run on, ordered one PU per core first (so that N vEUs land on N distinct
// cores while there are cores left), then the remaining SMT siblings.
//
// Thread-safety: cpu_topology() is computed once, then read-only.
#pragma once

#include <string>
#include <vector>

namespace tessera {

struct CpuTopology {
  int cores = 1;                   // cores with at least one allowed PU
  int pus = 1;                     // allowed PUs
  std::vector<unsigned> pu_order;  // OS indices of PUs, placement order
  std::string summary;             // "1 package, 2 cores, 2 PUs"
};

const CpuTopology& cpu_topology();

// Pins the calling thread to the PU at position `slot` of pu_order (modulo
// its size); false if the OS refused.
bool pin_current_thread(int slot);

}  // namespace tessera
