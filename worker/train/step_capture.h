// Whether the training step runs as one captured graph (--cuda-graph, issue 13), and when it is
// captured: pure rules over the run's facts, decided once at start-up and tested with plain values.
//
// A captured step is forward, backward and the optimizer as one CUDA graph (Ops::capture_step),
// replayed with one launch per step; the batch is filled before each replay and the loss read
// after it. What a graph cannot hold keeps the run on the uncaptured step:
//   - a backend without graphs (the CPU);
//   - several ranks: the gradient all-reduce would sit inside the graph, with the reducer's
//     communication stream, its events and NCCL's watchdog thread querying them; that is not
//     validated on several GPUs yet;
//   - --accum-steps > 1: each micro-batch's data arrives between the backward passes.
// fp16 is captured like bf16: dynamic loss scaling decides on the device (Ops::set_loss_scale),
// its scale, verdict and the optimizer's step count in device memory that the graph's kernels read.
#pragma once

#include <cstdint>
#include <string>

#include "worker/train/options.h"

namespace worker {

struct CaptureFacts {
  std::string backend_unsupported;  // Ops::step_capture_unsupported(): empty when the backend can
  int world = 1;
  int accum_steps = 1;
};

struct CapturePlan {
  bool capture = false;
  std::string why;  // what keeps the step uncaptured (empty when captured)
};

// auto: captured when nothing above stands in the way; on: the same, and a UsageError naming
// the obstacle otherwise; off: never.
CapturePlan plan_step_capture(CudaGraph mode, const CaptureFacts& facts);

// Uncaptured steps before the capture: at least kMinWarmupSteps (the first allocates every
// buffer, plans every convolution and starts SGD's momentum), then until the backend stops
// tuning itself (the GPU times convolution engines on its first steps), kMaxWarmupSteps at most
// (fp16 may time three forwards in turn: the plain one, conv+genstats, and the batch norm in its prologue).
constexpr int64_t kMinWarmupSteps = 2;
constexpr int64_t kMaxWarmupSteps = 60;
bool capture_due(int64_t steps_run, bool backend_tuning);

// The start-up log line, e.g. "Step: one CUDA graph after warm-up (--cuda-graph auto): ...";
// loss_scaling (fp16): it says where the loss scale is decided.
std::string describe_capture(CudaGraph mode, const CapturePlan& plan, bool loss_scaling = false);

}  // namespace worker
