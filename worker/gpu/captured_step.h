// One training step captured as a CUDA graph (step_graph.h) and replayed, with the optimizer's
// per-step values (learning rate, Adam's bias corrections) in device memory: the optimizer kernels
// read them from one slot, written before each kernel when uncaptured and before each replay when
// captured, so that both compute the same bits. Under fp16 loss scaling the slot is derived on
// the device, inside the step, from the learning rate (written as before) and the device's loss
// scale state (whether the step applies, the optimizer's step count). The trainer decides when
// to capture (worker/train/step_capture.h).
#pragma once

#include <functional>
#include <memory>

#include <cuda_runtime.h>

#include "worker/core/ops.h"
#include "worker/gpu/kernels.h"
#include "worker/gpu/pool.h"
#include "worker/gpu/step_graph.h"

namespace worker {
namespace gpu {

class CapturedStep {
 public:
  CapturedStep(DevicePool& pool, cudaStream_t s);  // carves the slot
  CapturedStep(const CapturedStep&) = delete;
  CapturedStep& operator=(const CapturedStep&) = delete;

  // The slot an optimizer kernel reads, with v's values for this optimizer: written now
  // (stream-ordered before the kernel), or, while capturing, noted for replay(), which writes
  // them before each launch. One captured step holds one set of values. loss_scale (device
  // memory; null without fp16 loss scaling): the slot is derived from it and v.lr by a kernel
  // enqueued now (captured with the step), and v.step is not read.
  const OptScalars* scalars(const StepValues& v, bool adam, float beta1, float beta2,
                            const DeviceLossScale* loss_scale = nullptr);

  // Captures what `body` enqueues on the stream (nothing runs), replacing an earlier capture.
  void capture(const std::function<void()>& body, const StepGraph::ZeroAlready& zero_already = nullptr);
  bool capturing() const { return capturing_; }
  // The values the captured step's optimizer was enqueued with (the capturing step's own).
  const StepValues& captured_values() const { return captured_.values; }
  // One launch of the captured step, its optimizer with v's values.
  void replay(const StepValues& v);
  CaptureInfo info() const;

 private:
  // What the captured step's optimizer is, so that replay can turn StepValues into OptScalars.
  struct Optimizer {
    bool present = false;
    bool adam = false;
    float beta1 = 0.f, beta2 = 0.f;
    StepValues values;
    const DeviceLossScale* loss_scale = nullptr;
  };

  cudaStream_t stream_;
  OptScalars* slot_;
  OptScalars* lr_in_;  // loss scaling: the learning rate the derived slot takes (loss_scale.cu)
  std::unique_ptr<StepGraph> graph_;
  bool capturing_ = false;
  Optimizer captured_;
};

}  // namespace gpu
}  // namespace worker
