#include "worker/data/gpu/jpeg_resize.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "worker/gpu/check.h"

namespace worker {
namespace gpu {

namespace {

// Pillow's precompute_coeffs for one output pixel (relative to the box): first tap, tap
// count, and the normaliser of the triangle weights; in double, as the CPU path.
struct Taps {
  int first, count;
  double center, filterscale, norm;
};

__device__ Taps taps(int i, int box_len, int out_full) {
  Taps t;
  const double scale = double(box_len) / out_full;
  t.filterscale = scale > 1.0 ? scale : 1.0;
  const double support = t.filterscale;
  t.center = (i + 0.5) * scale;
  int xmin = int(t.center - support + 0.5);
  if (xmin < 0) xmin = 0;
  int xmax = int(t.center + support + 0.5);
  if (xmax > box_len) xmax = box_len;
  t.first = xmin;
  t.count = xmax > xmin ? xmax - xmin : 0;
  double ww = 0.0;
  for (int x = 0; x < t.count; ++x) {
    const double d = fabs((x + xmin - t.center + 0.5) / t.filterscale);
    ww += d < 1.0 ? 1.0 - d : 0.0;
  }
  t.norm = ww;
  return t;
}

__device__ float weight(const Taps& t, int k) {
  const double d = fabs((k + t.first - t.center + 0.5) / t.filterscale);
  return t.norm != 0.0 ? float((d < 1.0 ? 1.0 - d : 0.0) / t.norm) : 0.0f;
}

template <typename T> __device__ T from_float(float v);
template <> __device__ float from_float<float>(float v) { return v; }
template <> __device__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <> __device__ __half from_float<__half>(float v) { return __float2half_rn(v); }

// One thread per output pixel; blockIdx.y is the image.
template <typename T>
__global__ void resize_normalize(const ResizeJob* jobs, int size, Normalize norm, T* out) {
  const int pix = blockIdx.x * blockDim.x + threadIdx.x;
  if (pix >= size * size) return;
  const ResizeJob job = jobs[blockIdx.y];
  if (!job.src) return;  // rendered on the CPU and copied into place
  const int j = pix / size, i = pix % size;
  const int bw = job.box_x1 - job.box_x0, bh = job.box_y1 - job.box_y0;
  const Taps tx = taps(job.win_x + i, bw, job.out_w);
  const Taps ty = taps(job.win_y + j, bh, job.out_h);
  float a0 = 0.f, a1 = 0.f, a2 = 0.f;
  for (int ky = 0; ky < ty.count; ++ky) {
    const float wy = weight(ty, ky);
    const uint8_t* row = job.src + size_t(job.box_y0 + ty.first + ky) * job.pitch + size_t(job.box_x0 + tx.first) * 3;
    float r0 = 0.f, r1 = 0.f, r2 = 0.f;
    for (int kx = 0; kx < tx.count; ++kx) {
      const float wx = weight(tx, kx);
      r0 += wx * row[3 * kx];
      r1 += wx * row[3 * kx + 1];
      r2 += wx * row[3 * kx + 2];
    }
    a0 += wy * r0;
    a1 += wy * r1;
    a2 += wy * r2;
  }
  const int o = job.flip ? size - 1 - i : i;
  T* dst = out + ((size_t(blockIdx.y) * size + j) * size + o) * 3;
  dst[0] = from_float<T>(a0 * norm.scale[0] + norm.shift[0]);
  dst[1] = from_float<T>(a1 * norm.scale[1] + norm.shift[1]);
  dst[2] = from_float<T>(a2 * norm.scale[2] + norm.shift[2]);
}

}  // namespace

void launch_resize_normalize(const ResizeJob* jobs, int n, int size, DType dtype, const Normalize& norm, void* out,
                             cudaStream_t stream) {
  if (n <= 0) return;
  const int threads = 256;
  const dim3 grid((size * size + threads - 1) / threads, n);
  switch (dtype) {
    case DType::F32: resize_normalize<float><<<grid, threads, 0, stream>>>(jobs, size, norm, static_cast<float*>(out)); break;
    case DType::BF16:
      resize_normalize<__nv_bfloat16><<<grid, threads, 0, stream>>>(jobs, size, norm, static_cast<__nv_bfloat16*>(out));
      break;
    case DType::F16: resize_normalize<__half><<<grid, threads, 0, stream>>>(jobs, size, norm, static_cast<__half*>(out)); break;
  }
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace gpu
}  // namespace worker
