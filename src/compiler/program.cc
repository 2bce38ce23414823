#include "compiler/program.h"

#include <algorithm>
#include <set>

#include "base/clock.h"
#include "base/strings.h"
#include "ir/ops/op_registry.h"
#include "onnx/importer.h"

namespace tessera {

int Program::slot_of(const Value* v) const {
  for (size_t i = 0; i < slots.size(); ++i)
    if (slots[i].value == v) return static_cast<int>(i);
  return -1;
}

std::vector<std::string> supported_ops() {
  std::vector<std::string> out;
  for (const std::string& op : op_names())
    if (cpu_kernel_find(op) != nullptr) out.push_back(op);
  return out;
}

Status check_supported(const Graph& g) {
  for (auto& n : g.nodes()) {
    if (op_find(n->op_type) != nullptr && cpu_kernel_find(n->op_type) != nullptr) continue;
    return unimplemented(str_cat("op ", n->op_type, " (node '", n->name, "') is not supported; supported ops: ",
                                 str_join(supported_ops(), ", ")));
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

namespace {

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

}  // namespace

Result<std::unique_ptr<Program>> compile_graph(std::unique_ptr<Graph> g, const CompileOptions& options) {
  int64_t t0 = now_ns();
  auto p = std::make_unique<Program>();
  p->stats.nodes_imported = static_cast<int>(g->nodes().size());
  TESSERA_RETURN_IF_ERROR(check_supported(*g));
  BindOptions bind;
  bind.input_shapes = options.input_shapes;
  bind.fold_constants = options.fold_constants;
  TESSERA_RETURN_IF_ERROR(bind_shapes(*g, bind, cpu_evaluate));
  SimplifyStats st = simplify(*g);
  p->stats.identities_removed = st.identities_removed;
  p->stats.folded = st.folded_removed;
  p->stats.dead_removed = st.dead_removed;
  TESSERA_RETURN_IF_ERROR(verify_graph(*g));
  std::vector<const Node*> order;
  for (auto& n : g->nodes()) {
    Step s;
    s.node = n.get();
    s.kernel = cpu_kernel_find(n->op_type);
    KernelParams kp;
    kp.tasks = options.tasks_per_op;
    TESSERA_ASSIGN_OR_RETURN(s.op, s.kernel->make(*n, kp));
    p->max_scratch_bytes = std::max(p->max_scratch_bytes, s.op->scratch_bytes());
    p->stats.rtasks += s.op->tasks();
    order.push_back(n.get());
    p->steps.push_back(std::move(s));
  }
  p->memory = plan_memory(*g, order);
  p->graph = std::move(g);
  assign_slots(*p);
  p->stats.compile_ms = static_cast<double>(now_ns() - t0) / 1e6;
  return p;
}

Result<std::unique_ptr<Program>> compile_onnx(const std::string& path, const CompileOptions& options) {
  int64_t t0 = now_ns();
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Graph> g, import_onnx_file(path));
  auto p = compile_graph(std::move(g), options);
  if (!p.ok()) return p.status().message().rfind(path, 0) == 0 ? p.status() : p.status().with_context(path);
  (*p)->source = path;
  (*p)->stats.compile_ms = static_cast<double>(now_ns() - t0) / 1e6;
  return p;
}

}  // namespace tessera
