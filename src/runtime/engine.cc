#include "runtime/engine.h"

#include <cstring>
#include <thread>

#include "base/log.h"
#include "base/strings.h"
#include "kernels/cpu/kernel.h"
#include "topology/cpu_topology.h"

namespace tessera {

std::string_view executor_name(Executor e) {
  switch (e) {
    case Executor::kSequential: return "sequential";
    case Executor::kTwoLayer: return "two-layer";
    case Executor::kPlan: return "plan";
  }
  return "?";
}

bool executor_parse(std::string_view name, Executor* out) {
  if (name == "sequential") *out = Executor::kSequential;
  else if (name == "two-layer") *out = Executor::kTwoLayer;
  else if (name == "plan") *out = Executor::kPlan;
  else return false;
  return true;
}

ResolvedArgs resolve_args(const Program& p, void* arena) {
  auto addr = [&](int slot) -> void* {
    if (slot < 0) return nullptr;
    const Slot& s = p.slots[static_cast<size_t>(slot)];
    if (s.constant) return const_cast<void*>(s.data);
    return static_cast<char*>(arena) + s.offset;
  };
  ResolvedArgs r;
  for (const Step& st : p.steps) {
    std::vector<const void*> in;
    std::vector<void*> out;
    for (int s : st.inputs) in.push_back(addr(s));
    for (int s : st.outputs) out.push_back(addr(s));
    r.in.push_back(std::move(in));
    r.out.push_back(std::move(out));
  }
  for (size_t i = 0; i < p.steps.size(); ++i) r.steps.push_back({p.steps[i].op.get(), r.in[i].data(), r.out[i].data()});
  return r;
}

Result<std::unique_ptr<Engine>> Engine::create(std::unique_ptr<Program> program, const EngineOptions& options) {
  int hw = static_cast<int>(std::thread::hardware_concurrency());
  if (hw <= 0) hw = 1;
  int threads = options.threads > 0 ? options.threads : hw;
  if (options.executor == Executor::kSequential) threads = 1;
  if (options.executor == Executor::kPlan) {
    if (!program->plan) return failed_precondition("the plan executor needs a Program compiled with a Plan");
    threads = program->plan->veus;
  }
  if (threads > 1024) return invalid_argument(str_cat("--threads ", threads, " is too many"));
  if (threads > hw && !options.null_device)
    log_warning("running ", threads, " threads on ", hw, " hardware threads (", cpu_topology().summary,
                "); expect slowdowns");
  std::unique_ptr<Engine> s(new Engine(std::move(program), options, threads));
  return s;
}

Engine::Engine(std::unique_ptr<Program> program, const EngineOptions& options, int threads)
    : program_(std::move(program)), options_(options), threads_(threads) {
  arena_ = aligned_alloc64(program_->memory.arena_bytes);
  scratch_stride_ = (program_->max_scratch_bytes + 63) / 64 * 64;
  scratch_ = aligned_alloc64(scratch_stride_ * static_cast<size_t>(threads_));
  args_ = resolve_args(*program_, arena_);
  arena_args_ = resolve_args(*program_, arena_);
  bound_out_.assign(program_->output_slots.size(), nullptr);
  cpu_kernels_thread_init();
  if (options_.null_device) return;
  if (options_.executor == Executor::kTwoLayer && threads_ > 1)
    pool_ = std::make_unique<ThreadPool>(threads_, [](int) { cpu_kernels_thread_init(); });
  if (options_.executor == Executor::kPlan)
    vdevice_ = std::make_unique<CpuVDevice>(threads_, program_->max_scratch_bytes, options_.pin, options_.slots);
}

Engine::~Engine() {
  pool_.reset();
  aligned_free64(arena_);
  aligned_free64(scratch_);
}

void Engine::poison_arena() { std::memset(arena_, 0xFF, program_->memory.arena_bytes); }

Status Engine::set_input(const std::string& name, const Tensor& t) {
  const auto& ins = inputs();
  for (size_t i = 0; i < ins.size(); ++i) {
    const Value* v = ins[i];
    if (v->name != name) continue;
    if (t.dtype() != v->dtype)
      return invalid_argument(str_cat("input '", name, "' is ", dtype_name(v->dtype), ", got ", dtype_name(t.dtype())));
    if (!(t.shape() == v->shape))
      return invalid_argument(str_cat("input '", name, "' has shape ", v->shape.to_string(), ", got ",
                                      shape_string(t.shape()), " (another size is bound when compiling)"));
    const Slot& s = program_->slots[program_->input_slots[i]];
    if (s.bytes > 0) std::memcpy(static_cast<char*>(arena_) + s.offset, t.raw(), s.bytes);
    return Status();
  }
  std::vector<std::string> names;
  for (const Value* v : ins) names.push_back(v->name);
  return not_found(str_cat("the model has no input '", name, "' (inputs: ", str_join(names, ", "), ")"));
}

void Engine::run_sequential() {
  void* scratch = scratch_;
  for (size_t i = 0; i < program_->steps.size(); ++i) {
    const ROp& op = *program_->steps[i].op;
    TaskArgs args{args_.in[i].data(), args_.out[i].data(), scratch};
    const int64_t n = op.tasks();
    for (int64_t t = 0; t < n; ++t) op.run(t, args);
  }
}

void Engine::run_two_layer() {
  for (size_t i = 0; i < program_->steps.size(); ++i) {
    const ROp& op = *program_->steps[i].op;
    const void* const* in = args_.in[i].data();
    void* const* out = args_.out[i].data();
    auto body = [&](int64_t task, int thread) {
      TaskArgs args{in, out, static_cast<char*>(scratch_) + scratch_stride_ * static_cast<size_t>(thread)};
      op.run(task, args);
    };
    pool_->parallel_for(op.tasks(), body);
  }
}

Status Engine::run() {
  if (options_.null_device) {
    for (size_t i = 0; i < program_->output_slots.size(); ++i) {
      const Slot& s = program_->slots[program_->output_slots[i]];
      if (!s.constant && s.bytes > 0) std::memset(const_cast<void*>(output_data(i)), 0, s.bytes);
    }
    return Status();
  }
  cpu_kernels_thread_init();  // the calling thread runs rTasks too
  if (vdevice_) vdevice_->run(*program_->plan, args_.steps);
  else if (pool_) run_two_layer();
  else run_sequential();
  return Status();
}

Status Engine::bind(int slot, const Value* v, void* data) {
  const Slot& s = program_->slots[static_cast<size_t>(slot)];
  if (s.constant) return failed_precondition(str_cat("'", v->name, "' is a constant of the model"));
  if (program_->aliases.count(v))
    return failed_precondition(str_cat("'", v->name, "' is written in place into a Concat's output"));
  int uses = 0;
  for (int k : program_->input_slots) uses += k == slot;
  for (int k : program_->output_slots) uses += k == slot;
  if (uses > 1) return failed_precondition(str_cat("'", v->name, "' is more than one input or output of the model"));
  const size_t align = std::max<size_t>(1, dtype_size(v->dtype));
  if (data != nullptr && reinterpret_cast<uintptr_t>(data) % align != 0)
    return invalid_argument(str_cat("memory bound to '", v->name, "' is not aligned to its ", align, "-byte elements"));
  // Every argument pointer into the value's bytes, found once per slot.
  auto [it, fresh] = refs_.try_emplace(slot);
  if (fresh) {
    const uintptr_t lo = reinterpret_cast<uintptr_t>(arena_) + s.offset, hi = lo + s.bytes;
    for (size_t k = 0; k < arena_args_.in.size(); ++k) {
      for (size_t j = 0; j < arena_args_.in[k].size(); ++j) {
        const uintptr_t p = reinterpret_cast<uintptr_t>(arena_args_.in[k][j]);
        if (p >= lo && p < hi) it->second.push_back({k, j, false, p - lo});
      }
      for (size_t j = 0; j < arena_args_.out[k].size(); ++j) {
        const uintptr_t p = reinterpret_cast<uintptr_t>(arena_args_.out[k][j]);
        if (p >= lo && p < hi) it->second.push_back({k, j, true, p - lo});
      }
    }
  }
  char* base = data != nullptr ? static_cast<char*>(data) : static_cast<char*>(arena_) + s.offset;
  for (const ArgRef& r : it->second) {
    if (r.out) args_.out[r.step][r.arg] = base + r.offset;
    else args_.in[r.step][r.arg] = base + r.offset;
  }
  return Status();
}

Status Engine::bind_input(size_t i, const void* data) {
  if (i >= program_->input_slots.size()) return out_of_range(str_cat("input ", i, " of ", program_->input_slots.size()));
  return bind(program_->input_slots[i], inputs()[i], const_cast<void*>(data));
}

Status Engine::bind_output(size_t i, void* data) {
  if (i >= program_->output_slots.size()) return out_of_range(str_cat("output ", i, " of ", program_->output_slots.size()));
  TESSERA_RETURN_IF_ERROR(bind(program_->output_slots[i], outputs()[i], data));
  bound_out_[i] = data;
  return Status();
}

const void* Engine::output_data(size_t i) const {
  if (bound_out_[i] != nullptr) return bound_out_[i];
  const Slot& s = program_->slots[program_->output_slots[i]];
  return s.constant ? s.data : static_cast<const char*>(arena_) + s.offset;
}

Tensor Engine::output(size_t i) const {
  const Value* v = outputs()[i];
  const Slot& s = program_->slots[program_->output_slots[i]];
  Tensor t(v->dtype, v->shape);
  if (s.bytes > 0) std::memcpy(t.raw(), output_data(i), s.bytes);
  return t;
}

}  // namespace tessera
