// Which cuDNN graph-API fusions of a convolution with its batch norm run on this GPU, and what
// they cost against the plain convolution, on ResNet-50 shapes (batch from --batch, default
// 256). For each pattern and dtype: supported or the reason, the time to build the plan, the
// device time (median of repeated runs), and for the fused patterns a check against the same
// result computed unfused (fused vs unfused, relative max error). Patterns:
//   fprop              conv alone (the frontend's heuristic plan)
//   fprop+genstats     conv with per-channel sum and sum of squares of its output (epilogue)
//   sbr+fprop+genstats scale-bias-ReLU of the input (the previous batch norm) as the prologue
//   wgrad / sbr+wgrad  weight gradient, plain and with the scale-bias-ReLU prologue
//   dgrad / dgrad+drelu+dbnw  data gradient, plain and with ReLU backward and the batch norm's
//                      weight gradients (dscale, dbias, the dx coefficients) in the epilogue
//   bn fwd / bn bwd    cuDNN's own batch norm (+ add + ReLU forward), for comparison
// Usage: cudnn_fusion_probe [--batch 256] [--budget-s 90] [--dtypes bf16,fp16]
// One line per case on stdout, then a summary table.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <dlfcn.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <cudnn_frontend.h>

// Built with NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING (the frontend then needs no NVRTC at link
// time) and the shared CUDA runtime (the frontend's dlopen of libcudart finds this one).
namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;
}

namespace fe = cudnn_frontend;
using Clock = std::chrono::steady_clock;

#define CK(call)                                                                       \
  do {                                                                                 \
    cudaError_t e_ = (call);                                                           \
    if (e_ != cudaSuccess) {                                                           \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      std::exit(2);                                                                    \
    }                                                                                  \
  } while (0)

namespace {

// --- Device helpers: random fill, reference prologue/epilogue math

__global__ void fill_kernel(float* f, size_t n, uint64_t seed, float scale, float shift) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint64_t z = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const float u = float(z >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    f[i] = (u * 2.f - 1.f) * scale + shift;
  }
}

template <typename T>
__global__ void to_t_kernel(const float* f, T* t, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    t[i] = T(f[i]);
}

template <typename T>
__global__ void to_f_kernel(const T* t, float* f, size_t n) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x)
    f[i] = float(t[i]);
}

// y = relu(x * s + b) per channel (NHWC, c channels), in T.
template <typename T>
__global__ void sbr_kernel(const T* x, const float* s, const float* b, T* y, size_t n, int c) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const int ch = int(i % c);
    const float v = float(x[i]) * s[ch] + b[ch];
    y[i] = T(v > 0.f ? v : 0.f);
  }
}

// Per-channel sum and sum of squares of y (NHWC) in double: one thread per channel (slow, fine).
template <typename T>
__global__ void colsum_kernel(const T* y, size_t rows, int c, double* sum, double* sq) {
  const int ch = blockIdx.x * blockDim.x + threadIdx.x;
  if (ch >= c) return;
  double a = 0, b = 0;
  for (size_t r = 0; r < rows; ++r) {
    const double v = double(float(y[r * c + ch]));
    a += v;
    b += v * v;
  }
  sum[ch] = a;
  sq[ch] = b;
}

unsigned blocks(size_t n) { return unsigned(std::min<size_t>((n + 255) / 256, 132 * 16)); }

// --- Host helpers

struct Buf {
  void* p = nullptr;
  size_t bytes = 0;
  explicit Buf(size_t b) : bytes(b) { CK(cudaMalloc(&p, std::max<size_t>(b, 256))); }
  ~Buf() { cudaFree(p); }
  Buf(const Buf&) = delete;
  Buf& operator=(const Buf&) = delete;
};

struct DT {
  const char* name;
  fe::DataType_t fe;
  size_t size;
};
const DT kBf16{"bf16", fe::DataType_t::BFLOAT16, 2};
const DT kFp16{"fp16", fe::DataType_t::HALF, 2};

// A random tensor of n elements in dtype dt (values in shift +- scale).
std::unique_ptr<Buf> random_t(const DT& dt, size_t n, uint64_t seed, float scale, float shift = 0.f) {
  auto f = std::make_unique<Buf>(n * 4);
  fill_kernel<<<blocks(n), 256>>>(static_cast<float*>(f->p), n, seed, scale, shift);
  if (dt.size == 4) return f;
  auto t = std::make_unique<Buf>(n * dt.size);
  if (dt.fe == fe::DataType_t::BFLOAT16)
    to_t_kernel<<<blocks(n), 256>>>(static_cast<float*>(f->p), static_cast<__nv_bfloat16*>(t->p), n);
  else
    to_t_kernel<<<blocks(n), 256>>>(static_cast<float*>(f->p), static_cast<__half*>(t->p), n);
  CK(cudaGetLastError());
  return t;
}

std::unique_ptr<Buf> random_f(size_t n, uint64_t seed, float scale, float shift = 0.f) {
  auto f = std::make_unique<Buf>(n * 4);
  fill_kernel<<<blocks(n), 256>>>(static_cast<float*>(f->p), n, seed, scale, shift);
  CK(cudaGetLastError());
  return f;
}

std::vector<float> download_f(const DT& dt, const void* p, size_t n) {
  Buf f(n * 4);
  if (dt.fe == fe::DataType_t::BFLOAT16)
    to_f_kernel<<<blocks(n), 256>>>(static_cast<const __nv_bfloat16*>(p), static_cast<float*>(f.p), n);
  else if (dt.fe == fe::DataType_t::HALF)
    to_f_kernel<<<blocks(n), 256>>>(static_cast<const __half*>(p), static_cast<float*>(f.p), n);
  else
    CK(cudaMemcpy(f.p, p, n * 4, cudaMemcpyDeviceToDevice));
  std::vector<float> h(n);
  CK(cudaMemcpy(h.data(), f.p, n * 4, cudaMemcpyDeviceToHost));
  return h;
}

std::vector<float> download_raw_f(const void* p, size_t n) {
  std::vector<float> h(n);
  CK(cudaMemcpy(h.data(), p, n * 4, cudaMemcpyDeviceToHost));
  return h;
}

double rel_max(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, r = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    if (!std::isfinite(a[i])) return INFINITY;
    d = std::max(d, std::fabs(double(a[i]) - double(b[i])));
    r = std::max(r, std::fabs(double(b[i])));
  }
  return d / std::max(r, 1e-30);
}

using TensorPtr = std::shared_ptr<fe::graph::Tensor_attributes>;
using Pack = std::unordered_map<TensorPtr, void*>;

fe::graph::Tensor_attributes nhwc(const char* name, int64_t n, int64_t c, int64_t h, int64_t w) {
  return fe::graph::Tensor_attributes().set_name(name).set_dim({n, c, h, w}).set_stride({c * h * w, 1, c * w, c});
}
fe::graph::Tensor_attributes chan(const char* name, int64_t c, fe::DataType_t t = fe::DataType_t::FLOAT) {
  return fe::graph::Tensor_attributes().set_name(name).set_dim({1, c, 1, 1}).set_stride({c, 1, c, c}).set_data_type(t);
}

struct Conv {
  const char* name;
  int64_t c, k, hw, r, stride, pad;
  int64_t out() const { return (hw + 2 * pad - r) / stride + 1; }
};

struct Result {
  std::string pattern, dtype, shape, status;  // status: "ok", or why not
  double build_s = 0, ms = 0, err = -1;
  std::string plan;
};

std::vector<Result> g_results;
double g_deadline = 0;
cudnnHandle_t g_handle = nullptr;
cudaStream_t g_stream = nullptr;

double now_s() { return std::chrono::duration<double>(Clock::now().time_since_epoch()).count(); }

// Builds the heuristics' first supported plan (mode A, then fallback).
std::string build(fe::graph::Graph& g, double& build_s, std::string& plan) {
  const double t0 = now_s();
  auto e = g.validate();
  if (!e.is_good()) return "validate: " + e.get_message();
  e = g.build_operation_graph(g_handle);
  if (!e.is_good()) return "operation graph: " + e.get_message();
  e = g.create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK});
  if (!e.is_good()) return "no engine: " + e.get_message();
  e = g.check_support();
  if (!e.is_good()) return "not supported: " + e.get_message();
  e = g.build_plans(fe::BuildPlanPolicy_t::HEURISTICS_CHOICE);
  if (!e.is_good()) return "build: " + e.get_message();
  build_s = now_s() - t0;
  g.get_plan_name(plan);
  return "ok";
}

// Median device ms of `reps` executions.
double time_it(const std::function<void()>& f, int reps = 15) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  f();  // warm-up
  CK(cudaStreamSynchronize(g_stream));
  std::vector<float> ms;
  for (int i = 0; i < reps; ++i) {
    CK(cudaEventRecord(a, g_stream));
    f();
    CK(cudaEventRecord(b, g_stream));
    CK(cudaEventSynchronize(b));
    float t = 0;
    CK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

void report(Result r) {
  std::printf("%-20s %-5s %-26s %-8s build %5.2f s  %8.3f ms  err %9.2e  %s%s%s\n", r.pattern.c_str(),
              r.dtype.c_str(), r.shape.c_str(), r.status == "ok" ? "OK" : "NO", r.build_s, r.ms, r.err,
              r.plan.c_str(), r.status == "ok" ? "" : " -- ", r.status == "ok" ? "" : r.status.c_str());
  std::fflush(stdout);
  g_results.push_back(std::move(r));
}

std::shared_ptr<fe::graph::Graph> new_graph(const DT& dt) {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(dt.fe).set_intermediate_data_type(fe::DataType_t::FLOAT).set_compute_data_type(fe::DataType_t::FLOAT);
  return g;
}

std::string shape_of(const Conv& cv, int64_t n) {
  char b[96];
  std::snprintf(b, sizeof b, "%ldx%ld/%ld %ld->%ld %ldx%ld n%ld", long(cv.r), long(cv.r), long(cv.stride), long(cv.c),
                long(cv.k), long(cv.hw), long(cv.hw), long(n));
  return b;
}

// Runs graph g with the pack and a workspace; returns median ms.
double run_graph(fe::graph::Graph& g, Pack& pack) {
  int64_t ws = 0;
  (void)g.get_workspace_size(ws);
  Buf w(size_t(std::max<int64_t>(ws, 1)));
  bool bad = false;
  const double ms = time_it([&] {
    if (!g.execute(g_handle, pack, w.p).is_good()) bad = true;
  });
  return bad ? -1 : ms;
}

// --- The cases

void probe_conv(const DT& dt, const Conv& cv, int64_t n, bool full) {
  const int64_t c = cv.c, k = cv.k, hw = cv.hw, o = cv.out();
  const std::string shape = shape_of(cv, n);
  const size_t nx = size_t(n * c * hw * hw), ny = size_t(n * k * o * o), nw = size_t(k * c * cv.r * cv.r);
  auto X = random_t(dt, nx, 1, 2.f, 0.3f), W = random_t(dt, nw, 2, 0.05f), DY = random_t(dt, ny, 3, 1.f);
  auto S = random_f(size_t(c), 4, 0.5f, 1.f), B = random_f(size_t(c), 5, 0.5f, 0.f);
  auto M = random_f(size_t(c), 6, 0.1f, 0.3f), V = random_f(size_t(c), 7, 0.2f, 1.f);
  Buf Y(ny * dt.size), Y2(ny * dt.size), XS(nx * dt.size), DW(nw * dt.size), DW2(nw * dt.size);
  Buf DX(nx * dt.size), DX2(nx * dt.size), SUM(size_t(k) * 4), SQ(size_t(k) * 4);
  Buf dsum(size_t(k) * 8), dsq(size_t(k) * 8);
  Buf c1(size_t(c) * 4), c2(size_t(c) * 4), c3(size_t(c) * 4), c4(size_t(c) * 4), c5(size_t(c) * 4);
  // XS = relu(X * S + B): the unfused prologue, materialised.
  if (dt.fe == fe::DataType_t::BFLOAT16)
    sbr_kernel<<<blocks(nx), 256>>>(static_cast<__nv_bfloat16*>(X->p), static_cast<float*>(S->p),
                                    static_cast<float*>(B->p), static_cast<__nv_bfloat16*>(XS.p), nx, int(c));
  else
    sbr_kernel<<<blocks(nx), 256>>>(static_cast<__half*>(X->p), static_cast<float*>(S->p),
                                    static_cast<float*>(B->p), static_cast<__half*>(XS.p), nx, int(c));
  CK(cudaDeviceSynchronize());
  auto conv_attr = [&] {
    return fe::graph::Conv_fprop_attributes().set_padding({cv.pad, cv.pad}).set_stride({cv.stride, cv.stride}).set_dilation({1, 1});
  };
  auto sbr = [&](fe::graph::Graph& g, TensorPtr x, TensorPtr& s, TensorPtr& b) {
    s = g.tensor(chan("scale", c));
    b = g.tensor(chan("bias", c));
    auto t = g.pointwise(x, s, fe::graph::Pointwise_attributes().set_mode(fe::PointwiseMode_t::MUL));
    t = g.pointwise(t, b, fe::graph::Pointwise_attributes().set_mode(fe::PointwiseMode_t::ADD));
    return g.pointwise(t, fe::graph::Pointwise_attributes().set_mode(fe::PointwiseMode_t::RELU_FWD));
  };
  std::vector<float> y_ref;
  // fprop (on XS: the reference for the fused prologue too)
  {
    Result r{"fprop", dt.name, shape};
    auto g = new_graph(dt);
    auto x = g->tensor(nhwc("x", n, c, hw, hw)), w = g->tensor(nhwc("w", k, c, cv.r, cv.r));
    auto y = g->conv_fprop(x, w, conv_attr());
    y->set_output(true);
    r.status = build(*g, r.build_s, r.plan);
    if (r.status == "ok") {
      Pack p{{x, XS.p}, {w, W->p}, {y, Y.p}};
      r.ms = run_graph(*g, p);
      CK(cudaDeviceSynchronize());
      y_ref = download_f(dt, Y.p, ny);
    }
    report(r);
  }
  // fprop + genstats
  {
    Result r{"fprop+genstats", dt.name, shape};
    auto g = new_graph(dt);
    auto x = g->tensor(nhwc("x", n, c, hw, hw)), w = g->tensor(nhwc("w", k, c, cv.r, cv.r));
    auto y = g->conv_fprop(x, w, conv_attr());
    y->set_output(true);
    auto [sum, sq] = g->genstats(y, fe::graph::Genstats_attributes());
    sum->set_output(true).set_data_type(fe::DataType_t::FLOAT);
    sq->set_output(true).set_data_type(fe::DataType_t::FLOAT);
    r.status = build(*g, r.build_s, r.plan);
    if (r.status == "ok") {
      Pack p{{x, XS.p}, {w, W->p}, {y, Y2.p}, {sum, SUM.p}, {sq, SQ.p}};
      r.ms = run_graph(*g, p);
      CK(cudaDeviceSynchronize());
      // genstats against the sums of the output it wrote
      if (dt.fe == fe::DataType_t::BFLOAT16)
        colsum_kernel<<<unsigned((k + 127) / 128), 128>>>(static_cast<__nv_bfloat16*>(Y2.p), size_t(n * o * o), int(k),
                                                          static_cast<double*>(dsum.p), static_cast<double*>(dsq.p));
      else
        colsum_kernel<<<unsigned((k + 127) / 128), 128>>>(static_cast<__half*>(Y2.p), size_t(n * o * o), int(k),
                                                          static_cast<double*>(dsum.p), static_cast<double*>(dsq.p));
      CK(cudaDeviceSynchronize());
      std::vector<double> rs(static_cast<size_t>(k)), rq(static_cast<size_t>(k));
      CK(cudaMemcpy(rs.data(), dsum.p, size_t(k) * 8, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(rq.data(), dsq.p, size_t(k) * 8, cudaMemcpyDeviceToHost));
      const auto gs = download_raw_f(SUM.p, size_t(k)), gq = download_raw_f(SQ.p, size_t(k));
      std::vector<float> a, b;
      for (int64_t i = 0; i < k; ++i) {
        a.push_back(gq[size_t(i)]);
        b.push_back(float(rq[size_t(i)]));
      }
      r.err = rel_max(a, b);
      if (!y_ref.empty()) r.err = std::max(r.err, rel_max(download_f(dt, Y2.p, ny), y_ref));
    }
    report(r);
  }
  if (now_s() > g_deadline) return;
  // scale-bias-relu + fprop + genstats
  {
    Result r{"sbr+fprop+genstats", dt.name, shape};
    auto g = new_graph(dt);
    auto x = g->tensor(nhwc("x", n, c, hw, hw)), w = g->tensor(nhwc("w", k, c, cv.r, cv.r));
    TensorPtr s, b;
    auto xs = sbr(*g, x, s, b);
    auto y = g->conv_fprop(xs, w, conv_attr());
    y->set_output(true);
    auto [sum, sq] = g->genstats(y, fe::graph::Genstats_attributes());
    sum->set_output(true).set_data_type(fe::DataType_t::FLOAT);
    sq->set_output(true).set_data_type(fe::DataType_t::FLOAT);
    r.status = build(*g, r.build_s, r.plan);
    if (r.status == "ok") {
      Pack p{{x, X->p}, {w, W->p}, {s, S->p}, {b, B->p}, {y, Y2.p}, {sum, SUM.p}, {sq, SQ.p}};
      r.ms = run_graph(*g, p);
      CK(cudaDeviceSynchronize());
      if (!y_ref.empty()) r.err = rel_max(download_f(dt, Y2.p, ny), y_ref);
    }
    report(r);
  }
  if (!full || now_s() > g_deadline) return;
  auto wgrad_attr = [&] {
    return fe::graph::Conv_wgrad_attributes().set_padding({cv.pad, cv.pad}).set_stride({cv.stride, cv.stride}).set_dilation({1, 1});
  };
  std::vector<float> dw_ref;
  {
    Result r{"wgrad", dt.name, shape};
    auto g = new_graph(dt);
    auto x = g->tensor(nhwc("x", n, c, hw, hw)), dy = g->tensor(nhwc("dy", n, k, o, o));
    auto dw = g->conv_wgrad(dy, x, wgrad_attr());
    dw->set_output(true).set_dim({k, c, cv.r, cv.r}).set_stride({c * cv.r * cv.r, 1, c * cv.r, c});
    r.status = build(*g, r.build_s, r.plan);
    if (r.status == "ok") {
      Pack p{{x, XS.p}, {dy, DY->p}, {dw, DW.p}};
      r.ms = run_graph(*g, p);
      CK(cudaDeviceSynchronize());
      dw_ref = download_f(dt, DW.p, nw);
    }
    report(r);
  }
  {
    Result r{"sbr+wgrad", dt.name, shape};
    auto g = new_graph(dt);
    auto x = g->tensor(nhwc("x", n, c, hw, hw)), dy = g->tensor(nhwc("dy", n, k, o, o));
    TensorPtr s, b;
    auto xs = sbr(*g, x, s, b);
    auto dw = g->conv_wgrad(dy, xs, wgrad_attr());
    dw->set_output(true).set_dim({k, c, cv.r, cv.r}).set_stride({c * cv.r * cv.r, 1, c * cv.r, c});
    r.status = build(*g, r.build_s, r.plan);
    if (r.status == "ok") {
      Pack p{{x, X->p}, {s, S->p}, {b, B->p}, {dy, DY->p}, {dw, DW2.p}};
      r.ms = run_graph(*g, p);
      CK(cudaDeviceSynchronize());
      if (!dw_ref.empty()) r.err = rel_max(download_f(dt, DW2.p, nw), dw_ref);
    }
    report(r);
  }
  if (now_s() > g_deadline) return;
  auto dgrad_attr = [&] {
    return fe::graph::Conv_dgrad_attributes().set_padding({cv.pad, cv.pad}).set_stride({cv.stride, cv.stride}).set_dilation({1, 1});
  };
  {
    Result r{"dgrad", dt.name, shape};
    auto g = new_graph(dt);
    auto dy = g->tensor(nhwc("dy", n, k, o, o)), w = g->tensor(nhwc("w", k, c, cv.r, cv.r));
    auto dx = g->conv_dgrad(dy, w, dgrad_attr());
    dx->set_output(true).set_dim({n, c, hw, hw}).set_stride({c * hw * hw, 1, c * hw, c});
    r.status = build(*g, r.build_s, r.plan);
    if (r.status == "ok") {
      Pack p{{dy, DY->p}, {w, W->p}, {dx, DX.p}};
      r.ms = run_graph(*g, p);
    }
    report(r);
  }
  {
    // dgrad, then ReLU backward against the previous batch norm's output recomputed from its
    // input x (mean, invstd, scale, bias), then that batch norm's weight gradients.
    Result r{"dgrad+drelu+dbnw", dt.name, shape};
    auto g = new_graph(dt);
    auto dy = g->tensor(nhwc("dy", n, k, o, o)), w = g->tensor(nhwc("w", k, c, cv.r, cv.r));
    auto dx = g->conv_dgrad(dy, w, dgrad_attr());
    dx->set_dim({n, c, hw, hw});
    auto x = g->tensor(nhwc("x", n, c, hw, hw));
    auto mean = g->tensor(chan("mean", c)), inv = g->tensor(chan("invstd", c));
    auto sc = g->tensor(chan("scale", c)), bi = g->tensor(chan("bias", c));
    auto t = g->pointwise(x, mean, fe::graph::Pointwise_attributes().set_mode(fe::PointwiseMode_t::SUB));
    t = g->pointwise(t, inv, fe::graph::Pointwise_attributes().set_mode(fe::PointwiseMode_t::MUL));
    t = g->pointwise(t, sc, fe::graph::Pointwise_attributes().set_mode(fe::PointwiseMode_t::MUL));
    t = g->pointwise(t, bi, fe::graph::Pointwise_attributes().set_mode(fe::PointwiseMode_t::ADD));
    auto drelu = g->pointwise(dx, t, fe::graph::Pointwise_attributes().set_mode(fe::PointwiseMode_t::RELU_BWD));
    drelu->set_output(true);
    auto [dscale, dbias, eq_dy, eq_x, eq_b] = g->dbn_weight(drelu, x, mean, inv, sc, fe::graph::DBN_weight_attributes());
    for (auto& o2 : {dscale, dbias, eq_dy, eq_x, eq_b}) o2->set_output(true).set_data_type(fe::DataType_t::FLOAT);
    r.status = build(*g, r.build_s, r.plan);
    if (r.status == "ok") {
      Pack p{{dy, DY->p}, {w, W->p}, {x, X->p}, {mean, M->p}, {inv, V->p}, {sc, S->p}, {bi, B->p}, {drelu, DX2.p},
             {dscale, c1.p}, {dbias, c2.p}, {eq_dy, c3.p}, {eq_x, c4.p}, {eq_b, c5.p}};
      r.ms = run_graph(*g, p);
    }
    report(r);
  }
}

void probe_bn(const DT& dt, int64_t n, int64_t c, int64_t hw) {
  char shape[64];
  std::snprintf(shape, sizeof shape, "%ld %ldx%ld n%ld", long(c), long(hw), long(hw), long(n));
  const size_t nx = size_t(n * c * hw * hw);
  auto X = random_t(dt, nx, 11, 2.f, 0.3f), A = random_t(dt, nx, 12, 1.f), DY = random_t(dt, nx, 13, 1.f);
  auto S = random_f(size_t(c), 14, 0.5f, 1.f), B = random_f(size_t(c), 15, 0.5f, 0.f);
  Buf Y(nx * dt.size), DX(nx * dt.size), m(size_t(c) * 4), v(size_t(c) * 4), rm(size_t(c) * 4), rv(size_t(c) * 4);
  Buf rm2(size_t(c) * 4), rv2(size_t(c) * 4), ds(size_t(c) * 4), db(size_t(c) * 4);
  {
    Result r{"bn fwd+add+relu", dt.name, shape};
    auto g = new_graph(dt);
    auto x = g->tensor(nhwc("x", n, c, hw, hw));
    auto s = g->tensor(chan("scale", c)), b = g->tensor(chan("bias", c));
    auto prm = g->tensor(chan("rm", c)), prv = g->tensor(chan("rv", c));
    auto eps = g->tensor(1e-5f), mom = g->tensor(0.1f);
    auto opt = fe::graph::Batchnorm_attributes().set_epsilon(eps).set_previous_running_stats(prm, prv, mom);
    auto [y, mean, inv, nrm, nrv] = g->batchnorm(x, s, b, opt);
    mean->set_output(true).set_data_type(fe::DataType_t::FLOAT);
    inv->set_output(true).set_data_type(fe::DataType_t::FLOAT);
    nrm->set_output(true).set_data_type(fe::DataType_t::FLOAT);
    nrv->set_output(true).set_data_type(fe::DataType_t::FLOAT);
    auto a = g->tensor(nhwc("a", n, c, hw, hw));
    auto t = g->pointwise(y, a, fe::graph::Pointwise_attributes().set_mode(fe::PointwiseMode_t::ADD));
    auto out = g->pointwise(t, fe::graph::Pointwise_attributes().set_mode(fe::PointwiseMode_t::RELU_FWD));
    out->set_output(true);
    r.status = build(*g, r.build_s, r.plan);
    if (r.status == "ok") {
      Pack p{{x, X->p}, {s, S->p}, {b, B->p}, {prm, rm.p}, {prv, rv.p}, {mean, m.p}, {inv, v.p},
             {nrm, rm2.p}, {nrv, rv2.p}, {a, A->p}, {out, Y.p}};
      r.ms = run_graph(*g, p);
    }
    report(r);
  }
  {
    Result r{"bn bwd", dt.name, shape};
    auto g = new_graph(dt);
    auto dy = g->tensor(nhwc("dy", n, c, hw, hw)), x = g->tensor(nhwc("x", n, c, hw, hw));
    auto s = g->tensor(chan("scale", c)), mean = g->tensor(chan("mean", c)), inv = g->tensor(chan("inv", c));
    auto opt = fe::graph::Batchnorm_backward_attributes().set_saved_mean_and_inv_variance(mean, inv);
    auto [dx, dscale, dbias] = g->batchnorm_backward(dy, x, s, opt);
    dx->set_output(true);
    dscale->set_output(true).set_data_type(fe::DataType_t::FLOAT);
    dbias->set_output(true).set_data_type(fe::DataType_t::FLOAT);
    r.status = build(*g, r.build_s, r.plan);
    if (r.status == "ok") {
      Pack p{{dy, DY->p}, {x, X->p}, {s, S->p}, {mean, m.p}, {inv, v.p}, {dx, DX.p}, {dscale, ds.p}, {dbias, db.p}};
      r.ms = run_graph(*g, p);
    }
    report(r);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int64_t n = 256;
  double budget = 90;
  std::string dtypes = "bf16,fp16";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--batch")) n = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--budget-s")) budget = std::atof(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--dtypes")) dtypes = argv[i + 1];
    else {
      std::fprintf(stderr, "usage: cudnn_fusion_probe [--batch N] [--budget-s S] [--dtypes bf16,fp16]\n");
      return 2;
    }
  }
  g_deadline = now_s() + budget;
  cudnn_frontend::cudnn_dlhandle = dlopen("libcudnn.so.9", RTLD_NOW | RTLD_GLOBAL);
  if (!cudnn_frontend::cudnn_dlhandle) {
    std::fprintf(stderr, "cannot load libcudnn.so.9: %s\n", dlerror());
    return 2;
  }
  CK(cudaStreamCreate(&g_stream));
  if (cudnnCreate(&g_handle) != CUDNN_STATUS_SUCCESS) return 2;
  cudnnSetStream(g_handle, g_stream);
  cudaDeviceProp prop{};
  CK(cudaGetDeviceProperties(&prop, 0));
  std::printf("cudnn_fusion_probe: %s sm_%d%d, cuDNN %zu (frontend %d.%d.%d), batch %ld\n", prop.name, prop.major,
              prop.minor, cudnnGetVersion(), CUDNN_FRONTEND_MAJOR_VERSION, CUDNN_FRONTEND_MINOR_VERSION,
              CUDNN_FRONTEND_PATCH_VERSION, long(n));
  // ResNet-50 bottleneck convolutions: the first is the main question (a prologue over 64
  // channels), the rest cover the other stages and kernel sizes.
  const Conv convs[] = {{"l1.c3", 64, 256, 56, 1, 1, 0},  {"l1.c2", 64, 64, 56, 3, 1, 1},
                        {"l1.c1", 256, 64, 56, 1, 1, 0},  {"l3.c2", 256, 256, 14, 3, 1, 1},
                        {"l3.c3", 256, 1024, 14, 1, 1, 0}, {"l2.c2s", 128, 128, 56, 3, 2, 1}};
  // Most telling first, within the budget: bf16 (the training dtype) on the first three
  // shapes, cuDNN's batch norm, fp16 on the first shape, then the remaining bf16 shapes.
  const bool bf = dtypes.find("bf16") != std::string::npos, hf = dtypes.find("fp16") != std::string::npos;
  for (int i = 0; i < 3 && bf; ++i)
    if (now_s() < g_deadline) probe_conv(kBf16, convs[i], n, true);
  if (bf && now_s() < g_deadline) {
    probe_bn(kBf16, n, 256, 56);
    probe_bn(kBf16, n, 64, 56);
  }
  if (hf && now_s() < g_deadline) probe_conv(kFp16, convs[0], n, true);
  for (int i = 3; i < 6 && bf; ++i)
    if (now_s() < g_deadline) probe_conv(kBf16, convs[i], n, true);
  std::printf("\n=== cuDNN fusion probe summary (ms = device time, median; err = fused vs unfused) ===\n");
  std::map<std::string, std::pair<int, int>> per;
  for (const Result& r : g_results) {
    auto& p = per[r.pattern + " " + r.dtype];
    p.second++;
    if (r.status == "ok") p.first++;
  }
  for (const auto& kv : per) std::printf("%-28s supported on %d of %d shapes\n", kv.first.c_str(), kv.second.first, kv.second.second);
  if (now_s() > g_deadline) std::printf("(budget of %.0f s reached: some cases not run)\n", budget);
  return 0;
}
