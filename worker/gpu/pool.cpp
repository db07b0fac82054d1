#include "worker/gpu/pool.h"

#include <chrono>

#include <cuda_runtime.h>

#include "worker/gpu/check.h"

namespace worker {
namespace gpu {

DevicePool::DevicePool(size_t chunk_bytes) : chunk_bytes_(chunk_bytes) {}

DevicePool::~DevicePool() {
  for (Chunk& c : chunks_) cudaFree(c.base);  // errors at teardown are not actionable
}

void* DevicePool::alloc(size_t bytes) {
  const size_t need = (bytes + 255) & ~size_t(255);
  // First fit over the chunks: activations of a few hundred MB would otherwise leave up to
  // 40% of each 1 GiB chunk unused (measured: 17.2 GB reserved for 14.2 GB handed out).
  for (Chunk& c : chunks_) {
    if (c.size - c.top >= need) {
      void* p = c.base + c.top;
      c.top += need;
      used_ += need;
      return p;
    }
  }
  {
    const size_t size = need > chunk_bytes_ ? need : chunk_bytes_;
    void* p = nullptr;
    const auto t0 = std::chrono::steady_clock::now();
    const cudaError_t e = cudaMalloc(&p, size);
    malloc_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // not sticky: clear it so the next call does not report it
      throw_oom(bytes, used_, __FILE__, __LINE__);
    }
    CUDA_CHECK(e);
    chunks_.push_back({static_cast<char*>(p), size, 0});
    reserved_ += size;
  }
  Chunk& c = chunks_.back();
  void* p = c.base + c.top;
  c.top += need;
  used_ += need;
  return p;
}

void* alloc_zeroed(DevicePool& pool, size_t bytes, cudaStream_t s) {
  void* p = pool.alloc(bytes);
  CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, s));
  return p;
}

}  // namespace gpu
}  // namespace worker
