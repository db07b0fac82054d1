// The ResNet as plain values: its layers (descriptors and views of the flat parameter buffer),
// the state dict's names, shapes and offsets (torchvision's, as safetensors writes them), and
// the ranges of the parameter buffer whose gradients one layer's backward finishes. Nothing
// here touches memory: the memory plan (memory_plan.h) places the activations, the model
// (model.h) allocates and runs them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "worker/core/ops.h"
#include "worker/model/config.h"

namespace worker {

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

// An NHWC tensor's shape (its dtype is the backend's, its memory the plan's).
struct ActShape {
  int n = 0, h = 0, w = 0, c = 0;
  size_t numel() const { return size_t(n) * h * w * c; }
};

// --- Layers: configuration and views of the parameter buffer

struct ConvLayer {
  ConvDesc d;
  ParamView w;    // (C_out, kH, kW, C_in)
  int unit = -1;  // index in Schema::units
  ActShape out() const { return {d.n, d.ho, d.wo, d.cout}; }
};

struct BnLayer {
  BnDesc d;
  ParamView gamma, beta;  // (C), (C)
  size_t running_mean = 0, running_var = 0;  // offsets into the running-statistics buffer
  int unit = -1;
  ActShape out() const { return {d.n, d.h, d.w, d.c}; }
};

// torchvision's BasicBlock (c1 b1 c2 b2) or Bottleneck (c1 b1 c2 b2 c3 b3, stride on the 3x3),
// with the downsample branch (cd bd: 1x1 convolution + batch norm) where the shape changes.
// Layers a block does not have are left empty (d.cin, d.c and the views 0).
struct BlockLayers {
  bool bottleneck = false;
  bool has_ds = false;
  ConvLayer c1, c2, c3, cd;
  BnLayer b1, b2, b3, bd;
  const ConvLayer& last_conv() const { return bottleneck ? c3 : c2; }
  const BnLayer& last_bn() const { return bottleneck ? b3 : b2; }  // its output is the block's
};

// A contiguous range of the flat parameter buffer owned by one layer (gradient readiness).
struct Unit {
  size_t begin = 0, end = 0;
};

struct Schema {
  int batch = 0, image_size = 0, num_classes = 0;
  // The ImageNet stem ends in a max-pool; without one (Stem::Cifar) bn1's output is the stem's
  // output, and block 0's input gradient is bn1's.
  bool pooled = true;
  ConvLayer conv1;
  BnLayer bn1;
  PoolDesc pool;  // ho x wo: the stem's output, with or without the pool
  std::vector<BlockLayers> blocks;
  int fc_in = 0;
  ParamView fc_w, fc_b;  // (num_classes, fc_in), (num_classes)
  int fc_unit = -1;
  std::vector<StateEntry> entries;  // torchvision's state_dict() order
  std::vector<Unit> units;          // in buffer order
  size_t nparams = 0, nbuffers = 0;

  ActShape input() const { return {batch, image_size, image_size, 3}; }
  ActShape stem_out() const { return {batch, pool.ho, pool.wo, pool.c}; }
  ActShape block_out(size_t i) const { return blocks[i].last_bn().out(); }
  ActShape block_in(size_t i) const { return i ? block_out(i - 1) : stem_out(); }
};

// Throws std::invalid_argument naming the setting that is not valid (a depth that is no ResNet's,
// a width, class count, image size or batch below 1).
Schema make_schema(const ModelConfig& cfg);

// Every activation is some convolution's input or output: throws ModelTooLarge when the largest
// has more than max_elements (Ops::max_tensor_elements), naming the largest batch that fits.
void check_tensor_sizes(const Schema& s, int64_t max_elements);

// The 1-D parameters (batch norms' weights and biases, the FC bias), in buffer order.
std::vector<ParamView> vector_params(const Schema& s);

// Convert one conv weight between PyTorch's OIHW and our OHWI.
void oihw_to_ohwi(const float* src, float* dst, int o, int i, int kh, int kw);
void ohwi_to_oihw(const float* src, float* dst, int o, int i, int kh, int kw);

}  // namespace worker
