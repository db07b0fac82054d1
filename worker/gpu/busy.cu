// A kernel that keeps the stream busy for a while: the convolution engine tuner runs it before
// each timed call so that the timed work is already queued when its start event is reached
// (with an idle GPU, events around a call time the host's launch latency, not the kernel).
#include "worker/gpu/check.h"
#include "worker/gpu/kernels.h"

namespace worker {
namespace gpu {
namespace {

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void busy_kernel(unsigned long long ns) {
  const unsigned long long t0 = global_ns();
  while (global_ns() - t0 < ns) {
  }
}

}  // namespace

void busy_wait(int microseconds, cudaStream_t s) {
  busy_kernel<<<1, 1, 0, s>>>(static_cast<unsigned long long>(microseconds) * 1000ull);
  KERNEL_CHECK();
}

}  // namespace gpu
}  // namespace worker
