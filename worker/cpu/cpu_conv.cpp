// Convolution on the CPU: NHWC input, OHWI weights. The column matrix of a chunk of images is
// (rows = images * ho * wo, K = kh * kw * cin), whose K order matches OHWI, so
//   forward:  Y (rows, cout)  = Col * W^T
//   backward: dW (cout, K)   += dY^T * Col,   dCol = dY * W, then col2im scatters dCol into dx.
// A 1x1 stride-1 unpadded conv is a GEMM on the input itself (no im2col).
#include <Eigen/Core>
#include <algorithm>
#include <cstring>

#include "worker/cpu/cpu_ops.h"

namespace worker {
namespace cpu {

namespace {

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapM = Eigen::Map<RowMat>;
using MapCM = Eigen::Map<const RowMat>;

bool is_pointwise(const ConvDesc& d) {
  return d.kh == 1 && d.kw == 1 && d.stride == 1 && d.pad == 0;
}

// Rows [0, imgs * ho * wo) of the column matrix for images [img0, img0 + imgs).
void im2col(const ConvDesc& d, const float* x, int img0, int imgs, float* col, int threads) {
  const size_t K = size_t(d.kh) * d.kw * d.cin;
  const int rows = imgs * d.ho;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int r = 0; r < rows; ++r) {
    const int i = img0 + r / d.ho, oy = r % d.ho;
    for (int ox = 0; ox < d.wo; ++ox) {
      float* dst = col + (size_t(r) * d.wo + ox) * K;
      for (int ky = 0; ky < d.kh; ++ky) {
        const int iy = oy * d.stride - d.pad + ky;
        for (int kx = 0; kx < d.kw; ++kx) {
          const int ix = ox * d.stride - d.pad + kx;
          float* o = dst + (size_t(ky) * d.kw + kx) * d.cin;
          if (iy < 0 || iy >= d.h || ix < 0 || ix >= d.w) {
            std::memset(o, 0, size_t(d.cin) * sizeof(float));
          } else {
            std::memcpy(o, x + ((size_t(i) * d.h + iy) * d.w + ix) * d.cin, size_t(d.cin) * sizeof(float));
          }
        }
      }
    }
  }
}

// dx[img] += scatter of the column gradient; images are independent, so one per thread.
void col2im_add(const ConvDesc& d, const float* col, int img0, int imgs, float* dx, int threads) {
  const size_t K = size_t(d.kh) * d.kw * d.cin;
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int li = 0; li < imgs; ++li) {
    float* base = dx + size_t(img0 + li) * d.h * d.w * d.cin;
    for (int oy = 0; oy < d.ho; ++oy)
      for (int ox = 0; ox < d.wo; ++ox) {
        const float* src = col + ((size_t(li) * d.ho + oy) * d.wo + ox) * K;
        for (int ky = 0; ky < d.kh; ++ky) {
          const int iy = oy * d.stride - d.pad + ky;
          if (iy < 0 || iy >= d.h) continue;
          for (int kx = 0; kx < d.kw; ++kx) {
            const int ix = ox * d.stride - d.pad + kx;
            if (ix < 0 || ix >= d.w) continue;
            float* o = base + (size_t(iy) * d.w + ix) * d.cin;
            const float* s = src + (size_t(ky) * d.kw + kx) * d.cin;
            for (int c = 0; c < d.cin; ++c) o[c] += s[c];
          }
        }
      }
  }
}

}  // namespace

int CpuOps::conv_chunk(const ConvDesc& d) const {
  const size_t per_image = size_t(d.ho) * d.wo * d.kh * d.kw * d.cin;
  const size_t fit = std::max<size_t>(1, column_budget_ / std::max<size_t>(per_image, 1));
  return int(std::min<size_t>(size_t(d.n), fit));
}

void CpuOps::conv_forward(const ConvDesc& d, const Act& x, ParamView w, Act& y) {
  check_act(x, d.n, d.h, d.w, d.cin, "conv_forward x");
  check_act(y, d.n, d.ho, d.wo, d.cout, "conv_forward y");
  const int K = d.kh * d.kw * d.cin;
  MapCM W(params_ + w.offset, d.cout, K);
  const float* xp = static_cast<const float*>(x.data);
  float* yp = static_cast<float*>(y.data);
  if (is_pointwise(d)) {
    const long rows = long(d.n) * d.h * d.w;
    MapM(yp, rows, d.cout).noalias() = MapCM(xp, rows, K) * W.transpose();
    return;
  }
  const int chunk = conv_chunk(d);
  if (workspace_.size() < size_t(chunk) * d.ho * d.wo * K) workspace_.resize(size_t(chunk) * d.ho * d.wo * K);
  for (int i0 = 0; i0 < d.n; i0 += chunk) {
    const int imgs = std::min(chunk, d.n - i0);
    const long rows = long(imgs) * d.ho * d.wo;
    im2col(d, xp, i0, imgs, workspace_.data(), threads_);
    MapM(yp + size_t(i0) * d.ho * d.wo * d.cout, rows, d.cout).noalias() =
        MapCM(workspace_.data(), rows, K) * W.transpose();
  }
}

void CpuOps::conv_backward(const ConvDesc& d, const Act& x, ParamView w, const Act& dy, Act* dx,
                           bool accumulate_dx, ParamView dw) {
  check_act(x, d.n, d.h, d.w, d.cin, "conv_backward x");
  check_act(dy, d.n, d.ho, d.wo, d.cout, "conv_backward dy");
  if (dx) check_act(*dx, d.n, d.h, d.w, d.cin, "conv_backward dx");
  const int K = d.kh * d.kw * d.cin;
  MapCM W(params_ + w.offset, d.cout, K);
  MapM dW(grads_ + dw.offset, d.cout, K);
  const float* xp = static_cast<const float*>(x.data);
  const float* dyp = static_cast<const float*>(dy.data);
  float* dxp = dx ? static_cast<float*>(dx->data) : nullptr;
  if (is_pointwise(d)) {
    const long rows = long(d.n) * d.h * d.w;
    MapCM DY(dyp, rows, d.cout);
    dW.noalias() += DY.transpose() * MapCM(xp, rows, K);
    if (dxp) {
      MapM DX(dxp, rows, K);
      if (accumulate_dx) DX.noalias() += DY * W;
      else DX.noalias() = DY * W;
    }
    return;
  }
  if (dxp && !accumulate_dx) std::memset(dxp, 0, dx->bytes());
  const int chunk = conv_chunk(d);
  if (workspace_.size() < size_t(chunk) * d.ho * d.wo * K) workspace_.resize(size_t(chunk) * d.ho * d.wo * K);
  for (int i0 = 0; i0 < d.n; i0 += chunk) {
    const int imgs = std::min(chunk, d.n - i0);
    const long rows = long(imgs) * d.ho * d.wo;
    MapCM DY(dyp + size_t(i0) * d.ho * d.wo * d.cout, rows, d.cout);
    im2col(d, xp, i0, imgs, workspace_.data(), threads_);
    dW.noalias() += DY.transpose() * MapCM(workspace_.data(), rows, K);
    if (dxp) {
      // The column buffer is free again: reuse it for the column gradient.
      MapM(workspace_.data(), rows, K).noalias() = DY * W;
      col2im_add(d, workspace_.data(), i0, imgs, dxp, threads_);
    }
  }
}

}  // namespace cpu
}  // namespace worker
