// Every layer of the GPU backend against the CPU backend on random inputs: fp32 (TF32 off)
// within 1e-5 and bf16 within 1e-2 of max|cpu|, forward and backward, including the
// accumulate-into-gradients contract. The bf16 runs start from bf16-representable inputs, so
// the error measured is the GPU's arithmetic, not the input rounding.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdlib>

#include "tests/worker/gpu/gpu_test_util.h"
#include "worker/core/knobs.h"
#include "worker/gpu/gpu_ops.h"
#include "worker/gpu/kernels.h"

using namespace gputest;

namespace {

double tol(DType t) { return t == DType::F32 ? 1e-5 : 1e-2; }

#define CHECK_CLOSE(what, ours, ref, t)      \
  do {                                       \
    const Err e_ = rel_err(ours, ref);       \
    INFO(what << ": " << e_.where);          \
    CHECK(e_.rel < (t));                     \
  } while (0)

struct Pair {
  Side cpu, gpu;
  Pair(DType t, const std::vector<float>& params, const std::vector<float>& grads)
      : cpu(make_cpu_ops(2), params, grads), gpu(make_gpu_ops(0, t), params, grads) {}
};

const DType kTypes[] = {DType::F32, DType::BF16};

}  // namespace

TEST_CASE("conv forward and backward match the CPU backend", "[gpu]") {
  struct Shape {
    int n, h, w, cin, cout, k, stride, pad;
  };
  const Shape shapes[] = {{2, 9, 9, 8, 16, 3, 1, 1},  {2, 10, 10, 16, 8, 3, 2, 1},
                          {2, 7, 7, 16, 32, 1, 1, 0}, {2, 8, 8, 16, 32, 1, 2, 0},
                          {2, 17, 17, 3, 16, 7, 2, 3}, {2, 224, 224, 3, 64, 7, 2, 3},
                          {2, 18, 18, 4, 8, 5, 2, 2},   {2, 9, 9, 3, 16, 3, 1, 1},
                          {2, 10, 10, 1, 8, 5, 1, 2}};  // the last five: the space-to-depth form
  for (DType t : kTypes) {
    for (const Shape& s : shapes) {
      ConvDesc d{s.n, s.h, s.w, s.cin, s.cout, s.k, s.k, s.stride, s.pad, 0, 0};
      d.ho = (s.h + 2 * s.pad - s.k) / s.stride + 1;
      d.wo = (s.w + 2 * s.pad - s.k) / s.stride + 1;
      const size_t wn = size_t(s.cout) * s.k * s.k * s.cin;
      const uint64_t seed = uint64_t(s.cin * 131 + s.k * 7 + s.stride);
      const auto params = rounded(randn(wn + 8, seed, 0.2f), t);
      const auto grads0 = randn(wn + 8, seed + 1, 0.5f);  // backward must ADD to these
      Pair p(t, params, grads0);
      const ParamView w{8, wn};  // 16-byte aligned in bf16, as every ResNet view
      const auto xv = rounded(randn(size_t(s.n) * s.h * s.w * s.cin, seed + 2), t);
      const auto dyv = rounded(randn(size_t(s.n) * d.ho * d.wo * s.cout, seed + 3), t);
      const auto dx0 = rounded(randn(xv.size(), seed + 4), t);
      INFO("dtype " << dtype_name(t) << ", conv " << s.cin << "->" << s.cout << " k" << s.k
                    << " s" << s.stride << " on " << s.h << "x" << s.w);
      std::vector<float> y[2], dx[2], dxa[2], g[2];
      Side* sides[2] = {&p.gpu, &p.cpu};
      for (int i = 0; i < 2; ++i) {
        Side& sd = *sides[i];
        sd.ops->register_conv(d, w);
        Act x = sd.act(s.n, s.h, s.w, s.cin, xv), ya = sd.act(s.n, d.ho, d.wo, s.cout);
        Act dy = sd.act(s.n, d.ho, d.wo, s.cout, dyv), dxt = sd.act(s.n, s.h, s.w, s.cin, dx0);
        sd.ops->conv_forward(d, x, w, ya);
        y[i] = sd.get(ya);
        sd.ops->conv_backward(d, x, w, dy, &dxt, true, w);  // accumulate into dx0
        dxa[i] = sd.get(dxt);
        sd.ops->conv_backward(d, x, w, dy, &dxt, false, w);  // overwrite; dw accumulated twice
        dx[i] = sd.get(dxt);
        g[i] = sd.get_grads();
      }
      CHECK_CLOSE("y", y[0], y[1], tol(t));
      CHECK_CLOSE("dx (accumulated)", dxa[0], dxa[1], tol(t));
      CHECK_CLOSE("dx", dx[0], dx[1], tol(t));
      CHECK_CLOSE("grads (dw added twice)", g[0], g[1], tol(t));
      CHECK(g[0][0] == grads0[0]);  // outside the view: untouched
    }
  }
}

TEST_CASE("batch norm train/eval forward and backward match the CPU backend", "[gpu]") {
  struct Shape {
    int n, h, w, c;
    bool residual, relu;
  };
  const Shape shapes[] = {{4, 6, 5, 16, false, true}, {3, 7, 7, 64, true, true},
                          {2, 3, 3, 24, false, false}, {8, 1, 1, 8, true, false},
                          {2, 5, 5, 12, true, true}};  // 12: not a multiple of 8 (scalar path)
  for (DType t : kTypes) {
    for (const Shape& s : shapes) {
      BnDesc d{s.n, s.h, s.w, s.c, 1e-5f, 0.1f};
      const size_t c = size_t(s.c), numel = size_t(s.n) * s.h * s.w * s.c;
      const uint64_t seed = uint64_t(s.c * 17 + s.h);
      auto params = randn(2 * c, seed, 0.5f, 1.0f);
      const auto grads0 = randn(2 * c, seed + 1);
      Pair p(t, params, grads0);
      const ParamView gamma{0, c}, beta{c, c};
      // A mean far from zero checks the variance's accuracy.
      const auto xv = rounded(randn(numel, seed + 2, 2.f, 3.f), t);
      const auto rv = rounded(randn(numel, seed + 3), t);
      const auto dyv = rounded(randn(numel, seed + 4), t);
      // Two of the residual shapes take their output gradient in two parts (Ops::bn_backward's dy2).
      const bool two_parts = s.residual && s.c != 8;
      const auto dy2v = rounded(randn(numel, seed + 7), t);
      const auto rm0 = randn(c, seed + 5), rvar0 = randn(c, seed + 6, 0.1f, 1.f);
      INFO("dtype " << dtype_name(t) << ", bn " << s.n << "x" << s.h << "x" << s.w << "x" << s.c
                    << (s.residual ? " +residual" : "") << (s.relu ? " relu" : "") << (two_parts ? ", dy in two parts" : ""));
      std::vector<float> y[2], st[2], dx[2], dr[2], g[2], ye[2];
      Side* sides[2] = {&p.gpu, &p.cpu};
      for (int i = 0; i < 2; ++i) {
        Side& sd = *sides[i];
        Act x = sd.act(s.n, s.h, s.w, s.c, xv), res = sd.act(s.n, s.h, s.w, s.c, rv);
        Act ya = sd.act(s.n, s.h, s.w, s.c), dy = sd.act(s.n, s.h, s.w, s.c, dyv);
        Act dy2 = sd.act(s.n, s.h, s.w, s.c, dy2v);
        Act dxa = sd.act(s.n, s.h, s.w, s.c), dra = sd.act(s.n, s.h, s.w, s.c);
        float* rm = sd.floats(rm0);
        float* rvv = sd.floats(rvar0);
        float* sm = sd.floats(std::vector<float>(c));
        float* si = sd.floats(std::vector<float>(c));
        sd.ops->bn_forward_train(d, x, gamma, beta, rm, rvv, sm, si, s.residual ? &res : nullptr,
                                 s.relu, ya);
        y[i] = sd.get(ya);
        st[i] = sd.get_f(rm, c);
        for (float v : sd.get_f(rvv, c)) st[i].push_back(v);
        for (float v : sd.get_f(sm, c)) st[i].push_back(v);
        for (float v : sd.get_f(si, c)) st[i].push_back(v);
        sd.ops->bn_backward(d, x, ya, dy, gamma, sm, si, s.relu, dxa, s.residual ? &dra : nullptr,
                            gamma, beta, two_parts ? &dy2 : nullptr);
        dx[i] = sd.get(dxa);
        if (s.residual) dr[i] = sd.get(dra);
        g[i] = sd.get_grads();
        sd.ops->bn_forward_eval(d, x, gamma, beta, rm, rvv, s.residual ? &res : nullptr, s.relu, ya);
        ye[i] = sd.get(ya);
      }
      CHECK_CLOSE("y", y[0], y[1], tol(t));
      // Statistics are fp32 from the same inputs in both precisions.
      CHECK_CLOSE("running/saved statistics", st[0], st[1], 1e-5);
      CHECK_CLOSE("dx", dx[0], dx[1], tol(t));
      if (s.residual) CHECK_CLOSE("dresidual", dr[0], dr[1], tol(t));
      CHECK_CLOSE("dgamma, dbeta (added)", g[0], g[1], t == DType::F32 ? 1e-5 : 1e-2);
      CHECK_CLOSE("eval y", ye[0], ye[1], tol(t));
    }
  }
}

TEST_CASE("max-pool, average pool, fc and softmax cross-entropy match the CPU backend", "[gpu]") {
  for (DType t : kTypes) {
    INFO("dtype " << dtype_name(t));
    const int n = 4, h = 11, w = 10, c = 16, classes = 37;
    PoolDesc pd{n, h, w, c, 3, 2, 1, 0, 0};
    pd.ho = (h + 2 - 3) / 2 + 1;
    pd.wo = (w + 2 - 3) / 2 + 1;
    const size_t wn = size_t(classes) * c;
    auto params = rounded(randn(wn + classes, 11, 0.3f), t);
    const auto grads0 = randn(wn + classes, 12);
    Pair p(t, params, grads0);
    const ParamView fw{0, wn}, fb{wn, size_t(classes)};
    // ReLU-like input with many exact zeros: ties inside pooling windows must resolve alike.
    auto xv = rounded(randn(size_t(n) * h * w * c, 13), t);
    for (float& v : xv) v = v < 0 ? 0.f : v;
    const auto dyv = rounded(randn(size_t(n) * pd.ho * pd.wo * c, 14), t);
    std::vector<int32_t> labels(n);
    for (int i = 0; i < n; ++i) labels[i] = (i * 7 + 3) % classes;

    std::vector<float> mp[2], mpb[2], ap[2], apb[2], lg[2], dl[2], loss[2], fdx[2], g[2], dls[2], losss[2];
    Side* sides[2] = {&p.gpu, &p.cpu};
    for (int i = 0; i < 2; ++i) {
      Side& sd = *sides[i];
      Act x = sd.act(n, h, w, c, xv), y = sd.act(n, pd.ho, pd.wo, c);
      Act dy = sd.act(n, pd.ho, pd.wo, c, dyv), dx = sd.act(n, h, w, c);
      sd.ops->maxpool_forward(pd, x, y);
      mp[i] = sd.get(y);
      sd.ops->maxpool_backward(pd, x, y, dy, dx);
      mpb[i] = sd.get(dx);
      Act pooled = sd.act(n, 1, 1, c), dp = sd.act(n, 1, 1, c, rounded(randn(size_t(n) * c, 15), t));
      sd.ops->avgpool_forward(y, pooled);
      ap[i] = sd.get(pooled);
      Act dyy = sd.act(n, pd.ho, pd.wo, c);
      sd.ops->avgpool_backward(dp, dyy);
      apb[i] = sd.get(dyy);
      // fc + loss on the pooled features
      Act feat = sd.act(n, 1, 1, c, rounded(randn(size_t(n) * c, 16), t));
      float* logits = sd.floats(std::vector<float>(size_t(n) * classes));
      float* dlog = sd.floats(std::vector<float>(size_t(n) * classes));
      float* l = sd.floats(std::vector<float>(1));
      auto* lab = static_cast<int32_t*>(sd.ops->alloc(size_t(n) * 4));
      sd.ops->upload(lab, labels.data(), size_t(n) * 4);
      sd.ops->fc_forward(feat, fw, fb, classes, logits);
      lg[i] = sd.get_f(logits, size_t(n) * classes);
      sd.ops->softmax_xent(n, classes, logits, lab, 2.f, 0.1f, l, dlog);  // label smoothing 0.1
      dls[i] = sd.get_f(dlog, size_t(n) * classes);
      losss[i] = sd.get_f(l, 1);
      sd.ops->softmax_xent(n, classes, logits, lab, 2.f, 0.f, l, dlog);
      dl[i] = sd.get_f(dlog, size_t(n) * classes);
      loss[i] = sd.get_f(l, 1);
      Act fdxa = sd.act(n, 1, 1, c);
      sd.ops->fc_backward(feat, fw, dlog, classes, fdxa, fw, fb);
      fdx[i] = sd.get(fdxa);
      g[i] = sd.get_grads();
    }
    CHECK_CLOSE("maxpool y", mp[0], mp[1], 1e-6);  // a selection: exact
    // Overlapping windows add gradients: exact in fp32, rounded once to bf16 on the GPU.
    CHECK_CLOSE("maxpool dx", mpb[0], mpb[1], t == DType::F32 ? 1e-6 : tol(t));
    CHECK_CLOSE("avgpool y", ap[0], ap[1], tol(t));
    CHECK_CLOSE("avgpool dx", apb[0], apb[1], tol(t));
    CHECK_CLOSE("fc logits", lg[0], lg[1], tol(t));
    CHECK_CLOSE("loss", loss[0], loss[1], tol(t));
    CHECK_CLOSE("dlogits", dl[0], dl[1], tol(t));
    CHECK_CLOSE("loss, label smoothing 0.1", losss[0], losss[1], tol(t));
    CHECK_CLOSE("dlogits, label smoothing 0.1", dls[0], dls[1], tol(t));
    CHECK_CLOSE("fc dx", fdx[0], fdx[1], tol(t));
    CHECK_CLOSE("fc dW, db (added)", g[0], g[1], tol(t));
  }
}

TEST_CASE("synthetic batches are bit-identical to the CPU backend's", "[gpu]") {
  const int n = 5, size = 12, classes = 10;
  const int64_t idx[n] = {0, 7, 123456789, 42, 999};
  for (DataKind kind : {DataKind::Random, DataKind::Learnable}) {
    Pair p(DType::F32, {0.f}, {0.f});
    std::vector<float> img[2];
    std::vector<int32_t> lab[2];
    Side* sides[2] = {&p.gpu, &p.cpu};
    for (int i = 0; i < 2; ++i) {
      Side& sd = *sides[i];
      Act a = sd.act(n, size, size, 3);
      auto* l = static_cast<int32_t*>(sd.ops->alloc(n * 4));
      sd.ops->make_batch(kind, 99, idx, n, size, classes, a, l);
      img[i] = sd.get(a);
      lab[i].resize(n);
      sd.ops->download(lab[i].data(), l, n * 4);
    }
    CHECK(img[0] == img[1]);
    CHECK(lab[0] == lab[1]);
  }
  // bf16 images are the fp32 generator's values rounded.
  Pair p(DType::BF16, {0.f}, {0.f});
  Side* sides[2] = {&p.gpu, &p.cpu};
  std::vector<float> img[2];
  for (int i = 0; i < 2; ++i) {
    Act a = sides[i]->act(n, size, size, 3);
    auto* l = static_cast<int32_t*>(sides[i]->ops->alloc(n * 4));
    sides[i]->ops->make_batch(DataKind::Learnable, 5, idx, n, size, classes, a, l);
    img[i] = sides[i]->get(a);
  }
  CHECK(img[0] == rounded(img[1], DType::BF16));
}

TEST_CASE("optimizers, gradient scaling and the finiteness check match the CPU backend", "[gpu]") {
  const size_t count = 100003;  // not a multiple of any vector width
  const auto params = randn(count, 21), grads = randn(count, 22, 0.1f);
  Pair p(DType::F32, params, grads);
  // Weight decay on two elements of three (--no-wd-on-bn-bias): a mask in backend memory.
  std::vector<uint8_t> mask_host(count);
  for (size_t j = 0; j < count; ++j) mask_host[j] = j % 3 != 0;
  std::vector<float> sgd[2], nesterov[2], adam[2], adam_masked[2];
  Side* sides[2] = {&p.gpu, &p.cpu};
  for (int i = 0; i < 2; ++i) {
    Side& sd = *sides[i];
    auto* mask = static_cast<uint8_t*>(sd.ops->alloc(count));
    sd.ops->upload(mask, mask_host.data(), count);
    float* mom = sd.floats(std::vector<float>(count));
    sd.ops->scale_grads(0.5f);
    sd.ops->sgd_step(0.1f, 0.9f, 1e-4f, mom, true, false, nullptr);
    sd.ops->sgd_step(0.1f, 0.9f, 1e-4f, mom, false, false, nullptr);
    sgd[i] = sd.get_params();
    sd.ops->sgd_step(0.1f, 0.875f, 3e-2f, mom, false, true, mask);
    sd.ops->sgd_step(0.1f, 0.875f, 3e-2f, mom, false, true, mask);
    nesterov[i] = sd.get_params();
    float* m = sd.floats(std::vector<float>(count));
    float* v = sd.floats(std::vector<float>(count));
    for (int64_t step = 1; step <= 3; ++step) sd.ops->adam_step(1e-3f, 0.9f, 0.999f, 1e-8f, 1e-4f, step, m, v, nullptr);
    adam[i] = sd.get_params();
    for (int64_t step = 4; step <= 5; ++step) sd.ops->adam_step(1e-3f, 0.9f, 0.999f, 1e-8f, 3e-2f, step, m, v, mask);
    adam_masked[i] = sd.get_params();
    CHECK(sd.ops->grads_finite());
    std::vector<float> bad = grads;
    bad[count - 1] = INFINITY;
    sd.ops->upload(sd.grads, bad.data(), count * 4);
    CHECK_FALSE(sd.ops->grads_finite());
    bad[count - 1] = NAN;
    sd.ops->upload(sd.grads, bad.data(), count * 4);
    CHECK_FALSE(sd.ops->grads_finite());
  }
  CHECK_CLOSE("params after 2 SGD steps", sgd[0], sgd[1], 1e-6);
  CHECK_CLOSE("params after 3 Adam steps", adam[0], adam[1], 1e-6);
  CHECK_CLOSE("params after 2 more Nesterov steps, masked weight decay", nesterov[0], nesterov[1], 1e-6);
  CHECK_CLOSE("params after 2 more Adam steps, masked weight decay", adam_masked[0], adam_masked[1], 1e-6);
}

TEST_CASE("the GPU backend reports misuse and impossible requests clearly", "[gpu]") {
  REQUIRE_THROWS_WITH(make_gpu_ops(4096, DType::BF16), Catch::Contains("GPU 4096 requested"));
  auto ops = make_gpu_ops(0, DType::BF16);
  REQUIRE_THROWS_WITH(ops->alloc(size_t(1) << 50), Catch::Contains("--batch-size"));
  ops->alloc(1024);  // still usable afterwards
  CHECK(ops->peak_bytes() >= 1024);
}

TEST_CASE("max-pool on the ResNet stem's shape matches the CPU backend, ties included", "[gpu]") {
  struct Shape {
    int h, w;
  };
  // The stem's 112x112, and odd sizes whose last input row and column lie in one window only.
  const Shape shapes[] = {{112, 112}, {15, 13}};
  for (DType t : kTypes) {
    for (const Shape& sh : shapes) {
      INFO("dtype " << dtype_name(t) << ", " << sh.h << "x" << sh.w);
      const int n = 2, h = sh.h, w = sh.w, c = 64;
      PoolDesc pd{n, h, w, c, 3, 2, 1, 0, 0};
      pd.ho = (h + 2 - 3) / 2 + 1;
      pd.wo = (w + 2 - 3) / 2 + 1;
      Pair p(t, {0.f}, {0.f});
      // The backward with a thread per input (GpuOptions::pool_tiled off) against the tiled default.
      worker::gpu::GpuOptions o = worker::gpu::gpu_options(worker::process_knobs(), 0, t);
      REQUIRE(o.pool_tiled);
      o.pool_tiled = false;
      Side per_input(std::make_unique<worker::gpu::GpuOps>(o), {0.f}, {0.f});
      // Coarse, ReLU'd values: most windows hold ties (zeros and repeated levels), so the first-
      // maximum rule decides where each gradient goes.
      auto xv = randn(size_t(n) * h * w * c, 31);
      for (float& v : xv) v = v < 0 ? 0.f : std::round(v * 2.f) / 2.f;
      const auto dyv = rounded(randn(size_t(n) * pd.ho * pd.wo * c, 32), t);
      std::vector<float> y[3], dx[3], dx_again;
      Side* sides[3] = {&p.gpu, &p.cpu, &per_input};
      for (int i = 0; i < 3; ++i) {
        Side& sd = *sides[i];
        Act x = sd.act(n, h, w, c, xv), ya = sd.act(n, pd.ho, pd.wo, c);
        Act dy = sd.act(n, pd.ho, pd.wo, c, dyv), dxa = sd.act(n, h, w, c);
        sd.ops->maxpool_forward(pd, x, ya);
        y[i] = sd.get(ya);
        sd.ops->maxpool_backward(pd, x, ya, dy, dxa);  // the GPU uses the forward's argmax
        dx[i] = sd.get(dxa);
        if (i == 0) {
          // y elsewhere: the backward cannot know its forward and finds the argmax again.
          Act y2 = sd.act(n, pd.ho, pd.wo, c, y[0]);
          sd.ops->maxpool_backward(pd, x, y2, dy, dxa);
          dx_again = sd.get(dxa);
        }
      }
      CHECK_CLOSE("maxpool y", y[0], y[1], 1e-6);
      CHECK_CLOSE("maxpool dx", dx[0], dx[1], t == DType::F32 ? 1e-6 : tol(t));
      CHECK(dx_again == dx[0]);
      CHECK(dx[2] == dx[0]);  // the same sums in the same order
    }
  }
}

// The backward recomputes the ReLU mask from x where the forward's y was relu(bn(x)) alone, and
// reads it from y otherwise: both must give bit-identical results on every batch-norm shape of
// ResNet-50 (the recomputed mask is exactly the forward's).
TEST_CASE("batch-norm backward: the ReLU mask from x, or after a residual add from the forward's bits, "
          "equals the mask from y on ResNet-50's shapes", "[gpu]") {
  struct Shape {
    int hw, c;
  };
  const Shape shapes[] = {{112, 64}, {56, 64},  {56, 256}, {56, 128}, {28, 128}, {28, 512},
                          {28, 256}, {14, 256}, {14, 1024}, {14, 512}, {7, 512},  {7, 2048}};
  for (DType t : {DType::F32, DType::BF16, DType::F16}) {
    for (bool residual : {false, true}) {
      for (const Shape& s : shapes) {
        const int n = 2;
        INFO("dtype " << dtype_name(t) << ", bn " << s.c << " " << s.hw << "x" << s.hw << (residual ? " +residual" : ""));
        BnDesc d{n, s.hw, s.hw, s.c, 1e-5f, 0.1f};
        const size_t c = size_t(s.c), numel = size_t(n) * s.hw * s.hw * s.c;
        const uint64_t seed = uint64_t(s.c * 7 + s.hw);
        const auto params = randn(2 * c, seed, 0.5f, 1.0f);
        const auto grads0 = randn(2 * c, seed + 1);
        Side gpu(make_gpu_ops(0, t), params, grads0);
        const ParamView gamma{0, c}, beta{c, c};
        const auto xv = rounded(randn(numel, seed + 2, 1.f, 0.2f), t);
        const auto dyv = rounded(randn(numel, seed + 3), t);
        const auto rv = rounded(randn(numel, seed + 4, 1.f, -1.f), t);  // mean -1: enough outputs clipped
        Act x = gpu.act(n, s.hw, s.hw, s.c, xv), y = gpu.act(n, s.hw, s.hw, s.c);
        Act dy = gpu.act(n, s.hw, s.hw, s.c, dyv), res = gpu.act(n, s.hw, s.hw, s.c, rv);
        Act dy2 = gpu.act(n, s.hw, s.hw, s.c, rounded(randn(numel, seed + 5), t));
        float* rm = gpu.floats(std::vector<float>(c));
        float* rvar = gpu.floats(std::vector<float>(c, 1.f));
        float* sm = gpu.floats(std::vector<float>(c));
        float* si = gpu.floats(std::vector<float>(c));
        gpu.ops->bn_forward_train(d, x, gamma, beta, rm, rvar, sm, si, residual ? &res : nullptr, true, y);
        const auto yv = gpu.get(y);
        // k = 0: y as the forward left it (the mask recomputed from x, or its bits); k = 1: y's
        // memory overwritten with positive values, which must not matter (y is not read then);
        // k = 2: a copy of y elsewhere, whose forward the backend does not know, so it reads the mask from y.
        Act y2 = gpu.act(n, s.hw, s.hw, s.c, yv);
        std::vector<float> dx[3], dr[3], g[3];
        for (int k = 0; k < 3; ++k) {
          if (k == 1) {
            std::vector<float> pos(yv.size());
            for (size_t i = 0; i < pos.size(); ++i) pos[i] = std::fabs(yv[i]) + 1.f;
            gpu.put(y, pos);
          }
          gpu.ops->upload(gpu.grads, grads0.data(), grads0.size() * 4);
          Act dxa = gpu.act(n, s.hw, s.hw, s.c), dra = gpu.act(n, s.hw, s.hw, s.c);
          gpu.ops->bn_backward(d, x, k == 2 ? y2 : y, dy, gamma, sm, si, true, dxa, residual ? &dra : nullptr, gamma,
                               beta, residual ? &dy2 : nullptr);
          dx[k] = gpu.get(dxa);
          if (residual) dr[k] = gpu.get(dra);
          g[k] = gpu.get_grads();
        }
        CHECK_SAME(dx[0], dx[2]);
        CHECK_SAME(dr[0], dr[2]);
        CHECK_SAME(g[0], g[2]);
        CHECK_SAME(dx[1], dx[0]);
        CHECK_SAME(dr[1], dr[0]);
        size_t zeros = 0;
        for (float v : yv) zeros += v == 0.f;
        CHECK(zeros > numel / 20);  // the mask matters: a good share of the outputs is clipped
      }
    }
  }
}

// A projection block's join (Ops::bn_forward_train_join, bn_backward_join) in one pass forward and two
// backward (GpuOptions::bn_join) against the two batch norms in turn, on ResNet-50's four join shapes:
// the same bits forward (output, saved and running statistics) and backward (both dx and the four
// parameter gradients, with and without a second output gradient). In fp16 also from the
// convolutions' sums (conv+genstats always on), with both convolutions of one shape as in ResNet-50's
// first block, whose sums must both reach the join (each run against its own statistics: see below).
TEST_CASE("a projection block's join in one pass equals its two batch norms in turn, on ResNet-50's shapes",
          "[gpu]") {
  struct Shape {
    int hw, c;
  };
  const Shape shapes[] = {{56, 256}, {28, 512}, {14, 1024}, {7, 2048}};
  struct Run {
    std::vector<float> y, stats, x, xd, dx[2], dxd[2], g[2];
    int64_t fused = 0;
  };
  // y from x, xd and the saved statistics as bn.cu computes it: each side's scale and shift, the
  // downsample's output rounded to the dtype, the add, the ReLU, the rounding.
  auto join_of = [](DType t, const Run& r, const std::vector<float>& params, size_t c) {
    std::vector<float> y(r.x.size());
    for (size_t i = 0; i < y.size(); ++i) {
      const size_t ch = i % c;
      auto affine = [&](size_t side, float v) {
        const float gamma = params[2 * side * c + ch], beta = params[(2 * side + 1) * c + ch];
        const float mean = r.stats[(4 * side + 2) * c + ch], invstd = r.stats[(4 * side + 3) * c + ch];
        const float sc = gamma * invstd;
        return std::fma(v, sc, std::fma(-mean, sc, beta));
      };
      const float v = affine(0, r.x[i]) + round_to(t, affine(1, r.xd[i]));
      y[i] = round_to(t, v > 0.f ? v : 0.f);
    }
    return y;
  };
  for (DType t : {DType::F32, DType::BF16, DType::F16}) {
    for (bool convs : {false, true}) {
      if (convs && t != DType::F16) continue;  // conv+genstats is fp16's
      for (const Shape& sh : shapes) {
        const int n = 2, cin = 64;
        INFO("dtype " << dtype_name(t) << ", join " << sh.c << " " << sh.hw << "x" << sh.hw
                      << (convs ? " from the convolutions' sums" : ""));
        const size_t c = size_t(sh.c), numel = size_t(n) * sh.hw * sh.hw * sh.c, wn = c * cin;
        const size_t in_numel = size_t(n) * sh.hw * sh.hw * cin;
        const uint64_t seed = uint64_t(sh.c + sh.hw) * 11;
        std::vector<float> params = randn(c, seed, 0.5f, 1.f);  // gamma, beta of the main branch, then the downsample's
        for (const auto& part : {randn(c, seed + 1, 0.5f, 0.f), randn(c, seed + 2, 0.5f, 1.f),
                                 randn(c, seed + 3, 0.5f, -1.f), rounded(randn(2 * wn, seed + 4, 0.125f), t)})
          params.insert(params.end(), part.begin(), part.end());  // (mean -1 in all: a good share clipped)
        const ParamView ga{0, c}, ba{c, c}, gb{2 * c, c}, bb{3 * c, c}, w3{4 * c, wn}, wd{4 * c + wn, wn};
        const auto grads0 = randn(params.size(), seed + 5);
        const auto xv = rounded(randn(numel, seed + 6, 1.f, 0.2f), t);
        const auto xdv = rounded(randn(numel, seed + 7, 2.f, -0.5f), t);
        const auto uv = rounded(randn(in_numel, seed + 8), t), udv = rounded(randn(in_numel, seed + 9), t);
        const auto dyv = rounded(randn(numel, seed + 10), t), dy2v = rounded(randn(numel, seed + 11), t);
        const ConvDesc cd{n, sh.hw, sh.hw, cin, sh.c, 1, 1, 1, 0, sh.hw, sh.hw};
        Run r[2];
        for (int k = 0; k < 2; ++k) {
          worker::gpu::GpuOptions o = worker::gpu::gpu_options(worker::process_knobs(), 0, t);
          o.bn_join = k == 0;
          o.relu_bits = true;
          if (convs) o.fused_stats = worker::FusedStats::Always;
          auto owned = std::make_unique<worker::gpu::GpuOps>(o);
          worker::gpu::GpuOps& gops = *owned;
          Side g(std::move(owned), params, grads0);
          const BnDesc d{n, sh.hw, sh.hw, sh.c, 1e-5f, 0.1f};
          Act x = g.act(n, sh.hw, sh.hw, sh.c, xv), xd = g.act(n, sh.hw, sh.hw, sh.c, xdv);
          Act u = g.act(n, sh.hw, sh.hw, cin, uv), ud = g.act(n, sh.hw, sh.hw, cin, udv);
          Act y = g.act(n, sh.hw, sh.hw, sh.c);
          float* st = g.floats(std::vector<float>(8 * c, 1.f));  // running mean, var, save mean, invstd; a's, b's
          Ops::BnSide a{d, x, ga, ba, st, st + c, st + 2 * c, st + 3 * c};
          Ops::BnSide b{d, xd, gb, bb, st + 4 * c, st + 5 * c, st + 6 * c, st + 7 * c};
          if (convs) gops.register_conv(cd, w3);
          // With the convolutions: twice, since a convolution writes the sums once its output was
          // seen feeding a training batch norm (stats_pairing.h).
          for (int it = 0; it < (convs ? 2 : 1); ++it) {
            if (convs) {
              g.ops->conv_forward(cd, ud, wd, xd);
              g.ops->conv_forward(cd, u, w3, x);
            }
            g.ops->bn_forward_train_join(a, b, y);
          }
          r[k].y = g.get(y);
          r[k].stats = g.get_f(st, 8 * c);
          r[k].x = g.get(x);
          r[k].xd = g.get(xd);
          r[k].fused = gops.fused_bn_forwards();
          Act dy = g.act(n, sh.hw, sh.hw, sh.c, dyv), dy2 = g.act(n, sh.hw, sh.hw, sh.c, dy2v);
          for (int j = 0; j < 2; ++j) {
            g.ops->upload(g.grads, grads0.data(), grads0.size() * 4);
            Act dxa = g.act(n, sh.hw, sh.hw, sh.c), dxda = g.act(n, sh.hw, sh.hw, sh.c);
            g.ops->bn_backward_join(a, b, y, dy, j == 0 ? &dy2 : nullptr, dxa, dxda);
            r[k].dx[j] = g.get(dxa);
            r[k].dxd[j] = g.get(dxda);
            r[k].g[j] = g.get_grads();
            g.put(y, r[k].y);  // (the two calls in turn keep the residual gradient over y)
          }
        }
        CHECK(r[0].fused == r[1].fused);
        if (convs) {
          // cuDNN's genstats sums in an order of its own, which can differ from run to run in the last
          // fp32 bits: each run's output against what its own saved statistics give.
          CHECK(r[0].fused >= 2);  // both batch norms of the last join took their convolution's sums
          for (const Run& q : r) CHECK_SAME(q.y, join_of(t, q, params, c));
        } else {
          CHECK_SAME(r[0].y, r[1].y);
          CHECK_SAME(r[0].stats, r[1].stats);
          for (int j = 0; j < 2; ++j) {
            INFO((j == 0 ? "with" : "without") << " a second output gradient");
            CHECK_SAME(r[0].dx[j], r[1].dx[j]);
            CHECK_SAME(r[0].dxd[j], r[1].dxd[j]);
            CHECK_SAME(r[0].g[j], r[1].g[j]);
          }
        }
        size_t zeros = 0;
        for (float v : r[0].y) zeros += v == 0.f;
        CHECK(zeros > numel / 20);  // the mask matters
        CHECK(zeros < numel - numel / 20);
      }
    }
  }
}

// The stem's batch norm + ReLU pooled as it is computed (GpuOptions::stem_pool: its output never
// stored) against the batch norm written and then pooled: the same pooled output (ties of the ReLU's
// zeros included), argmax, statistics, and backward through both from what the forward kept; the backward
// again with the max-pool's a thread per input (GpuOptions::pool_tiled off). And the
// backward refuses to pool-backward from the unstored output once the forward's argmax is gone.
TEST_CASE("the stem's batch norm pooled as computed equals it stored and then pooled", "[gpu]") {
  for (DType t : {DType::F32, DType::BF16, DType::F16}) {
    INFO("dtype " << dtype_name(t));
    const int n = 2, hw = 112, c = 64, ho = 56;
    const BnDesc d{n, hw, hw, c, 1e-5f, 0.1f};
    const PoolDesc pd{n, hw, hw, c, 3, 2, 1, ho, ho};
    const size_t numel = size_t(n) * hw * hw * c, out = size_t(n) * ho * ho * c;
    std::vector<float> params = randn(c, 61, 0.5f, 1.f);
    const auto beta = randn(c, 62, 0.5f, -1.f);  // a good share clipped: whole windows of zeros
    params.insert(params.end(), beta.begin(), beta.end());
    const auto grads0 = randn(2 * c, 63);
    const auto xv = rounded(randn(numel, 64, 1.f, 0.3f), t);
    const auto dyv = rounded(randn(out, 65), t);
    std::vector<float> y[3], st[3], dx[3], g[3];
    for (int k = 0; k < 3; ++k) {
      worker::gpu::GpuOptions o = worker::gpu::gpu_options(worker::process_knobs(), 0, t);
      o.stem_pool = k != 1;
      o.pool_tiled = k != 2;
      Side s(std::make_unique<worker::gpu::GpuOps>(o), params, grads0);
      Act x = s.act(n, hw, hw, c, xv), bn_y = s.act(n, hw, hw, c), ya = s.act(n, ho, ho, c);
      float* stats = s.floats(std::vector<float>(4 * size_t(c), 1.f));
      const ParamView gamma{0, size_t(c)}, bview{size_t(c), size_t(c)};
      const Ops::BnSide bn{d, x, gamma, bview, stats, stats + c, stats + 2 * c, stats + 3 * c};
      s.ops->bn_relu_maxpool_forward_train(bn, pd, bn_y, ya);
      y[k] = s.get(ya);
      st[k] = s.get_f(stats, 4 * size_t(c));
      Act dy = s.act(n, ho, ho, c, dyv), dbn = s.act(n, hw, hw, c), dxa = s.act(n, hw, hw, c);
      s.ops->maxpool_backward(pd, bn_y, ya, dy, dbn);
      s.ops->bn_backward(d, x, bn_y, dbn, gamma, stats + 2 * c, stats + 3 * c, true, dxa, nullptr, gamma, bview);
      dx[k] = s.get(dxa);
      g[k] = s.get_grads();
      if (k == 0) {  // another pool forward takes the argmax buffer: the unstored output cannot be pooled back
        Act other = s.act(n, ho, ho, c);
        s.ops->maxpool_forward(pd, x, other);
        CHECK_THROWS_WITH(s.ops->maxpool_backward(pd, bn_y, ya, dy, dbn),
                          Catch::Contains("did not store") && Catch::Contains("argmax is gone"));
      }
    }
    CHECK_SAME(y[0], y[1]);
    CHECK_SAME(st[0], st[1]);
    CHECK_SAME(dx[0], dx[1]);
    CHECK_SAME(g[0], g[1]);
    CHECK_SAME(dx[0], dx[2]);
    CHECK_SAME(g[0], g[2]);
    size_t zeros = 0;
    for (float v : y[1]) zeros += v == 0.f;
    CHECK(zeros > out / 50);  // windows of zeros only: ties, decided by the first position
  }
}

// The stems in their space-to-depth form against the plain convolution, both on the GPU, at the
// sizes they train with: forward and weight gradient agree to the dtype's rounding. ImageNet's 7x7/2
// at 224 px (2x2 blocks, 16 channels), CIFAR's 3x3/1 at 32 px (channels padded to 8, the padding
// written out), in fp32, bf16 and fp16.
TEST_CASE("the space-to-depth stem convolution equals the plain one", "[gpu]") {
  struct Stem {
    const char* name;
    int n, hw, cout, k, stride, pad;
  };
  for (const Stem& st : {Stem{"imagenet", 8, 224, 64, 7, 2, 3}, Stem{"cifar", 64, 32, 32, 3, 1, 1}}) {
    for (DType t : {DType::F32, DType::BF16, DType::F16}) {
      INFO("stem " << st.name << ", dtype " << dtype_name(t));
      const int n = st.n, hw = st.hw, cin = 3, cout = st.cout, k = st.k;
      const int ho = (hw + 2 * st.pad - k) / st.stride + 1;
      ConvDesc d{n, hw, hw, cin, cout, k, k, st.stride, st.pad, ho, ho};
      REQUIRE(worker::gpu::s2d_applies(d));
      const size_t wn = size_t(cout) * k * k * cin;
      const auto params = rounded(randn(wn, 41, 0.1f), t);
      const auto xv = rounded(randn(size_t(n) * hw * hw * cin, 42), t);
      const auto dyv = rounded(randn(size_t(n) * ho * ho * cout, 43), t);
      std::vector<float> y[2], g[2];
      for (int v = 0; v < 2; ++v) {
        worker::gpu::GpuOptions o = worker::gpu::gpu_options(worker::process_knobs(), 0, t);
        o.space_to_depth = v == 0;
        Side sd(std::make_unique<worker::gpu::GpuOps>(o), params, std::vector<float>(wn));
        const ParamView w{0, wn};
        sd.ops->register_conv(d, w);
        Act x = sd.act(n, hw, hw, cin, xv), ya = sd.act(n, ho, ho, cout);
        Act dy = sd.act(n, ho, ho, cout, dyv);
        sd.ops->conv_forward(d, x, w, ya);
        y[v] = sd.get(ya);
        sd.ops->conv_backward(d, x, w, dy, nullptr, false, w);
        g[v] = sd.get_grads();
      }
      CHECK_CLOSE("y", y[0], y[1], tol(t));
      CHECK_CLOSE("dw", g[0], g[1], tol(t));
    }
  }
}
