#include "worker/gpu/step_graph.h"

#include <vector>

#include "worker/gpu/check.h"

namespace worker {
namespace gpu {

StepGraph::~StepGraph() { reset(); }

void StepGraph::reset() {
  if (exec_) cudaGraphExecDestroy(exec_);
  if (graph_) cudaGraphDestroy(graph_);
  exec_ = nullptr;
  graph_ = nullptr;
  kernels_ = memsets_ = copies_ = nodes_ = 0;
}

void StepGraph::capture(const std::function<void()>& body) {
  reset();
  // Thread-local: other threads (the NCCL watchdog) may keep calling CUDA meanwhile.
  CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  try {
    body();
  } catch (...) {
    cudaGraph_t g = nullptr;
    cudaStreamEndCapture(stream_, &g);  // leave the stream usable
    if (g) cudaGraphDestroy(g);
    cudaGetLastError();
    throw;
  }
  CUDA_CHECK(cudaStreamEndCapture(stream_, &graph_));
  CUDA_CHECK(cudaGraphInstantiate(&exec_, graph_, 0));
  CUDA_CHECK(cudaGraphGetNodes(graph_, nullptr, &nodes_));
  std::vector<cudaGraphNode_t> nodes(nodes_);
  CUDA_CHECK(cudaGraphGetNodes(graph_, nodes.data(), &nodes_));
  for (cudaGraphNode_t n : nodes) {
    cudaGraphNodeType t{};
    CUDA_CHECK(cudaGraphNodeGetType(n, &t));
    kernels_ += t == cudaGraphNodeTypeKernel;
    memsets_ += t == cudaGraphNodeTypeMemset;
    copies_ += t == cudaGraphNodeTypeMemcpy;
  }
  CUDA_CHECK(cudaGraphUpload(exec_, stream_));
}

void StepGraph::launch() {
  if (!exec_)
    throw GpuError(GpuError::Kind::Invalid, "StepGraph::launch before capture (" + where() + ")");
  CUDA_CHECK(cudaGraphLaunch(exec_, stream_));
}

}  // namespace gpu
}  // namespace worker
