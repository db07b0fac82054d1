#include "worker/gpu/captured_step.h"

#include <string>
#include <utility>

#include "worker/gpu/check.h"

namespace worker {
namespace gpu {

namespace {

OptScalars scalars_of(const StepValues& v, bool adam, float beta1, float beta2) {
  return adam ? adam_scalars(v.lr, beta1, beta2, v.step) : OptScalars{v.lr, 1.f, 1.f};
}

}  // namespace

CapturedStep::CapturedStep(DevicePool& pool, cudaStream_t s)
    : stream_(s), slot_(static_cast<OptScalars*>(pool.alloc(sizeof(OptScalars)))),
      lr_in_(static_cast<OptScalars*>(pool.alloc(sizeof(OptScalars)))) {}

const OptScalars* CapturedStep::scalars(const StepValues& v, bool adam, float beta1, float beta2,
                                        const DeviceLossScale* loss_scale) {
  if (!capturing_) {
    if (!loss_scale) {
      set_opt_scalars(slot_, scalars_of(v, adam, beta1, beta2), stream_);
      return slot_;
    }
    set_opt_scalars(lr_in_, OptScalars{v.lr}, stream_);
  } else {
    const Optimizer now{true, adam, beta1, beta2, v, loss_scale};
    const Optimizer& was = captured_;
    if (was.present && (was.adam != adam || was.beta1 != beta1 || was.beta2 != beta2 || was.values.lr != v.lr ||
                        was.values.step != v.step || was.loss_scale != loss_scale))
      throw GpuError(GpuError::Kind::Invalid,
                     "the optimizer calls of a captured step take different per-step values: one slot holds "
                     "them (" + where() + ")");
    captured_ = now;
    if (!loss_scale) return slot_;
  }
  // The same kernel in the uncaptured step and in the graph: the same bits.
  loss_scaled_opt_scalars(lr_in_, loss_scale, adam, beta1, beta2, slot_, stream_);
  return slot_;
}

void CapturedStep::capture(const std::function<void()>& body, const StepGraph::ZeroAlready& zero_already) {
  graph_.reset();
  auto graph = std::make_unique<StepGraph>(stream_);
  captured_ = {};
  capturing_ = true;
  try {
    graph->capture(body, zero_already);
  } catch (...) {
    capturing_ = false;
    throw;
  }
  capturing_ = false;
  graph_ = std::move(graph);
}

void CapturedStep::replay(const StepValues& v) {
  if (!graph_ || !graph_->ready())
    throw GpuError(GpuError::Kind::Invalid, "replay_step before capture_step (" + where() + ")");
  const Optimizer& o = captured_;
  if (o.present && o.loss_scale)
    set_opt_scalars(lr_in_, OptScalars{v.lr}, stream_);  // the graph derives the rest
  else if (o.present)
    set_opt_scalars(slot_, scalars_of(v, o.adam, o.beta1, o.beta2), stream_);
  graph_->launch();
}

CaptureInfo CapturedStep::info() const {
  if (!graph_) return {};
  return {graph_->kernel_nodes(), graph_->memset_nodes(), graph_->copy_nodes(), graph_->nodes(),
          graph_->dropped_memsets()};
}

}  // namespace gpu
}  // namespace worker
