// DwStrip's entry point, the one place its tile templates are
// instantiated (conv.cc's depthwise path runs it).
#include "kernels/cpu/dw_strip.h"

#if defined(TESSERA_DW_STRIP)
namespace tessera {

void DwStrip::rows(const float* xc, const float* wc, float b, float* scratch, float* yc, int64_t r0,
                   int64_t r1) const {
  std::fill(scratch, scratch + scratch_floats(), 0.f);
  const float* zero = scratch + 2 * kLanes;  // loads start up to pw <= 2 columns left of it
  if (!clamp_.on) return rows_as<false>(xc, wc, b, zero, yc, r0, r1);
  rows_as<true>(xc, wc, b, zero, yc, r0, r1);
}

}  // namespace tessera
#endif
