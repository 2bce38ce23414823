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
// The cost model (VeuCosts) charges what crossing vEUs costs on this host
// (topology/host_map.h): a wait on another vEU adds the measured hand-off
// to an rTask's start, and an rTask that reads bytes another vEU produced
// takes longer by bytes x the measured crossing cost for that pair, and at
// least by the pair's hand-off (a line's latency, however few bytes). How
// much of each input an rTask reads, and which part of its output it
// writes, the rKernel says (kernels/cpu/kernel.h, Access): a part read by
// flat range overlaps only the producer's parts of the same range.
//
// The scheduler sees a program as a TaskGraph (ops with their rTask
// counts, the data between them and how rTasks touch it) and the device as
// a cost model (per-rTask costs and VeuCosts): any backend that can say
// those reuses it, and its tests build graphs by hand.
//
// Thread-safety: a Plan is immutable once built.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kernels/rkernel.h"
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

  // How it was chosen (compiler/plan_choice.h). The measured choice times
  // candidates on fewer vEUs too, so `veus` may be below requested_veus.
  struct Candidate {
    int veus = 1;
    Policy policy = Policy::kWavefront;
    double predicted_us = 0, measured_us = 0;
  };
  int requested_veus = 0;            // 0: veus
  double measured_us = 0;            // its median makespan when chosen; 0: chosen by prediction alone
  std::vector<Candidate> candidates;  // what the measured choice timed
  // The 1-vEU Plan ran fastest, and this wider Plan's rTasks on one thread
  // (plan_one_thread_order) as fast: runs start alone, and the run-mode
  // chooser (devices/cpu/run_mode.h) probes this Plan now and then, so a
  // choice timed while the host held the vEUs back gets the Plan back once
  // the host lets them run at once. measured_us is then the median alone.
  bool alone_first = false;
  double alone_predicted_us = 0;  // alone_first: a run alone, its rTasks' in-run costs added up
};

struct HostMap;

// The hand-off between two vEUs where nothing was measured (a spin
// hand-off between two vCPUs measures 0.05-0.3 µs).
inline constexpr double kDefaultHandoffUs = 0.2;

// What moving control and data between vEUs costs: vEU u runs on PU u of
// the host map (its placement order).
struct VeuCosts {
  int veus = 1;
  std::vector<double> handoff_us;  // [from * veus + to]
  std::vector<double> sizes_kb;    // ascending
  std::vector<std::vector<double>> crossing_us_per_kb;  // per size: [reader * veus + writer]
  bool crossing_free = true;       // no pair has a crossing cost

  double handoff(int from, int to) const { return handoff_us[static_cast<size_t>(from * veus + to)]; }
  // µs for `reader` to read `bytes` of a tensor of `tensor_bytes` (its size
  // picks the measured size) that `writer` produced, beyond reading its own.
  double crossing_us(int reader, int writer, double bytes, double tensor_bytes) const;

  // Every hand-off `handoff`, crossing free: the model without a host map.
  static VeuCosts uniform(int veus, double handoff = kDefaultHandoffUs);
  static VeuCosts from_host_map(const HostMap& m, int veus);
  // vEU u on the map's PU slots[u] (its placement order; vEUs beyond the
  // map's PUs take turns).
  static VeuCosts from_host_map(const HostMap& m, const std::vector<int>& slots);
};

// The first `veus` of `slots`, or 0..veus-1 where `slots` is empty (or
// short: the rest continue from its last).
std::vector<int> veu_slots(const std::vector<int>& slots, int veus);

struct ScheduleOptions {
  int veus = 1;
  Policy policy = Policy::kAuto;
  uint64_t seed = 0;  // kRandom only: a random valid schedule, for stress tests
  // Borrowed; null = VeuCosts::uniform(veus). Its vEU count must be veus.
  const VeuCosts* costs = nullptr;
};

// What the scheduler sees of a program: its ops (steps) in a topological
// order, each cut into `tasks` rTasks, and the data they read.
struct TaskGraph {
  struct Input {
    int producer = -1;   // the op that writes it, an earlier one; -1: a graph input (made on vEU 0)
    double bytes = 0;    // the whole tensor
    Access access = Access::kWhole;  // how each rTask reads it
    double read_bytes = 0;           // what one rTask reads, where far less than access says (0: as it says)
  };
  struct Op {
    int64_t tasks = 1;
    Access output = Access::kRange;  // how each rTask writes its output
    std::vector<Input> inputs = {};  // those made at run time (no constants)
    std::vector<int> preds = {};     // ops it waits for: its inputs' producers, each once
  };
  std::vector<Op> ops;
  size_t size() const { return ops.size(); }
  // Every producer and predecessor an earlier op, counts positive.
  Status validate() const;
};

// A Program's TaskGraph, with its steps' current ops (rTask counts and
// access patterns).
TaskGraph task_graph(const Program& p);

// Cost of one rTask of each step (µs), from the analytic cost model.
std::vector<double> analytic_task_costs(const Program& p);
struct Node;
// Steps each step reads from (producers of its inputs), deduplicated.
std::vector<std::vector<int>> step_predecessors(const Program& p);
double analytic_task_cost(const Node& n, int64_t tasks);  // one rTask of n cut into `tasks`

// Builds a Plan for `g` with the given per-op rTask costs.
Result<Plan> schedule(const TaskGraph& g, const std::vector<double>& task_cost_us, const ScheduleOptions& options);
// The same for a Program's steps.
Result<Plan> schedule(const Program& p, const std::vector<double>& task_cost_us, const ScheduleOptions& options);

// What running a Plan measured (compiler/plan_choice.h).
struct PlanTiming {
  std::vector<double> run_us;   // makespan of each timed run
  std::vector<double> task_us;  // traced runs: per placement, the median µs of that rTask
  bool contended = false;       // the host never let every vEU run at full speed at once
  // Timed runs in which a vEU waited beyond the Plan's predicted waits by
  // more than a quarter of the run: the host stopped running the vEUs at
  // once (devices/cpu/run_mode.h, run_stalled).
  int stalled_runs = 0;
};
// Runs a Program's Plan (with its memory plan and slots) on real vEUs:
// `warmup` untimed runs, then `runs` timed ones, each rTask timed when
// kTraced (then each traced run alternates with an untraced one, more of
// them for short Plans, and every span moves by the amount per rTask that
// makes the vEUs' spans and waits add up to the untraced runs). Supplied
// by the runtime, which the compiler sits below (devices/cpu/plan_runner.h).
// `kAlone`: every rTask on one thread, in plan_one_thread_order's order
// (what a run alone of the run-mode chooser does, devices/cpu/run_mode.h).
enum class PlanRunWay { kPlan, kTraced, kAlone };
using PlanRunner = std::function<Result<PlanTiming>(const Program& p, int warmup, int runs, PlanRunWay way)>;

// Recomputes a Plan's predicted timeline (placements' times, predicted_us)
// with other per-step costs and cost model (null: uniform); its
// instructions stay as they are.
Status plan_repredict(const TaskGraph& g, const std::vector<double>& task_cost_us, const VeuCosts* costs, Plan* plan);
Status plan_repredict(const Program& p, const std::vector<double>& task_cost_us, const VeuCosts* costs, Plan* plan);

// Checks a Plan against its Program: every rTask exactly once, waits name
// real vEUs and counts, every dependency covered, and no wait cycle (a
// simulation must finish). Used on Plans read from files.
Status plan_validate(const TaskGraph& g, const Plan& plan);
Status plan_validate(const Program& p, const Plan& plan);

// Every rTask of the Plan as (step, task), in an order one thread can run
// them in: each vEU's in its list's order, none before the counts its
// waits name (an interleaving the waits allow, so the memory plan holds
// and the outputs are bitwise the Plan's). Empty for a Plan whose waits
// cannot all pass.
std::vector<std::pair<int32_t, int64_t>> plan_one_thread_order(const Plan& plan);

// plan_validate, then fills the Plan's happens-before summaries (steps,
// done, seen) from its instruction lists alone: for Plans read from files.
Status plan_derive_clocks(const TaskGraph& g, Plan* plan);
Status plan_derive_clocks(const Program& p, Plan* plan);

}  // namespace tessera
