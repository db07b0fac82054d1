// Softmax cross-entropy with label smoothing (one block per sample, deterministic two-stage mean) and the small
// helpers of the fully connected layer (bias broadcast, bias gradient).
#include <cfloat>
#include <cstdint>

#include "worker/gpu/check.h"
#include "worker/gpu/kernels.h"

namespace worker {
namespace gpu {
namespace {

constexpr int kThreads = 256;

__device__ float block_reduce(float v, bool is_max, float* sh) {
  for (int o = 16; o > 0; o >>= 1) {
    const float u = __shfl_xor_sync(0xffffffffu, v, o);
    v = is_max ? fmaxf(v, u) : v + u;
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();  // sh may still be read by a previous reduction
  if (lane == 0) sh[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = lane < int(blockDim.x / 32) ? sh[lane] : (is_max ? -FLT_MAX : 0.f);
    for (int o = 16; o > 0; o >>= 1) {
      const float u = __shfl_xor_sync(0xffffffffu, v, o);
      v = is_max ? fmaxf(v, u) : v + u;
    }
    if (lane == 0) sh[0] = v;
  }
  __syncthreads();
  return sh[0];
}

// Label smoothing e: the target is t = (1 - e) * onehot + e / classes, the loss lse - sum t_k z_k.
__global__ void xent_rows_kernel(int n, int classes, const float* __restrict__ logits,
                                 const int32_t* __restrict__ labels, float grad_scale,
                                 const float* __restrict__ loss_scale, float label_smoothing, float* __restrict__ dlogits,
                                 float* __restrict__ row_loss) {
  __shared__ float sh[32];
  const int row = blockIdx.x;
  const float* z = logits + size_t(row) * classes;
  float mx = -FLT_MAX;
  for (int j = threadIdx.x; j < classes; j += blockDim.x) mx = fmaxf(mx, z[j]);
  mx = block_reduce(mx, true, sh);
  float sum = 0.f;
  for (int j = threadIdx.x; j < classes; j += blockDim.x) sum += expf(z[j] - mx);
  sum = block_reduce(sum, false, sh);
  const float e = label_smoothing, uniform = e / float(classes);
  float zsum = 0.f;
  if (e != 0.f) {
    for (int j = threadIdx.x; j < classes; j += blockDim.x) zsum += z[j];
    zsum = block_reduce(zsum, false, sh);
  }
  const int label = labels[row];
  const float inv = 1.f / sum;
  // fp16 loss scaling: the scale is a power of two, so grad_scale x scale is exact and the result
  // the same bits as the host's (scale / accumulation) once was.
  const float g = (loss_scale ? grad_scale * *loss_scale : grad_scale) / float(n);
  float* dz = dlogits + size_t(row) * classes;
  for (int j = threadIdx.x; j < classes; j += blockDim.x) {
    const float p = expf(z[j] - mx) * inv;
    dz[j] = g * (p - ((j == label ? 1.f - e : 0.f) + uniform));
  }
  if (threadIdx.x == 0) row_loss[row] = logf(sum) + mx - (1.f - e) * z[label] - uniform * zsum;
}

__global__ void mean_kernel(int n, const float* __restrict__ v, float* __restrict__ out) {
  __shared__ float sh[32];
  float s = 0.f;
  for (int i = threadIdx.x; i < n; i += blockDim.x) s += v[i];
  s = block_reduce(s, false, sh);
  if (threadIdx.x == 0) *out = s / float(n);
}

__global__ void fill_rows_kernel(float* out, const float* row, int n, int cols) {
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < int64_t(n) * cols) out[i] = row[i % cols];
}

__global__ void column_sums_kernel(const float* a, int n, int cols, float* out) {
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= cols) return;
  float s = 0.f;
  for (int i = 0; i < n; ++i) s += a[size_t(i) * cols + j];
  out[j] += s;
}

}  // namespace

void softmax_xent(int n, int classes, const float* logits, const int32_t* labels,
                  float grad_scale, const float* loss_scale, float label_smoothing, float* loss,
                  float* dlogits, float* row_loss, cudaStream_t s) {
  xent_rows_kernel<<<n, kThreads, 0, s>>>(n, classes, logits, labels, grad_scale, loss_scale,
                                          label_smoothing, dlogits, row_loss);
  KERNEL_CHECK();
  mean_kernel<<<1, 1024, 0, s>>>(n, row_loss, loss);
  KERNEL_CHECK();
}

void fill_rows(float* out, const float* row, int n, int cols, cudaStream_t s) {
  const int64_t total = int64_t(n) * cols;
  fill_rows_kernel<<<unsigned((total + kThreads - 1) / kThreads), kThreads, 0, s>>>(out, row, n,
                                                                                   cols);
  KERNEL_CHECK();
}

void column_sums_add(const float* a, int n, int cols, float* out, cudaStream_t s) {
  column_sums_kernel<<<(cols + 127) / 128, 128, 0, s>>>(a, n, cols, out);
  KERNEL_CHECK();
}

}  // namespace gpu
}  // namespace worker
