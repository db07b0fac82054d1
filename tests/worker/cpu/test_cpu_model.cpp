// The whole model on the CPU backend: gradient readiness order, accumulation, eval mode, and
// that a small ResNet actually learns the learnable synthetic data.
#include <catch2/catch.hpp>

#include <cmath>
#include <numeric>

#include "worker/core/backend.h"
#include "worker/model/model.h"

using namespace worker;

namespace {

ModelConfig tiny(int depth, int batch = 4) {
  ModelConfig c;
  c.depth = depth;
  c.width = 4;
  c.num_classes = 5;
  c.image_size = 16;
  c.batch = batch;
  return c;
}

void fill_batch(Ops& ops, Model& m, int64_t first, DataKind kind = DataKind::Learnable) {
  const ModelConfig& c = m.config();
  std::vector<int64_t> idx(size_t(c.batch));
  std::iota(idx.begin(), idx.end(), first);
  ops.make_batch(kind, 1, idx.data(), c.batch, c.image_size, c.num_classes, m.input(), m.labels());
}

std::vector<float> grads_of(Ops& ops, Model& m) {
  std::vector<float> g(m.num_params());
  ops.download(g.data(), m.grads(), g.size() * 4);
  return g;
}

}  // namespace

TEST_CASE("model on cpu: on_grads_ready covers the buffer from the end, each byte once", "[cpu][model]") {
  auto ops = make_cpu_ops(2);
  for (int depth : {18, 50}) {
    Model m(tiny(depth), *ops);
    m.init(1);
    fill_batch(*ops, m, 0);
    std::vector<std::pair<size_t, size_t>> calls;
    m.on_grads_ready = [&](size_t b, size_t e) { calls.emplace_back(b, e); };
    m.forward_backward();
    REQUIRE(!calls.empty());
    CHECK(calls.front().second == m.num_params());
    for (size_t i = 1; i < calls.size(); ++i) CHECK(calls[i].second == calls[i - 1].first);
    CHECK(calls.back().first == 0);
    CHECK(calls.size() > 10);  // per layer, not one call at the end
  }
}

TEST_CASE("model on cpu: gradients accumulate and scale; eval is deterministic", "[cpu][model]") {
  auto ops = make_cpu_ops(2);
  Model m(tiny(18), *ops);
  m.init(2);
  const ModelState s0 = m.get_state();
  fill_batch(*ops, m, 0);
  m.forward_backward();
  const float l1 = m.last_loss();
  CHECK(std::isfinite(l1));
  CHECK(l1 == Approx(std::log(5.0)).margin(1.0));
  const std::vector<float> g1 = grads_of(*ops, m);
  CHECK(m.num_batches_tracked() == 1);

  m.set_state(s0);  // same running stats again
  m.forward_backward(0.5f);
  CHECK(m.last_loss() == l1);
  const std::vector<float> g2 = grads_of(*ops, m);
  double worst = 0, scale = 0;
  for (size_t i = 0; i < g1.size(); ++i) {
    worst = std::max(worst, double(std::abs(g2[i] - 1.5f * g1[i])));
    scale = std::max(scale, double(std::abs(g1[i])));
  }
  CHECK(worst <= 1e-5 * scale);

  m.forward_eval();
  const float e1 = m.last_loss();
  const std::vector<float> logits = m.last_logits();
  m.forward_eval();
  CHECK(m.last_loss() == e1);
  CHECK(m.last_logits() == logits);
  CHECK(m.num_batches_tracked() == 1);  // eval does not count
}

TEST_CASE("model on cpu: a small ResNet learns the learnable data", "[cpu][model][train]") {
  auto ops = make_cpu_ops(2);
  ModelConfig c = tiny(18, 16);
  c.width = 8;
  Model m(c, *ops);
  m.init(3);
  float* mbuf = static_cast<float*>(ops->alloc(m.num_params() * 4));
  float* vbuf = static_cast<float*>(ops->alloc(m.num_params() * 4));
  double first = 0, last = 0;
  const int steps = 60;
  for (int step = 1; step <= steps; ++step) {
    fill_batch(*ops, m, int64_t(step % 8) * c.batch);  // a 128-sample data set
    ops->zero(m.grads(), m.num_params() * 4);
    m.forward_backward();
    const float l = m.last_loss();
    if (step <= 5) first += l / 5;
    if (step > steps - 5) last += l / 5;
    ops->adam_step(1e-3f, 0.9f, 0.999f, 1e-8f, 0.0f, step, mbuf, vbuf, nullptr);
    ops->params_updated();
  }
  INFO("mean loss of the first 5 steps " << first << ", of the last 5 " << last);
  CHECK(last < 0.5 * first);
}
