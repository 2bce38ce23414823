// The CPU backend on the contract of devices/device.h: one Device, this
// host's CPU, with one vEU per core; a vDevice is a set of PU slots; its
// rKernels are kernels/cpu's; its cost model is the host map's; its
// LoadedProgram is the Engine (engine.h) and its plan runner times
// candidates on the vDevice's own slots (plan_runner.h).
//
// Thread-safety: as devices/device.h.
#pragma once

#include <memory>

#include "devices/device.h"

namespace tessera {

// The process's CPU backend (a singleton).
Backend* cpu_backend();

}  // namespace tessera
