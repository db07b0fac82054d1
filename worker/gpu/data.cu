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

// Sample blockIdx.y of the batch, its elements strided over the blocks of x.
template <typename T>
__global__ void images_kernel(DataKind kind, uint64_t seed, Indices idx, int image_size, int classes,
                              T* __restrict__ images) {
  const int64_t per = int64_t(image_size) * image_size * synth::kChannels;
  const synth::SamplePixels sample(kind, seed, idx.v[blockIdx.y], image_size, classes);
  T* out = images + per * blockIdx.y;
  for (int64_t e = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; e < per; e += int64_t(gridDim.x) * blockDim.x)
    out[e] = from_f<T>(sample(e));
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
    // About 32 blocks of 256 per multiprocessor of an H200 in all, at least one per sample.
    const int64_t most = std::max(1, 132 * 32 / cnt);
    const unsigned per_sample = unsigned(std::clamp<int64_t>((int64_t(per) + 255) / 256, 1, most));
    WK_DISPATCH(t, {
      images_kernel<T><<<dim3(per_sample, unsigned(cnt)), 256, 0, s>>>(kind, seed, idx, image_size, classes,
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
