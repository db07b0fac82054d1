// Host-side launchers of the backend's own kernels (the kernels live in the .cu files beside
// this). Every launcher enqueues on `s` and checks the launch; tensors are NHWC in `t`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include <cuda_runtime.h>

#include "worker/core/loss_scale.h"
#include "worker/core/ops.h"

namespace worker {
namespace gpu {

// --- Batch norm (bn.cu). `sync`: per-channel accumulators and block counters that every
// kernel leaves zeroed again; bn_sync_view() over bn_sync_bytes(c) bytes that are zero before
// the first call (one such buffer serves every batch norm of a stream, in turn).
struct BnSync {
  double* acc = nullptr;
  unsigned* count = nullptr;
};
// The most per-channel sums one kernel accumulates (a projection block's join backward: 4).
constexpr int kBnSyncSums = 4;
size_t bn_sync_bytes(int c);
BnSync bn_sync_view(void* zeroed, int c, int sums = 2);
// The vectorized kernels (16-byte accesses) apply: c a multiple of 16 bytes' elements, every
// (non-null) pointer 16-byte aligned.
bool bn_vectorized(DType t, int c, std::initializer_list<const void*> ptrs);
// Training forward: statistics, running-stat update, saved mean/invstd, then the fused
// normalise + residual + ReLU. scale_shift: scratch of 2*c floats. relu_bits (may be null; bn_relu_bits_bytes
// of them): the ReLU's mask as bits for the backward (BnMask::FromBits); true when they were written
// (with relu, where the tensors allow 16-byte accesses).
bool bn_forward_train(DType t, const void* x, int64_t m, int c, const float* gamma,
                      const float* beta, float eps, float momentum, float* running_mean,
                      float* running_var, float* save_mean, float* save_invstd,
                      const void* residual, bool relu, void* y, BnSync sync, float* scale_shift,
                      cudaStream_t s, uint8_t* relu_bits = nullptr);
// One byte per row and group of 16 bytes of channels (c * element bytes / 16 per row).
size_t bn_relu_bits_bytes(DType t, int64_t m, int c);
// The training forward from a convolution's sums of x (fp16's conv+genstats: sums[0, c) the sum,
// sums[c, 2c) the sum of squares, fp32, over the m rows): the same finalize, in double, and the same
// apply, in one kernel; the sums are zero again after it.
bool bn_forward_train_sums(DType t, float* sums, const void* x, int64_t m, int c, const float* gamma,
                           const float* beta, float eps, float momentum, float* running_mean,
                           float* running_var, float* save_mean, float* save_invstd,
                           const void* residual, bool relu, void* y, BnSync sync, cudaStream_t s,
                           uint8_t* relu_bits = nullptr);
// The training forward without its apply: the statistics pass over x, the saved and running
// statistics, and the apply's scale then shift into scale_shift (2c floats), rounded as the apply's own.
void bn_train_scale_shift(DType t, const void* x, int64_t m, int c, const float* gamma, const float* beta,
                          float eps, float momentum, float* running_mean, float* running_var, float* save_mean,
                          float* save_invstd, BnSync sync, float* scale_shift, cudaStream_t s);
// The finalize alone of a batch norm whose statistics a convolution wrote (sums as bn_forward_train_sums'):
// the saved and running statistics, the apply's scale then shift into scale_shift (2c floats, the bits
// bn_forward_train_sums applies) and rounded to t into half_ss (2c values: the scale and bias cuDNN's fused
// prologue reads, ConvDir::FwdPrologue); the sums are zero again after it.
void bn_finalize_sums(DType t, float* sums, int64_t m, int c, const float* gamma, const float* beta, float eps,
                      float momentum, float* running_mean, float* running_var, float* save_mean, float* save_invstd,
                      float* scale_shift, void* half_ss, cudaStream_t s);
// y = relu?(scale * x + shift + residual?) over m rows of c channels (scale_shift: 2c floats; residual may
// be null), as the forwards apply it.
void bn_apply(DType t, const void* x, int64_t m, int c, const float* scale_shift, const void* residual, bool relu,
              void* y, cudaStream_t s);
// The training forward's statistics pass alone, mean and invstd into scratch (2*c floats): what the
// fused convolution's timing compares against (conv_planner.h).
void bn_stats_pass(DType t, const void* x, int64_t m, int c, BnSync sync, float* scratch, cudaStream_t s);
void bn_forward_eval(DType t, const void* x, int64_t m, int c, const float* gamma,
                     const float* beta, float eps, const float* running_mean,
                     const float* running_var, const void* residual, bool relu, void* y,
                     float* scale_shift, cudaStream_t s);
// A projection block's join in one pass (Ops::bn_forward_train_join): y = relu(bn_a(a.x) + bn_b(b.x)),
// the same bits as bn_forward_train of b into y and then of a with y as its residual (the downsample
// branch rounded to the compute dtype before the add), the ReLU's bits into relu_bits when non-null.
// A side whose convolution wrote the sums of x (sums non-null) is finalized in the join's kernel and
// its sums are zero again after it; the other runs the statistics pass first, into scale_shift (2c
// floats). Both over m rows of c channels; only where bn_vectorized(t, c, {a.x, b.x, y}).
struct BnJoinSide {
  const void* x = nullptr;
  float* sums = nullptr;
  const float* gamma = nullptr;
  const float* beta = nullptr;
  float eps = 1e-5f, momentum = 0.1f;
  float* running_mean = nullptr;
  float* running_var = nullptr;
  float* save_mean = nullptr;
  float* save_invstd = nullptr;
  float* scale_shift = nullptr;
};
void bn_forward_train_join(DType t, const BnJoinSide& a, const BnJoinSide& b, int64_t m, int c, void* y,
                           void* sync_zeroed, uint8_t* relu_bits, cudaStream_t s);
// Its backward from the forward's ReLU bits: the gradient dy (+ dy2 where non-null) to both batch
// norms in two passes (sums, then both dx), as the two bn_backward calls compute it; y is not
// touched. dx may alias x (each side's). sync_zeroed: bn_sync_bytes(c) zeroed bytes, left zeroed.
struct BnJoinGrad {
  const void* x = nullptr;
  const float* gamma = nullptr;
  const float* save_mean = nullptr;
  const float* save_invstd = nullptr;
  void* dx = nullptr;
  float* dgamma = nullptr;  // +=
  float* dbeta = nullptr;   // +=
  float* coef = nullptr;    // scratch of 3c floats
};
void bn_backward_join(DType t, const BnJoinGrad& a, const BnJoinGrad& b, int64_t m, int c, const void* dy,
                      const void* dy2, const uint8_t* relu_bits, void* sync_zeroed, cudaStream_t s);
// Where the backward's ReLU mask comes from: no ReLU; y > 0 (y = relu(bn(x) + residual));
// or recomputed from x, gamma, beta and the saved statistics (only where y was relu(bn(x))
// alone): y is then not read; or the bits the training forward wrote (relu_bits; where it wrote
// none, the vectorized launch was not possible and y is read).
enum class BnMask : uint8_t { None, FromOutput, FromInput, FromBits };
// coef: scratch of 3*c floats. dgamma/dbeta are accumulated (+=). dy2 (may be null; only with
// dresidual): a second part of the output gradient, added to dy. y_out (may be null; only with
// BnMask::FromInput and no dresidual): the forward's output relu(bn(x)) written there by the dx pass, the
// bits the forward's apply stores (for a forward that left it unwritten).
void bn_backward(DType t, const void* x, const void* y, const void* dy, const void* dy2, int64_t m, int c,
                 const float* gamma, const float* beta, const float* save_mean,
                 const float* save_invstd, BnMask mask, void* dx, void* dresidual, float* dgamma,
                 float* dbeta, BnSync sync, float* coef, cudaStream_t s, const uint8_t* relu_bits = nullptr,
                 void* y_out = nullptr);

// --- Pooling (pooling.cu).
// The forward also writes the position of each window's maximum (PyTorch's rule) into
// `argmax` (maxpool_argmax_bytes(d), one byte per output element) unless it is null. The
// backward finds them again from x unless argmax_valid (they are the forward's for this very
// x), then every input position gathers the gradients of the windows whose argmax it is (no
// atomics: deterministic). tiled: the stem's window (3x3/2, padding 1) with a thread per 2x2 inputs
// (GpuOptions::pool_tiled); the result is the same bit for bit.
size_t maxpool_argmax_bytes(const PoolDesc& d);
void maxpool_forward(DType t, const void* x, void* y, void* argmax, const PoolDesc& d,
                     cudaStream_t s);
void maxpool_backward(DType t, const void* x, const void* dy, void* dx, const PoolDesc& d,
                      void* argmax, bool argmax_valid, cudaStream_t s, bool tiled = true);
// The stem's max-pool of a training batch norm's output relu(scale * x + shift) (scale_shift: 2c floats,
// bn_train_scale_shift's) computed from its input x, with the argmax: the output and argmax
// maxpool_forward gives over the stored batch-norm output, which is not written. Only where
// maxpool_bn_applies (the 3x3/2 window, 16-byte accesses).
bool maxpool_bn_applies(DType t, const PoolDesc& d, const void* x, const void* y, const void* argmax);
void maxpool_forward_bn(DType t, const void* x, const float* scale_shift, void* y, void* argmax, const PoolDesc& d,
                        cudaStream_t s);
void avgpool_forward(DType t, const void* x, void* y, int n, int hw, int c, cudaStream_t s);
void avgpool_backward(DType t, const void* dy, void* dx, int n, int hw, int c, cudaStream_t s);

// --- Space-to-depth form of a convolution with few input channels (space_to_depth.cu): the
// ImageNet stem's 7x7/2 over 3 channels becomes a 4x4/1 over 16, the CIFAR stem's 3x3/1 a 3x3/1
// over 8 without padding (see the file's comment).
struct S2dDesc {
  int n = 0, h = 0, w = 0, c = 0;  // the original input
  int cout = 0, k = 0, pad = 0;    // the original filter (k x k, stride b)
  int b = 2;                       // the block: the original stride (2, or 1: channels padded only)
  int kp = 0;                      // rearranged filter: kp x kp, stride 1, no padding
  int hs = 0, ws = 0, cs = 0;      // rearranged input (cs = b*b*c rounded up to a multiple of 8)
};
bool s2d_applies(const ConvDesc& d);  // stride 1 or 2, square kernel >= 3, 1..4 input channels
S2dDesc s2d_desc(const ConvDesc& d);
ConvDesc s2d_conv(const ConvDesc& d);  // the equivalent stride-1 convolution
void s2d_input(DType t, const void* x, void* xs, const S2dDesc& g, cudaStream_t s);
void s2d_weight(DType t, const void* w, void* wsd, const S2dDesc& g, cudaStream_t s);
// dw (fp32, the original layout) += the rearranged weight gradient dwsd.
void s2d_wgrad_fold(DType t, const void* dwsd, float* dw, const S2dDesc& g, cudaStream_t s);

// --- The stream busy for about `microseconds` (busy.cu), e.g. ahead of a timed call.
void busy_wait(int microseconds, cudaStream_t s);

// --- Loss and fully connected helpers (loss.cu).
// Label smoothing as Ops::softmax_xent. row_loss: scratch of n floats. loss_scale (device memory,
// may be null): fp16 loss scaling's scale, which multiplies grad_scale.
void softmax_xent(int n, int classes, const float* logits, const int32_t* labels,
                  float grad_scale, const float* loss_scale, float label_smoothing, float* loss,
                  float* dlogits, float* row_loss, cudaStream_t s);
void fill_rows(float* out, const float* row, int n, int cols, cudaStream_t s);  // out[i,:] = row
void column_sums_add(const float* a, int n, int cols, float* out, cudaStream_t s);  // out += sum_i a[i,:]

// --- Element-wise over flat buffers (elementwise.cu).
void cast_from_f32(DType t, const float* src, void* dst, size_t n, cudaStream_t s);
void add_to_f32(DType t, const void* src, float* dst, size_t n, cudaStream_t s);  // dst += src
void scale_f32(float* p, float a, size_t n, cudaStream_t s);
// dst[r.dst + j] = src[r.src + j] for every run r of `runs` (device memory) and j < r.count:
// one launch for many short copies (ZeRO-1's fp32 copies of the 1-D parameters).
struct CopyRun {
  size_t src = 0, dst = 0, count = 0;
};
void gather_runs(const float* src, float* dst, const CopyRun* runs, int n_runs, cudaStream_t s);
// Sets *flag to 1 when some element is not finite (flag is not cleared here).
void find_nonfinite(const float* p, size_t n, int* flag, cudaStream_t s);
// The optimizers' per-step values as their kernels read them, from device memory: a captured
// step (a CUDA graph) replays with new ones written by set_opt_scalars before each launch, and
// the uncaptured step goes through the same two kernels, so both compute the same bits.
struct OptScalars {
  float lr = 0.f;
  float bc1 = 1.f;       // Adam: 1 - beta1^step
  float bc2_sqrt = 1.f;  // Adam: sqrt(1 - beta2^step)
  int apply = 1;         // 0: fp16 loss scaling skips this step (parameters and state untouched)
  int first = 0;         // 1: SGD's first step by fp16 loss scaling's count (besides the `first` argument)
};
// Adam's bias corrections in double on the host, as torch.optim.Adam computes them in Python floats.
OptScalars adam_scalars(float lr, float beta1, float beta2, int64_t step);
void set_opt_scalars(OptScalars* dst, const OptScalars& v, cudaStream_t s);  // one thread, v as an argument
// decay_mask (may be null: everywhere): weight decay only where its byte is non-zero.
void sgd_step(float* p, const float* g, float* buf, const uint8_t* decay_mask, size_t n, const OptScalars* sc,
              float momentum, float wd, bool first, bool nesterov, cudaStream_t s);
void adam_step(float* p, const float* g, float* m, float* v, const uint8_t* decay_mask, size_t n,
               const OptScalars* sc, float beta1, float beta2, float eps, float wd, cudaStream_t s);

// --- fp16 dynamic loss scaling on the device (loss_scale.cu; Ops::set_loss_scale, worker/core/loss_scale.h):
// the state every step's kernels read and change, so that no step waits for a host read.
struct DeviceLossScale {
  LossScaleState s;             // scale first: softmax_xent reads it as a float*
  int64_t optimizer_steps = 0;  // the optimizer's steps taken, this step's included when it applies
  int bad = 0;                  // this step's gradients hold an inf or NaN (unscale_grads)
  int applies = 1;              // update_loss_scale's answer for this step
};
void set_loss_scale(DeviceLossScale* d, const LossScaleState& s, int64_t optimizer_steps, cudaStream_t st);
// g[i] *= 1 / (divisor * scale), the verdict into d->bad (cleared first). With `add` (elements of the
// compute dtype t), g[i] = (g[i] + add[i - lo]) * 1 / (divisor * scale) for i in [lo, hi): the waiting
// weight gradients (GpuOps::add_pending_dw) added in the same pass, the bits of add_to_f32 then this.
void unscale_grads(float* g, size_t n, float divisor, DeviceLossScale* d, cudaStream_t st, DType t = DType::F32,
                   const void* add = nullptr, size_t lo = 0, size_t hi = 0);
void set_grads_verdict(DeviceLossScale* d, bool grads_finite, cudaStream_t st);
void update_loss_scale(DeviceLossScale* d, const LossScaleRules& rules, cudaStream_t st);
// The optimizer's OptScalars under loss scaling: lr from `in` (written before the step, or before
// a replay), Adam's bias corrections of d's step count (in double, as adam_scalars), apply and
// SGD's first from d.
void loss_scaled_opt_scalars(const OptScalars* in, const DeviceLossScale* d, bool adam, float beta1, float beta2,
                             OptScalars* out, cudaStream_t st);

// --- Synthetic data (data.cu): the generator of worker/core/synthetic.h on the device.
void make_batch(DType t, DataKind kind, uint64_t seed, const int64_t* host_indices, int n,
                int image_size, int classes, void* images, int32_t* labels, cudaStream_t s);

}  // namespace gpu
}  // namespace worker
