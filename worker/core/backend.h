// Factories for the backends; which one runs is decided at start-up (train --device).
#pragma once

#include <future>
#include <memory>

#include "worker/core/ops.h"

namespace worker {

// CPU backend (worker/cpu): fp32 only. threads <= 0: OMP_NUM_THREADS, else all cores.
std::unique_ptr<Ops> make_cpu_ops(int threads);

// True when this binary was built with the GPU backend (CUDA + cuDNN + NCCL).
bool gpu_backend_built();

// What a backend reports of itself before it is built, for --precision auto (worker/train/precision.h).
struct BackendFacts {
  // It runs fp16 faster than bf16 on this device (a path that only fp16 has), for ResNets whose every
  // convolution takes that path (see stem_space_to_depth).
  bool fp16_faster_than_bf16 = false;
  // The stem's convolution over 3 channels runs in a space-to-depth form over 8 or 16 channels, on the
  // same engines as the other convolutions (WORKER_CONV_S2D). In its plain form it runs on cuDNN's
  // legacy API instead, where fp16 runs slower than bf16.
  bool stem_space_to_depth = false;
};

#ifdef WORKER_HAVE_GPU
// GPU backend (worker/gpu) on CUDA device `device` (an ordinal as the process sees it).
std::unique_ptr<Ops> make_gpu_ops(int device, DType precision);
// Its facts: from the knobs and the device's compute capability (after what make_gpu_ops sets
// before the first CUDA call).
BackendFacts gpu_backend_facts(int device);
// Starts making the CUDA context of `device` on a thread of its own (after what make_gpu_ops sets
// before the first CUDA call), so that the host's work meanwhile overlaps it; the future is ready
// once the context exists. A failure is left to make_gpu_ops, which reports it in its own words.
std::future<void> start_gpu_context(int device);
#endif

}  // namespace worker
