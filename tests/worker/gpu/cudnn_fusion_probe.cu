// Which cuDNN graph-API fusions of a convolution with its batch norm run on this GPU, on every distinct
// convolution of ResNet-50 (torchvision's v1.5 layout, 224 px, --batch images), and what each would save
// against the unfused chain the trainer runs now: the plain cuDNN convolution and worker/gpu/bn.cu's own
// passes (statistics, apply [+ residual] + ReLU, backward reduction, backward dx), each captured from the
// trainer's launchers and replayed alone, so that every fused graph is timed against exactly the passes it
// replaces. The patterns (../shared/research/perf-fusion.md §1; fp16 with FP16 scale/bias where the cuDNN
// documentation says so, FP32 mean/invstd/scale/bias for the BN backward weights):
//   forward   conv+genstats; ConvBNfprop (scale-bias-ReLU + conv + genstats); BN finalize; SBAR / DBAR
//             (scale-bias-add-ReLU at the joins, dual at projection joins); DBARCS (SBAR/DBAR + the next
//             block's 1x1 conv + genstats, Hopper only)
//   backward  DgradDreluBNBwdWeight; dBNApply (dx = A*dy + B*x + C); ConvBNwgrad (scale-bias-ReLU + wgrad);
//             the join's dgrad + skip gradient + dReLU + BN weight gradients (dual: two BNs) and its dBNApply
//   bf16      controls on the generic runtime-fusion engine: scale-bias-ReLU + conv without statistics;
//             conv + one reduction; dgrad + dReLU + one reduction
// For each row: supported (engine) or the reason, plan build time, median device time (CUDA events, each
// run queued behind a busy kernel) of the fused graph and of the unfused chain, and the fused result
// against the unfused chain run in fp32 on the same inputs (relative max error and L2). The tolerance is
// computed, not chosen: the fp32 chain is run again on the unrounded inputs, which measures what rounding
// the inputs to their storage type alone does (`in`); tol = 2 * (in + u), u the output type's rounding.
// Output: one line per row as it finishes, then a Markdown table, then the saving per training step summed
// over ResNet-50's layers (each layer once per step, forward and backward as they occur).
// Usage: cudnn_fusion_probe [--batch 256] [--budget-s 300] [--reps 20] [--plans 1] [--only REGEX]
//                           [--no-controls] [--list]
// Exit: 0 done (unsupported patterns included), 1 a GPU error stopped it (the summary is still printed),
// 2 bad arguments, 77 no GPU visible.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <CLI/CLI.hpp>
#include <cudnn_frontend.h>

#include "worker/gpu/check.h"
#include "worker/gpu/dtype.cuh"
#include "worker/gpu/kernels.h"

// Built with NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING (the frontend then needs no NVRTC at link time) and the
// shared CUDA runtime (the frontend's dlopen of libcudart finds this one).
namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;
}

namespace {

namespace fe = cudnn_frontend;
namespace wg = worker::gpu;
using worker::DType;
using wg::BnMask;
using Attr = fe::graph::Tensor_attributes;
using TensorPtr = std::shared_ptr<Attr>;
using Pack = std::unordered_map<TensorPtr, void*>;
using Mode = fe::PointwiseMode_t;
constexpr fe::DataType_t kFloat = fe::DataType_t::FLOAT;
constexpr float kEps = 1e-5f, kMomentum = 0.1f;  // the trainer's batch norm (PyTorch's defaults)

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// A storage type: its cuDNN and trainer names and the relative error of one rounding to it (round to
// nearest: half an ulp of 1). fp32 counts 16 ulps: the few fp32 operations between a reference's inputs
// and a fused graph's fp32 outputs (sums, finalize) each round once.
struct Dt {
  const char* name;
  fe::DataType_t fe;
  DType wk;
  size_t size;
  double unit;
};
const Dt kF16{"fp16", fe::DataType_t::HALF, DType::F16, 2, 0x1p-11};
const Dt kBF16{"bf16", fe::DataType_t::BFLOAT16, DType::BF16, 2, 0x1p-8};
const Dt kF32{"fp32", fe::DataType_t::FLOAT, DType::F32, 4, 0x1p-20};

// --- Device kernels: random inputs, rounding, exact statistics, error metrics

// Uniform in [-1, 1), a pure function of (i, seed) (splitmix64), on the host and the device alike.
__host__ __device__ inline float uniform(uint64_t i, uint64_t seed) {
  uint64_t z = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return float(z >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

unsigned grid_for(size_t n) { return unsigned(std::min<size_t>((n + 255) / 256, 4096)); }

#define GRID_STRIDE(i, n) \
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < (n); i += size_t(gridDim.x) * blockDim.x)

__global__ void fill_kernel(float* u, size_t n, uint64_t seed, float scale, float shift, bool relu) {
  GRID_STRIDE(i, n) {
    const float v = uniform(i, seed) * scale + shift;
    u[i] = relu && v < 0.f ? 0.f : v;
  }
}

// h = u rounded to T; r = h widened back to fp32 (what a graph reading h computes with).
template <typename T>
__global__ void round_kernel(const float* u, T* h, float* r, size_t n) {
  GRID_STRIDE(i, n) {
    const T t = wg::from_f<T>(u[i]);
    h[i] = t;
    r[i] = wg::to_f(t);
  }
}

// out = g where x > 0, else 0 (ReLU backward with the mask from the ReLU's output x).
__global__ void relu_mask_kernel(const float* g, const float* x, float* out, size_t n) {
  GRID_STRIDE(i, n) out[i] = x[i] > 0.f ? g[i] : 0.f;
}

// Per-channel sums of x (m rows of c channels, NHWC) and of its squares, in double: sums[ch], sums[c + ch].
__global__ void channel_sums_kernel(const float* __restrict__ x, int64_t m, int c, double* sums) {
  __shared__ double sh[2][8][32];
  const int ch = blockIdx.x * 32 + threadIdx.x;
  double s = 0, q = 0;
  if (ch < c)
    for (int64_t r = int64_t(blockIdx.y) * 8 + threadIdx.y; r < m; r += int64_t(gridDim.y) * 8) {
      const double v = x[size_t(r) * c + ch];
      s += v;
      q += v * v;
    }
  sh[0][threadIdx.y][threadIdx.x] = s;
  sh[1][threadIdx.y][threadIdx.x] = q;
  __syncthreads();
  if (threadIdx.y != 0 || ch >= c) return;
  for (int y = 1; y < 8; ++y) {
    s += sh[0][y][threadIdx.x];
    q += sh[1][y][threadIdx.x];
  }
  atomicAdd(&sums[ch], s);
  atomicAdd(&sums[c + ch], q);
}

// The error of a against the reference b: sums of squares and maxima (non-negative doubles compare as
// their bit patterns do, so the maxima go through the integer atomicMax).
struct ErrAcc {
  double d2, b2;
  unsigned long long dmax, bmax;
  unsigned long long bad;  // elements of a or b that are not finite
};

template <typename T>
__global__ void err_kernel(const T* __restrict__ a, const float* __restrict__ b, size_t n, ErrAcc* acc) {
  double d2 = 0, b2 = 0, dm = 0, bm = 0;
  unsigned long long bad = 0;
  GRID_STRIDE(i, n) {
    const double av = wg::to_f(a[i]), bv = b[i];
    if (!isfinite(av) || !isfinite(bv)) {
      ++bad;
      continue;
    }
    const double d = fabs(av - bv);
    d2 += d * d;
    b2 += bv * bv;
    dm = fmax(dm, d);
    bm = fmax(bm, fabs(bv));
  }
  for (int o = 16; o > 0; o >>= 1) {
    d2 += __shfl_down_sync(0xffffffffu, d2, o);
    b2 += __shfl_down_sync(0xffffffffu, b2, o);
    dm = fmax(dm, __shfl_down_sync(0xffffffffu, dm, o));
    bm = fmax(bm, __shfl_down_sync(0xffffffffu, bm, o));
    bad += __shfl_down_sync(0xffffffffu, bad, o);
  }
  if ((threadIdx.x & 31) != 0) return;
  atomicAdd(&acc->d2, d2);
  atomicAdd(&acc->b2, b2);
  atomicMax(&acc->dmax, static_cast<unsigned long long>(__double_as_longlong(dm)));
  atomicMax(&acc->bmax, static_cast<unsigned long long>(__double_as_longlong(bm)));
  atomicAdd(&acc->bad, bad);
}

// --- Device memory

class Buf {
 public:
  explicit Buf(size_t bytes) {
    bytes = std::max<size_t>(bytes, 16);
    CUDA_CHECK(cudaMalloc(&p_, bytes));
    const cudaError_t e = cudaMemset(p_, 0, bytes);
    if (e != cudaSuccess) {
      cudaFree(p_);
      wg::throw_cuda(e, "cudaMemset(p_, 0, bytes)", __FILE__, __LINE__);
    }
  }
  ~Buf() { cudaFree(p_); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
  void* get() const { return p_; }

 private:
  void* p_ = nullptr;
};

// Every device buffer of one case, zeroed when allocated, freed together when the case ends.
class Arena {
 public:
  void* bytes(size_t n) {
    bufs_.push_back(std::make_unique<Buf>(n));
    return bufs_.back()->get();
  }
  float* f32(size_t n) { return static_cast<float*>(bytes(n * sizeof(float))); }
  void* of(const Dt& dt, size_t n) { return bytes(n * dt.size); }

 private:
  std::vector<std::unique_ptr<Buf>> bufs_;
};

std::vector<float> to_host(const float* d, size_t n) {
  std::vector<float> h(n);
  CUDA_CHECK(cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
  return h;
}

void to_device(float* d, const std::vector<float>& h) {
  CUDA_CHECK(cudaMemcpy(d, h.data(), h.size() * sizeof(float), cudaMemcpyHostToDevice));
}

// --- The GPU context: cuDNN handle, stream, workspace, timing, the run's limits

class Gpu {
 public:
  Gpu() {
    CUDA_CHECK(cudaStreamCreate(&s));
    CUDNN_CHECK(cudnnCreate(&handle));
    CUDNN_CHECK(cudnnSetStream(handle, s));
    CUDA_CHECK(cudaEventCreate(&ev[0]));
    CUDA_CHECK(cudaEventCreate(&ev[1]));
    acc_ = std::make_unique<Buf>(sizeof(ErrAcc));
  }
  ~Gpu() {
    cudaEventDestroy(ev[0]);
    cudaEventDestroy(ev[1]);
    cudnnDestroy(handle);
    cudaStreamDestroy(s);
  }
  Gpu(const Gpu&) = delete;
  Gpu& operator=(const Gpu&) = delete;

  // At least `bytes` of cuDNN workspace (grows, never shrinks; growing waits for the stream).
  void* workspace(int64_t bytes) {
    if (size_t(bytes) > ws_bytes_) {
      CUDA_CHECK(cudaStreamSynchronize(s));
      ws_.reset();
      ws_ = std::make_unique<Buf>(size_t(bytes));
      ws_bytes_ = size_t(bytes);
    }
    return ws_ ? ws_->get() : nullptr;
  }
  ErrAcc* acc() const { return static_cast<ErrAcc*>(acc_->get()); }
  bool out_of_time() const { return now_s() > deadline; }

  cudnnHandle_t handle = nullptr;
  cudaStream_t s = nullptr;
  cudaEvent_t ev[2] = {};
  int64_t batch = 256;
  int reps = 20;   // timed runs per measurement (median)
  int plans = 1;   // plans built per graph, in the heuristics' order; the fastest is kept
  double deadline = 0;

 private:
  std::unique_ptr<Buf> ws_, acc_;
  size_t ws_bytes_ = 0;
};

// The busy kernel ahead of each timed run lets the host queue the whole chain before it starts, so that
// launch latency is not timed (worker/gpu/conv_engines.cpp's tuner does the same). 300 us covers the
// host side of the longest chain here (four launches and a graph execute).
constexpr int kBusyUs = 300;

// Median device time of f over `reps` runs, after two untimed ones (module loading, workspace growth).
double time_ms(Gpu& g, const std::function<void()>& f, int reps) {
  f();
  f();
  CUDA_CHECK(cudaStreamSynchronize(g.s));
  std::vector<float> ms;
  for (int i = 0; i < reps; ++i) {
    wg::busy_wait(kBusyUs, g.s);
    CUDA_CHECK(cudaEventRecord(g.ev[0], g.s));
    f();
    CUDA_CHECK(cudaEventRecord(g.ev[1], g.s));
    CUDA_CHECK(cudaEventSynchronize(g.ev[1]));
    float t = 0;
    CUDA_CHECK(cudaEventElapsedTime(&t, g.ev[0], g.ev[1]));
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

double time_ms(Gpu& g, const std::function<void()>& f) { return time_ms(g, f, g.reps); }

// --- Inputs in three forms, and batch-norm state

// A tensor the fused graph reads: unrounded fp32 values (u), their storage (h, 16-bit) and that storage
// widened back to fp32 (r). References run on r (what the graph sees) and on u (to measure what the
// rounding alone changes).
struct In {
  float* u = nullptr;
  float* r = nullptr;
  void* h = nullptr;
  size_t n = 0;
};

In stored(Gpu& g, Arena& a, const Dt& dt, float* u, size_t n) {
  In x{u, a.f32(n), a.of(dt, n), n};
  WK_DISPATCH(dt.wk, round_kernel<T><<<grid_for(n), 256, 0, g.s>>>(u, static_cast<T*>(x.h), x.r, n));
  KERNEL_CHECK();
  return x;
}

// Uniform in shift +- scale (negative values set to 0 with relu: a ReLU's output).
In random_in(Gpu& g, Arena& a, const Dt& dt, size_t n, uint64_t seed, float scale, float shift, bool relu = false) {
  float* u = a.f32(n);
  fill_kernel<<<grid_for(n), 256, 0, g.s>>>(u, n, seed, scale, shift, relu);
  KERNEL_CHECK();
  return stored(g, a, dt, u, n);
}

// Per-channel sums and sums of squares of x (fp32, m x c) in double, on the host.
std::vector<double> channel_sums(Gpu& g, Arena& a, const float* x, int64_t m, int c) {
  auto* d = static_cast<double*>(a.bytes(2 * size_t(c) * sizeof(double)));
  const unsigned gx = unsigned((c + 31) / 32);
  const unsigned gy = unsigned(std::max<int64_t>(1, std::min<int64_t>((m + 7) / 8, 2048 / gx)));
  channel_sums_kernel<<<dim3(gx, gy), dim3(32, 8), 0, g.s>>>(x, m, c, d);
  KERNEL_CHECK();
  std::vector<double> h(2 * size_t(c));
  CUDA_CHECK(cudaMemcpyAsync(h.data(), d, h.size() * sizeof(double), cudaMemcpyDeviceToHost, g.s));
  CUDA_CHECK(cudaStreamSynchronize(g.s));
  return h;
}

// The same sums as fp32 on the device (sum at [0, c), squares at [c, 2c)): a genstats reference.
float* channel_sums_f32(Gpu& g, Arena& a, const float* x, int64_t m, int c, std::vector<double>* exact = nullptr) {
  const std::vector<double> s = channel_sums(g, a, x, m, c);
  float* d = a.f32(s.size());
  to_device(d, std::vector<float>(s.begin(), s.end()));
  if (exact) *exact = s;
  return d;
}

// One batch norm over c channels of m rows: random gamma and beta; the statistics of its input computed
// exactly once (the fused graphs' and the references' input); and buffers for the trainer's own launches,
// which compute and use their own statistics (t_*).
struct Bn {
  int c = 0;
  int64_t m = 0;
  float *gamma = nullptr, *beta = nullptr;
  float *mean = nullptr, *invstd = nullptr;
  float *scale = nullptr, *shift = nullptr;  // gamma * invstd, beta - mean * scale: the forward's affine map
  std::vector<float> h_gamma, h_beta;
  float *t_rmean = nullptr, *t_rvar = nullptr, *t_mean = nullptr, *t_invstd = nullptr;
  float *t_ss = nullptr, *t_coef = nullptr, *t_dgamma = nullptr, *t_dbeta = nullptr;
  wg::BnSync sync;
};

// x: the fp32 input whose statistics the batch norm uses, or null (then mean 0, invstd 1).
Bn make_bn(Gpu& g, Arena& a, int c, int64_t m, uint64_t seed, const float* x) {
  Bn bn;
  bn.c = c;
  bn.m = m;
  bn.h_gamma.resize(size_t(c));
  bn.h_beta.resize(size_t(c));
  std::vector<float> mean(size_t(c), 0.f), invstd(size_t(c), 1.f), scale(size_t(c), 0.f), shift(size_t(c), 0.f);
  std::vector<double> s;
  if (x) s = channel_sums(g, a, x, m, c);
  for (int i = 0; i < c; ++i) {
    const size_t k = size_t(i);
    bn.h_gamma[k] = 1.f + 0.5f * uniform(k, seed);
    bn.h_beta[k] = 0.3f * uniform(k, seed ^ 0xB7E151628AED2A6Bull);
    double mu = 0, inv = 1;
    if (x) {
      mu = s[k] / double(m);
      const double var = std::max(0.0, s[size_t(c) + k] / double(m) - mu * mu);
      inv = 1.0 / std::sqrt(var + double(kEps));
    }
    mean[k] = float(mu);
    invstd[k] = float(inv);
    const double sc = double(bn.h_gamma[k]) * inv;
    scale[k] = float(sc);
    shift[k] = float(double(bn.h_beta[k]) - mu * sc);
  }
  auto upload = [&](const std::vector<float>& h) {
    float* d = a.f32(h.size());
    to_device(d, h);
    return d;
  };
  bn.gamma = upload(bn.h_gamma);
  bn.beta = upload(bn.h_beta);
  bn.mean = upload(mean);
  bn.invstd = upload(invstd);
  bn.scale = upload(scale);
  bn.shift = upload(shift);
  bn.t_rmean = a.f32(size_t(c));
  bn.t_rvar = upload(std::vector<float>(size_t(c), 1.f));
  bn.t_mean = a.f32(size_t(c));
  bn.t_invstd = a.f32(size_t(c));
  bn.t_ss = a.f32(2 * size_t(c));
  bn.t_coef = a.f32(3 * size_t(c));
  bn.t_dgamma = a.f32(size_t(c));
  bn.t_dbeta = a.f32(size_t(c));
  bn.sync = wg::bn_sync_view(a.bytes(wg::bn_sync_bytes(c)), c);
  return bn;
}

// y = relu?(x * s + b + res?) in fp32 by bn.cu's own apply kernel: bn_forward_eval with running mean 0,
// running variance 1 and eps 0 applies gamma = s and beta = b exactly (s / sqrt(1) = s, b - 0 * s = b).
void ref_apply(Gpu& g, Arena& a, const float* x, int64_t m, int c, const float* s, const float* b,
               const float* res, bool relu, float* y) {
  float* zeros = a.f32(size_t(c));
  float* ones = a.f32(size_t(c));
  to_device(ones, std::vector<float>(size_t(c), 1.f));
  wg::bn_forward_eval(DType::F32, x, m, c, s, b, 0.f, zeros, ones, res, relu, y, a.f32(2 * size_t(c)), g.s);
}

// The reference backward of a batch norm in fp32 (bn.cu's kernels, with the exact statistics): writes
// dx, the masked output gradient (dres) and dgamma, dbeta (each c floats, allocated here).
struct BnGrads {
  float* dgamma;
  float* dbeta;
};
BnGrads ref_bn_backward(Gpu& g, Arena& a, const Bn& bn, const float* x, const float* y, const float* dy,
                        const float* dy2, BnMask mask, float* dx, float* dres) {
  BnGrads d{a.f32(size_t(bn.c)), a.f32(size_t(bn.c))};
  wg::bn_backward(DType::F32, x, y, dy, dy2, bn.m, bn.c, bn.gamma, bn.beta, bn.mean, bn.invstd, mask, dx, dres,
                  d.dgamma, d.dbeta, bn.sync, a.f32(3 * size_t(bn.c)), g.s);
  return d;
}

// --- Numerical checks

struct Err {
  double max = 0, l2 = 0;  // max |a - b| / max |b|;  ||a - b|| / ||b||
  bool finite = true;
};

Err error_of(Gpu& g, const Dt& dt, const void* a, const float* b, size_t n) {
  CUDA_CHECK(cudaMemsetAsync(g.acc(), 0, sizeof(ErrAcc), g.s));
  WK_DISPATCH(dt.wk, err_kernel<T><<<grid_for(n), 256, 0, g.s>>>(static_cast<const T*>(a), b, n, g.acc()));
  KERNEL_CHECK();
  ErrAcc h{};
  CUDA_CHECK(cudaMemcpyAsync(&h, g.acc(), sizeof h, cudaMemcpyDeviceToHost, g.s));
  CUDA_CHECK(cudaStreamSynchronize(g.s));
  auto bits = [](unsigned long long v) {
    double d;
    std::memcpy(&d, &v, sizeof d);
    return d;
  };
  Err e;
  e.finite = h.bad == 0;
  e.max = bits(h.dmax) / std::max(bits(h.bmax), 1e-30);
  e.l2 = std::sqrt(h.d2 / std::max(h.b2, 1e-300));
  return e;
}

struct Check {
  std::string what;
  Err err;  // the fused output against the fp32 chain on the same (rounded) inputs
  Err in;   // that chain on the unrounded inputs against it on the rounded ones: what rounding alone does
  double tol_max = 0, tol_l2 = 0;
  bool pass() const { return err.finite && in.finite && err.max <= tol_max && err.l2 <= tol_l2; }
  double ratio() const {
    return err.finite && in.finite ? std::max(err.max / tol_max, err.l2 / tol_l2) : INFINITY;
  }
};

// Rounding explains, beyond the inputs the reference shares, at most one more rounding of the operands
// inside the fused graph (its prologue's output to 16 bits before the tensor cores, say: about `in`) and
// the rounding of its own output (out.unit); the tolerance is twice that, so that a different rounding
// pattern's largest element does not fail by chance.
Check check(Gpu& g, const char* what, const Dt& out, const void* fused, const float* ref_r, const float* ref_u,
            size_t n) {
  Check c;
  c.what = what;
  c.in = error_of(g, kF32, ref_u, ref_r, n);
  c.err = error_of(g, out, fused, ref_r, n);
  c.tol_max = 2 * (c.in.max + out.unit);
  c.tol_l2 = 2 * (c.in.l2 + out.unit);
  return c;
}

// --- cuDNN graphs: building and running

// Fp32: references, no tensor-core engines (whose fp32 convolutions round the inputs to TF32).
// Plans wanting more workspace than kMaxWorkspace are skipped (some fp32 FFT engines ask for many GB).
constexpr int64_t kMaxWorkspace = int64_t(8) << 30;
enum class Numerics : uint8_t { Any, Fp32 };

struct Plan {
  std::string status = "not built";  // "ok", or why not
  std::string engine;                // the chosen plan's name; "[rt]" marks a run-time compiled engine
  double build_s = 0;
  std::vector<int64_t> built;        // the plans built, in the heuristics' order
  int64_t index = -1, ws = 0;
  bool chosen = false;
};

// One graph with its non-virtual tensors by name, and its plan.
struct Fused {
  explicit Fused(const Dt& io, fe::DataType_t inter = kFloat) : g(std::make_shared<fe::graph::Graph>()) {
    g->set_io_data_type(io.fe).set_intermediate_data_type(inter).set_compute_data_type(kFloat);
  }
  TensorPtr in(const std::string& name, Attr a) {
    auto p = g->tensor(a.set_name(name));
    t[name] = p;
    return p;
  }
  TensorPtr out(const std::string& name, const TensorPtr& p, fe::DataType_t dt) {
    p->set_output(true).set_data_type(dt).set_name(name);
    t[name] = p;
    outs.insert(name);
    return p;
  }
  TensorPtr pw(Mode m, const TensorPtr& a, const TensorPtr& b) {
    return g->pointwise(a, b, fe::graph::Pointwise_attributes().set_mode(m));
  }
  TensorPtr pw(Mode m, const TensorPtr& a) { return g->pointwise(a, fe::graph::Pointwise_attributes().set_mode(m)); }
  bool ok() const { return plan.status == "ok"; }

  std::shared_ptr<fe::graph::Graph> g;
  std::map<std::string, TensorPtr> t;
  std::set<std::string> outs;
  std::string variant;  // which of a pattern's variants this is (e.g. "s/b FLOAT")
  Plan plan;
};

// cuDNN's own last error message, which often names the failed support check.
std::string backend_error() {
  char msg[1024] = {0};
  cudnnGetLastErrorString(msg, sizeof msg);
  std::string s(msg);
  std::replace(s.begin(), s.end(), '\n', ' ');
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s.empty() ? "" : " [cuDNN: " + s + "]";
}

void build(Gpu& gpu, Fused& f, Numerics num) {
  Plan& p = f.plan;
  const double t0 = now_s();
  (void)backend_error();  // drop a message left by an earlier failure
  // false (and the row's reason) when a step fails
  auto good = [&](fe::error_t e, const char* stage) {
    if (e.is_good()) return true;
    p.status = std::string(stage) + ": " + e.get_message() + backend_error();
    return false;
  };
  try {
    if (!good(f.g->validate(), "validate") || !good(f.g->build_operation_graph(gpu.handle), "operation graph") ||
        !good(f.g->create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}), "no engine")) {
      p.build_s = now_s() - t0;
      return;
    }
    if (num == Numerics::Fp32)
      f.g->deselect_numeric_notes({fe::NumericalNote_t::TENSOR_CORE, fe::NumericalNote_t::DOWN_CONVERT_INPUTS});
    f.g->deselect_workspace_greater_than(kMaxWorkspace);
    if (!good(f.g->check_support(), "not supported")) {
      p.build_s = now_s() - t0;
      return;
    }
    fe::error_t first_failure;
    const int64_t count = f.g->get_execution_plan_count();
    for (int64_t i = 0; i < count && int(p.built.size()) < gpu.plans; ++i) {
      fe::error_t b = f.g->build_plan_at_index(i);
      if (b.is_good())
        p.built.push_back(i);
      else if (first_failure.is_good())
        first_failure = b;
    }
    if (p.built.empty()) {
      good(first_failure, "build");
      p.build_s = now_s() - t0;
      return;
    }
    p.index = p.built.front();
    if (f.g->get_plan_name_at_index(p.index, p.engine).is_bad()) p.engine = "?";
    std::vector<fe::BehaviorNote_t> notes;
    if (f.g->get_behavior_notes_for_plan_at_index(p.index, notes).is_good() &&
        std::count(notes.begin(), notes.end(), fe::BehaviorNote_t::RUNTIME_COMPILATION))
      p.engine += " [rt]";
    if (good(f.g->get_workspace_size_plan_at_index(p.index, p.ws), "workspace size")) p.status = "ok";
  } catch (const std::exception& ex) {
    p.status = std::string("exception: ") + ex.what() + backend_error();
  }
  p.build_s = now_s() - t0;
}

// The first of the variants (graphs of the same pattern) that cuDNN supports, or the first variant with
// every variant's reason.
Fused first_supported(Gpu& gpu, const std::vector<std::pair<std::string, std::function<Fused()>>>& variants) {
  std::string why;
  double build_s = 0;
  for (const auto& v : variants) {
    Fused f = v.second();
    f.variant = v.first;
    build(gpu, f, Numerics::Any);
    build_s += f.plan.build_s;
    if (f.ok() || variants.size() == 1) {
      f.plan.build_s = build_s;
      return f;
    }
    why += (why.empty() ? "" : " | ") + v.first + ": " + f.plan.status;
  }
  Fused f = variants.front().second();
  f.variant = variants.front().first;
  f.plan.status = why;
  f.plan.build_s = build_s;
  return f;
}

// The pointers of a graph's tensors by name: names the graph lacks are skipped (a dual variant's), and
// every tensor of the graph must get one.
Pack bind_ptrs(const Fused& f, std::initializer_list<std::pair<const char*, const void*>> ptrs) {
  Pack p;
  for (const auto& [name, ptr] : ptrs) {
    const auto it = f.t.find(name);
    if (it != f.t.end() && ptr) p[it->second] = const_cast<void*>(ptr);
  }
  for (const auto& [name, tensor] : f.t)
    if (!p.count(tensor)) throw std::logic_error("probe: graph tensor '" + name + "' has no buffer");
  return p;
}

void exec(Gpu& g, const Fused& f, Pack& p) {
  fe::error_t e = f.g->execute_plan_at_index(g.handle, p, g.workspace(f.plan.ws), f.plan.index);
  if (e.is_bad()) throw std::runtime_error("execute " + f.plan.engine + ": " + e.get_message() + backend_error());
}

// Runs f; the first time, with several plans built (--plans), keeps the fastest on this data.
void run_graph(Gpu& g, Fused& f, Pack& p) {
  if (!f.ok()) throw std::logic_error("probe: running a graph that did not build: " + f.plan.status);
  if (!f.plan.chosen && f.plan.built.size() > 1) {
    double best = INFINITY;
    int64_t best_index = f.plan.index;
    for (int64_t i : f.plan.built) {
      f.plan.index = i;
      if (f.g->get_workspace_size_plan_at_index(i, f.plan.ws).is_bad()) continue;
      try {
        const auto one = [&] { exec(g, f, p); };
        const double ms = time_ms(g, one, 5);
        if (ms < best) best = ms, best_index = i;
      } catch (const std::runtime_error&) {  // this plan refuses the data: not a candidate
      }
    }
    f.plan.index = best_index;
    (void)f.g->get_workspace_size_plan_at_index(best_index, f.plan.ws);
    if (f.g->get_plan_name_at_index(best_index, f.plan.engine).is_bad()) f.plan.engine = "?";
  }
  f.plan.chosen = true;
  exec(g, f, p);
}

size_t bytes_of(const TensorPtr& t) {
  size_t n = 1;
  for (int64_t d : t->get_dim()) n *= size_t(d);
  return n * (t->get_data_type() == kFloat ? 4 : 2);
}

// One more run with every output zeroed first, so that what is checked is what one run writes (whether
// an engine accumulates into its outputs or not).
void run_fresh(Gpu& g, Fused& f, Pack& p) {
  for (const std::string& name : f.outs) {
    const TensorPtr& t = f.t.at(name);
    CUDA_CHECK(cudaMemsetAsync(p.at(t), 0, bytes_of(t), g.s));
  }
  run_graph(g, f, p);
}

// --- The graphs of each pattern

struct Conv {
  int64_t c = 0, k = 0, h = 0, r = 1, stride = 1, pad = 0;  // input, output channels; input size (square)
  int64_t o() const { return (h + 2 * pad - r) / stride + 1; }
};

std::string conv_shape(const Conv& cv) {
  char b[96];
  std::snprintf(b, sizeof b, "%ldx%ld/%ld %ld->%ld %ldx%ld", long(cv.r), long(cv.r), long(cv.stride), long(cv.c),
                long(cv.k), long(cv.h), long(cv.h));
  return b;
}

std::vector<int64_t> nhwc_stride(int64_t c, int64_t h) { return {c * h * h, 1, c * h, c}; }
Attr act(int64_t n, int64_t c, int64_t h, fe::DataType_t t) {
  return Attr().set_dim({n, c, h, h}).set_stride(nhwc_stride(c, h)).set_data_type(t);
}
Attr filt(const Conv& cv, fe::DataType_t t) { return act(cv.k, cv.c, cv.r, t); }  // KRSC
Attr chan(int64_t c, fe::DataType_t t) {
  return Attr().set_dim({1, c, 1, 1}).set_stride({c, 1, c, c}).set_data_type(t);
}

template <typename A>
A conv_attr(const Conv& cv) {
  return A().set_padding({cv.pad, cv.pad}).set_stride({cv.stride, cv.stride}).set_dilation({1, 1});
}

enum class Dir : uint8_t { Fprop, Dgrad, Wgrad };
const char* dir_name(Dir d) { return d == Dir::Fprop ? "fprop" : d == Dir::Dgrad ? "dgrad" : "wgrad"; }

TensorPtr dgrad_of(Fused& f, const Dt& io, const Conv& cv, int64_t n) {
  auto dy = f.in("dy", act(n, cv.k, cv.o(), io.fe));
  auto w = f.in("w", filt(cv, io.fe));
  auto dx = f.g->conv_dgrad(dy, w, conv_attr<fe::graph::Conv_dgrad_attributes>(cv));
  dx->set_dim({n, cv.c, cv.h, cv.h}).set_stride(nhwc_stride(cv.c, cv.h));
  return dx;
}

// A plain convolution: fprop x, w -> y; dgrad dy, w -> dx; wgrad dy, x -> dw.
Fused conv_graph(Dir d, const Dt& io, const Conv& cv, int64_t n) {
  Fused f(io);
  if (d == Dir::Fprop) {
    auto x = f.in("x", act(n, cv.c, cv.h, io.fe));
    auto w = f.in("w", filt(cv, io.fe));
    f.out("y", f.g->conv_fprop(x, w, conv_attr<fe::graph::Conv_fprop_attributes>(cv)), io.fe);
  } else if (d == Dir::Dgrad) {
    f.out("dx", dgrad_of(f, io, cv, n), io.fe);
  } else {
    auto dy = f.in("dy", act(n, cv.k, cv.o(), io.fe));
    auto x = f.in("x", act(n, cv.c, cv.h, io.fe));
    auto dw = f.g->conv_wgrad(dy, x, conv_attr<fe::graph::Conv_wgrad_attributes>(cv));
    dw->set_dim({cv.k, cv.c, cv.r, cv.r}).set_stride(nhwc_stride(cv.c, cv.r));
    f.out("dw", dw, io.fe);
  }
  return f;
}

// x * s + b per channel (s, b of type sb), then a ReLU if asked: a batch norm's apply as a prologue.
TensorPtr scale_bias(Fused& f, const TensorPtr& x, int64_t c, fe::DataType_t sb, const std::string& sfx, bool relu) {
  auto t = f.pw(Mode::MUL, x, f.in("s" + sfx, chan(c, sb)));
  t = f.pw(Mode::ADD, t, f.in("b" + sfx, chan(c, sb)));
  return relu ? f.pw(Mode::RELU_FWD, t) : t;
}

// ((x - mean) * invstd) * gamma + beta with fp32 parameters: a batch norm's output recomputed from its
// input (the SUB form of the frontend's sample; the documentation's graph has ADD with alpha2 = -1).
TensorPtr bn_out(Fused& f, const TensorPtr& x, int64_t c, const std::string& sfx) {
  auto t = f.pw(Mode::SUB, x, f.in("mean" + sfx, chan(c, kFloat)));
  t = f.pw(Mode::MUL, t, f.in("invstd" + sfx, chan(c, kFloat)));
  t = f.pw(Mode::MUL, t, f.in("gamma" + sfx, chan(c, kFloat)));
  return f.pw(Mode::ADD, t, f.in("beta" + sfx, chan(c, kFloat)));
}

void genstats_out(Fused& f, const TensorPtr& y) {
  auto [sum, sq] = f.g->genstats(y, fe::graph::Genstats_attributes());
  f.out("sum", sum, kFloat);
  f.out("sq", sq, kFloat);
}

// BN backward weights of dz against x: dscale, dbias and the coefficients a, b, c of dx = a*dz + b*x + c.
void dbn_weight_out(Fused& f, const TensorPtr& dz, const TensorPtr& x, const std::string& sfx) {
  auto [ds, db, a, b, c] = f.g->dbn_weight(dz, x, f.t.at("mean" + sfx), f.t.at("invstd" + sfx),
                                           f.t.at("gamma" + sfx), fe::graph::DBN_weight_attributes());
  f.out("dscale" + sfx, ds, kFloat);
  f.out("dbias" + sfx, db, kFloat);
  f.out("a" + sfx, a, kFloat);
  f.out("b" + sfx, b, kFloat);
  f.out("c" + sfx, c, kFloat);
}

// x, w -> y, sum, sq (ConvBNfprop's Conv + GenStats form).
Fused conv_genstats(const Dt& io, const Conv& cv, int64_t n) {
  Fused f(io);
  auto x = f.in("x", act(n, cv.c, cv.h, io.fe));
  auto w = f.in("w", filt(cv, io.fe));
  genstats_out(f, f.out("y", f.g->conv_fprop(x, w, conv_attr<fe::graph::Conv_fprop_attributes>(cv)), io.fe));
  return f;
}

// x, s, b, w -> y [, sum, sq]: relu(x * s + b) as the prologue (ConvBNfprop with genstats; the bf16
// control without).
Fused sbr_conv(const Dt& io, const Conv& cv, int64_t n, fe::DataType_t sb, bool genstats) {
  Fused f(io);
  auto x = f.in("x", act(n, cv.c, cv.h, io.fe));
  auto w = f.in("w", filt(cv, io.fe));
  auto y = f.g->conv_fprop(scale_bias(f, x, cv.c, sb, "", true), w, conv_attr<fe::graph::Conv_fprop_attributes>(cv));
  f.out("y", y, io.fe);
  if (genstats) genstats_out(f, y);
  return f;
}

// A per-channel sum over N, H, W of y (c channels) as the graph's one reduction.
TensorPtr channel_sum(Fused& f, const TensorPtr& y, int64_t c) {
  auto s = f.g->reduction(
      y, fe::graph::Reduction_attributes().set_mode(fe::ReductionMode_t::ADD).set_compute_data_type(kFloat));
  s->set_dim({1, c, 1, 1}).set_stride({c, 1, c, c});
  return f.out("sum", s, kFloat);
}

// x, w -> y, sum (bf16 control: one reduction in the epilogue, allowed on the generic engine).
Fused conv_sum(const Dt& io, const Conv& cv, int64_t n) {
  Fused f(io);
  auto x = f.in("x", act(n, cv.c, cv.h, io.fe));
  auto w = f.in("w", filt(cv, io.fe));
  channel_sum(f, f.out("y", f.g->conv_fprop(x, w, conv_attr<fe::graph::Conv_fprop_attributes>(cv)), io.fe), cv.k);
  return f;
}

// dy, w, x, mean, invstd, gamma, beta -> dz, dscale, dbias, a, b, c (DgradDreluBNBwdWeight).
Fused dgrad_drelu_dbnw(const Dt& io, const Conv& cv, int64_t n) {
  Fused f(io);
  auto dx = dgrad_of(f, io, cv, n);
  auto x = f.in("x", act(n, cv.c, cv.h, io.fe));
  auto dz = f.out("dz", f.pw(Mode::RELU_BWD, dx, bn_out(f, x, cv.c, "")), io.fe);
  dbn_weight_out(f, dz, x, "");
  return f;
}

// dy, w, x (a ReLU's output) -> dz, sum (bf16 control: dgrad + dReLU + one reduction).
Fused dgrad_drelu_sum(const Dt& io, const Conv& cv, int64_t n) {
  Fused f(io);
  auto dx = dgrad_of(f, io, cv, n);
  auto x = f.in("x", act(n, cv.c, cv.h, io.fe));
  channel_sum(f, f.out("dz", f.pw(Mode::RELU_BWD, dx, x), io.fe), cv.c);
  return f;
}

// dy, x, s, b -> dw with relu(x * s + b) as the prologue (ConvBNwgrad).
Fused sbr_wgrad(const Dt& io, const Conv& cv, int64_t n, fe::DataType_t inter) {
  Fused f(io, inter);
  auto dy = f.in("dy", act(n, cv.k, cv.o(), io.fe));
  auto x = f.in("x", act(n, cv.c, cv.h, io.fe));
  auto dw =
      f.g->conv_wgrad(dy, scale_bias(f, x, cv.c, io.fe, "", true), conv_attr<fe::graph::Conv_wgrad_attributes>(cv));
  dw->set_dim({cv.k, cv.c, cv.r, cv.r}).set_stride(nhwc_stride(cv.c, cv.r));
  f.out("dw", dw, io.fe);
  return f;
}

// dy, x, a, b, c [, x2, a2, b2, c2] -> dx [, dx2]: dx = a*dy + b*x + c (dBNApply; dual at projection joins,
// both batch norms fed by the same gradient).
Fused dbn_apply(const Dt& io, int64_t c, int64_t h, int64_t n, bool dual) {
  Fused f(io);
  auto dy = f.in("dy", act(n, c, h, io.fe));
  for (const std::string sfx : {std::string(), std::string("2")}) {
    if (!sfx.empty() && !dual) break;
    auto x = f.in("x" + sfx, act(n, c, h, io.fe));
    auto t = f.pw(Mode::ADD, f.pw(Mode::MUL, dy, f.in("a" + sfx, chan(c, kFloat))),
                  f.pw(Mode::MUL, x, f.in("b" + sfx, chan(c, kFloat))));
    f.out("dx" + sfx, f.pw(Mode::ADD, t, f.in("c" + sfx, chan(c, kFloat))), io.fe);
  }
  return f;
}

// relu(x * s + b + z) or, dual, relu(x * s + b + z * s2 + b2): a block's join (16-bit s, b).
TensorPtr join_of(Fused& f, const Dt& io, int64_t c, int64_t h, int64_t n, bool dual) {
  auto a = scale_bias(f, f.in("x", act(n, c, h, io.fe)), c, io.fe, "", false);
  auto z = f.in("z", act(n, c, h, io.fe));
  return f.pw(Mode::RELU_FWD, f.pw(Mode::ADD, a, dual ? scale_bias(f, z, c, io.fe, "2", false) : z));
}

// x, s, b, z [, s2, b2] -> y (SBAR / DBAR).
Fused sbar(const Dt& io, int64_t c, int64_t h, int64_t n, bool dual) {
  Fused f(io);
  f.out("y", join_of(f, io, c, h, n, dual), io.fe);
  return f;
}

// x, s, b, z [, s2, b2], w -> relu_y (the join's output), y, sum, sq (DBARCS: the join, the next block's
// 1x1 convolution and its statistics).
Fused dbarcs(const Dt& io, const Conv& cv, int64_t n, bool dual) {
  Fused f(io);
  auto relu_y = f.out("relu_y", join_of(f, io, cv.c, cv.h, n, dual), io.fe);
  auto w = f.in("w", filt(cv, io.fe));
  genstats_out(f, f.out("y", f.g->conv_fprop(relu_y, w, conv_attr<fe::graph::Conv_fprop_attributes>(cv)), io.fe));
  return f;
}

// The next block's dgrad at a join, plus the gradient through the skip path (dyb), through the join's
// ReLU (its input recomputed: bn(x) + r, or dual bn(x) + bn2(x2)), then the BN weight gradients of the
// join's batch norm(s): dy, w, dyb, x, mean.., r | x2, mean2.. -> dz, dscale, dbias, a, b, c [, ..2]
// (Paddle's fused_dconv_drelu_dbn graph: fuse_add with fuse_shortcut or fuse_dual).
Fused join_dgrad(const Dt& io, const Conv& cv, int64_t n, bool dual) {
  Fused f(io);
  auto g = f.pw(Mode::ADD, dgrad_of(f, io, cv, n), f.in("dyb", act(n, cv.c, cv.h, io.fe)));
  auto x = f.in("x", act(n, cv.c, cv.h, io.fe));
  auto other =
      dual ? bn_out(f, f.in("x2", act(n, cv.c, cv.h, io.fe)), cv.c, "2") : f.in("r", act(n, cv.c, cv.h, io.fe));
  auto dz = f.out("dz", f.pw(Mode::RELU_BWD, g, f.pw(Mode::ADD, bn_out(f, x, cv.c, ""), other)), io.fe);
  dbn_weight_out(f, dz, x, "");
  if (dual) dbn_weight_out(f, dz, f.t.at("x2"), "2");
  return f;
}

// sum, sq, gamma, beta, rmean, rvar -> eq_scale, eq_bias (type eq), mean, invstd, next_rmean, next_rvar.
Fused bn_finalize(int64_t c, int64_t m, fe::DataType_t eq) {
  Fused f(kF32);
  auto sum = f.in("sum", chan(c, kFloat)), sq = f.in("sq", chan(c, kFloat));
  auto gamma = f.in("gamma", chan(c, kFloat)), beta = f.in("beta", chan(c, kFloat));
  auto rmean = f.in("rmean", chan(c, kFloat)), rvar = f.in("rvar", chan(c, kFloat));
  auto eps = f.g->tensor(Attr(kEps)), momentum = f.g->tensor(Attr(kMomentum)), count = f.g->tensor(Attr(m));
  auto [es, eb, mean, invstd, nrm, nrv] =
      f.g->bn_finalize(sum, sq, gamma, beta, eps, count,
                       fe::graph::BN_finalize_attributes().set_previous_running_stats(rmean, rvar, momentum));
  f.out("eq_scale", es, eq);
  f.out("eq_bias", eb, eq);
  f.out("mean", mean, kFloat);
  f.out("invstd", invstd, kFloat);
  f.out("next_rmean", nrm, kFloat);
  f.out("next_rvar", nrv, kFloat);
  return f;
}

// --- Plain convolutions of one case: in the probed type (the unfused chain) and in fp32 (references)

class Convs {
 public:
  Convs(Gpu& g, const Conv& cv, const Dt& dt) : g_(g), cv_(cv), dt_(dt) {}

  void run(Dir d, bool ref, const void* a, const void* b, void* out) {
    Fused& f = get(d, ref);
    if (!f.ok())
      throw std::runtime_error(std::string(ref ? "fp32 reference " : "plain ") + dir_name(d) + ": " + f.plan.status);
    Pack p = d == Dir::Fprop   ? bind_ptrs(f, {{"x", a}, {"w", b}, {"y", out}})
             : d == Dir::Dgrad ? bind_ptrs(f, {{"dy", a}, {"w", b}, {"dx", out}})
                               : bind_ptrs(f, {{"dy", a}, {"x", b}, {"dw", out}});
    run_graph(g_, f, p);
  }
 private:
  Fused& get(Dir d, bool ref) {
    const std::pair<int, bool> key{int(d), ref};
    auto it = built_.find(key);
    if (it != built_.end()) return it->second;
    Fused f = conv_graph(d, ref ? kF32 : dt_, cv_, g_.batch);
    build(g_, f, ref ? Numerics::Fp32 : Numerics::Any);
    if (ref && !f.ok()) {  // no engine without tensor cores: take one with (scripts/gpu_probe.sh sets
                           // NVIDIA_TF32_OVERRIDE=0)
      Fused any = conv_graph(d, kF32, cv_, g_.batch);
      build(g_, any, Numerics::Any);
      any.variant = "tensor-core engine";
      std::printf("  note: no fp32 %s engine without tensor cores for %s (%s): the references use %s\n", dir_name(d),
                  conv_shape(cv_).c_str(), f.plan.status.c_str(), any.ok() ? any.plan.engine.c_str() : "none");
      f = std::move(any);
    }
    return built_.emplace(key, std::move(f)).first->second;
  }

  Gpu& g_;
  Conv cv_;
  const Dt& dt_;
  std::map<std::pair<int, bool>, Fused> built_;
};

// --- The trainer's batch-norm passes, one kernel at a time

// The kernels one call of a bn.cu launcher enqueues, captured into a CUDA graph and each put into a graph
// of its own: bn_forward_train is [statistics, apply], bn_backward is [reduction, dx]. The call also runs
// once for real first (it loads the kernels and fills the outputs later passes read).
class Passes {
 public:
  Passes(cudaStream_t s, const std::function<void(cudaStream_t)>& enqueue) : s_(s) {
    enqueue(s);
    CUDA_CHECK(cudaStreamSynchronize(s));
    CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    cudaGraph_t whole = nullptr;
    try {
      enqueue(s);
    } catch (...) {
      cudaStreamEndCapture(s, &whole);
      if (whole) cudaGraphDestroy(whole);
      throw;
    }
    CUDA_CHECK(cudaStreamEndCapture(s, &whole));
    std::unique_ptr<CUgraph_st, decltype(&cudaGraphDestroy)> owner(whole, &cudaGraphDestroy);
    size_t roots = 1;
    cudaGraphNode_t node = nullptr;
    CUDA_CHECK(cudaGraphGetRootNodes(whole, nullptr, &roots));
    if (roots != 1) throw std::logic_error("probe: a bn.cu launcher's kernels are not one chain");
    CUDA_CHECK(cudaGraphGetRootNodes(whole, &node, &roots));
    while (node) {
      cudaGraphNodeType type;
      CUDA_CHECK(cudaGraphNodeGetType(node, &type));
      if (type != cudaGraphNodeTypeKernel)
        throw std::logic_error("probe: a bn.cu launcher enqueued a non-kernel node");
      cudaKernelNodeParams params{};
      CUDA_CHECK(cudaGraphKernelNodeGetParams(node, &params));
      cudaGraph_t one = nullptr;
      CUDA_CHECK(cudaGraphCreate(&one, 0));
      std::unique_ptr<CUgraph_st, decltype(&cudaGraphDestroy)> one_owner(one, &cudaGraphDestroy);
      cudaGraphNode_t copy = nullptr;
      CUDA_CHECK(cudaGraphAddKernelNode(&copy, one, nullptr, 0, &params));
      cudaGraphExec_t exec = nullptr;
      CUDA_CHECK(cudaGraphInstantiate(&exec, one, 0));
      execs_.emplace_back(exec, &cudaGraphExecDestroy);
      size_t next = 0;
      CUDA_CHECK(cudaGraphNodeGetDependentNodes(node, nullptr, nullptr, &next));
      if (next > 1) throw std::logic_error("probe: a bn.cu launcher's kernels are not one chain");
      if (next == 0) break;
      CUDA_CHECK(cudaGraphNodeGetDependentNodes(node, &node, nullptr, &next));
    }
  }
  size_t size() const { return execs_.size(); }
  void run(size_t i) const {
    if (i >= execs_.size()) throw std::logic_error("probe: no such bn.cu pass");
    CUDA_CHECK(cudaGraphLaunch(execs_[i].get(), s_));
  }

 private:
  cudaStream_t s_;
  std::vector<std::unique_ptr<CUgraphExec_st, decltype(&cudaGraphExecDestroy)>> execs_;
};

constexpr size_t kStats = 0, kApply = 1;  // bn_forward_train's passes
constexpr size_t kReduce = 0, kDx = 1;    // bn_backward's

// Both launchers enqueue two kernels; anything else means bn.cu changed and the rows would time the wrong pass.
std::unique_ptr<Passes> two_passes(std::unique_ptr<Passes> p, const char* launcher) {
  if (p->size() != 2)
    throw std::logic_error(std::string("probe: ") + launcher + " enqueued " + std::to_string(p->size()) +
                           " kernels, expected 2: update kStats/kApply/kReduce/kDx");
  return p;
}

// The trainer's forward of a batch norm on x (16-bit), as GpuOps::bn_forward_train calls it.
std::unique_ptr<Passes> bn_forward_passes(Gpu& g, const Dt& dt, Bn& bn, const void* x, const void* residual,
                                          bool relu, void* y) {
  return two_passes(std::make_unique<Passes>(g.s, [&bn, &dt, x, residual, relu, y](cudaStream_t s) {
    wg::bn_forward_train(dt.wk, x, bn.m, bn.c, bn.gamma, bn.beta, kEps, kMomentum, bn.t_rmean, bn.t_rvar,
                         bn.t_mean, bn.t_invstd, residual, relu, y, bn.sync, bn.t_ss, s);
  }), "bn_forward_train");
}

// The trainer's backward, as GpuOps::bn_backward calls it (with its forward's statistics).
std::unique_ptr<Passes> bn_backward_passes(Gpu& g, const Dt& dt, Bn& bn, const void* x, const void* y,
                                           const void* dy, const void* dy2, BnMask mask, void* dx, void* dres) {
  return two_passes(std::make_unique<Passes>(g.s, [&bn, &dt, x, y, dy, dy2, mask, dx, dres](cudaStream_t s) {
    wg::bn_backward(dt.wk, x, y, dy, dy2, bn.m, bn.c, bn.gamma, bn.beta, bn.t_mean, bn.t_invstd, mask, dx, dres,
                    bn.t_dgamma, bn.t_dbeta, bn.sync, bn.t_coef, s);
  }), "bn_backward");
}

// The trainer's dx coefficients (dx = a*g + b*(x - mean) + c, bn.cu) in cuDNN's form A*g + B*x + C.
void coef_to_abc(const Bn& bn, float* A, float* B, float* C) {
  const size_t c = size_t(bn.c);
  const std::vector<float> coef = to_host(bn.t_coef, 3 * c), mean = to_host(bn.t_mean, c);
  std::vector<float> a(coef.begin(), coef.begin() + c), b(coef.begin() + c, coef.begin() + 2 * c), cc(c);
  for (size_t i = 0; i < c; ++i) cc[i] = coef[2 * c + i] - b[i] * mean[i];
  to_device(A, a);
  to_device(B, b);
  to_device(C, cc);
}

// --- ResNet-50's layers

// Plain: the input is not a batch norm's output (the stem, the first block's 1x1, the downsamples).
// Prologue: the input is relu(bn(previous conv)): c2 and c3 of every block.
// Join: the input is a block's join output relu(bn3(c3) + residual): c1 of every later block.
// JoinOnly: the last join (into the average pool), no convolution after it.
enum class Role : uint8_t { Plain, Prologue, Join, JoinOnly };
const char* role_name(Role r) {
  switch (r) {
    case Role::Plain: return "plain";
    case Role::Prologue: return "prologue";
    case Role::Join: return "join";
    case Role::JoinOnly: return "join only";
  }
  return "?";
}

// The convolutions of one role and shape (each once per training step), with the joins in front of them.
struct Case {
  std::string name;  // the first layer of the group, e.g. "l3.b2.c2"
  Role role = Role::Plain;
  Conv cv;           // JoinOnly: cv.c channels at cv.h x cv.h, no convolution
  int count = 0;     // convolutions
  int single = 0, dual = 0;  // Join, JoinOnly: joins in front (dual: a projection block's, two batch norms)
  size_t index = 0;  // in network order, for the seeds
  double macs = 0;   // per image, all of the group's convolutions
};

std::string case_shape(const Case& cs) {
  if (cs.role == Role::JoinOnly)
    return std::to_string(cs.cv.c) + " ch " + std::to_string(cs.cv.h) + "x" + std::to_string(cs.cv.h);
  return conv_shape(cs.cv);
}

// torchvision's resnet50 (v1.5: the stride in c2), 224 px: 53 convolutions, 16 joins (4 of them dual).
// Grouped by (role, shape), most multiply-accumulates first: if the budget runs out, what is left is small.
std::vector<Case> resnet50_cases() {
  struct Layer {
    std::string name;
    Role role;
    Conv cv;
    int single, dual;
  };
  std::vector<Layer> layers;
  // The stem in the trainer's space-to-depth form (worker/gpu/space_to_depth.cu): 7x7/2 over 3 channels at
  // 224 px becomes 4x4/1 over 16 channels at 115 px, unpadded (112 px out).
  layers.push_back({"stem", Role::Plain, {16, 64, 115, 4, 1, 0}, 0, 0});
  const int blocks[4] = {3, 4, 6, 3};
  int64_t cin = 64, h = 56;  // the max-pool's output
  bool first = true, prev_dual = false;
  for (int l = 0; l < 4; ++l) {
    const int64_t w = int64_t(64) << l, out = 4 * w;
    for (int b = 0; b < blocks[l]; ++b) {
      const std::string p = "l" + std::to_string(l + 1) + ".b" + std::to_string(b + 1) + ".";
      const int64_t in_c = b == 0 ? cin : out, s = b == 0 && l > 0 ? 2 : 1, h_out = (h + 2 - 3) / s + 1;
      if (first)
        layers.push_back({p + "c1", Role::Plain, {in_c, w, h, 1, 1, 0}, 0, 0});
      else
        layers.push_back({p + "c1", Role::Join, {in_c, w, h, 1, 1, 0}, prev_dual ? 0 : 1, prev_dual ? 1 : 0});
      layers.push_back({p + "c2", Role::Prologue, {w, w, h, 3, s, 1}, 0, 0});
      layers.push_back({p + "c3", Role::Prologue, {w, out, h_out, 1, 1, 0}, 0, 0});
      if (b == 0) layers.push_back({p + "ds", Role::Plain, {in_c, out, h, 1, s, 0}, 0, 0});
      first = false;
      prev_dual = b == 0;
      h = h_out;
    }
    cin = out;
  }
  layers.push_back({"l4.b3.out", Role::JoinOnly, {2048, 0, 7, 0, 1, 0}, 1, 0});

  std::vector<Case> cases;
  int convs = 0, joins = 0, duals = 0;
  for (const Layer& ly : layers) {
    auto same = [&](const Case& c) {
      return c.role == ly.role && c.cv.c == ly.cv.c && c.cv.k == ly.cv.k && c.cv.h == ly.cv.h && c.cv.r == ly.cv.r &&
             c.cv.stride == ly.cv.stride && c.cv.pad == ly.cv.pad;
    };
    auto it = std::find_if(cases.begin(), cases.end(), same);
    if (it == cases.end()) {
      Case c;
      c.name = ly.name;
      c.role = ly.role;
      c.cv = ly.cv;
      c.index = cases.size();
      it = cases.insert(cases.end(), c);
    }
    if (ly.role != Role::JoinOnly) {
      ++it->count;
      ++convs;
      it->macs += double(ly.cv.o() * ly.cv.o()) * double(ly.cv.k * ly.cv.c * ly.cv.r * ly.cv.r);
    }
    it->single += ly.single;
    it->dual += ly.dual;
    joins += ly.single + ly.dual;
    duals += ly.dual;
  }
  if (convs != 53 || joins != 16 || duals != 4)
    throw std::logic_error("probe: the ResNet-50 table has " + std::to_string(convs) + " convolutions and " +
                           std::to_string(joins) + " joins, expected 53 and 16");
  std::stable_sort(cases.begin(), cases.end(), [](const Case& a, const Case& b) { return a.macs > b.macs; });
  return cases;
}

uint64_t seed_of(const Case& cs, int k) {
  return 0x243F6A8885A308D3ull * (cs.index + 1) + 0x9E3779B9ull * uint64_t(k);
}

// --- Results: one line per row, the Markdown table, the saving per step

namespace pattern {
constexpr const char* kConvGenstats = "conv+genstats";
constexpr const char* kConvBNfprop = "ConvBNfprop (sbr+conv+genstats)";
constexpr const char* kFinalize = "BN finalize";
constexpr const char* kSbar = "SBAR (scale-bias-add-ReLU)";
constexpr const char* kDbar = "DBAR (dual SBAR)";
constexpr const char* kDbarcsSingle = "DBARCS (SBAR+1x1 conv+genstats)";
constexpr const char* kDbarcsDual = "DBARCS dual (DBAR+1x1 conv+genstats)";
constexpr const char* kDdbw = "DgradDreluBNBwdWeight";
constexpr const char* kDbnApply = "dBNApply";
constexpr const char* kWgrad = "ConvBNwgrad (sbr+wgrad)";
constexpr const char* kJoinDgrad = "join dgrad+skip+dReLU+dBNweight";
constexpr const char* kJoinDgradDual = "dual join dgrad+skip+dReLU+2 dBNweight";
constexpr const char* kJoinApply = "join dBNApply";
constexpr const char* kJoinApplyDual = "dual join dBNApply";
constexpr const char* kCtlSbrConv = "sbr+conv, no stats (control)";
constexpr const char* kCtlConvSum = "conv+one reduction (control)";
constexpr const char* kCtlDgradSum = "dgrad+dReLU+one reduction (control)";
}  // namespace pattern

// Joins: in the fp16 path with SBAR/DBAR at the joins only; Dbarcs: in the one with DBARCS there only.
enum class Path : uint8_t { Both, Joins, Dbarcs };

struct Row {
  std::string pattern;
  const Dt* dt = &kF16;
  std::string layer, shape;
  int count = 0;  // times per training step
  Path path = Path::Both;
  std::string status = "not run";  // "ok", or why the fused graph did not run
  std::string engine, unfused;     // unfused: the passes the fused graph replaces
  double build_s = 0, fused_ms = -1, unfused_ms = -1;
  std::vector<Check> checks;
  std::string check_note;  // why a row that ran has no check
  bool ok() const { return status == "ok" && fused_ms >= 0 && unfused_ms >= 0; }
  double saved() const { return ok() ? unfused_ms - fused_ms : 0.0; }
  const Check* worst() const {
    const Check* w = nullptr;
    for (const Check& c : checks)
      if (!w || c.ratio() > w->ratio()) w = &c;
    return w;
  }
};

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}
std::string ms_str(double v) { return v < 0 ? "-" : fmt("%.3f", v); }

std::string check_str(const Check& c) {
  if (!c.err.finite || !c.in.finite) return c.what + " NOT FINITE";
  char b[160];
  std::snprintf(b, sizeof b, "%s %.1e/%.1e (tol %.1e/%.1e)%s", c.what.c_str(), c.err.max, c.err.l2, c.tol_max,
                c.tol_l2, c.pass() ? "" : " FAIL");
  return b;
}

class Report {
 public:
  explicit Report(double t0) : t0_(t0) {}

  void add(Row r) {
    std::string checks;
    for (const Check& c : r.checks) checks += (checks.empty() ? "" : "; ") + check_str(c);
    if (checks.empty()) checks = r.check_note.empty() ? "-" : r.check_note;
    std::printf(
        "[%6.1f s] %-38s %-4s %-10s x%-2d %-22s %s  %s%s  build %.2f s  fused %s  unfused %s (%s)  saved %s  err "
        "%s\n",
        now_s() - t0_, r.pattern.c_str(), r.dt->name, r.layer.c_str(), r.count, r.shape.c_str(),
        r.status == "ok" ? "OK" : "NO", r.status == "ok" ? "" : (r.status + "  ").c_str(), r.engine.c_str(),
        r.build_s, ms_str(r.fused_ms).c_str(), ms_str(r.unfused_ms).c_str(), r.unfused.c_str(),
        r.ok() ? fmt("%.3f", r.saved()).c_str() : "-", checks.c_str());
    std::fflush(stdout);
    rows_.push_back(std::move(r));
  }

  void summary(int64_t batch, const std::string& stopped) const {
    std::printf("\n## cuDNN fusion probe: every row (ms = median device time; saved = unfused - fused)\n\n");
    std::printf("| pattern | shape | dtype | engine | fused ms | unfused ms | saved ms | error |\n");
    std::printf("|---|---|---|---|---|---|---|---|\n");
    // Grouped by pattern (in the order they first ran), layers in the order they ran.
    std::vector<std::string> order;
    for (const Row& r : rows_)
      if (std::find(order.begin(), order.end(), r.pattern + r.dt->name) == order.end())
        order.push_back(r.pattern + r.dt->name);
    std::vector<const Row*> sorted;
    for (const Row& r : rows_) sorted.push_back(&r);
    std::stable_sort(sorted.begin(), sorted.end(), [&](const Row* x, const Row* y) {
      return std::find(order.begin(), order.end(), x->pattern + x->dt->name) <
             std::find(order.begin(), order.end(), y->pattern + y->dt->name);
    });
    for (const Row* rp : sorted) {
      const Row& r = *rp;
      std::string engine = r.status == "ok" ? r.engine : "none: " + r.status.substr(0, 110);
      std::replace(engine.begin(), engine.end(), '|', '/');
      std::string err = "-";
      if (const Check* w = r.worst()) {
        err = check_str(*w);
        int fails = 0;
        for (const Check& c : r.checks) fails += !c.pass();
        if (fails > 1) err += " (" + std::to_string(fails) + " outputs fail)";
      } else if (!r.check_note.empty()) {
        err = r.check_note.substr(0, 80);
      }
      std::replace(err.begin(), err.end(), '|', '/');
      std::printf("| %s | %s x%d: %s | %s | %s | %s | %s | %s | %s |\n", r.pattern.c_str(), r.layer.c_str(), r.count,
                  r.shape.c_str(), r.dt->name, engine.c_str(), ms_str(r.status == "ok" ? r.fused_ms : -1).c_str(),
                  ms_str(r.unfused_ms).c_str(), r.ok() ? fmt("%.3f", r.saved()).c_str() : "-", err.c_str());
    }
    per_step(batch);
    if (!stopped.empty()) std::printf("\nThe probe stopped early: %s\n", stopped.c_str());
  }

 private:
  // Each row's times count `count` times per step; where the fused graph is missing the unfused chain stays.
  void per_step(int64_t batch) const {
    struct Sum {
      const Dt* dt = nullptr;
      int layers = 0, fused = 0, not_run = 0, failing = 0;
      double unfused = 0, fused_ms = 0;
    };
    std::vector<std::pair<std::string, Sum>> sums;  // in the order patterns first appear
    double path_joins = 0, path_dbarcs = 0, unfused_joins = 0, unfused_dbarcs = 0;
    int rows_failing = 0, rows_not_run = 0;
    for (const Row& r : rows_) {
      const std::string key = r.pattern + " " + r.dt->name;
      auto it = std::find_if(sums.begin(), sums.end(), [&](const auto& s) { return s.first == key; });
      if (it == sums.end()) it = sums.insert(sums.end(), {key, Sum{r.dt}});
      Sum& s = it->second;
      s.layers += r.count;
      const bool ran = r.unfused_ms >= 0;
      if (!ran) s.not_run += r.count;
      if (r.ok()) s.fused += r.count;
      bool failing = false;
      for (const Check& c : r.checks) failing |= !c.pass();
      if (failing) s.failing += r.count;
      rows_failing += failing;
      rows_not_run += !ran;
      const double unf = ran ? r.unfused_ms * r.count : 0;
      s.unfused += unf;
      s.fused_ms += ran ? (r.ok() ? r.fused_ms : r.unfused_ms) * r.count : 0;
      if (r.dt == &kF16) {
        if (r.path != Path::Dbarcs) path_joins += r.saved() * r.count, unfused_joins += unf;
        if (r.path != Path::Joins) path_dbarcs += r.saved() * r.count, unfused_dbarcs += unf;
      }
    }
    std::printf(
        "\n## Per training step (batch %ld): each layer once per step, forward and backward as they occur\n\n",
        long(batch));
    std::printf(
        "| pattern | dtype | layers fused / applicable | unfused ms/step | fused ms/step | saved ms/step |\n");
    std::printf("|---|---|---|---|---|---|\n");
    for (const auto& [key, s] : sums) {
      std::string layers = std::to_string(s.fused) + " / " + std::to_string(s.layers);
      if (s.not_run) layers += " (" + std::to_string(s.not_run) + " not run)";
      if (s.failing) layers += " (" + std::to_string(s.failing) + " failing the check)";
      std::printf("| %s | %s | %s | %.2f | %.2f | %.2f |\n", key.substr(0, key.size() - 5).c_str(), s.dt->name,
                  layers.c_str(), s.unfused, s.fused_ms, s.unfused - s.fused_ms);
    }
    std::printf(
        "\nFull fp16 fused path, SBAR/DBAR at the joins: saves %.2f ms per step (of %.2f ms these passes take "
        "unfused).\n",
        path_joins, unfused_joins);
    std::printf("Full fp16 fused path, DBARCS at the joins:    saves %.2f ms per step (of %.2f ms).\n", path_dbarcs,
                unfused_dbarcs);
    std::printf(
        "Not counted: the stem's BN + ReLU + max-pool, the last join's backward, the unchanged wgrads of "
        "c1/ds/stem.\n");
    if (rows_not_run)
      std::printf("%d row(s) not run (budget or an earlier failure): their layers count as unfused.\n", rows_not_run);
    if (rows_failing)
      std::printf("%d row(s) fail their numerical check: their savings are counted above.\n", rows_failing);
  }

  double t0_;
  std::vector<Row> rows_;
};

// --- Running a case's rows

struct StopRun : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// A case's rows, declared before it runs, so that a row cut short (budget, a failure) still reports.
class CaseRun {
 public:
  CaseRun(Gpu& g, Report& rep, const Case& cs) : g_(g), rep_(rep), cs_(cs) {}
  CaseRun(const CaseRun&) = delete;
  CaseRun& operator=(const CaseRun&) = delete;

  size_t declare(const char* pattern, const Dt& dt, int count, Path path = Path::Both) {
    Row r;
    r.pattern = pattern;
    r.dt = &dt;
    r.layer = cs_.name;
    r.shape = case_shape(cs_);
    r.count = count;
    r.path = path;
    rows_.push_back(std::move(r));
    done_.push_back(false);
    return rows_.size() - 1;
  }

  // Runs row i: `body` times the unfused chain, builds, times and checks the fused graph; an exception
  // becomes the row's status. A CUDA error that outlives the row (the context is gone) stops the probe.
  void run(size_t i, const std::function<void(Row&)>& body) {
    Row& r = rows_.at(i);
    if (g_.out_of_time()) {
      r.status = "not run (budget)";
    } else {
      try {
        body(r);
      } catch (const std::exception& e) {
        r.status = e.what();
        (void)cudaGetLastError();  // a launch error would otherwise surface at the next check
      }
    }
    done_[i] = true;
    rep_.add(r);
    if (cudaStreamSynchronize(g_.s) != cudaSuccess) {
      (void)cudaGetLastError();
      const cudaError_t e = cudaDeviceSynchronize();
      if (e != cudaSuccess)
        throw StopRun(std::string("CUDA error ") + cudaGetErrorString(e) + " after " + r.pattern + " on " + r.layer);
    }
  }

  // After the declarations: true when the budget is spent (the case then sets nothing up).
  bool skip() const { return g_.out_of_time(); }

  void finish(const std::string& why) {
    for (size_t i = 0; i < rows_.size(); ++i)
      if (!done_[i]) {
        rows_[i].status = why;
        done_[i] = true;
        rep_.add(rows_[i]);
      }
  }

 private:
  Gpu& g_;
  Report& rep_;
  const Case& cs_;
  std::vector<Row> rows_;
  std::vector<bool> done_;
};

// Copies a built graph's plan into its row; false when it did not build (the row says why).
bool planned(Row& r, const Fused& f) {
  r.status = f.plan.status;
  r.engine = f.plan.engine + (f.variant.empty() ? "" : " (" + f.variant + ")");
  r.build_s = f.plan.build_s;
  return f.ok();
}

// The unfused side of a row: what it runs, and its median time.
void time_unfused(Gpu& g, Row& r, const std::string& what, const std::function<void()>& chain) {
  r.unfused = what;
  r.unfused_ms = time_ms(g, chain);
}

// The fused side of a row, f already built: its engine (or why it did not build) into the row; when it
// runs, its median time, and one more run on zeroed outputs for the checks. False when it did not build.
bool measure(Gpu& g, Row& r, Fused& f, std::initializer_list<std::pair<const char*, const void*>> ptrs) {
  if (!planned(r, f)) return false;
  Pack p = bind_ptrs(f, ptrs);
  r.fused_ms = time_ms(g, [&] { run_graph(g, f, p); });
  run_fresh(g, f, p);
  return true;
}

Fused built(Gpu& g, Fused f) {
  build(g, f, Numerics::Any);
  return f;
}

// Fills a row's checks; a reference that cannot run leaves a note instead.
void verify(Row& r, const std::string& refs_failed, const std::function<void()>& body) {
  if (!refs_failed.empty()) {
    r.check_note = "no fp32 reference: " + refs_failed;
    return;
  }
  try {
    body();
  } catch (const std::exception& e) {
    r.check_note = std::string("check failed: ") + e.what();
  }
}

// --- The cases

struct Sizes {
  int64_t n, m_in, m_out;
  size_t nx, ny, nw;
};
Sizes sizes_of(const Gpu& g, const Conv& cv) {
  const int64_t n = g.batch, m_in = n * cv.h * cv.h, m_out = n * cv.o() * cv.o();
  return {n, m_in, m_out, size_t(m_in * cv.c), size_t(m_out * cv.k), size_t(cv.k * cv.c * cv.r * cv.r)};
}
float w_scale(const Conv& cv) { return std::sqrt(3.f / float(cv.c * cv.r * cv.r)); }  // unit output variance

// The finalize of a conv's batch norm (k channels over m rows) from fp32 sums of its output; the reference
// in double from the same fp32 sums (r) and from the exact sums (u).
void finalize_row(Gpu& g, Arena& a, CaseRun& cr, size_t row, Bn& bn, const std::vector<double>& exact,
                  const std::string& refs_failed) {
  cr.run(row, [&](Row& r) {
    r.unfused = "none: bn.cu's statistics pass finalizes";
    r.unfused_ms = 0;
    if (!refs_failed.empty()) throw std::runtime_error("needs the fp32 reference's sums: " + refs_failed);
    const size_t c = size_t(bn.c);
    const std::vector<float> in(exact.begin(), exact.end());
    float* sums = a.f32(2 * c);
    to_device(sums, in);
    const std::string eq16 = "eq " + std::string(r.dt->name);
    Fused f = first_supported(g, {{eq16, [&] { return bn_finalize(bn.c, bn.m, r.dt->fe); }},
                                  {"eq FLOAT", [&] { return bn_finalize(bn.c, bn.m, kFloat); }}});
    const Dt& eq = f.variant == "eq FLOAT" ? kF32 : *r.dt;
    void* es = a.of(eq, c);
    void* eb = a.of(eq, c);
    float *mean = a.f32(c), *inv = a.f32(c), *nrm = a.f32(c), *nrv = a.f32(c);
    if (!measure(g, r, f,
                 {{"sum", sums}, {"sq", sums + c}, {"gamma", bn.gamma}, {"beta", bn.beta}, {"rmean", bn.t_rmean},
                  {"rvar", bn.t_rvar}, {"eq_scale", es}, {"eq_bias", eb}, {"mean", mean}, {"invstd", inv},
                  {"next_rmean", nrm}, {"next_rvar", nrv}}))
      return;
    // eq scale, eq bias, mean, invstd in double from sums s (the statistics pass's arithmetic)
    auto ref = [&](const std::vector<double>& s) {
      std::vector<float> o(4 * c);
      for (size_t i = 0; i < c; ++i) {
        const double mu = s[i] / double(bn.m), var = std::max(0.0, s[c + i] / double(bn.m) - mu * mu);
        const double inv_d = 1.0 / std::sqrt(var + double(kEps)), sc = double(bn.h_gamma[i]) * inv_d;
        o[i] = float(sc);
        o[c + i] = float(double(bn.h_beta[i]) - mu * sc);
        o[2 * c + i] = float(mu);
        o[3 * c + i] = float(inv_d);
      }
      float* d = a.f32(4 * c);
      to_device(d, o);
      return d;
    };
    float* rr = ref(std::vector<double>(in.begin(), in.end()));
    float* ru = ref(exact);
    r.checks.push_back(check(g, "eq_scale", eq, es, rr, ru, c));
    r.checks.push_back(check(g, "eq_bias", eq, eb, rr + c, ru + c, c));
    r.checks.push_back(check(g, "mean", kF32, mean, rr + 2 * c, ru + 2 * c, c));
    r.checks.push_back(check(g, "invstd", kF32, inv, rr + 3 * c, ru + 3 * c, c));
  });
}

// conv+genstats on x against the conv and the statistics pass, checked against the fp32 conv of x.r
// (and of x.u for the tolerance), then the finalize of the conv's batch norm from those sums.
void conv_genstats_rows(Gpu& g, Arena& a, CaseRun& cr, Convs& convs, const Conv& cv, const In& x, const In& w,
                        Bn& bnc, size_t r_cg, size_t r_fin, std::string refs_failed) {
  const Dt& dt = kF16;
  const Sizes z = sizes_of(g, cv);
  const int k = int(cv.k);
  float *yr = a.f32(z.ny), *yu = a.f32(z.ny), *sr = nullptr, *su = nullptr;
  std::vector<double> exact;
  if (refs_failed.empty()) try {
      convs.run(Dir::Fprop, true, x.r, w.r, yr);
      convs.run(Dir::Fprop, true, x.u, w.u, yu);
      sr = channel_sums_f32(g, a, yr, z.m_out, k, &exact);
      su = channel_sums_f32(g, a, yu, z.m_out, k);
    } catch (const std::exception& e) {
      refs_failed = e.what();
    }
  void* y16 = a.of(dt, z.ny);
  void* z16 = a.of(dt, z.ny);
  convs.run(Dir::Fprop, false, x.h, w.h, y16);
  auto fwd_c = bn_forward_passes(g, dt, bnc, y16, nullptr, true, z16);
  cr.run(r_cg, [&](Row& r) {
    time_unfused(g, r, "conv+stats", [&] {
      convs.run(Dir::Fprop, false, x.h, w.h, y16);
      fwd_c->run(kStats);
    });
    Fused f = built(g, conv_genstats(dt, cv, z.n));
    void* yf = a.of(dt, z.ny);
    float* sf = a.f32(2 * size_t(k));
    if (!measure(g, r, f, {{"x", x.h}, {"w", w.h}, {"y", yf}, {"sum", sf}, {"sq", sf + k}})) return;
    verify(r, refs_failed, [&] {
      r.checks.push_back(check(g, "y", dt, yf, yr, yu, z.ny));
      r.checks.push_back(check(g, "sum", kF32, sf, sr, su, size_t(k)));
      r.checks.push_back(check(g, "sq", kF32, sf + k, sr + k, su + k, size_t(k)));
    });
  });
  finalize_row(g, a, cr, r_fin, bnc, exact, refs_failed);
}

// A conv whose input is not a batch norm's output (the stem, l1.b1.c1, the downsamples): conv+genstats and
// the finalize of its own batch norm.
void run_plain(Gpu& g, CaseRun& cr, const Case& cs) {
  const Dt& dt = kF16;
  const size_t r_cg = cr.declare(pattern::kConvGenstats, dt, cs.count);
  const size_t r_fin = cr.declare(pattern::kFinalize, dt, cs.count);
  if (cr.skip()) return;
  const Conv& cv = cs.cv;
  const Sizes z = sizes_of(g, cv);
  const int k = int(cv.k);
  Arena a;
  const bool stem = cs.name == "stem";
  const In x = random_in(g, a, dt, z.nx, seed_of(cs, 1), 1.5f, stem ? 0.f : 0.2f, !stem);
  const In w = random_in(g, a, dt, z.nw, seed_of(cs, 2), w_scale(cv), 0.f);
  Bn bnc = make_bn(g, a, k, z.m_out, seed_of(cs, 3), nullptr);
  Convs convs(g, cv, dt);

  conv_genstats_rows(g, a, cr, convs, cv, x, w, bnc, r_cg, r_fin, "");
}

// A conv whose input is relu(bn(y0)) (c2, c3): ConvBNfprop, DgradDreluBNBwdWeight, dBNApply, ConvBNwgrad,
// and the finalize of its own batch norm.
void run_prologue(Gpu& g, CaseRun& cr, const Case& cs) {
  const Dt& dt = kF16;
  const size_t r_fprop = cr.declare(pattern::kConvBNfprop, dt, cs.count);
  const size_t r_ddbw = cr.declare(pattern::kDdbw, dt, cs.count);
  const size_t r_apply = cr.declare(pattern::kDbnApply, dt, cs.count);
  const size_t r_wgrad = cr.declare(pattern::kWgrad, dt, cs.count);
  const size_t r_fin = cr.declare(pattern::kFinalize, dt, cs.count);
  if (cr.skip()) return;
  const Conv& cv = cs.cv;
  const Sizes z = sizes_of(g, cv);
  const int c = int(cv.c), k = int(cv.k);
  Arena a;
  const In y0 = random_in(g, a, dt, z.nx, seed_of(cs, 1), 1.f, 0.2f);
  const In w = random_in(g, a, dt, z.nw, seed_of(cs, 2), w_scale(cv), 0.f);
  const In dy = random_in(g, a, dt, z.ny, seed_of(cs, 3), 1.f, 0.f);
  Bn bnp = make_bn(g, a, c, z.m_in, seed_of(cs, 4), y0.r);  // the previous batch norm, whose apply is the prologue
  Bn bnc = make_bn(g, a, k, z.m_out, seed_of(cs, 5), nullptr);
  const In s = stored(g, a, dt, bnp.scale, size_t(c)), b = stored(g, a, dt, bnp.shift, size_t(c));
  Convs convs(g, cv, dt);

  // fp32 references: forward on the 16-bit scale/bias (what ConvBNfprop reads), backward with the exact
  // statistics (what DgradDreluBNBwdWeight reads)
  std::string refs_failed;
  float *xr = a.f32(z.nx), *xu = a.f32(z.nx), *yr = a.f32(z.ny), *yu = a.f32(z.ny), *sr = nullptr, *su = nullptr;
  float *gr = a.f32(z.nx), *gu = a.f32(z.nx), *dxr = a.f32(z.nx), *dxu = a.f32(z.nx), *dzr = a.f32(z.nx),
        *dzu = a.f32(z.nx);
  float *dwr = a.f32(z.nw), *dwu = a.f32(z.nw);
  BnGrads bgr{}, bgu{};
  std::vector<double> exact;
  try {
    ref_apply(g, a, y0.r, z.m_in, c, s.r, b.r, nullptr, true, xr);
    ref_apply(g, a, y0.u, z.m_in, c, s.u, b.u, nullptr, true, xu);
    convs.run(Dir::Fprop, true, xr, w.r, yr);
    convs.run(Dir::Fprop, true, xu, w.u, yu);
    sr = channel_sums_f32(g, a, yr, z.m_out, k, &exact);
    su = channel_sums_f32(g, a, yu, z.m_out, k);
    convs.run(Dir::Dgrad, true, dy.r, w.r, gr);
    convs.run(Dir::Dgrad, true, dy.u, w.u, gu);
    bgr = ref_bn_backward(g, a, bnp, y0.r, xr, gr, nullptr, BnMask::FromInput, dxr, dzr);
    bgu = ref_bn_backward(g, a, bnp, y0.u, xu, gu, nullptr, BnMask::FromInput, dxu, dzu);
    convs.run(Dir::Wgrad, true, dy.r, xr, dwr);
    convs.run(Dir::Wgrad, true, dy.u, xu, dwu);
  } catch (const std::exception& e) {
    refs_failed = e.what();
  }

  // The trainer's chain: bn_prev (stats, apply+ReLU) -> conv -> bn (stats ...); dgrad -> bn_prev backward.
  void* x16 = a.of(dt, z.nx);
  void* y16 = a.of(dt, z.ny);
  void* z16 = a.of(dt, z.ny);
  void* g16 = a.of(dt, z.nx);
  void* dx16 = a.of(dt, z.nx);
  void* dw16 = a.of(dt, z.nw);
  auto fwd_p = bn_forward_passes(g, dt, bnp, y0.h, nullptr, true, x16);
  convs.run(Dir::Fprop, false, x16, w.h, y16);
  auto fwd_c = bn_forward_passes(g, dt, bnc, y16, nullptr, true, z16);
  convs.run(Dir::Dgrad, false, dy.h, w.h, g16);
  auto bwd_p = bn_backward_passes(g, dt, bnp, y0.h, x16, g16, nullptr, BnMask::FromInput, dx16, nullptr);

  cr.run(r_fprop, [&](Row& r) {
    time_unfused(g, r, "apply+ReLU, conv, stats", [&] {
      fwd_p->run(kApply);
      convs.run(Dir::Fprop, false, x16, w.h, y16);
      fwd_c->run(kStats);
    });
    Fused f = built(g, sbr_conv(dt, cv, z.n, dt.fe, true));
    void* yf = a.of(dt, z.ny);
    float* sf = a.f32(2 * size_t(k));
    if (!measure(g, r, f, {{"x", y0.h}, {"s", s.h}, {"b", b.h}, {"w", w.h}, {"y", yf}, {"sum", sf}, {"sq", sf + k}}))
      return;
    verify(r, refs_failed, [&] {
      r.checks.push_back(check(g, "y", dt, yf, yr, yu, z.ny));
      r.checks.push_back(check(g, "sum", kF32, sf, sr, su, size_t(k)));
      r.checks.push_back(check(g, "sq", kF32, sf + k, sr + k, su + k, size_t(k)));
    });
  });

  // DgradDreluBNBwdWeight's outputs feed the dBNApply row (or, where it does not run, the trainer's own).
  void* dzf = a.of(dt, z.nx);
  float *ds = a.f32(size_t(c)), *db = a.f32(size_t(c)), *A = a.f32(size_t(c)), *B = a.f32(size_t(c)),
        *C = a.f32(size_t(c));
  bool ddbw_ok = false;
  cr.run(r_ddbw, [&](Row& r) {
    time_unfused(g, r, "dgrad, BN backward reduction", [&] {
      convs.run(Dir::Dgrad, false, dy.h, w.h, g16);
      bwd_p->run(kReduce);
    });
    Fused f = built(g, dgrad_drelu_dbnw(dt, cv, z.n));
    if (!measure(g, r, f,
                 {{"dy", dy.h}, {"w", w.h}, {"x", y0.h}, {"mean", bnp.mean}, {"invstd", bnp.invstd},
                  {"gamma", bnp.gamma}, {"beta", bnp.beta}, {"dz", dzf}, {"dscale", ds}, {"dbias", db},
                  {"a", A}, {"b", B}, {"c", C}}))
      return;
    ddbw_ok = true;
    verify(r, refs_failed, [&] {
      r.checks.push_back(check(g, "dz", dt, dzf, dzr, dzu, z.nx));
      r.checks.push_back(check(g, "dscale", kF32, ds, bgr.dgamma, bgu.dgamma, size_t(c)));
      r.checks.push_back(check(g, "dbias", kF32, db, bgr.dbeta, bgu.dbeta, size_t(c)));
    });
  });

  cr.run(r_apply, [&](Row& r) {
    time_unfused(g, r, "BN backward dx", [&] { bwd_p->run(kDx); });
    if (!ddbw_ok) {  // the masked gradient and coefficients from the trainer's kernels instead
      wg::bn_backward(dt.wk, y0.h, x16, g16, nullptr, bnp.m, c, bnp.gamma, bnp.beta, bnp.t_mean, bnp.t_invstd,
                      BnMask::FromInput, dx16, dzf, bnp.t_dgamma, bnp.t_dbeta, bnp.sync, bnp.t_coef, g.s);
      coef_to_abc(bnp, A, B, C);
    }
    Fused f = built(g, dbn_apply(dt, c, cv.h, z.n, false));
    void* dxf = a.of(dt, z.nx);
    if (!measure(g, r, f, {{"dy", dzf}, {"x", y0.h}, {"a", A}, {"b", B}, {"c", C}, {"dx", dxf}})) return;
    if (!ddbw_ok) r.engine += " (inputs from bn.cu: DgradDreluBNBwdWeight did not run)";
    verify(r, refs_failed, [&] { r.checks.push_back(check(g, "dx", dt, dxf, dxr, dxu, z.nx)); });
  });

  cr.run(r_wgrad, [&](Row& r) {
    time_unfused(g, r, "wgrad on the stored relu(bn(y0))", [&] { convs.run(Dir::Wgrad, false, dy.h, x16, dw16); });
    Fused f = first_supported(g, {{"intermediate FLOAT", [&] { return sbr_wgrad(dt, cv, z.n, kFloat); }},
                                  {"intermediate HALF", [&] { return sbr_wgrad(dt, cv, z.n, dt.fe); }}});
    void* dwf = a.of(dt, z.nw);
    if (!measure(g, r, f, {{"dy", dy.h}, {"x", y0.h}, {"s", s.h}, {"b", b.h}, {"dw", dwf}})) return;
    verify(r, refs_failed, [&] { r.checks.push_back(check(g, "dw", dt, dwf, dwr, dwu, z.nw)); });
  });
  finalize_row(g, a, cr, r_fin, bnc, exact, refs_failed);
}

// A 1x1 conv after a block's join (c1 of later blocks) and the join itself, single (identity residual) and
// dual (projection: two batch norms): SBAR/DBAR, conv+genstats on the join's output, DBARCS, the join's
// dgrad with its BN weight gradients, the join's dBNApply, the finalize. JoinOnly: SBAR alone.
void run_join(Gpu& g, CaseRun& cr, const Case& cs) {
  const Dt& dt = kF16;
  const bool conv = cs.role == Role::Join;
  struct KindRows {
    size_t sbar, dbarcs, dgrad, apply;
  };
  KindRows kinds[2];
  for (int d = 0; d < 2; ++d) {
    const int joins = d ? cs.dual : cs.single;
    if (!joins) continue;
    kinds[d].sbar = cr.declare(d ? pattern::kDbar : pattern::kSbar, dt, joins, conv ? Path::Joins : Path::Both);
    if (!conv) continue;
    kinds[d].dbarcs = cr.declare(d ? pattern::kDbarcsDual : pattern::kDbarcsSingle, dt, joins, Path::Dbarcs);
    kinds[d].dgrad = cr.declare(d ? pattern::kJoinDgradDual : pattern::kJoinDgrad, dt, joins);
    kinds[d].apply = cr.declare(d ? pattern::kJoinApplyDual : pattern::kJoinApply, dt, joins);
  }
  const size_t r_cg = conv ? cr.declare(pattern::kConvGenstats, dt, cs.count, Path::Joins) : 0;
  const size_t r_fin = conv ? cr.declare(pattern::kFinalize, dt, cs.count) : 0;
  if (cr.skip()) return;

  const Conv cv = conv ? cs.cv : Conv{cs.cv.c, cs.cv.c, cs.cv.h, 1, 1, 0};  // JoinOnly: the size of the join only
  const Sizes z = sizes_of(g, cv);
  const int c = int(cv.c), k = int(cv.k);
  Arena a;
  const In y3 = random_in(g, a, dt, z.nx, seed_of(cs, 1), 1.f, 0.2f);       // the join's bn3 input (c3's output)
  const In res = random_in(g, a, dt, z.nx, seed_of(cs, 2), 1.5f, 0.2f, true);  // identity residual: the block input
  const In yds = random_in(g, a, dt, z.nx, seed_of(cs, 3), 1.f, 0.1f);      // the downsample conv's output
  Bn bn3 = make_bn(g, a, c, z.m_in, seed_of(cs, 4), y3.r);
  Bn bnd = make_bn(g, a, c, z.m_in, seed_of(cs, 5), yds.r);
  const In s3 = stored(g, a, dt, bn3.scale, size_t(c)), b3 = stored(g, a, dt, bn3.shift, size_t(c));
  const In sd = stored(g, a, dt, bnd.scale, size_t(c)), bd = stored(g, a, dt, bnd.shift, size_t(c));
  Convs convs(g, cv, dt);
  In w, dy, dyb;
  if (conv) {
    w = random_in(g, a, dt, z.nw, seed_of(cs, 6), w_scale(cv), 0.f);
    dy = random_in(g, a, dt, z.ny, seed_of(cs, 7), 1.f, 0.f);      // the gradient at c1's output
    dyb = random_in(g, a, dt, z.nx, seed_of(cs, 8), 1.f, 0.f);     // the join output's gradient through the skip path
  }
  Bn bnc = make_bn(g, a, k, z.m_out, seed_of(cs, 9), nullptr);

  // z = relu(x3 * s3 + b3 + (dual ? yds * sd + bd : res)), fp32, from fp32 inputs and per-channel maps
  auto ref_join = [&](bool dual, const float* x3, const float* s3p, const float* b3p, const float* r, const float* xd,
                      const float* sdp, const float* bdp, float* out) {
    const float* other = r;
    if (dual) {
      float* t = a.f32(z.nx);
      ref_apply(g, a, xd, z.m_in, c, sdp, bdp, nullptr, false, t);
      other = t;
    }
    ref_apply(g, a, x3, z.m_in, c, s3p, b3p, other, true, out);
  };
  std::string refs_failed;
  float *gr = nullptr, *gu = nullptr;
  if (conv) try {
      gr = a.f32(z.nx);
      gu = a.f32(z.nx);
      convs.run(Dir::Dgrad, true, dy.r, w.r, gr);
      convs.run(Dir::Dgrad, true, dy.u, w.u, gu);
    } catch (const std::exception& e) {
      refs_failed = e.what();
    }

  // The trainer's: dgrad of the next conv (its share of the join output's gradient, added in bn3's reduction).
  void* g16 = conv ? a.of(dt, z.nx) : nullptr;
  void* y16 = conv ? a.of(dt, z.ny) : nullptr;
  void* zc16 = conv ? a.of(dt, z.ny) : nullptr;
  if (conv) convs.run(Dir::Dgrad, false, dy.h, w.h, g16);
  std::unique_ptr<Passes> fwd_c;
  In zin;  // the conv's input for conv+genstats: a join's output (u: the fp32 chain's, h: rounded)

  for (int d = 0; d < 2; ++d) {
    const bool dual = d == 1;
    if (!(dual ? cs.dual : cs.single)) continue;
    const KindRows& kr = kinds[d];
    float *zr = a.f32(z.nx), *zu = a.f32(z.nx), *zbr = a.f32(z.nx);
    float *yzr = nullptr, *yzu = nullptr, *szr = nullptr, *szu = nullptr;
    float *dzr = nullptr, *dzu = nullptr, *dx3r = nullptr, *dx3u = nullptr, *dxdr = nullptr, *dxdu = nullptr;
    BnGrads g3r{}, g3u{}, gdr{}, gdu{};
    std::string join_refs;  // the join's own references (SBAR)
    try {
      ref_join(dual, y3.r, s3.r, b3.r, res.r, yds.r, sd.r, bd.r, zr);  // forward: the 16-bit maps SBAR reads
      ref_join(dual, y3.u, s3.u, b3.u, res.u, yds.u, sd.u, bd.u, zu);
      ref_join(dual, y3.r, bn3.scale, bn3.shift, res.r, yds.r, bnd.scale, bnd.shift,
               zbr);  // backward's mask: fp32 maps
    } catch (const std::exception& e) {
      join_refs = e.what();
    }
    std::string kind_refs = join_refs.empty() ? refs_failed : join_refs;  // and with the conv's (the rest)
    try {
      if (conv && kind_refs.empty()) {
        yzr = a.f32(z.ny), yzu = a.f32(z.ny);
        convs.run(Dir::Fprop, true, zr, w.r, yzr);
        convs.run(Dir::Fprop, true, zu, w.u, yzu);
        szr = channel_sums_f32(g, a, yzr, z.m_out, k);
        szu = channel_sums_f32(g, a, yzu, z.m_out, k);
        dzr = a.f32(z.nx), dzu = a.f32(z.nx), dx3r = a.f32(z.nx), dx3u = a.f32(z.nx);
        g3r = ref_bn_backward(g, a, bn3, y3.r, zbr, dyb.r, gr, BnMask::FromOutput, dx3r, dzr);
        g3u = ref_bn_backward(g, a, bn3, y3.u, zu, dyb.u, gu, BnMask::FromOutput, dx3u, dzu);
        if (dual) {
          dxdr = a.f32(z.nx), dxdu = a.f32(z.nx);
          gdr = ref_bn_backward(g, a, bnd, yds.r, yds.r, dzr, nullptr, BnMask::None, dxdr, nullptr);
          gdu = ref_bn_backward(g, a, bnd, yds.u, yds.u, dzu, nullptr, BnMask::None, dxdu, nullptr);
        }
      }
    } catch (const std::exception& e) {
      kind_refs = e.what();
    }

    // The trainer's join: [bn_ds apply] then bn3 apply + residual + ReLU; backward bn3 (mask from its output,
    // the next conv's dgrad as the second gradient, the masked gradient out for the skip path) [then bn_ds].
    void* t16 = a.of(dt, z.nx);
    void* z16 = a.of(dt, z.nx);
    std::unique_ptr<Passes> fwd_d, fwd_3, bwd_3, bwd_d;
    if (dual) fwd_d = bn_forward_passes(g, dt, bnd, yds.h, nullptr, false, t16);
    fwd_3 = bn_forward_passes(g, dt, bn3, y3.h, dual ? t16 : res.h, true, z16);
    auto join_unfused = [&] {
      if (dual) fwd_d->run(kApply);
      fwd_3->run(kApply);
    };

    cr.run(kr.sbar, [&](Row& r) {
      time_unfused(g, r, dual ? "apply (ds), apply+add+ReLU" : "apply+add+ReLU", join_unfused);
      Fused f = built(g, sbar(dt, c, cv.h, z.n, dual));
      void* yf = a.of(dt, z.nx);
      if (!measure(g, r, f,
                   {{"x", y3.h}, {"s", s3.h}, {"b", b3.h}, {"z", dual ? yds.h : res.h}, {"s2", sd.h}, {"b2", bd.h},
                    {"y", yf}}))
        return;
      verify(r, join_refs, [&] { r.checks.push_back(check(g, "y", dt, yf, zr, zu, z.nx)); });
    });
    if (!conv) continue;

    convs.run(Dir::Fprop, false, z16, w.h, y16);
    if (!fwd_c) fwd_c = bn_forward_passes(g, dt, bnc, y16, nullptr, true, zc16);
    if (!zin.h) zin = stored(g, a, dt, zu, z.nx);

    cr.run(kr.dbarcs, [&](Row& r) {
      time_unfused(g, r, dual ? "apply (ds), apply+add+ReLU, conv, stats" : "apply+add+ReLU, conv, stats", [&] {
        join_unfused();
        convs.run(Dir::Fprop, false, z16, w.h, y16);
        fwd_c->run(kStats);
      });
      Fused f = built(g, dbarcs(dt, cv, z.n, dual));
      void* ryf = a.of(dt, z.nx);
      void* yf = a.of(dt, z.ny);
      float* sf = a.f32(2 * size_t(k));
      if (!measure(g, r, f,
                   {{"x", y3.h}, {"s", s3.h}, {"b", b3.h}, {"z", dual ? yds.h : res.h}, {"s2", sd.h}, {"b2", bd.h},
                    {"w", w.h}, {"relu_y", ryf}, {"y", yf}, {"sum", sf}, {"sq", sf + k}}))
        return;
      verify(r, kind_refs, [&] {
        r.checks.push_back(check(g, "relu_y", dt, ryf, zr, zu, z.nx));
        r.checks.push_back(check(g, "y", dt, yf, yzr, yzu, z.ny));
        r.checks.push_back(check(g, "sum", kF32, sf, szr, szu, size_t(k)));
        r.checks.push_back(check(g, "sq", kF32, sf + k, szr + k, szu + k, size_t(k)));
      });
    });

    void* dz16 = a.of(dt, z.nx);
    void* dx316 = a.of(dt, z.nx);
    void* dxd16 = a.of(dt, z.nx);
    bwd_3 = bn_backward_passes(g, dt, bn3, y3.h, z16, dyb.h, g16, BnMask::FromOutput, dx316, dz16);
    if (dual) bwd_d = bn_backward_passes(g, dt, bnd, yds.h, yds.h, dz16, nullptr, BnMask::None, dxd16, nullptr);

    void* dzf = a.of(dt, z.nx);
    const size_t cc = size_t(c);
    float* o[10];  // dscale, dbias, a, b, c; the same for the downsample's batch norm
    for (float*& p : o) p = a.f32(cc);
    bool dgrad_ok = false;
    cr.run(kr.dgrad, [&](Row& r) {
      const char* what = dual ? "dgrad, BN reductions (bn3 with the skip gradient, ds)"
                              : "dgrad, BN reduction (with the skip gradient)";
      time_unfused(g, r, what, [&] {
        convs.run(Dir::Dgrad, false, dy.h, w.h, g16);
        bwd_3->run(kReduce);
        if (dual) bwd_d->run(kReduce);
      });
      Fused f = built(g, join_dgrad(dt, cv, z.n, dual));
      if (!measure(g, r, f,
                   {{"dy", dy.h}, {"w", w.h}, {"dyb", dyb.h}, {"x", y3.h}, {"mean", bn3.mean}, {"invstd", bn3.invstd},
                    {"gamma", bn3.gamma}, {"beta", bn3.beta}, {"r", res.h}, {"x2", yds.h}, {"mean2", bnd.mean},
                    {"invstd2", bnd.invstd}, {"gamma2", bnd.gamma}, {"beta2", bnd.beta}, {"dz", dzf},
                    {"dscale", o[0]}, {"dbias", o[1]}, {"a", o[2]}, {"b", o[3]}, {"c", o[4]},
                    {"dscale2", o[5]}, {"dbias2", o[6]}, {"a2", o[7]}, {"b2", o[8]}, {"c2", o[9]}}))
        return;
      dgrad_ok = true;
      verify(r, kind_refs, [&] {
        r.checks.push_back(check(g, "dz", dt, dzf, dzr, dzu, z.nx));
        r.checks.push_back(check(g, "dscale", kF32, o[0], g3r.dgamma, g3u.dgamma, cc));
        r.checks.push_back(check(g, "dbias", kF32, o[1], g3r.dbeta, g3u.dbeta, cc));
        if (dual) {
          r.checks.push_back(check(g, "dscale2", kF32, o[5], gdr.dgamma, gdu.dgamma, cc));
          r.checks.push_back(check(g, "dbias2", kF32, o[6], gdr.dbeta, gdu.dbeta, cc));
        }
      });
    });

    cr.run(kr.apply, [&](Row& r) {
      time_unfused(g, r, dual ? "BN backward dx (bn3, ds)" : "BN backward dx", [&] {
        bwd_3->run(kDx);
        if (dual) bwd_d->run(kDx);
      });
      const void* dz = dzf;
      if (!dgrad_ok) {  // the masked gradient and coefficients of the trainer's kernels instead
        dz = dz16;
        coef_to_abc(bn3, o[2], o[3], o[4]);
        if (dual) coef_to_abc(bnd, o[7], o[8], o[9]);
      }
      Fused f = built(g, dbn_apply(dt, c, cv.h, z.n, dual));
      void* dxf = a.of(dt, z.nx);
      void* dx2f = a.of(dt, z.nx);
      if (!measure(g, r, f,
                   {{"dy", dz}, {"x", y3.h}, {"a", o[2]}, {"b", o[3]}, {"c", o[4]}, {"x2", yds.h}, {"a2", o[7]},
                    {"b2", o[8]}, {"c2", o[9]}, {"dx", dxf}, {"dx2", dx2f}}))
        return;
      if (!dgrad_ok) r.engine += " (inputs from bn.cu: the join's fused dgrad did not run)";
      verify(r, kind_refs, [&] {
        r.checks.push_back(check(g, "dx", dt, dxf, dx3r, dx3u, z.nx));
        if (dual) r.checks.push_back(check(g, "dx2", dt, dx2f, dxdr, dxdu, z.nx));
      });
    });
  }
  if (!conv) return;

  // conv+genstats on a join's output (the path without DBARCS), then its batch norm's finalize.
  conv_genstats_rows(g, a, cr, convs, cv, zin, w, bnc, r_cg, r_fin, "");
}

// The bf16 controls on the generic runtime-fusion engine: sbr+conv without statistics and dgrad + dReLU +
// one reduction on the prologue convs, conv + one reduction on the others.
void run_controls(Gpu& g, CaseRun& cr, const Case& cs) {
  if (cs.role == Role::JoinOnly) return;
  const Dt& dt = kBF16;
  const bool pro = cs.role == Role::Prologue;
  const size_t r_sbr = pro ? cr.declare(pattern::kCtlSbrConv, dt, cs.count) : 0;
  const size_t r_dgs = pro ? cr.declare(pattern::kCtlDgradSum, dt, cs.count) : 0;
  const size_t r_sum = pro ? 0 : cr.declare(pattern::kCtlConvSum, dt, cs.count);
  if (cr.skip()) return;
  const Conv& cv = cs.cv;
  const Sizes z = sizes_of(g, cv);
  const int c = int(cv.c), k = int(cv.k);
  Arena a;
  const In w = random_in(g, a, dt, z.nw, seed_of(cs, 12), w_scale(cv), 0.f);
  Convs convs(g, cv, dt);

  if (!pro) {
    const In x = random_in(g, a, dt, z.nx, seed_of(cs, 11), 1.5f, 0.2f, true);
    cr.run(r_sum, [&](Row& r) {
      void* y16 = a.of(dt, z.ny);
      time_unfused(g, r, "plain conv (the sum alone costs the epilogue this much)",
                   [&] { convs.run(Dir::Fprop, false, x.h, w.h, y16); });
      Fused f = built(g, conv_sum(dt, cv, z.n));
      void* yf = a.of(dt, z.ny);
      float* sf = a.f32(size_t(k));
      if (!measure(g, r, f, {{"x", x.h}, {"w", w.h}, {"y", yf}, {"sum", sf}})) return;
      float *yr = a.f32(z.ny), *yu = a.f32(z.ny);
      std::string refs;
      verify(r, refs, [&] {
        convs.run(Dir::Fprop, true, x.r, w.r, yr);
        convs.run(Dir::Fprop, true, x.u, w.u, yu);
        r.checks.push_back(check(g, "y", dt, yf, yr, yu, z.ny));
        r.checks.push_back(check(g, "sum", kF32, sf, channel_sums_f32(g, a, yr, z.m_out, k),
                                 channel_sums_f32(g, a, yu, z.m_out, k), size_t(k)));
      });
    });
    return;
  }

  const In y0 = random_in(g, a, dt, z.nx, seed_of(cs, 13), 1.f, 0.2f);
  Bn bnp = make_bn(g, a, c, z.m_in, seed_of(cs, 14), y0.r);
  void* x16 = a.of(dt, z.nx);
  void* y16 = a.of(dt, z.ny);
  auto fwd_p = bn_forward_passes(g, dt, bnp, y0.h, nullptr, true, x16);
  cr.run(r_sbr, [&](Row& r) {
    time_unfused(g, r, "apply+ReLU, conv", [&] {
      fwd_p->run(kApply);
      convs.run(Dir::Fprop, false, x16, w.h, y16);
    });
    // fp32 scale/shift as the trainer keeps them; bf16 if the engine wants the io type
    const In s = stored(g, a, dt, bnp.scale, size_t(c)), b = stored(g, a, dt, bnp.shift, size_t(c));
    Fused f = first_supported(g, {{"s/b FLOAT", [&] { return sbr_conv(dt, cv, z.n, kFloat, false); }},
                                  {"s/b BF16", [&] { return sbr_conv(dt, cv, z.n, dt.fe, false); }}});
    const bool f32_sb = f.variant == "s/b FLOAT";
    void* yf = a.of(dt, z.ny);
    const void* sp = f32_sb ? static_cast<const void*>(bnp.scale) : s.h;
    const void* bp = f32_sb ? static_cast<const void*>(bnp.shift) : b.h;
    if (!measure(g, r, f, {{"x", y0.h}, {"s", sp}, {"b", bp}, {"w", w.h}, {"y", yf}})) return;
    verify(r, "", [&] {
      float *xr = a.f32(z.nx), *xu = a.f32(z.nx), *yr = a.f32(z.ny), *yu = a.f32(z.ny);
      ref_apply(g, a, y0.r, z.m_in, c, f32_sb ? bnp.scale : s.r, f32_sb ? bnp.shift : b.r, nullptr, true, xr);
      ref_apply(g, a, y0.u, z.m_in, c, bnp.scale, bnp.shift, nullptr, true, xu);
      convs.run(Dir::Fprop, true, xr, w.r, yr);
      convs.run(Dir::Fprop, true, xu, w.u, yu);
      r.checks.push_back(check(g, "y", dt, yf, yr, yu, z.ny));
    });
  });

  const In dy = random_in(g, a, dt, z.ny, seed_of(cs, 15), 1.f, 0.f);
  const In xrelu = random_in(g, a, dt, z.nx, seed_of(cs, 16), 1.f, 0.f, true);  // the stored ReLU output
  cr.run(r_dgs, [&](Row& r) {
    void* g16 = a.of(dt, z.nx);
    time_unfused(g, r, "plain dgrad (the dReLU and sum alone cost the epilogue this much)",
                 [&] { convs.run(Dir::Dgrad, false, dy.h, w.h, g16); });
    Fused f = built(g, dgrad_drelu_sum(dt, cv, z.n));
    void* dzf = a.of(dt, z.nx);
    float* sf = a.f32(size_t(c));
    if (!measure(g, r, f, {{"dy", dy.h}, {"w", w.h}, {"x", xrelu.h}, {"dz", dzf}, {"sum", sf}})) return;
    verify(r, "", [&] {
      float *gr = a.f32(z.nx), *gu = a.f32(z.nx);
      convs.run(Dir::Dgrad, true, dy.r, w.r, gr);
      convs.run(Dir::Dgrad, true, dy.u, w.u, gu);
      relu_mask_kernel<<<grid_for(z.nx), 256, 0, g.s>>>(gr, xrelu.r, gr, z.nx);
      relu_mask_kernel<<<grid_for(z.nx), 256, 0, g.s>>>(gu, xrelu.u, gu, z.nx);
      KERNEL_CHECK();
      r.checks.push_back(check(g, "dz", dt, dzf, gr, gu, z.nx));
      r.checks.push_back(check(g, "sum", kF32, sf, channel_sums_f32(g, a, gr, z.m_in, c),
                               channel_sums_f32(g, a, gu, z.m_in, c), size_t(c)));
    });
  });
}

// One case's rows (controls: its bf16 controls): a failure outside a row fails the case's remaining rows,
// and stops the probe when the GPU context did not survive it.
void run_case(Gpu& g, Report& rep, const Case& cs, bool controls) {
  CaseRun cr(g, rep, cs);
  try {
    if (controls)
      run_controls(g, cr, cs);
    else if (cs.role == Role::Plain)
      run_plain(g, cr, cs);
    else if (cs.role == Role::Prologue)
      run_prologue(g, cr, cs);
    else
      run_join(g, cr, cs);
    cr.finish(g.out_of_time() ? "not run (budget)" : "not run");
  } catch (const StopRun& e) {
    cr.finish("not run (the probe stopped)");
    throw;
  } catch (const std::exception& e) {
    (void)cudaGetLastError();
    cr.finish(std::string("case failed: ") + e.what());
    const cudaError_t sticky = cudaDeviceSynchronize();
    if (sticky != cudaSuccess)
      throw StopRun(std::string("CUDA error ") + cudaGetErrorString(sticky) + " in " + cs.name);
  }
}

// --- main

struct Options {
  int64_t batch = 256;
  double budget_s = 300;
  int reps = 20, plans = 1;
  std::string only;
  bool controls = true, list = false;
};

void list_cases(const std::vector<Case>& cases) {
  int convs = 0;
  std::printf("%-12s %-9s %-22s %5s %6s %4s %12s\n", "layer", "role", "shape", "convs", "single", "dual", "GMAC/img");
  for (const Case& cs : cases) {
    std::printf("%-12s %-9s %-22s %5d %6d %4d %12.3f\n", cs.name.c_str(), role_name(cs.role), case_shape(cs).c_str(),
                cs.count, cs.single, cs.dual, cs.macs / 1e9);
    convs += cs.count;
  }
  std::printf("%zu cases, %d convolutions\n", cases.size(), convs);
}

int run(const Options& opt) {
  std::vector<Case> cases = resnet50_cases();
  if (!opt.only.empty()) {
    const std::regex re(opt.only);
    cases.erase(
        std::remove_if(cases.begin(), cases.end(), [&](const Case& c) { return !std::regex_search(c.name, re); }),
        cases.end());
  }
  if (opt.list) {
    list_cases(cases);
    return 0;
  }
  int devices = 0;
  const cudaError_t de = cudaGetDeviceCount(&devices);
  if (de != cudaSuccess || devices == 0) {
    std::fprintf(stderr,
                 "cudnn_fusion_probe: no GPU visible (%s): run it on the GPU machine (scripts/gpu_probe.sh)\n",
                 de != cudaSuccess ? cudaGetErrorString(de) : "0 devices");
    return 77;
  }
  cudnn_frontend::cudnn_dlhandle = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_GLOBAL);
  if (!cudnn_frontend::cudnn_dlhandle) {
    std::fprintf(stderr,
                 "cudnn_fusion_probe: cannot load libcudnn.so.9 (%s): put cuDNN's folder on LD_LIBRARY_PATH\n",
                 dlerror());
    return 1;
  }
  const double t0 = now_s();
  Gpu g;
  g.batch = opt.batch;
  g.reps = opt.reps;
  g.plans = opt.plans;
  g.deadline = t0 + opt.budget_s;
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf(
      "cudnn_fusion_probe: %s sm_%d%d, cuDNN %zu, frontend %d.%d.%d, batch %ld, budget %.0f s, %d plan(s) per "
      "graph, %d timed runs each; %zu cases%s\n",
      prop.name, prop.major, prop.minor, cudnnGetVersion(), CUDNN_FRONTEND_MAJOR_VERSION,
      CUDNN_FRONTEND_MINOR_VERSION, CUDNN_FRONTEND_PATCH_VERSION, long(opt.batch), opt.budget_s, opt.plans, opt.reps,
      cases.size(), opt.controls ? " then the bf16 controls" : "");
  std::fflush(stdout);
  Report rep(t0);
  std::string stopped;
  try {
    for (const Case& cs : cases) run_case(g, rep, cs, false);
    if (opt.controls)
      for (const Case& cs : cases) run_case(g, rep, cs, true);
  } catch (const std::exception& e) {  // StopRun, or a failure outside any row
    stopped = e.what();
  }
  if (g.out_of_time() && stopped.empty()) stopped = "the budget (--budget-s) ran out: rows marked 'not run (budget)'";
  rep.summary(opt.batch, stopped);
  std::printf("\ncudnn_fusion_probe: %.1f s\n", now_s() - t0);
  return stopped.empty() || stopped.rfind("the budget", 0) == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt;
  CLI::App app{"Which cuDNN fusions of a convolution with its batch norm run on this GPU, on ResNet-50's layers, "
               "and what each saves against the trainer's unfused chain"};
  app.add_option("--batch", opt.batch, "images per batch")->check(CLI::Range(int64_t(1), int64_t(4096)));
  app.add_option("--budget-s", opt.budget_s, "wall-clock budget: rows that would start later are reported as not run")
      ->check(CLI::Range(1.0, 3600.0));
  app.add_option("--reps", opt.reps, "timed runs per measurement (the median is reported)")
      ->check(CLI::Range(3, 1000));
  app.add_option("--plans", opt.plans, "plans built per graph in the heuristics' order; the fastest is kept")
      ->check(CLI::Range(1, 64));
  app.add_option("--only", opt.only, "only the cases whose first layer's name matches this regular expression");
  bool no_controls = false;
  app.add_flag("--no-controls", no_controls, "skip the bf16 controls");
  app.add_flag("--list", opt.list, "print ResNet-50's cases (role, shape, count) and exit; needs no GPU");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  opt.controls = !no_controls;
  try {
    return run(opt);
  } catch (const std::regex_error& e) {
    std::fprintf(stderr, "cudnn_fusion_probe: --only: not a regular expression: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cudnn_fusion_probe: %s\n", e.what());
    return 1;
  }
}
