// A second stream beside the backend's, for work that nothing on the main stream needs until
// later: backward's weight gradients (only the optimizer and the gradient reduction read them),
// so that a compute-bound wgrad kernel runs while the memory-bound batch-norm kernels after its
// data gradient stream through HBM, instead of after them.
//
// Ordering is tracked by memory ranges (their bookkeeping is PendingRanges, ranges.h), not left to
// the callers' knowledge of the model:
//   - begin() makes the side stream wait for everything enqueued on the main stream so far (the
//     task's inputs are written by then);
//   - end() records the task with the ranges it reads and writes;
//   - before the main stream writes a range that a pending task reads or writes, guard_write()
//     makes the main stream wait for that task (and so for every task before it: the side
//     stream runs in order);
//   - join() makes the main stream wait for every pending task (before a host wait, the
//     optimizer, a collective, a captured step).
// The GPU backend keeps it out of captured steps (GpuOps::conv_backward says why).
#pragma once

#include <cstddef>
#include <deque>
#include <vector>

#include <cuda_runtime.h>

#include "worker/gpu/ranges.h"

namespace worker {
namespace gpu {

class SideStream {
 public:
  using Range = gpu::Range;

  // The side stream gets the device's lowest priority (a waiting main-stream block goes first).
  explicit SideStream(cudaStream_t main);
  ~SideStream();
  SideStream(const SideStream&) = delete;
  SideStream& operator=(const SideStream&) = delete;

  cudaStream_t stream() const { return side_; }
  void begin();
  void end(std::vector<Range> reads, std::vector<Range> writes);
  void guard_write(const void* p, size_t bytes);
  void join();
  size_t pending() const { return ranges_.size(); }

 private:
  // The main stream waits for task k; tasks [0, k] leave the lists.
  void wait_through(size_t k);

  cudaStream_t main_;
  cudaStream_t side_ = nullptr;
  cudaEvent_t fork_ = nullptr;
  PendingRanges ranges_;          // what each pending task reads and writes (ranges.h)
  std::deque<cudaEvent_t> done_;  // each pending task's end, beside its ranges
  std::vector<cudaEvent_t> free_;  // events of finished tasks, for reuse
};

}  // namespace gpu
}  // namespace worker
