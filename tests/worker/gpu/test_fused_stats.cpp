// fp16's fused forward (docs/gpu.md, "fp16: the convolution writes its batch norm's sums"): a convolution
// that feeds a training batch norm runs as cuDNN's conv+genstats graph and the batch norm takes its fp32
// sums instead of its own statistics pass. Against the unfused fp16 path (WORKER_FP16_FUSED=0) and the
// CPU backend (the oracle), per layer on ResNet-50's shapes, forward and the backward that follows; the
// pairing's safety (a write between the convolution and the batch norm); a captured CUDA graph; the whole
// small ResNet-50 (with and without --recompute block); the timed choice.
//
// Tolerances, from what the references vary by:
//   - outputs (y, the batch norm's output z, its dx, the convolution's dx and dW, dgamma/dbeta) against
//     the CPU's fp32 chain: twice what storing the GPU's fp16 tensors (y, z, the batch norm's dx) alone
//     changes that chain (the CPU chain run again with those tensors rounded to fp16), plus the output's
//     own fp16 rounding (2^-11), in max|.| / max|ref| as every layer test;
//   - mean and invstd against the exact (double) statistics of the very y the batch norm read: what the
//     fp32 sums of y may be off by, propagated. Per channel, two independent roundings, each bounded by
//     6 of its standard deviations: cuDNN may sum y before its rounding to fp16 (a uniform error of at
//     most half an ulp per element: variance ulp^2/12, summed over the elements), and the fp32
//     accumulation itself (at most one rounding of each partial sum: variance (2^-24 |partial|)^2/3,
//     summed over a sequential order's partial sums, which bounds a blocked order's); likewise for the
//     sum of squares; plus fp32's rounding of the outputs. The unfused path meets the same bound.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tests/worker/gpu/gpu_test_util.h"
#include "worker/core/knobs.h"
#include "worker/gpu/gpu_ops.h"
#include "worker/model/model.h"

using namespace gputest;

namespace {

constexpr double kU16 = 1.0 / 2048;      // fp16's unit roundoff
constexpr double kU32 = 1.0 / 16777216;  // fp32's
constexpr int kN = 4;

// With a block's batch norms in the next convolution's prologue wherever the model asks for it
// (GpuOptions::conv_prologue), whatever the knob's default.
std::unique_ptr<Ops> fp16_ops(FusedStats mode) {
  gpu::GpuOptions o = gpu::gpu_options(process_knobs(), 0, DType::F16);
  o.fused_stats = mode;
  o.conv_prologue = true;
  return std::make_unique<gpu::GpuOps>(o);
}

gpu::GpuOps& gpu_of(Ops& ops) {
  auto* g = dynamic_cast<gpu::GpuOps*>(&ops);
  REQUIRE(g);
  return *g;
}

// The fused forward's plan of each shape (or why there is none), in the test's output.
void warn_fused_plans(gpu::GpuOps& g) {
  for (const std::string& line : g.conv_engine_report())
    if (line.find("fwd+stats") != std::string::npos) WARN(line);
}

struct Shape {
  int hw, cin, cout, k, stride;
};

// ResNet-50's convolutions that feed a batch norm, 1x1 and 3x3, stride 1 and 2.
const Shape kShapes[] = {
    {56, 64, 256, 1, 1},    // l1.b1.ds, c3
    {56, 256, 64, 1, 1},    // l1.b2.c1
    {56, 64, 64, 3, 1},     // l1.b1.c2
    {56, 128, 128, 3, 2},   // l2.b1.c2
    {56, 256, 512, 1, 2},   // l2.b1.ds
    {14, 1024, 256, 1, 1},  // l3.b2.c1
    {7, 512, 512, 3, 1},    // l4.b2.c2
};

// One convolution and its batch norm (+ ReLU), their parameters (the filter, then gamma and beta, in
// the flat buffer) and inputs, all fp16-representable.
struct Layer {
  ConvDesc d;
  BnDesc b;
  size_t wn = 0, c = 0;
  ParamView w, gamma, beta;
  std::vector<float> params, x, dz, rm0, rv0;
};

Layer make_layer(const Shape& s) {
  Layer L;
  const int pad = s.k / 2;
  L.d = ConvDesc{kN, s.hw, s.hw, s.cin, s.cout, s.k, s.k, s.stride, pad, 0, 0};
  L.d.ho = L.d.wo = (s.hw + 2 * pad - s.k) / s.stride + 1;
  L.b = BnDesc{kN, L.d.ho, L.d.wo, s.cout, 1e-5f, 0.1f};
  L.c = size_t(s.cout);
  L.wn = size_t(s.cout) * s.k * s.k * s.cin;
  L.w = {0, L.wn};
  L.gamma = {L.wn, L.c};
  L.beta = {L.wn + L.c, L.c};
  const uint64_t seed = uint64_t(s.cin * 131 + s.cout * 7 + s.k * 3 + s.stride);
  const float fan = float(s.cin * s.k * s.k);
  // Filters with a mean: the outputs' channel means are several of their standard deviations, where the
  // one-pass variance from sums cancels most.
  L.params = rounded(randn(L.wn, seed, 1.f / std::sqrt(fan), 0.3f / std::sqrt(fan)), DType::F16);
  for (float v : randn(L.c, seed + 1, 0.2f, 1.f)) L.params.push_back(v);  // gamma
  for (float v : randn(L.c, seed + 2, 0.2f, 0.f)) L.params.push_back(v);  // beta
  auto x = randn(size_t(kN) * s.hw * s.hw * s.cin, seed + 3, 1.f, 0.5f);
  for (float& v : x) v = std::max(v, 0.f);  // post-ReLU activations
  L.x = rounded(x, DType::F16);
  L.dz = rounded(randn(size_t(kN) * L.d.ho * L.d.wo * L.c, seed + 4), DType::F16);
  L.rm0 = randn(L.c, seed + 5);
  L.rv0 = randn(L.c, seed + 6, 0.1f, 1.f);
  return L;
}

// What one call of the layer leaves (grads: dW, then dgamma and dbeta).
struct Out {
  std::vector<float> y, z, mean, invstd, rm, rv, dyc, dx, grads;
};

// The layer `calls` times on one backend (running statistics and gradients reset before each call), every
// call's results handed to `each`; returns the last call's. round16 (the CPU): y, z and the batch norm's
// dx rounded to fp16 where the GPU stores them.
Out run_layer(Side& sd, const Layer& L, int calls, bool round16 = false,
              const std::function<void(int, const Out&)>& each = nullptr) {
  Act x = sd.act(kN, L.d.h, L.d.w, L.d.cin, L.x);
  Act y = sd.act(kN, L.d.ho, L.d.wo, L.d.cout), z = sd.act(kN, L.d.ho, L.d.wo, L.d.cout);
  Act dz = sd.act(kN, L.d.ho, L.d.wo, L.d.cout, L.dz), dyc = sd.act(kN, L.d.ho, L.d.wo, L.d.cout);
  Act dx = sd.act(kN, L.d.h, L.d.w, L.d.cin);
  float* rm = sd.floats(L.rm0);
  float* rv = sd.floats(L.rv0);
  float* sm = sd.floats(std::vector<float>(L.c));
  float* si = sd.floats(std::vector<float>(L.c));
  const std::vector<float> zeros(sd.count, 0.f);
  auto round_act = [&](Act& a) {
    if (round16) sd.put(a, rounded(sd.get(a), DType::F16));
  };
  Out o;
  for (int k = 0; k < calls; ++k) {
    sd.ops->upload(rm, L.rm0.data(), L.c * 4);
    sd.ops->upload(rv, L.rv0.data(), L.c * 4);
    sd.ops->upload(sd.grads, zeros.data(), zeros.size() * 4);
    sd.ops->conv_forward(L.d, x, L.w, y);
    round_act(y);
    sd.ops->bn_forward_train(L.b, y, L.gamma, L.beta, rm, rv, sm, si, nullptr, true, z);
    round_act(z);
    sd.ops->bn_backward(L.b, y, z, dz, L.gamma, sm, si, true, dyc, nullptr, L.gamma, L.beta);
    round_act(dyc);
    sd.ops->conv_backward(L.d, x, L.w, dyc, &dx, false, L.w);
    o.y = sd.get(y);
    o.z = sd.get(z);
    o.mean = sd.get_f(sm, L.c);
    o.invstd = sd.get_f(si, L.c);
    o.rm = sd.get_f(rm, L.c);
    o.rv = sd.get_f(rv, L.c);
    o.dyc = sd.get(dyc);
    o.dx = sd.get(dx);
    o.grads = sd.get_grads();
    if (each) each(k, o);
  }
  return o;
}

// The CPU's exact chain and the one with the GPU's fp16 storage, and the tolerance of each output.
struct Reference {
  Out exact, rounded;
  double y = 0, z = 0, dyc = 0, dx = 0, dw = 0, dbn = 0;
};

Reference cpu_reference(const Layer& L) {
  Side cpu(make_cpu_ops(2), L.params, std::vector<float>(L.params.size(), 0.f));
  Reference r;
  r.exact = run_layer(cpu, L, 1);
  r.rounded = run_layer(cpu, L, 1, true);
  auto tol = [](const std::vector<float>& a, const std::vector<float>& b, size_t begin = 0, size_t end = SIZE_MAX) {
    return 2 * (rel_err(a, b, begin, end).rel + kU16);
  };
  r.y = tol(r.rounded.y, r.exact.y);
  r.z = tol(r.rounded.z, r.exact.z);
  r.dyc = tol(r.rounded.dyc, r.exact.dyc);
  r.dx = tol(r.rounded.dx, r.exact.dx);
  r.dw = tol(r.rounded.grads, r.exact.grads, 0, L.wn);
  r.dbn = tol(r.rounded.grads, r.exact.grads, L.wn, L.wn + 2 * L.c);
  return r;
}

#define CHECK_WITHIN(what, ours, ref, tol, begin, end)                         \
  do {                                                                         \
    const Err e_ = rel_err(ours, ref, begin, end);                             \
    INFO(what << ": " << e_.where << " (tolerance " << (tol) << ")");          \
    CHECK(e_.rel <= (tol));                                                    \
  } while (0)

// Every output of `o` against the CPU's exact chain (and, when given, against another GPU run `u`).
void check_outputs(const Layer& L, const Reference& r, const Out& o, const char* what) {
  INFO(what);
  const Out& e = r.exact;
  CHECK_WITHIN("y", o.y, e.y, r.y, 0, SIZE_MAX);
  CHECK_WITHIN("z = relu(bn(y))", o.z, e.z, r.z, 0, SIZE_MAX);
  CHECK_WITHIN("the batch norm's dx", o.dyc, e.dyc, r.dyc, 0, SIZE_MAX);
  CHECK_WITHIN("the convolution's dx", o.dx, e.dx, r.dx, 0, SIZE_MAX);
  CHECK_WITHIN("dW", o.grads, e.grads, r.dw, 0, L.wn);
  CHECK_WITHIN("dgamma, dbeta", o.grads, e.grads, r.dbn, L.wn, L.wn + 2 * L.c);
}

// The spacing of fp16 values around v (v an fp16 value).
double ulp16(double v) {
  const double a = std::fabs(v);
  return a < 0x1p-14 ? 0x1p-24 : std::ldexp(1.0, std::ilogb(a) - 10);
}

// o's saved and running statistics against the exact statistics of y (the fp16 values its batch norm
// read), within what fp32 sums of y may be off by (see the file's comment); the running statistics
// (updated once from L's initial ones) too unless `running` is false.
void check_stats(const Layer& L, const std::vector<float>& y, const Out& o, const char* what, bool running = true) {
  INFO(what);
  const int c = int(L.c);
  const int64_t m = int64_t(y.size()) / c;
  const double mom = L.b.momentum, eps = L.b.eps;
  int bad = 0;
  for (int ch = 0; ch < c; ++ch) {
    double s = 0, q = 0, vs_round = 0, vq_round = 0, vs_acc = 0, vq_acc = 0;
    for (int64_t r = 0; r < m; ++r) {
      const double v = y[size_t(r) * c + ch], u = ulp16(v);
      s += v;
      q += v * v;
      vs_round += u * u / 12;
      vq_round += 4 * v * v * u * u / 12;  // d(v^2) = 2 v dv
      vs_acc += kU32 * kU32 * s * s / 3;
      vq_acc += kU32 * kU32 * q * q / 3;
    }
    const double ds = 6 * std::sqrt(vs_round + vs_acc) + kU32 * std::fabs(s);
    const double dq = 6 * std::sqrt(vq_round + vq_acc) + kU32 * q;
    const double mean = s / m, var = std::max(0.0, q / m - mean * mean), inv = 1 / std::sqrt(var + eps);
    const double dmean = ds / m, dvar = dq / m + 2 * std::fabs(mean) * dmean;
    const double t_mean = dmean + 4 * kU32 * std::fabs(mean);
    const double t_inv = 0.5 * inv * inv * inv * dvar + 4 * kU32 * inv;
    const double unbiased = double(m) / double(m - 1);
    const double rm = (1 - mom) * L.rm0[size_t(ch)] + mom * mean;
    const double rv = (1 - mom) * L.rv0[size_t(ch)] + mom * var * unbiased;
    const double t_rm = mom * t_mean + 4 * kU32 * (std::fabs(rm) + std::fabs(L.rm0[size_t(ch)]));
    const double t_rv = mom * dvar * unbiased + 4 * kU32 * (std::fabs(rv) + L.rv0[size_t(ch)]);
    const bool ok = std::fabs(o.mean[size_t(ch)] - mean) <= t_mean && std::fabs(o.invstd[size_t(ch)] - inv) <= t_inv &&
                    (!running || (std::fabs(o.rm[size_t(ch)] - rm) <= t_rm && std::fabs(o.rv[size_t(ch)] - rv) <= t_rv));
    if (!ok && bad++ < 3) {
      INFO("channel " << ch << ": mean " << o.mean[size_t(ch)] << " exact " << mean << " (tol " << t_mean
                      << "), invstd " << o.invstd[size_t(ch)] << " exact " << inv << " (tol " << t_inv << ")"
                      << (running ? ", running mean " + std::to_string(o.rm[size_t(ch)]) + " expected " +
                                        std::to_string(rm) + " (tol " + std::to_string(t_rm) + "), running var " +
                                        std::to_string(o.rv[size_t(ch)]) + " expected " + std::to_string(rv) +
                                        " (tol " + std::to_string(t_rv) + ")"
                                  : std::string()));
      CHECK(ok);
    }
  }
  CHECK(bad == 0);
}

std::string describe(const Shape& s) {
  return std::to_string(s.k) + "x" + std::to_string(s.k) + "/" + std::to_string(s.stride) + " " +
         std::to_string(s.cin) + "->" + std::to_string(s.cout) + " " + std::to_string(s.hw) + "x" +
         std::to_string(s.hw);
}

}  // namespace

TEST_CASE("fp16 conv+genstats and its batch norm match the unfused path and the CPU backend, forward and backward",
          "[gpu][fused]") {
  for (const Shape& s : kShapes) {
    INFO("conv " << describe(s) << ", batch " << kN);
    const Layer L = make_layer(s);
    const Reference r = cpu_reference(L);
    const std::vector<float> zeros(L.params.size(), 0.f);
    Side off(fp16_ops(FusedStats::Off), L.params, zeros), on(fp16_ops(FusedStats::Always), L.params, zeros);
    // Two calls: the first shows the pairing that the convolution feeds this batch norm.
    const Out u = run_layer(off, L, 2), f = run_layer(on, L, 2);
    warn_fused_plans(gpu_of(*on.ops));
    CHECK(gpu_of(*off.ops).fused_bn_forwards() == 0);
    REQUIRE(gpu_of(*on.ops).fused_bn_forwards() == 1);  // the second call
    check_outputs(L, r, u, "unfused fp16");
    check_outputs(L, r, f, "fused fp16");
    check_stats(L, u.y, u, "unfused fp16 statistics");
    check_stats(L, f.y, f, "fused fp16 statistics");
    // The two GPU paths against each other, held as each is against the CPU.
    CHECK_WITHIN("z, fused against unfused", f.z, u.z, r.z, 0, SIZE_MAX);
    CHECK_WITHIN("the convolution's dx, fused against unfused", f.dx, u.dx, r.dx, 0, SIZE_MAX);
    CHECK_WITHIN("dW, fused against unfused", f.grads, u.grads, r.dw, 0, L.wn);
  }
}

TEST_CASE("fp16 conv+genstats timed: every call of the tuning matches, and the choice settles", "[gpu][fused]") {
  // First call, the plain forward's trials, its choice, then the fused choice's trials and its choice.
  const int calls = 4 + 2 * (process_knobs().conv_candidates + 1) * gpu::ConvTuner::kTrials;
  for (const Shape& s : {kShapes[0], kShapes[3]}) {
    INFO("conv " << describe(s));
    const Layer L = make_layer(s);
    const Reference r = cpu_reference(L);
    Side on(fp16_ops(FusedStats::Timed), L.params, std::vector<float>(L.params.size(), 0.f));
    run_layer(on, L, calls, false, [&](int k, const Out& o) {
      INFO("call " << k);
      check_outputs(L, r, o, "timed");
      check_stats(L, o.y, o, "timed statistics");
    });
    gpu::GpuOps& g = gpu_of(*on.ops);
    CHECK_FALSE(g.still_tuning());
    g.settle_conv_engines();
    bool reported = false;
    for (const std::string& line : g.conv_engine_report())
      if (line.find("fwd+stats") != std::string::npos) {
        WARN(line);
        reported = true;
      }
    CHECK(reported);
    // The fused candidates ran during the trials (their sums taken), whichever won.
    CHECK(g.fused_bn_forwards() >= gpu::ConvTuner::kTrials);
    WARN("fused batch-norm forwards: " << g.fused_bn_forwards() << " of " << calls << " calls; fused_half_faster "
                                       << g.fused_half_faster());
  }
}

TEST_CASE("fp16 conv+genstats: a write between the convolution and its batch norm makes the batch norm compute its "
          "own statistics",
          "[gpu][fused]") {
  const Layer L = make_layer(kShapes[0]);
  Side on(fp16_ops(FusedStats::Always), L.params, std::vector<float>(L.params.size(), 0.f));
  gpu::GpuOps& g = gpu_of(*on.ops);
  Act x = on.act(kN, L.d.h, L.d.w, L.d.cin, L.x);
  Act y = on.act(kN, L.d.ho, L.d.wo, L.d.cout), y2 = on.act(kN, L.d.ho, L.d.wo, L.d.cout);
  Act z = on.act(kN, L.d.ho, L.d.wo, L.d.cout), other = on.act(kN, L.d.ho, L.d.wo, L.d.cout);
  float* rm = on.floats(L.rm0);
  float* rv = on.floats(L.rv0);
  float* sm = on.floats(std::vector<float>(L.c));
  float* si = on.floats(std::vector<float>(L.c));
  // The batch norm of `a` (running statistics from their initial values), checked against a's statistics.
  auto bn = [&](Act& a, const char* what) {
    on.ops->upload(rm, L.rm0.data(), L.c * 4);
    on.ops->upload(rv, L.rv0.data(), L.c * 4);
    on.ops->bn_forward_train(L.b, a, L.gamma, L.beta, rm, rv, sm, si, nullptr, true, z);
    Out o;
    o.mean = on.get_f(sm, L.c);
    o.invstd = on.get_f(si, L.c);
    o.rm = on.get_f(rm, L.c);
    o.rv = on.get_f(rv, L.c);
    check_stats(L, on.get(a), o, what);
  };
  auto conv = [&](Act& out) { on.ops->conv_forward(L.d, x, L.w, out); };
  const auto replaced = rounded(randn(y.numel(), 99, 3.f, -2.f), DType::F16);

  // Learning the pairing: the first call of a convolution runs it plain.
  conv(y);
  bn(y, "first call");
  CHECK(g.fused_bn_forwards() == 0);
  conv(y);
  bn(y, "fused");
  warn_fused_plans(g);
  REQUIRE(g.fused_bn_forwards() == 1);

  SECTION("y replaced between them") {
    conv(y);
    on.put(y, replaced);
    bn(y, "y replaced");
    CHECK(g.fused_bn_forwards() == 1);
  }
  SECTION("a part of y written between them") {
    conv(y);
    on.ops->zero(static_cast<char*>(y.data) + y.bytes() / 2, 4096);
    bn(y, "part of y zeroed");
    CHECK(g.fused_bn_forwards() == 1);
  }
  SECTION("a write elsewhere changes nothing") {
    conv(y);
    on.ops->zero(other.data, other.bytes());
    bn(y, "another tensor written");
    CHECK(g.fused_bn_forwards() == 2);
  }
  SECTION("another output of the same shape has a slot of its own: both batch norms take their sums") {
    conv(y2);
    bn(y2, "y2's first call");
    conv(y);
    conv(y2);  // as a projection block's two 1x1 convolutions of one shape before its join
    bn(y, "y after y2's convolution");
    CHECK(g.fused_bn_forwards() == 2);
    bn(y2, "y2");
    CHECK(g.fused_bn_forwards() == 3);
  }
  SECTION("two batch norms of one output: the second computes its own") {
    conv(y);
    bn(y, "first");
    bn(y, "second");
    CHECK(g.fused_bn_forwards() == 2);
  }
}

TEST_CASE("fp16 conv+genstats inside a captured CUDA graph: every replay as the uncaptured call", "[gpu][fused]") {
  const Layer L = make_layer(kShapes[1]);
  const Reference r = cpu_reference(L);
  Side on(fp16_ops(FusedStats::Always), L.params, std::vector<float>(L.params.size(), 0.f));
  gpu::GpuOps& g = gpu_of(*on.ops);
  Act x = on.act(kN, L.d.h, L.d.w, L.d.cin, L.x);
  Act y = on.act(kN, L.d.ho, L.d.wo, L.d.cout), z = on.act(kN, L.d.ho, L.d.wo, L.d.cout);
  Act dz = on.act(kN, L.d.ho, L.d.wo, L.d.cout, L.dz), dyc = on.act(kN, L.d.ho, L.d.wo, L.d.cout);
  Act dx = on.act(kN, L.d.h, L.d.w, L.d.cin);
  float* rm = on.floats(L.rm0);
  float* rv = on.floats(L.rv0);
  float* sm = on.floats(std::vector<float>(L.c));
  float* si = on.floats(std::vector<float>(L.c));
  auto step = [&] {
    on.ops->zero(on.grads, on.count * 4);
    on.ops->conv_forward(L.d, x, L.w, y);
    on.ops->bn_forward_train(L.b, y, L.gamma, L.beta, rm, rv, sm, si, nullptr, true, z);
    on.ops->bn_backward(L.b, y, z, dz, L.gamma, sm, si, true, dyc, nullptr, L.gamma, L.beta);
    on.ops->conv_backward(L.d, x, L.w, dyc, &dx, false, L.w);
  };
  auto outputs = [&] {
    Out o;
    o.y = on.get(y);
    o.z = on.get(z);
    o.mean = on.get_f(sm, L.c);
    o.invstd = on.get_f(si, L.c);
    o.dyc = on.get(dyc);
    o.dx = on.get(dx);
    o.grads = on.get_grads();
    return o;
  };
  step();
  step();
  warn_fused_plans(g);
  REQUIRE(g.fused_bn_forwards() == 1);
  const Out uncaptured = outputs();
  on.ops->capture_step(step);  // runs it once
  CHECK(g.fused_bn_forwards() == 2);  // the captured batch norm takes the sums
  for (int k = 0; k < 3; ++k) {
    INFO("replay " << k);
    if (k > 0) on.ops->replay_step({});
    const Out o = outputs();
    check_outputs(L, r, o, "replayed");
    // Each replay's statistics from the sums its own convolution wrote into a zeroed slot (sums added to
    // the last replay's would be twice the statistics).
    check_stats(L, o.y, o, "replayed statistics", /*running=*/false);
    CHECK_WITHIN("z, replayed against uncaptured", o.z, uncaptured.z, r.z, 0, SIZE_MAX);
  }
}

TEST_CASE("fp16 conv+genstats under the per-operation profile: the fused operations are labelled", "[gpu][fused]") {
  const Layer L = make_layer(kShapes[0]);
  Side on(fp16_ops(FusedStats::Always), L.params, std::vector<float>(L.params.size(), 0.f));
  gpu::GpuOps& g = gpu_of(*on.ops);
  // The third call: the second is fused already, and its choice settled (the profile labels a settled
  // choice, as after the warm-up).
  run_layer(on, L, 3, false, [&](int k, const Out&) {
    if (k == 1) g.profile_start();
  });
  const auto rows = g.profile_stop();
  bool conv = false, bn = false;
  for (const auto& r : rows) {
    INFO(r.category << " | " << r.label);
    conv |= r.category == std::string("conv fwd+stats") && r.label == "1x1/1 64->256 56x56";
    bn |= r.category == std::string("bn fwd") && r.label.find("from conv stats") != std::string::npos;
    CHECK(r.category != std::string("conv fwd"));  // the one forward is the fused one
  }
  CHECK(conv);
  CHECK(bn);
}

namespace {

// A small ResNet (gputest::small_resnet) trained `steps` forward + backward passes without an optimizer (the
// weights stay, the running statistics move): the fused path runs from the second. `scale`: every weight
// multiplied by it after the initialisation.
ModelRun model_steps(Ops& ops, int depth, Recompute recompute, int steps, float scale = 1.0f) {
  Model m(small_resnet(depth, 8, recompute), ops);
  m.init(5);
  if (scale != 1.0f) {
    ModelState st = m.get_state();
    for (float& v : st.params) v *= scale;
    m.set_state(st);
  }
  for (int k = 0; k < steps; ++k) {
    learnable_batch(ops, m, 100 + 24 * k);
    ops.zero(m.grads(), m.num_params() * 4);
    m.forward_backward();
  }
  return downloaded(ops, m);
}

}  // namespace

// The whole model: the fused path must be no further from the CPU's fp32 than the unfused fp16 path is
// (what fp16 varies by; twice it, for another rounding pattern), in the loss, the gradients (L2) and the
// running statistics; or than three times what the CPU's own result moves by when its weights move by
// fp16's rounding (scaled by 1 + 2^-11), should the unfused path land close by chance.
TEST_CASE("a small ResNet-50 in fp16 with conv+genstats stays as close to the CPU backend as unfused fp16",
          "[gpu][fused]") {
  const int steps = 3;  // the second fused, the third with the batch norms in the convolutions' prologue
  auto cpu = make_cpu_ops(2);
  const ModelRun c = model_steps(*cpu, 50, Recompute::None, steps);
  const ModelRun w = model_steps(*cpu, 50, Recompute::None, steps, 1.0f + float(kU16));
  const double w_loss = std::fabs(w.loss - c.loss), w_g = l2_rel(w.grads, c.grads);
  const double w_s = rel_err(w.buffers, c.buffers).rel;
  auto off = fp16_ops(FusedStats::Off);
  const ModelRun u = model_steps(*off, 50, Recompute::None, steps);
  const double u_loss = std::fabs(u.loss - c.loss), u_g = l2_rel(u.grads, c.grads);
  const double u_s = rel_err(u.buffers, c.buffers).rel;
  WARN("unfused fp16 against the CPU: loss " << u.loss << " vs " << c.loss << ", gradients L2 " << u_g
                                             << ", running statistics " << u_s << "; the CPU's weights scaled by "
                                             << "1 + 2^-11 move them by " << w_loss << ", " << w_g << ", " << w_s);
  for (const Recompute rc : {Recompute::None, Recompute::Block}) {
    INFO((rc == Recompute::Block ? "--recompute block" : "no recomputation"));
    auto on = fp16_ops(FusedStats::Always);
    const ModelRun f = model_steps(*on, 50, rc, steps);
    const int64_t fused = gpu_of(*on).fused_bn_forwards(), prologue = gpu_of(*on).prologue_forwards();
    WARN("fused batch-norm forwards over " << steps << " steps: " << fused << ", " << prologue
                                           << " of them in a convolution's prologue (their outputs written by "
                                           << gpu_of(*on).prologue_backwards() << " backwards, "
                                           << gpu_of(*on).prologue_materialized() << " early reads); loss " << f.loss
                                           << ", gradients L2 " << l2_rel(f.grads, c.grads) << ", running statistics "
                                           << rel_err(f.buffers, c.buffers).rel);
    CHECK(fused > 0);
    CHECK(prologue > 0);
    // Without recomputation the backward writes the outputs the prologue left unwritten; with it, the
    // block's recomputed forward writes them before the backward needs them, which then writes none.
    if (rc == Recompute::None)
      CHECK(gpu_of(*on).prologue_backwards() > 0);
    else
      CHECK(gpu_of(*on).prologue_backwards() == 0);
    CHECK(std::fabs(f.loss - c.loss) <= std::max(2 * u_loss, 3 * w_loss));
    CHECK(l2_rel(f.grads, c.grads) <= std::max(2 * u_g, 3 * w_g));
    const Err s = rel_err(f.buffers, c.buffers);
    INFO("running statistics: " << s.where);
    CHECK(s.rel <= std::max(2 * u_s, 3 * w_s));
  }
}

TEST_CASE("a small ResNet-50 in fp16: the timed conv+genstats choice ends within the trainer's warm-up", "[gpu][fused]") {
  auto ops = fp16_ops(FusedStats::Timed);
  gpu::GpuOps& g = gpu_of(*ops);
  Model m(small_resnet(50, 8), *ops);
  m.init(5);
  int steps = 0;
  for (; steps < 60 && (steps < 2 || g.still_tuning()); ++steps) {  // the trainer's kMaxWarmupSteps
    learnable_batch(*ops, m, 100 + 24 * steps);
    ops->zero(m.grads(), m.num_params() * 4);
    m.forward_backward();
    CHECK(std::isfinite(m.last_loss()));  // (a host wait per step, as the trainer's loss read)
  }
  CHECK_FALSE(g.still_tuning());
  int fused_tuners = 0;
  for (const std::string& line : g.conv_engine_report())
    if (line.find("fwd+stats") != std::string::npos) {
      WARN(line);
      ++fused_tuners;
    }
  WARN("tuning ended after " << steps << " steps; fused_half_faster " << g.fused_half_faster());
  CHECK(fused_tuners > 0);
}

// The captured step goes without cuDNN's zeroing of its statistics outputs (GpuOptions::
// graph_drop_zeroing: the slots are zero before every conv+genstats call). Six steps (two uncaptured,
// the capturing one, three replays) against the same steps uncaptured: the gradients, loss and running
// statistics of the last. A slot left holding the last replay's sums would double the next one's
// statistics. Tolerance: twice what another kernel choice moves the result by: a second run of the
// reference itself (the engine tuning times each run anew, and may choose other engines), the graph
// that keeps the zeroings (its engines settled at the capture, where the uncaptured run may still
// explore others), and the unfused fp16 path (its own statistics pass); fp16's unit roundoff at least.
// (Without the second run, one pair of runs agreeing by chance made the tolerance too tight: the loss
// check failed once in a whole-suite run on an H100, 0.0075 against 0.0046.)
TEST_CASE("a small ResNet-50 in fp16: the captured step without cuDNN's redundant zeroings replays the uncaptured steps",
          "[gpu][fused][graph]") {
  auto run = [](FusedStats fused, int captured, bool drop, size_t* dropped) {
    gpu::GpuOptions o = gpu::gpu_options(process_knobs(), 0, DType::F16);
    o.fused_stats = fused;
    o.graph_drop_zeroing = drop;
    gpu::GpuOps ops(o);
    Model m(small_resnet(50, 8), ops);
    m.init(5);
    auto body = [&] {
      ops.zero(m.grads(), m.num_params() * 4);
      m.forward_backward();
    };
    for (int k = 0; k < 6; ++k) {
      learnable_batch(ops, m, 100 + 24 * k);
      if (captured < 0 || k < captured) body();
      else if (k == captured) ops.capture_step(body);
      else ops.replay_step({0.1f, 0});
    }
    if (dropped) *dropped = captured < 0 ? 0 : ops.captured().memsets_dropped;
    CHECK((ops.fused_bn_forwards() > 0) == (fused == FusedStats::Always));
    return downloaded(ops, m);
  };
  const ModelRun ref = run(FusedStats::Always, -1, false, nullptr);
  const ModelRun again = run(FusedStats::Always, -1, false, nullptr);
  const ModelRun unfused = run(FusedStats::Off, -1, false, nullptr);
  size_t kept_dropped = 1, dropped = 0;
  const ModelRun kept = run(FusedStats::Always, 2, false, &kept_dropped);
  const ModelRun without = run(FusedStats::Always, 2, true, &dropped);
  CHECK(kept_dropped == 0);
  WARN("zeroings left out of the captured step: " << dropped);
  CHECK(dropped > 0);
  auto tol = [](std::initializer_list<double> moved, double floor) { return std::max(2 * std::max(moved), floor); };
  const double g_tol =
      tol({l2_rel(again.grads, ref.grads), l2_rel(kept.grads, ref.grads), l2_rel(unfused.grads, ref.grads)}, kU16);
  const double s_tol = tol({rel_err(again.buffers, ref.buffers).rel, rel_err(kept.buffers, ref.buffers).rel,
                            rel_err(unfused.buffers, ref.buffers).rel},
                           kU16);
  auto loss_moved = [&](const ModelRun& r) { return std::fabs(double(r.loss) - ref.loss); };
  const double l_tol = tol({loss_moved(again), loss_moved(kept), loss_moved(unfused)}, kU16 * std::fabs(ref.loss));
  CHECK(l2_rel(without.grads, ref.grads) <= g_tol);
  const Err s = rel_err(without.buffers, ref.buffers);
  INFO("running statistics: " << s.where);
  CHECK(s.rel <= s_tol);
  INFO("loss moved by: a second run " << loss_moved(again) << ", the kept zeroings " << loss_moved(kept)
                                        << ", the unfused path " << loss_moved(unfused));
  CHECK(loss_moved(without) <= l_tol);
}

// fp16, a block's batch norm + ReLU applied as the next convolution reads its input
// (GpuOptions::conv_prologue: cuDNN's graph of scale, bias, ReLU, convolution and genstats), its output
// left unwritten by the forward: the first convolution writes x and its sums, the batch norm of x feeds
// a 3x3 convolution, the backward of both follows. What must hold:
//   - the batch norm's output, written by its backward's dx pass (and, read before then, by the forward's
//     apply on demand), is bit for bit the apply of the unfused forward: relu(x * scale + shift) from the
//     run's own saved statistics;
//   - the convolution's output is that of the input the prologue computes, x * scale + shift with the scale
//     and shift rounded to fp16 (the type cuDNN's pattern takes), then the ReLU, rounded to fp16: against
//     the CPU backend's convolution of that input, within twice what the unfused path's convolution is off
//     its own input's CPU result by (fp16's unit roundoff at least);
//   - the gradients (the batch norm's dx, dW of both layers' parameters) against the CPU's fp32 chain
//     within twice the unfused path's distance from it (fp16's unit roundoff at least).
TEST_CASE("fp16 batch norm + ReLU in the next convolution's prologue: its output written by the backward, the "
          "convolution of the fp16 scale and shift",
          "[gpu][fused]") {
  const Shape first{28, 64, 64, 1, 1};
  const Layer L = make_layer(first);  // its filter writes x; gamma and beta are the batch norm's
  const int c = int(L.c), c2 = 128, hw = L.d.ho;
  const ConvDesc d2{kN, hw, hw, c, c2, 3, 3, 1, 1, hw, hw};
  const BnDesc b2{kN, hw, hw, c2, 1e-5f, 0.1f};
  const size_t wn2 = size_t(c2) * 9 * c;
  std::vector<float> params = L.params;
  for (float v : rounded(randn(wn2, 77, 1.f / std::sqrt(9.f * c)), DType::F16)) params.push_back(v);
  for (float v : randn(2 * size_t(c2), 78, 0.2f, 0.5f)) params.push_back(v);  // the second batch norm's
  const ParamView w2{L.wn + 2 * L.c, wn2}, g2{L.wn + 2 * L.c + wn2, size_t(c2)},
      be2{L.wn + 2 * L.c + wn2 + size_t(c2), size_t(c2)};
  const auto dzv = rounded(randn(size_t(kN) * hw * hw * c2, 79), DType::F16);
  const size_t numel = size_t(kN) * hw * hw * c;

  struct Stats {
    std::vector<float> x, mean, invstd;  // the batch norm's input and saved statistics
  };
  struct R {
    Stats st, st_read;  // after the last backward; after the last forward
    std::vector<float> bn_y, bn_y_read, y, dx, grads;
    int64_t prologue = 0, backwards = 0, materialized = 0;
  };
  auto run = [&](Side& sd) {
    Act u = sd.act(kN, L.d.h, L.d.w, L.d.cin, L.x), x = sd.act(kN, hw, hw, c), bn_y = sd.act(kN, hw, hw, c);
    Act y = sd.act(kN, hw, hw, c2), z = sd.act(kN, hw, hw, c2), dz = sd.act(kN, hw, hw, c2, dzv);
    Act dbn = sd.act(kN, hw, hw, c), dx = sd.act(kN, hw, hw, c);
    float* st = sd.floats(std::vector<float>(4 * L.c + 4 * size_t(c2), 1.f));
    const Ops::BnSide bn{L.b, x, L.gamma, L.beta, st, st + c, st + 2 * c, st + 3 * c};
    float* s2 = st + 4 * c;
    const std::vector<float> zeros(sd.count, 0.f);
    R r;
    // Three steps: a convolution writes its sums once its output was seen feeding a training batch norm,
    // and the prologue's graph runs once the unfused forward's choice is settled (stats_pairing.h,
    // conv_planner.h).
    auto forward = [&] {
      sd.ops->conv_forward(L.d, u, L.w, x);
      sd.ops->bn_relu_conv_forward_train(bn, bn_y, d2, w2, y);
      sd.ops->bn_forward_train(b2, y, g2, be2, s2, s2 + c2, s2 + 2 * c2, s2 + 3 * c2, nullptr, true, z);
    };
    for (int k = 0; k < 3; ++k) {
      sd.ops->upload(sd.grads, zeros.data(), zeros.size() * 4);
      forward();
      sd.ops->conv_bn_relu_backward(d2, w2, dz, bn, bn_y, dbn, dx);
    }
    auto stats = [&] { return Stats{sd.get(x), sd.get_f(st + 2 * c, L.c), sd.get_f(st + 3 * c, L.c)}; };
    r.st = stats();
    r.bn_y = sd.get(bn_y);
    r.y = sd.get(y);
    r.dx = sd.get(dx);
    r.grads = sd.get_grads();
    forward();  // and read the batch norm's output before any backward
    r.bn_y_read = sd.get(bn_y);
    r.st_read = stats();
    if (auto* g = dynamic_cast<gpu::GpuOps*>(sd.ops.get())) {
      r.prologue = g->prologue_forwards();
      r.backwards = g->prologue_backwards();
      r.materialized = g->prologue_materialized();
    }
    return r;
  };
  auto gpu_run = [&](bool prologue) {
    gpu::GpuOptions o = gpu::gpu_options(process_knobs(), 0, DType::F16);
    o.fused_stats = FusedStats::Always;
    o.conv_prologue = prologue;
    Side sd(std::make_unique<gpu::GpuOps>(o), params, std::vector<float>(params.size(), 0.f));
    return run(sd);
  };
  const R on = gpu_run(true), off = gpu_run(false);
  Side cpu(make_cpu_ops(2), params, std::vector<float>(params.size(), 0.f));
  const R ref = run(cpu);
  WARN("batch norms applied in the prologue: " << on.prologue << " (off: " << off.prologue << ")");
  CHECK(on.prologue >= 2);  // the third step's and the last forward's
  CHECK(off.prologue == 0);
  // Each skipped output written once: by its backward's dx pass, or (the last forward's, read before any
  // backward) by the apply on demand.
  CHECK(on.backwards == on.prologue - 1);
  CHECK(on.materialized == 1);

  // The apply from a run's own statistics: unrounded scale and shift (the unfused forward's), or rounded
  // to fp16 (the prologue's).
  auto applied = [&](const Stats& r, bool half_scale) {
    std::vector<float> a(numel);
    for (size_t i = 0; i < numel; ++i) {
      const size_t ch = i % L.c;
      const float gamma = params[L.gamma.offset + ch], beta = params[L.beta.offset + ch];
      float sc = gamma * r.invstd[ch], sf = std::fma(-r.mean[ch], sc, beta);
      float v = std::fma(r.x[i], sc, sf);
      if (half_scale) {
        sc = round_to(DType::F16, sc);
        sf = round_to(DType::F16, sf);
        v = r.x[i] * sc + sf;
      }
      a[i] = round_to(DType::F16, v > 0.f ? v : 0.f);
    }
    return a;
  };
  for (const R* r : {&on, &off}) {
    const bool fused = r == &on;
    INFO((fused ? "prologue" : "unfused"));
    CHECK_SAME(r->bn_y, applied(r->st, false));
    CHECK_SAME(r->bn_y_read, applied(r->st_read, false));
  }
  // The convolution of each run's input on the CPU.
  auto cpu_conv = [&](const std::vector<float>& a) {
    Side s(make_cpu_ops(2), params, std::vector<float>(params.size(), 0.f));
    Act in = s.act(kN, hw, hw, c, a), out = s.act(kN, hw, hw, c2);
    s.ops->conv_forward(d2, in, w2, out);
    return s.get(out);
  };
  const double e_off = rel_err(off.y, cpu_conv(applied(off.st, false))).rel;
  const Err e_on = rel_err(on.y, cpu_conv(applied(on.st, true)));
  INFO("the convolution's output: " << e_on.where << "; the unfused path's " << e_off);
  CHECK(e_on.rel <= std::max(2 * e_off, kU16));
  size_t zeros = 0;
  for (float v : on.bn_y) zeros += v == 0.f;
  CHECK(zeros > numel / 20);  // the ReLU matters
  CHECK(zeros < numel - numel / 20);

  const double t_dx = std::max(2 * rel_err(off.dx, ref.dx).rel, kU16);
  CHECK_WITHIN("the batch norm's dx", on.dx, ref.dx, t_dx, 0, SIZE_MAX);
  for (const auto& [name, v] : {std::pair<const char*, ParamView>{"dW of the first convolution", L.w},
                                {"dgamma, dbeta", {L.gamma.offset, 2 * L.c}},
                                {"dW of the second convolution", w2}}) {
    const size_t b = v.offset, e = v.offset + v.count;
    CHECK_WITHIN(name, on.grads, ref.grads, std::max(2 * rel_err(off.grads, ref.grads, b, e).rel, kU16), b, e);
  }
}
