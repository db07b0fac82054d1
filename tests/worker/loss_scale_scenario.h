// fp16 loss scaling decided by the backend (Ops::set_loss_scale, issue 24), one procedure for every
// backend: the CPU's host default (tests/worker/cpu) and the GPU's device kernels
// (tests/worker/gpu) run the same steps and are checked against LossScaler's host semantics
// (worker/train/loss_scaler.h) and against torch.optim's formulas in double.
//
// Each step puts gradients g x scale x 2 in place (the loss scaled, summed over two ranks; the
// step's verdict false: one of them inf), then unscale_grads(2), update_loss_scale() and one
// optimizer call whose own step count pretends every step applied (the backend must count
// itself). Checked after every step: the gradients unscaled to exactly g (the scale is a power of
// two), the verdict, the state equal to LossScaler's, the parameters and the optimizer state
// untouched on a skipped step, and on an applied one the update of the backend's step count
// (SGD's first step is the first applied one; Adam's bias corrections lag by the skipped steps).
#pragma once

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "worker/core/ops.h"
#include "worker/train/loss_scaler.h"

namespace worker::testing {

struct LossScaleRun {
  std::vector<std::vector<float>> params;  // after each step
  std::vector<LossScaleState> states;      // after each step
};

// The verdicts: the first step overflows (the optimizer starts after a skip), two clean steps
// grow the scale (interval 2), an overflow in between restarts the count.
inline const std::vector<bool>& scenario_verdicts() {
  static const std::vector<bool> v{false, true, true, true, false, true, true, true, false, false, true};
  return v;
}

// The backend's memory for one tensor of floats.
struct DeviceFloats {
  Ops& ops;
  float* p;
  size_t n;
  DeviceFloats(Ops& o, const std::vector<float>& host) : ops(o), p(static_cast<float*>(o.alloc(host.size() * 4))), n(host.size()) {
    ops.upload(p, host.data(), n * 4);
  }
  std::vector<float> get() const {
    std::vector<float> h(n);
    ops.synchronize();
    ops.download(h.data(), p, n * 4);
    return h;
  }
  void set(const std::vector<float>& h) { ops.upload(p, h.data(), n * 4); }
};

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

// Runs the scenario with SGD (momentum, weight decay) or Adam on `ops`, which nothing is bound to yet.
inline LossScaleRun run_loss_scale_scenario(Ops& ops, bool adam) {
  const std::vector<float> p0{0.5f, -1.0f, 2.0f, 0.0f}, g{0.1f, 0.2f, -0.3f, 1e-3f};
  DeviceFloats params(ops, p0), grads(ops, std::vector<float>(4, 0.0f));
  DeviceFloats buf(ops, std::vector<float>(4, 0.0f)), m(ops, std::vector<float>(4, 0.0f)),
      v(ops, std::vector<float>(4, 0.0f));
  ops.bind_params(params.p, grads.p, 4);

  LossScaler ref(2);  // the host's semantics, interval 2
  ref.enabled = true;
  ref.scale = 1024.0f;
  ops.set_loss_scale(ref.rules(), ref.state(), 0);
  const double lr = adam ? 1e-2 : 0.1, mom = 0.9, wd = 0.01, b1 = 0.9, b2 = 0.999, eps = 1e-8;
  std::vector<double> pd(p0.begin(), p0.end()), bd(4, 0.0), md(4, 0.0), vd(4, 0.0);
  int64_t applied = 0;
  LossScaleRun run;
  const std::vector<bool>& verdicts = scenario_verdicts();
  for (size_t k = 0; k < verdicts.size(); ++k) {
    INFO("step " << k << ", verdict " << verdicts[k] << ", scale " << ref.scale);
    std::vector<float> scaled(4);
    for (size_t i = 0; i < 4; ++i) scaled[i] = g[i] * ref.scale * 2.0f;
    if (!verdicts[k]) scaled[1] = std::numeric_limits<float>::infinity();
    grads.set(scaled);
    const std::vector<float> p_before = params.get(), b_before = buf.get(), m_before = m.get(), v_before = v.get();

    ops.unscale_grads(2.0f);
    CHECK(ops.grads_verdict() == verdicts[k]);
    if (verdicts[k]) CHECK(same_bits(grads.get(), g));  // 1 / (2 x scale) undoes it exactly
    ops.update_loss_scale();
    const bool applies = ref.update(verdicts[k]);
    if (adam)
      ops.adam_step(float(lr), float(b1), float(b2), float(eps), float(wd), int64_t(k) + 1, m.p, v.p, nullptr);
    else
      ops.sgd_step(float(lr), float(mom), float(wd), buf.p, k == 0, false, nullptr);

    const LossScaleState s = ops.loss_scale();
    CHECK(s.scale == ref.scale);
    CHECK(s.growth_tracker == ref.growth_tracker);
    CHECK(s.skipped == ref.skipped);
    const std::vector<float> p = params.get();
    if (!applies) {  // parameters and optimizer state untouched, bit for bit
      CHECK(same_bits(p, p_before));
      CHECK(same_bits(buf.get(), b_before));
      CHECK(same_bits(m.get(), m_before));
      CHECK(same_bits(v.get(), v_before));
    } else {
      ++applied;  // the backend's count: torch's optimizer steps only on applied steps
      for (size_t i = 0; i < 4; ++i) {
        const double d = double(g[i]) + wd * pd[i];
        if (adam) {
          md[i] = b1 * md[i] + (1 - b1) * d;
          vd[i] = b2 * vd[i] + (1 - b2) * d * d;
          const double mhat = md[i] / (1 - std::pow(b1, double(applied)));
          const double vhat = vd[i] / (1 - std::pow(b2, double(applied)));
          pd[i] -= lr * mhat / (std::sqrt(vhat) + eps);
        } else {
          bd[i] = applied == 1 ? d : mom * bd[i] + d;
          pd[i] -= lr * bd[i];
        }
        // fp32 against double over a few steps, as the backends' own optimizer tests.
        CHECK(p[i] == Approx(pd[i]).epsilon(1e-6).margin(1e-7));
      }
    }
    run.params.push_back(p);
    run.states.push_back(s);
  }
  CHECK(ref.skipped == 4);  // the scenario did what it says: skips, and the scale moved both ways
  CHECK(applied == int64_t(verdicts.size()) - 4);
  return run;
}

}  // namespace worker::testing
