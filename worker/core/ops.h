// The layer interface every backend implements (CPU: worker/cpu, GPU: worker/gpu).
//
// The model (worker/model/) is written once against this interface; the backend is
// chosen at start-up. Conventions shared by every backend:
//   - Activations are NHWC tensors in the backend's compute dtype (fp32 on the CPU; fp32, bf16
//     or fp16 on the GPU), living in the backend's memory.
//   - Parameters live in ONE contiguous fp32 buffer (master weights) and gradients in another
//     of the same size, both in the backend's memory; layers refer to them by ParamView
//     (offset + count). A backend may keep working copies (e.g. a bf16 shadow) and refreshes
//     them in params_updated().
//   - Conv weights are stored (C_out, kH, kW, C_in) ("OHWI", which matches NHWC); checkpoint I/O
//     converts to and from PyTorch's (C_out, C_in, kH, kW). FC weights are (out, in) as PyTorch.
//   - Every backward ADDS into the gradient buffer (the trainer zeroes it once per optimizer
//     step), so gradient accumulation over micro-batches is free.
//   - Batch-norm running statistics and saved statistics are fp32 in the backend's memory.
//   - All work is asynchronous on the backend's stream; synchronize() waits for it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "worker/core/loss_scale.h"

namespace worker {

enum class DType : uint8_t { F32, BF16, F16 };
enum class DeviceKind : uint8_t { Cpu, Gpu };

size_t dtype_size(DType t);
const char* dtype_name(DType t);

// An NHWC activation tensor (a view; memory is owned by the backend's pool).
struct Act {
  void* data = nullptr;
  DType dtype = DType::F32;
  int n = 0, h = 0, w = 0, c = 0;
  size_t numel() const { return size_t(n) * h * w * c; }
  size_t bytes() const { return numel() * dtype_size(dtype); }
};

// A slice of the flat parameter (or gradient) buffer.
struct ParamView {
  size_t offset = 0;
  size_t count = 0;
};

// The slice an optimizer step covers (see Ops::sgd_step): `range`, or all `bound` parameters when
// its count is 0. Throws std::out_of_range when it leaves the buffers.
ParamView optimizer_range(const ParamView& range, size_t bound);

struct ConvDesc {
  int n = 0, h = 0, w = 0, cin = 0;  // input
  int cout = 0, kh = 0, kw = 0, stride = 1, pad = 0;
  int ho = 0, wo = 0;                // output
};

struct BnDesc {
  int n = 0, h = 0, w = 0, c = 0;
  float eps = 1e-5f;
  float momentum = 0.1f;  // PyTorch convention: running = (1 - m) * running + m * batch
};

struct PoolDesc {  // max-pool (ResNet stem: 3x3, stride 2, pad 1)
  int n = 0, h = 0, w = 0, c = 0;
  int k = 3, stride = 2, pad = 1;
  int ho = 0, wo = 0;
};

// What an optimizer step takes that changes from one step to the next. A captured step (see
// Ops::capture_step) has its other arguments frozen and reads these from backend memory.
struct StepValues {
  float lr = 0.0f;
  int64_t step = 0;  // Adam: the 1-based step count of the bias corrections (SGD, fp16 loss scaling: unused)
};

// What a captured step holds, for the start-up log and the benchmark.
struct CaptureInfo {
  size_t kernels = 0;  // kernels per replay
  size_t memsets = 0;
  size_t copies = 0;
  size_t nodes = 0;    // kernels, memsets, copies, ...
  size_t memsets_dropped = 0;  // redundant zeroings left out of the graph (not in memsets or nodes)
};

// Synthetic data (worker/core/synthetic.h defines the generator, identical on every backend).
enum class DataKind : uint8_t { Random, Learnable };

class Ops {
 public:
  virtual ~Ops() = default;

  virtual DeviceKind device() const = 0;
  virtual DType compute_dtype() const = 0;
  virtual std::string describe() const = 0;  // e.g. "cpu (fp32, 2 threads)"

  // --- Memory: one pool, carved out during setup; nothing is allocated in the training loop.
  virtual void* alloc(size_t bytes) = 0;  // 256-byte aligned, zero-filled
  virtual void upload(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void download(void* host_dst, const void* src, size_t bytes) = 0;
  virtual void zero(void* dst, size_t bytes) = 0;
  virtual size_t peak_bytes() const = 0;
  // The backend's own device memory by what it holds (e.g. {"cuDNN workspace", bytes}), for
  // the trainer's memory report; empty where the backend has nothing to add.
  virtual std::vector<std::pair<std::string, size_t>> memory_breakdown() const { return {}; }
  // The most elements one activation tensor may have (cuDNN's tensor descriptors take 32-bit
  // sizes); the model refuses a configuration beyond it before allocating anything.
  virtual int64_t max_tensor_elements() const { return INT64_MAX; }

  // --- Parameters. Called once after allocating the flat buffers; params_updated() after
  // anything changed the fp32 master weights (init, load, optimizer step).
  virtual void bind_params(float* params, float* grads, size_t count) = 0;
  virtual void register_conv(const ConvDesc& d, ParamView w) = 0;  // lets a backend plan ahead
  // Every convolution shape of the model, before their register_conv calls: a backend may prepare
  // them together (the GPU asks cuDNN's heuristics for them on several threads, GpuOptions::plan_threads).
  virtual void plan_convs(const std::vector<ConvDesc>& shapes) { (void)shapes; }
  virtual void params_updated() = 0;

  // --- ZeRO-1's sharded master weights (issue 15). Only a backend whose layers read a working
  // copy of the weights (the GPU in bf16/fp16) has master weights apart from what it computes
  // with; elsewhere the fp32 weights are the working weights and stay whole.
  virtual bool keeps_working_copy() const { return false; }
  // After bind_params(nullptr, grads, count): the backend keeps fp32 master weights for the
  // `owned` ranges of the flat buffer only (what this rank's optimizer steps), the working copy
  // whole, and whole fp32 copies of `fp32_views` (the 1-D parameters, which the layers read in
  // fp32). The optimizer's ranges must then be `owned` ranges. Throws where unsupported.
  virtual void shard_master_weights(const std::vector<ParamView>& owned, const std::vector<ParamView>& fp32_views);
  // Writes the master weights of the owned range at range.offset (count 0: of every owned range)
  // into `whole` (count floats, backend memory) at their offsets; the rest of `whole` is untouched.
  virtual void export_master(float* whole, ParamView range = {});
  // Takes every parameter from `whole` (count fp32 values, backend memory): the owned ranges'
  // master weights, the fp32 copies and the working copy. Replaces params_updated().
  virtual void import_master(const float* whole);

  // --- Layers.
  virtual void conv_forward(const ConvDesc& d, const Act& x, ParamView w, Act& y) = 0;
  // dx may be null (first layer). accumulate_dx: dx += result instead of dx = result.
  // dw is always accumulated into the gradient buffer.
  virtual void conv_backward(const ConvDesc& d, const Act& x, ParamView w, const Act& dy, Act* dx,
                             bool accumulate_dx, ParamView dw) = 0;

  // Training-mode batch norm over (N, H, W) per channel, fused with an optional residual add
  // and ReLU:  y = relu?(gamma * (x - mean) * invstd + beta + residual?).
  // y may be the residual's memory (element i of the residual is read before element i of y is
  // written): the model writes a downsample branch's output into the block's output buffer.
  // Updates running_mean/running_var (unbiased variance, PyTorch semantics) and saves
  // mean/invstd (length c each) for backward.
  virtual void bn_forward_train(const BnDesc& d, const Act& x, ParamView gamma, ParamView beta,
                                float* running_mean, float* running_var, float* save_mean,
                                float* save_invstd, const Act* residual, bool relu, Act& y) = 0;
  virtual void bn_forward_eval(const BnDesc& d, const Act& x, ParamView gamma, ParamView beta,
                               const float* running_mean, const float* running_var,
                               const Act* residual, bool relu, Act& y) = 0;
  // Backward of bn_forward_train. y is the forward output (its sign gives the ReLU mask when
  // relu is set). Writes dx; when dresidual is non-null writes the gradient reaching the
  // residual input there; adds dgamma/dbeta into the gradient buffer.
  // In place allowed: dx may be x's memory and dresidual y's (every element of x and y is read
  // before the same element of dx or dresidual is written); the model keeps activation
  // gradients in activations that backward is done with (worker/model/resnet.cpp).
  // dy2, when non-null (only with dresidual), is a second part of the output gradient: the
  // gradient is dy + dy2 (the model passes a block input's gradient in its two parts, the
  // identity's and the first convolution's, instead of adding them in the convolution).
  virtual void bn_backward(const BnDesc& d, const Act& x, const Act& y, const Act& dy,
                           ParamView gamma, const float* save_mean, const float* save_invstd,
                           bool relu, Act& dx, Act* dresidual, ParamView dgamma,
                           ParamView dbeta, const Act* dy2 = nullptr) = 0;

  // A projection block's join, y = relu(bn(x) + bn(x_ds)): the block's last batch norm and its
  // downsample's, both in training mode, each updating and saving its statistics as
  // bn_forward_train does. The default runs the downsample's batch norm into y, then the other with
  // y as its residual (so y holds the downsample branch's output rounded to the compute dtype in
  // between, and the sum is of that); a backend may do both in one pass with the same result,
  // reading x and x_ds and writing y once.
  struct BnSide {
    BnDesc d;
    Act x;
    ParamView gamma, beta;  // backward: their gradients, at the same offsets of the gradient buffer
    float* running_mean = nullptr;
    float* running_var = nullptr;
    float* save_mean = nullptr;
    float* save_invstd = nullptr;
  };
  virtual void bn_forward_train_join(const BnSide& main, const BnSide& ds, Act& y);
  // Its backward, y the join's output: the gradient dy (+ dy2 where non-null, as bn_backward's)
  // through the ReLU to both batch norms, their dx into dx and dx_ds (in place allowed, as
  // bn_backward's), their parameters' gradients added. y's memory may be overwritten (the default
  // keeps the residual gradient there: bn_backward of the main batch norm with dresidual y, then
  // the downsample's from it).
  virtual void bn_backward_join(const BnSide& main, const BnSide& ds, Act& y, const Act& dy, const Act* dy2,
                                Act& dx, Act& dx_ds);
  // The stem's training batch norm + ReLU into bn_y, then the max-pool of bn_y into y. A backend may
  // pool relu(bn(x)) as it computes it and leave bn_y unwritten, where its own backward of both needs
  // nothing of bn_y: maxpool_backward(pool, bn_y, y, ...) from where the forward found each window's
  // maximum, and bn_backward with this bn_y from x (the GPU; the default makes both calls).
  virtual void bn_relu_maxpool_forward_train(const BnSide& bn, const PoolDesc& pool, Act& bn_y, Act& y);
  // A training batch norm + ReLU into bn_y whose one reader is the convolution after it, then that
  // convolution of bn_y into y. A backend may apply relu(bn(x)) as the convolution reads x and leave bn_y
  // unwritten, where its conv_bn_relu_backward writes bn_y before the weight gradient reads it (the GPU
  // in fp16; the default makes both calls). Anything else that reads bn_y before then finds it written.
  virtual void bn_relu_conv_forward_train(const BnSide& bn, Act& bn_y, const ConvDesc& conv, ParamView w, Act& y);
  // Their backward: conv_backward(conv, bn_y, w, dy, &dbn_y, false, w), then bn_backward of bn with output
  // bn_y and ReLU from dbn_y into dx (in place allowed, as bn_backward's), both layers' parameter gradients
  // added.
  virtual void conv_bn_relu_backward(const ConvDesc& conv, ParamView w, const Act& dy, const BnSide& bn, Act& bn_y,
                                     Act& dbn_y, Act& dx);

  virtual void maxpool_forward(const PoolDesc& d, const Act& x, Act& y) = 0;
  virtual void maxpool_backward(const PoolDesc& d, const Act& x, const Act& y, const Act& dy,
                                Act& dx) = 0;
  virtual void avgpool_forward(const Act& x, Act& y) = 0;  // global: y is (n, 1, 1, c)
  virtual void avgpool_backward(const Act& dy, Act& dx) = 0;

  // Fully connected: logits (n, out) fp32 = x (n, in) * W^T + b, W is (out, in).
  virtual void fc_forward(const Act& x, ParamView w, ParamView b, int out, float* logits) = 0;
  virtual void fc_backward(const Act& x, ParamView w, const float* dlogits, int out, Act& dx,
                           ParamView dw, ParamView db) = 0;

  // Mean softmax cross-entropy over the batch with label smoothing e (torch's
  // CrossEntropyLoss(label_smoothing=e): the target is (1 - e) * onehot + e / classes). Writes the
  // loss (one fp32, backend memory) and dlogits = grad_scale * (softmax - target) / n. labels are
  // int32 in backend memory.
  virtual void softmax_xent(int n, int classes, const float* logits, const int32_t* labels,
                            float grad_scale, float label_smoothing, float* loss, float* dlogits) = 0;

  // --- Data: fills images (NHWC, compute dtype) and labels for the given sample indices with
  // the generator of worker/core/synthetic.h, so every backend sees the same batch.
  virtual void make_batch(DataKind kind, uint64_t seed, const int64_t* host_indices, int n,
                          int image_size, int classes, Act& images, int32_t* labels) = 0;

  // --- Optimizers over the bound flat buffers (fp32 master weights).
  // PyTorch semantics: weight decay is L2 added to the gradient (torch.optim.SGD / Adam). It
  // applies where decay_mask[i] != 0 (a byte per parameter, backend memory), everywhere when
  // decay_mask is null: torch's parameter groups with weight_decay 0 for the others.
  virtual void scale_grads(float s) = 0;
  // Returns true when every gradient is finite (synchronizes; the step's own verdict is
  // unscale_grads', below).
  virtual bool grads_finite() = 0;
  // `range`: the slice of the bound buffers to update (ZeRO: a rank's shard of a bucket);
  // count 0 means all of them. momentum_buf, m, v and decay_mask hold the range's elements
  // only: element i of each belongs to parameter range.offset + i.
  // SGD with momentum (dampening 0); nesterov as torch.optim.SGD(nesterov=True).
  virtual void sgd_step(float lr, float momentum, float weight_decay, float* momentum_buf,
                        bool first_step, bool nesterov, const uint8_t* decay_mask,
                        ParamView range = {}) = 0;
  virtual void adam_step(float lr, float beta1, float beta2, float eps, float weight_decay,
                         int64_t step, float* m, float* v, const uint8_t* decay_mask,
                         ParamView range = {}) = 0;

  virtual void synchronize() = 0;

  // --- fp16 dynamic loss scaling, decided by the backend (issue 24): GradScaler's state
  // (worker/core/loss_scale.h) lives in the backend's memory, and the step's calls below read and
  // change it there, so that a step needs no host read between backward and the optimizer (and can
  // be captured). Off until set_loss_scale; while on:
  //   - softmax_xent's dlogits are multiplied by the scale as well (grad_scale x scale);
  //   - sgd_step and adam_step apply only where this step's update_loss_scale() let the step
  //     apply, and otherwise leave parameters and state untouched; the backend then counts the
  //     optimizer's steps itself (only it knows which applied): adam_step's `step` and sgd_step's
  //     `first_step` are those of its count, not the caller's.
  // A step: forward_backward, the gradients' reduction, unscale_grads, (several ranks whose
  // verdicts can differ: grads_verdict, combined, set_grads_verdict), update_loss_scale, the
  // optimizer calls. The default implementation keeps the state on the host (the CPU backend,
  // whose softmax_xent and optimizers read it through host_loss_scale()).
  // `optimizer_steps`: the optimizer steps taken so far (a resumed run's), where the count starts.
  virtual void set_loss_scale(const LossScaleRules& rules, const LossScaleState& s, int64_t optimizer_steps);
  // The state after the work enqueued so far (synchronizes: for log lines, records, checkpoints).
  virtual LossScaleState loss_scale();
  // Every gradient times 1 / (divisor x scale), in one pass (divisor: the ranks averaged over),
  // and this step's verdict: whether every gradient is then finite.
  virtual void unscale_grads(float divisor);
  virtual bool grads_verdict();  // this step's verdict on the host (synchronizes)
  virtual void set_grads_verdict(bool grads_finite);  // replaces it (the ranks' verdicts combined)
  // GradScaler.update() on the verdict: the scale backs off or grows, a skip is counted, and the
  // optimizer calls that follow apply or not.
  virtual void update_loss_scale();

  // --- A captured step (the GPU: one CUDA graph, worker/gpu/step_graph.h): the work of a whole
  // training step enqueued once, then replayed with one launch per step. Host reads (a loss,
  // grads_finite) cannot be inside it, nor anything whose arguments change from step to step but
  // the optimizer's StepValues.
  // Why this backend cannot capture a step; empty when it can.
  virtual std::string step_capture_unsupported() const { return "this backend runs every step as it comes"; }
  // True while the backend still tunes itself on the steps it runs (the GPU times convolution
  // engines on its first steps): a step is best captured after that (capture ends it anyway).
  virtual bool still_tuning() const { return false; }
  // Captures what `body` enqueues (nothing runs while capturing; everything it touches must be
  // allocated already, so a step ran before), then runs it once: body must be one whole step,
  // and its optimizer calls' lr/step are that first run's StepValues. Every optimizer call in body
  // must take the same StepValues; sgd_step's first_step must be false.
  virtual void capture_step(const std::function<void()>& body);
  // Runs the captured step again, its optimizer reading `v`.
  virtual void replay_step(const StepValues& v);
  virtual CaptureInfo captured() const { return {}; }
  // Whether this backend, computing in fp16, runs convolutions fused with their batch norms'
  // statistics for this model (the GPU: once its engine tuning chose the fused forward somewhere);
  // reported by the benchmark (--precision auto decides before any tuning: gpu_backend_facts).
  virtual bool fused_half_faster() const { return false; }
  // Where the backend's own start-up went so far, in seconds and in order (the GPU: the driver's
  // initialisation, the context, the libraries' handles, cudaMalloc, choosing the convolutions'
  // algorithms); empty where there is nothing worth saying (the CPU).
  virtual std::vector<std::pair<const char*, double>> startup_seconds() const { return {}; }

 protected:
  // The default implementation's loss scaling (the CPU's): what softmax_xent multiplies by,
  // whether an optimizer call applies, and the optimizer's step count (Adam's step of this update;
  // SGD's first step is the one where it is 1).
  struct HostLossScale {
    bool on = false;
    LossScaleRules rules;
    LossScaleState state;
    int64_t optimizer_steps = 0;  // including this step's when it applies
    bool grads_finite = true;     // this step's verdict
    bool applies = true;          // update_loss_scale's answer
    float multiplier() const { return on ? state.scale : 1.0f; }
  };
  const HostLossScale& host_loss_scale() const { return host_scale_; }

 private:
  HostLossScale host_scale_;
};

}  // namespace worker
