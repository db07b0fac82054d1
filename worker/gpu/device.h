// The GPU a backend runs on and the handles bound to its one stream: made first, so that every
// part of the backend built after it runs on the right device (a CUDA call before cudaSetDevice
// would create its resources on device 0).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include "worker/gpu/pool.h"

namespace worker {
namespace gpu {

struct Device {
  // Checks that `ordinal` is a visible GPU (a GpuError naming what to do otherwise), makes it
  // current, creates the stream and binds cuDNN and cuBLAS to it (cuBLAS's workspace from the
  // pool: nothing allocated behind our back later).
  Device(int ordinal, DevicePool& pool);
  ~Device();
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  static constexpr size_t kCublasWorkspace = size_t(32) << 20;

  // The host waits for everything enqueued on the stream so far. Counted: the convolution
  // engines' tuning starts after the first wait (conv_engines.h).
  void wait();

  int ordinal = 0;
  std::string name;  // e.g. "NVIDIA H200"
  cudaStream_t stream = nullptr;  // non-blocking: nothing orders it with the legacy default stream
  cudnnHandle_t cudnn = nullptr;
  cublasHandle_t cublas = nullptr;
  int64_t host_waits = 0;  // wait() calls so far
  // Where the constructor's time went, in order (seconds): the driver's initialisation, the
  // context, cuDNN's handle, cuBLAS's. What start-up costs before the model exists.
  std::vector<std::pair<const char*, double>> startup;
};

}  // namespace gpu
}  // namespace worker
