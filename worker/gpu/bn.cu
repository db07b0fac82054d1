// Batch norm over NHWC tensors viewed as (m = N*H*W rows, c channels), fp32 statistics.
// Each thread owns V consecutive channels (one 16-byte access per row) and walks rows, so a
// warp reads contiguous memory and the per-channel parameters stay in registers.
//   forward:  stats (partial sums per block) -> finalize (per channel) -> apply
//   backward: reduce (sum g, sum g*xhat; writes dresidual) -> finalize -> dx
// Sums are taken relative to the channel's first value (a shift), which keeps the one-pass
// variance accurate when |mean| >> std; partials are combined in double.
#include <algorithm>
#include <cstdint>

#include "worker/gpu/check.h"
#include "worker/gpu/dtype.cuh"
#include "worker/gpu/kernels.h"

namespace worker {
namespace gpu {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxStatBlocksY = 512;  // bounds the partials scratch: kMaxStatBlocksY * 2 * c floats
constexpr int kTargetBlocks = 2048;   // enough blocks in flight to fill 132 SMs several times

struct Grid {
  dim3 block, grid;
};

// Threads: x over channel groups (up to 32), y over rows.
Grid make_grid(int64_t m, int groups, int max_y) {
  const int cg = std::min(groups, 32);
  const int by = kThreads / cg;
  const int gx = (groups + cg - 1) / cg;
  int64_t gy = (m + by - 1) / by;
  gy = std::min<int64_t>(gy, std::max(1, kTargetBlocks / gx));
  gy = std::min<int64_t>(gy, max_y);
  return {dim3(cg, by), dim3(gx, unsigned(std::max<int64_t>(gy, 1)))};
}

// --- Forward

template <typename T, int V>
__global__ void stats_kernel(const T* __restrict__ x, int64_t m, int c, float* __restrict__ part) {
  extern __shared__ float sh[];
  const int groups = c / V;
  const int g = blockIdx.x * blockDim.x + threadIdx.x;
  float s[V], ss[V];
#pragma unroll
  for (int i = 0; i < V; ++i) s[i] = ss[i] = 0.f;
  if (g < groups) {
    float k[V];
    load_f<T, V>(x + size_t(g) * V, k);
    const int64_t step = int64_t(gridDim.y) * blockDim.y;
    for (int64_t r = int64_t(blockIdx.y) * blockDim.y + threadIdx.y; r < m; r += step) {
      float v[V];
      load_f<T, V>(x + r * c + size_t(g) * V, v);
#pragma unroll
      for (int i = 0; i < V; ++i) {
        const float d = v[i] - k[i];
        s[i] += d;
        ss[i] += d * d;
      }
    }
  }
  const int bx = blockDim.x * V;  // channels covered by the block
  float* sh_s = sh;
  float* sh_ss = sh + blockDim.y * bx;
#pragma unroll
  for (int i = 0; i < V; ++i) {
    sh_s[threadIdx.y * bx + threadIdx.x * V + i] = s[i];
    sh_ss[threadIdx.y * bx + threadIdx.x * V + i] = ss[i];
  }
  __syncthreads();
  const int tid = threadIdx.y * blockDim.x + threadIdx.x;
  for (int idx = tid; idx < bx; idx += blockDim.x * blockDim.y) {
    float a = 0.f, b = 0.f;
    for (int y = 0; y < int(blockDim.y); ++y) {
      a += sh_s[y * bx + idx];
      b += sh_ss[y * bx + idx];
    }
    const int ch = blockIdx.x * bx + idx;
    if (ch < c) {
      part[size_t(blockIdx.y) * 2 * c + ch] = a;
      part[size_t(blockIdx.y) * 2 * c + c + ch] = b;
    }
  }
}

template <typename T>
__global__ void finalize_train_kernel(const T* __restrict__ x, int64_t m, int c, int gy,
                                      const float* __restrict__ part, const float* gamma,
                                      const float* beta, float eps, float momentum,
                                      float* running_mean, float* running_var, float* save_mean,
                                      float* save_invstd, float* scale_shift) {
  const int ch = blockIdx.x * blockDim.x + threadIdx.x;
  if (ch >= c) return;
  double s = 0, ss = 0;
  for (int j = 0; j < gy; ++j) {
    s += part[size_t(j) * 2 * c + ch];
    ss += part[size_t(j) * 2 * c + c + ch];
  }
  const double mu = s / double(m);
  double var = ss / double(m) - mu * mu;
  if (var < 0) var = 0;
  const double mean = double(to_f(x[ch])) + mu;
  const float invstd = float(1.0 / sqrt(var + double(eps)));
  if (save_mean) save_mean[ch] = float(mean);
  if (save_invstd) save_invstd[ch] = invstd;
  if (running_mean) running_mean[ch] = (1.f - momentum) * running_mean[ch] + momentum * float(mean);
  if (running_var) {
    const double unbiased = m > 1 ? var * double(m) / double(m - 1) : var;
    running_var[ch] = (1.f - momentum) * running_var[ch] + momentum * float(unbiased);
  }
  const float scale = gamma[ch] * invstd;
  scale_shift[ch] = scale;
  scale_shift[c + ch] = beta[ch] - float(mean) * scale;
}

__global__ void finalize_eval_kernel(int c, const float* gamma, const float* beta, float eps,
                                     const float* running_mean, const float* running_var,
                                     float* scale_shift) {
  const int ch = blockIdx.x * blockDim.x + threadIdx.x;
  if (ch >= c) return;
  const float scale = gamma[ch] / sqrtf(running_var[ch] + eps);
  scale_shift[ch] = scale;
  scale_shift[c + ch] = beta[ch] - running_mean[ch] * scale;
}

template <typename T, int V>
__global__ void apply_kernel(const T* __restrict__ x, const T* __restrict__ res, T* __restrict__ y,
                             int64_t m, int c, const float* __restrict__ scale_shift, bool relu) {
  const int groups = c / V;
  const int g = blockIdx.x * blockDim.x + threadIdx.x;
  if (g >= groups) return;
  float sc[V], sf[V];
#pragma unroll
  for (int i = 0; i < V; ++i) {
    sc[i] = scale_shift[g * V + i];
    sf[i] = scale_shift[c + g * V + i];
  }
  const int64_t step = int64_t(gridDim.y) * blockDim.y;
  for (int64_t r = int64_t(blockIdx.y) * blockDim.y + threadIdx.y; r < m; r += step) {
    const size_t off = size_t(r) * c + size_t(g) * V;
    float v[V];
    load_f<T, V>(x + off, v);
#pragma unroll
    for (int i = 0; i < V; ++i) v[i] = v[i] * sc[i] + sf[i];
    if (res) {
      float q[V];
      load_f<T, V>(res + off, q);
#pragma unroll
      for (int i = 0; i < V; ++i) v[i] += q[i];
    }
    if (relu) {
#pragma unroll
      for (int i = 0; i < V; ++i) v[i] = v[i] > 0.f ? v[i] : 0.f;
    }
    store_f<T, V>(y + off, v);
  }
}

// --- Backward
// In place (the model relies on it, see Ops::bn_backward): dres may alias y and dx may alias x.
// Safe despite __restrict__: each element is read and then written by the same thread, once,
// and the written value depends on the value read, so no reordering can swap them; the
// forward's apply_kernel likewise lets y alias res.

template <typename T, int V>
__device__ __forceinline__ void masked_grad(const T* dy, const T* y, bool relu, size_t off,
                                            float (&gr)[V]) {
  load_f<T, V>(dy + off, gr);
  if (relu) {
    float yv[V];
    load_f<T, V>(y + off, yv);
#pragma unroll
    for (int i = 0; i < V; ++i) gr[i] = yv[i] > 0.f ? gr[i] : 0.f;
  }
}

template <typename T, int V>
__global__ void bwd_reduce_kernel(const T* __restrict__ x, const T* __restrict__ y,
                                  const T* __restrict__ dy, int64_t m, int c,
                                  const float* __restrict__ mean, const float* __restrict__ invstd,
                                  bool relu, T* __restrict__ dres, float* __restrict__ part) {
  extern __shared__ float sh[];
  const int groups = c / V;
  const int g = blockIdx.x * blockDim.x + threadIdx.x;
  float s[V], sx[V];
#pragma unroll
  for (int i = 0; i < V; ++i) s[i] = sx[i] = 0.f;
  if (g < groups) {
    float mu[V], is[V];
#pragma unroll
    for (int i = 0; i < V; ++i) {
      mu[i] = mean[g * V + i];
      is[i] = invstd[g * V + i];
    }
    const int64_t step = int64_t(gridDim.y) * blockDim.y;
    for (int64_t r = int64_t(blockIdx.y) * blockDim.y + threadIdx.y; r < m; r += step) {
      const size_t off = size_t(r) * c + size_t(g) * V;
      float gr[V], xv[V];
      masked_grad<T, V>(dy, y, relu, off, gr);
      if (dres) store_f<T, V>(dres + off, gr);
      load_f<T, V>(x + off, xv);
#pragma unroll
      for (int i = 0; i < V; ++i) {
        s[i] += gr[i];
        sx[i] += gr[i] * (xv[i] - mu[i]) * is[i];
      }
    }
  }
  const int bx = blockDim.x * V;
  float* sh_s = sh;
  float* sh_x = sh + blockDim.y * bx;
#pragma unroll
  for (int i = 0; i < V; ++i) {
    sh_s[threadIdx.y * bx + threadIdx.x * V + i] = s[i];
    sh_x[threadIdx.y * bx + threadIdx.x * V + i] = sx[i];
  }
  __syncthreads();
  const int tid = threadIdx.y * blockDim.x + threadIdx.x;
  for (int idx = tid; idx < bx; idx += blockDim.x * blockDim.y) {
    float a = 0.f, b = 0.f;
    for (int yy = 0; yy < int(blockDim.y); ++yy) {
      a += sh_s[yy * bx + idx];
      b += sh_x[yy * bx + idx];
    }
    const int ch = blockIdx.x * bx + idx;
    if (ch < c) {
      part[size_t(blockIdx.y) * 2 * c + ch] = a;
      part[size_t(blockIdx.y) * 2 * c + c + ch] = b;
    }
  }
}

// coef: A = gamma*invstd, B = -A*invstd*dgamma/m, C = -A*dbeta/m, mean; dx = A*g + B*(x-mean) + C.
__global__ void bwd_finalize_kernel(int64_t m, int c, int gy, const float* __restrict__ part,
                                    const float* gamma, const float* mean, const float* invstd,
                                    float* dgamma, float* dbeta, float* coef) {
  const int ch = blockIdx.x * blockDim.x + threadIdx.x;
  if (ch >= c) return;
  double s = 0, sx = 0;
  for (int j = 0; j < gy; ++j) {
    s += part[size_t(j) * 2 * c + ch];
    sx += part[size_t(j) * 2 * c + c + ch];
  }
  dgamma[ch] += float(sx);
  dbeta[ch] += float(s);
  const double a = double(gamma[ch]) * invstd[ch];
  coef[ch] = float(a);
  coef[c + ch] = float(-a * invstd[ch] * sx / double(m));
  coef[2 * c + ch] = float(-a * s / double(m));
  coef[3 * c + ch] = mean[ch];
}

template <typename T, int V>
__global__ void bwd_dx_kernel(const T* __restrict__ x, const T* __restrict__ y,
                              const T* __restrict__ dy, const T* __restrict__ dres, int64_t m,
                              int c, const float* __restrict__ coef, bool relu, T* dx) {
  const int groups = c / V;
  const int g = blockIdx.x * blockDim.x + threadIdx.x;
  if (g >= groups) return;
  float a[V], b[V], cc[V], mu[V];
#pragma unroll
  for (int i = 0; i < V; ++i) {
    a[i] = coef[g * V + i];
    b[i] = coef[c + g * V + i];
    cc[i] = coef[2 * c + g * V + i];
    mu[i] = coef[3 * c + g * V + i];
  }
  const int64_t step = int64_t(gridDim.y) * blockDim.y;
  for (int64_t r = int64_t(blockIdx.y) * blockDim.y + threadIdx.y; r < m; r += step) {
    const size_t off = size_t(r) * c + size_t(g) * V;
    float gr[V], xv[V];
    if (dres)
      load_f<T, V>(dres + off, gr);
    else
      masked_grad<T, V>(dy, y, relu, off, gr);
    load_f<T, V>(x + off, xv);
#pragma unroll
    for (int i = 0; i < V; ++i) gr[i] = a[i] * gr[i] + b[i] * (xv[i] - mu[i]) + cc[i];
    store_f<T, V>(dx + off, gr);
  }
}

// --- Launch helpers

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// V = 16 bytes worth of T when the channel count and every pointer allow it, else 1.
template <typename T>
int pick_vec(int c, std::initializer_list<const void*> ptrs) {
  constexpr int kV = 16 / sizeof(T);
  if (c % kV != 0) return 1;
  for (const void* p : ptrs)
    if (p && !aligned16(p)) return 1;
  return kV;
}

template <typename T, int V>
void forward_train_v(const T* x, int64_t m, int c, const float* gamma, const float* beta,
                     float eps, float momentum, float* rm, float* rv, float* sm, float* si,
                     const T* res, bool relu, T* y, float* part, float* ss, cudaStream_t s) {
  const int groups = c / V;
  Grid st = make_grid(m, groups, kMaxStatBlocksY);
  const size_t shmem = size_t(2) * kThreads * V * sizeof(float);
  stats_kernel<T, V><<<st.grid, st.block, shmem, s>>>(x, m, c, part);
  KERNEL_CHECK();
  finalize_train_kernel<T><<<(c + 127) / 128, 128, 0, s>>>(x, m, c, int(st.grid.y), part, gamma,
                                                          beta, eps, momentum, rm, rv, sm, si, ss);
  KERNEL_CHECK();
  Grid ap = make_grid(m, groups, 65535);
  apply_kernel<T, V><<<ap.grid, ap.block, 0, s>>>(x, res, y, m, c, ss, relu);
  KERNEL_CHECK();
}

template <typename T, int V>
void backward_v(const T* x, const T* y, const T* dy, int64_t m, int c, const float* gamma,
                const float* mean, const float* invstd, bool relu, T* dx, T* dres,
                float* dgamma, float* dbeta, float* part, float* coef, cudaStream_t s) {
  const int groups = c / V;
  Grid st = make_grid(m, groups, kMaxStatBlocksY);
  const size_t shmem = size_t(2) * kThreads * V * sizeof(float);
  bwd_reduce_kernel<T, V><<<st.grid, st.block, shmem, s>>>(x, y, dy, m, c, mean, invstd, relu,
                                                           dres, part);
  KERNEL_CHECK();
  bwd_finalize_kernel<<<(c + 127) / 128, 128, 0, s>>>(m, c, int(st.grid.y), part, gamma, mean,
                                                     invstd, dgamma, dbeta, coef);
  KERNEL_CHECK();
  Grid ap = make_grid(m, groups, 65535);
  bwd_dx_kernel<T, V><<<ap.grid, ap.block, 0, s>>>(x, y, dy, dres, m, c, coef, relu, dx);
  KERNEL_CHECK();
}

}  // namespace

size_t bn_partials_floats(int64_t, int c) { return size_t(kMaxStatBlocksY) * 2 * size_t(c); }

void bn_forward_train(DType t, const void* x, int64_t m, int c, const float* gamma,
                      const float* beta, float eps, float momentum, float* running_mean,
                      float* running_var, float* save_mean, float* save_invstd,
                      const void* residual, bool relu, void* y, float* part, float* scale_shift,
                      cudaStream_t s) {
  WK_DISPATCH(t, {
    const T* xt = static_cast<const T*>(x);
    const T* rt = static_cast<const T*>(residual);
    T* yt = static_cast<T*>(y);
    if (pick_vec<T>(c, {x, residual, y}) > 1)
      forward_train_v<T, 16 / sizeof(T)>(xt, m, c, gamma, beta, eps, momentum, running_mean,
                                         running_var, save_mean, save_invstd, rt, relu, yt, part,
                                         scale_shift, s);
    else
      forward_train_v<T, 1>(xt, m, c, gamma, beta, eps, momentum, running_mean, running_var,
                            save_mean, save_invstd, rt, relu, yt, part, scale_shift, s);
  });
}

void bn_forward_eval(DType t, const void* x, int64_t m, int c, const float* gamma,
                     const float* beta, float eps, const float* running_mean,
                     const float* running_var, const void* residual, bool relu, void* y,
                     float* scale_shift, cudaStream_t s) {
  finalize_eval_kernel<<<(c + 127) / 128, 128, 0, s>>>(c, gamma, beta, eps, running_mean,
                                                      running_var, scale_shift);
  KERNEL_CHECK();
  WK_DISPATCH(t, {
    const T* xt = static_cast<const T*>(x);
    const T* rt = static_cast<const T*>(residual);
    T* yt = static_cast<T*>(y);
    if (pick_vec<T>(c, {x, residual, y}) > 1) {
      constexpr int V = 16 / sizeof(T);
      Grid ap = make_grid(m, c / V, 65535);
      apply_kernel<T, V><<<ap.grid, ap.block, 0, s>>>(xt, rt, yt, m, c, scale_shift, relu);
    } else {
      Grid ap = make_grid(m, c, 65535);
      apply_kernel<T, 1><<<ap.grid, ap.block, 0, s>>>(xt, rt, yt, m, c, scale_shift, relu);
    }
    KERNEL_CHECK();
  });
}

void bn_backward(DType t, const void* x, const void* y, const void* dy, int64_t m, int c,
                 const float* gamma, const float* save_mean, const float* save_invstd, bool relu,
                 void* dx, void* dresidual, float* dgamma, float* dbeta, float* part, float* coef,
                 cudaStream_t s) {
  WK_DISPATCH(t, {
    const T* xt = static_cast<const T*>(x);
    const T* yt = static_cast<const T*>(y);
    const T* dyt = static_cast<const T*>(dy);
    T* dxt = static_cast<T*>(dx);
    T* drt = static_cast<T*>(dresidual);
    if (pick_vec<T>(c, {x, y, dy, dx, dresidual}) > 1)
      backward_v<T, 16 / sizeof(T)>(xt, yt, dyt, m, c, gamma, save_mean, save_invstd, relu, dxt,
                                    drt, dgamma, dbeta, part, coef, s);
    else
      backward_v<T, 1>(xt, yt, dyt, m, c, gamma, save_mean, save_invstd, relu, dxt, drt, dgamma,
                       dbeta, part, coef, s);
  });
}

}  // namespace gpu
}  // namespace worker
