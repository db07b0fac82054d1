// Dynamic loss scaling for fp16 training, with the semantics of torch.cuda.amp.GradScaler's
// defaults (worker/core/loss_scale.h): the loss (so every gradient) is multiplied by `scale`; a
// step whose gradients hold an inf or NaN is skipped and halves the scale; 2,000 clean steps in a
// row double it.
//
// The backend keeps the state that the steps change and decides each step itself (Ops::
// set_loss_scale, issue 24), so that no step waits for a verdict on the host; this is the
// trainer's mirror of it, set from the backend where the host needs it (log lines, records,
// checkpoints, the report) and exact there. Pure: update() runs the same state machine on a
// verdict given by hand (its tests).
#pragma once

#include <cstdint>

#include "worker/core/loss_scale.h"

namespace worker {

struct LossScaler {
  static constexpr float kInitScale = 65536.0f;  // 2^16, GradScaler's init_scale
  static constexpr float kGrowth = 2.0f;
  static constexpr float kBackoff = 0.5f;
  static constexpr int64_t kGrowthInterval = 2000;

  LossScaler() = default;
  // Tests only: a short growth interval makes the scale change within a few steps.
  explicit LossScaler(int64_t interval) : growth_interval(interval) {}

  bool enabled = false;  // fp16 only: bf16 and fp32 have fp32's exponent range
  float scale = kInitScale;
  int64_t growth_tracker = 0;  // clean steps since the scale last changed
  int64_t skipped = 0;         // optimizer steps skipped so far (the optimizer's own count lags by this)
  int64_t growth_interval = kGrowthInterval;

  // What the loss is multiplied by.
  float multiplier() const { return enabled ? scale : 1.0f; }

  LossScaleRules rules() const { return {kGrowth, kBackoff, growth_interval}; }
  LossScaleState state() const { return {scale, growth_tracker, skipped}; }
  void mirror(const LossScaleState& s) {
    scale = s.scale;
    growth_tracker = s.growth_tracker;
    skipped = s.skipped;
  }

  // Called once per step with whether every gradient was finite; true when the optimizer
  // may step. Updates the scale as GradScaler.update() does.
  bool update(bool grads_finite) {
    if (!enabled) return true;
    LossScaleState s = state();
    const bool applies = advance_loss_scale(s, rules(), grads_finite);
    mirror(s);
    return applies;
  }
};

}  // namespace worker
