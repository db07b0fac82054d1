// Factories for the backends; which one runs is decided at start-up (train --device).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "worker/core/comm.h"
#include "worker/core/ops.h"

namespace proto {
class Client;
}

namespace worker {

// CPU backend (worker/cpu): fp32 only. threads <= 0: OMP_NUM_THREADS, else all cores.
std::unique_ptr<Ops> make_cpu_ops(int threads);

// True when this binary was built with the GPU backend (CUDA + cuDNN + NCCL).
bool gpu_backend_built();

#ifdef WORKER_HAVE_GPU
// GPU backend (worker/gpu) on CUDA device `device` (an ordinal as the process sees it).
std::unique_ptr<Ops> make_gpu_ops(int device, DType precision);
// NCCL communicator for `rank` of `size`, with the unique id brokered through the store under
// nccl/uid/<name>/<generation>. Watches for failures of other ranks (NCCL async errors and the
// store's job status) and for collectives that have not finished `timeout` after they were
// enqueued (train_resnet --comm-timeout), and aborts instead of hanging: a CommFailure with
// peer_lost() then.
std::unique_ptr<Comm> make_nccl_comm(Ops& gpu_ops, proto::Client* store, int rank, int size,
                                     const std::string& name, int generation,
                                     std::chrono::milliseconds timeout = std::chrono::seconds(300));
#endif

}  // namespace worker
