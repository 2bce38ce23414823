// The public Tensor (tessera/tensor.h) is the compiler's too: constants,
// folded values and outputs move between layers as Tensors, without copies.
// Here: the aligned allocation its owned bytes come from.
#pragma once

#include <cstddef>

#include "ir/dtype.h"
#include "ir/shape.h"
#include "tessera/tensor.h"

namespace tessera {

// Allocates `bytes` (rounded up) aligned to 64; frees with aligned_free.
void* aligned_alloc64(size_t bytes);
void aligned_free64(void* p);

}  // namespace tessera
