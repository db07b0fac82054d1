// Per-layer gradient checks of the CPU backend against central finite differences, plus
// forward checks against direct formulas. Tolerances: errors are relative to the tensor's
// largest analytic gradient; linear layers are exact up to fp32 rounding (2e-3 leaves a wide
// margin over the ~1e-4 measured), nonlinear ones (BN with ReLU) add O(eps^2) terms (5e-3).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "grad_check.h"
#include "worker/cpu/cpu_ops.h"

using namespace worker;
using gradcheck::check;
using gradcheck::dot;
using gradcheck::randn;

namespace {

Act act(std::vector<float>& v, int n, int h, int w, int c) {
  REQUIRE(v.size() == size_t(n) * h * w * c);
  return Act{v.data(), DType::F32, n, h, w, c};
}

// A CPU backend whose flat parameter/gradient buffers are two test-owned vectors.
struct Fixture {
  cpu::CpuOps ops{2};
  std::vector<float> params, grads;
  explicit Fixture(size_t n) : params(n), grads(n) { ops.bind_params(params.data(), grads.data(), n); }
  std::vector<float> grad_of(ParamView v) const {
    return {grads.begin() + long(v.offset), grads.begin() + long(v.offset + v.count)};
  }
};

ConvDesc conv_desc(int n, int h, int w, int cin, int cout, int k, int stride, int pad) {
  ConvDesc d;
  d.n = n; d.h = h; d.w = w; d.cin = cin; d.cout = cout; d.kh = d.kw = k;
  d.stride = stride; d.pad = pad;
  d.ho = (h + 2 * pad - k) / stride + 1;
  d.wo = (w + 2 * pad - k) / stride + 1;
  return d;
}

}  // namespace

TEST_CASE("cpu conv: forward equals the direct sum; gradients match finite differences", "[cpu][conv]") {
  struct Case { int n, h, w, cin, cout, k, stride, pad; };
  // chunked: a column budget of one float forces one image per im2col chunk.
  for (const bool chunked : {false, true})
  for (const Case c : {Case{2, 7, 6, 3, 4, 3, 2, 1}, Case{2, 5, 5, 4, 3, 3, 1, 1}, Case{2, 4, 5, 6, 5, 1, 1, 0},
                       Case{3, 5, 6, 4, 6, 1, 2, 0}, Case{1, 9, 8, 3, 2, 7, 2, 3}, Case{3, 9, 8, 3, 2, 7, 2, 3}}) {
    const ConvDesc d = conv_desc(c.n, c.h, c.w, c.cin, c.cout, c.k, c.stride, c.pad);
    INFO("conv " << c.k << "x" << c.k << " stride " << c.stride << " pad " << c.pad << " cin " << c.cin
                 << " cout " << c.cout << " n " << c.n << (chunked ? ", one image per chunk" : ""));
    const size_t wn = size_t(d.cout) * d.kh * d.kw * d.cin;
    Fixture f(wn);
    if (chunked) f.ops.set_column_budget(1);
    f.params = randn(wn, 1, 0.5f);
    f.ops.bind_params(f.params.data(), f.grads.data(), wn);
    const ParamView wv{0, wn};
    f.ops.register_conv(d, wv);
    std::vector<float> x = randn(size_t(d.n) * d.h * d.w * d.cin, 2);
    std::vector<float> y(size_t(d.n) * d.ho * d.wo * d.cout);
    Act xa = act(x, d.n, d.h, d.w, d.cin), ya = act(y, d.n, d.ho, d.wo, d.cout);
    f.ops.conv_forward(d, xa, wv, ya);

    // Direct definition (NHWC input, OHWI weights).
    double worst = 0;
    for (int i = 0; i < d.n; ++i)
      for (int oy = 0; oy < d.ho; ++oy)
        for (int ox = 0; ox < d.wo; ++ox)
          for (int o = 0; o < d.cout; ++o) {
            double s = 0;
            for (int ky = 0; ky < d.kh; ++ky)
              for (int kx = 0; kx < d.kw; ++kx)
                for (int ci = 0; ci < d.cin; ++ci) {
                  const int iy = oy * d.stride - d.pad + ky, ix = ox * d.stride - d.pad + kx;
                  if (iy < 0 || iy >= d.h || ix < 0 || ix >= d.w) continue;
                  s += double(x[((size_t(i) * d.h + iy) * d.w + ix) * d.cin + ci]) *
                       f.params[((size_t(o) * d.kh + ky) * d.kw + kx) * d.cin + ci];
                }
            worst = std::max(worst, std::abs(s - y[((size_t(i) * d.ho + oy) * d.wo + ox) * d.cout + o]));
          }
    CHECK(worst < 1e-4);

    const std::vector<float> r = randn(y.size(), 3);
    auto loss = [&] {
      f.ops.conv_forward(d, xa, wv, ya);
      return dot(y.data(), r);
    };
    std::vector<float> dx(x.size(), 0.0f);
    Act dxa = act(dx, d.n, d.h, d.w, d.cin);
    std::vector<float> rr = r;
    Act dya = act(rr, d.n, d.ho, d.wo, d.cout);
    f.ops.conv_backward(d, xa, wv, dya, &dxa, false, wv);
    const std::vector<float> dw = f.grad_of(wv);
    check("conv dx", x, dx, loss, 1e-2f, 2e-3);
    check("conv dw", f.params, dw, loss, 1e-2f, 2e-3);

    // dw accumulates; dx accumulates only when asked; a null dx is allowed.
    std::vector<float> dx2(x.size(), 1.0f);
    Act dx2a = act(dx2, d.n, d.h, d.w, d.cin);
    f.ops.conv_backward(d, xa, wv, dya, &dx2a, true, wv);
    for (size_t i = 0; i < dw.size(); ++i) REQUIRE(f.grads[i] == Approx(2 * dw[i]).margin(1e-5));
    for (size_t i = 0; i < dx.size(); ++i) REQUIRE(dx2[i] == Approx(dx[i] + 1.0f).margin(1e-5));
    f.ops.conv_backward(d, xa, wv, dya, &dx2a, false, wv);
    for (size_t i = 0; i < dx.size(); ++i) REQUIRE(dx2[i] == Approx(dx[i]).margin(1e-5));
    f.ops.conv_backward(d, xa, wv, dya, nullptr, false, wv);
    for (size_t i = 0; i < dw.size(); ++i) REQUIRE(f.grads[i] == Approx(4 * dw[i]).margin(1e-5));
  }
}

TEST_CASE("cpu batch norm: train statistics, residual + ReLU, gradients", "[cpu][bn]") {
  BnDesc d;
  d.n = 2; d.h = 3; d.w = 3; d.c = 5;
  const size_t m = 18, c = 5;
  Fixture f(2 * c);
  const std::vector<float> g0 = randn(c, 4, 0.5f);
  for (size_t k = 0; k < c; ++k) {
    f.params[k] = 1.0f + g0[k];
    f.params[c + k] = 0.3f * g0[(k + 1) % c];
  }
  const ParamView gamma{0, c}, beta{c, c};
  std::vector<float> x = randn(m * c, 5, 2.0f), res = randn(m * c, 6), y(m * c);
  for (size_t i = 0; i < x.size(); ++i) x[i] += 1.0f;  // non-zero mean
  std::vector<float> rm(c, 0.5f), rv(c, 2.0f), sm(c), si(c);
  Act xa = act(x, 2, 3, 3, 5), ra = act(res, 2, 3, 3, 5), ya = act(y, 2, 3, 3, 5);

  SECTION("statistics and output") {
    f.ops.bn_forward_train(d, xa, gamma, beta, rm.data(), rv.data(), sm.data(), si.data(), &ra, true, ya);
    for (size_t k = 0; k < c; ++k) {
      double s = 0, s2 = 0;
      for (size_t r = 0; r < m; ++r) s += x[r * c + k];
      const double mean = s / m;
      for (size_t r = 0; r < m; ++r) s2 += (x[r * c + k] - mean) * (x[r * c + k] - mean);
      CHECK(sm[k] == Approx(mean).epsilon(1e-5));
      CHECK(si[k] == Approx(1.0 / std::sqrt(s2 / m + 1e-5)).epsilon(1e-5));
      CHECK(rm[k] == Approx(0.9 * 0.5 + 0.1 * mean).epsilon(1e-5));
      CHECK(rv[k] == Approx(0.9 * 2.0 + 0.1 * s2 / (m - 1)).epsilon(1e-5));  // unbiased
      for (size_t r = 0; r < m; ++r) {
        const double z = f.params[k] * (x[r * c + k] - mean) * si[k] + f.params[c + k] + res[r * c + k];
        REQUIRE(y[r * c + k] == Approx(std::max(z, 0.0)).margin(1e-5));
      }
    }
    // Eval mode uses the running statistics.
    f.ops.bn_forward_eval(d, xa, gamma, beta, rm.data(), rv.data(), nullptr, false, ya);
    for (size_t k = 0; k < c; ++k)
      CHECK(y[k] == Approx(f.params[k] * (x[k] - rm[k]) / std::sqrt(rv[k] + 1e-5) + f.params[c + k]).margin(1e-5));
  }

  for (const bool relu : {true, false}) {
    for (const bool with_res : {true, false}) {
      DYNAMIC_SECTION("gradients, relu " << relu << ", residual " << with_res) {
        const std::vector<float> r = randn(m * c, 7);
        auto loss = [&] {
          f.ops.bn_forward_train(d, xa, gamma, beta, rm.data(), rv.data(), sm.data(), si.data(),
                                 with_res ? &ra : nullptr, relu, ya);
          return dot(y.data(), r);
        };
        loss();
        std::vector<float> rr = r, dx(m * c), dres(m * c);
        Act dya = act(rr, 2, 3, 3, 5), dxa = act(dx, 2, 3, 3, 5), dra = act(dres, 2, 3, 3, 5);
        f.ops.bn_backward(d, xa, ya, dya, gamma, sm.data(), si.data(), relu, dxa, with_res ? &dra : nullptr,
                          gamma, beta);
        const std::vector<float> dg = f.grad_of(gamma), db = f.grad_of(beta);
        check("bn dx", x, dx, loss, 1e-3f, 5e-3);
        if (with_res) check("bn dresidual", res, dres, loss, 1e-3f, 5e-3);
        check("bn dgamma+dbeta", f.params, [&] {
          std::vector<float> g(dg);
          g.insert(g.end(), db.begin(), db.end());
          return g;
        }(), loss, 1e-3f, 5e-3);
      }
      if (!with_res) continue;
      DYNAMIC_SECTION("gradient in two parts equals their sum, relu " << relu) {
        // The model passes a block input's gradient as identity part + convolution part.
        f.ops.bn_forward_train(d, xa, gamma, beta, rm.data(), rv.data(), sm.data(), si.data(), &ra, relu, ya);
        std::vector<float> p1 = randn(m * c, 8), p2 = randn(m * c, 9), sum(m * c);
        for (size_t i = 0; i < sum.size(); ++i) sum[i] = p1[i] + p2[i];
        auto run = [&](std::vector<float>& dy, std::vector<float>* dy2) {
          std::fill(f.grads.begin(), f.grads.end(), 0.0f);
          std::vector<float> dx(m * c), dres(m * c);
          Act dya = act(dy, 2, 3, 3, 5), dxa = act(dx, 2, 3, 3, 5), dra = act(dres, 2, 3, 3, 5);
          Act d2a = dy2 ? act(*dy2, 2, 3, 3, 5) : Act{};
          f.ops.bn_backward(d, xa, ya, dya, gamma, sm.data(), si.data(), relu, dxa, &dra, gamma, beta,
                            dy2 ? &d2a : nullptr);
          dx.insert(dx.end(), dres.begin(), dres.end());
          dx.insert(dx.end(), f.grads.begin(), f.grads.end());
          return dx;
        };
        const std::vector<float> two = run(p1, &p2), one = run(sum, nullptr);
        REQUIRE(two.size() == one.size());
        CHECK(std::memcmp(two.data(), one.data(), two.size() * sizeof(float)) == 0);
      }
    }
  }
}

TEST_CASE("cpu max pool: forward, gradient, ties go to the first element", "[cpu][pool]") {
  PoolDesc d;
  d.n = 2; d.h = 7; d.w = 6; d.c = 3;
  d.ho = (7 + 2 - 3) / 2 + 1;
  d.wo = (6 + 2 - 3) / 2 + 1;
  Fixture f(1);
  // Distinct values 0.01 apart, so no perturbation reorders a window.
  std::vector<float> x(size_t(2 * 7 * 6 * 3));
  std::iota(x.begin(), x.end(), 0.0f);
  std::mt19937 g(8);
  std::shuffle(x.begin(), x.end(), g);
  for (float& v : x) v = v * 0.01f - 1.0f;
  std::vector<float> y(size_t(2 * d.ho * d.wo * 3));
  Act xa = act(x, 2, 7, 6, 3), ya = act(y, 2, d.ho, d.wo, 3);
  f.ops.maxpool_forward(d, xa, ya);
  // Output (0, 0, 0, c) covers input rows 0..1, cols 0..1 (padding excluded).
  for (int c = 0; c < 3; ++c) {
    float mx = -1e9f;
    for (int iy = 0; iy < 2; ++iy)
      for (int ix = 0; ix < 2; ++ix) mx = std::max(mx, x[(size_t(iy) * 6 + ix) * 3 + c]);
    CHECK(y[size_t(c)] == mx);
  }
  const std::vector<float> r = randn(y.size(), 9);
  auto loss = [&] {
    f.ops.maxpool_forward(d, xa, ya);
    return dot(y.data(), r);
  };
  std::vector<float> rr = r, dx(x.size());
  Act dya = act(rr, 2, d.ho, d.wo, 3), dxa = act(dx, 2, 7, 6, 3);
  f.ops.maxpool_backward(d, xa, ya, dya, dxa);
  check("maxpool dx", x, dx, loss, 1e-3f, 1e-4);

  // All-equal input (as after a ReLU that zeroed everything): every output's gradient goes to
  // the first in-bounds element of its window, as PyTorch does.
  std::fill(x.begin(), x.end(), 0.0f);
  f.ops.maxpool_forward(d, xa, ya);
  std::fill(rr.begin(), rr.end(), 1.0f);
  f.ops.maxpool_backward(d, xa, ya, dya, dxa);
  // Windows start at rows -1, 1, 3, 5 and cols -1, 1, 3: their first in-bounds elements are
  // rows 0, 1, 3, 5 and cols 0, 1, 3.
  for (int iy = 0; iy < 7; ++iy)
    for (int ix = 0; ix < 6; ++ix) {
      const bool first = (iy == 0 || iy % 2 == 1) && (ix == 0 || ix == 1 || ix == 3);
      REQUIRE(dx[(size_t(iy) * 6 + ix) * 3] == (first ? 1.0f : 0.0f));
    }
}

TEST_CASE("cpu global average pool and fully connected layer", "[cpu][fc]") {
  const int n = 3, h = 2, w = 3, c = 4, out = 5;
  Fixture f(size_t(out) * c + out);
  f.params = randn(f.params.size(), 10, 0.5f);
  f.ops.bind_params(f.params.data(), f.grads.data(), f.params.size());
  const ParamView wv{0, size_t(out) * c}, bv{size_t(out) * c, size_t(out)};
  std::vector<float> x = randn(size_t(n) * h * w * c, 11), pooled(size_t(n) * c), logits(size_t(n) * out);
  Act xa = act(x, n, h, w, c), pa = act(pooled, n, 1, 1, c);
  auto fwd = [&] {
    f.ops.avgpool_forward(xa, pa);
    f.ops.fc_forward(pa, wv, bv, out, logits.data());
  };
  fwd();
  for (int k = 0; k < c; ++k) {
    double s = 0;
    for (int p = 0; p < h * w; ++p) s += x[size_t(p) * c + k];
    CHECK(pooled[size_t(k)] == Approx(s / (h * w)).margin(1e-6));
  }
  double z = f.params[bv.offset + 1];
  for (int k = 0; k < c; ++k) z += double(pooled[size_t(c + k)]) * f.params[size_t(c + k)];
  CHECK(logits[size_t(out + 1)] == Approx(z).margin(1e-5));

  const std::vector<float> r = randn(logits.size(), 12);
  auto loss = [&] {
    fwd();
    return dot(logits.data(), r);
  };
  std::vector<float> dpool(pooled.size()), dx(x.size());
  Act dpa = act(dpool, n, 1, 1, c), dxa = act(dx, n, h, w, c);
  f.ops.fc_backward(pa, wv, r.data(), out, dpa, wv, bv);
  f.ops.avgpool_backward(dpa, dxa);
  check("fc dw+db", f.params, f.grads, loss, 1e-2f, 2e-3);
  check("avgpool+fc dx", x, dx, loss, 1e-2f, 2e-3);
}

TEST_CASE("cpu softmax cross-entropy: loss, gradient, stability, bad labels", "[cpu][xent]") {
  const int n = 4, classes = 6;
  Fixture f(1);
  std::vector<float> logits = randn(size_t(n) * classes, 13, 2.0f), dl(logits.size());
  std::vector<int32_t> labels{0, 5, 2, 2};
  float loss = 0;
  f.ops.softmax_xent(n, classes, logits.data(), labels.data(), 0.5f, 0.0f, &loss, dl.data());
  double want = 0;
  for (int i = 0; i < n; ++i) {
    double s = 0;
    for (int k = 0; k < classes; ++k) s += std::exp(double(logits[size_t(i * classes + k)]));
    want += std::log(s) - logits[size_t(i * classes + labels[size_t(i)])];
  }
  CHECK(loss == Approx(want / n).epsilon(1e-6));
  // dlogits = grad_scale * d(mean loss)/dlogits.
  std::vector<float> half(dl.size());
  for (size_t i = 0; i < dl.size(); ++i) half[i] = 2.0f * dl[i];
  auto lossf = [&] {
    float l = 0;
    std::vector<float> scratch(dl.size());
    f.ops.softmax_xent(n, classes, logits.data(), labels.data(), 1.0f, 0.0f, &l, scratch.data());
    return double(l);
  };
  check("xent dlogits", logits, half, lossf, 1e-2f, 5e-3);

  // Huge logits: no overflow.
  std::vector<float> big{1e4f, 0.0f, -1e4f, 1e4f, 1e4f, 0.0f};
  std::vector<int32_t> bl{2, 0};
  std::vector<float> bd(6);
  f.ops.softmax_xent(2, 3, big.data(), bl.data(), 1.0f, 0.0f, &loss, bd.data());
  CHECK(loss == Approx((2e4 + std::log(2.0)) / 2).epsilon(1e-6));
  for (float v : bd) CHECK(std::isfinite(v));

  labels[1] = 6;
  CHECK_THROWS_WITH(f.ops.softmax_xent(n, classes, logits.data(), labels.data(), 1.0f, 0.0f, &loss, dl.data()),
                    Catch::Contains("label 6 of sample 1"));
}

TEST_CASE("cpu softmax cross-entropy with label smoothing: torch's target, its gradient", "[cpu][xent]") {
  const int n = 3, classes = 5;
  const float e = 0.1f;
  Fixture f(1);
  std::vector<float> logits = randn(size_t(n) * classes, 17, 2.0f), dl(logits.size());
  std::vector<int32_t> labels{4, 0, 2};
  float loss = 0;
  f.ops.softmax_xent(n, classes, logits.data(), labels.data(), 1.0f, e, &loss, dl.data());
  // CrossEntropyLoss(label_smoothing=e) = (1 - e) * nll + e * mean_k(-log p_k).
  double want = 0;
  for (int i = 0; i < n; ++i) {
    const float* z = logits.data() + size_t(i) * classes;
    double s = 0;
    for (int k = 0; k < classes; ++k) s += std::exp(double(z[k]));
    double uniform = 0;
    for (int k = 0; k < classes; ++k) uniform += (std::log(s) - z[k]) / classes;
    want += (1 - e) * (std::log(s) - z[labels[size_t(i)]]) + e * uniform;
  }
  CHECK(loss == Approx(want / n).epsilon(1e-6));
  auto lossf = [&] {
    float l = 0;
    std::vector<float> scratch(dl.size());
    f.ops.softmax_xent(n, classes, logits.data(), labels.data(), 1.0f, e, &l, scratch.data());
    return double(l);
  };
  check("smoothed xent dlogits", logits, dl, lossf, 1e-2f, 5e-3);
  // Each row of the gradient sums to zero (softmax and the target both sum to one).
  for (int i = 0; i < n; ++i) {
    double row = 0;
    for (int k = 0; k < classes; ++k) row += dl[size_t(i * classes + k)];
    CHECK(std::abs(row) < 1e-7);
  }
}
