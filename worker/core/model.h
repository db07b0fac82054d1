// ResNet v1.5 as torchvision defines it (stride on the bottleneck's 3x3 conv), built once on
// top of the Ops interface, so the same model code runs on every backend.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "worker/core/ops.h"

namespace worker {

// What backward recomputes instead of keeping from the forward (issue 15). Every mode gives the
// same numbers: the recomputation repeats the forward's kernels on the same inputs (the CPU
// backend bit for bit), and batch-norm running statistics are updated by the forward only.
//   None:  every activation backward needs is kept.
//   Bn:    the batch-norm + ReLU outputs that feed a convolution (and the stem's) are not kept;
//          backward recomputes each one from its convolution's output just before using it.
//   Block: only each residual block's input is kept (and the stem's output); backward recomputes
//          the block's convolutions and batch norms into one shared buffer, block by block.
enum class Recompute : uint8_t { None, Bn, Block };

// The stem before layer1. ImageNet: torchvision's 7x7/2 convolution, batch norm, ReLU and 3x3/2
// max-pool (224 px -> 56). Cifar: the CIFAR ResNets' 3x3/1 convolution, batch norm and ReLU, no
// pool, so small images keep their resolution (32 px: layer4 at 4x4 instead of 1x1). The state
// names are the same (conv1.weight is (width, 3, 3, 3)): torchvision's resnetNN with
// `conv1 = nn.Conv2d(3, width, 3, 1, 1, bias=False)` and `maxpool = nn.Identity()` loads it.
enum class Stem : uint8_t { ImageNet, Cifar };

// A configuration the backend cannot hold, e.g. a batch whose largest activation is beyond
// cuDNN's 2^31 - 1 elements: bad input (train_resnet exits 2), found before allocating.
class ModelTooLarge : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

struct ModelConfig {
  int depth = 50;          // 18, 34, 50, 101, 152
  int width = 64;          // base channels (torchvision: 64)
  int num_classes = 1000;
  int image_size = 224;
  Stem stem = Stem::ImageNet;
  int batch = 32;          // micro-batch per rank: activations are sized for it
  float label_smoothing = 0.0f;  // of the loss (torch's CrossEntropyLoss(label_smoothing=))
  Recompute recompute = Recompute::None;
  // false: no whole fp32 parameter buffer (ZeRO-1's sharded master weights, issue 15): params()
  // is null, the backend keeps the weights (Ops::shard_master_weights), and get_state() and
  // set_state() move the parameters through grads(), where the caller gathers them first or
  // hands them to the backend after (Ops::export_master / import_master).
  bool whole_params = true;
};

// One entry of the state dict, in torchvision's state_dict() order and naming.
enum class StateKind : uint8_t { Param, RunningMean, RunningVar, NumBatchesTracked };
struct StateEntry {
  std::string name;             // "layer1.0.conv1.weight"
  std::vector<int64_t> shape;   // PyTorch's shape (conv weights: C_out, C_in, kH, kW)
  StateKind kind = StateKind::Param;
  size_t offset = 0;            // Param: into params(); RunningMean/Var: into buffers(); else 0
  size_t count = 0;
  bool conv_weight = false;     // stored OHWI internally, OIHW in checkpoints
};

// Host copy of everything a checkpoint holds for the model.
struct ModelState {
  std::vector<float> params;    // internal layout (conv weights OHWI)
  std::vector<float> buffers;   // running means and variances
  int64_t num_batches_tracked = 0;
};

class Model {
 public:
  Model(const ModelConfig& cfg, Ops& ops);
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const ModelConfig& config() const;
  const std::vector<StateEntry>& state_entries() const;
  size_t num_params() const;
  size_t num_buffers() const;
  float* params();   // backend memory, fp32 (null without whole_params)
  float* grads();    // backend memory, fp32, same layout as params()
  float* buffers();  // backend memory, fp32 running statistics

  // torchvision's initialisation (Kaiming normal fan_out for convs, BN 1/0, Linear default),
  // deterministic for a seed, identical on every backend (done on the host, then uploaded).
  void init(uint64_t seed);

  // The input of one micro-batch (NHWC images in the compute dtype, int32 labels), allocated
  // by the model; fill them with Ops::make_batch or an upload.
  Act& input();
  int32_t* labels();

  // Training step on the current input: forward, loss, backward. Gradients are ADDED to
  // grads() (scaled by grad_scale). Asynchronous on the backend's stream.
  void forward_backward(float grad_scale = 1.0f);
  // A replay of a captured forward_backward (Ops::replay_step) ran its kernels but not its host
  // side: this counts its training forward (num_batches_tracked), as forward_backward does.
  void count_replayed_forward();
  // Loss of the last forward (synchronizes).
  float last_loss();
  // Logits (n, num_classes) of the last forward, downloaded (synchronizes).
  std::vector<float> last_logits();
  // Forward in eval mode (running statistics); loss available through last_loss().
  void forward_eval();
  // The label smoothing of the loss from now on (ModelConfig::label_smoothing at construction).
  void set_label_smoothing(float e);

  // Called during backward whenever the gradients of [begin, end) of the flat buffer are
  // final for this micro-batch, from the end of the buffer towards the start. Lets the trainer
  // start all-reducing buckets while backward goes on.
  std::function<void(size_t begin, size_t end)> on_grads_ready;

  // Device bytes the model carved, by what they hold, e.g. {"activations kept for backward",
  // 10.7e9}; the backend's own share is Ops::memory_breakdown().
  std::vector<std::pair<std::string, size_t>> memory_breakdown() const;

  // The 1-D parameters (batch norms' weights and biases, the FC bias), in buffer order.
  std::vector<ParamView> vector_params() const;

  ModelState get_state();               // synchronizes, downloads
  void set_state(const ModelState& s);  // uploads, calls ops.params_updated() (whole_params)
  int64_t num_batches_tracked() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Convert one conv weight between PyTorch's OIHW and our OHWI.
void oihw_to_ohwi(const float* src, float* dst, int o, int i, int kh, int kw);
void ohwi_to_oihw(const float* src, float* dst, int o, int i, int kh, int kw);

}  // namespace worker
