// The learning rate of every optimizer step: a pure function of the step, unit-tested and
// checked against torch.optim.lr_scheduler. Schedules advance per step (fractional epochs), as
// torch's schedulers stepped once per iteration:
//   warm-up (W = warmup_steps > 0): lr = base * (s + 1) / W for s < W   (LinearLR from 1/W to 1);
//   constant: base;
//   step:     base * gamma^k, k = the number of milestones (epochs) <= s / steps_per_epoch
//             (MultiStepLR), times the warm-up factor while s < W;
//   cosine:   base * (1 + cos(pi * (s - W) / (T - W))) / 2 after the warm-up, T = total_steps
//             (CosineAnnealingLR with eta_min 0 over the steps after the warm-up).
#pragma once

#include <cstdint>
#include <vector>

namespace worker {

enum class LrScheduleKind : uint8_t { Constant, Step, Cosine };

struct LrSchedule {
  LrScheduleKind kind = LrScheduleKind::Constant;
  double base_lr = 0.0;          // after the global-batch rule (--lr-base-batch)
  int64_t steps_per_epoch = 1;
  int64_t total_steps = 1;       // --epochs x steps per epoch: where cosine reaches 0
  int64_t warmup_steps = 0;
  std::vector<int> milestones;   // epochs, ascending (step)
  double gamma = 0.1;            // step

  double lr(int64_t step) const;
};

}  // namespace worker
