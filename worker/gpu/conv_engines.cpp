#include "worker/gpu/conv_engines.h"

#include <algorithm>
#include <array>
#include <cstdio>
#include <exception>
#include <optional>

#include "worker/gpu/check.h"
#include "worker/gpu/kernels.h"

#ifdef WORKER_HAVE_CUDNN_FRONTEND
// The frontend's descriptor builders only (not its graph layer, which wants NVRTC at link time
// and a shared CUDA runtime): they wrap cuDNN's backend API and turn every failure into an
// exception with the reason.
#define CUDNN_FRONTEND_SKIP_JSON_LIB
#include <cudnn_frontend_ConvDesc.h>
#include <cudnn_frontend_EngineConfig.h>
#include <cudnn_frontend_ExecutionPlan.h>
#include <cudnn_frontend_Filters.h>
#include <cudnn_frontend_Heuristics.h>
#include <cudnn_frontend_Operation.h>
#include <cudnn_frontend_OperationGraph.h>
#include <cudnn_frontend_PointWiseDesc.h>
#include <cudnn_frontend_Tensor.h>
#include <cudnn_frontend_VariantPack.h>
#endif

namespace worker {
namespace gpu {

const char* conv_dir_name(ConvDir d) {
  switch (d) {
    case ConvDir::Fwd: return "fwd";
    case ConvDir::Data: return "dgrad";
    case ConvDir::Filter: return "wgrad";
    case ConvDir::FwdStats: return "fwd+stats";
    case ConvDir::FwdPrologue: return "bn+relu+fwd+stats";
  }
  return "?";
}

// --- GraphConv

#ifdef WORKER_HAVE_CUDNN_FRONTEND
namespace fe = cudnn_frontend;

struct GraphConv::Impl {
  cudnnHandle_t handle = nullptr;
  int64_t stats_c = 0;  // FwdStats: the channels of the sums
  size_t bias_offset = 0;  // FwdPrologue: the bias's byte offset after the scale (0: no prologue)
  std::vector<fe::ExecutionPlan> plans;
  std::vector<std::string> names;
};

namespace {

constexpr int64_t kUidX = 'x', kUidW = 'w', kUidY = 'y', kUidSum = 's', kUidSq = 'q', kUidScale = 'a',
                  kUidBias = 'b';
// FwdPrologue's virtual tensors (the prologue's intermediates, never in memory).
constexpr int64_t kUidScaled = 1001, kUidBiased = 1002, kUidRelu = 1003;

// is_virtual: an intermediate that lives only inside a fused kernel (FwdPrologue's), never in memory.
fe::Tensor nhwc(int64_t uid, int64_t n, int64_t c, int64_t h, int64_t w, cudnnDataType_t t, bool is_virtual = false) {
  const std::array<int64_t, 4> dim{n, c, h, w}, stride{c * h * w, 1, c * w, c};
  return fe::TensorBuilder()
      .setDim(4, dim.data())
      .setStride(4, stride.data())
      .setId(uid)
      .setAlignment(16)
      .setDataType(t)
      .setVirtual(is_virtual)
      .build();
}

// A per-channel vector of c values (genstats' fp32 sum and sum of squares; the prologue's scale and
// bias), NHWC strides as the frontend's graph layer gives them.
fe::Tensor channels(int64_t uid, int64_t c, cudnnDataType_t t = CUDNN_DATA_FLOAT) {
  const std::array<int64_t, 4> dim{1, c, 1, 1}, stride{c, 1, c, c};
  return fe::TensorBuilder()
      .setDim(4, dim.data())
      .setStride(4, stride.data())
      .setId(uid)
      .setAlignment(16)
      .setDataType(t)
      .build();
}

fe::Operation pointwise(cudnnPointwiseMode_t mode, const fe::Tensor& x, const fe::Tensor* b, const fe::Tensor& y) {
  const auto desc = fe::PointWiseDescBuilder().setMode(mode).setComputeType(CUDNN_DATA_FLOAT).build();
  auto op = fe::OperationBuilder(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  op.setxDesc(x).setyDesc(y).setpwDesc(desc);
  if (b) op.setbDesc(*b);
  return op.build();
}

// Engines whose numerics differ from the legacy plan's (lower precision somewhere, or a
// transform) or that compile kernels at run time (seconds each) are not candidates. (Split-K
// weight gradients, non-deterministic in the last bit, are: the legacy API picks them too.)
// Why an engine is not a candidate (the run-time compiled ones are counted for the report when
// nothing is left).
enum class Unwanted : uint8_t { No, RuntimeCompiled, Numerics };
// down_convert_ok (FwdPrologue): the prologue's fp32 result is rounded to the io type for the tensor
// cores, as the unfused path stores it: that note is no loss there.
Unwanted unwanted(cudnnBackendDescriptor_t cfg, bool down_convert_ok) {
  if (fe::hasBehaviorNote<CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION>(cfg)) return Unwanted::RuntimeCompiled;
  if ((!down_convert_ok && fe::hasNumericalNote<CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS>(cfg)) ||
      fe::hasNumericalNote<CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION>(cfg) ||
      fe::hasNumericalNote<CUDNN_NUMERICAL_NOTE_FFT>(cfg) ||
      fe::hasNumericalNote<CUDNN_NUMERICAL_NOTE_WINOGRAD>(cfg))
    return Unwanted::Numerics;
  return Unwanted::No;
}

}  // namespace

std::unique_ptr<GraphConv> GraphConv::make(cudnnHandle_t h, ConvDir dir, const ConvDesc& d,
                                           cudnnDataType_t io, float beta, size_t max_workspace,
                                           int max_plans, std::string* why) {
  try {
    const auto x = nhwc(kUidX, d.n, d.cin, d.h, d.w, io);
    const bool prologue = dir == ConvDir::FwdPrologue;
    // FwdPrologue: the convolution reads relu(x * scale + bias), computed in fp32 as it loads x (the
    // operations keep the descriptors they were built from).
    std::vector<fe::Operation> pro;
    std::optional<fe::Tensor> relu;
    if (prologue) {
      const auto scale = channels(kUidScale, d.cin, io), bias = channels(kUidBias, d.cin, io);
      const auto scaled = nhwc(kUidScaled, d.n, d.cin, d.h, d.w, CUDNN_DATA_FLOAT, true);
      const auto biased = nhwc(kUidBiased, d.n, d.cin, d.h, d.w, CUDNN_DATA_FLOAT, true);
      relu.emplace(nhwc(kUidRelu, d.n, d.cin, d.h, d.w, CUDNN_DATA_FLOAT, true));
      pro.push_back(pointwise(CUDNN_POINTWISE_MUL, x, &scale, scaled));
      pro.push_back(pointwise(CUDNN_POINTWISE_ADD, scaled, &bias, biased));
      pro.push_back(pointwise(CUDNN_POINTWISE_RELU_FWD, biased, nullptr, *relu));
    }
    const auto w = nhwc(kUidW, d.cout, d.cin, d.kh, d.kw, io);
    const auto y = nhwc(kUidY, d.n, d.cout, d.ho, d.wo, io);
    const std::array<int64_t, 2> pad{d.pad, d.pad}, stride{d.stride, d.stride}, dil{1, 1};
    const auto conv = fe::ConvDescBuilder()
                          .setComputeType(CUDNN_DATA_FLOAT)
                          .setMathMode(CUDNN_CROSS_CORRELATION)
                          .setSpatialDimCount(2)
                          .setSpatialStride(2, stride.data())
                          .setPrePadding(2, pad.data())
                          .setPostPadding(2, pad.data())
                          .setDilation(2, dil.data())
                          .build();
    auto op = [&] {
      switch (dir) {
        case ConvDir::Fwd:
        case ConvDir::FwdStats:
        case ConvDir::FwdPrologue:
          return fe::OperationBuilder(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR)
              .setxDesc(relu ? *relu : x).setwDesc(w).setyDesc(y).setcDesc(conv).setAlpha(1.f).setBeta(beta)
              .build();
        case ConvDir::Data:
          return fe::OperationBuilder(CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR)
              .setdxDesc(x).setwDesc(w).setdyDesc(y).setcDesc(conv).setAlpha(1.f).setBeta(beta)
              .build();
        case ConvDir::Filter:
          break;
      }
      return fe::OperationBuilder(CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR)
          .setxDesc(x).setdwDesc(w).setdyDesc(y).setcDesc(conv).setAlpha(1.f).setBeta(beta)
          .build();
    }();
    // FwdStats: genstats reads the convolution's y (a real tensor: written too) in the same graph.
    const bool stats = dir == ConvDir::FwdStats || prologue;
    const auto sum = channels(kUidSum, d.cout), sq = channels(kUidSq, d.cout);
    std::vector<fe::Operation const*> ops;
    for (const fe::Operation& o : pro) ops.push_back(&o);
    ops.push_back(&op);
    std::unique_ptr<fe::Operation> gen;
    if (stats) {
      gen = std::make_unique<fe::Operation>(fe::OperationBuilder(CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR)
                                                .setxDesc(y)
                                                .setSumDesc(sum)
                                                .setSqSumDesc(sq)
                                                .setGenStatsMode(CUDNN_GENSTATS_SUM_SQSUM)
                                                .setMathPrecision(CUDNN_DATA_FLOAT)
                                                .build());
      ops.push_back(gen.get());
    }
    auto graph = fe::OperationGraphBuilder()
                     .setHandle(h)
                     .setOperationGraph(int64_t(ops.size()), ops.data())
                     .build();
    auto impl = std::make_unique<Impl>();
    impl->handle = h;
    impl->stats_c = d.cout;
    impl->bias_offset = prologue ? size_t(d.cin) * (io == CUDNN_DATA_FLOAT ? 4 : 2) : 0;
    size_t configs = 0;
    int considered = 0, compiled = 0;
    // Mode A's list first; mode B (a different model) adds engines A ranks low or misses; then the
    // fallback list (for the fused graph, the probe's: docs/fusion-probe.md).
    for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_B, CUDNN_HEUR_MODE_FALLBACK}) {
      if (int(impl->plans.size()) >= max_plans) break;
      std::vector<fe::ManagedOpaqueDescriptor> cfgs;
      try {
        auto heur = fe::EngineHeuristicsBuilder_v8().setOperationGraph(graph).setHeurMode(mode).build();
        cfgs = heur.getEngineConfig(heur.getEngineConfigCount());
      } catch (const std::exception&) {
        continue;  // this mode offers nothing here
      }
      configs += cfgs.size();
      for (auto& cfg : cfgs) {
        if (int(impl->plans.size()) >= max_plans) break;
        const Unwanted no = unwanted(cfg->get_backend_descriptor(), prologue);
        if (no != Unwanted::No) {
          compiled += no == Unwanted::RuntimeCompiled;
          continue;
        }
        ++considered;
        try {
          auto plan = fe::ExecutionPlanBuilder().setHandle(h).setEngineConfig(cfg, graph.getTag()).build();
          if (plan.getWorkspaceSize() < 0 || size_t(plan.getWorkspaceSize()) > max_workspace) continue;
          const std::string tag = plan.getTag();
          if (std::find(impl->names.begin(), impl->names.end(), tag) != impl->names.end()) continue;
          impl->names.push_back(tag);
          impl->plans.push_back(std::move(plan));
        } catch (const std::exception&) {
          // This engine cannot run this convolution: the next one may.
        }
      }
    }
    if (impl->plans.empty()) {
      *why = "no graph-API plan builds (" + std::to_string(configs) + " engine configs, " +
             std::to_string(considered) + " wanted, " + std::to_string(compiled) + " run-time compiled)";
      return nullptr;
    }
    return std::unique_ptr<GraphConv>(new GraphConv(std::move(impl)));
  } catch (const std::exception& e) {
    *why = std::string("graph API: ") + e.what();
    return nullptr;
  }
}

GraphConv::GraphConv(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GraphConv::~GraphConv() = default;
size_t GraphConv::plans() const { return impl_->plans.size(); }
size_t GraphConv::workspace(size_t i) const { return size_t(impl_->plans[i].getWorkspaceSize()); }
const std::string& GraphConv::name(size_t i) const { return impl_->names[i]; }

void GraphConv::run(size_t i, const void* x, const void* w, const void* y, void* out, void* ws,
                    cudaStream_t s, float* stats, const void* prologue) const {
  // The output is one of x, w, y (by direction): its pointer replaces that role's. FwdStats: the
  // sums follow (its graph has them; a plain graph never gets `stats`); FwdPrologue: then the scale and
  // bias.
  std::array<void*, 7> ptrs{const_cast<void*>(x), const_cast<void*>(w), const_cast<void*>(y), nullptr, nullptr,
                            nullptr, nullptr};
  for (size_t k = 0; k < 3; ++k)
    if (!ptrs[k]) ptrs[k] = out;
  const std::array<int64_t, 7> uids{kUidX, kUidW, kUidY, kUidSum, kUidSq, kUidScale, kUidBias};
  int64_t n = 3;
  if (stats) {
    ptrs[3] = stats;
    ptrs[4] = stats + impl_->stats_c;
    n = 5;
  }
  if (impl_->bias_offset) {
    if (!stats || !prologue)
      throw GpuError(GpuError::Kind::Invalid, "a fused-prologue convolution needs its sums and its scale and bias");
    ptrs[5] = const_cast<void*>(prologue);
    ptrs[6] = static_cast<char*>(const_cast<void*>(prologue)) + impl_->bias_offset;
    n = 7;
  }
  (void)s;  // the handle is bound to the backend's stream
  auto pack = fe::VariantPackBuilder()
                  .setWorkspacePointer(ws)
                  .setDataPointers(n, ptrs.data())
                  .setUids(n, uids.data())
                  .build();
  CUDNN_CHECK(cudnnBackendExecute(impl_->handle, impl_->plans[i].get_raw_desc(), pack.get_raw_desc()));
}

#else  // built without cudnn-frontend: the legacy API only

struct GraphConv::Impl {};
std::unique_ptr<GraphConv> GraphConv::make(cudnnHandle_t, ConvDir, const ConvDesc&, cudnnDataType_t,
                                           float, size_t, int, std::string* why) {
  *why = "built without cudnn-frontend";
  return nullptr;
}
GraphConv::GraphConv(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GraphConv::~GraphConv() = default;
size_t GraphConv::plans() const { return 0; }
size_t GraphConv::workspace(size_t) const { return 0; }
const std::string& GraphConv::name(size_t) const {
  static const std::string none;
  return none;
}
void GraphConv::run(size_t, const void*, const void*, const void*, void*, void*, cudaStream_t, float*,
                    const void*) const {}

#endif

// --- ConvTuner

ConvTuner::~ConvTuner() {
  for (cudaEvent_t e : ev_) cudaEventDestroy(e);
}

bool ConvTuner::run(const Legacy& legacy, const Make& make, const Workspace& workspace,
                    const void* x, const void* w, const void* y, void* out, cudaStream_t s,
                    int64_t host_waits, float* stats, const Legacy* legacy_extra, const void* prologue,
                    const Legacy* graph_extra) {
  auto graph_run = [&](int i) {
    graph_->run(size_t(i), x, w, y, out, workspace(graph_->workspace(size_t(i))), s, stats, prologue);
  };
  if (state_ == State::First) {
    if (first_wait_ < 0) first_wait_ = host_waits;
    if (!enabled_ || (opt_.wait_first_step && host_waits == first_wait_)) {
      legacy();  // the first step: untimed (it loads modules), nothing built
      if (!enabled_) state_ = State::Done;
      return false;
    }
    graph_ = make(&why_);
    ms_.assign(1 + (graph_ ? graph_->plans() : 0), -1.f);
    state_ = ms_.size() > 1 ? State::Exploring : State::Done;
    if (opt_.always_graph && state_ == State::Exploring) {
      chosen_ = 1;  // untimed: the first plan that built
      state_ = State::Done;
    }
  }
  const int cands = int(ms_.size()), trials = cands * kTrials;
  if (state_ == State::Exploring) {
    if (next_ < trials) {
      if (ev_.empty()) {
        ev_.resize(2 * size_t(trials));
        for (cudaEvent_t& e : ev_) CUDA_CHECK(cudaEventCreate(&e));
      }
      const int c = next_ % cands;
      busy_wait(kBusyUs, s);
      CUDA_CHECK(cudaEventRecord(ev_[2 * size_t(next_)], s));
      bool ran = true;
      if (c == 0) {
        legacy();
        if (legacy_extra) (*legacy_extra)();
      } else {
        try {
          graph_run(c - 1);
          if (graph_extra) (*graph_extra)();
        } catch (const GpuError& e) {  // refused at launch: never chosen, this call runs legacy
          ran = false;
          why_ = std::string("a graph plan failed to run: ") + e.what();
        }
      }
      CUDA_CHECK(cudaEventRecord(ev_[2 * size_t(next_) + 1], s));
      if (!ran) {
        failed_.push_back(c);
        legacy();
      }
      ++next_;
      return ran && c != 0;
    }
    resolve(false);
  }
  if (chosen_ > 0) {
    try {
      graph_run(chosen_ - 1);
      return true;
    } catch (const GpuError& e) {
      if (!opt_.always_graph) throw;  // (a timed choice ran before)
      why_ = std::string("the graph plan failed to run: ") + e.what();
      chosen_ = 0;
    }
  }
  legacy();
  return false;
}

void ConvTuner::resolve(bool wait) {
  const int cands = int(ms_.size());
  for (; harvested_ < next_; ++harvested_) {
    cudaEvent_t end = ev_[2 * size_t(harvested_) + 1];
    if (wait) {
      CUDA_CHECK(cudaEventSynchronize(end));
    } else {
      const cudaError_t q = cudaEventQuery(end);
      if (q == cudaErrorNotReady) return;  // decide on a later call
      CUDA_CHECK(q);
    }
    float ms = 0;
    CUDA_CHECK(cudaEventElapsedTime(&ms, ev_[2 * size_t(harvested_)], end));
    float& best = ms_[size_t(harvested_ % cands)];
    if (best < 0 || ms < best) best = ms;
  }
  if (!wait && next_ < cands * kTrials) return;
  for (int i : failed_) ms_[size_t(i)] = -1.f;
  chosen_ = 0;
  float best = ms_[0];
  for (int i = 1; i < cands; ++i)
    if (ms_[size_t(i)] >= 0 && (best < 0 || ms_[size_t(i)] < best)) {
      chosen_ = i;
      best = ms_[size_t(i)];
    }
  state_ = State::Done;
  for (cudaEvent_t e : ev_) cudaEventDestroy(e);
  ev_.clear();
}

void ConvTuner::settle() {
  if (state_ == State::Exploring) resolve(true);
  state_ = State::Done;
}

double ConvTuner::chosen_ms() const { return ms_.empty() ? -1 : ms_[size_t(chosen_)]; }
double ConvTuner::legacy_ms() const { return ms_.empty() ? -1 : ms_[0]; }

std::string ConvTuner::describe() const {
  char b[96];
  std::string s = label_ + ": ";
  const std::string& base = opt_.baseline;
  if (chosen_ > 0 && ms_[size_t(chosen_)] < 0)  // always_graph: nothing timed
    return s + "graph " + graph_->name(size_t(chosen_ - 1)) + " (untimed, " + std::to_string(ms_.size() - 1) +
           " built)";
  if (chosen_ > 0) {
    std::snprintf(b, sizeof b, " %.3f ms (%s %.3f ms, %zu tried)", ms_[size_t(chosen_)], base.c_str(), ms_[0],
                  ms_.size() - 1);
    return s + "graph " + graph_->name(size_t(chosen_ - 1)) + b;
  }
  if (!ms_.empty() && ms_[0] >= 0) {
    std::snprintf(b, sizeof b, " %.3f ms (%zu graph plans slower)", ms_[0], ms_.size() - 1);
    return s + base + b + (why_.empty() ? "" : "; " + why_);
  }
  return s + base + (why_.empty() ? (enabled_ ? " (not tuned yet)" : "") : " (" + why_ + ")");
}

}  // namespace gpu
}  // namespace worker
