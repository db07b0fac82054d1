// The learning-rate schedules, the validation metrics and the evaluation order (pure parts of
// issue 12's recipe and validation).
#include <catch2/catch.hpp>

#include <cmath>
#include <set>

#include "worker/train/evaluation.h"
#include "worker/train/lr_schedule.h"
#include "worker/train/sampler.h"

using namespace worker;

TEST_CASE("lr schedules: constant, step, cosine, each with a linear warm-up", "[train][lr]") {
  LrSchedule s;
  s.base_lr = 0.4;
  s.steps_per_epoch = 10;
  s.total_steps = 100;
  CHECK(s.lr(0) == 0.4);
  CHECK(s.lr(99) == 0.4);
  s.warmup_steps = 20;  // two epochs
  CHECK(s.lr(0) == Approx(0.4 / 20));
  CHECK(s.lr(9) == Approx(0.4 * 10 / 20));
  CHECK(s.lr(19) == Approx(0.4));
  CHECK(s.lr(20) == 0.4);

  s.kind = LrScheduleKind::Step;
  s.milestones = {3, 6};
  s.gamma = 0.1;
  CHECK(s.lr(29) == Approx(0.4));
  CHECK(s.lr(30) == Approx(0.04));  // epoch 3 starts
  CHECK(s.lr(59) == Approx(0.04));
  CHECK(s.lr(60) == Approx(0.004));
  CHECK(s.lr(5) == Approx(0.4 * 6 / 20));  // warm-up applies before the first milestone

  s.kind = LrScheduleKind::Cosine;
  CHECK(s.lr(10) == Approx(0.4 * 11 / 20));
  CHECK(s.lr(20) == Approx(0.4));
  CHECK(s.lr(60) == Approx(0.2));  // half-way through the 80 steps after the warm-up
  CHECK(s.lr(99) == Approx(0.4 * 0.5 * (1 + std::cos(M_PI * 79.0 / 80.0))));
  CHECK(s.lr(99) > 0.0);
  CHECK(s.lr(100) == Approx(0.0).margin(1e-15));
  CHECK(s.lr(150) == Approx(0.0).margin(1e-15));  // --max-steps past the schedule: stays at 0
  for (int64_t i = 21; i < 100; ++i) CHECK(s.lr(i) < s.lr(i - 1));
}

TEST_CASE("validation counts: top-1, top-5 and the criterion's loss", "[train][eval]") {
  // 2 images x 6 classes. Image 0: label 2 has the largest logit. Image 1: label 0 is 6th.
  const float logits[] = {0.f, 1.f, 3.f, 2.f, -1.f, 0.5f,   //
                          -5.f, 1.f, 2.f, 3.f, 4.f, 5.f};
  const int32_t labels[] = {2, 0};
  EvalCounts c;
  c.add(logits, labels, 2, 6, 0.0f);
  CHECK(c.images == 2);
  CHECK(c.top1 == 1);
  CHECK(c.top5 == 1);
  auto lse = [](const float* z) {
    double s = 0;
    for (int k = 0; k < 6; ++k) s += std::exp(double(z[k]));
    return std::log(s);
  };
  const double nll = (lse(logits) - 3.0) + (lse(logits + 6) + 5.0);
  CHECK(c.loss_sum == Approx(nll).epsilon(1e-12));
  CHECK(c.top1_percent() == 50.0);
  CHECK(c.mean_loss() == Approx(nll / 2));
  // Label smoothing 0.1: (1 - e) nll + e mean_k(-log p_k), as CrossEntropyLoss(label_smoothing=).
  EvalCounts s;
  s.add(logits, labels, 2, 6, 0.1f);
  double uniform = 0;
  for (int i = 0; i < 2; ++i)
    for (int k = 0; k < 6; ++k) uniform += (lse(logits + 6 * i) - logits[6 * i + k]) / 6.0;
  CHECK(s.loss_sum == Approx(0.9 * nll + double(0.1f) * uniform).epsilon(1e-6));
  // A label tied with the largest logit counts as correct; fewer than 5 classes: top-5 always.
  const float tie[] = {1.f, 1.f, 0.f};
  const int32_t tl[] = {1};
  EvalCounts t;
  t.add(tie, tl, 1, 3, 0.0f);
  CHECK(t.top1 == 1);
  CHECK(t.top5 == 1);
  t += c;
  CHECK(t.images == 3);
  CHECK(t.top1 == 2);
  const int32_t bad[] = {6};
  CHECK_THROWS(c.add(logits, bad, 1, 6, 0.f));
}

TEST_CASE("eval order: every sample once over the ranks, no padding, short last batch", "[train][eval]") {
  for (int world : {1, 2, 3, 4}) {
    for (int64_t size : {0, 1, 7, 101}) {
      std::multiset<int64_t> seen;
      for (int r = 0; r < world; ++r) {
        const auto order = eval_order(size, r, world, 4);
        for (size_t b = 0; b < order.size(); ++b) {
          CHECK(!order[b].empty());
          CHECK(order[b].size() <= 4);
          if (b + 1 < order.size()) CHECK(order[b].size() == 4);
          for (int64_t i : order[b]) {
            CHECK(i % world == r);
            seen.insert(i);
          }
        }
      }
      REQUIRE(int64_t(seen.size()) == size);
      for (int64_t i = 0; i < size; ++i) CHECK(seen.count(i) == 1);
    }
  }
}
