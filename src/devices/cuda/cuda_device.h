// The CUDA backend: one Device per GPU. A vEU is a thread block resident on
// one multiprocessor; a Plan runs as one persistent launch in which block u
// walks vEU u's instruction list (plan_kernel.cu), with no host work per
// op. The two-layer executor, the control, launches each op once, replayed
// as a CUDA graph.
//
// The compiler runs with the device's rKernels (cuda_rkernels.h) and
// without the passes whose ops they lack (fusion, recurrent lowering,
// in-place Concat parts); rTask costs are the analytic model's.
//
// Thread-safety: as devices/device.h.
#pragma once

#include "devices/device.h"

namespace tessera {

// The process's CUDA backend; discovers no device where there is no driver
// or no GPU.
Backend* cuda_backend();

}  // namespace tessera
