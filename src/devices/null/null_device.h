// The null backend: one Device that runs the whole pipeline — import,
// compile (with the CPU's rKernels, so its Plans are the CPU's), schedule,
// load, input checks, run — without touching data: runs complete at once
// and outputs are zero-filled. It lets CI exercise every layer above
// devices/ for a kind of device it lacks.
//
// Thread-safety: as devices/device.h.
#pragma once

#include "devices/device.h"

namespace tessera {

// The process's null backend (a singleton).
Backend* null_backend();

}  // namespace tessera
