// Factories for the backends; which one runs is decided at start-up (train --device).
#pragma once

#include <memory>

#include "worker/core/ops.h"

namespace worker {

// CPU backend (worker/cpu): fp32 only. threads <= 0: OMP_NUM_THREADS, else all cores.
std::unique_ptr<Ops> make_cpu_ops(int threads);

// True when this binary was built with the GPU backend (CUDA + cuDNN + NCCL).
bool gpu_backend_built();

#ifdef WORKER_HAVE_GPU
// GPU backend (worker/gpu) on CUDA device `device` (an ordinal as the process sees it).
std::unique_ptr<Ops> make_gpu_ops(int device, DType precision);
#endif

}  // namespace worker
