#include "worker/gpu/side_stream.h"

#include <utility>

#include "worker/gpu/check.h"

namespace worker {
namespace gpu {

SideStream::SideStream(cudaStream_t main) : main_(main) {
  int least = 0, greatest = 0;
  CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  CUDA_CHECK(cudaStreamCreateWithPriority(&side_, cudaStreamNonBlocking, least));
  CUDA_CHECK(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming));
}

SideStream::~SideStream() {
  if (side_) cudaStreamSynchronize(side_);
  for (cudaEvent_t e : done_) cudaEventDestroy(e);
  for (cudaEvent_t e : free_) cudaEventDestroy(e);
  if (fork_) cudaEventDestroy(fork_);
  if (side_) cudaStreamDestroy(side_);
}

void SideStream::begin() {
  CUDA_CHECK(cudaEventRecord(fork_, main_));
  CUDA_CHECK(cudaStreamWaitEvent(side_, fork_, 0));
}

void SideStream::end(std::vector<Range> reads, std::vector<Range> writes) {
  cudaEvent_t done = nullptr;
  if (free_.empty()) {
    CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  } else {
    done = free_.back();
    free_.pop_back();
  }
  const cudaError_t e = cudaEventRecord(done, side_);
  if (e != cudaSuccess) {
    free_.push_back(done);
    CUDA_CHECK(e);
  }
  ranges_.push(std::move(reads), std::move(writes));
  done_.push_back(done);
}

void SideStream::wait_through(size_t k) {
  CUDA_CHECK(cudaStreamWaitEvent(main_, done_[k], 0));
  for (size_t i = 0; i <= k; ++i) {
    free_.push_back(done_.front());
    done_.pop_front();
  }
  ranges_.drop_through(k);
}

void SideStream::guard_write(const void* p, size_t bytes) {
  // The latest conflicting task covers the earlier ones.
  if (const auto k = ranges_.latest_conflict(p, bytes)) wait_through(*k);
}

void SideStream::join() {
  if (ranges_.size() != 0) wait_through(ranges_.size() - 1);
}

}  // namespace gpu
}  // namespace worker
