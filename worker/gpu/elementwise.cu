// Element-wise kernels over the flat parameter/gradient buffers: the half-precision shadow of
// the master weights, the gather of ZeRO-1's fp32 copies, gradient accumulation from half
// precision, scaling, a finiteness check, and the fused optimizers (PyTorch's SGD and Adam
// formulas exactly; fp16 loss scaling's own passes are loss_scale.cu's).
#include <cmath>
#include <cstdint>

#include "worker/gpu/check.h"
#include "worker/gpu/dtype.cuh"
#include "worker/gpu/grid.cuh"
#include "worker/gpu/kernels.h"

namespace worker {
namespace gpu {
namespace {


template <typename T>
__global__ void cast_kernel(const float* __restrict__ src, T* __restrict__ dst, size_t n) {
  GRID_STRIDE(i, n) dst[i] = from_f<T>(src[i]);
}

template <typename T>
__global__ void add_kernel(const T* __restrict__ src, float* __restrict__ dst, size_t n) {
  GRID_STRIDE(i, n) dst[i] += to_f(src[i]);
}

__global__ void scale_kernel(float* p, float a, size_t n) { GRID_STRIDE(i, n) p[i] *= a; }

__global__ void nonfinite_kernel(const float* __restrict__ p, size_t n, int* flag) {
  bool bad = false;
  GRID_STRIDE(i, n) bad |= !isfinite(p[i]);
  if (__any_sync(0xffffffffu, bad) && (threadIdx.x & 31) == 0) *flag = 1;
}

// Block b copies run b: dst[run.dst + j] = src[run.src + j], j < run.count.
__global__ void gather_runs_kernel(const float* __restrict__ src, float* __restrict__ dst,
                                   const CopyRun* __restrict__ runs) {
  const CopyRun r = runs[blockIdx.x];
  for (size_t j = threadIdx.x; j < r.count; j += blockDim.x) dst[r.dst + j] = src[r.src + j];
}

// Weight decay of element i: everywhere without a mask (torch's single parameter group).
__device__ __forceinline__ bool decays(const uint8_t* __restrict__ mask, size_t i) {
  return mask == nullptr || mask[i] != 0;
}

__global__ void set_scalars_kernel(OptScalars* dst, OptScalars v) { *dst = v; }

__global__ void sgd_kernel(float* __restrict__ p, const float* __restrict__ g,
                           float* __restrict__ buf, const uint8_t* __restrict__ mask, size_t n,
                           const OptScalars* __restrict__ sc, float momentum, float wd, bool first,
                           bool nesterov) {
  if (!sc->apply) return;  // fp16 loss scaling skips this step
  const float lr = sc->lr;
  const bool starts = first || sc->first;
  GRID_STRIDE(i, n) {
    float d = g[i];
    if (wd != 0.f && decays(mask, i)) d += wd * p[i];
    if (momentum != 0.f) {
      const float b = starts ? d : momentum * buf[i] + d;
      buf[i] = b;
      d = nesterov ? d + momentum * b : b;
    }
    p[i] -= lr * d;
  }
}

__global__ void adam_kernel(float* __restrict__ p, const float* __restrict__ g,
                            float* __restrict__ m, float* __restrict__ v,
                            const uint8_t* __restrict__ mask, size_t n,
                            const OptScalars* __restrict__ sc, float beta1, float beta2, float eps,
                            float wd) {
  if (!sc->apply) return;  // fp16 loss scaling skips this step
  const float step_size = sc->lr / sc->bc1, bc2_sqrt = sc->bc2_sqrt;
  GRID_STRIDE(i, n) {
    float d = g[i];
    if (wd != 0.f && decays(mask, i)) d += wd * p[i];
    const float mi = beta1 * m[i] + (1.f - beta1) * d;
    const float vi = beta2 * v[i] + (1.f - beta2) * d * d;
    m[i] = mi;
    v[i] = vi;
    const float denom = sqrtf(vi) / bc2_sqrt + eps;
    p[i] -= step_size * (mi / denom);
  }
}

}  // namespace

void cast_from_f32(DType t, const float* src, void* dst, size_t n, cudaStream_t s) {
  WK_DISPATCH(t, {
    cast_kernel<T><<<stride_grid(n), kStrideThreads, 0, s>>>(src, static_cast<T*>(dst), n);
    KERNEL_CHECK();
  });
}

void add_to_f32(DType t, const void* src, float* dst, size_t n, cudaStream_t s) {
  WK_DISPATCH(t, {
    add_kernel<T><<<stride_grid(n), kStrideThreads, 0, s>>>(static_cast<const T*>(src), dst, n);
    KERNEL_CHECK();
  });
}

void gather_runs(const float* src, float* dst, const CopyRun* runs, int n_runs, cudaStream_t s) {
  if (n_runs == 0) return;
  gather_runs_kernel<<<unsigned(n_runs), kStrideThreads, 0, s>>>(src, dst, runs);
  KERNEL_CHECK();
}

void scale_f32(float* p, float a, size_t n, cudaStream_t s) {
  scale_kernel<<<stride_grid(n), kStrideThreads, 0, s>>>(p, a, n);
  KERNEL_CHECK();
}

void find_nonfinite(const float* p, size_t n, int* flag, cudaStream_t s) {
  nonfinite_kernel<<<stride_grid(n), kStrideThreads, 0, s>>>(p, n, flag);
  KERNEL_CHECK();
}

OptScalars adam_scalars(float lr, float beta1, float beta2, int64_t step) {
  const double bc1 = 1.0 - std::pow(double(beta1), double(step));
  const double bc2 = 1.0 - std::pow(double(beta2), double(step));
  return {lr, float(bc1), float(std::sqrt(bc2))};
}

void set_opt_scalars(OptScalars* dst, const OptScalars& v, cudaStream_t s) {
  set_scalars_kernel<<<1, 1, 0, s>>>(dst, v);
  KERNEL_CHECK();
}

void sgd_step(float* p, const float* g, float* buf, const uint8_t* decay_mask, size_t n, const OptScalars* sc,
              float momentum, float wd, bool first, bool nesterov, cudaStream_t s) {
  sgd_kernel<<<stride_grid(n), kStrideThreads, 0, s>>>(p, g, buf, decay_mask, n, sc, momentum, wd, first,
                                                       nesterov);
  KERNEL_CHECK();
}

void adam_step(float* p, const float* g, float* m, float* v, const uint8_t* decay_mask, size_t n,
               const OptScalars* sc, float beta1, float beta2, float eps, float wd, cudaStream_t s) {
  adam_kernel<<<stride_grid(n), kStrideThreads, 0, s>>>(p, g, m, v, decay_mask, n, sc, beta1, beta2, eps, wd);
  KERNEL_CHECK();
}

}  // namespace gpu
}  // namespace worker
