// The GPU implementation of worker::Ops: one CUDA stream, cuDNN (convolutions) and cuBLAS (the
// fully connected layer) bound to it, the backend's own kernels for everything else, and all
// memory from one DevicePool. make_gpu_ops() (worker/core/backend.h) returns one of these; the
// NCCL communicator and the GPU JPEG loader reach its stream through this class.
//
// GpuOps dispatches layers; its parts own the rest:
//   - Device (device.h): the GPU, its stream, the cuDNN and cuBLAS handles;
//   - SideStream (side_stream.h): backward's weight gradients on a second stream, ordered by the
//     memory ranges each task reads and writes;
//   - Workspace (workspace.h): the cuDNN workspace both streams share, every piece of it;
//   - ConvPlanner (conv_planner.h): a convolution plan per shape, its engines and their tuning;
//   - MasterWeights (master_weights.h): the compute-dtype shadow, ZeRO-1's sharded fp32 masters;
//   - CapturedStep (captured_step.h): the step as a CUDA graph, the optimizer's per-step values;
//   - fp16 loss scaling's state in device memory (loss_scale.cu), read by the step's kernels;
//   - StatsPairing (stats_pairing.h): in fp16, which convolution's sums a batch norm may use.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <cuda_runtime.h>

#include "worker/core/ops.h"
#include "worker/gpu/captured_step.h"
#include "worker/gpu/conv_planner.h"
#include "worker/gpu/device.h"
#include "worker/gpu/gpu_options.h"
#include "worker/gpu/kernels.h"
#include "worker/gpu/master_weights.h"
#include "worker/gpu/op_timer.h"
#include "worker/gpu/pool.h"
#include "worker/gpu/ranges.h"
#include "worker/gpu/side_stream.h"
#include "worker/gpu/stats_pairing.h"
#include "worker/gpu/workspace.h"

namespace worker {
namespace gpu {

class GpuOps final : public Ops {
 public:
  explicit GpuOps(const GpuOptions& opt);
  ~GpuOps() override;

  DeviceKind device() const override { return DeviceKind::Gpu; }
  DType compute_dtype() const override { return opt_.precision; }
  std::string describe() const override;

  void* alloc(size_t bytes) override;
  void upload(void* dst, const void* host_src, size_t bytes) override;
  void download(void* host_dst, const void* src, size_t bytes) override;
  void zero(void* dst, size_t bytes) override;
  size_t peak_bytes() const override { return pool_.used(); }
  std::vector<std::pair<std::string, size_t>> memory_breakdown() const override;
  int64_t max_tensor_elements() const override { return INT32_MAX; }  // cuDNN's int sizes

  void bind_params(float* params, float* grads, size_t count) override;
  void register_conv(const ConvDesc& d, ParamView w) override;
  void plan_convs(const std::vector<ConvDesc>& shapes) override { convs_.plan_ahead(shapes); }
  void params_updated() override;
  bool keeps_working_copy() const override { return opt_.precision != DType::F32; }
  void shard_master_weights(const std::vector<ParamView>& owned, const std::vector<ParamView>& fp32_views) override;
  void export_master(float* whole, ParamView range = {}) override;
  void import_master(const float* whole) override;

  void conv_forward(const ConvDesc& d, const Act& x, ParamView w, Act& y) override;
  void conv_backward(const ConvDesc& d, const Act& x, ParamView w, const Act& dy, Act* dx,
                     bool accumulate_dx, ParamView dw) override;
  void bn_forward_train(const BnDesc& d, const Act& x, ParamView gamma, ParamView beta,
                        float* running_mean, float* running_var, float* save_mean,
                        float* save_invstd, const Act* residual, bool relu, Act& y) override;
  void bn_forward_eval(const BnDesc& d, const Act& x, ParamView gamma, ParamView beta,
                       const float* running_mean, const float* running_var, const Act* residual,
                       bool relu, Act& y) override;
  void bn_backward(const BnDesc& d, const Act& x, const Act& y, const Act& dy, ParamView gamma,
                   const float* save_mean, const float* save_invstd, bool relu, Act& dx,
                   Act* dresidual, ParamView dgamma, ParamView dbeta, const Act* dy2 = nullptr) override;
  // Both batch norms and the add + ReLU in one pass, and the backward in two, where GpuOptions::bn_join
  // and the tensors allow (the default's two calls elsewhere).
  void bn_forward_train_join(const BnSide& main, const BnSide& ds, Act& y) override;
  void bn_backward_join(const BnSide& main, const BnSide& ds, Act& y, const Act& dy, const Act* dy2, Act& dx,
                        Act& dx_ds) override;
  // Pools relu(bn(x)) as it computes it, bn_y left unwritten, where GpuOptions::stem_pool and the tensors
  // allow (the stem's window, 16-byte accesses); the default's two calls elsewhere.
  void bn_relu_maxpool_forward_train(const BnSide& bn, const PoolDesc& pool, Act& bn_y, Act& y) override;
  // fp16 (GpuOptions::conv_prologue): the batch norm finalized into its scale and shift, then one cuDNN graph
  // of relu(scale * x + shift) -> convolution -> y's sums, bn_y left unwritten, where the convolution's timed
  // choice is that graph; the backward's dx pass of the batch norm then writes bn_y, before the weight
  // gradient reads it. The default's calls elsewhere.
  void bn_relu_conv_forward_train(const BnSide& bn, Act& bn_y, const ConvDesc& conv, ParamView w, Act& y) override;
  void conv_bn_relu_backward(const ConvDesc& conv, ParamView w, const Act& dy, const BnSide& bn, Act& bn_y,
                             Act& dbn_y, Act& dx) override;
  void maxpool_forward(const PoolDesc& d, const Act& x, Act& y) override;
  void maxpool_backward(const PoolDesc& d, const Act& x, const Act& y, const Act& dy,
                        Act& dx) override;
  void avgpool_forward(const Act& x, Act& y) override;
  void avgpool_backward(const Act& dy, Act& dx) override;
  void fc_forward(const Act& x, ParamView w, ParamView b, int out, float* logits) override;
  void fc_backward(const Act& x, ParamView w, const float* dlogits, int out, Act& dx,
                   ParamView dw, ParamView db) override;
  void softmax_xent(int n, int classes, const float* logits, const int32_t* labels,
                    float grad_scale, float label_smoothing, float* loss, float* dlogits) override;
  void make_batch(DataKind kind, uint64_t seed, const int64_t* host_indices, int n,
                  int image_size, int classes, Act& images, int32_t* labels) override;
  void scale_grads(float s) override;
  bool grads_finite() override;
  void sgd_step(float lr, float momentum, float weight_decay, float* momentum_buf,
                bool first_step, bool nesterov, const uint8_t* decay_mask,
                ParamView range = {}) override;
  void adam_step(float lr, float beta1, float beta2, float eps, float weight_decay, int64_t step,
                 float* m, float* v, const uint8_t* decay_mask,
                 ParamView range = {}) override;
  void synchronize() override;

  // fp16 loss scaling in device memory (loss_scale.cu): no host read within a step.
  void set_loss_scale(const LossScaleRules& rules, const LossScaleState& s, int64_t optimizer_steps) override;
  LossScaleState loss_scale() override;
  void unscale_grads(float divisor) override;
  bool grads_verdict() override;
  void set_grads_verdict(bool grads_finite) override;
  void update_loss_scale() override;

  std::string step_capture_unsupported() const override { return ""; }
  bool still_tuning() const override;  // a convolution engine still being timed
  void capture_step(const std::function<void()>& body) override;
  void replay_step(const StepValues& v) override;
  CaptureInfo captured() const override;
  // fp16: at least one convolution settled on the fused conv+genstats forward (its batch norm skips
  // the statistics pass); false before the engines' tuning ends, and in bf16/fp32.
  bool fused_half_faster() const override;

  // For the NCCL communicator.
  cudaStream_t stream() const { return dev_.stream; }
  // Makes the stream wait for the work on the side stream (the weight gradients), and adds the
  // weight gradients that wait in the compute dtype (GpuOptions::dw_batched) to the fp32 gradients,
  // before something reads what the stream has computed (a collective, the optimizer, the host).
  void join_side_work();
  int device_ordinal() const { return opt_.device; }
  // Seconds spent choosing convolution algorithms so far (start-up cost).
  double algo_search_seconds() const { return convs_.search_seconds(); }
  int convs_planned_ahead() const { return convs_.planned_ahead(); }  // GpuOptions::plan_threads' work
  // The device's phases (Device::startup), then cudaMalloc and choosing the convolution
  // algorithms, both summed over the calls so far.
  std::vector<std::pair<const char*, double>> startup_seconds() const override {
    auto v = dev_.startup;
    v.emplace_back("cudaMalloc", pool_.malloc_seconds());
    v.emplace_back("algorithms", convs_.search_seconds());
    return v;
  }
  size_t workspace_bytes() const { return ws_.bytes(); }
  size_t reserved_bytes() const { return pool_.reserved(); }
  // Per-operation device time between the two calls (the benchmark's breakdown); not while a
  // CUDA graph is being captured.
  void profile_start() { timer_->start(); }
  std::vector<OpTimer::Row> profile_stop() { return timer_->stop(); }
  // The kernels and memsets each operation adds to the next captured step (capture_step between
  // the two calls).
  void census_start() { timer_->start_census(); }
  std::vector<OpTimer::Row> census_stop() { return timer_->stop_census(); }
  // Ends the convolution engines' exploration (waits for its timings): due before capturing a
  // CUDA graph, whose replays must not explore.
  void settle_conv_engines() { convs_.settle(); }
  // One line per convolution shape and direction: which plan runs it and its measured time.
  std::vector<std::string> conv_engine_report() const { return convs_.report(); }
  // Training batch-norm forwards so far that took a convolution's sums instead of their own pass.
  int64_t fused_bn_forwards() const { return fused_bn_forwards_; }
  // Training batch norms so far applied in the next convolution's prologue (their output left unwritten).
  int64_t prologue_forwards() const { return prologue_forwards_; }
  // Of those outputs: written by their backward's dx pass, and written early by the apply because something
  // read them before (GpuOps::materialize; a ResNet step should need none).
  int64_t prologue_backwards() const { return prologue_backwards_; }
  int64_t prologue_materialized() const { return prologue_materialized_; }

 private:
  // What bn_backward needs to know about the forward that wrote y (keyed by y's address).
  struct BnForward {
    const void* x = nullptr;
    size_t gamma = 0;
    bool plain_relu = false;  // y = relu(bn(x)), no residual: the mask can be recomputed from x
    const uint8_t* relu_bits = nullptr;  // the mask as bits (bn_relu_bits_bytes), when written
  };
  // The record of this backend's training forward that wrote y from this very x and gamma; null when
  // y holds something else.
  const BnForward* forward_of(const Act& y, const Act& x, ParamView gamma) const;
  // The buffer for the ReLU bits of the training forward that writes y (relu after a residual
  // add), carved on first use and kept for that y (the model's activations stay where they are).
  uint8_t* relu_bits_for(const void* y, size_t bytes);
  // A batch norm's output that bn_relu_conv_forward_train left unwritten: what writes it, relu(scale * x +
  // shift) over m rows of c channels.
  struct Unwritten {
    const void* x = nullptr;
    int64_t m = 0;
    int c = 0;
    const float* scale_shift = nullptr;
  };
  // Something is about to read [p, p + bytes): the unwritten batch-norm outputs it touches are written now.
  void materialize(const void* p, size_t bytes);
  void materialize(const Act& a) { materialize(a.data, a.bytes()); }
  // A batch norm's scale and shift for the fused prologue: fp32 (2c), then in the compute dtype (2c), carved
  // once per batch norm (by its gamma's offset) and kept.
  struct PrologueBuf {
    float* scale_shift = nullptr;
    void* half = nullptr;
    int c = 0;
  };
  PrologueBuf& prologue_buf(size_t gamma_offset, int c);
  // Backward's weight gradient of a convolution: whether it goes to the side stream (more_after: backward
  // has more to do after this layer); before it, wgrad_begin (a batched gradient of this parameter still
  // waiting is added first; the side task begins); then conv_wgrad.
  bool wgrad_side(const ConvPlan& p, bool more_after) const;
  void wgrad_begin(ParamView dw, bool side, const ConvPlan& p);
  void conv_wgrad(ConvPlan& p, const ConvDesc& d, const Act& x, const Act& dy, ParamView dw, bool side);
  // bn_backward, with y_out: the forward's output written by the dx pass (see bn_backward in kernels.h).
  void bn_backward_into(const BnDesc& d, const Act& x, const Act& y, const Act& dy, ParamView gamma,
                        const float* save_mean, const float* save_invstd, bool relu, Act& dx, Act* dresidual,
                        ParamView dgamma, ParamView dbeta, const Act* dy2, void* y_out);
  // The main stream is about to write [p, p + bytes) (or an activation): it first waits for
  // side-stream work that reads or writes it, and for the weight gradients waiting to be added there.
  void writes(const void* p, size_t bytes);
  void writes(const Act& a) { writes(a.data, a.bytes()); }
  // GpuOptions::dw_batched: the weight gradients computed and not yet added to the fp32 gradients
  // (dw_half_ holds them at their parameters' offsets; zero wherever no convolution's weight is), and
  // their addition, one pass over the span they cover (after the side stream's work is joined).
  bool dw_pending_in(const void* p, size_t bytes) const;
  void add_pending_dw();
  std::pair<size_t, size_t> take_pending_dw();  // the span [lo, hi) to add, forgotten here ({0, 0}: none)
  // Scratch that only grows (between steps, never inside the loop after the first step).
  float* scratch_f32(size_t count);
  void* scratch_half(size_t bytes);
  // The batch norms' zero-kept accumulators, large enough for c channels (kernels.h).
  void* bn_sync_zeroed(int c);
  BnSync bn_sync(int c);
  // The join's kernels apply to these batch norms and tensors.
  bool joinable(const BnSide& a, const BnSide& b, std::initializer_list<const void*> ptrs) const;
  void check_act(const Act& a, const char* what) const;
  // The statistics slots no batch norm took, zeroed now (before and at the end of a captured step).
  void zero_untaken_stats();

  GpuOptions opt_;
  DevicePool pool_;
  Device dev_;  // before every member that makes CUDA calls
  int* flag_;    // grads_finite
  DeviceLossScale* loss_scale_;  // fp16 loss scaling's state (kernels.h)
  LossScaleRules loss_rules_;
  bool loss_scaling_ = false;    // set_loss_scale was called
  // What the optimizer and softmax_xent read of it: null while off.
  const DeviceLossScale* scaling() const { return loss_scaling_ ? loss_scale_ : nullptr; }
  std::unique_ptr<SideStream> side_;  // null when GpuOptions::wgrad_stream is off
  Workspace ws_;
  MasterWeights weights_;
  ConvPlanner convs_;
  CapturedStep capture_;
  float* grads_ = nullptr;  // the model's fp32 gradients (bind_params)
  std::vector<ParamView> dw_pending_;
  char* dw_half_ = nullptr;  // (bind_params; zeroed, null where not dw_batched)
  size_t dw_half_bytes_ = 0;

  float* f32_scratch_ = nullptr;
  size_t f32_scratch_count_ = 0;
  void* half_scratch_ = nullptr;
  size_t half_scratch_bytes_ = 0;
  std::map<const void*, BnForward> bn_forwards_;
  struct Bits {
    uint8_t* p = nullptr;
    size_t bytes = 0;
  };
  std::map<const void*, Bits> relu_bits_;
  // fp16 conv+genstats: which convolution output's sums a training batch norm may take.
  StatsPairing pairing_;
  bool in_backward_ = false;   // a backward call since the last first-layer weight gradient
  bool last_bn_train_ = true;  // the last batch-norm forward was a training one (not a validation's)
  int64_t fused_bn_forwards_ = 0;
  int64_t prologue_forwards_ = 0, prologue_backwards_ = 0, prologue_materialized_ = 0;
  UnwrittenRanges<Unwritten> bn_unwritten_;     // by the output's address
  std::map<size_t, PrologueBuf> prologue_bufs_;  // by gamma's offset
  void* bn_sync_ = nullptr;
  int bn_sync_c_ = 0;
  // The argmax bytes of the last max-pool forward, and which x/y/shape they belong to.
  void* pool_arg_ = nullptr;
  size_t pool_arg_bytes_ = 0;
  const void* pool_arg_x_ = nullptr;
  const void* pool_arg_y_ = nullptr;
  PoolDesc pool_arg_d_{};
  // The argmax buffer, large enough for d (carved on first use, kept).
  void* pool_argmax(const PoolDesc& d);
  // The batch-norm output the fused stem forward left unwritten, until something writes it.
  const void* pool_unwritten_x_ = nullptr;
  std::unique_ptr<OpTimer> timer_;
  // Bytes carved for each purpose, outgrown carvings included (the pool never frees).
  size_t mem_scratch_ = 0;
};

}  // namespace gpu
}  // namespace worker
