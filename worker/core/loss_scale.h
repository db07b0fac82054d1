// fp16 dynamic loss scaling's state machine, with the semantics of torch.cuda.amp.GradScaler's
// defaults: the loss (so every gradient) is multiplied by `scale`; a step whose gradients hold an
// inf or NaN is skipped and multiplies the scale by `backoff`; `interval` clean steps in a row
// multiply it by `growth`. Pure and header-only, compiled for the host and (by nvcc) for the
// device: the GPU's update kernel (worker/gpu/loss_scale.cu), the host default of Ops
// (worker/core/ops.cpp) and the trainer's mirror (worker/train/loss_scaler.h) run this one function.
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define WK_HOST_DEVICE __host__ __device__
#else
#define WK_HOST_DEVICE
#endif

namespace worker {

struct LossScaleRules {
  float growth = 2.0f;
  float backoff = 0.5f;
  int64_t interval = 2000;  // clean steps before the scale grows
};

// What a checkpoint keeps of it (worker/train/checkpoint.h).
struct LossScaleState {
  float scale = 65536.0f;      // 2^16, GradScaler's init_scale
  int64_t growth_tracker = 0;  // clean steps since the scale last changed
  int64_t skipped = 0;         // optimizer steps skipped so far (the optimizer's own count lags by this)
};

// GradScaler.update() given this step's verdict (every gradient finite): true when the optimizer
// applies the step.
WK_HOST_DEVICE inline bool advance_loss_scale(LossScaleState& s, const LossScaleRules& r, bool grads_finite) {
  if (!grads_finite) {
    s.scale *= r.backoff;
    s.growth_tracker = 0;
    ++s.skipped;
    return false;
  }
  if (++s.growth_tracker == r.interval) {
    s.scale *= r.growth;
    s.growth_tracker = 0;
  }
  return true;
}

}  // namespace worker
