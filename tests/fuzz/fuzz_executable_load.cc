// libFuzzer target: arbitrary bytes through the Executable loader, with the
// checksums off so that mutations reach the structural checks. Whatever the
// loader accepts is run once on the plan executor: a loaded Program that
// faults (an offset, shape, tiling or wait the loader let through) is a
// bug, as is any crash, sanitizer report or leak in the loader itself.
#include <cstddef>
#include <cstdint>

#include "compiler/executable.h"
#include "devices/cpu/engine.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tessera::LoadOptions lo;
  lo.verify_checksums = false;
  auto p = tessera::load_executable_bytes(data, size, "fuzz.tsx", nullptr, lo);
  if (!p.ok()) return 0;
  // Run only what a small machine can: the loader allows 256 vEUs and
  // values up to 4 GiB.
  if ((*p)->plan->veus > 4 || (*p)->memory.arena_bytes + (*p)->max_scratch_bytes > (64u << 20)) return 0;
  auto s = tessera::Engine::create(std::move(*p), {tessera::Executor::kPlan, 0});
  if (!s.ok()) return 0;
  (void)(*s)->run().wait();
  return 0;
}
