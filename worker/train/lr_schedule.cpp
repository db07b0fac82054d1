#include "worker/train/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace worker {

double LrSchedule::lr(int64_t step) const {
  const bool warming = step < warmup_steps;
  const double warm = warming ? double(step + 1) / double(warmup_steps) : 1.0;
  switch (kind) {
    case LrScheduleKind::Constant: return base_lr * warm;
    case LrScheduleKind::Step: {
      const int64_t epoch = step / steps_per_epoch;
      double lr = base_lr;
      for (int m : milestones)
        if (epoch >= m) lr *= gamma;
      return lr * warm;
    }
    case LrScheduleKind::Cosine: {
      if (warming) return base_lr * warm;
      const double span = double(total_steps - warmup_steps);
      const double t = span > 0 ? double(step - warmup_steps) / span : 1.0;
      return base_lr * 0.5 * (1.0 + std::cos(M_PI * std::min(t, 1.0)));
    }
  }
  return base_lr;
}

}  // namespace worker
