// What a ResNet is built from: its depth, widths, stem and micro-batch, and how backward trades
// memory for recomputation. Read by the schema (schema.h), the memory plan (memory_plan.h) and
// the model (model.h).
#pragma once

#include <cstdint>
#include <stdexcept>

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

}  // namespace worker
