#include "devices/cuda/cuda_device.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstring>
#include <mutex>

#include "base/strings.h"
#include "devices/cuda/cuda_rkernels.h"
#include "ir/ops/op_registry.h"
#include "devices/cuda/plan_kernel.h"

namespace tessera {
namespace {

using cuda::DevInstr;
using cuda::DevKind;
using cuda::DevOp;

Status cuda_status(cudaError_t e, const std::string& what) {
  if (e == cudaSuccess) return Status();
  if (e == cudaErrorMemoryAllocation) return resource_exhausted(str_cat(what, ": out of GPU memory"));
  return internal_error(str_cat(what, ": CUDA error ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")"));
}

// `what` (often a str_cat) is built only on failure: runs allocate nothing.
#define TESSERA_CUDA(expr, what)                                 \
  do {                                                           \
    if (const cudaError_t cuda_e_ = (expr); cuda_e_ != cudaSuccess) \
      return cuda_status(cuda_e_, (what));                       \
  } while (0)

// Device memory freed when the last copy goes.
struct DevMem {
  std::shared_ptr<void> owner;
  void* get() const { return owner.get(); }
};

Result<DevMem> dev_alloc(size_t bytes, int device) {
  TESSERA_CUDA(cudaSetDevice(device), "cudaSetDevice");
  void* p = nullptr;
  TESSERA_CUDA(cudaMalloc(&p, std::max<size_t>(bytes, 256)), str_cat("allocating ", bytes, " bytes on the GPU"));
  return DevMem{std::shared_ptr<void>(p, [](void* q) { cudaFree(q); })};
}

size_t align256(size_t n) { return (n + 255) / 256 * 256; }

// A Program on one GPU: its arena, its weights, its DevOps and its Plan's
// instruction lists in device memory; runs as one persistent launch (plan)
// or one launch per op replayed as a CUDA graph (two-layer).
class CudaLoaded : public LoadedProgram {
 public:
  ~CudaLoaded() override {
    if (graph_exec_) cudaGraphExecDestroy(graph_exec_);
    for (cudaEvent_t e : events_)
      if (e) cudaEventDestroy(e);
    if (stream_) cudaStreamDestroy(stream_);
  }

  static Result<std::unique_ptr<LoadedProgram>> load(std::unique_ptr<Program> p, const PlaceOptions& o, int device,
                                                     int sms) {
    auto l = std::unique_ptr<CudaLoaded>(new CudaLoaded());
    l->p_ = std::move(p);
    l->device_ = device;
    l->executor_ = o.executor;
    TESSERA_RETURN_IF_ERROR(l->place(sms));
    return std::unique_ptr<LoadedProgram>(std::move(l));
  }

  const Program& program() const override { return *p_; }
  int veus() const override { return p_->plan && executor_ == Executor::kPlan ? p_->plan->veus : 1; }

  Status set_input(const std::string& name, const Tensor& t) override {
    const std::vector<Value*>& ins = p_->graph->inputs();
    for (size_t i = 0; i < ins.size(); ++i) {
      if (ins[i]->name != name) continue;
      const Slot& s = p_->slots[static_cast<size_t>(p_->input_slots[i])];
      if (t.nbytes() != s.bytes)
        return invalid_argument(str_cat("input '", name, "' holds ", t.nbytes(), " bytes, the model takes ", s.bytes));
      TESSERA_CUDA(cudaMemcpyAsync(slot_dev_[static_cast<size_t>(p_->input_slots[i])], t.raw(), s.bytes,
                                   cudaMemcpyHostToDevice, stream_),
                   str_cat("copying input '", name, "' to the GPU"));
      return Status();
    }
    return not_found(str_cat("'", name, "' is not an input"));
  }

  const void* output_data(size_t i) const override { return staged_[i].data(); }

  DeviceEvent run() override { return DeviceEvent::ready(run_now()); }
  double device_ms() const override { return device_ms_; }

 private:
  CudaLoaded() = default;

  Status run_now() {
    if (!stalled_.ok()) return stalled_;
    TESSERA_CUDA(cudaSetDevice(device_), "cudaSetDevice");
    TESSERA_CUDA(cudaEventRecord(events_[0], stream_), "timing the run");
    if (executor_ == Executor::kPlan && p_->plan) {
      TESSERA_CUDA(cuda::launch_plan(static_cast<const DevOp*>(ops_.get()), static_cast<const DevInstr*>(instrs_.get()),
                                     static_cast<const int64_t*>(begin_.get()), static_cast<int*>(counters_.get()),
                                     p_->plan->veus, static_cast<cuda::PlanStall*>(stall_.get()), stream_),
                   str_cat("launching the Plan (", p_->plan->veus, " blocks)"));
    } else if (graph_exec_) {
      TESSERA_CUDA(cudaGraphLaunch(graph_exec_, stream_), "replaying the ops' launches");
    } else {
      TESSERA_RETURN_IF_ERROR(launch_ops());
    }
    TESSERA_CUDA(cudaEventRecord(events_[1], stream_), "timing the run");
    if (stall_.get() != nullptr)
      TESSERA_CUDA(cudaMemcpyAsync(&stall_host_, stall_.get(), sizeof stall_host_, cudaMemcpyDeviceToHost, stream_),
                   "reading the Plan's state");
    for (size_t i = 0; i < staged_.size(); ++i)
      TESSERA_CUDA(cudaMemcpyAsync(staged_[i].data(), slot_dev_[static_cast<size_t>(p_->output_slots[i])],
                                   staged_[i].size(), cudaMemcpyDeviceToHost, stream_),
                   str_cat("copying output ", i, " from the GPU"));
    TESSERA_CUDA(cudaStreamSynchronize(stream_), "running on the GPU");
    // A Plan that stalled once stalls again, and the rTasks it abandoned
    // left split-k tickets half counted: every later run fails the same way.
    if (stall_.get() != nullptr && stall_host_.stalled != 0)
      return stalled_ = internal_error(str_cat("the Plan stalled on the GPU: vEU ", stall_host_.veu, " waited over ",
                                               cuda::kWaitLimitNs / 1'000'000'000, " s for vEU ", stall_host_.on,
                                               " to reach count ", stall_host_.count, " (instruction ", stall_host_.index,
                                               " of its list); the run was abandoned"));
    float ms = 0;
    TESSERA_CUDA(cudaEventElapsedTime(&ms, events_[0], events_[1]), "timing the run");
    device_ms_ = ms;
    return Status();
  }

  Status launch_ops() {
    for (size_t s = 0; s < p_->steps.size(); ++s)
      TESSERA_CUDA(cuda::launch_op(static_cast<const DevOp*>(ops_.get()) + s, p_->steps[s].op->tasks(), stream_),
                   str_cat(p_->steps[s].node->label(), ": launching its rTasks"));
    return Status();
  }

  Status place(int sms) {
    const Program& p = *p_;
    TESSERA_CUDA(cudaSetDevice(device_), "cudaSetDevice");
    TESSERA_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "creating a stream");
    for (cudaEvent_t& e : events_) TESSERA_CUDA(cudaEventCreate(&e), "creating an event");
    if (p.plan && executor_ == Executor::kPlan && p.plan->veus > sms)
      return invalid_argument(str_cat("the Plan has ", p.plan->veus, " vEUs; this GPU has ", sms,
                                      " multiprocessors, one resident block each"));
    // Memory: the arena for runtime values, one block for the weights.
    TESSERA_ASSIGN_OR_RETURN(arena_, dev_alloc(p.memory.arena_bytes, device_));
    // NaN in every float until written: an rTask that leaves part of its
    // output unwritten shows in the results.
    TESSERA_CUDA(cudaMemset(arena_.get(), 0xff, std::max<size_t>(p.memory.arena_bytes, 256)), "poisoning the arena");
    size_t weights = 0;
    for (const Slot& s : p.slots)
      if (s.constant) weights += align256(s.bytes);
    TESSERA_ASSIGN_OR_RETURN(weights_, dev_alloc(weights, device_));
    slot_dev_.resize(p.slots.size());
    size_t at = 0;
    for (size_t i = 0; i < p.slots.size(); ++i) {
      const Slot& s = p.slots[i];
      if (!s.constant) {
        slot_dev_[i] = static_cast<char*>(arena_.get()) + s.offset;
        continue;
      }
      slot_dev_[i] = static_cast<char*>(weights_.get()) + at;
      if (s.bytes > 0)
        TESSERA_CUDA(cudaMemcpy(slot_dev_[i], s.data, s.bytes, cudaMemcpyHostToDevice),
                     str_cat("copying '", s.value->name, "' to the GPU"));
      at += align256(s.bytes);
    }
    // One DevOp per step, its addresses filled in.
    TESSERA_ASSIGN_OR_RETURN(
        std::vector<DevOp> ops, cuda::dev_ops(p, slot_dev_, [this](size_t bytes, const void* init) -> Result<void*> {
          TESSERA_ASSIGN_OR_RETURN(DevMem m, dev_alloc(bytes, device_));
          TESSERA_CUDA(init != nullptr ? cudaMemcpy(m.get(), init, bytes, cudaMemcpyHostToDevice) : cudaMemset(m.get(), 0, bytes),
                       "setting up an op's memory");
          aux_.push_back(m);
          return m.get();
        }));
    TESSERA_ASSIGN_OR_RETURN(ops_, dev_alloc(sizeof(DevOp) * ops.size(), device_));
    TESSERA_CUDA(cudaMemcpy(ops_.get(), ops.data(), sizeof(DevOp) * ops.size(), cudaMemcpyHostToDevice), "copying the ops");
    // The Plan's lists, back to back.
    if (p.plan && executor_ == Executor::kPlan) {
      const Plan& plan = *p.plan;
      std::vector<DevInstr> instrs;
      std::vector<int64_t> begin = {0};
      for (size_t u = 0; u < plan.program.size(); ++u) {
        for (const Instr& in : plan.program[u]) instrs.push_back({static_cast<int32_t>(in.kind), in.a, in.b});
        // A list ends by publishing its vEU's final count (the executors'
        // contract: a wait may name it without a signal in the list).
        instrs.push_back({static_cast<int32_t>(Instr::Kind::kSignal), 0, plan.tasks_per_veu[u]});
        begin.push_back(static_cast<int64_t>(instrs.size()));
      }
      TESSERA_ASSIGN_OR_RETURN(instrs_, dev_alloc(sizeof(DevInstr) * instrs.size(), device_));
      TESSERA_ASSIGN_OR_RETURN(begin_, dev_alloc(sizeof(int64_t) * begin.size(), device_));
      TESSERA_ASSIGN_OR_RETURN(counters_, dev_alloc(sizeof(int) * static_cast<size_t>(plan.veus), device_));
      TESSERA_ASSIGN_OR_RETURN(stall_, dev_alloc(sizeof(cuda::PlanStall), device_));
      TESSERA_CUDA(cudaMemcpy(instrs_.get(), instrs.data(), sizeof(DevInstr) * instrs.size(), cudaMemcpyHostToDevice),
                   "copying the Plan");
      TESSERA_CUDA(cudaMemcpy(begin_.get(), begin.data(), sizeof(int64_t) * begin.size(), cudaMemcpyHostToDevice),
                   "copying the Plan");
    } else if (executor_ == Executor::kTwoLayer) {
      // The control: every op's launch captured once, replayed per run.
      cudaGraph_t graph = nullptr;
      TESSERA_CUDA(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "capturing the launches");
      Status st = launch_ops();
      cudaError_t e = cudaStreamEndCapture(stream_, &graph);
      TESSERA_RETURN_IF_ERROR(st);
      TESSERA_CUDA(e, "capturing the launches");
      e = cudaGraphInstantiate(&graph_exec_, graph, 0);
      cudaGraphDestroy(graph);
      TESSERA_CUDA(e, "instantiating the launches' graph");
    }
    staged_.resize(p.output_slots.size());
    for (size_t i = 0; i < staged_.size(); ++i)
      staged_[i].assign(p.slots[static_cast<size_t>(p.output_slots[i])].bytes, 0);
    TESSERA_CUDA(cudaDeviceSynchronize(), "loading onto the GPU");
    return Status();
  }

  std::unique_ptr<Program> p_;
  int device_ = 0;
  Executor executor_ = Executor::kPlan;
  cudaStream_t stream_ = nullptr;
  cudaGraphExec_t graph_exec_ = nullptr;
  cudaEvent_t events_[2] = {nullptr, nullptr};  // around the run's launches
  double device_ms_ = 0;
  DevMem arena_, weights_, ops_, instrs_, begin_, counters_, stall_;
  cuda::PlanStall stall_host_{};
  Status stalled_;  // set for good by a stalled run
  std::vector<DevMem> aux_;  // the ops' scratch, tickets and part tables
  std::vector<void*> slot_dev_;
  std::vector<std::vector<unsigned char>> staged_;
};

class CudaDevice : public Device {
 public:
  CudaDevice(int ordinal, const cudaDeviceProp& prop) : ordinal_(ordinal), prop_(prop) {}

  DeviceInfo info() const override {
    DeviceInfo d;
    d.name = ordinal_ == 0 ? "cuda" : str_cat("cuda:", ordinal_);
    d.kind = "cuda";
    d.veus = prop_.multiProcessorCount;  // one resident block per SM
    d.free_veus = d.veus;
    d.memory_bytes = prop_.totalGlobalMem;
    char bus[32];
    std::snprintf(bus, sizeof bus, "%04x:%02x:%02x", prop_.pciDomainID, prop_.pciBusID, prop_.pciDeviceID);
    d.place = str_cat("PCIe ", bus);
    d.note = prop_.name;
    d.kernels = str_cat("sm_", prop_.major, prop_.minor);
    return d;
  }
  KernelTable kernels() const override { return cuda::cuda_kernels(); }
  std::string_view program_kind() const override { return "cuda"; }
  Passes passes() const override { return cuda::cuda_passes(); }
  bool plans_on_host_map() const override { return false; }  // SMs, not the host's cores
  VeuCosts costs(const HostMap*, const std::vector<int>& slots) const override {
    return VeuCosts::uniform(static_cast<int>(slots.size()), kHandoffUs);
  }
  // One block on one SM: its share of the op's FLOPs and bytes, one after
  // the other (a lone block hides little latency), plus the rTask's own
  // cost (fence, barrier, publishing its count).
  double task_cost_us(const Node& n, int64_t tasks) const override {
    double bytes = 0;
    for (const Value* v : n.inputs)
      if (v != nullptr) bytes += static_cast<double>(v->shape.numel()) * static_cast<double>(dtype_size(v->dtype));
    for (const Value* v : n.outputs)
      bytes += static_cast<double>(v->shape.numel()) * static_cast<double>(dtype_size(v->dtype));
    return (op_flops(n) / kFlopsPerUs + bytes / kBytesPerUs) / static_cast<double>(std::max<int64_t>(1, tasks)) + kTaskUs;
  }
  Result<std::unique_ptr<LoadedProgram>> load(std::unique_ptr<Program> p, const PlaceOptions& o) override {
    return CudaLoaded::load(std::move(p), o, ordinal_, prop_.multiProcessorCount);
  }

 private:
  // A hand-off between blocks through global memory: a release store seen
  // by an acquire spin on another SM.
  static constexpr double kHandoffUs = 1.0;
  // A block's rates on an H100/H200 SM with these rKernels: FP32 FMAs from
  // shared memory tiles, and bytes through L2.
  static constexpr double kFlopsPerUs = 100e3;
  static constexpr double kBytesPerUs = 50e3;
  static constexpr double kTaskUs = 0.5;
  int ordinal_;
  cudaDeviceProp prop_;
};

class CudaBackend : public Backend {
 public:
  std::string_view name() const override { return "cuda"; }
  std::vector<std::shared_ptr<Device>> discover() override {
    std::call_once(once_, [this] {
      int n = 0;
      if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();  // no driver or no GPU: no devices
        return;
      }
      for (int i = 0; i < n; ++i) {
        cudaDeviceProp prop{};
        if (cudaGetDeviceProperties(&prop, i) == cudaSuccess) devices_.push_back(std::make_shared<CudaDevice>(i, prop));
      }
    });
    return devices_;
  }

 private:
  std::once_flag once_;
  std::vector<std::shared_ptr<Device>> devices_;
};

}  // namespace

Backend* cuda_backend() {
  static CudaBackend b;
  return &b;
}

}  // namespace tessera
