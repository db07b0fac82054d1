// Synthetic batches generated on the device with worker/core/synthetic.h, so every backend and
// every rank sees bit-identical data and the input pipeline costs no host time. The sample
// indices travel as a kernel parameter (no host-to-device copy that could synchronise).
#include <algorithm>
#include <cstdint>

#include "worker/core/synthetic.h"
#include "worker/gpu/check.h"
#include "worker/gpu/dtype.cuh"
#include "worker/gpu/kernels.h"

namespace worker {
namespace gpu {
namespace {

constexpr int kMaxIndices = 448;  // 3.5 KB of indices: kernel parameters are limited to 4 KB

struct Indices {
  int64_t v[kMaxIndices];
};

template <typename T>
__global__ void images_kernel(DataKind kind, uint64_t seed, Indices idx, int n, int image_size,
                              int classes, T* __restrict__ images) {
  const int64_t per = int64_t(image_size) * image_size * synth::kChannels;
  const int64_t total = per * n;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int b = int(i / per);
    const int64_t e = i - int64_t(b) * per;
    images[i] = from_f<T>(synth::pixel(kind, seed, idx.v[b], image_size, classes, e));
  }
}

__global__ void labels_kernel(uint64_t seed, Indices idx, int n, int classes, int32_t* labels) {
  const int b = blockIdx.x * blockDim.x + threadIdx.x;
  if (b < n) labels[b] = synth::label(seed, idx.v[b], classes);
}

}  // namespace

void make_batch(DType t, DataKind kind, uint64_t seed, const int64_t* host_indices, int n,
                int image_size, int classes, void* images, int32_t* labels, cudaStream_t s) {
  const size_t per = size_t(image_size) * image_size * synth::kChannels;
  for (int start = 0; start < n; start += kMaxIndices) {
    const int cnt = std::min(kMaxIndices, n - start);
    Indices idx{};
    std::copy(host_indices + start, host_indices + start + cnt, idx.v);
    const int64_t total = int64_t(per) * cnt;
    const unsigned blocks = unsigned(std::min<int64_t>((total + 255) / 256, 132 * 32));
    WK_DISPATCH(t, {
      images_kernel<T><<<blocks, 256, 0, s>>>(kind, seed, idx, cnt, image_size, classes,
                                              static_cast<T*>(images) + per * start);
      KERNEL_CHECK();
    });
    if (labels) {
      labels_kernel<<<(cnt + 127) / 128, 128, 0, s>>>(seed, idx, cnt, classes, labels + start);
      KERNEL_CHECK();
    }
  }
}

}  // namespace gpu
}  // namespace worker
