// What the GPU backend is configured with: the device, the precision, and the knobs
// (worker/core/knobs.h) that tune it.
#pragma once

#include <cstddef>

#include "worker/core/knobs.h"
#include "worker/core/ops.h"

namespace worker {
namespace gpu {

struct GpuOptions {
  int device = 0;
  DType precision = DType::BF16;
  // The rest defaults to the knobs' defaults.
  bool allow_tf32 = Knobs{}.gpu_tf32;  // fp32 only: TF32 tensor cores (off: exact fp32 products)
  AlgoSearch search = Knobs{}.cudnn_search;
  size_t workspace_limit = Knobs{}.cudnn_workspace_mb << 20;  // cap on one convolution's cuDNN workspace
  size_t pool_chunk = Knobs{}.gpu_pool_chunk_mb << 20;        // DevicePool chunk size
  // The stem convolution over 3 channels as a denser stride-1 one (space_to_depth.cu): the ImageNet
  // stem's 7x7/2 as a 4x4/1 over 16 channels, the CIFAR stem's 3x3/1 over 8 (channels padded).
  bool space_to_depth = Knobs{}.conv_s2d;
  // bf16/fp16: convolutions may run on cuDNN graph-API engines, each chosen by timing on the
  // first calls (conv_engines.h); off: the legacy API's plans only.
  bool graph_engines = Knobs{}.conv_graph_engines;
  int conv_candidates = Knobs{}.conv_candidates;  // graph-API plans timed per shape and direction
  // Threads that query cuDNN's heuristics for the shapes Ops::plan_convs announces (the legacy
  // algorithms, AlgoSearch::Heuristic): the start-up's longest host part on an H100 (0.52-0.60 s of
  // ResNet-50's 1.8-2.2 s to its first step, 2026-12-07), one query after another. 1: none ahead;
  // 0: kAutoPlanThreads, at most the cores the process may run on (0.26 s there).
  int plan_threads = Knobs{}.plan_threads;
  // Only cuDNN's deterministic algorithms (no split-K atomics): runs that compare bit for bit.
  bool deterministic = Knobs{}.cudnn_deterministic;
  // Backward's weight gradients on a second stream (side_stream.h), beside the batch norms that
  // follow their data gradients; off: everything on the one stream.
  bool wgrad_stream = Knobs{}.wgrad_stream;
  // fp16: convolutions that feed a training batch norm write its sums (conv+genstats, conv_planner.h),
  // where timing chooses it (Timed), always (Always) or never (Off). Needs graph_engines.
  FusedStats fused_stats = Knobs{}.fp16_fused;
  // A training batch norm with a residual add and ReLU writes the ReLU's mask as bits, which its
  // backward reads instead of the output (bn.cu); off: the backward reads the output.
  bool relu_bits = Knobs{}.relu_bits;
  // A projection block's join (Ops::bn_forward_train_join, bn_backward_join): both batch norms and
  // the add + ReLU in one pass forward and two backward (bn.cu); off: the two batch norms in turn.
  bool bn_join = Knobs{}.bn_join;
  // The stem's training batch norm + ReLU and max-pool (Ops::bn_relu_maxpool_forward_train): the pool
  // reads the batch norm's input and applies it as it goes (pooling.cu), its output is not stored;
  // off: the batch norm's output is written, then pooled.
  bool stem_pool = Knobs{}.stem_pool;
  // The stem's max-pool backward (3x3, stride 2, padding 1) with a thread per window writing its 2x2
  // inputs, each of the four windows around them loaded once (pooling.cu); off: a thread per input,
  // which loads every window covering it (nine loads per four inputs). The two agree bit for bit.
  bool pool_tiled = Knobs{}.pool_tiled;
  // fp16: a block's training batch norm + ReLU and the convolution after it
  // (Ops::bn_relu_conv_forward_train) as one cuDNN graph that applies the batch norm as it reads the
  // convolution's input (ConvDir::FwdPrologue), where timing chooses it over the apply into memory; its
  // output is then written by its backward's dx pass, for the weight gradient. Needs fused_stats. On by
  // default since the trainer measured it (H100: +0.4 %, the driver +0.3 %; worker/gpu/NOTES.md).
  bool conv_prologue = Knobs{}.conv_prologue;
  // bf16/fp16: each convolution's weight gradient, computed in the compute dtype, waits in its place of a
  // half-precision copy of the gradient buffer, and all are added to the fp32 gradients in one pass
  // before anything reads those (GpuOps::join_side_work); off: each is added as it is computed.
  bool dw_batched = Knobs{}.dw_batched;
  // fp16 loss scaling (Ops::unscale_grads): the weight gradients still waiting (dw_batched) are added in the
  // unscale's own pass, the same bits as adding them first with one read and write of the fp32 gradients
  // fewer (205 MB per ResNet-50 step); off: added by their own pass, then unscaled.
  bool unscale_adds_dw = Knobs{}.unscale_adds_dw;
  // The captured step without the memsets by which cuDNN's conv+genstats zeroes its statistics
  // outputs: the fp16 statistics slots are zero before every such call already (stats_pairing.h);
  // off: the graph keeps every node the capture recorded.
  bool graph_drop_zeroing = Knobs{}.graph_drop_zeroing;
};

// Pure: the options the knobs give for this device and precision.
GpuOptions gpu_options(const Knobs& k, int device, DType precision);

}  // namespace gpu
}  // namespace worker
