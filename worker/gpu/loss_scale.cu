// fp16 dynamic loss scaling decided on the device (issue 24): the unscale pass with its verdict,
// GradScaler's update (worker/core/loss_scale.h's state machine, compiled here for the device),
// and the optimizer's per-step values derived from the device's step count. Nothing here is read
// back by the host during a step, so the step can be one CUDA graph.
#include <cmath>
#include <cstdint>

#include "worker/gpu/check.h"
#include "worker/gpu/dtype.cuh"
#include "worker/gpu/grid.cuh"
#include "worker/gpu/kernels.h"

namespace worker {
namespace gpu {
namespace {

__global__ void set_kernel(DeviceLossScale* d, LossScaleState s, int64_t optimizer_steps) {
  d->s = s;
  d->optimizer_steps = optimizer_steps;
  d->bad = 0;
  d->applies = 1;
}

// The factor as the host computed it before (1.0f / (float(world) * scale)), so the bits agree.
// add (T, may be null): added into g over [lo, hi) first, rounded to fp32 as add_to_f32 rounds it.
template <typename T>
__global__ void unscale_kernel(float* __restrict__ g, size_t n, float divisor, DeviceLossScale* d,
                               const T* __restrict__ add, size_t lo, size_t hi) {
  const float a = 1.f / (divisor * d->s.scale);
  bool bad = false;
  GRID_STRIDE(i, n) {
    float v = g[i];
    if (add && i >= lo && i < hi) v = __fadd_rn(v, to_f(add[i - lo]));
    v = __fmul_rn(v, a);
    g[i] = v;
    bad |= !isfinite(v);
  }
  if (__any_sync(0xffffffffu, bad) && (threadIdx.x & 31) == 0) d->bad = 1;
}

__global__ void verdict_kernel(DeviceLossScale* d, int bad) { d->bad = bad; }

__global__ void update_kernel(DeviceLossScale* d, LossScaleRules rules) {
  const bool applies = advance_loss_scale(d->s, rules, d->bad == 0);
  if (applies) ++d->optimizer_steps;
  d->applies = applies ? 1 : 0;
}

__global__ void opt_scalars_kernel(const OptScalars* in, const DeviceLossScale* d, bool adam, float beta1,
                                   float beta2, OptScalars* out) {
  const int64_t t = d->optimizer_steps;
  OptScalars o;
  o.lr = in->lr;
  if (adam && d->applies) {  // t >= 1 then; a skipped step reads none of it
    o.bc1 = float(1.0 - pow(double(beta1), double(t)));
    o.bc2_sqrt = float(sqrt(1.0 - pow(double(beta2), double(t))));
  }
  o.apply = d->applies;
  o.first = t == 1 ? 1 : 0;
  *out = o;
}

}  // namespace

void set_loss_scale(DeviceLossScale* d, const LossScaleState& s, int64_t optimizer_steps, cudaStream_t st) {
  set_kernel<<<1, 1, 0, st>>>(d, s, optimizer_steps);
  KERNEL_CHECK();
}

void unscale_grads(float* g, size_t n, float divisor, DeviceLossScale* d, cudaStream_t st, DType t,
                   const void* add, size_t lo, size_t hi) {
  CUDA_CHECK(cudaMemsetAsync(&d->bad, 0, sizeof(int), st));
  WK_DISPATCH(t, {
    unscale_kernel<T><<<stride_grid(n), kStrideThreads, 0, st>>>(g, n, divisor, d, static_cast<const T*>(add), lo,
                                                                  hi);
    KERNEL_CHECK();
  });
}

void set_grads_verdict(DeviceLossScale* d, bool grads_finite, cudaStream_t st) {
  verdict_kernel<<<1, 1, 0, st>>>(d, grads_finite ? 0 : 1);
  KERNEL_CHECK();
}

void update_loss_scale(DeviceLossScale* d, const LossScaleRules& rules, cudaStream_t st) {
  update_kernel<<<1, 1, 0, st>>>(d, rules);
  KERNEL_CHECK();
}

void loss_scaled_opt_scalars(const OptScalars* in, const DeviceLossScale* d, bool adam, float beta1, float beta2,
                             OptScalars* out, cudaStream_t st) {
  opt_scalars_kernel<<<1, 1, 0, st>>>(in, d, adam, beta1, beta2, out);
  KERNEL_CHECK();
}

}  // namespace gpu
}  // namespace worker
