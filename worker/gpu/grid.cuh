// The launch shape and loop of the grid-stride element-wise kernels (elementwise.cu,
// loss_scale.cu): 256 threads a block, a few waves over 132 SMs (an H200), which is enough for
// memory-bound work.
#pragma once

#include <cstddef>

namespace worker {
namespace gpu {

constexpr int kStrideThreads = 256;

inline unsigned stride_grid(size_t n) {
  const size_t want = (n + kStrideThreads - 1) / kStrideThreads;
  return unsigned(want < 132 * 16 ? (want ? want : 1) : 132 * 16);
}

// The loop of such a kernel over [0, n).
#define GRID_STRIDE(i, n)                                                        \
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n);        \
       i += size_t(gridDim.x) * blockDim.x)

}  // namespace gpu
}  // namespace worker
