#include "worker/gpu/conv_planner.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <initializer_list>
#include <string>
#include <thread>
#include <vector>

#include "worker/core/host.h"
#include "worker/gpu/check.h"
#include "worker/gpu/side_stream.h"

namespace worker {
namespace gpu {

namespace {

cudnnDataType_t cudnn_type(DType t) {
  switch (t) {
    case DType::F32: return CUDNN_DATA_FLOAT;
    case DType::BF16: return CUDNN_DATA_BFLOAT16;
    case DType::F16: return CUDNN_DATA_HALF;
  }
  return CUDNN_DATA_FLOAT;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

const float kOne = 1.f, kZero = 0.f;

// A tuner that has settled on a graph-API plan.
bool settled_on_graph(const std::unique_ptr<ConvTuner>& t) { return t && t->settled() && t->chose_graph(); }

// Every (non-null) pointer 16-byte aligned, as the graph-API engines want them.
bool aligned16(std::initializer_list<const void*> ptrs) {
  for (const void* q : ptrs)
    if (reinterpret_cast<uintptr_t>(q) & 15u) return false;
  return true;
}

// Temporary device buffers for the timed search (setup only; freed right after).
struct SearchBuffers {
  void* x = nullptr;
  void* y = nullptr;
  void* w = nullptr;
  void* ws = nullptr;
  size_t ws_bytes = 0;
  ~SearchBuffers() {
    cudaFree(x);
    cudaFree(y);
    cudaFree(w);
    cudaFree(ws);
  }
};

// The fastest successful result within the workspace limit; results come sorted by time.
// With `fma_only` (fp32 without TF32) tensor-core results are refused.
template <typename Perf>
const Perf* choose(const Perf* res, int n, size_t limit, bool fma_only, bool deterministic) {
  for (int i = 0; i < n; ++i) {
    if (res[i].status != CUDNN_STATUS_SUCCESS || res[i].memory > limit) continue;
    if (deterministic && res[i].determinism != CUDNN_DETERMINISTIC) continue;
    if (fma_only && res[i].mathType != CUDNN_FMA_MATH && res[i].mathType != CUDNN_DEFAULT_MATH)
      continue;
    return &res[i];
  }
  return nullptr;
}

// Binds a cuDNN handle to another stream for one scope.
class HandleOn {
 public:
  HandleOn(cudnnHandle_t h, cudaStream_t s, cudaStream_t back) : h_(h), back_(back) {
    if (s != back) CUDNN_CHECK(cudnnSetStream(h, s));
    moved_ = s != back;
  }
  ~HandleOn() {
    if (moved_) cudnnSetStream(h_, back_);
  }
  HandleOn(const HandleOn&) = delete;
  HandleOn& operator=(const HandleOn&) = delete;

 private:
  cudnnHandle_t h_;
  cudaStream_t back_;
  bool moved_ = false;
};

// p's tensor, filter and convolution descriptors for d (the math type the precision allows; the
// chosen algorithm's own is set later).
void describe(ConvPlan& p, const ConvDesc& d, cudnnDataType_t dt, cudnnMathType_t math) {
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&p.x));
  CUDNN_CHECK(cudnnCreateTensorDescriptor(&p.y));
  CUDNN_CHECK(cudnnCreateFilterDescriptor(&p.w));
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(p.x, CUDNN_TENSOR_NHWC, dt, d.n, d.cin, d.h, d.w));
  CUDNN_CHECK(cudnnSetTensor4dDescriptor(p.y, CUDNN_TENSOR_NHWC, dt, d.n, d.cout, d.ho, d.wo));
  CUDNN_CHECK(cudnnSetFilter4dDescriptor(p.w, dt, CUDNN_TENSOR_NHWC, d.cout, d.cin, d.kh, d.kw));
  for (cudnnConvolutionDescriptor_t* c : {&p.cf, &p.cd, &p.cw}) {
    CUDNN_CHECK(cudnnCreateConvolutionDescriptor(c));
    CUDNN_CHECK(cudnnSetConvolution2dDescriptor(*c, d.pad, d.pad, d.stride, d.stride, 1, 1,
                                                CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
    CUDNN_CHECK(cudnnSetConvolutionMathType(*c, math));
  }
}

// cuDNN's heuristics for the three directions of p (host work only: nothing runs on the device).
void ask_heuristics(cudnnHandle_t h, const ConvPlan& p, LegacyHeuristics& r) {
  CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(h, p.x, p.w, p.cf, p.y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT,
                                                     &r.nf, r.fwd));
  CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, p.w, p.y, p.cd, p.x,
                                                          CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &r.nd, r.data));
  CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, p.x, p.y, p.cw, p.w,
                                                            CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &r.nw,
                                                            r.filter));
}

}  // namespace

std::string conv_label(const ConvDesc& d) {
  return std::to_string(d.kh) + "x" + std::to_string(d.kw) + "/" + std::to_string(d.stride) + " " +
         std::to_string(d.cin) + "->" + std::to_string(d.cout) + " " + std::to_string(d.h) + "x" +
         std::to_string(d.w);
}

ConvPlan::~ConvPlan() {
  if (x) cudnnDestroyTensorDescriptor(x);
  if (y) cudnnDestroyTensorDescriptor(y);
  if (w) cudnnDestroyFilterDescriptor(w);
  if (cf) cudnnDestroyConvolutionDescriptor(cf);
  if (cd) cudnnDestroyConvolutionDescriptor(cd);
  if (cw) cudnnDestroyConvolutionDescriptor(cw);
}

ConvPlanner::ConvPlanner(const GpuOptions& opt, DevicePool& pool, Device& dev, Workspace& ws,
                         SideStream* side)
    : opt_(opt), pool_(pool), dev_(dev), ws_(ws), side_(side) {}

ConvPlanner::~ConvPlanner() = default;

// --- Plans

bool ConvPlanner::fusable(const ConvDesc& d) const {
  return opt_.precision == DType::F16 && opt_.fused_stats != FusedStats::Off && opt_.graph_engines &&
         d.cin % 8 == 0 && d.cout % 8 == 0;
}

cudnnMathType_t ConvPlanner::math_type() const {
  if (opt_.precision != DType::F32) return CUDNN_TENSOR_OP_MATH;
  return opt_.allow_tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
}

void ConvPlanner::plan_ahead(const std::vector<ConvDesc>& shapes) {
  // GpuOptions::plan_threads; 0 (auto): kAutoPlanThreads, at most the process's cores.
  const int most = opt_.plan_threads > 0 ? opt_.plan_threads : std::min(kAutoPlanThreads, process_cores());
  if (opt_.search != AlgoSearch::Heuristic || most < 2) return;
  std::vector<ConvDesc> todo;
  auto add = [&](const ConvDesc& d) {
    const Key k = key_of(d);
    if (plans_.count(k) || asked_.count(k)) return;
    for (const ConvDesc& t : todo)
      if (key_of(t) == k) return;
    todo.push_back(d);
  };
  for (const ConvDesc& d : shapes) {
    add(d);
    if (opt_.space_to_depth && s2d_applies(d)) add(s2d_conv(d));
  }
  if (todo.size() < 2) return;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<LegacyHeuristics> answers(todo.size());
  const int threads = std::min(most, int(todo.size()));
  std::vector<std::exception_ptr> failed(static_cast<size_t>(threads));
  std::atomic<size_t> next{0};
  auto ask = [&](int t) {
    cudnnHandle_t h = nullptr;
    try {
      CUDA_CHECK(cudaSetDevice(dev_.ordinal));  // (the handle is made on this thread's current device)
      CUDNN_CHECK(cudnnCreate(&h));
      for (size_t i; (i = next++) < todo.size();) {
        ConvPlan p;  // descriptors only, destroyed with it
        describe(p, todo[i], cudnn_type(opt_.precision), math_type());
        ask_heuristics(h, p, answers[i]);
      }
    } catch (...) {
      failed[size_t(t)] = std::current_exception();
    }
    if (h) cudnnDestroy(h);
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(ask, t);
  ask(0);
  for (std::thread& t : pool) t.join();
  for (const std::exception_ptr& e : failed)
    if (e) std::rethrow_exception(e);
  for (size_t i = 0; i < todo.size(); ++i) asked_.emplace(key_of(todo[i]), answers[i]);
  search_seconds_ += seconds_since(t0);
}

ConvPlan& ConvPlanner::plan(const ConvDesc& d, bool may_fuse) {
  const Key key = key_of(d);
  auto it = plans_.find(key);
  if (it != plans_.end()) return *it->second;

  const auto t0 = std::chrono::steady_clock::now();
  auto p = std::make_unique<ConvPlan>();
  p->desc = d;
  const bool fma_only = opt_.precision == DType::F32 && !opt_.allow_tf32;
  describe(*p, d, cudnn_type(opt_.precision), math_type());
  int on = 0, oc = 0, oh = 0, ow = 0;
  CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(p->cf, p->x, p->w, &on, &oc, &oh, &ow));
  if (oh != d.ho || ow != d.wo || on != d.n || oc != d.cout)
    throw GpuError(GpuError::Kind::Invalid,
                   "convolution descriptor is inconsistent: output " + std::to_string(d.ho) + "x" +
                       std::to_string(d.wo) + " declared, cuDNN computes " + std::to_string(oh) +
                       "x" + std::to_string(ow) + " (" + where() + ")");

  const size_t limit = opt_.workspace_limit;
  LegacyHeuristics h;
  if (opt_.search == AlgoSearch::Find) {
    const size_t es = dtype_size(opt_.precision);
    SearchBuffers b;
    CUDA_CHECK(cudaMalloc(&b.x, size_t(d.n) * d.h * d.w * d.cin * es));
    CUDA_CHECK(cudaMalloc(&b.y, size_t(d.n) * d.ho * d.wo * d.cout * es));
    CUDA_CHECK(cudaMalloc(&b.w, size_t(d.cout) * d.kh * d.kw * d.cin * es));
    // As large a workspace as the device allows, up to the limit.
    for (b.ws_bytes = limit; b.ws_bytes >= (size_t(1) << 20); b.ws_bytes /= 2) {
      if (cudaMalloc(&b.ws, b.ws_bytes) == cudaSuccess) break;
      cudaGetLastError();
      b.ws = nullptr;
    }
    if (!b.ws) b.ws_bytes = 0;
    CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(dev_.cudnn, p->x, b.x, p->w, b.w, p->cf, p->y,
                                                       b.y, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &h.nf,
                                                       h.fwd, b.ws, b.ws_bytes));
    CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(
        dev_.cudnn, p->w, b.w, p->y, b.y, p->cd, p->x, b.x, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &h.nd,
        h.data, b.ws, b.ws_bytes));
    CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(
        dev_.cudnn, p->x, b.x, p->y, b.y, p->cw, p->w, b.w, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT,
        &h.nw, h.filter, b.ws, b.ws_bytes));
    CUDA_CHECK(cudaStreamSynchronize(dev_.stream));
  } else {
    const auto ahead = asked_.find(key);  // plan_ahead's answer, the same as asking now
    if (ahead != asked_.end()) {
      h = ahead->second;
      asked_.erase(ahead);
      ++planned_ahead_;
    } else {
      ask_heuristics(dev_.cudnn, *p, h);
    }
  }
  const auto* f = choose(h.fwd, h.nf, limit, fma_only, opt_.deterministic);
  const auto* bd = choose(h.data, h.nd, limit, fma_only, opt_.deterministic);
  const auto* bw = choose(h.filter, h.nw, limit, fma_only, opt_.deterministic);
  if (!f || !bd || !bw)
    throw GpuError(GpuError::Kind::Cudnn,
                   "cuDNN offers no algorithm for convolution " + std::to_string(d.cin) + "->" +
                       std::to_string(d.cout) + " " + std::to_string(d.kh) + "x" +
                       std::to_string(d.kw) + "/" + std::to_string(d.stride) + " on " +
                       std::to_string(d.h) + "x" + std::to_string(d.w) + " within a " +
                       std::to_string(limit >> 20) + " MiB workspace (" + where() +
                       "): raise WORKER_CUDNN_WORKSPACE_MB");
  p->fwd = f->algo;
  p->bwd_data = bd->algo;
  p->bwd_filter = bw->algo;
  if (!fma_only) {
    CUDNN_CHECK(cudnnSetConvolutionMathType(p->cf, f->mathType));
    CUDNN_CHECK(cudnnSetConvolutionMathType(p->cd, bd->mathType));
    CUDNN_CHECK(cudnnSetConvolutionMathType(p->cw, bw->mathType));
  }
  // The exact sizes for the chosen algorithms and math types.
  CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(dev_.cudnn, p->x, p->w, p->cf, p->y, p->fwd,
                                                      &p->ws_fwd));
  CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(dev_.cudnn, p->w, p->y, p->cd, p->x,
                                                           p->bwd_data, &p->ws_data));
  CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(dev_.cudnn, p->x, p->y, p->cw, p->w,
                                                             p->bwd_filter, &p->ws_filter));
  search_seconds_ += seconds_since(t0);
  if (may_fuse && fusable(d)) {
    // Set up with the plan, outside the training loop; zero as the slot's rule wants.
    p->stats = new_slot(d.cout);
  }
  ConvPlan& ref = *p;
  ws_.note_plan(std::max({p->ws_fwd, p->ws_data, p->ws_filter}),
                size_t(d.cout) * d.kh * d.kw * d.cin * dtype_size(opt_.precision));
  plans_.emplace(key, std::move(p));
  if (opt_.space_to_depth && s2d_applies(d)) {
    ref.s2d_geom = s2d_desc(d);
    ref.s2d = &plan(s2d_conv(d), false);  // map insertions keep references valid
  }
  return ref;
}

ConvPlan& ConvPlanner::s2d_prepare(ConvPlan& p, const void* x, const void* w, bool forward) {
  const S2dDesc& g = p.s2d_geom;
  const size_t es = dtype_size(opt_.precision);
  if (!p.s2d_x) {
    const size_t xb = size_t(g.n) * g.hs * g.ws * g.cs * es, wb = size_t(g.cout) * g.kp * g.kp * g.cs * es;
    p.s2d_x = pool_.alloc(xb);
    p.s2d_w = pool_.alloc(wb);
    s2d_bytes_ += xb + wb;
  }
  // The backward reuses the forward's rearranged input of the same x (the model's input does
  // not change between a forward and its backward).
  if (forward || p.s2d_x_of != x) s2d_input(opt_.precision, x, p.s2d_x, g, dev_.stream);
  p.s2d_x_of = x;
  if (forward) s2d_weight(opt_.precision, w, p.s2d_w, g, dev_.stream);
  return *p.s2d;
}

ConvTuner::Make ConvPlanner::graph_plans(ConvDir dir, const ConvPlan& p, cudnnDataType_t io, float beta) {
  return [this, dir, &p, io, beta](std::string* why) {
    // Candidates fit the workspace already carved for the legacy plans (no new memory).
    return GraphConv::make(dev_.cudnn, dir, p.desc, io, beta, std::max(ws_.bytes(), size_t(64) << 20),
                           opt_.conv_candidates, why);
  };
}

void ConvPlanner::tuned(ConvPlan& p, int slot, float beta, const std::function<void()>& legacy, const void* x,
                        const void* w, const void* y, void* out, bool side) {
  // fp32 keeps the legacy plans (their math mode is what TF32 on/off asks for), and so do
  // channel counts that are no multiple of 8 (no 16-byte vectors along C).
  if (!opt_.graph_engines || opt_.precision == DType::F32 || p.desc.cin % 8 != 0 ||
      p.desc.cout % 8 != 0 || !aligned16({x, w, y, out})) {
    legacy();
    return;
  }
  static const ConvDir dirs[4] = {ConvDir::Fwd, ConvDir::Data, ConvDir::Data, ConvDir::Filter};
  const ConvDir dir = dirs[slot];
  if (!p.tune[slot])
    p.tune[slot] = std::make_unique<ConvTuner>(
        conv_label(p.desc) + " " + conv_dir_name(dir) + (beta != 0.f ? "+=" : ""), true);
  p.tune[slot]->run(
      legacy, graph_plans(dir, p, cudnn_type(opt_.precision), beta),
      [&](size_t bytes) { return side ? ws_.side(bytes) : ws_.main(bytes); }, x, w, y, out,
      side ? side_->stream() : dev_.stream, dev_.host_waits);
}

void ConvPlanner::fwd(ConvPlan& p, const void* x, const void* w, void* y) {
  tuned(p, 0, 0.f, [&] {
    void* ws = ws_.main(p.ws_fwd);
    CUDNN_CHECK(cudnnConvolutionForward(dev_.cudnn, &kOne, p.x, x, p.w, w, p.cf, p.fwd, ws, p.ws_fwd,
                                        &kZero, p.y, y));
  }, x, w, nullptr, y);
}

void ConvPlanner::dgrad(ConvPlan& p, const void* dy, const void* w, void* dx, bool accumulate) {
  tuned(p, accumulate ? 2 : 1, accumulate ? 1.f : 0.f, [&] {
    void* ws = ws_.main(p.ws_data);
    CUDNN_CHECK(cudnnConvolutionBackwardData(dev_.cudnn, &kOne, p.w, w, p.y, dy, p.cd, p.bwd_data, ws,
                                             p.ws_data, accumulate ? &kOne : &kZero, p.x, dx));
  }, nullptr, w, dy, dx);
}

void ConvPlanner::wgrad(ConvPlan& p, const void* x, const void* dy, void* dw, bool accumulate, bool side) {
  HandleOn on(dev_.cudnn, side ? side_->stream() : dev_.stream, dev_.stream);
  tuned(p, 3, accumulate ? 1.f : 0.f, [&] {
    void* ws = side ? ws_.side(p.ws_filter) : ws_.main(p.ws_filter);
    CUDNN_CHECK(cudnnConvolutionBackwardFilter(dev_.cudnn, &kOne, p.x, x, p.y, dy, p.cw, p.bwd_filter,
                                               ws, p.ws_filter, accumulate ? &kOne : &kZero, p.w, dw));
  }, x, nullptr, dy, dw, side);
}

float* ConvPlanner::stats_slot(ConvPlan& p, const void* y) {
  if (!p.stats) return nullptr;
  if (!p.stats_y) p.stats_y = y;
  if (p.stats_y == y) return p.stats;
  float*& slot = slots_[{&p, y}];
  if (!slot) slot = new_slot(p.desc.cout);  // as the plan's own: carved in the first steps
  return slot;
}

float* ConvPlanner::new_slot(int cout) {
  const size_t bytes = 2 * size_t(cout) * sizeof(float);
  float* slot = static_cast<float*>(pool_.alloc(bytes));
  CUDA_CHECK(cudaMemsetAsync(slot, 0, bytes, dev_.stream));  // zero, as the slot's rule wants
  stats_bytes_ += bytes;
  slot_ranges_.push_back({slot, bytes});
  return slot;
}

bool ConvPlanner::within_stats_output(const void* p, size_t bytes) const {
  const auto* b = static_cast<const char*>(p);
  for (const Range& r : slot_ranges_) {
    const auto* s = static_cast<const char*>(r.p);
    const size_t half = r.bytes / 2;
    if ((b >= s && b + bytes <= s + half) || (b >= s + half && b + bytes <= s + r.bytes)) return true;
  }
  return false;
}

bool ConvPlanner::fwd_stats(ConvPlan& p, float* slot, const void* x, const void* w, void* y,
                            const std::function<void()>& stats_pass) {
  if (!slot) {
    fwd(p, x, w, y);
    return false;
  }
  const bool always = opt_.fused_stats == FusedStats::Always;
  if (!p.tune[4]) {
    // Made at the first call, while the plain forward may still explore, so that still_tuning() waits
    // for this choice too.
    ConvTuner::Options o;
    o.wait_first_step = false;  // it starts after the plain forward's tuning, long after the first step
    o.always_graph = always;
    o.baseline = "unfused";
    p.tune[4] = std::make_unique<ConvTuner>(conv_label(p.desc) + " fwd+stats", true, o);
  }
  ConvTuner& t = *p.tune[4];
  const ConvTuner* plain = p.tune[0].get();
  if (!aligned16({x, w, y}) || (!always && !plain)) {
    fwd(p, x, w, y);  // no graph-API engine for these pointers: no fused one either
    t.settle();
    return false;
  }
  if (!always && !plain->settled()) {  // timed against the plain forward's settled choice only
    fwd(p, x, w, y);
    return false;
  }
  const ConvTuner::Legacy extra = stats_pass;
  return t.run(
      [&] { fwd(p, x, w, y); }, graph_plans(ConvDir::FwdStats, p, CUDNN_DATA_HALF, 0.f),
      [&](size_t bytes) { return ws_.main(bytes); }, x, w, nullptr, y, dev_.stream, dev_.host_waits, slot,
      &extra);
}

bool ConvPlanner::fwd_prologue(ConvPlan& p, float* slot, const void* x, const void* scale_bias, const void* w,
                               void* y, const std::function<bool()>& unfused,
                               const std::function<void()>& stats_pass,
                               const std::function<void()>& output_write) {
  if (!p.tune[5]) {
    // Made at the first call, while the forwards it is timed against may still explore, so that
    // still_tuning() waits for this choice too.
    ConvTuner::Options o;
    o.wait_first_step = false;
    o.always_graph = opt_.fused_stats == FusedStats::Always;
    o.baseline = "unfused";
    p.tune[5] = std::make_unique<ConvTuner>(conv_label(p.desc) + " " + conv_dir_name(ConvDir::FwdPrologue), true, o);
  }
  ConvTuner& t = *p.tune[5];
  const ConvTuner* stats = p.tune[4].get();
  if (!slot || !aligned16({x, w, y, scale_bias})) {
    unfused();
    t.settle();
    return false;
  }
  if (!stats || !stats->settled()) {  // timed against the settled unfused forward only
    unfused();
    return false;
  }
  // The unfused forward writes no sums where its choice is the plain convolution: the batch norm after it
  // then runs its statistics pass, which the fused graph saves.
  bool wrote_stats = true;
  const ConvTuner::Legacy run_unfused = [&] { wrote_stats = unfused(); };
  const ConvTuner::Legacy extra = [&] {
    if (!wrote_stats) stats_pass();
  };
  return t.run(
      run_unfused, graph_plans(ConvDir::FwdPrologue, p, CUDNN_DATA_HALF, 0.f),
      [&](size_t bytes) { return ws_.main(bytes); }, x, w, nullptr, y, dev_.stream, dev_.host_waits, slot,
      &extra, scale_bias, &output_write);
}

bool ConvPlanner::prologue_chosen(const ConvPlan& p) const { return settled_on_graph(p.tune[5]); }

bool ConvPlanner::stats_chosen(const ConvPlan& p) const { return settled_on_graph(p.tune[4]); }

int ConvPlanner::fused_shapes() const {
  int n = 0;
  for (const auto& kv : plans_) n += stats_chosen(*kv.second);
  return n;
}

void ConvPlanner::settle() {
  for (auto& kv : plans_)
    for (auto& t : kv.second->tune)
      if (t) t->settle();
}

std::vector<std::string> ConvPlanner::report() const {
  std::vector<std::string> lines;
  for (const auto& kv : plans_)
    for (const auto& t : kv.second->tune)
      if (t) lines.push_back(t->describe());
  return lines;
}

bool ConvPlanner::still_tuning() const {
  for (const auto& kv : plans_)
    for (const auto& t : kv.second->tune)
      if (t && !t->settled()) return true;
  return false;
}

}  // namespace gpu
}  // namespace worker
