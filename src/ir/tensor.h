// The public Tensor (tessera/tensor.h) is the compiler's too: constants,
// folded values and outputs move between layers as Tensors, without copies.
// Here: the aligned allocation its owned bytes come from.
#pragma once

#include <cstddef>

#include "ir/dtype.h"
#include "ir/shape.h"
#include "tessera/tensor.h"

namespace tessera {

// Allocates `bytes` (rounded up) aligned to 64; frees with aligned_free64.
void* aligned_alloc64(size_t bytes);
// Allocates `bytes` (rounded up to whole pages) at the start of a page, so
// that what lies inside is at the same offsets modulo a page in every
// process; frees with aligned_free64.
void* aligned_alloc_pages(size_t bytes);
void aligned_free64(void* p);

}  // namespace tessera
