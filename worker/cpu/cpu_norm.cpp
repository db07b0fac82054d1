// Batch norm on the CPU, fused with the residual add and ReLU. An NHWC tensor is an (m, c)
// matrix with m = n * h * w; statistics are per column, accumulated in double by each thread
// over a contiguous block of rows, then summed.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "worker/cpu/cpu_ops.h"

namespace worker {
namespace cpu {

namespace {

// Rows [begin, end) of thread t of nt for m rows.
inline void row_range(long m, int t, int nt, long& begin, long& end) {
  begin = m * t / nt;
  end = m * (t + 1) / nt;
}

}  // namespace

void CpuOps::bn_forward_train(const BnDesc& d, const Act& x, ParamView gamma, ParamView beta,
                              float* running_mean, float* running_var, float* save_mean,
                              float* save_invstd, const Act* residual, bool relu, Act& y) {
  check_act(x, d.n, d.h, d.w, d.c, "bn_forward_train x");
  check_act(y, d.n, d.h, d.w, d.c, "bn_forward_train y");
  if (residual) check_act(*residual, d.n, d.h, d.w, d.c, "bn_forward_train residual");
  const long m = long(d.n) * d.h * d.w;
  const int c = d.c, nt = threads_;
  const float* xp = static_cast<const float*>(x.data);
  std::vector<double>& part = partials(size_t(nt) * c * 2);
  std::vector<double> mean(size_t(c), 0.0), var(size_t(c), 0.0);

  // Two passes (mean, then squared deviations) for accuracy.
#pragma omp parallel num_threads(nt)
  {
    const int t = omp_get_thread_num();
    long b, e;
    row_range(m, t, omp_get_num_threads(), b, e);
    double* s = part.data() + size_t(t) * c;
    std::fill(s, s + c, 0.0);
    for (long r = b; r < e; ++r) {
      const float* row = xp + size_t(r) * c;
      for (int k = 0; k < c; ++k) s[k] += row[k];
    }
#pragma omp barrier
#pragma omp single
    {
      for (int tt = 0; tt < omp_get_num_threads(); ++tt)
        for (int k = 0; k < c; ++k) mean[size_t(k)] += part[size_t(tt) * c + k];
      for (int k = 0; k < c; ++k) mean[size_t(k)] /= double(m);
    }
    std::fill(s, s + c, 0.0);
    for (long r = b; r < e; ++r) {
      const float* row = xp + size_t(r) * c;
      for (int k = 0; k < c; ++k) {
        const double dv = double(row[k]) - mean[size_t(k)];
        s[k] += dv * dv;
      }
    }
#pragma omp barrier
#pragma omp single
    for (int tt = 0; tt < omp_get_num_threads(); ++tt)
      for (int k = 0; k < c; ++k) var[size_t(k)] += part[size_t(tt) * c + k];
  }

  std::vector<float> scale(static_cast<size_t>(c)), shift(static_cast<size_t>(c));
  const float* g = params_ + gamma.offset;
  const float* bt = params_ + beta.offset;
  for (int k = 0; k < c; ++k) {
    const double biased = var[size_t(k)] / double(m);
    const double unbiased = m > 1 ? var[size_t(k)] / double(m - 1) : biased;
    const double invstd = 1.0 / std::sqrt(biased + double(d.eps));
    save_mean[k] = float(mean[size_t(k)]);
    save_invstd[k] = float(invstd);
    running_mean[k] = (1.0f - d.momentum) * running_mean[k] + d.momentum * float(mean[size_t(k)]);
    running_var[k] = (1.0f - d.momentum) * running_var[k] + d.momentum * float(unbiased);
    scale[size_t(k)] = g[k] * float(invstd);
    shift[size_t(k)] = bt[k] - float(mean[size_t(k)]) * scale[size_t(k)];
  }

  float* yp = static_cast<float*>(y.data);
  const float* rp = residual ? static_cast<const float*>(residual->data) : nullptr;
  const float* sc = scale.data();
  const float* sh = shift.data();
#pragma omp parallel for num_threads(nt) schedule(static)
  for (long r = 0; r < m; ++r) {
    const float* xr = xp + size_t(r) * c;
    float* yr = yp + size_t(r) * c;
    if (rp) {
      const float* rr = rp + size_t(r) * c;
      for (int k = 0; k < c; ++k) yr[k] = xr[k] * sc[k] + sh[k] + rr[k];
    } else {
      for (int k = 0; k < c; ++k) yr[k] = xr[k] * sc[k] + sh[k];
    }
    if (relu)
      for (int k = 0; k < c; ++k) yr[k] = std::max(yr[k], 0.0f);
  }
}

void CpuOps::bn_forward_eval(const BnDesc& d, const Act& x, ParamView gamma, ParamView beta,
                             const float* running_mean, const float* running_var,
                             const Act* residual, bool relu, Act& y) {
  check_act(x, d.n, d.h, d.w, d.c, "bn_forward_eval x");
  check_act(y, d.n, d.h, d.w, d.c, "bn_forward_eval y");
  if (residual) check_act(*residual, d.n, d.h, d.w, d.c, "bn_forward_eval residual");
  const long m = long(d.n) * d.h * d.w;
  const int c = d.c;
  std::vector<float> scale(static_cast<size_t>(c)), shift(static_cast<size_t>(c));
  const float* g = params_ + gamma.offset;
  const float* bt = params_ + beta.offset;
  for (int k = 0; k < c; ++k) {
    scale[size_t(k)] = g[k] / std::sqrt(running_var[k] + d.eps);
    shift[size_t(k)] = bt[k] - running_mean[k] * scale[size_t(k)];
  }
  const float* xp = static_cast<const float*>(x.data);
  float* yp = static_cast<float*>(y.data);
  const float* rp = residual ? static_cast<const float*>(residual->data) : nullptr;
  const float* sc = scale.data();
  const float* sh = shift.data();
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (long r = 0; r < m; ++r) {
    const float* xr = xp + size_t(r) * c;
    float* yr = yp + size_t(r) * c;
    for (int k = 0; k < c; ++k) yr[k] = xr[k] * sc[k] + sh[k] + (rp ? rp[size_t(r) * c + k] : 0.0f);
    if (relu)
      for (int k = 0; k < c; ++k) yr[k] = std::max(yr[k], 0.0f);
  }
}

// With g = dy masked by y > 0 (when relu) and xhat = (x - mean) * invstd:
//   dbeta = sum g,  dgamma = sum g * xhat,
//   dx = gamma * invstd * (g - dbeta / m - xhat * dgamma / m),  dresidual = g.
void CpuOps::bn_backward(const BnDesc& d, const Act& x, const Act& y, const Act& dy,
                         ParamView gamma, const float* save_mean, const float* save_invstd,
                         bool relu, Act& dx, Act* dresidual, ParamView dgamma, ParamView dbeta,
                         const Act* dy2) {
  check_act(x, d.n, d.h, d.w, d.c, "bn_backward x");
  check_act(y, d.n, d.h, d.w, d.c, "bn_backward y");
  check_act(dy, d.n, d.h, d.w, d.c, "bn_backward dy");
  check_act(dx, d.n, d.h, d.w, d.c, "bn_backward dx");
  if (dresidual) check_act(*dresidual, d.n, d.h, d.w, d.c, "bn_backward dresidual");
  if (dy2) {
    check_act(*dy2, d.n, d.h, d.w, d.c, "bn_backward dy2");
    if (!dresidual) throw std::invalid_argument("bn_backward: a second output gradient needs dresidual");
  }
  const long m = long(d.n) * d.h * d.w;
  const int c = d.c, nt = threads_;
  const float* xp = static_cast<const float*>(x.data);
  const float* yp = static_cast<const float*>(y.data);
  const float* dyp = static_cast<const float*>(dy.data);
  const float* dy2p = dy2 ? static_cast<const float*>(dy2->data) : nullptr;
  std::vector<double>& part = partials(size_t(nt) * c * 2);
  std::vector<double> sdy(size_t(c), 0.0), sdyx(size_t(c), 0.0);

#pragma omp parallel num_threads(nt)
  {
    const int t = omp_get_thread_num();
    long b, e;
    row_range(m, t, omp_get_num_threads(), b, e);
    double* s1 = part.data() + size_t(t) * 2 * c;
    double* s2 = s1 + c;
    std::fill(s1, s1 + 2 * c, 0.0);
    for (long r = b; r < e; ++r) {
      const size_t o = size_t(r) * c;
      for (int k = 0; k < c; ++k) {
        const float dv = dy2p ? dyp[o + k] + dy2p[o + k] : dyp[o + k];
        const float gv = (relu && !(yp[o + k] > 0.0f)) ? 0.0f : dv;
        s1[k] += gv;
        s2[k] += double(gv) * (double(xp[o + k]) - save_mean[k]);
      }
    }
#pragma omp barrier
#pragma omp single
    for (int tt = 0; tt < omp_get_num_threads(); ++tt)
      for (int k = 0; k < c; ++k) {
        sdy[size_t(k)] += part[size_t(tt) * 2 * c + k];
        sdyx[size_t(k)] += part[size_t(tt) * 2 * c + c + k];
      }
  }

  std::vector<float> a(static_cast<size_t>(c)), bcoef(static_cast<size_t>(c)), cc(static_cast<size_t>(c));
  const float* gm = params_ + gamma.offset;
  float* dg = grads_ + dgamma.offset;
  float* db = grads_ + dbeta.offset;
  for (int k = 0; k < c; ++k) {
    const double invstd = save_invstd[k];
    const double sum_gx = sdyx[size_t(k)] * invstd;  // sum g * xhat
    dg[k] += float(sum_gx);
    db[k] += float(sdy[size_t(k)]);
    // dx = a * g + b * (x - mean) + cc.
    const double ak = double(gm[k]) * invstd;
    const double bk = -ak * invstd * sum_gx / double(m);
    a[size_t(k)] = float(ak);
    bcoef[size_t(k)] = float(bk);
    cc[size_t(k)] = float(-ak * sdy[size_t(k)] / double(m));
  }
  float* dxp = static_cast<float*>(dx.data);
  float* drp = dresidual ? static_cast<float*>(dresidual->data) : nullptr;
  const float *A = a.data(), *B = bcoef.data(), *C = cc.data(), *M = save_mean;
#pragma omp parallel for num_threads(nt) schedule(static)
  for (long r = 0; r < m; ++r) {
    const size_t o = size_t(r) * c;
    for (int k = 0; k < c; ++k) {
      const float dv = dy2p ? dyp[o + k] + dy2p[o + k] : dyp[o + k];
      const float gv = (relu && !(yp[o + k] > 0.0f)) ? 0.0f : dv;
      if (drp) drp[o + k] = gv;
      dxp[o + k] = A[k] * gv + B[k] * (xp[o + k] - M[k]) + C[k];
    }
  }
}

}  // namespace cpu
}  // namespace worker
