// Max-pool (the ResNet stem's 3x3/2) and global average pool over NHWC tensors. Each thread owns
// V consecutive channels. Max-pool backward gathers instead of scattering: an input position
// takes the gradient of every output window whose argmax it is, so no atomics and no indices
// saved by the forward; the argmax of each window is found once (one byte per element) rather
// than again for every input position it covers (which read x 36 times: 2.6 ms at ResNet-50
// batch 256 on an H200, ~20x the traffic).
#include <algorithm>
#include <cstdint>
#include <string>

#include "worker/gpu/check.h"
#include "worker/gpu/dtype.cuh"
#include "worker/gpu/kernels.h"

namespace worker {
namespace gpu {
namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) { return unsigned((n + kThreads - 1) / kThreads); }

// Forward: per output window its maximum (kY) and/or the position of the maximum (kh * k + kw)
// in one byte per channel (kArg, pass 1 of the backward), with PyTorch's rule (first maximum in
// row-major order; a NaN wins, the last one); kNone where the window holds no input.
constexpr uint8_t kNone = 255;

// Grids of both kernels: x over one row of (columns x channel groups), y over the rows (n, h),
// so that each thread decodes its position with one 32-bit division.
// kK: the window size when known at compile time (the stem's 3: its loops unrolled, the 9
// loads in flight together), else 0.
// kBn: x is a batch norm's input, and the window's values are its output relu(sc * x + sf) (a
// training forward's scale/shift, bn_ss: 2c floats) rounded to T as that forward stores it, so the
// pooled output and argmax are those of the stored output, which need not be written.
template <typename T, int V, bool kY, bool kArg, int kK, bool kBn = false>
__global__ void maxpool_fwd_kernel(const T* __restrict__ x, T* __restrict__ y,
                                   uint8_t* __restrict__ arg_out, PoolDesc d, const float* __restrict__ bn_ss = nullptr) {
  const int groups = d.c / V;
  const int K = kK ? kK : d.k;
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= d.wo * groups) return;
  const int g = j % groups, ow = j / groups;
  float sc[V], sf[V];
  if (kBn) {
#pragma unroll
    for (int k = 0; k < V; ++k) {
      sc[k] = bn_ss[g * V + k];
      sf[k] = bn_ss[d.c + g * V + k];
    }
  }
  for (int row = blockIdx.y; row < d.n * d.ho; row += gridDim.y) {
    const int oh = row % d.ho, n = row / d.ho;
    const int64_t i = (int64_t(row) * d.wo + ow) * groups + g;
    float best[V];
    int arg[V];
#pragma unroll
    for (int k = 0; k < V; ++k) {
      best[k] = -INFINITY;
      arg[k] = kNone;
    }
#pragma unroll
    for (int kh = 0; kh < K; ++kh) {
      const int ih = oh * d.stride - d.pad + kh;
      if (ih < 0 || ih >= d.h) continue;
#pragma unroll
      for (int kw = 0; kw < K; ++kw) {
        const int iw = ow * d.stride - d.pad + kw;
        if (iw < 0 || iw >= d.w) continue;
        float v[V];
        load_f<T, V>(x + ((size_t(n) * d.h + ih) * d.w + iw) * d.c + size_t(g) * V, v);
        if (kBn) {  // as bn.cu's apply computes and stores it
#pragma unroll
          for (int k = 0; k < V; ++k) {
            const float b = __fmaf_rn(v[k], sc[k], sf[k]);
            v[k] = to_f(from_f<T>(b > 0.f ? b : 0.f));
          }
        }
#pragma unroll
        for (int k = 0; k < V; ++k)
          if (arg[k] == kNone || v[k] > best[k] || isnan(v[k])) {
            best[k] = v[k];
            arg[k] = kh * K + kw;
          }
      }
    }
    if (kY) store_f<T, V>(y + i * V, best);
    if (kArg) {
      Vec<uint8_t, V> a;
#pragma unroll
      for (int k = 0; k < V; ++k) a.v[k] = uint8_t(arg[k]);
      *reinterpret_cast<Vec<uint8_t, V>*>(arg_out + i * V) = a;
    }
  }
}

// Pass 2: every input position adds the gradients of the (at most ceil(k/stride)^2) windows
// covering it whose maximum it is, in a fixed order.
// kSpan: the most windows covering an input along one axis when known at compile time (2 for
// 3x3/2: the up to 4 windows' loads in flight together), else 0.
template <typename T, int V, int kSpan>
__global__ void maxpool_gather_kernel(const uint8_t* __restrict__ arg, const T* __restrict__ dy,
                                      T* __restrict__ dx, PoolDesc d) {
  const int groups = d.c / V;
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= d.w * groups) return;
  const int g = j % groups, iw = j / groups;
  for (int row = blockIdx.y; row < d.n * d.h; row += gridDim.y) {
    const int ih = row % d.h, n = row / d.h;
    const int64_t i = (int64_t(row) * d.w + iw) * groups + g;
    float acc[V];
#pragma unroll
    for (int k = 0; k < V; ++k) acc[k] = 0.f;
    // Output rows/cols whose window covers (ih, iw).
    const int oh_lo = max(0, (ih + d.pad - d.k + d.stride) / d.stride);
    const int oh_hi = min(d.ho - 1, (ih + d.pad) / d.stride);
    const int ow_lo = max(0, (iw + d.pad - d.k + d.stride) / d.stride);
    const int ow_hi = min(d.wo - 1, (iw + d.pad) / d.stride);
    const int span_h = kSpan ? kSpan : oh_hi - oh_lo + 1, span_w = kSpan ? kSpan : ow_hi - ow_lo + 1;
#pragma unroll
    for (int a = 0; a < span_h; ++a) {
      const int oh = oh_lo + a;
#pragma unroll
      for (int b = 0; b < span_w; ++b) {
        const int ow = ow_lo + b;
        if (oh > oh_hi || ow > ow_hi) continue;
        const int rel = (ih - (oh * d.stride - d.pad)) * d.k + (iw - (ow * d.stride - d.pad));
        const size_t o = ((size_t(n) * d.ho + oh) * d.wo + ow) * d.c + size_t(g) * V;
        const Vec<uint8_t, V> a = *reinterpret_cast<const Vec<uint8_t, V>*>(arg + o);
        float gv[V];
        load_f<T, V>(dy + o, gv);
#pragma unroll
        for (int k = 0; k < V; ++k)
          if (a.v[k] == rel) acc[k] += gv[k];
      }
    }
    store_f<T, V>(dx + i * V, acc);
  }
}

// Pass 2 for the stem's window (3x3, stride 2, padding 1): a thread per output window (a, b) writes
// the 2x2 inputs (2a..2a+1, 2b..2b+1), the only ones whose covering windows are among (a..a+1,
// b..b+1): an even input row or column lies in one window along that axis, an odd one in two. The
// four windows' argmax and gradient are loaded once for four inputs, where the per-input kernel
// loads nine windows per four inputs. The sums run in that kernel's order (windows in row-major
// order), so the two agree bit for bit.
template <typename T, int V>
__global__ void maxpool_gather_3s2_kernel(const uint8_t* __restrict__ arg, const T* __restrict__ dy,
                                          T* __restrict__ dx, PoolDesc d) {
  const int groups = d.c / V;
  const int j = blockIdx.x * blockDim.x + threadIdx.x;
  if (j >= d.wo * groups) return;
  const int g = j % groups, b = j / groups;
  const bool right = b + 1 < d.wo, col1 = 2 * b + 1 < d.w;
  for (int row = blockIdx.y; row < d.n * d.ho; row += gridDim.y) {
    const int a = row % d.ho, n = row / d.ho;
    const bool below = a + 1 < d.ho, row1 = 2 * a + 1 < d.h;
    // Window (a + da, b + db): its argmax bytes and gradient; a missing one matches no position.
    Vec<uint8_t, V> wa[2][2];
    float wg[2][2][V];
#pragma unroll
    for (int da = 0; da < 2; ++da)
#pragma unroll
      for (int db = 0; db < 2; ++db) {
        if ((da && !below) || (db && !right)) {
#pragma unroll
          for (int k = 0; k < V; ++k) {
            wa[da][db].v[k] = kNone;
            wg[da][db][k] = 0.f;
          }
          continue;
        }
        const size_t o = ((size_t(n) * d.ho + a + da) * d.wo + b + db) * d.c + size_t(g) * V;
        wa[da][db] = *reinterpret_cast<const Vec<uint8_t, V>*>(arg + o);
        load_f<T, V>(dy + o, wg[da][db]);
      }
    // Input (2a + r, 2b + q) sits at (1 + r, 1 + q) of window (a, b) and, where r or q is 1, at
    // (0, ...) / (..., 0) of the window below / to the right.
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      if (r && !row1) break;
      T* out = dx + ((size_t(n) * d.h + 2 * a + r) * d.w + 2 * b) * d.c + size_t(g) * V;
#pragma unroll
      for (int q = 0; q < 2; ++q) {
        if (q && !col1) break;
        float acc[V];
#pragma unroll
        for (int k = 0; k < V; ++k) acc[k] = 0.f;
#pragma unroll
        for (int da = 0; da <= r; ++da)
#pragma unroll
          for (int db = 0; db <= q; ++db) {
            const int rel = (r + 1 - 2 * da) * 3 + (q + 1 - 2 * db);
#pragma unroll
            for (int k = 0; k < V; ++k)
              if (wa[da][db].v[k] == rel) acc[k] += wg[da][db][k];
          }
        store_f<T, V>(out + size_t(q) * d.c, acc);
      }
    }
  }
}

template <typename T, int V>
__global__ void avgpool_fwd_kernel(const T* __restrict__ x, T* __restrict__ y, int n, int hw,
                                   int c) {
  const int groups = c / V;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(n) * groups) return;
  const int g = int(i % groups);
  const int b = int(i / groups);
  float acc[V];
#pragma unroll
  for (int k = 0; k < V; ++k) acc[k] = 0.f;
  const T* p = x + size_t(b) * hw * c + size_t(g) * V;
  for (int j = 0; j < hw; ++j) {
    float v[V];
    load_f<T, V>(p + size_t(j) * c, v);
#pragma unroll
    for (int k = 0; k < V; ++k) acc[k] += v[k];
  }
  const float inv = 1.f / float(hw);
#pragma unroll
  for (int k = 0; k < V; ++k) acc[k] *= inv;
  store_f<T, V>(y + size_t(b) * c + size_t(g) * V, acc);
}

template <typename T, int V>
__global__ void avgpool_bwd_kernel(const T* __restrict__ dy, T* __restrict__ dx, int n, int hw,
                                   int c) {
  const int groups = c / V;
  const int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= int64_t(n) * hw * groups) return;
  const int g = int(i % groups);
  const int b = int(i / (int64_t(hw) * groups));
  float v[V];
  load_f<T, V>(dy + size_t(b) * c + size_t(g) * V, v);
  const float inv = 1.f / float(hw);
#pragma unroll
  for (int k = 0; k < V; ++k) v[k] *= inv;
  store_f<T, V>(dx + i * V, v);
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

template <typename T>
bool can_vec(int c, const void* a, const void* b, const void* e = nullptr) {
  return c % (16 / sizeof(T)) == 0 && aligned16(a) && aligned16(b) && (!e || aligned16(e));
}

}  // namespace

size_t maxpool_argmax_bytes(const PoolDesc& d) { return size_t(d.n) * d.ho * d.wo * d.c; }

namespace {

void check_window(const PoolDesc& d) {
  if (d.k * d.k > kNone)
    throw GpuError(GpuError::Kind::Invalid,
                   "max-pool window " + std::to_string(d.k) + "x" + std::to_string(d.k) +
                       " is larger than the backend supports (15x15)");
}

// x: one row of `per_row` threads; y: the rows, at most kMaxRowBlocks (a grid-stride loop past them).
// Each thread takes several rows: the stem's max-pool had one row a block (28,672 blocks forward and
// 114,688 backward at ResNet-50 batch 256); at most 4,096 rows ran 0.3 % faster (H100, fp16,
// alternating gpu_model_driver runs, 2026-12-07: 7,699-7,703 against 7,678-7,684 images/s; 1,024:
// 7,689-7,698; 256: 7,656-7,661).
constexpr int kMaxRowBlocks = 4096;
dim3 row_grid(int per_row, int rows) {
  return dim3(unsigned((per_row + kThreads - 1) / kThreads), unsigned(std::min(rows, kMaxRowBlocks)));
}

// The ResNet stem's 3x3/2 window gets the unrolled kernels.
bool stem_window(const PoolDesc& d) { return d.k == 3 && d.stride == 2; }

// maxpool_gather_3s2_kernel's case: the stem's window with padding 1 and the output's size PyTorch's
// (floor) rule gives, so that the windows' 2x2 blocks cover the input exactly.
bool tiles_inputs(const PoolDesc& d) {
  return stem_window(d) && d.pad == 1 && d.ho == (d.h - 1) / 2 + 1 && d.wo == (d.w - 1) / 2 + 1;
}

template <typename T, bool kY, bool kArg>
void launch_fwd(const T* x, T* y, uint8_t* arg, const PoolDesc& d, cudaStream_t s) {
  if (can_vec<T>(d.c, x, kY ? static_cast<const void*>(y) : x, kArg ? arg : nullptr)) {
    constexpr int V = 16 / sizeof(T);
    const dim3 grid = row_grid(d.wo * (d.c / V), d.n * d.ho);
    if (stem_window(d))
      maxpool_fwd_kernel<T, V, kY, kArg, 3><<<grid, kThreads, 0, s>>>(x, y, arg, d);
    else
      maxpool_fwd_kernel<T, V, kY, kArg, 0><<<grid, kThreads, 0, s>>>(x, y, arg, d);
  } else {
    maxpool_fwd_kernel<T, 1, kY, kArg, 0><<<row_grid(d.wo * d.c, d.n * d.ho), kThreads, 0, s>>>(x, y, arg, d);
  }
  KERNEL_CHECK();
}

}  // namespace

void maxpool_forward(DType t, const void* x, void* y, void* argmax, const PoolDesc& d,
                     cudaStream_t s) {
  check_window(d);
  WK_DISPATCH(t, {
    const T* xt = static_cast<const T*>(x);
    T* yt = static_cast<T*>(y);
    if (argmax)
      launch_fwd<T, true, true>(xt, yt, static_cast<uint8_t*>(argmax), d, s);
    else
      launch_fwd<T, true, false>(xt, yt, nullptr, d, s);
  });
}

bool maxpool_bn_applies(DType t, const PoolDesc& d, const void* x, const void* y, const void* argmax) {
  bool v = false;
  WK_DISPATCH(t, { v = stem_window(d) && can_vec<T>(d.c, x, y, argmax); });
  return v && argmax;
}

void maxpool_forward_bn(DType t, const void* x, const float* scale_shift, void* y, void* argmax, const PoolDesc& d,
                        cudaStream_t s) {
  if (!maxpool_bn_applies(t, d, x, y, argmax))
    throw GpuError(GpuError::Kind::Invalid, "maxpool_forward_bn: not the stem's window or tensors not 16-byte aligned");
  WK_DISPATCH(t, {
    constexpr int V = 16 / sizeof(T);
    const dim3 grid = row_grid(d.wo * (d.c / V), d.n * d.ho);
    maxpool_fwd_kernel<T, V, true, true, 3, true><<<grid, kThreads, 0, s>>>(
        static_cast<const T*>(x), static_cast<T*>(y), static_cast<uint8_t*>(argmax), d, scale_shift);
    KERNEL_CHECK();
  });
}

void maxpool_backward(DType t, const void* x, const void* dy, void* dx, const PoolDesc& d,
                      void* argmax, bool argmax_valid, cudaStream_t s, bool tiled) {
  check_window(d);
  auto* arg = static_cast<uint8_t*>(argmax);
  WK_DISPATCH(t, {
    const T* xt = static_cast<const T*>(x);
    const T* dyt = static_cast<const T*>(dy);
    T* dxt = static_cast<T*>(dx);
    if (!argmax_valid) launch_fwd<T, false, true>(xt, nullptr, arg, d, s);
    if (can_vec<T>(d.c, dy, dx, argmax)) {
      constexpr int V = 16 / sizeof(T);
      const dim3 grid = row_grid(d.w * (d.c / V), d.n * d.h);
      if (tiled && tiles_inputs(d))
        maxpool_gather_3s2_kernel<T, V><<<row_grid(d.wo * (d.c / V), d.n * d.ho), kThreads, 0, s>>>(arg, dyt, dxt, d);
      else if (stem_window(d))
        maxpool_gather_kernel<T, V, 2><<<grid, kThreads, 0, s>>>(arg, dyt, dxt, d);
      else
        maxpool_gather_kernel<T, V, 0><<<grid, kThreads, 0, s>>>(arg, dyt, dxt, d);
    } else {
      maxpool_gather_kernel<T, 1, 0><<<row_grid(d.w * d.c, d.n * d.h), kThreads, 0, s>>>(arg, dyt, dxt, d);
    }
    KERNEL_CHECK();
  });
}

void avgpool_forward(DType t, const void* x, void* y, int n, int hw, int c, cudaStream_t s) {
  WK_DISPATCH(t, {
    const T* xt = static_cast<const T*>(x);
    T* yt = static_cast<T*>(y);
    if (can_vec<T>(c, x, y)) {
      constexpr int V = 16 / sizeof(T);
      avgpool_fwd_kernel<T, V><<<blocks_for(int64_t(n) * (c / V)), kThreads, 0, s>>>(xt, yt, n, hw, c);
    } else {
      avgpool_fwd_kernel<T, 1><<<blocks_for(int64_t(n) * c), kThreads, 0, s>>>(xt, yt, n, hw, c);
    }
    KERNEL_CHECK();
  });
}

void avgpool_backward(DType t, const void* dy, void* dx, int n, int hw, int c, cudaStream_t s) {
  WK_DISPATCH(t, {
    const T* dyt = static_cast<const T*>(dy);
    T* dxt = static_cast<T*>(dx);
    if (can_vec<T>(c, dy, dx)) {
      constexpr int V = 16 / sizeof(T);
      avgpool_bwd_kernel<T, V>
          <<<blocks_for(int64_t(n) * hw * (c / V)), kThreads, 0, s>>>(dyt, dxt, n, hw, c);
    } else {
      avgpool_bwd_kernel<T, 1><<<blocks_for(int64_t(n) * hw * c), kThreads, 0, s>>>(dyt, dxt, n, hw, c);
    }
    KERNEL_CHECK();
  });
}

}  // namespace gpu
}  // namespace worker
