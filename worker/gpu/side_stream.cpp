#include "worker/gpu/side_stream.h"

#include "worker/gpu/check.h"

namespace worker {
namespace gpu {

namespace {

bool overlap(const SideStream::Range& r, const void* p, size_t bytes) {
  const char* a = static_cast<const char*>(r.p);
  const char* b = static_cast<const char*>(p);
  return r.bytes != 0 && bytes != 0 && a < b + bytes && b < a + r.bytes;
}

}  // namespace

SideStream::SideStream(cudaStream_t main) : main_(main) {
  int least = 0, greatest = 0;
  CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  CUDA_CHECK(cudaStreamCreateWithPriority(&side_, cudaStreamNonBlocking, least));
  CUDA_CHECK(cudaEventCreateWithFlags(&fork_, cudaEventDisableTiming));
}

SideStream::~SideStream() {
  if (side_) cudaStreamSynchronize(side_);
  for (Task& t : tasks_) cudaEventDestroy(t.done);
  for (cudaEvent_t e : free_) cudaEventDestroy(e);
  if (fork_) cudaEventDestroy(fork_);
  if (side_) cudaStreamDestroy(side_);
}

void SideStream::begin() {
  CUDA_CHECK(cudaEventRecord(fork_, main_));
  CUDA_CHECK(cudaStreamWaitEvent(side_, fork_, 0));
}

void SideStream::end(std::initializer_list<Range> reads, std::initializer_list<Range> writes) {
  Task t;
  if (free_.empty()) {
    CUDA_CHECK(cudaEventCreateWithFlags(&t.done, cudaEventDisableTiming));
  } else {
    t.done = free_.back();
    free_.pop_back();
  }
  t.reads = reads;
  t.writes = writes;
  const cudaError_t e = cudaEventRecord(t.done, side_);
  if (e != cudaSuccess) {
    free_.push_back(t.done);
    CUDA_CHECK(e);
  }
  tasks_.push_back(std::move(t));
}

void SideStream::wait_through(size_t k) {
  CUDA_CHECK(cudaStreamWaitEvent(main_, tasks_[k].done, 0));
  for (size_t i = 0; i <= k; ++i) {
    free_.push_back(tasks_.front().done);
    tasks_.pop_front();
  }
}

void SideStream::guard_write(const void* p, size_t bytes) {
  for (size_t k = tasks_.size(); k-- > 0;) {
    const Task& t = tasks_[k];
    bool hit = false;
    for (const Range& r : t.reads) hit = hit || overlap(r, p, bytes);
    for (const Range& r : t.writes) hit = hit || overlap(r, p, bytes);
    if (hit) return wait_through(k);  // the latest conflicting task covers the earlier ones
  }
}

void SideStream::join() {
  if (!tasks_.empty()) wait_through(tasks_.size() - 1);
}

}  // namespace gpu
}  // namespace worker
