// Plan: the compile-time schedule of a Program's rTasks over N virtual
// execution units (vEUs), in the manner of Rammer (OSDI'20): the compiler
// decides which vEU runs which rTask in which order; the runtime only waits
// and signals.
//
// Each vEU has an instruction list:
//   run    S T   run rTask T of step S
//   signal K     publish "I have completed K rTasks" (release store)
//   wait   U K   spin until vEU U has published >= K (acquire load)
// Waits exist only for dependencies that cross vEUs and are not already
// implied by an earlier wait (vector clocks give the transitive reduction).
// Every vEU also publishes its final count when its list ends.
//
// Dependencies are at op granularity: every rTask of an op waits for every
// rTask of each op that produces one of its inputs.
//
// Thread-safety: a Plan is immutable once built.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "tessera/status.h"

namespace tessera {

class Program;

enum class Policy { kAuto, kWavefront, kCriticalPath, kRandom };
std::string_view policy_name(Policy p);
bool policy_parse(std::string_view name, Policy* out);

struct Instr {
  enum class Kind : uint8_t { kRun, kSignal, kWait };
  Kind kind;
  int32_t a;  // run: step; wait: vEU
  int64_t b;  // run: task; signal: count; wait: count
};

// Where and when (predicted, microseconds) each rTask runs.
struct TaskPlacement {
  int32_t step = 0;
  int64_t task = 0;
  int32_t veu = 0;
  int32_t index = 0;  // position among the vEU's rTasks
  double start_us = 0, end_us = 0;
};

struct Plan {
  int veus = 1;
  Policy policy = Policy::kAuto;  // the policy that built it (never kAuto)
  std::vector<std::vector<Instr>> program;  // per vEU
  std::vector<int64_t> tasks_per_veu;       // rTasks on each vEU (its final count)
  std::vector<TaskPlacement> placements;    // every rTask, in schedule order
  double predicted_us = 0;                  // predicted makespan
  int64_t waits = 0, signals = 0;

  // Happens-before between steps under every interleaving the waits allow,
  // from vector clocks: for step s and vEU v, done[s][v] is how many of v's
  // rTasks must have completed for all of s's rTasks on v to be done, and
  // seen[s][v] is how many of v's rTasks every rTask of s knows completed
  // when it starts. Step a happens before step b iff seen[b] >= done[a]
  // everywhere. The memory plan shares bytes only between values ordered so.
  int steps = 0;
  std::vector<int32_t> done, seen;  // [steps * veus]
  bool happens_before(int a, int b) const;
};

struct ScheduleOptions {
  int veus = 1;
  Policy policy = Policy::kAuto;
  uint64_t seed = 0;  // kRandom only: a random valid schedule, for stress tests
};

// Cost of one rTask of each step (µs), from the analytic cost model.
std::vector<double> analytic_task_costs(const Program& p);
struct Node;
// Steps each step reads from (producers of its inputs), deduplicated.
std::vector<std::vector<int>> step_predecessors(const Program& p);
double analytic_task_cost(const Node& n, int64_t tasks);  // one rTask of n cut into `tasks`

// Builds a Plan for `p` with the given per-step rTask costs.
Result<Plan> schedule(const Program& p, const std::vector<double>& task_cost_us, const ScheduleOptions& options);

// Checks a Plan against its Program: every rTask exactly once, waits name
// real vEUs and counts, every dependency covered, and no wait cycle (a
// simulation must finish). Used on Plans read from files.
Status plan_validate(const Program& p, const Plan& plan);

// plan_validate, then fills the Plan's happens-before summaries (steps,
// done, seen) from its instruction lists alone: for Plans read from files.
Status plan_derive_clocks(const Program& p, Plan* plan);

}  // namespace tessera
