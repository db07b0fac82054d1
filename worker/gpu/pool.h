// Device memory for the whole run: a bump allocator over large cudaMalloc'd chunks. Every
// buffer is carved during setup (model construction, first step); nothing is ever freed
// individually and the training loop allocates nothing. peak() is the high-water mark of what
// was handed out; reserved() what was taken from the device.
#pragma once

#include <cstddef>
#include <vector>

#include <cuda_runtime.h>

namespace worker {
namespace gpu {

class DevicePool {
 public:
  // chunk_bytes: the size of each cudaMalloc (a larger request gets a chunk of its own size).
  explicit DevicePool(size_t chunk_bytes);
  ~DevicePool();
  DevicePool(const DevicePool&) = delete;
  DevicePool& operator=(const DevicePool&) = delete;

  void* alloc(size_t bytes);  // 256-byte aligned, NOT zeroed
  size_t used() const { return used_; }
  size_t reserved() const { return reserved_; }
  double malloc_seconds() const { return malloc_seconds_; }  // spent in cudaMalloc so far (start-up)

 private:
  struct Chunk {
    char* base;
    size_t size, top;
  };
  std::vector<Chunk> chunks_;
  size_t chunk_bytes_;
  size_t used_ = 0, reserved_ = 0;
  double malloc_seconds_ = 0;
};

// pool.alloc(bytes), zeroed on `s` (stream-ordered: before anything enqueued after it reads it).
void* alloc_zeroed(DevicePool& pool, size_t bytes, cudaStream_t s);

}  // namespace gpu
}  // namespace worker
