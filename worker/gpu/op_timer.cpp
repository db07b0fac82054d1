#include "worker/gpu/op_timer.h"

#include <map>

#include "worker/gpu/check.h"

namespace worker {
namespace gpu {

OpTimer::~OpTimer() {
  for (cudaEvent_t e : events_) cudaEventDestroy(e);
}

OpTimer::Scope::~Scope() {
  if (t_) t_->end(slot_);
}

void OpTimer::start() {
  slots_.clear();
  on_ = true;
}

size_t OpTimer::begin(const char* category, std::string label) {
  const size_t slot = slots_.size();
  slots_.emplace_back(category, std::move(label));
  while (events_.size() < 2 * slots_.size()) {
    cudaEvent_t e = nullptr;
    CUDA_CHECK(cudaEventCreate(&e));
    events_.push_back(e);
  }
  CUDA_CHECK(cudaEventRecord(events_[2 * slot], stream_));
  return slot;
}

void OpTimer::end(size_t slot) {
  // No throw from a destructor: a failed record shows up as a failed read in stop().
  cudaEventRecord(events_[2 * slot + 1], stream_);
}

std::vector<OpTimer::Row> OpTimer::stop() {
  on_ = false;
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  std::vector<Row> rows;
  std::map<std::pair<std::string, std::string>, size_t> index;
  for (size_t i = 0; i < slots_.size(); ++i) {
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, events_[2 * i], events_[2 * i + 1]));
    auto it = index.find(slots_[i]);
    if (it == index.end()) {
      it = index.emplace(slots_[i], rows.size()).first;
      rows.push_back({slots_[i].first, slots_[i].second, 0, 0});
    }
    rows[it->second].calls += 1;
    rows[it->second].ms += double(ms);
  }
  slots_.clear();
  return rows;
}

}  // namespace gpu
}  // namespace worker
