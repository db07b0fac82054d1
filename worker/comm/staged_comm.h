// A communicator for backend memory that the inner one cannot reach: `train_resnet --comm ring`
// on GPUs, the TCP ring over GPU memory (as torch.distributed's gloo backend does with CUDA
// tensors). Each collective downloads what it needs, runs on host memory, and uploads what it
// changed; it is synchronous, so the trainer reduces after backward, as on the CPU ring. Slow
// beside NCCL, but it runs where NCCL cannot: on a machine whose NCCL does not work, and with
// several ranks on one GPU (NCCL refuses two ranks on one device).
#pragma once

#include <memory>

#include "worker/comm/comm.h"
#include "worker/core/ops.h"

namespace worker {

// `ops` is the backend whose memory the collectives' pointers are in; it must outlive the result.
std::unique_ptr<Comm> make_staged_comm(std::unique_ptr<Comm> inner, Ops& ops);

}  // namespace worker
