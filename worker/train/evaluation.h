// Validation metrics: top-1, top-5 and the mean loss over a whole split, from the logits of
// eval-mode forwards. Pure arithmetic on host values; the session gathers one EvalCounts per
// rank and sums them in rank order, so every image counts once and every rank gets one result.
#pragma once

#include <cstdint>

namespace worker {

struct EvalCounts {
  int64_t images = 0;
  int64_t top1 = 0;   // images whose label has the largest logit
  int64_t top5 = 0;   // ... is among the five largest (fewer than five classes: all count)
  double loss_sum = 0.0;

  // Adds the first `n` rows of `logits` (n x classes). A label counts as within the top k when
  // fewer than k logits are strictly larger than its own. The loss is the training criterion
  // (cross-entropy with `label_smoothing`, as torchvision's reference evaluates), in double.
  void add(const float* logits, const int32_t* labels, int n, int classes, float label_smoothing);
  EvalCounts& operator+=(const EvalCounts& o);

  double top1_percent() const { return images ? 100.0 * double(top1) / double(images) : 0.0; }
  double top5_percent() const { return images ? 100.0 * double(top5) / double(images) : 0.0; }
  double mean_loss() const { return images ? loss_sum / double(images) : 0.0; }
};

}  // namespace worker
