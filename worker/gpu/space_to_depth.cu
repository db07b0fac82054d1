// A convolution over 1-4 input channels (a stem) as an equivalent stride-1 convolution on a
// space-to-depth view of its input, on as many channels as the graph-API engines take. With B the
// convolution's stride (2: the ImageNet stem's 7x7; 1: the CIFAR stem's 3x3), every BxB block of
// input pixels becomes one pixel of B*B*C channels (padded to a multiple of 8), the kernel shrinks
// to ceil(k/B) x ceil(k/B), and the filter is rearranged to match (zeros where the k x k window has
// no tap); the convolution's zero padding is written out, so the rearranged one has none. cuDNN runs
// a 3-channel NHWC convolution poorly (the channels are padded on every call and the tensor cores
// see 3 of 8 lanes: the ImageNet stem took 3.05 ms of a 33 ms ResNet-50 step on an H200; the CIFAR
// stem's fp16 weight gradient 2.46 ms per step at batch 1024 on an H100, where the legacy API's
// heuristics chose a slow kernel), and only the legacy API takes it; the rearranged one is a dense
// GEMM on the graph-API engines, timed like the others. The products are the same ones, only summed
// in another order.
//   X'[n, p, q, (B b + b2) * C + c] = x[n, B p + b - pad, B q + b2 - pad, c]   (0 outside x)
//   W'[o, a, a2, (B b + b2) * C + c] = w[o, B a + b, B a2 + b2, c]             (0 where B a + b >= k)
#include <cstdint>

#include "worker/gpu/check.h"
#include "worker/gpu/dtype.cuh"
#include "worker/gpu/kernels.h"

namespace worker {
namespace gpu {
namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return unsigned(b < 132 * 32 ? (b > 0 ? b : 1) : 132 * 32);
}

#define GRID_STRIDE(i, n)                                                                  \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n);               \
       i += int64_t(gridDim.x) * blockDim.x)

// One thread per rearranged pixel: its 4 source pixels' channels, stored 8 at a time.
template <typename T>
__global__ void s2d_input_kernel(const T* __restrict__ x, T* __restrict__ xs, S2dDesc g) {
  const int64_t pixels = int64_t(g.n) * g.hs * g.ws;
  GRID_STRIDE(i, pixels) {
    const int q = int(i % g.ws);
    const int64_t r = i / g.ws;
    const int p = int(r % g.hs);
    const int n = int(r / g.hs);
    Vec<T, 8>* out = reinterpret_cast<Vec<T, 8>*>(xs + i * g.cs);
    for (int base = 0; base < g.cs; base += 8) {
      Vec<T, 8> v;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int ch = base + j;
        v.v[j] = from_f<T>(0.f);
        if (ch < g.b * g.b * g.c) {
          const int blk = ch / g.c, c = ch - blk * g.c;
          const int ih = g.b * p + blk / g.b - g.pad, iw = g.b * q + blk % g.b - g.pad;
          if (ih >= 0 && ih < g.h && iw >= 0 && iw < g.w)
            v.v[j] = x[((int64_t(n) * g.h + ih) * g.w + iw) * g.c + c];
        }
      }
      out[base / 8] = v;
    }
  }
}

template <typename T>
__global__ void s2d_weight_kernel(const T* __restrict__ w, T* __restrict__ wsd, S2dDesc g) {
  const int64_t total = int64_t(g.cout) * g.kp * g.kp * g.cs;
  GRID_STRIDE(i, total) {
    const int ch = int(i % g.cs);
    int64_t r = i / g.cs;
    const int a2 = int(r % g.kp);
    r /= g.kp;
    const int a = int(r % g.kp);
    const int o = int(r / g.kp);
    T v = from_f<T>(0.f);
    if (ch < g.b * g.b * g.c) {
      const int blk = ch / g.c, c = ch % g.c;
      const int kh = g.b * a + blk / g.b, kw = g.b * a2 + blk % g.b;
      if (kh < g.k && kw < g.k) v = w[((int64_t(o) * g.k + kh) * g.k + kw) * g.c + c];
    }
    wsd[i] = v;
  }
}

// dw[o, kh, kw, c] += dW'[o, kh/B, kw/B, (B (kh%B) + kw%B) * C + c]: every tap of the original
// filter is exactly one entry of the rearranged one.
template <typename T>
__global__ void s2d_wgrad_fold_kernel(const T* __restrict__ dwsd, float* __restrict__ dw,
                                      S2dDesc g) {
  const int64_t total = int64_t(g.cout) * g.k * g.k * g.c;
  GRID_STRIDE(i, total) {
    const int c = int(i % g.c);
    int64_t r = i / g.c;
    const int kw = int(r % g.k);
    r /= g.k;
    const int kh = int(r % g.k);
    const int o = int(r / g.k);
    const int ch = (g.b * (kh % g.b) + kw % g.b) * g.c + c;
    dw[i] += to_f(dwsd[((int64_t(o) * g.kp + kh / g.b) * g.kp + kw / g.b) * g.cs + ch]);
  }
}

}  // namespace

bool s2d_applies(const ConvDesc& d) {
  return (d.stride == 1 || d.stride == 2) && d.kh == d.kw && d.kh >= 3 && d.cin >= 1 && d.cin <= 4;
}

S2dDesc s2d_desc(const ConvDesc& d) {
  S2dDesc g;
  g.n = d.n;
  g.h = d.h;
  g.w = d.w;
  g.c = d.cin;
  g.cout = d.cout;
  g.k = d.kh;
  g.pad = d.pad;
  g.b = d.stride;
  g.kp = (d.kh + g.b - 1) / g.b;
  g.hs = d.ho + g.kp - 1;
  g.ws = d.wo + g.kp - 1;
  g.cs = (g.b * g.b * d.cin + 7) / 8 * 8;
  return g;
}

ConvDesc s2d_conv(const ConvDesc& d) {
  const S2dDesc g = s2d_desc(d);
  ConvDesc s;
  s.n = d.n;
  s.h = g.hs;
  s.w = g.ws;
  s.cin = g.cs;
  s.cout = d.cout;
  s.kh = s.kw = g.kp;
  s.stride = 1;
  s.pad = 0;
  s.ho = d.ho;
  s.wo = d.wo;
  return s;
}

void s2d_input(DType t, const void* x, void* xs, const S2dDesc& g, cudaStream_t s) {
  WK_DISPATCH(t, {
    s2d_input_kernel<T><<<blocks_for(int64_t(g.n) * g.hs * g.ws), kThreads, 0, s>>>(
        static_cast<const T*>(x), static_cast<T*>(xs), g);
    KERNEL_CHECK();
  });
}

void s2d_weight(DType t, const void* w, void* wsd, const S2dDesc& g, cudaStream_t s) {
  WK_DISPATCH(t, {
    s2d_weight_kernel<T><<<blocks_for(int64_t(g.cout) * g.kp * g.kp * g.cs), kThreads, 0, s>>>(
        static_cast<const T*>(w), static_cast<T*>(wsd), g);
    KERNEL_CHECK();
  });
}

void s2d_wgrad_fold(DType t, const void* dwsd, float* dw, const S2dDesc& g, cudaStream_t s) {
  WK_DISPATCH(t, {
    s2d_wgrad_fold_kernel<T><<<blocks_for(int64_t(g.cout) * g.k * g.k * g.c), kThreads, 0, s>>>(
        static_cast<const T*>(dwsd), dw, g);
    KERNEL_CHECK();
  });
}

}  // namespace gpu
}  // namespace worker
