// Device time of every backend operation, for the benchmark's per-layer breakdown: a pair of
// CUDA events on the backend's stream around each Ops call, read back once when recording
// stops. Off unless started; then each call costs one branch. Not for use while a CUDA graph
// is being captured (the events would become graph nodes). Its census instead runs while a graph
// is captured: the kernels and memsets each operation adds to it, counted from the graph under
// construction.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include <cuda_runtime.h>

namespace worker {
namespace gpu {

class OpTimer {
 public:
  struct Row {
    std::string category;  // e.g. "conv fwd", "bn bwd"
    std::string label;     // the layer's shape, e.g. "1x1/1 256->64 56x56"
    int calls = 0;
    double ms = 0;         // summed over the calls
    size_t kernels = 0, memsets = 0;  // census: graph nodes added, summed over the calls
    std::map<size_t, size_t> memset_bytes;  // census: the memsets' sizes (bytes -> how many)
  };

  explicit OpTimer(cudaStream_t s) : stream_(s) {}
  ~OpTimer();
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

  void start();
  // Waits for the recorded work; rows in first-seen order, one per (category, label).
  std::vector<Row> stop();
  bool on() const { return mode_ == Mode::Time; }
  void start_census();
  std::vector<Row> stop_census();  // rows as stop()'s, with kernels and memsets instead of ms

  class Scope {
   public:
    Scope(OpTimer* t, size_t slot) : t_(t), slot_(slot) {}
    Scope(Scope&& o) noexcept : t_(o.t_), slot_(o.slot_) { o.t_ = nullptr; }
    Scope(const Scope&) = delete;
    ~Scope();

   private:
    OpTimer* t_;
    size_t slot_;
  };

  // `label` (a callable returning std::string) is only called while recording.
  template <typename F>
  Scope scope(const char* category, F&& label) {
    if (mode_ == Mode::Off) return Scope(nullptr, 0);
    return Scope(this, begin(category, label()));
  }

 private:
  size_t begin(const char* category, std::string label);
  void end(size_t slot);

  // Kernel and memset nodes of the graph the stream is capturing into (0, 0 when none).
  // The memsets not seen before are marked seen and, where `sizes` is given, counted there (bytes ->
  // how many).
  std::pair<size_t, size_t> graph_nodes(std::map<size_t, size_t>* sizes);
  std::vector<Row> rows(const std::vector<double>& ms) const;

  enum class Mode : uint8_t { Off, Time, Census };
  cudaStream_t stream_;
  Mode mode_ = Mode::Off;
  std::vector<std::pair<size_t, size_t>> counts_;  // census: per slot, the counts at begin, then what it added
  std::vector<std::map<size_t, size_t>> memset_sizes_;  // census: per slot, the sizes of the memsets it added
  std::unordered_set<cudaGraphNode_t> seen_memsets_;
  std::vector<cudaEvent_t> events_;  // 2 per slot, created as needed and reused
  std::vector<std::pair<std::string, std::string>> slots_;
};

}  // namespace gpu
}  // namespace worker
