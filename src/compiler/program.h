// The compiler's output for the simple executors: every node bound to its
// rKernel (an rOperator), in execution order, plus the static memory plan.
//
//   ONNX -> import -> check ops -> bind shapes + fold -> simplify
//        -> pick rKernels -> plan memory -> Program
//
// Ownership: a Program owns its Graph (values, constants) and its ROps; a
// Engine borrows it. Thread-safety: immutable after compile; safe to share.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "ir/graph.h"
#include "compiler/plan.h"
#include "compiler/profiler.h"
#include "kernels/rkernel.h"
#include "passes/passes.h"
#include "tessera/status.h"

namespace tessera {

struct CompileConfig {
  // The rKernels of the device the Program is for (devices/device.h: the
  // compiler asks the device, then chooses); empty: the CPU's.
  KernelTable kernels = {};
  std::map<std::string, Shape> input_shapes;  // bound dynamic dims
  int64_t tasks_per_op = 0;                   // 0: each kernel's own grain
  bool fold_constants = true;
  // Build a Plan for the plan executor (and a memory plan that follows its
  // parallel order) instead of the sequential-order memory plan.
  bool build_plan = false;
  ScheduleOptions schedule;
  // The host the Plan is for (borrowed; topology/host_map.h): what crossing
  // vEUs costs there. Null: hand-offs of kDefaultHandoffUs, crossing free.
  const HostMap* host_map = nullptr;
  // The host map's PU slots the vEUs will run on, vEU u on slots[u]
  // (a core set; a Plan on fewer vEUs takes the first). Empty: 0, 1, ...
  std::vector<int> slots;
  // The device's cost model for vEUs on the given slots (devices/device.h:
  // Device::costs). Empty: the host map's (uniform without one).
  std::function<VeuCosts(const std::vector<int>& slots)> costs;
  // The device's cost of one rTask of `node` cut into `tasks` (µs) where
  // nothing is measured. Empty: the host's analytic model
  // (analytic_task_cost).
  std::function<double(const Node& node, int64_t tasks)> task_cost;
  // With policy auto: time the best candidate Plans, on fewer vEUs too,
  // in real runs and keep the fastest, costs corrected by what the runs
  // saw (compiler/plan_choice.h); the choice is cached beside the profile.
  // Empty: the Plan with the lowest predicted makespan.
  PlanRunner plan_runner;
  // Cost the Plan's rTasks by measuring them (profiler, with its cache)
  // rather than with the analytic model.
  bool profile = false;
  ProfileOptions profile_options;
  // Lower forward LSTMs and GRUs to one rOperator per time step
  // (compiler/lower_rnn.cc); off: the whole-sequence rKernel, one rTask
  // per (direction, batch entry).
  bool lower_recurrent = true;
  // With lowering: project a stacked layer's input every this many steps,
  // so that the layers overlap as a diagonal wavefront. 0 projects each
  // layer's whole input at once, after the layer below, so a vEU's part of
  // R stays in its cache for the whole layer (faster on LSTM-TC:
  // docs/notes/2026-11-24-kernels-fusion-plans.md, "Lowering recurrent layers").
  int64_t recurrent_chunk = 0;
  // With lowering and no chunks: a stacked LSTM layer's input projection
  // is computed by the steps of the layer below, a tile of it in each of
  // their GEMVs, whose FMA units stream R from L2 half idle
  // (docs/architecture.md, "Lowering recurrent layers"); off: a separate
  // projection between the layers.
  bool recurrent_carry = true;
  // Offer heavy ops in several tilings and let the policy choose
  // (compiler/variants.h); off: every op in its kernel's own grain.
  bool variants = true;
  // Fuse Conv/Gemm with a following residual Add and activation, and
  // chains of elementwise ops (compiler/fuse.cc).
  bool fuse = true;
  // With `fuse`: MobileNetV2's inverted residual blocks as one op each
  // (fuse_inverted_residuals). Off by default: on the hosts measured the
  // fused blocks are more work than the three ops
  // (docs/notes/2026-11-24-kernels-fusion-plans.md, "Inverted residual blocks").
  bool fuse_blocks = false;
  // Let the producers of a batch-1 Concat's parts write them straight into
  // its output (passes.h, "In-place Concat").
  bool concat_in_place = true;
  // Run chains of 1x1 and depthwise convs on the channel-blocked layout
  // (block_channels), where the device has its rKernels.
  bool channel_blocks = true;
};

// Where a value lives at run time.
struct Slot {
  const Value* value = nullptr;
  bool constant = false;
  size_t offset = 0;            // into the arena (runtime values)
  const void* data = nullptr;   // constants
  size_t bytes = 0;
};

struct Step {
  const Node* node = nullptr;
  const RKernel* kernel = nullptr;
  KernelParams params;  // what the kernel was made with
  std::unique_ptr<ROp> op;
  std::vector<int> inputs;   // slot per node input, -1 where absent
  std::vector<int> outputs;  // slot per node output
};

struct CompileStats {
  int nodes_imported = 0;
  int identities_removed = 0;
  int folded = 0;
  int dead_removed = 0;
  int recurrent_lowered = 0;
  int fused = 0;          // Conv/Gemm epilogues fused
  int chains_fused = 0;   // elementwise chains fused
  int blocks_fused = 0;   // inverted residual blocks fused
  int attention_fused = 0;  // attention patterns fused
  int activations_pushed = 0;  // activations moved before a Concat
  int activation_copies = 0;   // the activation nodes made for them (one per Concat input)
  int concats_in_place = 0;    // Concats with parts written in place
  int convs_blocked = 0;       // convs on the channel-blocked layout
  int convs_by_planes = 0;     // 1x1 convs whose rTasks write whole output planes
  int64_t rtasks = 0;
  // rTask costs measured with the weights evicted first (a run reads them
  // from memory: weights_are_cold, profiler.h).
  bool weights_cold = false;
  double compile_ms = 0;
};

class Program {
 public:
  std::unique_ptr<Graph> graph;
  std::vector<Slot> slots;
  std::vector<Step> steps;
  MemoryPlan memory;
  AliasMap aliases;  // in-place Concat parts
  size_t max_scratch_bytes = 0;  // per task
  std::vector<int> input_slots, output_slots;
  std::optional<Plan> plan;           // when compiled for the plan executor
  std::vector<double> task_cost_us;   // per step: cost of one rTask
  bool costs_measured = false;        // profiled (else analytic)
  CompileStats stats;
  std::string source;  // model path

  int slot_of(const Value* v) const;
};

// Every op type with a definition and an rKernel in `kernels` (empty: the
// CPU's), sorted.
std::vector<std::string> supported_ops(KernelTable kernels = {});
// Fails, naming the op type, the node and the supported ops, if any node has
// an op Tessera lacks (or `kernels` has no rKernel for).
Status check_supported(const Graph& g, KernelTable kernels = {});
// `kernels`, or the CPU's where empty.
KernelTable kernels_or_cpu(KernelTable kernels);

Result<std::unique_ptr<Program>> compile_graph(std::unique_ptr<Graph> g, const CompileConfig& options);
Result<std::unique_ptr<Program>> compile_onnx(const std::string& path, const CompileConfig& options);

// Fuses Conv/Gemm + residual Add + activation into TesseraFusedConv /
// TesseraFusedGemm (fuse.cc); returns how many were fused.
Result<int> fuse_epilogues(Graph& g);
// After fuse_epilogues, with CompileConfig::fuse_blocks: a 1x1 conv (+ Relu or Clip) -> depthwise conv
// (+ Relu or Clip) -> 1x1 conv (+ residual, activation), each the only
// reader of the last (MobileNetV2's inverted residual block), becomes one
// TesseraInvertedResidual that works in strips of output rows, the
// expanded channels only ever in cache. Taken when the block's input has
// at most kInvertedResidualMaxInput channels (the expand conv's
// reduction: a short one is bound by the bytes it writes) and at least
// kInvertedResidualMinHeight rows: a strip's depthwise windows need rows
// of the strips beside it, which rTask boundaries compute twice (on 7x7
// maps, one row per rTask computed 3 rows: 4.7x the unfused work), and
// smaller maps' expanded tensors stay in cache anyway.
inline constexpr int64_t kInvertedResidualMaxInput = 256;
inline constexpr int64_t kInvertedResidualMinHeight = 28;
Result<int> fuse_inverted_residuals(Graph& g);
// With CompileConfig::channel_blocks (block_channels.cc): 1x1 and depthwise
// convs whose channels are multiples of `block`, in groups of at least
// `min_convs` joined by the values between them and with at most one
// value converted in or out per kBlockedConvsPerConversion of their convs,
// become TesseraBlockedConvs on the channel-blocked layout, with a
// TesseraToBlocked / TesseraFromBlocked where a value enters or leaves a
// group; returns how many convs. Long chains gain (MobileNetV2, MnasNet:
// one conversion in and one out for 51 convs); groups broken up by other
// ops lose what the conversions cost (EfficientNet's squeeze-excitation
// blocks, RegNet's grouped 3x3s between its 1x1s, NASNet's Relus and
// Concats: one or two conversions for every two or three convs).
inline constexpr int kBlockedMinConvs = 3;
inline constexpr int kBlockedConvsPerConversion = 4;
// The block the CPU's blocked rKernels take: 8 channels, one 256-bit vector.
inline constexpr int64_t kChannelBlock = 8;
Result<int> block_channels(Graph& g, int64_t block, int min_convs = kBlockedMinConvs);
// 1x1 convs (Conv or TesseraFusedConv, stride 1, unpadded, group 1) with
// at least 32 output channels get attribute out_planes = 1 unless a reader
// of their output cuts its work by pixel blocks (a dense conv other than a
// 1x1, or a 1x1 left unmarked; through Concats that hold the output in
// place): their rTasks then write blocks of whole output planes, the parts
// that readers cutting by planes or ranges (activations, elementwise ops,
// pools, depthwise and grouped convs) give the same vEU, where pixel
// blocks would write a piece of every plane (out_planes.cc); returns how
// many.
int mark_out_planes(Graph& g);
// act(Concat(x...)) -> Concat(act(x)...) where each x's producer absorbs
// it (fuse.cc); returns how many Concats, and adds the activation nodes
// made to *created.
Result<int> push_activations_through_concat(Graph& g, int* created);
// Fuses MatMul -> scale -> mask -> Softmax -> MatMul into TesseraAttention
// (fuse.cc); returns how many were fused.
Result<int> fuse_attention(Graph& g);
// Fuses chains of float elementwise ops into TesseraFusedElementwise
// (fuse.cc); returns how many chains were fused.
Result<int> fuse_elementwise_chains(Graph& g);

// Lowers forward LSTMs and GRUs to per-step rOperators (lower_rnn.cc),
// projecting a stacked layer's input every `chunk` steps (0: all at once,
// or with `carry`, inside the steps of the layer below where it can);
// returns how many layers were lowered.
Result<int> lower_recurrent(Graph& g, int64_t chunk, bool carry);

// Parses "1x3x224x224" (also "1,3,224,224"; "" or "scalar" for rank 0).
Result<Shape> parse_dims(const std::string& text);

// Lifetimes of a Program's runtime values under a Plan: two values conflict
// (may be live at once) unless every access to one happens before every
// access to the other under every interleaving the Plan's waits allow.
// Graph inputs and outputs live through the whole run. An in-place Concat
// part (p.aliases) is one group with the Concat's output: the group's
// accesses are all of its members', and its members always conflict.
class PlanLifetimes {
 public:
  PlanLifetimes(const Program& p, const Plan& plan);
  const std::vector<const Value*>& values() const { return values_; }
  size_t index(const Value* v) const { return index_.at(v); }
  bool conflict(size_t i, size_t j) const;
  size_t group(size_t i) const { return group_[i]; }
  bool is_root(size_t i) const { return values_[roots_[group_[i]]] == values_[i]; }

 private:
  struct Use {
    std::vector<int> producers;  // steps; none for graph inputs
    std::vector<int> consumers;
    bool pinned = false;
    // Per vEU: the most rTasks any step touching the value needs done
    // there (Plan::done), and the fewest any producer has seen
    // (Plan::seen): one comparison orders two values.
    std::vector<int32_t> done, seen;
  };
  bool before(const Use& a, const Use& b) const;
  std::vector<const Value*> values_;
  std::unordered_map<const Value*, size_t> index_;
  std::vector<size_t> group_;  // per value: its group's Use
  std::vector<size_t> roots_;  // per group: the value that holds the others
  std::vector<Use> uses_;
};

// Memory plan for a parallel Plan: values share bytes only where they do
// not conflict (PlanLifetimes); in-place parts lie inside their Concat's
// output.
MemoryPlan plan_memory_parallel(const Program& p, const Plan& plan);

// Constants under this many bytes lie together, in one page-aligned block
// in the order of the graph's values, in a compiled Program (compile_graph)
// and at the start of an Executable's weights section alike.
inline constexpr size_t kPackedConstantMax = size_t{1} << 20;

// Points every Step's inputs and outputs at Slots: constants at their
// tensors, runtime values at p.memory's arena offsets.
void assign_slots(Program& p);

}  // namespace tessera
