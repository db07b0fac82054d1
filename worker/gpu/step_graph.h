// One training step as a CUDA graph: the work a callable enqueues on the backend's stream is
// captured once (nothing runs while capturing) and then replayed with one launch per step, so
// the ~600 kernels of a ResNet-50 step cost no host time and no launch gaps. Everything the
// step touches must already be allocated (capture after a warm-up step), and its arguments
// are frozen: values that change between steps (learning rate, sample indices) must live in
// device memory or stay outside the graph.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include <cuda_runtime.h>

namespace worker {
namespace gpu {

// Every node of a graph (also of one under capture, from cudaStreamGetCaptureInfo).
std::vector<cudaGraphNode_t> graph_nodes_of(cudaGraph_t g);

class StepGraph {
 public:
  explicit StepGraph(cudaStream_t s) : stream_(s) {}
  ~StepGraph();
  StepGraph(const StepGraph&) = delete;
  StepGraph& operator=(const StepGraph&) = delete;

  // A range that is zero whenever the graph would zero it (a memset node of it is redundant).
  using ZeroAlready = std::function<bool(const void* p, size_t bytes)>;

  // Captures what `body` enqueues on the stream (replacing an earlier capture). The memsets to
  // zero of ranges `zero_already` vouches for are left out: each is removed and its
  // predecessors lead straight to its dependents.
  void capture(const std::function<void()>& body, const ZeroAlready& zero_already = nullptr);
  void launch();
  bool ready() const { return exec_ != nullptr; }
  size_t kernel_nodes() const { return kernels_; }  // kernels per replay
  size_t memset_nodes() const { return memsets_; }
  size_t copy_nodes() const { return copies_; }
  size_t nodes() const { return nodes_; }           // kernels, memsets, copies, ...
  size_t dropped_memsets() const { return dropped_; }  // left out by zero_already

 private:
  void reset();
  void drop_memsets(const ZeroAlready& zero_already);

  cudaStream_t stream_;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
  size_t kernels_ = 0, memsets_ = 0, copies_ = 0, nodes_ = 0, dropped_ = 0;
};

}  // namespace gpu
}  // namespace worker
