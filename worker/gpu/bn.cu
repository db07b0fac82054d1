// Batch norm over NHWC tensors viewed as (m = N*H*W rows, c channels), fp32 statistics.
// Each thread owns V consecutive channels (one 16-byte access per row) and walks rows, so a
// warp reads contiguous memory and the per-channel parameters stay in registers. Every kernel
// that streams rows issues several independent 16-byte loads per thread before using them, and
// the reductions run one wave of blocks, each over many rows.
//   forward:  stats (+ finalize, by the last block of each column) -> apply; or, in fp16 after a
//             convolution that wrote the sums (conv+genstats), apply with the finalize of those sums
//   backward: reduce (sum g, sum g*(x-mean); writes dresidual; + finalize) -> dx
//   a projection block's join (its last batch norm and the downsample's, then add + ReLU): both
//             applies in one pass; backward: both batch norms' four sums in one pass, both dx in another
// Each block adds its sums into per-channel double accumulators (atomics, kStripes copies); the last block of
// a column of blocks to finish reads them, finalizes its channels and zeroes the accumulators
// and its counter again for the next call (a separate finalize kernel per batch norm cost
// ~5 us each, 0.5 ms of a ResNet-50 step).
// The ReLU mask of the backward comes from y (after a residual add) or, where y was
// relu(scale*x + shift) alone, is recomputed from x with the forward's own rounding
// (bn_scale_shift + one fma): one tensor less to read in both backward passes. After a residual
// add the training forward can also write the mask as bits (one byte per row and group of V
// channels: relu_bits), which the backward reads instead of y: 1/16 of y's bytes in fp16/bf16.
// Sums are taken relative to the channel's first value (a shift), which keeps the one-pass
// variance accurate when |mean| >> std; partials are combined in double.
#include <algorithm>
#include <cstdint>

#include "worker/gpu/check.h"
#include "worker/gpu/dtype.cuh"
#include "worker/gpu/kernels.h"

namespace worker {
namespace gpu {
namespace {

constexpr int kThreads = 256;
constexpr int kUnroll = 4;          // rows in flight per thread
// Tuned on an H200 (ResNet-50 bf16 b256, CUDA-graph step; 2026-12-01, same-machine A/B):
// the statistics read one tensor and keep 8 rows in flight per thread over 4 blocks per
// multiprocessor; the backward's sums read two to four tensors per row and run 2 blocks per
// multiprocessor (BN forward 5.81 -> under 5.57 ms, backward 9.18 -> 8.92 ms, 8,336 -> 8,447 images/s
// together with the accumulator stripes below); the element-wise passes run 4 blocks per
// multiprocessor (8: 8,379, 16: 8,297, 4: 8,408 images/s).
constexpr int kApplyBlocksPerSm = 4;
constexpr int kStatsUnroll = 8;
constexpr int kStatsBlocksPerSm = 4;
constexpr int kBwdReduceBlocksPerSm = 2;
// Copies of the per-channel accumulators: block row b adds into copy b % kStripes, so that
// fewer blocks contend for one address (528 blocks on the 128 accumulators of a 64-channel
// layer); the finalizing block sums the copies.
constexpr int kStripes = 8;

int sm_count() {
  static const int n = [] {
    int dev = 0, v = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || v <= 0)
      v = 132;
    return v;
  }();
  return n;
}

struct Grid {
  dim3 block, grid;
};

// Threads: x over channel groups (up to 32), y over rows; at most `blocks` blocks in all.
Grid make_grid(int64_t m, int groups, int64_t blocks) {
  const int cg = std::min(groups, 32);
  const int by = kThreads / cg;
  const int gx = (groups + cg - 1) / cg;
  int64_t gy = (m + by - 1) / by;
  gy = std::min<int64_t>(gy, std::max<int64_t>(1, blocks / gx));
  return {dim3(cg, by), dim3(gx, unsigned(gy))};
}

Grid reduce_grid(int64_t m, int groups, int blocks_per_sm) {
  return make_grid(m, groups, int64_t(blocks_per_sm) * sm_count());
}
Grid apply_grid(int64_t m, int groups) {
  return make_grid(m, groups, int64_t(kApplyBlocksPerSm) * sm_count());
}

// The forward's per-channel affine map, rounded the same way wherever it is needed (apply
// and the backward's mask recomputation must agree bit for bit).
__device__ __forceinline__ void bn_scale_shift(float gamma, float beta, float mean, float invstd,
                                               float& scale, float& shift) {
  scale = __fmul_rn(gamma, invstd);
  shift = __fmaf_rn(-mean, scale, beta);
}

// The block's rows of m (r0 = its thread row, step = every thread row of the grid), kUnroll at a
// time: `load(u, row)` for every row of a batch first, then `use(u, row)`, so the loads are in
// flight together. kReverse walks them from the last (row m - 1 - r): the forward statistics read
// the convolution's output that way, starting where the convolution finished, in L2 (0.17 ms of
// a ResNet-50 bf16 b256 step of ~31 ms on an H200, +0.5 % images/s; reversing the other passes
// gained nothing).
template <bool kReverse = false, int kU = kUnroll, typename Load, typename Use>
__device__ __forceinline__ void stream_rows(int64_t m, Load&& load, Use&& use) {
  const int64_t r0 = int64_t(blockIdx.y) * blockDim.y + threadIdx.y;
  const int64_t step = int64_t(gridDim.y) * blockDim.y;
  auto row = [&](int64_t r) { return kReverse ? m - 1 - r : r; };
  int64_t r = r0;
  for (; r + (kU - 1) * step < m; r += kU * step) {
#pragma unroll
    for (int u = 0; u < kU; ++u) load(u, row(r + u * step));
#pragma unroll
    for (int u = 0; u < kU; ++u) use(u, row(r + u * step));
  }
  // The last rows (fewer than kU) in one batch as well: their loads in flight together.
  if (r < m) {
#pragma unroll
    for (int u = 0; u < kU; ++u)
      if (r + u * step < m) load(u, row(r + u * step));
#pragma unroll
    for (int u = 0; u < kU; ++u)
      if (r + u * step < m) use(u, row(r + u * step));
  }
}

// Sums a[k][V] of every thread (k < N) over the block's rows into acc[k * c + channel] (double
// atomics); true in the last block of this column of blocks to finish, which may then read acc (all
// sums are in) and must zero it again.
template <int V, int N>
__device__ __forceinline__ bool block_accumulate(const float (&a)[N][V], int c, BnSync sync) {
  extern __shared__ float sh[];
  __shared__ bool last;
  const int bx = blockDim.x * V;  // channels covered by the block
  const int plane = blockDim.y * bx;
#pragma unroll
  for (int k = 0; k < N; ++k)
#pragma unroll
    for (int i = 0; i < V; ++i) sh[k * plane + threadIdx.y * bx + threadIdx.x * V + i] = a[k][i];
  __syncthreads();
  const int tid = threadIdx.y * blockDim.x + threadIdx.x;
  for (int idx = tid; idx < bx; idx += blockDim.x * blockDim.y) {
    float t[N];
#pragma unroll
    for (int k = 0; k < N; ++k) t[k] = 0.f;
    for (int y = 0; y < int(blockDim.y); ++y)
#pragma unroll
      for (int k = 0; k < N; ++k) t[k] += sh[k * plane + y * bx + idx];
    const int ch = blockIdx.x * bx + idx;
    double* acc = sync.acc + size_t(blockIdx.y % unsigned(kStripes)) * N * size_t(c);
    if (ch < c) {
#pragma unroll
      for (int k = 0; k < N; ++k) atomicAdd(&acc[k * c + ch], double(t[k]));
    }
  }
  __threadfence();
  __syncthreads();
  if (tid == 0) last = atomicAdd(&sync.count[blockIdx.x], 1u) == gridDim.y - 1;
  __syncthreads();
  if (last) __threadfence();
  return last;
}

template <int V>
__device__ __forceinline__ bool block_accumulate(const float (&a)[V], const float (&b)[V], int c, BnSync sync) {
  float ab[2][V];
#pragma unroll
  for (int i = 0; i < V; ++i) {
    ab[0][i] = a[i];
    ab[1][i] = b[i];
  }
  return block_accumulate<V, 2>(ab, c, sync);
}

// In the last block of a column: calls f(channel, sums) (double sums[N]) for each of its channels
// and leaves the accumulators and the counter zeroed.
template <int V, int N, typename F>
__device__ __forceinline__ void finalize_column(int c, BnSync sync, F&& f) {
  const int bx = blockDim.x * V;
  const int tid = threadIdx.y * blockDim.x + threadIdx.x;
  for (int idx = tid; idx < bx; idx += blockDim.x * blockDim.y) {
    const int ch = blockIdx.x * bx + idx;
    if (ch >= c) continue;
    double t[N];
#pragma unroll
    for (int k = 0; k < N; ++k) t[k] = 0.0;
    const int stripes = min(kStripes, int(gridDim.y));
    for (int j = 0; j < stripes; ++j) {
      double* acc = sync.acc + size_t(j) * N * size_t(c);
#pragma unroll
      for (int k = 0; k < N; ++k) {
        t[k] += __ldcg(&acc[k * c + ch]);
        acc[k * c + ch] = 0.0;
      }
    }
    f(ch, t);
  }
  if (tid == 0) sync.count[blockIdx.x] = 0u;
}

template <int V, typename F>
__device__ __forceinline__ void finalize_column(int c, BnSync sync, F&& f) {
  finalize_column<V, 2>(c, sync, [&](int ch, const double (&t)[2]) { f(ch, t[0], t[1]); });
}

// --- Forward

// Forward statistics of x, then (last block of each column) mean, invstd, running statistics
// and the apply's scale/shift of its channels.
struct FwdFinalize {
  const float* gamma;
  const float* beta;
  float eps, momentum;
  float* running_mean;
  float* running_var;
  float* save_mean;
  float* save_invstd;
  float* scale_shift;
};

// One channel's batch statistics (var: the biased variance, may be slightly negative from
// cancellation): its invstd, and (`write`) the saved and running statistics.
__device__ __forceinline__ float finalize_stats(const FwdFinalize& f, int ch, int64_t m, float mean, double var,
                                                bool write) {
  if (var < 0) var = 0;
  const float invstd = float(1.0 / sqrt(var + double(f.eps)));
  if (!write) return invstd;
  if (f.save_mean) f.save_mean[ch] = mean;
  if (f.save_invstd) f.save_invstd[ch] = invstd;
  if (f.running_mean)
    f.running_mean[ch] = (1.f - f.momentum) * f.running_mean[ch] + f.momentum * mean;
  if (f.running_var) {
    const double unbiased = m > 1 ? var * double(m) / double(m - 1) : var;
    f.running_var[ch] = (1.f - f.momentum) * f.running_var[ch] + f.momentum * float(unbiased);
  }
  return invstd;
}

// ... and the apply's scale/shift; without gamma (the statistics pass timed alone, conv_planner.h)
// only the statistics.
__device__ __forceinline__ void finalize_channel(const FwdFinalize& f, int ch, int c, int64_t m, float mean,
                                                 double var) {
  const float invstd = finalize_stats(f, ch, m, mean, var, true);
  if (!f.gamma) return;
  float scale, shift;
  bn_scale_shift(f.gamma[ch], f.beta[ch], mean, invstd, scale, shift);
  f.scale_shift[ch] = scale;
  f.scale_shift[c + ch] = shift;
}

template <typename T, int V>
__global__ void __launch_bounds__(kThreads)
    stats_kernel(const T* __restrict__ x, int64_t m, int c, FwdFinalize f, BnSync sync) {
  const int groups = c / V;
  const int g = blockIdx.x * blockDim.x + threadIdx.x;
  float s[V], ss[V];
#pragma unroll
  for (int i = 0; i < V; ++i) s[i] = ss[i] = 0.f;
  if (g < groups) {
    const T* p = x + size_t(g) * V;
    float k[V];
    load_f<T, V>(p, k);
    Vec<T, V> buf[kStatsUnroll];
    stream_rows</*kReverse=*/true, kStatsUnroll>(
        m, [&](int u, int64_t r) { buf[u] = load_v<T, V>(p + size_t(r) * c); },
        [&](int u, int64_t) {
          float v[V];
          to_f<T, V>(buf[u], v);
#pragma unroll
          for (int i = 0; i < V; ++i) {
            const float d = v[i] - k[i];
            s[i] += d;
            ss[i] += d * d;
          }
        });
  }
  if (!block_accumulate<V>(s, ss, c, sync)) return;
  finalize_column<V>(c, sync, [&](int ch, double sum, double sumsq) {
    const double mu = sum / double(m);  // relative to the shift x[0, ch]
    finalize_channel(f, ch, c, m, float(double(to_f(x[ch])) + mu), sumsq / double(m) - mu * mu);
  });
}

__global__ void finalize_eval_kernel(int c, const float* gamma, const float* beta, float eps,
                                     const float* running_mean, const float* running_var,
                                     float* scale_shift) {
  const int ch = blockIdx.x * blockDim.x + threadIdx.x;
  if (ch >= c) return;
  const float scale = gamma[ch] / sqrtf(running_var[ch] + eps);
  scale_shift[ch] = scale;
  scale_shift[c + ch] = beta[ch] - running_mean[ch] * scale;
}

// What the apply adds: the residual as read, or (a projection block's join) the output of the
// downsample's batch norm over it, rounded to T as the unfused forward stores it before the add.
template <int V>
struct AsRead {
  __device__ void operator()(float (&)[V]) const {}
};
template <typename T, int V>
struct BnOfResidual {
  float sc[V], sf[V];
  __device__ void operator()(float (&q)[V]) const {
#pragma unroll
    for (int i = 0; i < V; ++i) q[i] = to_f(from_f<T>(__fmaf_rn(q[i], sc[i], sf[i])));
  }
};

// The rows of one group of V channels starting at `col`: y = relu?(sc * x + sf + res?), the loads of
// kUnroll rows in flight; the residual through `of_res` first.
// bits (may be null; only with kRelu): bit i of byte [row * (c / V) + col / V] is y's element i > 0.
template <typename T, int V, bool kRes, bool kRelu, typename OfRes = AsRead<V>>
__device__ __forceinline__ void apply_column(const T* __restrict__ x, const T* __restrict__ res, T* __restrict__ y,
                                             int64_t m, int c, size_t col, const float (&sc)[V], const float (&sf)[V],
                                             uint8_t* __restrict__ bits, const OfRes& of_res = {}) {
  static_assert(V <= 8, "a byte of ReLU bits per group");
  Vec<T, V> bx[kUnroll], br[kUnroll];
  stream_rows(
      m, [&](int u, int64_t r) {
        bx[u] = load_v<T, V>(x + size_t(r) * c + col);
        if (kRes) br[u] = load_v<T, V>(res + size_t(r) * c + col);
      },
      [&](int u, int64_t r) {
        float v[V];
        to_f<T, V>(bx[u], v);
#pragma unroll
        for (int i = 0; i < V; ++i) v[i] = __fmaf_rn(v[i], sc[i], sf[i]);
        if (kRes) {
          float q[V];
          to_f<T, V>(br[u], q);
          of_res(q);
#pragma unroll
          for (int i = 0; i < V; ++i) v[i] += q[i];
        }
        if (kRelu) {
#pragma unroll
          for (int i = 0; i < V; ++i) v[i] = v[i] > 0.f ? v[i] : 0.f;
        }
        Vec<T, V> out;
#pragma unroll
        for (int i = 0; i < V; ++i) out.v[i] = from_f<T>(v[i]);
        *reinterpret_cast<Vec<T, V>*>(y + size_t(r) * c + col) = out;
        if (kRelu && bits) {
          // From the stored (rounded) values: the same mask as reading y back.
          unsigned b = 0;
#pragma unroll
          for (int i = 0; i < V; ++i) b |= (to_f(out.v[i]) > 0.f ? 1u : 0u) << i;
          bits[size_t(r) * size_t(c / V) + col / V] = uint8_t(b);
        }
      });
}

// y = relu?(scale * x + shift + res?). y may alias res (see the backward's comment).
template <typename T, int V, bool kRes, bool kRelu>
__global__ void __launch_bounds__(kThreads)
    apply_kernel(const T* __restrict__ x, const T* __restrict__ res, T* __restrict__ y,
                 int64_t m, int c, const float* __restrict__ scale_shift, uint8_t* __restrict__ bits) {
  const int groups = c / V;
  const int g = blockIdx.x * blockDim.x + threadIdx.x;
  if (g >= groups) return;
  float sc[V], sf[V];
#pragma unroll
  for (int i = 0; i < V; ++i) {
    sc[i] = scale_shift[g * V + i];
    sf[i] = scale_shift[c + g * V + i];
  }
  apply_column<T, V, kRes, kRelu>(x, res, y, m, c, size_t(g) * V, sc, sf, bits);
}

// The finalize of a batch norm whose statistics a convolution wrote (fp16's conv+genstats: the fp32 sum
// of x per channel at sums[0, c), the sum of squares at sums[c, 2c)), in the apply's blocks: in double
// (E[x^2] - E[x]^2 cancels where |mean| >> std, but in double the fp32 sums' own error stays the only
// one; the variance is clamped at 0), every block getting the same bits; the first row of blocks writes
// the saved and running statistics. One kernel where the unfused forward runs two, and no finalize
// launch (one per batch norm cost ~4 us: docs/fusion-probe.md's "BN finalize").
__device__ __forceinline__ void sums_scale_shift(const float* sums, const FwdFinalize& f, int ch, int64_t m, int c,
                                                 float& sc, float& sf) {
  const double mu = double(__ldcg(&sums[ch])) / double(m);
  const double var = double(__ldcg(&sums[c + ch])) / double(m) - mu * mu;
  const float mean = float(mu);
  const float invstd = finalize_stats(f, ch, m, mean, var, blockIdx.y == 0);
  bn_scale_shift(f.gamma[ch], f.beta[ch], mean, invstd, sc, sf);
}

// After every thread of the block read its sums (the slot's rule, stats_pairing.h): the last block of
// the column to count itself zeroes its channels' sums in each non-null slot, and the counter.
template <int V>
__device__ __forceinline__ void zero_sums_when_last(float* a, float* b, int c, BnSync sync) {
  __shared__ bool last;
  const int tid = threadIdx.y * blockDim.x + threadIdx.x;
  if (tid == 0) last = atomicAdd(&sync.count[blockIdx.x], 1u) == gridDim.y - 1;
  __syncthreads();
  if (!last) return;
  const int bx = blockDim.x * V;  // channels covered by the block
  if (tid < bx) {
    const int ch = blockIdx.x * bx + tid;
    if (ch < c) {
      float* slots[2] = {a, b};
      for (float* sums : slots) {
        if (!sums) continue;
        sums[ch] = 0.f;
        sums[c + ch] = 0.f;
      }
    }
  }
  if (tid == 0) sync.count[blockIdx.x] = 0u;
}

// The apply of a batch norm whose statistics a convolution wrote, with its finalize folded in
// (sums_scale_shift); the sums are zero again after it.
template <typename T, int V, bool kRes, bool kRelu>
__global__ void __launch_bounds__(kThreads)
    apply_sums_kernel(const T* __restrict__ x, const T* __restrict__ res, T* __restrict__ y, int64_t m, int c,
                      float* sums, FwdFinalize f, BnSync sync, uint8_t* __restrict__ bits) {
  static_assert(32 * V <= kThreads, "a block's channels (at most 32 groups of V) are one per thread");
  __shared__ float sh_sc[kThreads], sh_sf[kThreads];
  const int tid = threadIdx.y * blockDim.x + threadIdx.x;
  const int bx = blockDim.x * V;  // channels covered by the block
  if (tid < bx) {
    const int ch = blockIdx.x * bx + tid;
    if (ch < c) sums_scale_shift(sums, f, ch, m, c, sh_sc[tid], sh_sf[tid]);
  }
  __syncthreads();
  const int groups = c / V;
  const int g = blockIdx.x * blockDim.x + threadIdx.x;
  if (g < groups) {
    float sc[V], sf[V];
#pragma unroll
    for (int i = 0; i < V; ++i) {
      sc[i] = sh_sc[threadIdx.x * V + i];
      sf[i] = sh_sf[threadIdx.x * V + i];
    }
    apply_column<T, V, kRes, kRelu>(x, res, y, m, c, size_t(g) * V, sc, sf, bits);
  }
  zero_sums_when_last<V>(sums, nullptr, c, sync);
}

// The finalize alone of a batch norm whose statistics a convolution wrote (sums_scale_shift, one thread
// per channel): the saved and running statistics, the apply's scale then shift into scale_shift (2c
// floats) and, rounded to T, into half_ss (2c values: what cuDNN's fused prologue reads); the sums zero
// again after it.
template <typename T>
__global__ void finalize_sums_kernel(float* sums, int64_t m, int c, FwdFinalize f, T* __restrict__ half_ss) {
  const int ch = blockIdx.x * blockDim.x + threadIdx.x;
  if (ch >= c) return;
  float sc, sf;
  sums_scale_shift(sums, f, ch, m, c, sc, sf);
  sums[ch] = 0.f;
  sums[c + ch] = 0.f;
  f.scale_shift[ch] = sc;
  f.scale_shift[c + ch] = sf;
  half_ss[ch] = from_f<T>(sc);
  half_ss[c + ch] = from_f<T>(sf);
}

// One batch norm of a projection block's join: the sums a convolution wrote (finalized in the join's
// blocks), or, where sums is null, the scale/shift a statistics pass finalized into f.scale_shift.
struct JoinFwd {
  float* sums;
  FwdFinalize f;
};

__device__ __forceinline__ void join_scale_shift(const JoinFwd& s, int ch, int64_t m, int c, float& sc, float& sf) {
  if (s.sums) {
    sums_scale_shift(s.sums, s.f, ch, m, c, sc, sf);
  } else {
    sc = s.f.scale_shift[ch];
    sf = s.f.scale_shift[c + ch];
  }
}

// y = relu(bn_a(x) + round(bn_b(xd))) with the ReLU's bits: what bn_forward_train of b into y, then
// of a with y as the residual, computes, reading x and xd and writing y once.
template <typename T, int V>
__global__ void __launch_bounds__(kThreads)
    apply_join_kernel(const T* __restrict__ x, const T* __restrict__ xd, T* __restrict__ y, int64_t m, int c,
                      JoinFwd a, JoinFwd b, BnSync sync, uint8_t* __restrict__ bits) {
  static_assert(32 * V <= kThreads, "a block's channels (at most 32 groups of V) are one per thread");
  __shared__ float sh[4][kThreads];  // a's scale and shift, then b's
  const int tid = threadIdx.y * blockDim.x + threadIdx.x;
  const int bx = blockDim.x * V;
  if (tid < bx) {
    const int ch = blockIdx.x * bx + tid;
    if (ch < c) {
      join_scale_shift(a, ch, m, c, sh[0][tid], sh[1][tid]);
      join_scale_shift(b, ch, m, c, sh[2][tid], sh[3][tid]);
    }
  }
  __syncthreads();
  const int g = blockIdx.x * blockDim.x + threadIdx.x;
  if (g < c / V) {
    float sc[V], sf[V];
    BnOfResidual<T, V> ds;
#pragma unroll
    for (int i = 0; i < V; ++i) {
      sc[i] = sh[0][threadIdx.x * V + i];
      sf[i] = sh[1][threadIdx.x * V + i];
      ds.sc[i] = sh[2][threadIdx.x * V + i];
      ds.sf[i] = sh[3][threadIdx.x * V + i];
    }
    apply_column<T, V, true, true>(x, xd, y, m, c, size_t(g) * V, sc, sf, bits, ds);
  }
  if (a.sums || b.sums) zero_sums_when_last<V>(a.sums, b.sums, c, sync);
}

// --- Backward
// In place (the model relies on it, see Ops::bn_backward): dres may alias y and dx may alias x.
// Safe despite __restrict__: each element is read and then written by the same thread, once,
// and the written value depends on the value read, so no reordering can swap them; the
// forward's apply_kernel likewise lets y alias res.

enum class Mask : uint8_t { None, FromY, FromX, FromBits };

// Per-thread constants of the backward kernels for V channels.
template <int V, Mask M>
struct BwdChannels {
  float mu[V], sc[V], sf[V];
  __device__ void load(int g, const float* mean, const float* invstd, const float* gamma,
                       const float* beta) {
#pragma unroll
    for (int i = 0; i < V; ++i) {
      mu[i] = mean[g * V + i];
      if (M == Mask::FromX) bn_scale_shift(gamma[g * V + i], beta[g * V + i], mu[i],
                                           invstd[g * V + i], sc[i], sf[i]);
    }
  }
};

// The ReLU's mask applied to gr in place: what of the output gradient reaches the batch norm.
// bits: the forward's byte for this row and group (Mask::FromBits).
template <typename T, int V, Mask M>
__device__ __forceinline__ void mask_relu(const Vec<T, V>& y, uint8_t bits, const float (&xv)[V],
                                          const BwdChannels<V, M>& ch, float (&gr)[V]) {
  if (M == Mask::FromBits) {
#pragma unroll
    for (int i = 0; i < V; ++i) gr[i] = (bits >> i) & 1u ? gr[i] : 0.f;
  } else if (M == Mask::FromY) {
    float yv[V];
    to_f<T, V>(y, yv);
#pragma unroll
    for (int i = 0; i < V; ++i) gr[i] = yv[i] > 0.f ? gr[i] : 0.f;
  } else if (M == Mask::FromX) {
#pragma unroll
    for (int i = 0; i < V; ++i) gr[i] = __fmaf_rn(xv[i], ch.sc[i], ch.sf[i]) > 0.f ? gr[i] : 0.f;
  }
}

template <typename T, int V, Mask M>
__device__ __forceinline__ void masked(const Vec<T, V>& dy, const Vec<T, V>& y, uint8_t bits, const float (&xv)[V],
                                       const BwdChannels<V, M>& ch, float (&gr)[V]) {
  to_f<T, V>(dy, gr);
  mask_relu<T, V, M>(y, bits, xv, ch, gr);
}

// The backward's sums, then (last block of each column) dgamma, dbeta and the dx coefficients
// of its channels: coef A = gamma*invstd, B = -A*invstd*dgamma/m, C = -A*dbeta/m, so that
// dx = A*g + B*(x-mean) + C.
struct BwdFinalize {
  float* dgamma;  // += 
  float* dbeta;   // +=
  float* coef;    // 3c
};

// One channel's: sum g and sum g * (x - mean) in, dgamma, dbeta and the dx coefficients out.
__device__ __forceinline__ void finalize_backward(const BwdFinalize& f, int chn, int64_t m, int c, float invstd,
                                                  float gamma, double sum, double sxm) {
  const double is = invstd;
  const double dgamma = sxm * is;  // sum g*xhat
  f.dgamma[chn] += float(dgamma);
  f.dbeta[chn] += float(sum);
  const double a = double(gamma) * is;
  f.coef[chn] = float(a);
  f.coef[c + chn] = float(-a * is * dgamma / double(m));
  f.coef[2 * c + chn] = float(-a * sum / double(m));
}

template <typename T, int V, Mask M, bool kDy2>
__global__ void __launch_bounds__(kThreads)
    bwd_reduce_kernel(const T* __restrict__ x, const T* __restrict__ y, const T* __restrict__ dy,
                      const T* __restrict__ dy2, int64_t m, int c, const float* __restrict__ mean,
                      const float* __restrict__ invstd, const float* __restrict__ gamma,
                      const float* __restrict__ beta, T* __restrict__ dres, BwdFinalize f,
                      BnSync sync, const uint8_t* __restrict__ bits) {
  const int groups = c / V;
  const int g = blockIdx.x * blockDim.x + threadIdx.x;
  float s[V], sx[V];
#pragma unroll
  for (int i = 0; i < V; ++i) s[i] = sx[i] = 0.f;
  if (g < groups) {
    BwdChannels<V, M> ch;
    ch.load(g, mean, invstd, gamma, beta);
    const size_t col = size_t(g) * V;
    Vec<T, V> bx[kUnroll], bd[kUnroll], by[kUnroll]{}, bd2[kUnroll]{};
    uint8_t bb[kUnroll]{};
    stream_rows(
        m, [&](int u, int64_t r) {
          const size_t off = size_t(r) * c + col;
          bx[u] = load_v<T, V>(x + off);
          bd[u] = load_v<T, V>(dy + off);
          if (kDy2) bd2[u] = load_v<T, V>(dy2 + off);
          if (M == Mask::FromY) by[u] = load_v<T, V>(y + off);
          if (M == Mask::FromBits) bb[u] = bits[size_t(r) * size_t(groups) + size_t(g)];
        },
        [&](int u, int64_t r) {
          float xv[V], gr[V];
          to_f<T, V>(bx[u], xv);
          to_f<T, V>(bd[u], gr);
          if (kDy2) {
            float d2[V];
            to_f<T, V>(bd2[u], d2);
#pragma unroll
            for (int i = 0; i < V; ++i) gr[i] += d2[i];
          }
          mask_relu<T, V, M>(by[u], bb[u], xv, ch, gr);
          if (dres) store_f<T, V>(dres + size_t(r) * c + col, gr);
#pragma unroll
          for (int i = 0; i < V; ++i) {
            s[i] += gr[i];
            sx[i] += gr[i] * (xv[i] - ch.mu[i]);
          }
        });
  }
  if (!block_accumulate<V>(s, sx, c, sync)) return;
  finalize_column<V>(c, sync, [&](int chn, double sum, double sxm) {
    finalize_backward(f, chn, m, c, invstd[chn], gamma[chn], sum, sxm);
  });
}

// kWriteY (Mask::FromX only): the forward's output relu(bn(x)) written to yw on the way, the bits the
// forward's apply would have stored (a forward that left it unwritten: GpuOps::bn_relu_conv_forward_train).
template <typename T, int V, Mask M, bool kDres, bool kWriteY = false>
__global__ void __launch_bounds__(kThreads)
    bwd_dx_kernel(const T* __restrict__ x, const T* __restrict__ y, const T* __restrict__ dy,
                  const T* __restrict__ dres, int64_t m, int c, const float* __restrict__ coef,
                  const float* __restrict__ mean, const float* __restrict__ invstd,
                  const float* __restrict__ gamma, const float* __restrict__ beta,
                  T* __restrict__ dx, const uint8_t* __restrict__ bits, T* __restrict__ yw = nullptr) {
  static_assert(!kWriteY || (M == Mask::FromX && !kDres), "y is rewritten from x only");
  const int groups = c / V;
  const int g = blockIdx.x * blockDim.x + threadIdx.x;
  if (g >= groups) return;
  float a[V], b[V], cc[V];
#pragma unroll
  for (int i = 0; i < V; ++i) {
    a[i] = coef[g * V + i];
    b[i] = coef[c + g * V + i];
    cc[i] = coef[2 * c + g * V + i];
  }
  BwdChannels<V, M> ch;
  ch.load(g, mean, invstd, gamma, beta);
  const size_t col = size_t(g) * V;
  Vec<T, V> bx[kUnroll], bd[kUnroll], by[kUnroll]{};
  uint8_t bb[kUnroll]{};
  stream_rows(
      m, [&](int u, int64_t r) {
        const size_t off = size_t(r) * c + col;
        bx[u] = load_v<T, V>(x + off);
        bd[u] = load_v<T, V>((kDres ? dres : dy) + off);
        if (!kDres && M == Mask::FromY) by[u] = load_v<T, V>(y + off);
        if (!kDres && M == Mask::FromBits) bb[u] = bits[size_t(r) * size_t(groups) + size_t(g)];
      },
      [&](int u, int64_t r) {
        float xv[V], gr[V];
        to_f<T, V>(bx[u], xv);
        if (kDres)
          to_f<T, V>(bd[u], gr);
        else
          masked<T, V, M>(bd[u], by[u], bb[u], xv, ch, gr);
        if (kWriteY) {
          float yv[V];
#pragma unroll
          for (int i = 0; i < V; ++i) {
            const float v = __fmaf_rn(xv[i], ch.sc[i], ch.sf[i]);
            yv[i] = v > 0.f ? v : 0.f;
          }
          store_f<T, V>(yw + size_t(r) * c + col, yv);
        }
#pragma unroll
        for (int i = 0; i < V; ++i) gr[i] = a[i] * gr[i] + b[i] * (xv[i] - ch.mu[i]) + cc[i];
        store_f<T, V>(dx + size_t(r) * c + col, gr);
      });
}

// --- Backward of a projection block's join (bn_backward_join): a, the main branch's batch norm (its
// input x, output y = relu(bn_a(x) + bn_b(xd)), the ReLU's bits); b, the downsample's. What the two
// bn_backward calls compute: the masked gradient g = mask(dy + dy2) feeds a's sums unrounded, and the
// residual gradient as the first call stores it, round(g), feeds a's dx and all of b's.
struct JoinBwd {
  const float* mean;
  const float* invstd;
  const float* gamma;
  BwdFinalize f;
};

template <typename T, int V>
__device__ __forceinline__ void join_gradient(const Vec<T, V>& dy, const Vec<T, V>& dy2, bool with_dy2, uint8_t bits,
                                              float (&gr)[V], float (&gr_stored)[V]) {
  to_f<T, V>(dy, gr);
  if (with_dy2) {
    float d2[V];
    to_f<T, V>(dy2, d2);
#pragma unroll
    for (int i = 0; i < V; ++i) gr[i] += d2[i];
  }
#pragma unroll
  for (int i = 0; i < V; ++i) {
    gr[i] = (bits >> i) & 1u ? gr[i] : 0.f;
    gr_stored[i] = to_f(from_f<T>(gr[i]));
  }
}

// One thread's rows of the join's backward, kUnroll at a time: x, xd, dy (+ dy2) and the ReLU's byte
// loaded (all of a batch before any is used), then in fp32 with the gradient (join_gradient).
template <typename T, int V, bool kDy2>
struct JoinRows {
  const T* __restrict__ x;
  const T* __restrict__ xd;
  const T* __restrict__ dy;
  const T* __restrict__ dy2;
  const uint8_t* __restrict__ bits;
  int c, g;
  Vec<T, V> bx[kUnroll], bxd[kUnroll], bd[kUnroll], bd2[kUnroll]{};
  uint8_t bb[kUnroll];
  __device__ void load(int u, int64_t r) {
    const size_t off = size_t(r) * c + size_t(g) * V;
    bx[u] = load_v<T, V>(x + off);
    bxd[u] = load_v<T, V>(xd + off);
    bd[u] = load_v<T, V>(dy + off);
    if (kDy2) bd2[u] = load_v<T, V>(dy2 + off);
    bb[u] = bits[size_t(r) * size_t(c / V) + size_t(g)];
  }
  __device__ void get(int u, float (&xv)[V], float (&xdv)[V], float (&gr)[V], float (&gs)[V]) const {
    to_f<T, V>(bx[u], xv);
    to_f<T, V>(bxd[u], xdv);
    join_gradient<T, V>(bd[u], bd2[u], kDy2, bb[u], gr, gs);
  }
};

template <typename T, int V, bool kDy2>
__global__ void __launch_bounds__(kThreads)
    bwd_join_reduce_kernel(const T* __restrict__ x, const T* __restrict__ xd, const T* __restrict__ dy,
                           const T* __restrict__ dy2, int64_t m, int c, JoinBwd a, JoinBwd b, BnSync sync,
                           const uint8_t* __restrict__ bits) {
  const int groups = c / V;
  const int g = blockIdx.x * blockDim.x + threadIdx.x;
  float t[4][V];  // a's sum g and sum g * (x - mean), then b's of the stored g over xd
#pragma unroll
  for (int k = 0; k < 4; ++k)
#pragma unroll
    for (int i = 0; i < V; ++i) t[k][i] = 0.f;
  if (g < groups) {
    float mu[V], mud[V];
#pragma unroll
    for (int i = 0; i < V; ++i) {
      mu[i] = a.mean[g * V + i];
      mud[i] = b.mean[g * V + i];
    }
    JoinRows<T, V, kDy2> rows{x, xd, dy, dy2, bits, c, g};
    stream_rows(
        m, [&](int u, int64_t r) { rows.load(u, r); },
        [&](int u, int64_t) {
          float xv[V], xdv[V], gr[V], gs[V];
          rows.get(u, xv, xdv, gr, gs);
#pragma unroll
          for (int i = 0; i < V; ++i) {
            t[0][i] += gr[i];
            t[1][i] += gr[i] * (xv[i] - mu[i]);
            t[2][i] += gs[i];
            t[3][i] += gs[i] * (xdv[i] - mud[i]);
          }
        });
  }
  if (!block_accumulate<V, 4>(t, c, sync)) return;
  finalize_column<V, 4>(c, sync, [&](int chn, const double (&sum)[4]) {
    finalize_backward(a.f, chn, m, c, a.invstd[chn], a.gamma[chn], sum[0], sum[1]);
    finalize_backward(b.f, chn, m, c, b.invstd[chn], b.gamma[chn], sum[2], sum[3]);
  });
}

template <typename T, int V, bool kDy2>
__global__ void __launch_bounds__(kThreads)
    bwd_join_dx_kernel(const T* __restrict__ x, const T* __restrict__ xd, const T* __restrict__ dy,
                       const T* __restrict__ dy2, int64_t m, int c, JoinBwd a, JoinBwd b, T* __restrict__ dx,
                       T* __restrict__ dxd, const uint8_t* __restrict__ bits) {
  const int groups = c / V;
  const int g = blockIdx.x * blockDim.x + threadIdx.x;
  if (g >= groups) return;
  float ca[3][V], cb[3][V], mu[V], mud[V];
#pragma unroll
  for (int i = 0; i < V; ++i) {
#pragma unroll
    for (int k = 0; k < 3; ++k) {
      ca[k][i] = a.f.coef[k * c + g * V + i];
      cb[k][i] = b.f.coef[k * c + g * V + i];
    }
    mu[i] = a.mean[g * V + i];
    mud[i] = b.mean[g * V + i];
  }
  JoinRows<T, V, kDy2> rows{x, xd, dy, dy2, bits, c, g};
  stream_rows(
      m, [&](int u, int64_t r) { rows.load(u, r); },
      [&](int u, int64_t r) {
        float xv[V], xdv[V], gr[V], gs[V];
        rows.get(u, xv, xdv, gr, gs);
#pragma unroll
        for (int i = 0; i < V; ++i) {
          xv[i] = ca[0][i] * gs[i] + ca[1][i] * (xv[i] - mu[i]) + ca[2][i];
          xdv[i] = cb[0][i] * gs[i] + cb[1][i] * (xdv[i] - mud[i]) + cb[2][i];
        }
        const size_t off = size_t(r) * c + size_t(g) * V;
        store_f<T, V>(dx + off, xv);
        store_f<T, V>(dxd + off, xdv);
      });
}

// --- Launch helpers

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// V = 16 bytes worth of T when the channel count and every pointer allow it, else 1.
template <typename T>
int pick_vec(int c, std::initializer_list<const void*> ptrs) {
  constexpr int kV = 16 / sizeof(T);
  if (c % kV != 0) return 1;
  for (const void* p : ptrs)
    if (p && !aligned16(p)) return 1;
  return kV;
}

size_t reduce_shmem(int v, int arrays = 2) { return size_t(arrays) * kThreads * v * sizeof(float); }

template <typename T, int V, bool kRes, bool kRelu>
void launch_apply(const T* x, const T* res, T* y, int64_t m, int c, const float* ss, uint8_t* bits,
                  cudaStream_t s) {
  const Grid ap = apply_grid(m, c / V);
  apply_kernel<T, V, kRes, kRelu><<<ap.grid, ap.block, 0, s>>>(x, res, y, m, c, ss, bits);
  KERNEL_CHECK();
}

template <typename T, int V>
void apply_v(const T* x, const T* res, T* y, int64_t m, int c, const float* ss, bool relu,
             uint8_t* bits, cudaStream_t s) {
  if (res) {
    if (relu) launch_apply<T, V, true, true>(x, res, y, m, c, ss, bits, s);
    else launch_apply<T, V, true, false>(x, res, y, m, c, ss, nullptr, s);
  } else {
    if (relu) launch_apply<T, V, false, true>(x, res, y, m, c, ss, bits, s);
    else launch_apply<T, V, false, false>(x, res, y, m, c, ss, nullptr, s);
  }
}

template <typename T, int V, bool kRes, bool kRelu>
void launch_apply_sums(const T* x, const T* res, T* y, int64_t m, int c, float* sums, const FwdFinalize& f,
                       BnSync sync, uint8_t* bits, cudaStream_t s) {
  const Grid ap = apply_grid(m, c / V);
  apply_sums_kernel<T, V, kRes, kRelu><<<ap.grid, ap.block, 0, s>>>(x, res, y, m, c, sums, f, sync, bits);
  KERNEL_CHECK();
}

template <typename T, int V>
void apply_sums_v(const T* x, const T* res, T* y, int64_t m, int c, float* sums, const FwdFinalize& f, bool relu,
                  BnSync sync, uint8_t* bits, cudaStream_t s) {
  if (res) {
    if (relu) launch_apply_sums<T, V, true, true>(x, res, y, m, c, sums, f, sync, bits, s);
    else launch_apply_sums<T, V, true, false>(x, res, y, m, c, sums, f, sync, nullptr, s);
  } else {
    if (relu) launch_apply_sums<T, V, false, true>(x, res, y, m, c, sums, f, sync, bits, s);
    else launch_apply_sums<T, V, false, false>(x, res, y, m, c, sums, f, sync, nullptr, s);
  }
}

template <typename T, int V>
void stats_v(const T* x, int64_t m, int c, const FwdFinalize& f, BnSync sync, cudaStream_t s) {
  const Grid st = reduce_grid(m, c / V, kStatsBlocksPerSm);
  stats_kernel<T, V><<<st.grid, st.block, reduce_shmem(V), s>>>(x, m, c, f, sync);
  KERNEL_CHECK();
}

// The statistics pass over x, vectorized where x allows.
void stats_any(DType t, const void* x, int64_t m, int c, const FwdFinalize& f, BnSync sync, cudaStream_t s) {
  WK_DISPATCH(t, {
    const T* xt = static_cast<const T*>(x);
    if (pick_vec<T>(c, {x}) > 1)
      stats_v<T, 16 / sizeof(T)>(xt, m, c, f, sync, s);
    else
      stats_v<T, 1>(xt, m, c, f, sync, s);
  });
}

template <typename T, int V>
void forward_train_v(const T* x, int64_t m, int c, const FwdFinalize& f, const T* res, bool relu,
                     T* y, BnSync sync, uint8_t* bits, cudaStream_t s) {
  stats_v<T, V>(x, m, c, f, sync, s);
  apply_v<T, V>(x, res, y, m, c, f.scale_shift, relu, bits, s);
}

template <typename T, int V, Mask M>
void backward_vm(const T* x, const T* y, const T* dy, const T* dy2, int64_t m, int c, const float* gamma,
                 const float* beta, const float* mean, const float* invstd, T* dx, T* dres,
                 const BwdFinalize& f, BnSync sync, const uint8_t* bits, cudaStream_t s, T* yw = nullptr) {
  const Grid st = reduce_grid(m, c / V, kBwdReduceBlocksPerSm);
  if (dy2)
    bwd_reduce_kernel<T, V, M, true><<<st.grid, st.block, reduce_shmem(V), s>>>(
        x, y, dy, dy2, m, c, mean, invstd, gamma, beta, dres, f, sync, bits);
  else
    bwd_reduce_kernel<T, V, M, false><<<st.grid, st.block, reduce_shmem(V), s>>>(
        x, y, dy, dy2, m, c, mean, invstd, gamma, beta, dres, f, sync, bits);
  KERNEL_CHECK();
  const float* coef = f.coef;
  const Grid ap = apply_grid(m, c / V);
  // With a residual the dx pass reads the masked gradient the reduction wrote (dy + dy2).
  if (dres) {
    bwd_dx_kernel<T, V, M, true><<<ap.grid, ap.block, 0, s>>>(x, y, dy, dres, m, c, coef, mean,
                                                              invstd, gamma, beta, dx, bits);
  } else if constexpr (M == Mask::FromX) {
    if (yw)
      bwd_dx_kernel<T, V, M, false, true><<<ap.grid, ap.block, 0, s>>>(x, y, dy, dres, m, c, coef, mean, invstd,
                                                                       gamma, beta, dx, bits, yw);
    else
      bwd_dx_kernel<T, V, M, false><<<ap.grid, ap.block, 0, s>>>(x, y, dy, dres, m, c, coef, mean, invstd, gamma,
                                                                 beta, dx, bits);
  } else {
    bwd_dx_kernel<T, V, M, false><<<ap.grid, ap.block, 0, s>>>(x, y, dy, dres, m, c, coef, mean,
                                                               invstd, gamma, beta, dx, bits);
  }
  KERNEL_CHECK();
}

template <typename T, int V>
void backward_v(const T* x, const T* y, const T* dy, const T* dy2, int64_t m, int c, const float* gamma,
                const float* beta, const float* mean, const float* invstd, BnMask mask, T* dx,
                T* dres, const BwdFinalize& f, BnSync sync, const uint8_t* bits, cudaStream_t s, T* yw) {
  switch (mask) {
    case BnMask::None:
      backward_vm<T, V, Mask::None>(x, y, dy, dy2, m, c, gamma, beta, mean, invstd, dx, dres, f, sync, bits, s);
      break;
    case BnMask::FromOutput:
      backward_vm<T, V, Mask::FromY>(x, y, dy, dy2, m, c, gamma, beta, mean, invstd, dx, dres, f, sync, bits, s);
      break;
    case BnMask::FromInput:
      backward_vm<T, V, Mask::FromX>(x, y, dy, dy2, m, c, gamma, beta, mean, invstd, dx, dres, f, sync, bits, s,
                                     yw);
      break;
    case BnMask::FromBits:
      // The bits' layout is the vectorized kernels' (a byte per V channels); a backward that runs scalar
      // (a gradient not 16-byte aligned) reads the mask from y, which still holds it.
      if constexpr (V > 1)
        backward_vm<T, V, Mask::FromBits>(x, y, dy, dy2, m, c, gamma, beta, mean, invstd, dx, dres, f, sync, bits,
                                          s);
      else
        backward_vm<T, V, Mask::FromY>(x, y, dy, dy2, m, c, gamma, beta, mean, invstd, dx, dres, f, sync, bits, s);
      break;
  }
}

}  // namespace

size_t bn_relu_bits_bytes(DType t, int64_t m, int c) {
  const size_t per_row = size_t(c) * dtype_size(t) / 16;
  return size_t(m) * std::max<size_t>(per_row, 1);
}

size_t bn_sync_bytes(int c) {
  // Up to kBnSyncSums * c doubles per stripe, then one counter per column of blocks (at most c / 32
  // columns, V = 1).
  return size_t(kBnSyncSums) * size_t(c) * kStripes * sizeof(double) + (size_t(c) / 32 + 1) * sizeof(unsigned);
}

BnSync bn_sync_view(void* zeroed, int c, int sums) {
  BnSync v;
  v.acc = static_cast<double*>(zeroed);
  v.count = reinterpret_cast<unsigned*>(v.acc + size_t(sums) * size_t(c) * kStripes);
  return v;
}

bool bn_vectorized(DType t, int c, std::initializer_list<const void*> ptrs) {
  bool v = false;
  WK_DISPATCH(t, { v = pick_vec<T>(c, ptrs) > 1; });
  return v;
}

void bn_forward_train_join(DType t, const BnJoinSide& a, const BnJoinSide& b, int64_t m, int c, void* y,
                           void* sync_zeroed, uint8_t* relu_bits, cudaStream_t s) {
  auto side = [&](const BnJoinSide& j) {
    return JoinFwd{j.sums, FwdFinalize{j.gamma, j.beta, j.eps, j.momentum, j.running_mean, j.running_var,
                                       j.save_mean, j.save_invstd, j.scale_shift}};
  };
  const JoinFwd ja = side(a), jb = side(b);
  const BnSync sync = bn_sync_view(sync_zeroed, c);
  WK_DISPATCH(t, {
    constexpr int V = 16 / sizeof(T);
    // The batch norms without a convolution's sums run their statistics pass first.
    if (!ja.sums) stats_v<T, V>(static_cast<const T*>(a.x), m, c, ja.f, sync, s);
    if (!jb.sums) stats_v<T, V>(static_cast<const T*>(b.x), m, c, jb.f, sync, s);
    const Grid ap = apply_grid(m, c / V);
    apply_join_kernel<T, V><<<ap.grid, ap.block, 0, s>>>(static_cast<const T*>(a.x), static_cast<const T*>(b.x),
                                                         static_cast<T*>(y), m, c, ja, jb, sync, relu_bits);
    KERNEL_CHECK();
  });
}

void bn_backward_join(DType t, const BnJoinGrad& a, const BnJoinGrad& b, int64_t m, int c, const void* dy,
                      const void* dy2, const uint8_t* relu_bits, void* sync_zeroed, cudaStream_t s) {
  auto side = [](const BnJoinGrad& j) {
    return JoinBwd{j.save_mean, j.save_invstd, j.gamma, BwdFinalize{j.dgamma, j.dbeta, j.coef}};
  };
  const JoinBwd ja = side(a), jb = side(b);
  WK_DISPATCH(t, {
    constexpr int V = 16 / sizeof(T);
    const T* x = static_cast<const T*>(a.x);
    const T* xd = static_cast<const T*>(b.x);
    const T* g = static_cast<const T*>(dy);
    const T* g2 = static_cast<const T*>(dy2);
    const Grid st = reduce_grid(m, c / V, kBwdReduceBlocksPerSm);
    const BnSync sync = bn_sync_view(sync_zeroed, c, 4);
    const size_t shmem = reduce_shmem(V, 4);
    if (dy2)
      bwd_join_reduce_kernel<T, V, true><<<st.grid, st.block, shmem, s>>>(x, xd, g, g2, m, c, ja, jb, sync, relu_bits);
    else
      bwd_join_reduce_kernel<T, V, false><<<st.grid, st.block, shmem, s>>>(x, xd, g, g2, m, c, ja, jb, sync, relu_bits);
    KERNEL_CHECK();
    T* dx = static_cast<T*>(a.dx);
    T* dxd = static_cast<T*>(b.dx);
    const Grid ap = apply_grid(m, c / V);
    if (dy2)
      bwd_join_dx_kernel<T, V, true><<<ap.grid, ap.block, 0, s>>>(x, xd, g, g2, m, c, ja, jb, dx, dxd, relu_bits);
    else
      bwd_join_dx_kernel<T, V, false><<<ap.grid, ap.block, 0, s>>>(x, xd, g, g2, m, c, ja, jb, dx, dxd, relu_bits);
    KERNEL_CHECK();
  });
}

bool bn_forward_train(DType t, const void* x, int64_t m, int c, const float* gamma,
                      const float* beta, float eps, float momentum, float* running_mean,
                      float* running_var, float* save_mean, float* save_invstd,
                      const void* residual, bool relu, void* y, BnSync sync, float* scale_shift,
                      cudaStream_t s, uint8_t* relu_bits) {
  const FwdFinalize f{gamma, beta, eps, momentum, running_mean, running_var, save_mean, save_invstd,
                      scale_shift};
  bool bits = false;
  WK_DISPATCH(t, {
    const T* xt = static_cast<const T*>(x);
    const T* rt = static_cast<const T*>(residual);
    T* yt = static_cast<T*>(y);
    if (pick_vec<T>(c, {x, residual, y}) > 1) {
      bits = relu && relu_bits;
      forward_train_v<T, 16 / sizeof(T)>(xt, m, c, f, rt, relu, yt, sync, relu_bits, s);
    } else {
      forward_train_v<T, 1>(xt, m, c, f, rt, relu, yt, sync, nullptr, s);
    }
  });
  return bits;
}

bool bn_forward_train_sums(DType t, float* sums, const void* x, int64_t m, int c, const float* gamma,
                           const float* beta, float eps, float momentum, float* running_mean,
                           float* running_var, float* save_mean, float* save_invstd,
                           const void* residual, bool relu, void* y, BnSync sync, cudaStream_t s,
                           uint8_t* relu_bits) {
  const FwdFinalize f{gamma, beta, eps, momentum, running_mean, running_var, save_mean, save_invstd,
                      nullptr};
  bool bits = false;
  WK_DISPATCH(t, {
    const T* xt = static_cast<const T*>(x);
    const T* rt = static_cast<const T*>(residual);
    T* yt = static_cast<T*>(y);
    if (pick_vec<T>(c, {x, residual, y}) > 1) {
      bits = relu && relu_bits;
      apply_sums_v<T, 16 / sizeof(T)>(xt, rt, yt, m, c, sums, f, relu, sync, relu_bits, s);
    } else {
      apply_sums_v<T, 1>(xt, rt, yt, m, c, sums, f, relu, sync, nullptr, s);
    }
  });
  return bits;
}

void bn_train_scale_shift(DType t, const void* x, int64_t m, int c, const float* gamma, const float* beta,
                          float eps, float momentum, float* running_mean, float* running_var, float* save_mean,
                          float* save_invstd, BnSync sync, float* scale_shift, cudaStream_t s) {
  const FwdFinalize f{gamma, beta, eps, momentum, running_mean, running_var, save_mean, save_invstd, scale_shift};
  stats_any(t, x, m, c, f, sync, s);
}

void bn_stats_pass(DType t, const void* x, int64_t m, int c, BnSync sync, float* scratch, cudaStream_t s) {
  const FwdFinalize f{nullptr, nullptr, 1e-5f, 0.f, nullptr, nullptr, scratch, scratch + c, nullptr};
  stats_any(t, x, m, c, f, sync, s);
}

void bn_finalize_sums(DType t, float* sums, int64_t m, int c, const float* gamma, const float* beta, float eps,
                      float momentum, float* running_mean, float* running_var, float* save_mean, float* save_invstd,
                      float* scale_shift, void* half_ss, cudaStream_t s) {
  const FwdFinalize f{gamma, beta, eps, momentum, running_mean, running_var, save_mean, save_invstd, scale_shift};
  WK_DISPATCH(t, {
    finalize_sums_kernel<T><<<(c + 127) / 128, 128, 0, s>>>(sums, m, c, f, static_cast<T*>(half_ss));
    KERNEL_CHECK();
  });
}

void bn_apply(DType t, const void* x, int64_t m, int c, const float* scale_shift, const void* residual, bool relu,
              void* y, cudaStream_t s) {
  WK_DISPATCH(t, {
    const T* xt = static_cast<const T*>(x);
    const T* rt = static_cast<const T*>(residual);
    T* yt = static_cast<T*>(y);
    if (pick_vec<T>(c, {x, residual, y}) > 1)
      apply_v<T, 16 / sizeof(T)>(xt, rt, yt, m, c, scale_shift, relu, nullptr, s);
    else
      apply_v<T, 1>(xt, rt, yt, m, c, scale_shift, relu, nullptr, s);
  });
}

void bn_forward_eval(DType t, const void* x, int64_t m, int c, const float* gamma,
                     const float* beta, float eps, const float* running_mean,
                     const float* running_var, const void* residual, bool relu, void* y,
                     float* scale_shift, cudaStream_t s) {
  finalize_eval_kernel<<<(c + 127) / 128, 128, 0, s>>>(c, gamma, beta, eps, running_mean,
                                                      running_var, scale_shift);
  KERNEL_CHECK();
  bn_apply(t, x, m, c, scale_shift, residual, relu, y, s);
}

void bn_backward(DType t, const void* x, const void* y, const void* dy, const void* dy2, int64_t m, int c,
                 const float* gamma, const float* beta, const float* save_mean,
                 const float* save_invstd, BnMask mask, void* dx, void* dresidual, float* dgamma,
                 float* dbeta, BnSync sync, float* coef, cudaStream_t s, const uint8_t* relu_bits, void* y_out) {
  if (y_out && (mask != BnMask::FromInput || dresidual))
    throw GpuError(GpuError::Kind::Invalid, "bn_backward: y is rewritten only with the mask from x, no residual");
  const BwdFinalize f{dgamma, dbeta, coef};
  WK_DISPATCH(t, {
    const T* xt = static_cast<const T*>(x);
    const T* yt = static_cast<const T*>(y);
    const T* dyt = static_cast<const T*>(dy);
    const T* dy2t = static_cast<const T*>(dy2);
    T* dxt = static_cast<T*>(dx);
    T* drt = static_cast<T*>(dresidual);
    T* ywt = static_cast<T*>(y_out);
    const void* yp = mask == BnMask::FromOutput || mask == BnMask::FromBits ? y : nullptr;
    if (pick_vec<T>(c, {x, yp, dy, dy2, dx, dresidual, y_out}) > 1)
      backward_v<T, 16 / sizeof(T)>(xt, yt, dyt, dy2t, m, c, gamma, beta, save_mean, save_invstd, mask,
                                    dxt, drt, f, sync, relu_bits, s, ywt);
    else
      backward_v<T, 1>(xt, yt, dyt, dy2t, m, c, gamma, beta, save_mean, save_invstd, mask, dxt, drt, f,
                       sync, relu_bits, s, ywt);
  });
}

}  // namespace gpu
}  // namespace worker
