// ZeRO-1's partition of the parameters and its rules (issue 15), in one place: decided once per
// run from --zero, the world size and the backend, and asked by the trainer. What the other parts
// need of it they get as values: the model whether it holds a whole fp32 parameter buffer
// (ModelConfig::whole_params), the optimizer the ranges it steps, the reducer the bucket layout
// (shard.h) and how to reduce, the backend the blocks whose master weights it keeps.
//
// What a run shards (Sharding):
//   None            --zero 0: every rank keeps the whole optimizer state and steps every parameter.
//   OptimizerState  --zero 1: each rank keeps the optimizer state of its block of every bucket
//                   and steps that block; the buckets are then all-gathered. The fp32 weights stay
//                   whole on every rank (they are the working weights: the CPU, GPU fp32).
//   MasterWeights   --zero 1 over more than one rank where the backend computes with a working
//                   copy of the weights (the GPU in bf16/fp16): the fp32 master weights too are
//                   kept for this rank's blocks only (the backend's MasterWeights hold them).
//
// The rule of sharded master weights: the model has no whole fp32 parameter buffer, and between
// steps the whole fp32 weights are in the gradient buffer, which the optimizer step has spent (the
// next step zeroes it): the step writes each owned block there and all-gathers its bucket,
// Model::init and set_state leave loaded weights there, a checkpoint gathers them there. Checkpoints
// use that buffer as scratch too (the optimizer state's gather). ParamSharding tracks what the
// gradient buffer holds and throws std::logic_error where the rule would be broken: whole weights
// read from it while it holds gradients or scratch, scratch taken while it holds gradients.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "worker/comm/comm.h"
#include "worker/model/model.h"
#include "worker/core/ops.h"
#include "worker/train/grad_reducer.h"
#include "worker/train/optimizer.h"
#include "worker/train/shard.h"

namespace worker {

enum class Sharding : uint8_t { None, OptimizerState, MasterWeights };

class ParamSharding {
 public:
  // The decision: --zero (0 or 1), the ranks, and whether the backend computes with a working copy
  // of the weights (Ops::keeps_working_copy).
  static Sharding decide(int zero, int world, bool working_copy);
  // Whether the model of a run that shards `s` holds a whole fp32 parameter buffer.
  static bool whole_params(Sharding s) { return s != Sharding::MasterWeights; }

  // The partition of `model`'s buffer (built with whole_params(decide(zero, comm.size(),
  // ops.keeps_working_copy()))) into buckets of `bucket` floats. Throws std::logic_error when the
  // model does not match the decision.
  ParamSharding(int zero, size_t bucket, Model& model, Ops& ops, Comm& comm);

  // --- The answers
  Sharding mode() const { return mode_; }
  bool zero() const { return mode_ != Sharding::None; }  // each rank steps (and keeps state for) its blocks
  bool shards_master() const { return mode_ == Sharding::MasterWeights; }
  const ShardLayout& layout() const { return layout_; }
  // What this rank's optimizer steps: its blocks, or the whole buffer ({}).
  std::vector<ParamView> optimizer_ranges() const;
  Reduction reduction() const { return zero() ? Reduction::ReduceScatter : Reduction::AllReduce; }
  size_t master_bytes() const;  // the fp32 weights this rank keeps

  // --- A step and the gradient buffer
  // Under sharded master weights the backend keeps its blocks' fp32 master weights from now on
  // (Ops::shard_master_weights). Once, after the optimizer took its state (the order in which the
  // backend's memory is carved); the weights cannot be loaded or stepped before it.
  void bind_backend();
  void zero_grads();  // a step begins: the gradient buffer holds its gradients
  // The optimizer's update of this step's gradients; under ZeRO each bucket's all-gather starts as
  // soon as its block is updated (overlapping the later buckets' updates). Every rank then holds
  // the whole new weights, and the backend's copies of them are refreshed.
  void update(Optimizer& optimizer, float lr);
  void weights_loaded();  // Model::init or set_state put the whole weights in place

  // --- The whole weights and state, for the ranks and for checkpoints
  // Where the whole fp32 weights are: the model's parameters, or the gradient buffer (the rule).
  float* whole_weights();
  void take_whole_weights();  // the backend's copies (working copy; sharded: masters, 1-D copies) from there
  // This rank's parameters and buffers; rank 0's (empty elsewhere). Collectives under sharded master weights.
  ModelState model_state();
  ModelState lead_model_state();
  // The optimizer state of the whole buffer for rank 0's checkpoint (empty elsewhere), gathered from
  // every rank's blocks under ZeRO (a collective, through the gradient buffer as scratch).
  std::map<std::string, std::vector<float>> whole_optimizer_state(const Optimizer& optimizer);
  // An inf or NaN in any rank's reduced gradients, one verdict on every rank (fp16 loss scaling).
  bool grads_finite_everywhere();
  // Whether the ranks' own verdicts on their gradients can differ, so that they must be combined
  // (grads_finite_everywhere): under ZeRO over several ranks. Elsewhere every rank holds the same
  // all-reduced gradients, and the backend's own verdict is everyone's.
  bool verdicts_differ() const { return zero() && comm_.size() > 1; }

 private:
  // What the gradient buffer holds.
  enum class Grads : uint8_t { Free, Gradients, WholeWeights, Scratch };
  void expect_bound(const char* what) const;
  void allgather_buckets(float* whole);  // every bucket all-gathered, waited for
  void gather_master();                  // sharded master weights: the whole parameters into the gradient buffer

  Sharding mode_;
  Model& model_;
  Ops& ops_;
  Comm& comm_;
  ShardLayout layout_;
  Grads grads_ = Grads::Free;
  bool bound_ = false;
};

}  // namespace worker
