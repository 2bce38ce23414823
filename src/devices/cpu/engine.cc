#include "devices/cpu/engine.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <thread>

#include "base/clock.h"
#include "base/log.h"
#include "base/strings.h"
#include "devices/cpu/run_mode.h"
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

namespace {

// Per-thread scratch: `threads` blocks of the Program's largest rTask
// scratch, 64-byte aligned.
class Scratch {
 public:
  Scratch(const Program& p, int threads)
      : stride_((p.max_scratch_bytes + 63) / 64 * 64), base_(aligned_alloc64(stride_ * static_cast<size_t>(threads))) {}
  ~Scratch() { aligned_free64(base_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  void* at(int thread) const { return static_cast<char*>(base_) + stride_ * static_cast<size_t>(thread); }

 private:
  size_t stride_;
  void* base_;
};

// Every rTask of every op in order, on the calling thread.
class SequentialExecutor : public StepExecutor {
 public:
  explicit SequentialExecutor(const Program& p) : scratch_(p, 1) {}
  void run(const Program& p, const ResolvedArgs& a) override {
    for (size_t i = 0; i < p.steps.size(); ++i) {
      const ROp& op = *p.steps[i].op;
      TaskArgs args{a.in[i].data(), a.out[i].data(), scratch_.at(0)};
      for (int64_t t = 0, n = op.tasks(); t < n; ++t) op.run(t, args);
    }
  }

 private:
  Scratch scratch_;
};

// Op by op; each op's rTasks spread over a pool of threads (the caller
// among them).
class TwoLayerExecutor : public StepExecutor {
 public:
  TwoLayerExecutor(const Program& p, int threads)
      : scratch_(p, threads), pool_(threads, [](int) { cpu_kernels_thread_init(); }) {}
  void run(const Program& p, const ResolvedArgs& a) override {
    for (size_t i = 0; i < p.steps.size(); ++i) {
      const ROp& op = *p.steps[i].op;
      const void* const* in = a.in[i].data();
      void* const* out = a.out[i].data();
      pool_.parallel_for(op.tasks(), [&](int64_t task, int thread) { op.run(task, {in, out, scratch_.at(thread)}); });
    }
  }

 private:
  Scratch scratch_;
  ThreadPool pool_;
};

// The Program's Plan on vEUs that only wait and signal; with `adapt`, on
// the calling thread alone while that runs faster, and on 2 vEUs with the
// lists on each other's PUs while that runs faster (run_mode.h).
class PlanExecutor : public StepExecutor {
 public:
  // `pus`: veus, or 2 for a 1-vEU Plan given a spare PU.
  PlanExecutor(const Program& p, const EngineOptions& o, int veus, int pus)
      : device_(pus, p.max_scratch_bytes, o.pin, o.slots) {
    if (o.balance && veus >= 2) balance_ = PlanBalance(*p.plan);
    if (pus > veus) {
      has_spare_ = true;
      always_exchanged_ = o.always_exchanged;
      if (o.adapt) spare_.emplace();
      return;
    }
    // A Plan the measured choice runs alone first runs alone for good
    // where nothing adapts: as fast as its 1-vEU Plan when chosen.
    const bool alone_first = p.plan->alone_first && !o.always_exchanged;
    if (!(o.adapt || o.always_alone || o.always_exchanged || alone_first) || veus < 2) return;
    order_ = plan_one_thread_order(*p.plan);
    if (order_.empty()) return;
    always_alone_ = o.always_alone || (alone_first && !o.adapt);
    always_alone_veu_ = veus == 2 ? std::clamp(o.alone_veu, 0, 1) : 0;
    // Pinned on 2 vEUs, a run alone goes on whichever PU ran its list fastest.
    chooser_.emplace(plan_predicted_waits_us(*p.plan), p.plan->predicted_us, o.pin && veus == 2, alone_first);
    // Exchanging lists moves them between PUs only where they are pinned.
    if (o.adapt && veus == 2 && o.pin) exchange_.emplace(plan_predicted_waits_us(*p.plan), p.plan->predicted_us);
    always_exchanged_ = o.always_exchanged && veus == 2;
    waits_us_.assign(static_cast<size_t>(veus), 0);
  }
  void run(const Program& p, const ResolvedArgs& a) override {
    alone_ = false;
    exchanged_ = false;
    pending_ = false;
    if (has_spare_) {
      if (!spare_ || device_.tracing()) {
        exchanged_ = always_exchanged_;
        return device_.run(*p.plan, a.steps, exchanged_);
      }
      // A 1-vEU Plan with a spare PU: its list on whichever PU runs it faster.
      exchanged_ = spare_->spare();
    } else {
      if (!chooser_ || device_.tracing()) return device_.run(*p.plan, a.steps, false, &balance_);
      alone_ = always_alone_ || (!always_exchanged_ && chooser_->alone());
      exchanged_ = !alone_ && (always_exchanged_ || (exchange_ && exchange_->exchanged()));
    }
    const int64_t t0 = caller_timed_ ? 0 : now_ns();
    if (alone_) device_.run_alone(order_, a.steps, always_alone_ ? always_alone_veu_ : chooser_->alone_veu());
    else if (has_spare_) device_.run(*p.plan, a.steps, exchanged_);
    else device_.run(*p.plan, a.steps, exchanged_, &balance_);
    pending_ = true;
    if (!caller_timed_) note(t0, now_ns());
  }
  // The Session reads the clock around every run anyway: from its first
  // call on, the choosers take its times, and a run reads the clock no
  // more than a run that does not adapt.
  void ran(int64_t start_ns, int64_t end_ns) override {
    caller_timed_ = true;
    if (pending_) note(start_ns, end_ns);
  }
  CpuVDevice* vdevice() override { return &device_; }
  bool ran_alone() const override { return alone_; }
  bool ran_exchanged() const override { return exchanged_; }
  int64_t rtasks_taken() const override { return alone_ ? 0 : device_.taken(); }

 private:
  CpuVDevice device_;
  PlanBalance balance_;  // EngineOptions::balance on 2 or more vEUs: waiters take rTasks (cpu_vdevice.h)
  std::vector<std::pair<int32_t, int64_t>> order_;  // the Plan's rTasks, in an order one thread may run them
  std::optional<RunModeChooser> chooser_;
  std::optional<ListExchangeChooser> exchange_;  // 2 pinned vEUs: which PU runs which list
  bool has_spare_ = false;                        // a 1-vEU Plan on a device of 2 vEUs
  std::optional<SpareCoreChooser> spare_;         // with adapt: which PU runs it
  std::vector<double> waits_us_;
  bool always_alone_ = false, always_exchanged_ = false;
  int always_alone_veu_ = 0;
  bool alone_ = false;
  bool exchanged_ = false;
  bool caller_timed_ = false;  // ran() has been called: the choosers take its times
  bool pending_ = false;       // the last run went by a chooser, which has not had its time

  // The last run, from start_ns to end_ns (the steady clock), to the
  // choosers that decided it.
  void note(int64_t start_ns, int64_t end_ns) {
    pending_ = false;
    const double us = static_cast<double>(end_ns - start_ns) / 1e3;
    if (has_spare_) return spare_->record(us, end_ns);
    if (alone_) return chooser_->record(us, {}, false, end_ns);
    const std::vector<int64_t>& w = device_.wait_ns();
    for (size_t u = 0; u < waits_us_.size(); ++u) waits_us_[u] = static_cast<double>(w[u]) / 1e3;
    chooser_->record(us, waits_us_, exchanged_, end_ns);
    if (exchange_) exchange_->record(us, waits_us_, end_ns);
  }
};

// The null device's: nothing runs (Engine::run zero-fills the outputs).
class NullExecutor : public StepExecutor {
 public:
  void run(const Program&, const ResolvedArgs&) override {}
};

}  // namespace

int plan_pus(const Program& p, const EngineOptions& o) {
  const int veus = p.plan->veus;
  // A 1-vEU Plan (the measured choice kept one of the vEUs asked for) on
  // pinned vEUs keeps a second PU it may move its list to (adapt), or
  // always runs there (always_exchanged).
  const bool spare = veus == 1 && o.threads >= 2 && o.pin && (o.adapt || o.always_exchanged) &&
                     cpu_topology().pus >= 2;
  return spare ? 2 : veus;
}

std::unique_ptr<StepExecutor> make_step_executor(const Program& p, const EngineOptions& o, int threads) {
  if (o.null_device) return std::make_unique<NullExecutor>();
  if (o.executor == Executor::kPlan) return std::make_unique<PlanExecutor>(p, o, threads, plan_pus(p, o));
  if (o.executor == Executor::kTwoLayer && threads > 1) return std::make_unique<TwoLayerExecutor>(p, threads);
  return std::make_unique<SequentialExecutor>(p);
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
  if (threads > 1024) return invalid_argument(str_cat(threads, " threads are too many (at most 1024)"));
  if (threads > hw && !options.null_device)
    log_warning("running ", threads, " threads on ", hw, " hardware threads (", cpu_topology().summary,
                "); expect slowdowns");
  std::unique_ptr<Engine> s(new Engine(std::move(program), options, threads));
  return s;
}

Result<std::unique_ptr<LoadedProgram>> Engine::load(std::unique_ptr<Program> program, const PlaceOptions& o,
                                                    bool null_device) {
  EngineOptions eo;
  eo.executor = o.executor;
  eo.threads = o.veus;
  eo.pin = o.pin && !null_device;
  eo.adapt = o.adapt;
  eo.balance = o.adapt;
  eo.slots = o.slots;
  eo.null_device = null_device;
  TESSERA_ASSIGN_OR_RETURN(std::unique_ptr<Engine> e, create(std::move(program), eo));
  return std::unique_ptr<LoadedProgram>(std::move(e));
}

Engine::Engine(std::unique_ptr<Program> program, const EngineOptions& options, int threads)
    : program_(std::move(program)), options_(options), threads_(threads) {
  // At the start of a page: the arena's offsets to the packed constants
  // (pack_constants, program.cc), modulo a page, are the same in every
  // process.
  arena_ = aligned_alloc_pages(program_->memory.arena_bytes);
  args_ = resolve_args(*program_, arena_);
  arena_args_ = resolve_args(*program_, arena_);
  bound_out_.assign(program_->output_slots.size(), nullptr);
  cpu_kernels_thread_init();
  exec_ = make_step_executor(*program_, options_, threads_);
}

Engine::~Engine() {
  exec_.reset();  // its threads stop before the memory they use goes
  aligned_free64(arena_);
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

DeviceEvent Engine::run() {
  if (options_.null_device) {
    for (size_t i = 0; i < program_->output_slots.size(); ++i) {
      const Slot& s = program_->slots[program_->output_slots[i]];
      if (!s.constant && s.bytes > 0) std::memset(const_cast<void*>(output_data(i)), 0, s.bytes);
    }
    return DeviceEvent();
  }
  cpu_kernels_thread_init();  // the calling thread runs rTasks too
  exec_->run(*program_, args_);
  return DeviceEvent();
}

void Engine::wait_ms(std::vector<double>& out) const {
  out.clear();
  if (CpuVDevice* d = exec_->vdevice())  // the Plan's vEUs (not a spare PU's)
    for (int u = 0; u < threads_; ++u) out.push_back(static_cast<double>(d->wait_ns()[static_cast<size_t>(u)]) / 1e6);
}

Status Engine::set_trace(std::vector<std::pair<int64_t, int64_t>>* spans) {
  CpuVDevice* d = exec_->vdevice();
  if (d == nullptr) return failed_precondition("a trace needs the plan executor");
  d->set_trace(spans);
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
  // Every argument that is this value, or an in-place Concat part of it,
  // found once per slot. By slot, not by address: values whose lifetimes
  // do not overlap this one's may share its bytes in the arena (the
  // sequential memory plan gives an output's bytes to values made before
  // it), and those stay in the arena.
  auto [it, fresh] = refs_.try_emplace(slot);
  if (fresh) {
    const uintptr_t lo = reinterpret_cast<uintptr_t>(arena_) + s.offset;
    auto part_of_value = [&](int k) {
      if (k == slot) return true;
      if (k < 0) return false;
      auto a = program_->aliases.find(program_->slots[static_cast<size_t>(k)].value);
      return a != program_->aliases.end() && a->second.base == v;
    };
    for (size_t k = 0; k < arena_args_.in.size(); ++k) {
      const Step& st = program_->steps[k];
      for (size_t j = 0; j < arena_args_.in[k].size(); ++j)
        if (part_of_value(st.inputs[j]))
          it->second.push_back({k, j, false, reinterpret_cast<uintptr_t>(arena_args_.in[k][j]) - lo});
      for (size_t j = 0; j < arena_args_.out[k].size(); ++j)
        if (part_of_value(st.outputs[j]))
          it->second.push_back({k, j, true, reinterpret_cast<uintptr_t>(arena_args_.out[k][j]) - lo});
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
