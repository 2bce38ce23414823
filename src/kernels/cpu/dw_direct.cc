// DwDirect's entry point, the one place its tile templates are
// instantiated (conv.cc and inverted_residual.cc both run it).
#include "kernels/cpu/dw_direct.h"

#if defined(TESSERA_SIMD)
namespace tessera {

void DwDirect::rows(const float* xc, const float* wc, float b, const float* zero, float* yc, int64_t r0,
                    int64_t r1) const {
  if (flat_) {
    if (!clamp_.on) return plane<false>(xc, wc, b, yc);
    return plane<true>(xc, wc, b, yc);
  }
  if (!clamp_.on) return rows_as<false>(xc, wc, b, zero, yc, r0, r1);
  rows_as<true>(xc, wc, b, zero, yc, r0, r1);
}

}  // namespace tessera
#endif
