// The PlanRunner (compiler/plan.h) of this process's CPU, for the measured
// plan choice (compiler/plan_choice.h): the Program's arena allocated and
// its argument pointers resolved, its Plan run on a CpuVDevice of
// plan.veus vEUs. Float graph inputs hold seeded values uniform in
// [-1, 1), every other byte is zero (valid for every kernel, Gather
// indices included). Traced runs give each rTask's median duration less
// the cost of reading the clock. Before measuring it waits (up to about
// 150 ms) for the host to let every vEU's PU run at full speed at once
// (host_quiet); PlanTiming::contended says when it never did, and
// PlanTiming::stalled_runs counts the timed runs in which the host did
// not run the vEUs at once (run_mode.h, run_stalled).
//
// Thread-safety: the runner may be called from one thread at a time; it
// starts and stops its own vEUs on each call.
#pragma once

#include "compiler/plan.h"

namespace tessera {

// `pin`: as EngineOptions::pin. `expected_gflops`: the first PU's FMA
// rate in the host map (0: not checked), below which the host counts as
// busy; `expected_handoff_ns`: the map's hand-off between the first two
// vEUs' PUs (0: not checked), above which (host_quiet) it counts as busy
// too.
// `slots`: the PU slots (topology order) vEU u runs on, slots[u]; empty:
// 0, 1, ...
PlanRunner cpu_plan_runner(bool pin = true, double expected_gflops = 0, std::vector<int> slots = {},
                           double expected_handoff_ns = 0);

}  // namespace tessera
