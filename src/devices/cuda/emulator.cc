#include "devices/cuda/emulator.h"

#include <algorithm>
#include <cstring>

#include "base/strings.h"
#include "devices/cuda/cuda_rkernels.h"
#include "devices/cuda/rtasks.h"

namespace tessera::cuda {
namespace emu {

Dim3 thread_idx;

namespace {

// Saves the callee-saved registers and the stack pointer of the running
// context into *from and resumes the one whose stack pointer is `to`
// (System V x86-64: the caller has saved everything else).
extern "C" void tessera_emu_switch(void** from, void* to);
asm(R"(
.text
.p2align 4
.globl tessera_emu_switch
.hidden tessera_emu_switch
.type tessera_emu_switch,@function
tessera_emu_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
.size tessera_emu_switch, .-tessera_emu_switch
.section .note.GNU-stack,"",@progbits
.text
)");

constexpr int kThreads = 256;
constexpr size_t kStackBytes = 128 * 1024;

struct Block {
  void* sp[kThreads] = {};
  bool done[kThreads] = {};
  void* scheduler = nullptr;
  int current = 0;
  const DevOp* op = nullptr;
  int64_t task = 0;
  float exchange[kThreads] = {};
  std::unique_ptr<unsigned char[]> stacks;
};

Block& block() {
  static Block b;
  return b;
}

float shared_memory[kSmemFloats];

[[noreturn]] void thread_main() {
  Block& b = block();
  run_task(*b.op, b.task, shared_memory);
  b.done[b.current] = true;
  tessera_emu_switch(&b.sp[b.current], b.scheduler);
  __builtin_unreachable();
}

}  // namespace

void sync_threads() {
  Block& b = block();
  tessera_emu_switch(&b.sp[b.current], b.scheduler);
}

float shfl_xor(float v, int mask) {
  Block& b = block();
  const int me = b.current;
  b.exchange[me] = v;
  sync_threads();
  const float r = b.exchange[me ^ mask];
  sync_threads();
  return r;
}

}  // namespace emu

void emulate_task(const DevOp& op, int64_t t) {
  using namespace emu;
  Block& b = block();
  if (!b.stacks) b.stacks.reset(new unsigned char[kStackBytes * kThreads]);
  b.op = &op;
  b.task = t;
  for (int i = 0; i < kThreads; ++i) {
    // A fresh stack whose first switch "returns" into thread_main, with the
    // alignment of a function just called.
    auto top = reinterpret_cast<uintptr_t>(b.stacks.get() + kStackBytes * static_cast<size_t>(i + 1)) & ~uintptr_t{15};
    void** sp = reinterpret_cast<void**>(top);
    *--sp = nullptr;  // thread_main's return address: it never returns
    *--sp = reinterpret_cast<void*>(&thread_main);
    for (int r = 0; r < 6; ++r) *--sp = nullptr;  // rbp rbx r12 r13 r14 r15
    b.sp[i] = sp;
    b.done[i] = false;
  }
  // Round after round every thread runs to its next barrier (or its end).
  for (bool live = true; live;) {
    live = false;
    for (int i = 0; i < kThreads; ++i) {
      if (b.done[i]) continue;
      b.current = i;
      thread_idx.x = static_cast<unsigned>(i);
      tessera_emu_switch(&b.scheduler, b.sp[i]);
      live = live || !b.done[i];
    }
  }
}

Result<std::unique_ptr<EmulatedProgram>> EmulatedProgram::load(const Program& p) {
  auto e = std::unique_ptr<EmulatedProgram>(new EmulatedProgram());
  e->p_ = &p;
  e->arena_.assign(std::max<size_t>(p.memory.arena_bytes, 1), 0xff);  // NaN until written, as on the GPU
  for (const Slot& s : p.slots)
    e->slot_.push_back(s.constant ? const_cast<void*>(s.data) : e->arena_.data() + s.offset);
  TESSERA_ASSIGN_OR_RETURN(e->ops_, dev_ops(p, e->slot_, [&e](size_t bytes, const void* init) -> Result<void*> {
                             std::vector<unsigned char>& m = e->extra_.emplace_back(std::max<size_t>(bytes, 1), 0);
                             if (init != nullptr) std::memcpy(m.data(), init, bytes);
                             return static_cast<void*>(m.data());
                           }));
  return e;
}

void* EmulatedProgram::input(size_t i) { return slot_[static_cast<size_t>(p_->input_slots[i])]; }

const void* EmulatedProgram::output(size_t i) const { return slot_[static_cast<size_t>(p_->output_slots[i])]; }

void EmulatedProgram::run() {
  for (size_t s = 0; s < ops_.size(); ++s) run_step(s);
}

Status EmulatedProgram::run_plan(uint64_t seed) {
  if (!p_->plan) return failed_precondition("the Program has no Plan");
  const Plan& plan = *p_->plan;
  const size_t U = plan.program.size();
  std::vector<size_t> at(U, 0);
  std::vector<int64_t> count(U, 0);
  std::vector<size_t> order(U);
  for (size_t u = 0; u < U; ++u) order[u] = u;
  uint64_t x = seed * 0x9e3779b97f4a7c15ull + 1;
  for (bool progress = true; progress;) {
    progress = false;
    for (size_t i = U; i > 1; --i) {  // a seeded shuffle of the vEUs
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      std::swap(order[i - 1], order[x % i]);
    }
    for (size_t u : order) {
      const std::vector<Instr>& list = plan.program[u];
      // A vEU runs one to a few instructions per turn, as the seed says.
      for (uint64_t turn = 1 + (x >> 32) % 4; turn > 0 && at[u] < list.size(); --turn) {
        const Instr& in = list[at[u]];
        if (in.kind == Instr::Kind::kWait && count[static_cast<size_t>(in.a)] < in.b) break;
        if (in.kind == Instr::Kind::kRun) emulate_task(ops_[static_cast<size_t>(in.a)], in.b);
        if (in.kind == Instr::Kind::kSignal) count[u] = in.b;
        ++at[u];
        progress = true;
      }
      // The end of a list publishes its vEU's final count.
      if (at[u] == list.size()) count[u] = plan.tasks_per_veu[u];
    }
  }
  for (size_t u = 0; u < U; ++u)
    if (at[u] < plan.program[u].size())
      return internal_error(str_cat("the Plan cannot finish: vEU ", u, " waits forever at instruction ", at[u],
                                    " for vEU ", plan.program[u][at[u]].a, " to reach ", plan.program[u][at[u]].b,
                                    "; it is at ", count[static_cast<size_t>(plan.program[u][at[u]].a)],
                                    ", instruction ", at[static_cast<size_t>(plan.program[u][at[u]].a)], " of ",
                                    plan.program[static_cast<size_t>(plan.program[u][at[u]].a)].size()));
  return Status();
}

void EmulatedProgram::run_step(size_t s) {
  for (int64_t t = 0; t < ops_[s].tasks; ++t) emulate_task(ops_[s], t);
}

}  // namespace tessera::cuda
