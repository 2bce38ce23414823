#include "runtime/session.h"

#include <cstring>
#include <thread>

#include "base/log.h"
#include "base/strings.h"
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

Result<std::unique_ptr<Session>> Session::create(std::unique_ptr<Program> program, const SessionOptions& options) {
  int hw = static_cast<int>(std::thread::hardware_concurrency());
  if (hw <= 0) hw = 1;
  int threads = options.threads > 0 ? options.threads : hw;
  if (options.executor == Executor::kSequential) threads = 1;
  if (options.executor == Executor::kPlan) {
    if (!program->plan) return failed_precondition("the plan executor needs a Program compiled with a Plan");
    threads = program->plan->veus;
  }
  if (threads > 1024) return invalid_argument(str_cat("--threads ", threads, " is too many"));
  if (threads > hw)
    log_warning("running ", threads, " threads on ", hw, " hardware threads (", cpu_topology().summary,
                "); expect slowdowns");
  std::unique_ptr<Session> s(new Session(std::move(program), options, threads));
  return s;
}

Session::Session(std::unique_ptr<Program> program, const SessionOptions& options, int threads)
    : program_(std::move(program)), options_(options), threads_(threads) {
  arena_ = aligned_alloc64(program_->memory.arena_bytes);
  scratch_stride_ = (program_->max_scratch_bytes + 63) / 64 * 64;
  scratch_ = aligned_alloc64(scratch_stride_ * static_cast<size_t>(threads_));
  args_ = resolve_args(*program_, arena_);
  cpu_kernels_thread_init();
  if (options_.executor == Executor::kTwoLayer && threads_ > 1)
    pool_ = std::make_unique<ThreadPool>(threads_, [](int) { cpu_kernels_thread_init(); });
  if (options_.executor == Executor::kPlan)
    vdevice_ = std::make_unique<CpuVDevice>(threads_, program_->max_scratch_bytes, options_.pin);
}

Session::~Session() {
  pool_.reset();
  aligned_free64(arena_);
  aligned_free64(scratch_);
}

void Session::poison_arena() { std::memset(arena_, 0xFF, program_->memory.arena_bytes); }

Status Session::set_input(const std::string& name, const Tensor& t) {
  const auto& ins = inputs();
  for (size_t i = 0; i < ins.size(); ++i) {
    const Value* v = ins[i];
    if (v->name != name) continue;
    if (t.dtype() != v->dtype)
      return invalid_argument(str_cat("input '", name, "' is ", dtype_name(v->dtype), ", got ", dtype_name(t.dtype())));
    if (!(t.shape() == v->shape))
      return invalid_argument(str_cat("input '", name, "' has shape ", v->shape.to_string(), ", got ",
                                      t.shape().to_string(), " (use --shape to bind another size)"));
    const Slot& s = program_->slots[program_->input_slots[i]];
    if (s.bytes > 0) std::memcpy(static_cast<char*>(arena_) + s.offset, t.raw(), s.bytes);
    return Status();
  }
  std::vector<std::string> names;
  for (const Value* v : ins) names.push_back(v->name);
  return not_found(str_cat("the model has no input '", name, "' (inputs: ", str_join(names, ", "), ")"));
}

void Session::run_sequential() {
  void* scratch = scratch_;
  for (size_t i = 0; i < program_->steps.size(); ++i) {
    const ROp& op = *program_->steps[i].op;
    TaskArgs args{args_.in[i].data(), args_.out[i].data(), scratch};
    const int64_t n = op.tasks();
    for (int64_t t = 0; t < n; ++t) op.run(t, args);
  }
}

void Session::run_two_layer() {
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

Status Session::run() {
  if (vdevice_) vdevice_->run(*program_->plan, args_.steps);
  else if (pool_) run_two_layer();
  else run_sequential();
  return Status();
}

Tensor Session::output(size_t i) const {
  const Value* v = outputs()[i];
  const Slot& s = program_->slots[program_->output_slots[i]];
  Tensor t(v->dtype, v->shape);
  const void* src = s.constant ? s.data : static_cast<const char*>(arena_) + s.offset;
  if (s.bytes > 0) std::memcpy(t.raw(), src, s.bytes);
  return t;
}

}  // namespace tessera
