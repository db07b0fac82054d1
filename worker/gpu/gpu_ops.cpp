// worker::Ops on one GPU, layer by layer: cuDNN convolutions through their plans (conv_planner.h),
// cuBLAS for the fully connected layer, the backend's kernels (kernels.h) for the rest. Each call
// checks its tensors, makes the main stream wait for side-stream work over what it writes
// (writes()), and enqueues its work.
#include "worker/gpu/gpu_ops.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "worker/core/backend.h"
#include "worker/core/knobs.h"
#include "worker/gpu/check.h"
#include "worker/gpu/kernels.h"

namespace worker {
namespace gpu {

namespace {

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::F32: return CUDA_R_32F;
    case DType::BF16: return CUDA_R_16BF;
    case DType::F16: return CUDA_R_16F;
  }
  return CUDA_R_32F;
}

const float kOne = 1.f, kZero = 0.f;

// Labels of the per-operation breakdown (OpTimer; conv_label is conv_planner.h's).
std::string bn_label(const BnDesc& d, bool residual, bool relu) {
  return std::to_string(d.c) + " " + std::to_string(d.h) + "x" + std::to_string(d.w) +
         (residual ? " +res" : "") + (relu ? " relu" : "");
}
std::string act_label(const Act& a) {
  return std::to_string(a.c) + " " + std::to_string(a.h) + "x" + std::to_string(a.w);
}

}  // namespace

// --- Set-up

GpuOps::GpuOps(const GpuOptions& opt)
    : opt_(opt),
      pool_(opt.pool_chunk),
      dev_(opt.device, pool_),
      flag_(static_cast<int*>(pool_.alloc(sizeof(int)))),
      loss_scale_(static_cast<DeviceLossScale*>(pool_.alloc(sizeof(DeviceLossScale)))),
      side_(opt.wgrad_stream ? std::make_unique<SideStream>(dev_.stream) : nullptr),
      ws_(pool_, side_.get()),
      weights_(opt.precision, pool_, dev_, side_.get()),
      convs_(opt, pool_, dev_, ws_, side_.get()),
      capture_(pool_, dev_.stream) {
  timer_ = std::make_unique<OpTimer>(dev_.stream);
}

GpuOps::~GpuOps() {
  side_.reset();  // waits for its work
  cudaStreamSynchronize(dev_.stream);
  timer_.reset();  // (dev_, which destroys the handles and the stream, goes last)
}

std::string GpuOps::describe() const {
  const size_t v = cudnnGetVersion();
  const bool graph = opt_.graph_engines && opt_.precision != DType::F32;
  return "gpu " + std::to_string(opt_.device) + " (" + dev_.name + ", " +
         dtype_name(opt_.precision) +
         (opt_.precision == DType::F32 ? (opt_.allow_tf32 ? ", TF32 on" : ", TF32 off") : "") +
         ", cuDNN " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
         std::to_string(v % 100) + ", conv algorithms by " +
         (opt_.search == AlgoSearch::Find ? "timed search" : "heuristics") +
         (graph ? " + graph-API engines timed on the first calls" : "") +
         (opt_.precision == DType::F16 && graph && opt_.fused_stats != FusedStats::Off
              ? (opt_.fused_stats == FusedStats::Always ? ", conv+genstats always" : ", conv+genstats where faster")
              : "") +
         ")";
}

// --- Memory

void* GpuOps::alloc(size_t bytes) { return alloc_zeroed(pool_, bytes, dev_.stream); }

std::vector<std::pair<std::string, size_t>> GpuOps::memory_breakdown() const {
  std::vector<std::pair<std::string, size_t>> rows{
      {std::string(dtype_name(opt_.precision)) + " weight shadow", weights_.shadow_bytes()},
      {"cuDNN workspace", ws_.carved()},
      {"side stream: half-precision dW", ws_.side_scratch_carved()},
      {"half-precision weight gradients, added in one pass", dw_half_bytes_},
      {"cuBLAS workspace", Device::kCublasWorkspace},
      {"backend scratch (BN sums, ReLU bits, half dW, max-pool argmax)", mem_scratch_},
      {"stem space-to-depth input", convs_.s2d_bytes()},
      {"fp16 conv+genstats sums", convs_.stats_bytes()},
      {"pool reserved, not handed out", pool_.reserved() - pool_.used()}};
  if (weights_.sharded()) {
    rows.insert(rows.begin() + 1, {{"fp32 master weights, this rank's shard (ZeRO-1)", weights_.master_bytes()},
                                   {"fp32 copies of the 1-D parameters (ZeRO-1)", weights_.copies_bytes()}});
  }
  return rows;
}

void GpuOps::upload(void* dst, const void* host_src, size_t bytes) {
  writes(dst, bytes);
  CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, dev_.stream));
  dev_.wait();  // the caller may free host_src on return
}

void GpuOps::download(void* host_dst, const void* src, size_t bytes) {
  materialize(src, bytes);
  join_side_work();
  CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, dev_.stream));
  dev_.wait();
}

void GpuOps::zero(void* dst, size_t bytes) {
  auto timed = timer_->scope("zero", [&] { return std::to_string(bytes >> 20) + " MiB"; });
  writes(dst, bytes);
  CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, dev_.stream));
}

void GpuOps::synchronize() {
  join_side_work();
  dev_.wait();
}

// --- Scratch, and the main stream's writes

float* GpuOps::scratch_f32(size_t count) {
  if (count > f32_scratch_count_) {
    const size_t c = std::max(count, f32_scratch_count_ * 2);
    f32_scratch_ = static_cast<float*>(pool_.alloc(c * sizeof(float)));
    mem_scratch_ += c * sizeof(float);
    f32_scratch_count_ = c;
  }
  return f32_scratch_;
}

void* GpuOps::bn_sync_zeroed(int c) {
  if (c > bn_sync_c_) {
    const size_t bytes = bn_sync_bytes(c);
    bn_sync_ = pool_.alloc(bytes);
    CUDA_CHECK(cudaMemsetAsync(bn_sync_, 0, bytes, dev_.stream));  // the kernels keep it zeroed
    mem_scratch_ += bytes;
    bn_sync_c_ = c;
  }
  return bn_sync_;
}

BnSync GpuOps::bn_sync(int c) { return bn_sync_view(bn_sync_zeroed(c), c); }

void* GpuOps::scratch_half(size_t bytes) {
  if (bytes > half_scratch_bytes_) {
    const size_t b = std::max(bytes, half_scratch_bytes_ * 2);
    half_scratch_ = pool_.alloc(b);
    mem_scratch_ += b;
    half_scratch_bytes_ = b;
  }
  return half_scratch_;
}

void GpuOps::writes(const void* p, size_t bytes) {
  if (dw_pending_in(p, bytes)) join_side_work();
  if (side_) side_->guard_write(p, bytes);
  if (pool_unwritten_x_ && p <= pool_unwritten_x_ && pool_unwritten_x_ < static_cast<const char*>(p) + bytes)
    pool_unwritten_x_ = nullptr;  // written since
  pairing_.written(p, bytes);  // an output written over loses its convolution's sums
  if (!bn_unwritten_.empty()) bn_unwritten_.written(p, bytes);  // an output the prologue skipped holds this now
}

void GpuOps::materialize(const void* p, size_t bytes) {
  if (bn_unwritten_.empty()) return;
  for (const auto& [y, u] : bn_unwritten_.take(p, bytes)) {
    auto timed = timer_->scope("bn fwd", [&] { return std::to_string(u.c) + " relu, the output the prologue skipped"; });
    ++prologue_materialized_;
    writes(y.p, y.bytes);
    gpu::bn_apply(opt_.precision, u.x, u.m, u.c, u.scale_shift, nullptr, true, const_cast<void*>(y.p),
                  dev_.stream);
  }
}

GpuOps::PrologueBuf& GpuOps::prologue_buf(size_t gamma_offset, int c) {
  PrologueBuf& b = prologue_bufs_[gamma_offset];
  if (c > b.c) {  // first use (a batch norm's channels do not change)
    const size_t f32 = 2 * size_t(c) * sizeof(float), half = 2 * size_t(c) * dtype_size(opt_.precision);
    b.scale_shift = static_cast<float*>(pool_.alloc(f32 + half));
    b.half = reinterpret_cast<char*>(b.scale_shift) + f32;  // 16-byte aligned: c is a multiple of 8
    b.c = c;
    mem_scratch_ += f32 + half;
  }
  return b;
}

void GpuOps::zero_untaken_stats() {
  for (const Range& slot : pairing_.drop_untaken())
    CUDA_CHECK(cudaMemsetAsync(const_cast<void*>(slot.p), 0, slot.bytes, dev_.stream));
}

void GpuOps::join_side_work() {
  if (side_) side_->join();
  add_pending_dw();
}

bool GpuOps::dw_pending_in(const void* p, size_t bytes) const {
  const char* a = static_cast<const char*>(p);
  for (const ParamView& v : dw_pending_) {
    const char* g = reinterpret_cast<const char*>(grads_ + v.offset);
    if (a < g + v.count * sizeof(float) && g < a + bytes) return true;
  }
  return false;
}

std::pair<size_t, size_t> GpuOps::take_pending_dw() {
  size_t lo = SIZE_MAX, hi = 0;
  for (const ParamView& v : dw_pending_) {
    lo = std::min(lo, v.offset);
    hi = std::max(hi, v.offset + v.count);
  }
  dw_pending_.clear();
  return lo < hi ? std::make_pair(lo, hi) : std::make_pair(size_t(0), size_t(0));
}

void GpuOps::add_pending_dw() {
  const auto [lo, hi] = take_pending_dw();
  if (lo == hi) return;
  auto timed = timer_->scope("optimizer", [] { return std::string("weight gradients added to the fp32 gradients"); });
  add_to_f32(opt_.precision, dw_half_ + lo * dtype_size(opt_.precision), grads_ + lo, hi - lo, dev_.stream);
}

// --- Parameters

void GpuOps::bind_params(float* params, float* grads, size_t count) {
  weights_.bind(params, count);
  grads_ = grads;
  const size_t half = count * dtype_size(opt_.precision);
  if (opt_.dw_batched && opt_.precision != DType::F32 && half > dw_half_bytes_) {
    dw_half_ = static_cast<char*>(alloc_zeroed(pool_, half, dev_.stream));
    dw_half_bytes_ = half;
  }
  if (weights_.has_shadow() && params) params_updated();  // else import_master() fills the shadow
}

void GpuOps::register_conv(const ConvDesc& d, ParamView) { convs_.plan(d); }

void GpuOps::params_updated() {
  auto timed = timer_->scope("optimizer", [] { return std::string("bf16/fp16 weight shadow"); });
  weights_.params_updated();
}

void GpuOps::shard_master_weights(const std::vector<ParamView>& owned, const std::vector<ParamView>& fp32_views) {
  weights_.shard(owned, fp32_views);
}

void GpuOps::export_master(float* whole, ParamView range) { weights_.export_master(whole, range); }

void GpuOps::import_master(const float* whole) {
  auto timed = timer_->scope("optimizer", [] { return std::string("bf16/fp16 weight shadow"); });
  weights_.import_master(whole);
}

void GpuOps::check_act(const Act& a, const char* what) const {
  if (a.dtype != opt_.precision || (a.data == nullptr && a.numel() != 0))
    throw GpuError(GpuError::Kind::Invalid,
                   std::string(what) + ": tensor is " + dtype_name(a.dtype) + ", backend computes in " +
                       dtype_name(opt_.precision) + " (" + where() + ")");
}

// --- Convolution

void GpuOps::conv_forward(const ConvDesc& d, const Act& x, ParamView w, Act& y) {
  check_act(x, "conv_forward input");
  check_act(y, "conv_forward output");
  materialize(x);
  ConvPlan& p = convs_.plan(d);
  // (Before the prediction below: writing y settles what followed the last call's output.)
  writes(y);
  if (p.s2d) {
    auto timed = timer_->scope("conv fwd", [&] { return conv_label(d) + " s2d"; });
    ConvPlan& q = convs_.s2d_prepare(p, x.data, weights_.weight(w), true);
    convs_.fwd(q, p.s2d_x, p.s2d_w, y.data);
    return;
  }
  // fp16: the sums of y in the convolution's epilogue where a training batch norm is expected to
  // read y (stats_pairing.h), not in a validation pass (its batch norms are evaluation ones).
  float* slot = convs_.stats_slot(p, y.data);
  const StatsPairing::Conv call{{slot, 2 * size_t(d.cout) * sizeof(float)}, x.data, {y.data, y.bytes()},
                                in_backward_};
  const bool want = slot && last_bn_train_ && pairing_.predicted(call);
  auto timed = timer_->scope(want && convs_.stats_chosen(p) ? "conv fwd+stats" : "conv fwd",
                             [&] { return conv_label(d); });
  bool stats = false;
  if (want) {
    if (pairing_.needs_zero(slot)) {
      CUDA_CHECK(cudaMemsetAsync(slot, 0, call.slot.bytes, dev_.stream));
      pairing_.zeroed(slot);
    }
    const int64_t m = int64_t(d.n) * d.ho * d.wo;
    stats = convs_.fwd_stats(p, slot, x.data, weights_.weight(w), y.data, [&] {
      gpu::bn_stats_pass(opt_.precision, y.data, m, d.cout, bn_sync(d.cout), scratch_f32(2 * size_t(d.cout)),
                         dev_.stream);
    });
  } else {
    convs_.fwd(p, x.data, weights_.weight(w), y.data);
  }
  if (slot) pairing_.conv_wrote(call, stats);  // (bf16, fp32 and unfusable shapes: nothing to pair)
}

void GpuOps::conv_backward(const ConvDesc& d, const Act& x, ParamView w, const Act& dy, Act* dx,
                           bool accumulate_dx, ParamView dw) {
  check_act(x, "conv_backward input");
  check_act(dy, "conv_backward output gradient");
  materialize(x);
  // A forward call from here until the first layer's weight gradient (no dx) is a recomputation.
  in_backward_ = dx != nullptr;
  ConvPlan& p = convs_.plan(d);
  const bool side = wgrad_side(p, dx != nullptr);
  wgrad_begin(dw, side, p);  // before the data gradient: the two may overlap as well
  if (dx) {
    check_act(*dx, "conv_backward input gradient");
    auto timed = timer_->scope("conv dgrad", [&] { return conv_label(d); });
    writes(*dx);
    convs_.dgrad(p, dy.data, weights_.weight(w), dx->data, accumulate_dx);
  }
  conv_wgrad(p, d, x, dy, dw, side);
}

bool GpuOps::wgrad_side(const ConvPlan& p, bool more_after) const {
  // The weight gradient goes to the side stream when backward has more to do after this layer
  // (dx: not the stem, which the optimizer follows) and when it is not being timed on the main
  // stream (its engine still explored, or the per-operation profile). Not in a captured step:
  // there the kernels follow each other without launch gaps, and the graph's fork and join
  // edges cost more than the overlap gave (H200, ResNet-50 bf16 b256: 8,104 images/s against
  // 8,211 on one stream; uncaptured, 8,399 against 8,283).
  const ConvTuner* wt = p.tune[3].get();
  return side_ && more_after && !p.s2d && !timer_->on() && (!wt || wt->settled()) && !capture_.capturing();
}

void GpuOps::wgrad_begin(ParamView dw, bool side, const ConvPlan& p) {
  // A batched weight gradient waiting for this parameter (a second call before the gradients were
  // read): added first, before a side task may write its place again.
  const bool batched = dw_half_ && !p.s2d;  // (bind_params carved dw_half_ where dw_batched applies)
  if (batched && dw_pending_in(grads_ + dw.offset, dw.count * sizeof(float))) join_side_work();
  if (side) ws_.begin_side_task();
}

void GpuOps::conv_wgrad(ConvPlan& p, const ConvDesc& d, const Act& x, const Act& dy, ParamView dw, bool side) {
  auto timed = timer_->scope("conv wgrad", [&] { return conv_label(d) + (p.s2d ? " s2d" : ""); });
  float* g = grads_ + dw.offset;
  const size_t g_bytes = dw.count * sizeof(float);
  if (p.s2d) {
    // The weight gradient of the rearranged filter, folded back into the 7x7 layout.
    writes(g, g_bytes);
    ConvPlan& q = convs_.s2d_prepare(p, x.data, nullptr, false);
    const S2dDesc& s = p.s2d_geom;
    void* tmp = scratch_half(size_t(s.cout) * s.kp * s.kp * s.cs * dtype_size(opt_.precision));
    convs_.wgrad(q, p.s2d_x, dy.data, tmp, false, false);
    s2d_wgrad_fold(opt_.precision, tmp, g, s, dev_.stream);
    return;
  }
  if (dw_half_) {  // (the space-to-depth form, never batched, returned above)
    // dW in the compute dtype (as autocast's weight gradient) at its place in dw_half_, added to the
    // fp32 gradients with the other layers' (add_pending_dw): one pass instead of one per layer.
    const size_t es = dtype_size(opt_.precision);
    void* half = dw_half_ + dw.offset * es;
    if (!side) writes(half, dw.count * es);
    convs_.wgrad(p, x.data, dy.data, half, false, side);
    dw_pending_.push_back(dw);
    if (side) ws_.end_side_task({{x.data, x.bytes()}, {dy.data, dy.bytes()}}, {{half, dw.count * es}});
    return;
  }
  if (!side) writes(g, g_bytes);
  if (opt_.precision == DType::F32) {
    convs_.wgrad(p, x.data, dy.data, g, true, side);
  } else {
    // dW in the compute dtype (as autocast's weight gradient), then added to the fp32 grads.
    const size_t half = dw.count * dtype_size(opt_.precision);
    void* tmp = side ? ws_.side_scratch(half) : scratch_half(half);
    convs_.wgrad(p, x.data, dy.data, tmp, false, side);
    add_to_f32(opt_.precision, tmp, g, dw.count, side ? side_->stream() : dev_.stream);
  }
  if (side) ws_.end_side_task({{x.data, x.bytes()}, {dy.data, dy.bytes()}}, {{g, g_bytes}});
}

// --- Batch norm

void GpuOps::bn_forward_train(const BnDesc& d, const Act& x, ParamView gamma, ParamView beta,
                              float* running_mean, float* running_var, float* save_mean,
                              float* save_invstd, const Act* residual, bool relu, Act& y) {
  check_act(x, "bn_forward_train input");
  materialize(x);
  last_bn_train_ = true;
  // The sums of x when the convolution that wrote x wrote them and nothing wrote over x since;
  // taken before y is written (y may be x's memory).
  float* sums = static_cast<float*>(const_cast<void*>(pairing_.train_reads(x.data, x.bytes())));
  auto timed = timer_->scope("bn fwd", [&] {
    return bn_label(d, residual != nullptr, relu) + (sums ? " from conv stats" : "");
  });
  const int64_t m = int64_t(d.n) * d.h * d.w;
  float* s = scratch_f32(2 * size_t(d.c));
  writes(y);
  BnForward& rec = bn_forwards_[y.data];
  rec = BnForward{x.data, gamma.offset, relu && residual == nullptr};
  // After a residual add the mask cannot be recomputed from x: the forward writes it as bits, which
  // the backward reads instead of y (16x fewer bytes in fp16/bf16, 32x in fp32).
  uint8_t* bits = relu && residual && opt_.relu_bits
                      ? relu_bits_for(y.data, gpu::bn_relu_bits_bytes(opt_.precision, m, d.c))
                      : nullptr;
  bool wrote_bits;
  if (sums) {
    ++fused_bn_forwards_;
    wrote_bits = gpu::bn_forward_train_sums(opt_.precision, sums, x.data, m, d.c, weights_.f32(gamma),
                                            weights_.f32(beta), d.eps, d.momentum, running_mean, running_var,
                                            save_mean, save_invstd, residual ? residual->data : nullptr, relu,
                                            y.data, bn_sync(d.c), dev_.stream, bits);
  } else {
    wrote_bits = gpu::bn_forward_train(opt_.precision, x.data, m, d.c, weights_.f32(gamma), weights_.f32(beta),
                                       d.eps, d.momentum, running_mean, running_var, save_mean, save_invstd,
                                       residual ? residual->data : nullptr, relu, y.data, bn_sync(d.c), s,
                                       dev_.stream, bits);
  }
  if (wrote_bits) rec.relu_bits = bits;
}

const GpuOps::BnForward* GpuOps::forward_of(const Act& y, const Act& x, ParamView gamma) const {
  const auto it = bn_forwards_.find(y.data);
  return it != bn_forwards_.end() && it->second.x == x.data && it->second.gamma == gamma.offset ? &it->second
                                                                                                 : nullptr;
}

uint8_t* GpuOps::relu_bits_for(const void* y, size_t bytes) {
  Bits& b = relu_bits_[y];
  if (bytes > b.bytes) {  // first use, or a larger batch than before (between steps)
    b.p = static_cast<uint8_t*>(pool_.alloc(bytes));
    b.bytes = bytes;
    mem_scratch_ += bytes;
  }
  return b.p;
}

void GpuOps::bn_forward_eval(const BnDesc& d, const Act& x, ParamView gamma, ParamView beta,
                             const float* running_mean, const float* running_var,
                             const Act* residual, bool relu, Act& y) {
  check_act(x, "bn_forward_eval input");
  materialize(x);
  last_bn_train_ = false;
  pairing_.eval_reads(x.data, x.bytes());
  auto timed = timer_->scope("bn fwd", [&] { return bn_label(d, residual != nullptr, relu) + " eval"; });
  bn_forwards_.erase(y.data);  // y no longer holds a training forward's output
  const int64_t m = int64_t(d.n) * d.h * d.w;
  float* s = scratch_f32(2 * size_t(d.c));
  writes(y);
  gpu::bn_forward_eval(opt_.precision, x.data, m, d.c, weights_.f32(gamma),
                       weights_.f32(beta), d.eps, running_mean, running_var,
                       residual ? residual->data : nullptr, relu, y.data, s, dev_.stream);
}

void GpuOps::bn_backward(const BnDesc& d, const Act& x, const Act& y, const Act& dy,
                         ParamView gamma, const float* save_mean, const float* save_invstd,
                         bool relu, Act& dx, Act* dresidual, ParamView dgamma, ParamView dbeta,
                         const Act* dy2) {
  materialize(y);
  bn_backward_into(d, x, y, dy, gamma, save_mean, save_invstd, relu, dx, dresidual, dgamma, dbeta, dy2, nullptr);
}

void GpuOps::bn_backward_into(const BnDesc& d, const Act& x, const Act& y, const Act& dy, ParamView gamma,
                              const float* save_mean, const float* save_invstd, bool relu, Act& dx,
                              Act* dresidual, ParamView dgamma, ParamView dbeta, const Act* dy2, void* y_out) {
  check_act(dy, "bn_backward output gradient");
  if (dy2) {
    check_act(*dy2, "bn_backward second output gradient");
    if (!dresidual)
      throw GpuError(GpuError::Kind::Invalid,
                     "bn_backward: a second output gradient needs dresidual (" + where() + ")");
  }
  in_backward_ = true;
  auto timed = timer_->scope("bn bwd", [&] { return bn_label(d, dresidual != nullptr, relu); });
  const int64_t m = int64_t(d.n) * d.h * d.w;
  float* s = scratch_f32(3 * size_t(d.c));
  // The ReLU mask from x (one tensor less to read) only where this backend's own training
  // forward wrote y = relu(bn(x)) from this very x and gamma.
  // Else the bits that forward wrote, where it wrote them (after a residual add).
  BnMask mask = relu ? BnMask::FromOutput : BnMask::None;
  const uint8_t* bits = nullptr;
  if (const BnForward* f = relu ? forward_of(y, x, gamma) : nullptr) {
    if (f->plain_relu) {
      mask = BnMask::FromInput;
    } else if (f->relu_bits) {
      mask = BnMask::FromBits;
      bits = f->relu_bits;
    }
  }
  writes(dx);
  if (dresidual) writes(*dresidual);
  if (y_out) writes(y_out, y.bytes());
  writes(grads_ + dgamma.offset, size_t(d.c) * sizeof(float));
  writes(grads_ + dbeta.offset, size_t(d.c) * sizeof(float));
  // dbeta views beta's gradient: the same offset in the parameter buffer is beta.
  gpu::bn_backward(opt_.precision, x.data, y.data, dy.data, dy2 ? dy2->data : nullptr, m, d.c, weights_.f32(gamma),
                   weights_.f32(dbeta), save_mean, save_invstd, mask, dx.data,
                   dresidual ? dresidual->data : nullptr, grads_ + dgamma.offset,
                   grads_ + dbeta.offset, bn_sync(d.c), s, dev_.stream, bits, y_out);
}

// --- A block's batch norm + ReLU in the next convolution's prologue

void GpuOps::bn_relu_conv_forward_train(const BnSide& s, Act& bn_y, const ConvDesc& cd, ParamView w, Act& y) {
  check_act(s.x, "bn_relu_conv_forward_train input");
  check_act(bn_y, "bn_relu_conv_forward_train batch-norm output");
  check_act(y, "bn_relu_conv_forward_train output");
  if (!opt_.conv_prologue) return Ops::bn_relu_conv_forward_train(s, bn_y, cd, w, y);
  ConvPlan& p = convs_.plan(cd);
  // (Before the prediction below, as conv_forward: writing y settles what followed the last call's output.)
  writes(y);
  // The same call (slot, input, output) as the unfused path's conv_forward, so that both share a prediction.
  float* slot = convs_.stats_slot(p, y.data);
  const StatsPairing::Conv call{{slot, 2 * size_t(cd.cout) * sizeof(float)}, bn_y.data, {y.data, y.bytes()},
                                in_backward_};
  const int c = s.d.c;
  const bool shapes = s.x.c == c && bn_y.c == c && cd.cin == c && bn_y.numel() == s.x.numel();
  if (!slot || p.s2d || !shapes || !pairing_.predicted(call) ||
      !gpu::bn_vectorized(opt_.precision, c, {s.x.data, bn_y.data}))
    return Ops::bn_relu_conv_forward_train(s, bn_y, cd, w, y);
  last_bn_train_ = true;
  const int64_t m = int64_t(s.d.n) * s.d.h * s.d.w;
  PrologueBuf& pb = prologue_buf(s.gamma.offset, c);
  float* sums = static_cast<float*>(const_cast<void*>(pairing_.train_reads(s.x.data, s.x.bytes())));
  {
    auto timed = timer_->scope("bn fwd", [&] {
      return bn_label(s.d, false, true) + (sums ? " finalize from conv stats" : " statistics") + ", for the prologue";
    });
    if (sums) {
      ++fused_bn_forwards_;
      gpu::bn_finalize_sums(opt_.precision, sums, m, c, weights_.f32(s.gamma), weights_.f32(s.beta), s.d.eps,
                            s.d.momentum, s.running_mean, s.running_var, s.save_mean, s.save_invstd, pb.scale_shift,
                            pb.half, dev_.stream);
    } else {
      gpu::bn_train_scale_shift(opt_.precision, s.x.data, m, c, weights_.f32(s.gamma), weights_.f32(s.beta),
                                s.d.eps, s.d.momentum, s.running_mean, s.running_var, s.save_mean, s.save_invstd,
                                bn_sync(c), pb.scale_shift, dev_.stream);
      gpu::cast_from_f32(opt_.precision, pb.scale_shift, pb.half, 2 * size_t(c), dev_.stream);
    }
  }
  writes(bn_y);
  // What bn_forward_train would record of bn_y (its backward's mask comes from x).
  bn_forwards_[bn_y.data] = BnForward{s.x.data, s.gamma.offset, true};
  if (pairing_.needs_zero(slot)) {
    CUDA_CHECK(cudaMemsetAsync(slot, 0, call.slot.bytes, dev_.stream));
    pairing_.zeroed(slot);
  }
  const int64_t m_out = int64_t(cd.n) * cd.ho * cd.wo;
  const void* wt = weights_.weight(w);
  auto stats_pass = [&] {
    gpu::bn_stats_pass(opt_.precision, y.data, m_out, cd.cout, bn_sync(cd.cout), scratch_f32(2 * size_t(cd.cout)),
                       dev_.stream);
  };
  bool stats = false;
  const bool chosen = convs_.prologue_chosen(p);
  auto timed = timer_->scope(chosen ? "conv fwd+stats" : "conv fwd",
                             [&] { return conv_label(cd) + (chosen ? " bn+relu prologue" : ""); });
  const bool fused = convs_.fwd_prologue(
      p, slot, s.x.data, pb.half, wt, y.data,
      [&] {
        gpu::bn_apply(opt_.precision, s.x.data, m, c, pb.scale_shift, nullptr, true, bn_y.data, dev_.stream);
        stats = convs_.fwd_stats(p, slot, bn_y.data, wt, y.data, stats_pass);
        return stats;
      },
      stats_pass,
      // The fused choice's cost in the backward: its dx pass writes bn_y (a write of its bytes; nothing reads
      // bn_y before then, and that pass overwrites it).
      [&] { CUDA_CHECK(cudaMemsetAsync(bn_y.data, 0, bn_y.bytes(), dev_.stream)); });
  if (fused) {
    stats = true;
    ++prologue_forwards_;
    bn_unwritten_.add(bn_y.data, bn_y.bytes(), Unwritten{s.x.data, m, c, pb.scale_shift});
  }
  pairing_.conv_wrote(call, stats);
}

void GpuOps::conv_bn_relu_backward(const ConvDesc& cd, ParamView w, const Act& dy, const BnSide& s, Act& bn_y,
                                   Act& dbn_y, Act& dx) {
  // bn_y as the fused forward left it (unwritten since), of this very x and gamma: the dx pass writes it.
  const BnForward* f = forward_of(bn_y, s.x, s.gamma);
  const Unwritten* u = bn_unwritten_.find(bn_y.data);
  if (!u || u->x != s.x.data || !f || !f->plain_relu ||
      !gpu::bn_vectorized(opt_.precision, s.d.c, {s.x.data, bn_y.data, dbn_y.data, dx.data}))
    return Ops::conv_bn_relu_backward(cd, w, dy, s, bn_y, dbn_y, dx);  // (conv_backward writes bn_y first)
  check_act(dy, "conv_bn_relu_backward output gradient");
  check_act(dbn_y, "conv_bn_relu_backward batch-norm output gradient");
  check_act(dx, "conv_bn_relu_backward input gradient");
  in_backward_ = true;
  ++prologue_backwards_;
  ConvPlan& p = convs_.plan(cd);
  {
    auto timed = timer_->scope("conv dgrad", [&] { return conv_label(cd); });
    writes(dbn_y);
    convs_.dgrad(p, dy.data, weights_.weight(w), dbn_y.data, false);
  }
  bn_backward_into(s.d, s.x, bn_y, dbn_y, s.gamma, s.save_mean, s.save_invstd, true, dx, nullptr, s.gamma, s.beta,
                   nullptr, bn_y.data);
  // The weight gradient after the batch norm's backward, which wrote its input bn_y.
  const bool side = wgrad_side(p, true);
  wgrad_begin(w, side, p);
  conv_wgrad(p, cd, bn_y, dy, w, side);
}

// --- A projection block's join

bool GpuOps::joinable(const BnSide& a, const BnSide& b, std::initializer_list<const void*> ptrs) const {
  return opt_.bn_join && a.d.c == b.d.c && a.x.numel() == b.x.numel() && a.x.c == a.d.c && b.x.c == b.d.c &&
         gpu::bn_vectorized(opt_.precision, a.d.c, ptrs);
}

void GpuOps::bn_forward_train_join(const BnSide& a, const BnSide& b, Act& y) {
  check_act(a.x, "bn_forward_train_join input");
  check_act(b.x, "bn_forward_train_join downsample input");
  check_act(y, "bn_forward_train_join output");
  materialize(a.x);
  materialize(b.x);
  // (Decided before the sums are taken: the two calls of the default take them again.)
  if (!joinable(a, b, {a.x.data, b.x.data, y.data})) return Ops::bn_forward_train_join(a, b, y);
  last_bn_train_ = true;
  float* sa = static_cast<float*>(const_cast<void*>(pairing_.train_reads(a.x.data, a.x.bytes())));
  float* sb = static_cast<float*>(const_cast<void*>(pairing_.train_reads(b.x.data, b.x.bytes())));
  auto timed = timer_->scope("bn fwd", [&] {
    return bn_label(a.d, true, true) + " join" + (sa && sb ? " from conv stats" : sa || sb ? " from one conv's stats" : "");
  });
  const int c = a.d.c;
  const int64_t m = int64_t(a.d.n) * a.d.h * a.d.w;
  float* s = scratch_f32(4 * size_t(c));
  writes(y);
  BnForward& rec = bn_forwards_[y.data];
  rec = BnForward{a.x.data, a.gamma.offset, false};
  uint8_t* bits = opt_.relu_bits ? relu_bits_for(y.data, gpu::bn_relu_bits_bytes(opt_.precision, m, c)) : nullptr;
  auto side = [&](const BnSide& q, float* sums, float* scale_shift) {
    return gpu::BnJoinSide{q.x.data, sums, weights_.f32(q.gamma), weights_.f32(q.beta), q.d.eps, q.d.momentum,
                           q.running_mean, q.running_var, q.save_mean, q.save_invstd, scale_shift};
  };
  fused_bn_forwards_ += int64_t(sa != nullptr) + int64_t(sb != nullptr);
  gpu::bn_forward_train_join(opt_.precision, side(a, sa, s), side(b, sb, s + 2 * size_t(c)), m, c, y.data,
                             bn_sync_zeroed(c), bits, dev_.stream);
  rec.relu_bits = bits;
}

void GpuOps::bn_backward_join(const BnSide& a, const BnSide& b, Act& y, const Act& dy, const Act* dy2, Act& dx,
                              Act& dx_ds) {
  check_act(dy, "bn_backward_join output gradient");
  if (dy2) check_act(*dy2, "bn_backward_join second output gradient");
  materialize(a.x);
  materialize(b.x);
  // From the bits of this backend's own join forward of this very x and gamma.
  const BnForward* f = forward_of(y, a.x, a.gamma);
  if (!f || !f->relu_bits ||
      !joinable(a, b, {a.x.data, b.x.data, dy.data, dy2 ? dy2->data : nullptr, dx.data, dx_ds.data}))
    return Ops::bn_backward_join(a, b, y, dy, dy2, dx, dx_ds);
  in_backward_ = true;
  auto timed = timer_->scope("bn bwd", [&] { return bn_label(a.d, true, true) + " join"; });
  const int c = a.d.c;
  const int64_t m = int64_t(a.d.n) * a.d.h * a.d.w;
  float* s = scratch_f32(6 * size_t(c));
  writes(dx);
  writes(dx_ds);
  for (const BnSide* q : {&a, &b}) {
    writes(grads_ + q->gamma.offset, size_t(c) * sizeof(float));
    writes(grads_ + q->beta.offset, size_t(c) * sizeof(float));
  }
  auto side = [&](const BnSide& q, Act& qdx, float* coef) {
    return gpu::BnJoinGrad{q.x.data, weights_.f32(q.gamma), q.save_mean, q.save_invstd, qdx.data,
                           grads_ + q.gamma.offset, grads_ + q.beta.offset, coef};
  };
  gpu::bn_backward_join(opt_.precision, side(a, dx, s), side(b, dx_ds, s + 3 * size_t(c)), m, c, dy.data,
                        dy2 ? dy2->data : nullptr, f->relu_bits, bn_sync_zeroed(c), dev_.stream);
}

// --- Pooling

void* GpuOps::pool_argmax(const PoolDesc& d) {
  const size_t need = maxpool_argmax_bytes(d);
  if (need > pool_arg_bytes_) {
    pool_arg_ = pool_.alloc(need);
    pool_arg_bytes_ = need;
    mem_scratch_ += need;
  }
  return pool_arg_;
}

void GpuOps::maxpool_forward(const PoolDesc& d, const Act& x, Act& y) {
  check_act(x, "maxpool_forward input");
  materialize(x);
  auto timed = timer_->scope("max-pool fwd", [&] { return act_label(x); });
  // The forward keeps where each window's maximum was, so that the backward only gathers.
  void* arg = pool_argmax(d);
  writes(y);
  gpu::maxpool_forward(opt_.precision, x.data, y.data, arg, d, dev_.stream);
  pool_arg_x_ = x.data;
  pool_arg_y_ = y.data;
  pool_arg_d_ = d;
}

void GpuOps::bn_relu_maxpool_forward_train(const BnSide& s, const PoolDesc& pool, Act& bn_y, Act& y) {
  check_act(s.x, "bn_relu_maxpool_forward_train input");
  check_act(y, "bn_relu_maxpool_forward_train output");
  materialize(s.x);
  const bool shapes = pool.n == s.d.n && pool.h == s.d.h && pool.w == s.d.w && pool.c == s.d.c && s.x.c == s.d.c;
  // (A convolution's sums of x, which a stem in space-to-depth form never writes: the batch norm's
  // apply from them, then the pool.)
  if (!opt_.stem_pool || !shapes || pairing_.holds_sums(s.x.data, s.x.bytes()) ||
      !gpu::maxpool_bn_applies(opt_.precision, pool, s.x.data, y.data, pool_argmax(pool)))
    return Ops::bn_relu_maxpool_forward_train(s, pool, bn_y, y);
  last_bn_train_ = true;
  pairing_.train_reads(s.x.data, s.x.bytes());  // (none to take: for the prediction)
  const int c = s.d.c;
  const int64_t m = int64_t(s.d.n) * s.d.h * s.d.w;
  float* ss = scratch_f32(2 * size_t(c));
  {
    auto timed = timer_->scope("bn fwd", [&] { return bn_label(s.d, false, true) + " statistics, pooled"; });
    gpu::bn_train_scale_shift(opt_.precision, s.x.data, m, c, weights_.f32(s.gamma), weights_.f32(s.beta), s.d.eps,
                              s.d.momentum, s.running_mean, s.running_var, s.save_mean, s.save_invstd, bn_sync(c), ss,
                              dev_.stream);
  }
  auto timed = timer_->scope("max-pool fwd", [&] { return act_label(s.x) + " of the batch norm"; });
  // What bn_forward_train would record of bn_y (its backward's mask comes from x), and what
  // maxpool_forward would of the pool; bn_y holds nothing meanwhile.
  bn_forwards_[bn_y.data] = BnForward{s.x.data, s.gamma.offset, true};
  writes(y);
  gpu::maxpool_forward_bn(opt_.precision, s.x.data, ss, y.data, pool_arg_, pool, dev_.stream);
  pool_arg_x_ = bn_y.data;
  pool_arg_y_ = y.data;
  pool_arg_d_ = pool;
  pool_unwritten_x_ = bn_y.data;
}

void GpuOps::maxpool_backward(const PoolDesc& d, const Act& x, const Act& y, const Act& dy,
                              Act& dx) {
  check_act(dy, "maxpool_backward output gradient");
  materialize(x);
  auto timed = timer_->scope("max-pool bwd", [&] { return act_label(x); });
  const PoolDesc& s = pool_arg_d_;
  const bool saved = pool_arg_ && pool_arg_x_ == x.data && pool_arg_y_ == y.data && s.n == d.n &&
                     s.h == d.h && s.w == d.w && s.c == d.c && s.k == d.k &&
                     s.stride == d.stride && s.pad == d.pad && s.ho == d.ho && s.wo == d.wo;
  // Otherwise the argmax is found again, into the byte scratch (stream-ordered, like the
  // half-precision dW).
  if (!saved && x.data == pool_unwritten_x_)
    throw GpuError(GpuError::Kind::Invalid,
                   "maxpool_backward: its input is the stem's batch-norm output that the fused forward did not store, "
                   "and the forward's argmax is gone (another max-pool forward since; " + where() + ")");
  void* arg = saved ? pool_arg_ : scratch_half(maxpool_argmax_bytes(d));
  writes(dx);
  gpu::maxpool_backward(opt_.precision, x.data, dy.data, dx.data, d, arg, saved, dev_.stream, opt_.pool_tiled);
}

void GpuOps::avgpool_forward(const Act& x, Act& y) {
  check_act(x, "avgpool_forward input");
  materialize(x);
  auto timed = timer_->scope("avg-pool", [&] { return act_label(x) + " fwd"; });
  writes(y);
  gpu::avgpool_forward(opt_.precision, x.data, y.data, x.n, x.h * x.w, x.c, dev_.stream);
}

void GpuOps::avgpool_backward(const Act& dy, Act& dx) {
  check_act(dy, "avgpool_backward output gradient");
  auto timed = timer_->scope("avg-pool", [&] { return act_label(dx) + " bwd"; });
  writes(dx);
  gpu::avgpool_backward(opt_.precision, dy.data, dx.data, dx.n, dx.h * dx.w, dx.c, dev_.stream);
}

// --- Fully connected (cuBLAS, column-major view of our row-major matrices)

void GpuOps::fc_forward(const Act& x, ParamView w, ParamView b, int out, float* logits) {
  check_act(x, "fc_forward input");
  materialize(x);
  auto timed = timer_->scope("fc", [&] { return std::to_string(x.c) + "->" + std::to_string(out) + " fwd"; });
  const int n = x.n, in = x.h * x.w * x.c;
  writes(logits, size_t(n) * out * sizeof(float));
  gpu::fill_rows(logits, weights_.f32(b), n, out, dev_.stream);
  const cudaDataType_t t = cuda_type(opt_.precision);
  const cublasComputeType_t ct = (opt_.precision == DType::F32 && opt_.allow_tf32)
                                     ? CUBLAS_COMPUTE_32F_FAST_TF32
                                     : CUBLAS_COMPUTE_32F;
  // logits^T (out x n) = W (out x in) * x^T (in x n)
  CUBLAS_CHECK(cublasGemmEx(dev_.cublas, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, &kOne, weights_.weight(w),
                            t, in, x.data, t, in, &kOne, logits, CUDA_R_32F, out, ct,
                            CUBLAS_GEMM_DEFAULT));
}

void GpuOps::fc_backward(const Act& x, ParamView w, const float* dlogits, int out, Act& dx,
                         ParamView dw, ParamView db) {
  check_act(x, "fc_backward input");
  materialize(x);
  in_backward_ = true;
  auto timed = timer_->scope("fc", [&] { return std::to_string(x.c) + "->" + std::to_string(out) + " bwd"; });
  const int n = x.n, in = x.h * x.w * x.c;
  const cudaDataType_t t = cuda_type(opt_.precision);
  const cublasComputeType_t ct = (opt_.precision == DType::F32 && opt_.allow_tf32)
                                     ? CUBLAS_COMPUTE_32F_FAST_TF32
                                     : CUBLAS_COMPUTE_32F;
  writes(dx);
  writes(grads_ + dw.offset, dw.count * sizeof(float));
  writes(grads_ + db.offset, db.count * sizeof(float));
  // The logits' gradient in the compute dtype, as autocast's linear sees it.
  const void* dl = dlogits;
  if (opt_.precision != DType::F32) {
    void* h = scratch_half(size_t(n) * out * dtype_size(opt_.precision));
    cast_from_f32(opt_.precision, dlogits, h, size_t(n) * out, dev_.stream);
    dl = h;
  }
  column_sums_add(dlogits, n, out, grads_ + db.offset, dev_.stream);
  // dW^T (in x out) += x^T (in x n) * dlogits (n x out), accumulated in fp32.
  CUBLAS_CHECK(cublasGemmEx(dev_.cublas, CUBLAS_OP_N, CUBLAS_OP_T, in, out, n, &kOne, x.data, t, in,
                            dl, t, out, &kOne, grads_ + dw.offset, CUDA_R_32F, in, ct,
                            CUBLAS_GEMM_DEFAULT));
  // dx^T (in x n) = W^T (in x out) * dlogits^T (out x n)
  CUBLAS_CHECK(cublasGemmEx(dev_.cublas, CUBLAS_OP_N, CUBLAS_OP_N, in, n, out, &kOne, weights_.weight(w), t,
                            in, dl, t, out, &kZero, dx.data, t, in, ct, CUBLAS_GEMM_DEFAULT));
}

void GpuOps::softmax_xent(int n, int classes, const float* logits, const int32_t* labels,
                          float grad_scale, float label_smoothing, float* loss, float* dlogits) {
  float* rows = scratch_f32(size_t(n));
  writes(loss, sizeof(float));
  writes(dlogits, size_t(n) * classes * sizeof(float));
  const DeviceLossScale* ls = scaling();
  gpu::softmax_xent(n, classes, logits, labels, grad_scale, ls ? &ls->s.scale : nullptr, label_smoothing, loss,
                    dlogits, rows, dev_.stream);
}

// --- Data

void GpuOps::make_batch(DataKind kind, uint64_t seed, const int64_t* host_indices, int n,
                        int image_size, int classes, Act& images, int32_t* labels) {
  check_act(images, "make_batch images");
  auto timed = timer_->scope("data", [&] { return act_label(images); });
  writes(images);
  writes(labels, size_t(n) * sizeof(int32_t));
  gpu::make_batch(opt_.precision, kind, seed, host_indices, n, image_size, classes, images.data,
                  labels, dev_.stream);
}

// --- Optimizers

void GpuOps::scale_grads(float s) {
  join_side_work();
  scale_f32(grads_, s, weights_.count(), dev_.stream);
}

bool GpuOps::grads_finite() {
  join_side_work();
  CUDA_CHECK(cudaMemsetAsync(flag_, 0, sizeof(int), dev_.stream));
  find_nonfinite(grads_, weights_.count(), flag_, dev_.stream);
  int bad = 0;
  CUDA_CHECK(cudaMemcpyAsync(&bad, flag_, sizeof(int), cudaMemcpyDeviceToHost, dev_.stream));
  CUDA_CHECK(cudaStreamSynchronize(dev_.stream));
  return bad == 0;
}

void GpuOps::sgd_step(float lr, float momentum, float weight_decay, float* momentum_buf,
                      bool first_step, bool nesterov, const uint8_t* decay_mask, ParamView range) {
  const ParamView r = worker::optimizer_range(range, weights_.count());
  if (scaling()) first_step = false;  // loss scaling's count decides it on the device (OptScalars::first)
  if (capture_.capturing() && first_step)
    throw GpuError(GpuError::Kind::Invalid,
                   "SGD's first step (the momentum buffer starts from the gradient) cannot be captured for "
                   "replay: capture after an uncaptured step (" + where() + ")");
  const OptScalars* sc = capture_.scalars({lr, 0}, false, 0.f, 0.f, scaling());
  join_side_work();
  gpu::sgd_step(weights_.master_of(r), grads_ + r.offset, momentum_buf, decay_mask, r.count, sc, momentum,
                weight_decay, first_step, nesterov, dev_.stream);
}

void GpuOps::adam_step(float lr, float beta1, float beta2, float eps, float weight_decay,
                       int64_t step, float* m, float* v, const uint8_t* decay_mask, ParamView range) {
  const ParamView r = worker::optimizer_range(range, weights_.count());
  const OptScalars* sc = capture_.scalars({lr, step}, true, beta1, beta2, scaling());
  join_side_work();
  gpu::adam_step(weights_.master_of(r), grads_ + r.offset, m, v, decay_mask, r.count, sc, beta1, beta2, eps,
                 weight_decay, dev_.stream);
}

// --- fp16 loss scaling (Ops: the state in device memory; only loss_scale() and grads_verdict() read it back)

void GpuOps::set_loss_scale(const LossScaleRules& rules, const LossScaleState& s, int64_t optimizer_steps) {
  if (capture_.capturing()) throw GpuError(GpuError::Kind::Invalid, "set_loss_scale while capturing (" + where() + ")");
  loss_rules_ = rules;
  loss_scaling_ = true;
  gpu::set_loss_scale(loss_scale_, s, optimizer_steps, dev_.stream);
}

LossScaleState GpuOps::loss_scale() {
  if (!loss_scaling_) return Ops::loss_scale();  // never set: the default state, as the host's
  DeviceLossScale d;
  CUDA_CHECK(cudaMemcpyAsync(&d, loss_scale_, sizeof d, cudaMemcpyDeviceToHost, dev_.stream));
  CUDA_CHECK(cudaStreamSynchronize(dev_.stream));
  return d.s;
}

void GpuOps::unscale_grads(float divisor) {
  if (!loss_scaling_) throw GpuError(GpuError::Kind::Invalid, "unscale_grads before set_loss_scale (" + where() + ")");
  // The weight gradients still waiting (dw_batched) are added in the unscale's own pass (unscale_adds_dw):
  // one read and write of the fp32 gradients fewer, the same bits as adding them first.
  if (side_) side_->join();
  if (!opt_.unscale_adds_dw) add_pending_dw();
  const auto [lo, hi] = take_pending_dw();
  auto timed = timer_->scope("optimizer", [] { return std::string("loss scaling's unscale (and the weight gradients' add)"); });
  gpu::unscale_grads(grads_, weights_.count(), divisor, loss_scale_, dev_.stream, opt_.precision,
                     hi > lo ? dw_half_ + lo * dtype_size(opt_.precision) : nullptr, lo, hi);
}

bool GpuOps::grads_verdict() {
  int bad = 0;
  CUDA_CHECK(cudaMemcpyAsync(&bad, &loss_scale_->bad, sizeof bad, cudaMemcpyDeviceToHost, dev_.stream));
  CUDA_CHECK(cudaStreamSynchronize(dev_.stream));
  return bad == 0;
}

void GpuOps::set_grads_verdict(bool grads_finite) { gpu::set_grads_verdict(loss_scale_, grads_finite, dev_.stream); }

void GpuOps::update_loss_scale() {
  if (!loss_scaling_) throw GpuError(GpuError::Kind::Invalid, "update_loss_scale before set_loss_scale (" + where() + ")");
  gpu::update_loss_scale(loss_scale_, loss_rules_, dev_.stream);
}

// --- Step capture (one CUDA graph per training step; the trainer decides when)

bool GpuOps::still_tuning() const { return convs_.still_tuning(); }

bool GpuOps::fused_half_faster() const {
  return opt_.precision == DType::F16 && convs_.fused_shapes() > 0;
}

void GpuOps::capture_step(const std::function<void()>& body) {
  if (timer_->on())
    throw GpuError(GpuError::Kind::Invalid, "capture_step while the per-operation profile runs (" + where() + ")");
  // Replays must not explore: the engine each convolution runs is fixed from here on.
  convs_.settle();
  // Side-stream work from before the capture must not become part of it.
  join_side_work();
  // Every replay starts with the fp16 statistics slots zero, as the capture does (stats_pairing.h).
  zero_untaken_stats();
  // cuDNN's conv+genstats zeroes its two statistics outputs (two memsets per call) although the
  // slots are zero before every such call (stats_pairing.h): the graph goes without them. Ours,
  // which zero a dirty slot whole, stay.
  StepGraph::ZeroAlready zero_already;
  if (opt_.graph_drop_zeroing)
    zero_already = [this](const void* p, size_t bytes) { return convs_.within_stats_output(p, bytes); };
  capture_.capture(
      [&] {
        body();  // (on one stream: conv_backward keeps off the side stream meanwhile)
        add_pending_dw();  // every replay adds its own weight gradients
        zero_untaken_stats();
      },
      zero_already);
  replay_step(capture_.captured_values());  // the capturing step itself
}

void GpuOps::replay_step(const StepValues& v) {
  join_side_work();
  capture_.replay(v);
}

CaptureInfo GpuOps::captured() const { return capture_.info(); }

}  // namespace gpu

// --- Factory (worker/core/backend.h)

namespace {

// Before the first CUDA call creates the context, which reads it: 32 hardware work queues instead
// of CUDA's 8. nvJPEG's batched decoder runs each image's copies on 16 streams of its own; sharing
// 8 queues with the training stream, they waited behind its queued kernels, and ResNet-50 from
// JPEGs ran at 0.84 of its random-data speed on an H200 (0.95 with 32). A value the user set is kept.
void before_first_cuda_call() { setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", 0); }

}  // namespace

std::unique_ptr<Ops> make_gpu_ops(int device, DType precision) {
  before_first_cuda_call();
  return std::make_unique<gpu::GpuOps>(gpu::gpu_options(process_knobs(), device, precision));
}

std::future<void> start_gpu_context(int device) {
  before_first_cuda_call();
  return std::async(std::launch::async, [device] {
    if (cudaSetDevice(device) != cudaSuccess || cudaFree(nullptr) != cudaSuccess) cudaGetLastError();
  });
}

// fp16 runs faster than bf16 where its own path, the convolution with the batch norm's statistics
// in one cuDNN graph (WORKER_FP16_FUSED), can run: cuDNN has those engines for sm_90 in fp16 only,
// and there, on an H200 (2026-12-02, ResNet-50 b256, gpu_model_driver bench), fp16 ran 9,007
// images/s against bf16's 8,475 (docs/gpu.md). Elsewhere (other GPUs, a build without
// cudnn-frontend, WORKER_CONV_ENGINES=legacy or WORKER_FP16_FUSED=0) fp16 runs bf16's kernels and
// only adds loss scaling.
BackendFacts gpu_backend_facts(int device) {
  BackendFacts f;
  const Knobs& k = process_knobs();
  f.stem_space_to_depth = k.conv_s2d;
#ifdef WORKER_HAVE_CUDNN_FRONTEND
  if (!k.conv_graph_engines || k.fp16_fused == FusedStats::Off) return f;
  before_first_cuda_call();
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device) != cudaSuccess) {
    cudaGetLastError();  // the backend reports an unusable device itself, in its own words
    return f;
  }
  f.fp16_faster_than_bf16 = major == 9 && minor == 0;
#else
  (void)device;
#endif
  return f;
}

}  // namespace worker
