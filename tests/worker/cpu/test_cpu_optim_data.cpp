// Optimizers (torch.optim semantics, against the formulas in double), gradient helpers, fp16 loss
// scaling's host default (Ops::set_loss_scale), and make_batch (the shared synthetic generator).
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>

#include "worker/core/backend.h"
#include "worker/core/synthetic.h"
#include "worker/cpu/cpu_ops.h"
#include "tests/worker/loss_scale_scenario.h"

using namespace worker;

namespace {
struct Buffers {
  cpu::CpuOps ops{2};
  std::vector<float> p{0.5f, -1.0f, 2.0f, 0.0f}, g{0.1f, 0.2f, -0.3f, 1e-3f};
  Buffers() { ops.bind_params(p.data(), g.data(), p.size()); }
};
}  // namespace

TEST_CASE("cpu sgd: momentum buffer starts as the gradient, weight decay is L2", "[cpu][optim]") {
  Buffers b;
  std::vector<float> buf(4, 123.0f);
  const double lr = 0.1, mom = 0.9, wd = 0.01;
  std::vector<double> p(b.p.begin(), b.p.end()), mb(4);
  for (int step = 0; step < 3; ++step) {
    b.ops.sgd_step(float(lr), float(mom), float(wd), buf.data(), step == 0, false, nullptr);
    for (size_t i = 0; i < 4; ++i) {
      const double d = b.g[i] + wd * p[i];
      mb[i] = step == 0 ? d : mom * mb[i] + d;
      p[i] -= lr * mb[i];
      CHECK(b.p[i] == Approx(p[i]).epsilon(1e-6));
      CHECK(buf[i] == Approx(mb[i]).epsilon(1e-6));
    }
  }
  // Without momentum no buffer is needed.
  b.ops.sgd_step(0.1f, 0.0f, 0.0f, nullptr, false, false, nullptr);
  CHECK(b.p[0] == Approx(p[0] - 0.1 * b.g[0]).epsilon(1e-6));
}

TEST_CASE("cpu sgd: Nesterov momentum and weight decay only where the mask says", "[cpu][optim]") {
  Buffers b;
  std::vector<float> buf(4, 0.0f);
  const std::vector<uint8_t> mask{1, 0, 1, 0};  // e.g. conv weights decayed, BN parameters not
  const double lr = 0.1, mom = 0.875, wd = 0.05;
  std::vector<double> p(b.p.begin(), b.p.end()), mb(4);
  for (int step = 0; step < 3; ++step) {
    b.ops.sgd_step(float(lr), float(mom), float(wd), buf.data(), step == 0, true, mask.data());
    for (size_t i = 0; i < 4; ++i) {
      const double d = b.g[i] + (mask[i] ? wd * p[i] : 0.0);
      mb[i] = step == 0 ? d : mom * mb[i] + d;
      p[i] -= lr * (d + mom * mb[i]);  // torch: grad = grad + momentum * buf
      CHECK(b.p[i] == Approx(p[i]).epsilon(1e-6));
      CHECK(buf[i] == Approx(mb[i]).epsilon(1e-6));
    }
  }
}

TEST_CASE("cpu adam: weight decay only where the mask says", "[cpu][optim]") {
  Buffers b;
  std::vector<float> m(4, 0.0f), v(4, 0.0f);
  const std::vector<uint8_t> mask{0, 1, 1, 0};
  const double lr = 1e-2, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.1;
  std::vector<double> p(b.p.begin(), b.p.end()), md(4, 0.0), vd(4, 0.0);
  for (int step = 1; step <= 2; ++step) {
    b.ops.adam_step(float(lr), float(b1), float(b2), float(eps), float(wd), step, m.data(), v.data(), mask.data());
    for (size_t i = 0; i < 4; ++i) {
      const double g = b.g[i] + (mask[i] ? wd * p[i] : 0.0);
      md[i] = b1 * md[i] + (1 - b1) * g;
      vd[i] = b2 * vd[i] + (1 - b2) * g * g;
      p[i] -= lr * (md[i] / (1 - std::pow(b1, step))) / (std::sqrt(vd[i] / (1 - std::pow(b2, step))) + eps);
      CHECK(b.p[i] == Approx(p[i]).epsilon(1e-6));
    }
  }
}

TEST_CASE("cpu adam: torch's update with bias correction", "[cpu][optim]") {
  Buffers b;
  std::vector<float> m(4, 0.0f), v(4, 0.0f);
  const double lr = 1e-3, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.01;
  std::vector<double> p(b.p.begin(), b.p.end()), md(4, 0.0), vd(4, 0.0);
  for (int step = 1; step <= 3; ++step) {
    b.ops.adam_step(float(lr), float(b1), float(b2), float(eps), float(wd), step, m.data(), v.data(), nullptr);
    for (size_t i = 0; i < 4; ++i) {
      const double g = b.g[i] + wd * p[i];
      md[i] = b1 * md[i] + (1 - b1) * g;
      vd[i] = b2 * vd[i] + (1 - b2) * g * g;
      const double mhat = md[i] / (1 - std::pow(b1, step)), vhat = vd[i] / (1 - std::pow(b2, step));
      p[i] -= lr * mhat / (std::sqrt(vhat) + eps);
      CHECK(b.p[i] == Approx(p[i]).epsilon(1e-6));
    }
  }
}

TEST_CASE("cpu scale_grads and grads_finite", "[cpu][optim]") {
  Buffers b;
  b.ops.scale_grads(2.0f);
  CHECK(b.g[2] == -0.6f);
  CHECK(b.ops.grads_finite());
  b.g[3] = std::numeric_limits<float>::infinity();
  CHECK_FALSE(b.ops.grads_finite());
  b.g[3] = std::nanf("");
  CHECK_FALSE(b.ops.grads_finite());
}

TEST_CASE("cpu loss scaling (Ops' host default): skipped steps touch nothing, the optimizer counts applied steps",
          "[cpu][optim][fp16]") {
  for (const bool adam : {false, true}) {
    INFO((adam ? "adam" : "sgd"));
    cpu::CpuOps ops(2);
    testing::run_loss_scale_scenario(ops, adam);
  }
}

TEST_CASE("cpu loss scaling: softmax_xent's gradient carries the scale, the loss does not", "[cpu][optim][fp16]") {
  cpu::CpuOps ops(1);
  const std::vector<float> logits{0.5f, -1.0f, 2.0f, 0.25f, 0.0f, -0.5f};
  const std::vector<int32_t> labels{2, 0};
  float loss_plain = 0, loss_scaled = 0;
  std::vector<float> plain(6), scaled(6);
  ops.softmax_xent(2, 3, logits.data(), labels.data(), 0.5f, 0.1f, &loss_plain, plain.data());
  ops.set_loss_scale({}, {4096.0f, 0, 0}, 0);
  ops.softmax_xent(2, 3, logits.data(), labels.data(), 0.5f, 0.1f, &loss_scaled, scaled.data());
  CHECK(loss_scaled == loss_plain);
  for (size_t i = 0; i < 6; ++i) CHECK(scaled[i] == plain[i] * 4096.0f);  // a power of two: exact
}

TEST_CASE("cpu make_batch: the shared generator, per sample index", "[cpu][data]") {
  auto ops = make_cpu_ops(2);
  const int n = 3, size = 5, classes = 7;
  std::vector<float> img(size_t(n) * size * size * 3);
  std::vector<int32_t> lab(n);
  Act a{img.data(), DType::F32, n, size, size, 3};
  const int64_t idx[] = {42, 7, 42};
  for (DataKind kind : {DataKind::Random, DataKind::Learnable}) {
    ops->make_batch(kind, 11, idx, n, size, classes, a, lab.data());
    for (int i = 0; i < n; ++i) {
      CHECK(lab[size_t(i)] == synth::label(11, idx[i], classes));
      for (int e = 0; e < size * size * 3; ++e)
        REQUIRE(img[size_t(i) * size * size * 3 + size_t(e)] == synth::pixel(kind, 11, idx[i], size, classes, e));
    }
    // The same sample index gives the same image wherever it sits in the batch.
    CHECK(std::equal(img.begin(), img.begin() + size * size * 3, img.begin() + 2 * size * size * 3));
  }
  Act wrong{img.data(), DType::F32, n, size + 1, size, 3};
  CHECK_THROWS_WITH(ops->make_batch(DataKind::Random, 1, idx, n, size, classes, wrong, lab.data()),
                    Catch::Contains("make_batch images"));
}
