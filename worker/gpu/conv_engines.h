// Convolutions through cuDNN's graph (backend) API, with each convolution's engine chosen by
// timing the candidates on the training's own calls.
//
// Why: the legacy API (cudnnConvolutionForward & co.) reaches only the engines behind its eight
// algorithm names. On an H200 (2026-12, cuDNN 9.19, bf16, batch 256) its best data gradient
// of ResNet-50's 1x1 256->64 convolution took 0.36 ms where the graph API's first heuristic
// choice took 0.16 ms, and PyTorch (graph API + cudnn.benchmark) spent 12.3 ms per step in the
// convolutions other than the stem against our 14.6 ms.
//
// How: a ConvTuner per convolution shape and direction. It runs the legacy plan until the host
// has waited for the device once after its first call (the end of the first step: the first
// step stays as fast as before, nothing is built for it); the next call builds up to
// GpuOptions::conv_candidates graph-API plans (the heuristics' order, modes A, B, then fallback;
// engines that compile at run time or lower the precision left out, workspace within what is
// already allocated) and times the legacy plan; each next call times one candidate, on real
// data, with CUDA events; once every time is in, the fastest stays. All candidates compute the
// same convolution, so exploring costs nothing but the slower candidates' extra microseconds.
// settle() (before capturing a CUDA graph) waits for the outstanding times and decides.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <cuda_runtime.h>
#include <cudnn.h>

#include "worker/core/ops.h"

namespace worker {
namespace gpu {

// FwdStats: the forward with cuDNN's genstats after it in the same graph (fp16 only: cuDNN has no
// bf16 engine for it), which writes the per-channel fp32 sum and sum of squares of y as well.
// FwdPrologue: FwdStats whose input is relu(x * scale + bias) computed as the convolution reads x
// (cuDNN's ConvBNfprop: the previous batch norm's apply + ReLU as a prologue; fp16 only, scale and bias
// fp16 per input channel).
enum class ConvDir : uint8_t { Fwd, Data, Filter, FwdStats, FwdPrologue };
const char* conv_dir_name(ConvDir d);

// One convolution direction as a cuDNN operation graph with its built execution plans.
// Tensors by role: x (the input / its gradient), w (the filter / its gradient), y (the output /
// its gradient); out = beta * out + conv(...), beta 0 or 1. FwdStats also writes `stats` (sum of y
// per channel at [0, cout), sum of squares at [cout, 2 cout), fp32; zero before the call, see
// stats_pairing.h). FwdPrologue as FwdStats, reading `prologue` (scale at [0, cin), bias at [cin, 2 cin),
// in the io type).
class GraphConv {
 public:
  // Null (and *why set) when the graph API offers no usable plan, or when this binary was
  // built without cudnn-frontend.
  static std::unique_ptr<GraphConv> make(cudnnHandle_t h, ConvDir dir, const ConvDesc& d,
                                         cudnnDataType_t io, float beta, size_t max_workspace,
                                         int max_plans, std::string* why);
  ~GraphConv();
  size_t plans() const;
  size_t workspace(size_t i) const;
  const std::string& name(size_t i) const;
  void run(size_t i, const void* x, const void* w, const void* y, void* out, void* ws,
           cudaStream_t s, float* stats = nullptr, const void* prologue = nullptr) const;

 private:
  struct Impl;
  explicit GraphConv(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

class ConvTuner {
 public:
  static constexpr int kTrials = 2;      // timed calls per candidate
  static constexpr int kBusyUs = 150;    // busy wait ahead of each timed call

  // legacy() runs the legacy-API plan; make() builds the graph-API plans (may return null);
  // workspace(bytes) returns at least that much device workspace.
  using Legacy = std::function<void()>;
  using Make = std::function<std::unique_ptr<GraphConv>(std::string* why)>;
  using Workspace = std::function<void*(size_t bytes)>;
  struct Options {
    // The first call runs the legacy plan untimed and the exploration starts after the host's next
    // wait (the first step untouched); off: the first call explores (a tuner that starts later).
    bool wait_first_step = true;
    // No timing: the first graph plan that builds runs every call (the legacy plan where none does).
    bool always_graph = false;
    // What candidate 0 is called in describe().
    std::string baseline = "legacy";
  };

  ConvTuner(std::string label, bool enabled) : ConvTuner(std::move(label), enabled, Options()) {}
  ConvTuner(std::string label, bool enabled, Options o)
      : label_(std::move(label)), enabled_(enabled), opt_(std::move(o)) {}
  ~ConvTuner();
  ConvTuner(const ConvTuner&) = delete;
  ConvTuner& operator=(const ConvTuner&) = delete;

  // Runs the convolution once, with the plan this call is due (see above). The graph plans
  // get x/w/y/out (the output's own role null) and `stats` (FwdStats). host_waits: how often the
  // host has waited for the device so far (a counter of the backend's). legacy_extra, when set,
  // runs after the legacy plan inside its timed trials only: the work the graph plans do besides
  // the convolution (FwdStats: our statistics pass). prologue: FwdPrologue's scale and bias. graph_extra,
  // when set, runs after a graph plan inside its timed trials only: what choosing it costs elsewhere
  // (FwdPrologue: the backward's write of the output the graph leaves unwritten). True when a graph plan
  // ran.
  bool run(const Legacy& legacy, const Make& make, const Workspace& workspace, const void* x,
           const void* w, const void* y, void* out, cudaStream_t s, int64_t host_waits,
           float* stats = nullptr, const Legacy* legacy_extra = nullptr, const void* prologue = nullptr,
           const Legacy* graph_extra = nullptr);
  // Waits for outstanding timings and fixes the choice (the fastest measured; the legacy plan
  // when nothing else was measured). Calls after this never explore.
  void settle();
  bool settled() const { return state_ == State::Done; }
  // e.g. "1x1/1 256->64 56x56 dgrad+=: graph eng67_k2=7 0.158 ms (legacy 0.359 ms, 3 tried)"
  std::string describe() const;
  bool chose_graph() const { return chosen_ > 0; }
  double chosen_ms() const;
  double legacy_ms() const;

 private:
  enum class State : uint8_t { First, Exploring, Done };
  void resolve(bool wait);

  std::string label_;
  bool enabled_;
  Options opt_;
  State state_ = State::First;
  int64_t first_wait_ = -1;  // host_waits at the first call
  std::unique_ptr<GraphConv> graph_;
  std::string why_;  // why the graph API is not used, when it is not
  int next_ = 0;     // trial the next exploring call runs: candidate next_ % candidates, where
                     // 0 = legacy, i = graph plan i-1
  int chosen_ = 0;
  std::vector<float> ms_;  // per candidate, fastest trial; < 0 while unknown
  std::vector<cudaEvent_t> ev_;  // start/end per trial
  int harvested_ = 0;            // trials whose times are read
  std::vector<int> failed_;      // candidates whose launch was refused
};

}  // namespace gpu
}  // namespace worker
