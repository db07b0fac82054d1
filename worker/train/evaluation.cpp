#include "worker/train/evaluation.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace worker {

void EvalCounts::add(const float* logits, const int32_t* labels, int n, int classes, float label_smoothing) {
  for (int i = 0; i < n; ++i) {
    const float* z = logits + size_t(i) * size_t(classes);
    const int32_t y = labels[i];
    if (y < 0 || y >= classes) {
      throw std::out_of_range("validation: label " + std::to_string(y) + " outside [0, " + std::to_string(classes) + ")");
    }
    int larger = 0;
    for (int k = 0; k < classes; ++k) larger += z[k] > z[y];
    top1 += larger < 1;
    top5 += larger < 5;
    const float mx = *std::max_element(z, z + classes);
    double s = 0.0, zsum = 0.0;
    for (int k = 0; k < classes; ++k) {
      s += std::exp(double(z[k]) - mx);
      zsum += z[k];
    }
    const double e = label_smoothing, lse = mx + std::log(s);
    loss_sum += lse - (1.0 - e) * z[y] - e / classes * zsum;
    ++images;
  }
}

EvalCounts& EvalCounts::operator+=(const EvalCounts& o) {
  images += o.images;
  top1 += o.top1;
  top5 += o.top5;
  loss_sum += o.loss_sum;
  return *this;
}

}  // namespace worker
