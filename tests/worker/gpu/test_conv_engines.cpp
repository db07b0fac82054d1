// The convolution engine choice (worker/gpu/conv_engines.h) on every convolution shape of
// ResNet-50: each call of a shape and direction may run another engine while the candidates
// are being timed, so every call's result is compared with the legacy API's (the unfused
// reference path, WORKER_CONV_ENGINES=legacy), forward, data gradient (written and
// accumulated) and weight gradient. bf16: within 1e-2 of max|legacy| (both round the same fp32
// sums to bf16, in another order).
#include <catch2/catch.hpp>

#include <cstring>
#include <memory>
#include <string>

#include "tests/worker/gpu/gpu_test_util.h"
#include "worker/core/knobs.h"
#include "worker/gpu/conv_engines.h"
#include "worker/gpu/gpu_ops.h"

using namespace gputest;

namespace {

struct Shape {
  int hw, cin, cout, k, stride;
};

// ResNet-50's convolutions (input side, channels in and out, kernel, stride); the stem runs
// in its space-to-depth form (4x4/1, 16 channels on 115x115).
const Shape kShapes[] = {
    {56, 64, 64, 1, 1},     {56, 64, 64, 3, 1},     {56, 64, 256, 1, 1},    {56, 256, 64, 1, 1},
    {56, 256, 128, 1, 1},   {56, 128, 128, 3, 2},   {28, 128, 512, 1, 1},   {56, 256, 512, 1, 2},
    {28, 512, 128, 1, 1},   {28, 128, 128, 3, 1},   {28, 512, 256, 1, 1},   {28, 256, 256, 3, 2},
    {14, 256, 1024, 1, 1},  {28, 512, 1024, 1, 2},  {14, 1024, 256, 1, 1},  {14, 256, 256, 3, 1},
    {14, 1024, 512, 1, 1},  {14, 512, 512, 3, 2},   {7, 512, 2048, 1, 1},   {14, 1024, 2048, 1, 2},
    {7, 2048, 512, 1, 1},   {7, 512, 512, 3, 1},    {224, 3, 64, 7, 2}};

// graph_engines off: WORKER_CONV_ENGINES=legacy.
std::unique_ptr<Ops> gpu_ops_with(bool graph_engines) {
  worker::gpu::GpuOptions o = worker::gpu::gpu_options(worker::process_knobs(), 0, DType::BF16);
  o.graph_engines = graph_engines;
  return std::make_unique<worker::gpu::GpuOps>(o);
}

}  // namespace

TEST_CASE("graph-API convolution engines match the legacy plans on every ResNet-50 convolution",
          "[gpu]") {
  const DType t = DType::BF16;
  // First call, then every trial of every candidate (legacy included), then the choice.
  const int n = 4, calls = 2 + (worker::process_knobs().conv_candidates + 1) * gpu::ConvTuner::kTrials;
  size_t graph_shapes = 0;
  for (const Shape& s : kShapes) {
    const int pad = s.k / 2;
    ConvDesc d{n, s.hw, s.hw, s.cin, s.cout, s.k, s.k, s.stride, pad, 0, 0};
    d.ho = (s.hw + 2 * pad - s.k) / s.stride + 1;
    d.wo = d.ho;
    INFO("conv " << s.k << "x" << s.k << "/" << s.stride << " " << s.cin << "->" << s.cout << " on "
                 << s.hw << "x" << s.hw);
    const size_t wn = size_t(s.cout) * s.k * s.k * s.cin;
    const uint64_t seed = uint64_t(s.cin * 31 + s.cout + s.k * 7 + s.hw);
    const auto params = rounded(randn(wn, seed, 0.1f), t);
    const std::vector<float> zeros(wn, 0.f);
    const auto xv = rounded(randn(size_t(n) * s.hw * s.hw * s.cin, seed + 1), t);
    const auto dyv = rounded(randn(size_t(n) * d.ho * d.wo * s.cout, seed + 2), t);
    const auto dx0 = rounded(randn(xv.size(), seed + 3), t);
    const ParamView w{0, wn};
    std::vector<float> ref[4];  // y, dx, dx accumulated, dw
    {
      Side sd(gpu_ops_with(false), params, zeros);
      Act x = sd.act(n, s.hw, s.hw, s.cin, xv), y = sd.act(n, d.ho, d.wo, s.cout);
      Act dy = sd.act(n, d.ho, d.wo, s.cout, dyv), dx = sd.act(n, s.hw, s.hw, s.cin, dx0);
      sd.ops->conv_forward(d, x, w, y);
      ref[0] = sd.get(y);
      sd.ops->conv_backward(d, x, w, dy, &dx, false, w);
      ref[1] = sd.get(dx);
      ref[3] = sd.get_grads();
      sd.put(dx, dx0);
      sd.ops->upload(sd.grads, zeros.data(), wn * 4);
      sd.ops->conv_backward(d, x, w, dy, &dx, true, w);
      ref[2] = sd.get(dx);
    }
    Side sd(gpu_ops_with(true), params, zeros);
    Act x = sd.act(n, s.hw, s.hw, s.cin, xv), y = sd.act(n, d.ho, d.wo, s.cout);
    Act dy = sd.act(n, d.ho, d.wo, s.cout, dyv), dx = sd.act(n, s.hw, s.hw, s.cin, dx0);
    for (int c = 0; c < calls; ++c) {
      INFO("call " << c);
      sd.ops->conv_forward(d, x, w, y);
      CHECK_CLOSE_REL(sd.get(y), ref[0], 1e-2);
      sd.ops->upload(sd.grads, zeros.data(), wn * 4);
      sd.ops->conv_backward(d, x, w, dy, &dx, false, w);
      CHECK_CLOSE_REL(sd.get(dx), ref[1], 1e-2);
      CHECK_CLOSE_REL(sd.get_grads(), ref[3], 1e-2);
      sd.put(dx, dx0);
      sd.ops->upload(sd.grads, zeros.data(), wn * 4);
      sd.ops->conv_backward(d, x, w, dy, &dx, true, w);
      CHECK_CLOSE_REL(sd.get(dx), ref[2], 1e-2);
    }
    auto* g = dynamic_cast<gpu::GpuOps*>(sd.ops.get());
    REQUIRE(g);
    g->settle_conv_engines();
    for (const std::string& line : g->conv_engine_report()) {
      WARN(line);
      graph_shapes += line.find(": graph ") != std::string::npos;
    }
  }
  // The graph API must win somewhere, or the machinery is not running at all.
  CHECK(graph_shapes > 0);
}

namespace {

// One ResNet-50 (width 16) step on the legacy plans (deterministic algorithms), its heuristics asked
// with `threads` threads; the shapes answered ahead in *ahead.
ModelRun legacy_step(int threads, int* ahead) {
  worker::gpu::GpuOptions g;
  g.precision = DType::BF16;
  g.graph_engines = false;  // the legacy plans alone: what the heuristics chose is what runs
  g.deterministic = true;
  g.wgrad_stream = false;
  g.plan_threads = threads;
  worker::gpu::GpuOps ops(g);
  Model m(small_resnet(50, 8), ops);
  m.init(3);
  ops.zero(m.grads(), m.num_params() * 4);
  learnable_batch(ops, m);
  m.forward_backward(1.0f);
  *ahead = ops.convs_planned_ahead();
  return downloaded(ops, m);
}

}  // namespace

// GpuOptions::plan_threads: cuDNN's heuristics asked for every shape at once on several threads, each
// with a handle of its own, choose the algorithms that asking them one by one chooses: the same step,
// bit for bit (deterministic algorithms), and every shape (the stem's space-to-depth form among them)
// answered ahead.
TEST_CASE("the legacy plans asked ahead on several threads are those asked one by one", "[gpu]") {
  int ahead_one = -1, ahead_many = -1;
  const ModelRun one = legacy_step(1, &ahead_one);
  const ModelRun many = legacy_step(6, &ahead_many);
  CHECK(ahead_one == 0);
  CHECK(ahead_many >= 10);  // ResNet-50's distinct shapes at width 16 and 64 px, and the s2d form
  REQUIRE(one.grads.size() == many.grads.size());
  size_t differ = 0;
  for (size_t i = 0; i < one.grads.size(); ++i)
    differ += std::memcmp(&one.grads[i], &many.grads[i], sizeof(float)) != 0;
  CHECK(differ == 0);
  CHECK(std::memcmp(&one.loss, &many.loss, sizeof(float)) == 0);
}
