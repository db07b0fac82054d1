#include "worker/train/step_capture.h"

namespace worker {

namespace {

// The first obstacle to capturing, or empty.
std::string obstacle(const CaptureFacts& f) {
  if (!f.backend_unsupported.empty()) return f.backend_unsupported;
  if (f.world > 1)
    return std::to_string(f.world) + " ranks: the all-reduce inside a captured step is not validated on several GPUs yet";
  if (f.accum_steps > 1)
    return "--accum-steps " + std::to_string(f.accum_steps) + ": each micro-batch's data arrives between backward passes";
  return "";
}

}  // namespace

CapturePlan plan_step_capture(CudaGraph mode, const CaptureFacts& facts) {
  if (mode == CudaGraph::Off) return {false, "--cuda-graph off"};
  const std::string why = obstacle(facts);
  if (why.empty()) return {true, ""};
  if (mode == CudaGraph::On)
    throw UsageError("--cuda-graph on: this run's step cannot be captured (" + why + "); use --cuda-graph auto or off");
  return {false, why};
}

bool capture_due(int64_t steps_run, bool backend_tuning) {
  return steps_run >= kMaxWarmupSteps || (steps_run >= kMinWarmupSteps && !backend_tuning);
}

std::string describe_capture(CudaGraph mode, const CapturePlan& plan, bool loss_scaling) {
  const std::string opt = std::string("--cuda-graph ") + to_string(mode);
  if (!plan.capture)
    return "Step: uncaptured (" + (mode == CudaGraph::Off ? opt : opt + ": " + plan.why) + ")" +
           (loss_scaling ? "; fp16 loss scaling decided on the device" : "");
  return "Step: one CUDA graph (" + opt + "): forward, backward and optimizer captured after " +
         std::to_string(kMinWarmupSteps) + " to " + std::to_string(kMaxWarmupSteps) +
         " warm-up steps and replayed; the batch is filled before each replay, the loss read after it" +
         (loss_scaling ? "; fp16 loss scaling decided on the device, inside the graph" : "");
}

}  // namespace worker
