// Where every tensor of the model lives in backend memory, as a value: a function of the schema,
// the compute dtype and the recompute mode (docs/memory.md), with no backend. The model carves
// the plan's buffers in its order (Ops::alloc) and runs the layers over the places it names.
//
// What the three planners decide (Recompute, config.h):
//   - None: every activation backward needs has its own memory, but a downsample branch's
//     batch-norm output, written into its block's output buffer (only the block's last batch norm
//     reads it, as its residual, and overwrites it element by element). The gradients of
//     activations live in activations backward is done with: batch-norm backward writes dx over
//     its input and the residual gradient over its output; a downsampling block's input gradient
//     goes to its [last conv output | output] region, which is one buffer; the stem's to the
//     largest dead activation that fits; what finds no home goes to the scratch S.
//   - Bn: as None, but the batch-norm + ReLU outputs that only feed a convolution (bn1 before
//     the max-pool, each block's inner ones) share one buffer R, recomputed before each use.
//   - Block: the stem's output and the block outputs are kept, in one region in block order;
//     everything inside the stem and a block lives in one arena that backward refills segment by
//     segment. Block i's output gradient is at block i + 1's output, a downsampling block's input
//     gradient at its own output (spilling over into the next ones); S holds the top block's.
// Recomputed batch norms write their statistics to a sink that is never read (Bn and Block).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "worker/core/ops.h"
#include "worker/model/config.h"
#include "worker/model/schema.h"

namespace worker {

// What a buffer holds: the rows of Model::memory_breakdown(), in its order.
enum class MemUse : uint8_t { Params, Grads, Stats, Acts, Scratch, Recompute, Io };
inline constexpr MemUse kMemUses[] = {MemUse::Params,  MemUse::Grads,     MemUse::Stats, MemUse::Acts,
                                      MemUse::Scratch, MemUse::Recompute, MemUse::Io};
const char* mem_use_name(MemUse u);  // "activations kept for backward", ...

// One carve of backend memory.
struct Buffer {
  MemUse use = MemUse::Acts;
  size_t bytes = 0;
};

// Where a tensor starts: a byte offset into one of the plan's buffers.
struct Place {
  int buffer = -1;  // index into MemoryPlan::buffers; -1: not placed
  size_t offset = 0;
  bool placed() const { return buffer >= 0; }
};
inline bool operator==(const Place& a, const Place& b) { return a.buffer == b.buffer && a.offset == b.offset; }
inline bool operator!=(const Place& a, const Place& b) { return !(a == b); }

struct BnPlaces {
  Place out, save_mean, save_invstd;  // the statistics: fp32, one per channel each
};

// The places of one residual block's tensors (BlockLayers' layers, the same names).
struct BlockPlaces {
  Place c1, c2, c3, cd;     // convolution outputs
  BnPlaces b1, b2, b3, bd;  // the last one's output is the block's; bd.out is that memory too
  // A downsampling block's input gradient (else it accumulates over the block's output);
  // not placed: the scratch S.
  Place din;
};

struct MemoryPlan {
  DType dtype = DType::F32;
  Recompute mode = Recompute::None;
  // In the order the model carves them; the parameter buffers (params, grads, stats) come first.
  std::vector<Buffer> buffers;
  Place params;  // not placed without ModelConfig::whole_params
  Place grads;
  Place stats;   // the running statistics (Schema::nbuffers floats)
  Place input, labels;
  Place conv1;
  BnPlaces bn1;
  Place stem_out;  // the max-pool's output; without a pool bn1's (the same place as bn1.out)
  std::vector<BlockPlaces> blocks;
  Place avg_out, d_avg;  // the global average pool's output (kept) and its gradient
  Place logits, dlogits, loss;
  Place grad_s;   // the activation-gradient scratch S, a buffer of its own
  Place stem_dx;  // pooled stems: where the max-pool's backward writes bn1's output gradient
  Place bn_sink;  // recomputed batch norms' statistics: 4 x bn_sink_c floats (not with None)
  int bn_sink_c = 0;

  size_t bytes(MemUse u) const;  // what the buffers of that use hold
  size_t total() const;
};

// Throws std::logic_error where a configuration leaves a gradient without a home (no torchvision
// depth does).
MemoryPlan plan_memory(const Schema& s, DType dtype, Recompute mode, bool whole_params);

}  // namespace worker
