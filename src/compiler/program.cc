#include "compiler/program.h"

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <set>

#include "base/check.h"
#include "base/clock.h"
#include "base/strings.h"
#include "compiler/plan_choice.h"
#include "kernels/cpu/kernel.h"
#include "topology/host_map.h"
#include "ir/ops/op_registry.h"
#include "onnx/importer.h"

namespace tessera {

int Program::slot_of(const Value* v) const {
  for (size_t i = 0; i < slots.size(); ++i)
    if (slots[i].value == v) return static_cast<int>(i);
  return -1;
}

KernelTable kernels_or_cpu(KernelTable kernels) { return kernels.empty() ? cpu_kernels() : kernels; }

std::vector<std::string> supported_ops(KernelTable kernels) {
  std::vector<std::string> out;
  for (const std::string& op : op_names())
    if (kernel_find(kernels_or_cpu(kernels), op) != nullptr && op.rfind("Tessera", 0) != 0)
      out.push_back(op);  // not internal ops
  return out;
}

// Before folding: an op another device runs may still fold away on the
// host (Shape, Range, a constant Slice), so such a node passes here and is
// refused, by name, only if it is left once the graph is folded.
Status check_supported(const Graph& g, KernelTable kernels) {
  for (auto& n : g.nodes()) {
    bool internal = n->op_type.rfind("Tessera", 0) == 0;  // made by lowering, never read from files
    if (!internal && op_find(n->op_type) != nullptr &&
        (kernel_find(kernels_or_cpu(kernels), n->op_type) != nullptr || kernel_find(cpu_kernels(), n->op_type) != nullptr))
      continue;
    return unimplemented(str_cat("op ", n->op_type, " (node '", n->name, "') is not supported; supported ops: ",
                                 str_join(supported_ops(kernels), ", ")));
  }
  return Status();
}

Result<Shape> parse_dims(const std::string& text) {
  if (text.empty() || text == "scalar") return Shape();
  std::string t = text;
  std::replace(t.begin(), t.end(), ',', 'x');
  std::vector<int64_t> dims;
  for (const std::string& part : str_split(t, 'x')) {
    int64_t d;
    if (!parse_int64(part, &d) || d < 0)
      return invalid_argument(str_cat("bad dimensions '", text, "' (expected e.g. 1x3x224x224)"));
    dims.push_back(d);
  }
  return Shape(dims);
}

// Moves the graph's constants of under kPackedConstantMax bytes into one
// page-aligned block, each at a 64-byte aligned offset, in the order of
// the graph's values: where a loaded Executable finds them in its mapped
// weights section (executable_write.cc lays the small ones out so). Left
// where the heap put them, small constants lie at offsets (to each other,
// to the arena, modulo a page) that differ from process to process, and so
// do the times of small ops that read them. Larger constants keep their
// own allocations (a whole block would hold every weight twice while it is
// filled).
void pack_constants(Graph& g) {
  auto packed = [](const Value& v) { return v.is_constant() && v.constant->nbytes() < kPackedConstantMax; };
  size_t bytes = 0;
  for (const auto& v : g.values())
    if (packed(*v)) bytes += (v->constant->nbytes() + 63) / 64 * 64;
  if (bytes == 0) return;
  void* block = aligned_alloc_pages(bytes);
  std::shared_ptr<void> owner(block, aligned_free64);
  char* at = static_cast<char*>(block);
  for (const auto& v : g.values()) {
    if (!packed(*v)) continue;
    const Tensor old = *v->constant;  // its storage lives until the view replaces it
    const size_t n = old.nbytes();
    if (n > 0) std::memcpy(at, old.raw(), n);
    std::memset(at + n, 0, (n + 63) / 64 * 64 - n);
    v->constant = Tensor::view(old.dtype(), old.shape(), at, owner);
    at += (n + 63) / 64 * 64;
  }
}

// Assigns slots: constants point at their tensors, runtime values at arena
// offsets from the memory plan.
void assign_slots(Program& p) {
  std::unordered_map<const Value*, int> index;
  auto add = [&](const Value* v) -> int {
    if (v == nullptr) return -1;
    auto it = index.find(v);
    if (it != index.end()) return it->second;
    Slot s;
    s.value = v;
    s.bytes = static_cast<size_t>(v->shape.numel()) * dtype_size(v->dtype);
    if (v->is_constant()) {
      s.constant = true;
      s.data = v->constant->raw();
    } else {
      s.offset = p.memory.offset.at(v);
    }
    p.slots.push_back(s);
    int id = static_cast<int>(p.slots.size()) - 1;
    index[v] = id;
    return id;
  };
  for (const Value* v : p.graph->inputs()) p.input_slots.push_back(add(v));
  for (Step& s : p.steps) {
    for (const Value* v : s.node->inputs) s.inputs.push_back(add(v));
    for (const Value* v : s.node->outputs) s.outputs.push_back(add(v));
  }
  for (const Value* v : p.graph->outputs()) p.output_slots.push_back(add(v));
}

Result<std::unique_ptr<Program>> compile_graph(std::unique_ptr<Graph> g, const CompileConfig& options) {
  int64_t t0 = now_ns();
  auto p = std::make_unique<Program>();
  p->stats.nodes_imported = static_cast<int>(g->nodes().size());
  const KernelTable kernels = kernels_or_cpu(options.kernels);
  TESSERA_RETURN_IF_ERROR(check_supported(*g, kernels));
  BindOptions bind;
  bind.input_shapes = options.input_shapes;
  bind.fold_constants = options.fold_constants;
  TESSERA_RETURN_IF_ERROR(bind_shapes(*g, bind, cpu_evaluate));
  SimplifyStats st = simplify(*g);
  p->stats.identities_removed = st.identities_removed;
  p->stats.folded = st.folded_removed;
  p->stats.dead_removed = st.dead_removed;
  if (options.fuse) {
    // Attention first: an epilogue could take its mask Add as a residual.
    TESSERA_ASSIGN_OR_RETURN(p->stats.attention_fused, fuse_attention(*g));
    TESSERA_ASSIGN_OR_RETURN(p->stats.activations_pushed, push_activations_through_concat(*g, &p->stats.activation_copies));
    TESSERA_ASSIGN_OR_RETURN(p->stats.fused, fuse_epilogues(*g));
    if (options.fuse_blocks) {
      TESSERA_ASSIGN_OR_RETURN(p->stats.blocks_fused, fuse_inverted_residuals(*g));
    }
    TESSERA_ASSIGN_OR_RETURN(p->stats.chains_fused, fuse_elementwise_chains(*g));
  }
  // Once the convs have their epilogues (and blocks their fused form): the
  // chains left of 1x1 and depthwise convs on the channel-blocked layout.
  if (options.channel_blocks && kernel_find(kernels, "TesseraBlockedConv") != nullptr) {
    TESSERA_ASSIGN_OR_RETURN(p->stats.convs_blocked, block_channels(*g, kChannelBlock));
  }
  if (options.lower_recurrent) {
    TESSERA_ASSIGN_OR_RETURN(p->stats.recurrent_lowered,
                             lower_recurrent(*g, options.recurrent_chunk, options.recurrent_carry));
  }
  // Last, once every producer is final: in-place parts must be written by
  // the node that makes them.
  if (options.concat_in_place) p->stats.concats_in_place = place_concats_in_place(*g);
  p->stats.convs_by_planes = mark_out_planes(*g);
  TESSERA_RETURN_IF_ERROR(verify_graph(*g));
  pack_constants(*g);
  TESSERA_ASSIGN_OR_RETURN(p->aliases, value_aliases(*g));
  for (auto& n : g->nodes()) {
    Step s;
    s.node = n.get();
    s.kernel = kernel_for(kernels, *n);
    if (s.kernel == nullptr)  // made by a pass for an op the device lacks
      return unimplemented(str_cat(n->label(), ": the device has no rKernel for ", n->op_type));
    p->steps.push_back(std::move(s));
  }
  p->graph = std::move(g);
  if (options.build_plan) {
    // Every step's ops and variants, costed by measurement (with the
    // profile cache) or by the analytic model; the policy picks among
    // them, and with a runner, auto times the best candidates.
    std::optional<Profiler> prof;
    ProfileOptions po = options.profile_options;
    if (options.host_map && po.host_tag.empty()) po.host_tag = host_profile_tag(*options.host_map);
    if (options.host_map && weights_are_cold(*p, options.host_map->cache_kept_kb()) && profiler_can_evict())
      po.cold_llc_kb = options.host_map->cache_kept_kb();
    p->stats.weights_cold = options.profile && po.cold_llc_kb > 0;
    if (options.profile) prof.emplace(po);
    TESSERA_RETURN_IF_ERROR(build_plan(*p, options, prof ? &*prof : nullptr));
    if (prof) prof->flush();
    p->costs_measured = options.profile;
  } else {
    std::vector<const Node*> order;
    for (Step& s : p->steps) {
      s.params.tasks = options.tasks_per_op;
      TESSERA_ASSIGN_OR_RETURN(s.op, s.kernel->make(*s.node, s.params));
      p->max_scratch_bytes = std::max(p->max_scratch_bytes, s.op->scratch_bytes());
      p->stats.rtasks += s.op->tasks();
      order.push_back(s.node);
    }
    p->memory = plan_memory(*p->graph, order, p->aliases);
    assign_slots(*p);
  }
  p->stats.compile_ms = static_cast<double>(now_ns() - t0) / 1e6;
  return p;
}

PlanLifetimes::PlanLifetimes(const Program& p, const Plan& plan) {
  std::unordered_map<const Value*, size_t> group_of;  // root value -> group
  auto get = [&](const Value* v) -> Use* {
    if (v == nullptr || v->is_constant()) return nullptr;
    auto a = p.aliases.find(v);
    const Value* root = a == p.aliases.end() ? v : a->second.base;
    auto [g, new_group] = group_of.try_emplace(root, uses_.size());
    if (new_group) {
      uses_.emplace_back();
      roots_.push_back(SIZE_MAX);
    }
    auto [it, inserted] = index_.try_emplace(v, values_.size());
    if (inserted) {
      values_.push_back(v);
      group_.push_back(g->second);
    }
    if (v == root) roots_[g->second] = it->second;
    return &uses_[g->second];
  };
  for (const Value* v : p.graph->inputs()) get(v)->pinned = true;
  for (size_t s = 0; s < p.steps.size(); ++s) {
    for (const Value* v : p.steps[s].node->inputs)
      if (Use* u = get(v)) u->consumers.push_back(static_cast<int>(s));
    for (const Value* v : p.steps[s].node->outputs)
      if (Use* u = get(v)) u->producers.push_back(static_cast<int>(s));
  }
  for (const Value* v : p.graph->outputs())
    if (Use* u = get(v)) u->pinned = true;
  // A root only ever seen through its parts (its Concat is not a step) is
  // still a value of its own.
  for (const auto& [v, a] : p.aliases) get(a.base);
  const size_t U = static_cast<size_t>(plan.veus);
  for (Use& u : uses_) {
    u.done.assign(U, 0);
    u.seen.assign(U, INT32_MAX);
    for (const std::vector<int>* steps : {&u.producers, &u.consumers})
      for (int s : *steps)
        for (size_t w = 0; w < U; ++w) u.done[w] = std::max(u.done[w], plan.done[static_cast<size_t>(s) * U + w]);
    for (int s : u.producers)
      for (size_t w = 0; w < U; ++w) u.seen[w] = std::min(u.seen[w], plan.seen[static_cast<size_t>(s) * U + w]);
  }
}

// a entirely before b: every step touching a happens before each of b's
// producers (and so before every step touching b, as each such step is a
// producer of b or comes after one). An op never happens before itself,
// so an op's input and output never share bytes. Step x happens before
// step y where y has seen, on every vEU, what x needs done there
// (Plan::happens_before); over all pairs, where the fewest any of b's
// producers has seen covers the most any step touching a needs.
bool PlanLifetimes::before(const Use& a, const Use& b) const {
  if (a.pinned || b.pinned || a.producers.empty() || b.producers.empty()) return false;
  for (size_t w = 0; w < a.done.size(); ++w)
    if (b.seen[w] < a.done[w]) return false;
  return true;
}

bool PlanLifetimes::conflict(size_t i, size_t j) const {
  const Use& a = uses_[group_[i]];
  const Use& b = uses_[group_[j]];
  return group_[i] == group_[j] || (!before(a, b) && !before(b, a));
}

MemoryPlan plan_memory_parallel(const Program& p, const Plan& plan) {
  PlanLifetimes life(p, plan);
  std::vector<const Value*> roots;
  std::vector<size_t> index;
  for (size_t i = 0; i < life.values().size(); ++i)
    if (life.is_root(i)) {
      roots.push_back(life.values()[i]);
      index.push_back(i);
    }
  MemoryPlan m = place_values(roots, [&](size_t i, size_t j) { return life.conflict(index[i], index[j]); });
  place_aliases(&m, p.aliases);
  return m;
}

Result<std::unique_ptr<Program>> compile_onnx(const std::string& path, const CompileConfig& options) {
  int64_t t0 = now_ns();
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Graph> g, import_onnx_file(path));
  auto p = compile_graph(std::move(g), options);
  if (!p.ok()) return p.status().message().rfind(path, 0) == 0 ? p.status() : p.status().with_context(path);
  (*p)->source = path;
  (*p)->stats.compile_ms = static_cast<double>(now_ns() - t0) / 1e6;
  return p;
}

}  // namespace tessera
