#include "worker/gpu/step_graph.h"

#include <algorithm>
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
  kernels_ = memsets_ = copies_ = nodes_ = dropped_ = 0;
}

std::vector<cudaGraphNode_t> graph_nodes_of(cudaGraph_t g) {
  size_t n = 0;
  CUDA_CHECK(cudaGraphGetNodes(g, nullptr, &n));
  std::vector<cudaGraphNode_t> nodes(n);
  CUDA_CHECK(cudaGraphGetNodes(g, nodes.data(), &n));
  nodes.resize(n);
  return nodes;
}

namespace {

std::vector<cudaGraphNode_t> neighbours(cudaGraphNode_t n, bool before) {
  size_t count = 0;
  auto get = [&](cudaGraphNode_t* out) {
    CUDA_CHECK(before ? cudaGraphNodeGetDependencies(n, out, nullptr, &count)
                      : cudaGraphNodeGetDependentNodes(n, out, nullptr, &count));
  };
  get(nullptr);
  std::vector<cudaGraphNode_t> v(count);
  if (count) get(v.data());
  v.resize(count);
  return v;
}

}  // namespace

void StepGraph::drop_memsets(const ZeroAlready& zero_already) {
  for (cudaGraphNode_t node : graph_nodes_of(graph_)) {
    cudaGraphNodeType t{};
    CUDA_CHECK(cudaGraphNodeGetType(node, &t));
    if (t != cudaGraphNodeTypeMemset) continue;
    cudaMemsetParams p{};
    CUDA_CHECK(cudaGraphMemsetNodeGetParams(node, &p));
    if (p.value != 0 || p.height != 1 || !zero_already(p.dst, p.elementSize * p.width)) continue;
    // Edges plain (captured on streams, no programmatic ones): each predecessor to each dependent
    // it does not lead to already.
    const std::vector<cudaGraphNode_t> from = neighbours(node, true), to = neighbours(node, false);
    CUDA_CHECK(cudaGraphDestroyNode(node));
    for (cudaGraphNode_t f : from) {
      const std::vector<cudaGraphNode_t> has = neighbours(f, false);
      for (cudaGraphNode_t d : to)
        if (std::find(has.begin(), has.end(), d) == has.end())
          CUDA_CHECK(cudaGraphAddDependencies(graph_, &f, &d, nullptr, 1));
    }
    ++dropped_;
  }
}

void StepGraph::capture(const std::function<void()>& body, const ZeroAlready& zero_already) {
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
  if (zero_already) drop_memsets(zero_already);
  CUDA_CHECK(cudaGraphInstantiate(&exec_, graph_, 0));
  const std::vector<cudaGraphNode_t> nodes = graph_nodes_of(graph_);
  nodes_ = nodes.size();
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
