// Choosing the Plan: the last stage of compile_graph.
//
// For a vEU count, the policies build Plans from per-rTask costs (plan.h,
// variants.h) and predict their makespans; `--policy auto` keeps the
// lower prediction. Predictions rest on costs measured one op at a time on
// a quiet machine, while a run reads weights from memory, data from other
// cores, and shares the chip with its other vEUs. So, given a PlanRunner,
// auto also measures:
//
//   1. candidates: for each vEU count in candidate_veus(N) — 1, the
//      powers of two below N, and N — the Plan with the lowest predicted
//      makespan, unless it leaves a vEU without rTasks (a Plan on fewer
//      vEUs does that work without a thread that only waits);
//   2. each runs on real vEUs, traced: per step, the median in-run time of
//      its rTasks (less the crossing the model charged) over its isolated
//      cost is that step's in-run ratio for that vEU count;
//   3. each count is planned again with its costs times those ratios,
//      and, where the host map charges for crossing, as if it did not
//      (a map measured while the host did not hold still cannot keep
//      the Plans it rules out from being timed);
//   4. every distinct candidate is timed, interleaved in rounds; the
//      fastest median wins, or the one on the fewest vEUs within 2 % of
//      it, so a Plan is never kept when one on fewer vEUs (the 1-vEU Plan
//      included) ran faster. Where a Plan wider than that stalled in 3
//      of 8 of its runs (a vEU waited beyond its predicted waits by over
//      a quarter of the run: the host ran the vEUs in turns for a
//      moment), every candidate is timed again after a pause, up to
//      twice, each keeping its best median;
//   4b. where the 1-vEU Plan won, the fastest wider Plan's rTasks run on
//      one thread (plan_one_thread_order) against it, interleaved; if
//      they run as fast (within the tie margin), that Plan is kept with
//      Plan::alone_first: its runs start alone and the run-mode chooser
//      (devices/cpu/run_mode.h) probes its vEUs now and then, so a choice
//      timed while the host held the vEUs back (in turns, on one core)
//      does not keep one vEU for the rest of the process;
//   5. the winner runs traced once more: its own in-run costs give its
//      predicted timeline, traced again (three traces at most, the
//      closest kept) while it misses the winner's median on its vEUs by
//      more than a tenth. Where every trace met a moment, the Plan as
//      built in step 3 predicts, if that comes closer. Still off by more
//      than kPredictionSlack: the host was not holding still, and the
//      choice is used but not cached.
//
// The choice (vEU count, policy, round, ratios, what each candidate
// measured) is
// cached in $TESSERA_CACHE/plans-<cpu>-<host digest>-k<version>.tsv, keyed
// by the program's structure and the vEUs asked for. A later compile of
// the same program on the same host rebuilds that Plan and times it
// against the other end (the 1-vEU Plan, or for a 1-vEU choice the Plan
// on all vEUs) in two short rounds; if the other now runs faster, or the
// choice's prediction misses its median, the choice is measured again.
// Runs slower than predicted count as a moment of the host until
// kDoubtProcesses processes over kDoubtSpanS have found them so (a line
// `<key>#slower` in the same file keeps the streak): until then the
// choice is kept as cached.
// A choice that starts alone is timed alone and on its vEUs against the
// 1-vEU Plan: it stands while alone it runs as fast and on its vEUs not
// faster (then it should start there). A 1-vEU choice is timed against the
// Plan on all vEUs alone too, and measured again where that runs as fast
// (4b then keeps a wider Plan starting alone).
// The Plan records it (Plan::requested_veus, measured_us, candidates), and
// so does an Executable.
//
// Thread-safety: compile-time only, on the compiling thread (the runner
// starts its own vEUs).
#pragma once

#include <vector>

#include "compiler/program.h"
#include "tessera/status.h"

namespace tessera {

class Profiler;

// 1, the powers of two below n, and n; at most kMaxCandidateCounts
// (the largest).
inline constexpr size_t kMaxCandidateCounts = 5;
std::vector<int> candidate_veus(int n);

// Candidates are timed in interleaved rounds, each candidate's batch
// about this long (at least kPlanChoiceMinRuns runs), sized from runs
// measured on this host, never from the prediction: a build or a host
// slower than the profile would otherwise time batches many times as long.
inline constexpr double kPlanChoiceRoundMs = 25;
inline constexpr int kPlanChoiceMinRuns = 3;

// Builds and installs the Program's Plan for options.schedule.veus vEUs:
// its ops (variants chosen), Plan, per-step costs, memory plan and slots.
// `prof` costs rTasks by measurement (null: the analytic model). Measures
// candidates when the policy is auto and options.plan_runner is set.
Status build_plan(Program& p, const CompileConfig& options, Profiler* prof);

}  // namespace tessera
