// Dynamic loss scaling for fp16 training, with the semantics of torch.cuda.amp.GradScaler's
// defaults: the loss (so every gradient) is multiplied by `scale`; a step whose gradients hold
// an inf or NaN is skipped and halves the scale; 2,000 clean steps in a row double it.
// Pure: the trainer feeds it one verdict per step.
#pragma once

#include <cstdint>

namespace worker {

struct LossScaler {
  static constexpr float kInitScale = 65536.0f;  // 2^16, GradScaler's init_scale
  static constexpr float kGrowth = 2.0f;
  static constexpr float kBackoff = 0.5f;
  static constexpr int64_t kGrowthInterval = 2000;

  bool enabled = false;  // fp16 only: bf16 and fp32 have fp32's exponent range
  float scale = kInitScale;
  int64_t growth_tracker = 0;  // clean steps since the scale last changed
  int64_t skipped = 0;         // optimizer steps skipped so far (the optimizer's own count lags by this)

  // What the loss is multiplied by.
  float multiplier() const { return enabled ? scale : 1.0f; }

  // Called once per step with whether every gradient was finite; true when the optimizer
  // may step. Updates the scale as GradScaler.update() does.
  bool update(bool grads_finite) {
    if (!enabled) return true;
    if (!grads_finite) {
      scale *= kBackoff;
      growth_tracker = 0;
      ++skipped;
      return false;
    }
    if (++growth_tracker == kGrowthInterval) {
      scale *= kGrowth;
      growth_tracker = 0;
    }
    return true;
  }
};

}  // namespace worker
