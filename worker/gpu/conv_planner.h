// Convolution plans, one per shape: the legacy cuDNN API's algorithms, chosen once per shape by
// cuDNN's heuristics or a timed search (AlgoSearch); per direction, the fastest of the legacy plan
// and a few graph-API engines, timed on the first calls (conv_engines.h); the stem in
// space-to-depth form (space_to_depth.cu); in fp16, the forward that also writes its batch norm's
// sums (conv+genstats, fwd_stats()). Each direction runs with its piece of the workspace the
// two streams share (workspace.h): a weight gradient on the side stream from its end.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <cuda_runtime.h>
#include <cudnn.h>

#include "worker/core/ops.h"
#include "worker/gpu/conv_engines.h"
#include "worker/gpu/device.h"
#include "worker/gpu/gpu_options.h"
#include "worker/gpu/kernels.h"
#include "worker/gpu/pool.h"
#include "worker/gpu/workspace.h"

namespace worker {
namespace gpu {

class SideStream;

// One convolution shape's cuDNN descriptors and chosen algorithms (the legacy API), their
// workspace needs, its space-to-depth form, and its tuners.
struct ConvPlan {
  ConvDesc desc;
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  // One descriptor per direction: each carries the math type of the algorithm chosen for it.
  cudnnConvolutionDescriptor_t cf = nullptr, cd = nullptr, cw = nullptr;
  cudnnConvolutionFwdAlgo_t fwd{};
  cudnnConvolutionBwdDataAlgo_t bwd_data{};
  cudnnConvolutionBwdFilterAlgo_t bwd_filter{};
  size_t ws_fwd = 0, ws_data = 0, ws_filter = 0;
  // Forward and weight gradient through the space-to-depth form (the stem), when it applies:
  // its plan, and its input and filter buffers (the data gradient keeps the plain form).
  ConvPlan* s2d = nullptr;
  S2dDesc s2d_geom;
  void* s2d_x = nullptr;
  void* s2d_w = nullptr;
  const void* s2d_x_of = nullptr;  // the x that s2d_x holds rearranged
  // Engine choice per direction: fwd, dgrad, dgrad accumulating, wgrad, fwd+stats, and fwd+stats with the
  // previous batch norm's apply + ReLU as its prologue (conv_engines.h).
  std::unique_ptr<ConvTuner> tune[6];
  // fp16 conv+genstats: the statistics slot of this shape's first output (sum of y per channel, then
  // sum of squares: 2 * cout fp32, zero between uses; stats_pairing.h). Null where the fusion does not
  // apply.
  float* stats = nullptr;
  const void* stats_y = nullptr;  // the output whose slot `stats` is (ConvPlanner::stats_slot)

  ConvPlan() = default;
  ~ConvPlan();
  ConvPlan(const ConvPlan&) = delete;
  ConvPlan& operator=(const ConvPlan&) = delete;
};

// What cuDNN's heuristics rank for one shape's three directions (the legacy API's algorithms).
struct LegacyHeuristics {
  cudnnConvolutionFwdAlgoPerf_t fwd[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  cudnnConvolutionBwdDataAlgoPerf_t data[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
  cudnnConvolutionBwdFilterAlgoPerf_t filter[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
  int nf = 0, nd = 0, nw = 0;
};

// "3x3/1 64->64 56x56": a shape in the per-operation profile and the tuners' report.
std::string conv_label(const ConvDesc& d);

class ConvPlanner {
 public:
  // side: the weight-gradient stream (null when there is none).
  ConvPlanner(const GpuOptions& opt, DevicePool& pool, Device& dev, Workspace& ws, SideStream* side);
  ~ConvPlanner();
  ConvPlanner(const ConvPlanner&) = delete;
  ConvPlanner& operator=(const ConvPlanner&) = delete;

  // The plan of this shape, made at its first call (with the space-to-depth form's beside it
  // where that applies). References stay valid.
  ConvPlan& plan(const ConvDesc& d) { return plan(d, true); }
  // Asks cuDNN's heuristics for these shapes (and their space-to-depth forms) on
  // GpuOptions::plan_threads threads, each with a cuDNN handle of its own, so that plan() finds the
  // answers ready. Only with AlgoSearch::Heuristic and more than one thread (the timed search runs
  // its candidates on the device, one shape at a time).
  void plan_ahead(const std::vector<ConvDesc>& shapes);
  int planned_ahead() const { return planned_ahead_; }  // shapes whose answers plan_ahead brought
  // The space-to-depth form's input (and, in the forward, its filter from w, the compute-dtype
  // weight) for this call: p.s2d_x, p.s2d_w. Returns the form's plan.
  ConvPlan& s2d_prepare(ConvPlan& p, const void* x, const void* w, bool forward);
  // One convolution direction through its tuner (legacy plan or graph-API engine), on the main
  // stream; out = conv, or out += conv with `accumulate`.
  void fwd(ConvPlan& p, const void* x, const void* w, void* y);
  void dgrad(ConvPlan& p, const void* dy, const void* w, void* dx, bool accumulate);
  // side: on the side stream, inside a Workspace side task (the cuDNN handle is bound to that
  // stream meanwhile).
  void wgrad(ConvPlan& p, const void* x, const void* dy, void* dw, bool accumulate, bool side);
  // fp16 conv+genstats: the statistics slot of this shape's convolution writing y: p.stats for the
  // first output seen, a slot of its own for each other one (a projection block's two 1x1
  // convolutions can have one shape, and the join takes both their sums at once). Null where the
  // fusion does not apply.
  float* stats_slot(ConvPlan& p, const void* y);
  // The forward, writing y's sums into `slot` (stats_slot's) as well where this shape's choice is the
  // fused graph (true then; the slot zero before). The choice (GpuOptions::fused_stats): timed once the plain
  // forward's own choice is settled, the fused plans against that plain plan followed by
  // `stats_pass` (our statistics pass over y, as the batch norm would run it), on the training's
  // own calls like every tuner; or the first fused plan untimed (Always). The stem's
  // space-to-depth form never comes here.
  bool fwd_stats(ConvPlan& p, float* slot, const void* x, const void* w, void* y,
                 const std::function<void()>& stats_pass);
  // fp16: the forward of relu(x * scale + bias) (a training batch norm's apply + ReLU, scale_bias: its
  // scale then bias in fp16, 2 cin values) with y's sums into `slot`, as one cuDNN graph
  // (ConvDir::FwdPrologue), where this shape's timed choice is that graph: true then (the batch norm's
  // output never written). Else `unfused` runs: the apply into memory, then the forward (fwd_stats); it
  // returns whether that forward wrote the sums. The choice is timed once this shape's
  // fwd_stats choice is settled: the fused plans, each followed by `output_write` (what the fused choice
  // costs the backward: writing the batch norm's output, a write of its bytes), against `unfused`
  // (followed by `stats_pass` where that forward writes no sums); before then `unfused` runs untimed.
  bool fwd_prologue(ConvPlan& p, float* slot, const void* x, const void* scale_bias, const void* w, void* y,
                    const std::function<bool()>& unfused, const std::function<void()>& stats_pass,
                    const std::function<void()>& output_write);
  // The fused forward is this shape's settled choice (the profile's label).
  bool stats_chosen(const ConvPlan& p) const;
  bool prologue_chosen(const ConvPlan& p) const;
  // Shapes whose settled choice is the fused forward.
  int fused_shapes() const;

  bool still_tuning() const;  // a convolution engine still being timed
  // Waits for the outstanding timings and fixes every choice (before a CUDA graph is captured).
  void settle();
  // One line per convolution shape and direction: which plan runs it and its measured time.
  std::vector<std::string> report() const;
  double search_seconds() const { return search_seconds_; }  // choosing algorithms so far
  size_t s2d_bytes() const { return s2d_bytes_; }  // the space-to-depth forms' buffers
  size_t stats_bytes() const { return stats_bytes_; }  // the fp16 statistics slots
  // [p, p + bytes) lies inside one half of a statistics slot: its sums or its sums of squares, the
  // two outputs cuDNN's genstats zeroes one by one (the backend's own zeroings take whole slots).
  bool within_stats_output(const void* p, size_t bytes) const;

 private:
  using Key = std::tuple<int, int, int, int, int, int, int, int, int>;
  // may_fuse: false for the stem's space-to-depth form (which loses fused: docs/fusion-probe.md).
  ConvPlan& plan(const ConvDesc& d, bool may_fuse);
  bool fusable(const ConvDesc& d) const;
  cudnnMathType_t math_type() const;  // the descriptors' math type before an algorithm is chosen
  static Key key_of(const ConvDesc& d) { return Key{d.n, d.h, d.w, d.cin, d.cout, d.kh, d.kw, d.stride, d.pad}; }
  float* new_slot(int cout);  // a statistics slot for cout channels, zeroed
  // What builds the graph-API candidates of one direction of p (ConvTuner's make).
  ConvTuner::Make graph_plans(ConvDir dir, const ConvPlan& p, cudnnDataType_t io, float beta);
  // x/w/y by role, the output's role null; `side` as in wgrad.
  void tuned(ConvPlan& p, int slot, float beta, const std::function<void()>& legacy, const void* x,
             const void* w, const void* y, void* out, bool side = false);

  GpuOptions opt_;
  DevicePool& pool_;
  Device& dev_;
  Workspace& ws_;
  SideStream* side_;
  std::map<Key, std::unique_ptr<ConvPlan>> plans_;
  std::map<Key, LegacyHeuristics> asked_;  // plan_ahead's answers that plan() has not taken yet
  int planned_ahead_ = 0;
  double search_seconds_ = 0;
  size_t s2d_bytes_ = 0;
  size_t stats_bytes_ = 0;
  std::map<std::pair<const ConvPlan*, const void*>, float*> slots_;  // stats_slot's others, by plan and output
  std::vector<Range> slot_ranges_;  // every statistics slot
};

}  // namespace gpu
}  // namespace worker
