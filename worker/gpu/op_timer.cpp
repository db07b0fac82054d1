#include "worker/gpu/op_timer.h"

#include <map>
#include <vector>

#include "worker/gpu/check.h"
#include "worker/gpu/step_graph.h"

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
  mode_ = Mode::Time;
}

void OpTimer::start_census() {
  slots_.clear();
  counts_.clear();
  memset_sizes_.clear();
  seen_memsets_.clear();
  mode_ = Mode::Census;
}

std::pair<size_t, size_t> OpTimer::graph_nodes(std::map<size_t, size_t>* sizes) {
  cudaStreamCaptureStatus status{};
  cudaGraph_t g = nullptr;
  CUDA_CHECK(cudaStreamGetCaptureInfo(stream_, &status, nullptr, &g));
  if (status != cudaStreamCaptureStatusActive || !g) return {0, 0};
  std::pair<size_t, size_t> c{0, 0};
  for (cudaGraphNode_t node : graph_nodes_of(g)) {
    cudaGraphNodeType t{};
    CUDA_CHECK(cudaGraphNodeGetType(node, &t));
    c.first += t == cudaGraphNodeTypeKernel;
    if (t != cudaGraphNodeTypeMemset) continue;
    ++c.second;
    if (seen_memsets_.insert(node).second && sizes) {
      cudaMemsetParams p{};
      CUDA_CHECK(cudaGraphMemsetNodeGetParams(node, &p));
      ++(*sizes)[p.elementSize * p.width * p.height];
    }
  }
  return c;
}

size_t OpTimer::begin(const char* category, std::string label) {
  const size_t slot = slots_.size();
  slots_.emplace_back(category, std::move(label));
  if (mode_ == Mode::Census) {
    counts_.push_back(graph_nodes(nullptr));  // (the memsets so far marked seen: not this operation's)
    memset_sizes_.emplace_back();
    return slot;
  }
  while (events_.size() < 2 * slots_.size()) {
    cudaEvent_t e = nullptr;
    CUDA_CHECK(cudaEventCreate(&e));
    events_.push_back(e);
  }
  CUDA_CHECK(cudaEventRecord(events_[2 * slot], stream_));
  return slot;
}

void OpTimer::end(size_t slot) {
  // No throw from a destructor: a failed record shows up as a failed read in stop(); a failed
  // census count as nothing added.
  if (mode_ == Mode::Census) {
    try {
      const auto now = graph_nodes(&memset_sizes_[slot]);
      counts_[slot] = {now.first - counts_[slot].first, now.second - counts_[slot].second};
    } catch (...) {
      counts_[slot] = {0, 0};
    }
    return;
  }
  cudaEventRecord(events_[2 * slot + 1], stream_);
}

std::vector<OpTimer::Row> OpTimer::rows(const std::vector<double>& ms) const {
  std::vector<Row> rows;
  std::map<std::pair<std::string, std::string>, size_t> index;
  for (size_t i = 0; i < slots_.size(); ++i) {
    auto it = index.find(slots_[i]);
    if (it == index.end()) {
      it = index.emplace(slots_[i], rows.size()).first;
      rows.emplace_back();
      rows.back().category = slots_[i].first;
      rows.back().label = slots_[i].second;
    }
    Row& r = rows[it->second];
    r.calls += 1;
    if (i < ms.size()) r.ms += ms[i];
    if (i < counts_.size()) {
      r.kernels += counts_[i].first;
      r.memsets += counts_[i].second;
    }
    if (i < memset_sizes_.size())
      for (const auto& [bytes, n] : memset_sizes_[i]) r.memset_bytes[bytes] += n;
  }
  return rows;
}

std::vector<OpTimer::Row> OpTimer::stop() {
  mode_ = Mode::Off;
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  std::vector<double> ms(slots_.size());
  for (size_t i = 0; i < slots_.size(); ++i) {
    float t = 0;
    CUDA_CHECK(cudaEventElapsedTime(&t, events_[2 * i], events_[2 * i + 1]));
    ms[i] = double(t);
  }
  counts_.clear();
  std::vector<Row> r = rows(ms);
  slots_.clear();
  return r;
}

std::vector<OpTimer::Row> OpTimer::stop_census() {
  mode_ = Mode::Off;
  std::vector<Row> r = rows({});
  slots_.clear();
  counts_.clear();
  memset_sizes_.clear();
  seen_memsets_.clear();
  return r;
}

}  // namespace gpu
}  // namespace worker
