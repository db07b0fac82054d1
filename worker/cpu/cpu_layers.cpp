// Pooling, the fully connected layer and softmax cross-entropy on the CPU.
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "worker/cpu/cpu_ops.h"

namespace worker {
namespace cpu {

namespace {
using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapM = Eigen::Map<RowMat>;
using MapCM = Eigen::Map<const RowMat>;
}  // namespace

// --- Max pooling: padding never wins; ties go to the first element of the window in (ky, kx)
// order, as PyTorch's CPU kernel does, and backward finds it again by equality with y.

void CpuOps::maxpool_forward(const PoolDesc& d, const Act& x, Act& y) {
  check_act(x, d.n, d.h, d.w, d.c, "maxpool_forward x");
  check_act(y, d.n, d.ho, d.wo, d.c, "maxpool_forward y");
  const float* xp = static_cast<const float*>(x.data);
  float* yp = static_cast<float*>(y.data);
  const int rows = d.n * d.ho;
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (int r = 0; r < rows; ++r) {
    const int i = r / d.ho, oy = r % d.ho;
    for (int ox = 0; ox < d.wo; ++ox) {
      float* o = yp + ((size_t(i) * d.ho + oy) * d.wo + ox) * d.c;
      std::fill(o, o + d.c, -std::numeric_limits<float>::infinity());
      for (int ky = 0; ky < d.k; ++ky) {
        const int iy = oy * d.stride - d.pad + ky;
        if (iy < 0 || iy >= d.h) continue;
        for (int kx = 0; kx < d.k; ++kx) {
          const int ix = ox * d.stride - d.pad + kx;
          if (ix < 0 || ix >= d.w) continue;
          const float* s = xp + ((size_t(i) * d.h + iy) * d.w + ix) * d.c;
          for (int c = 0; c < d.c; ++c) o[c] = s[c] > o[c] ? s[c] : o[c];
        }
      }
    }
  }
}

void CpuOps::maxpool_backward(const PoolDesc& d, const Act& x, const Act& y, const Act& dy,
                              Act& dx) {
  check_act(x, d.n, d.h, d.w, d.c, "maxpool_backward x");
  check_act(y, d.n, d.ho, d.wo, d.c, "maxpool_backward y");
  check_act(dy, d.n, d.ho, d.wo, d.c, "maxpool_backward dy");
  check_act(dx, d.n, d.h, d.w, d.c, "maxpool_backward dx");
  const float* xp = static_cast<const float*>(x.data);
  const float* yp = static_cast<const float*>(y.data);
  const float* dyp = static_cast<const float*>(dy.data);
  float* dxp = static_cast<float*>(dx.data);
  std::memset(dxp, 0, dx.bytes());
  // Windows overlap, so threads split by image.
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (int i = 0; i < d.n; ++i) {
    for (int oy = 0; oy < d.ho; ++oy)
      for (int ox = 0; ox < d.wo; ++ox) {
        const size_t o = ((size_t(i) * d.ho + oy) * d.wo + ox) * d.c;
        const int y0 = oy * d.stride - d.pad, x0 = ox * d.stride - d.pad;
        for (int c = 0; c < d.c; ++c) {
          bool found = false;
          for (int ky = 0; ky < d.k && !found; ++ky) {
            const int iy = y0 + ky;
            if (iy < 0 || iy >= d.h) continue;
            for (int kx = 0; kx < d.k; ++kx) {
              const int ix = x0 + kx;
              if (ix < 0 || ix >= d.w) continue;
              const size_t at = ((size_t(i) * d.h + iy) * d.w + ix) * d.c + c;
              if (xp[at] == yp[o + c]) {
                dxp[at] += dyp[o + c];
                found = true;
                break;
              }
            }
          }
        }
      }
  }
}

// --- Global average pooling

void CpuOps::avgpool_forward(const Act& x, Act& y) {
  check_act(y, x.n, 1, 1, x.c, "avgpool_forward y");
  const float* xp = static_cast<const float*>(x.data);
  float* yp = static_cast<float*>(y.data);
  const int hw = x.h * x.w, c = x.c;
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (int i = 0; i < x.n; ++i) {
    std::vector<double> s(size_t(c), 0.0);
    for (int p = 0; p < hw; ++p) {
      const float* row = xp + (size_t(i) * hw + p) * c;
      for (int k = 0; k < c; ++k) s[size_t(k)] += row[k];
    }
    for (int k = 0; k < c; ++k) yp[size_t(i) * c + k] = float(s[size_t(k)] / hw);
  }
}

void CpuOps::avgpool_backward(const Act& dy, Act& dx) {
  check_act(dy, dx.n, 1, 1, dx.c, "avgpool_backward dy");
  const float* dyp = static_cast<const float*>(dy.data);
  float* dxp = static_cast<float*>(dx.data);
  const int hw = dx.h * dx.w, c = dx.c;
  const float inv = 1.0f / float(hw);
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (int i = 0; i < dx.n; ++i)
    for (int p = 0; p < hw; ++p) {
      float* row = dxp + (size_t(i) * hw + p) * c;
      const float* g = dyp + size_t(i) * c;
      for (int k = 0; k < c; ++k) row[k] = g[k] * inv;
    }
}

// --- Fully connected

void CpuOps::fc_forward(const Act& x, ParamView w, ParamView b, int out, float* logits) {
  const int in = x.h * x.w * x.c;
  if (w.count != size_t(out) * in || b.count != size_t(out))
    throw std::logic_error("cpu backend: fc views do not match (out, in)");
  MapM L(logits, x.n, out);
  L.noalias() = MapCM(static_cast<const float*>(x.data), x.n, in) *
                MapCM(params_ + w.offset, out, in).transpose();
  L.rowwise() += Eigen::Map<const Eigen::RowVectorXf>(params_ + b.offset, out);
}

void CpuOps::fc_backward(const Act& x, ParamView w, const float* dlogits, int out, Act& dx,
                         ParamView dw, ParamView db) {
  const int in = x.h * x.w * x.c;
  check_act(dx, x.n, x.h, x.w, x.c, "fc_backward dx");
  MapCM DL(dlogits, x.n, out);
  MapM(grads_ + dw.offset, out, in).noalias() +=
      DL.transpose() * MapCM(static_cast<const float*>(x.data), x.n, in);
  Eigen::Map<Eigen::RowVectorXf>(grads_ + db.offset, out) += DL.colwise().sum();
  MapM(static_cast<float*>(dx.data), x.n, in).noalias() = DL * MapCM(params_ + w.offset, out, in);
}

// --- Softmax cross-entropy with label smoothing (log-sum-exp with the row maximum subtracted)

void CpuOps::softmax_xent(int n, int classes, const float* logits, const int32_t* labels,
                          float grad_scale, float label_smoothing, float* loss, float* dlogits) {
  for (int i = 0; i < n; ++i)
    if (labels[i] < 0 || labels[i] >= classes)
      throw std::out_of_range("cpu backend: label " + std::to_string(labels[i]) + " of sample " +
                              std::to_string(i) + " is outside [0, " + std::to_string(classes) + ")");
  const float scaled = grad_scale * host_loss_scale().multiplier();  // fp16 loss scaling (ops.h)
  double total = 0.0;
#pragma omp parallel for num_threads(threads_) schedule(static) reduction(+ : total)
  for (int i = 0; i < n; ++i) {
    const float* z = logits + size_t(i) * classes;
    float* g = dlogits + size_t(i) * classes;
    const float mx = *std::max_element(z, z + classes);
    double s = 0.0;
    for (int k = 0; k < classes; ++k) s += std::exp(double(z[k]) - mx);
    const double lse = mx + std::log(s);
    // Smoothed target t = (1 - e) * onehot + e / K: the loss is lse - sum_k t_k z_k.
    const double e = label_smoothing, uniform = e / classes;
    double zsum = 0.0;
    if (e != 0.0)
      for (int k = 0; k < classes; ++k) zsum += z[k];
    total += lse - (1.0 - e) * z[labels[i]] - uniform * zsum;
    const double scale = double(scaled) / n;
    for (int k = 0; k < classes; ++k) {
      const double p = std::exp(double(z[k]) - lse);
      g[k] = float(scale * (p - ((k == labels[i] ? 1.0 - e : 0.0) + uniform)));
    }
  }
  *loss = float(total / n);
}

}  // namespace cpu
}  // namespace worker
