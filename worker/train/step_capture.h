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
//   - fp16: dynamic loss scaling reads grads_finite() on the host between backward and the
//     optimizer, and its scale is a kernel argument that changes;
//   - --accum-steps > 1: each micro-batch's data arrives between the backward passes.
#pragma once

#include <cstdint>
#include <string>

#include "worker/train/options.h"

namespace worker {

struct CaptureFacts {
  std::string backend_unsupported;  // Ops::step_capture_unsupported(): empty when the backend can
  int world = 1;
  bool loss_scaling = false;        // fp16
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
// tuning itself (the GPU times convolution engines on its first steps), kMaxWarmupSteps at most.
constexpr int64_t kMinWarmupSteps = 2;
constexpr int64_t kMaxWarmupSteps = 40;
bool capture_due(int64_t steps_run, bool backend_tuning);

// The start-up log line, e.g. "Step: one CUDA graph after warm-up (--cuda-graph auto): ...".
std::string describe_capture(CudaGraph mode, const CapturePlan& plan);

}  // namespace worker
