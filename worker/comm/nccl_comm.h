// The GPU communicator: NCCL on the GPU backend's device (worker_comm_nccl, built where the GPU
// backend is). It reaches the backend through GpuOps' public interface only: its compute stream
// (collectives are ordered after it by events), the side stream's join, its device and its memory.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "worker/comm/comm.h"
#include "worker/core/ops.h"

namespace proto {
class Client;
}

namespace worker {

// NCCL communicator for `rank` of `size`, with the unique id brokered through the store under
// nccl/uid/<name>/<generation>. Watches for failures of other ranks (NCCL async errors and the
// store's job status) and for collectives that have not finished `timeout` after they were
// enqueued (train_resnet --comm-timeout), and aborts instead of hanging: a CommFailure with
// peer_lost() then. `gpu_ops` must be the GPU backend's (make_gpu_ops) and outlive the result.
std::unique_ptr<Comm> make_nccl_comm(Ops& gpu_ops, proto::Client* store, int rank, int size,
                                     const std::string& name, int generation,
                                     std::chrono::milliseconds timeout = std::chrono::seconds(300));

}  // namespace worker
