// The optimizer of a training run and its state: named buffers in the backend's memory, as
// torch.optim names them (SGD: momentum_buffer; Adam: exp_avg, exp_avg_sq), and the count of
// steps it has taken (which lags the run's step count by the steps fp16 loss scaling skipped).
// Under ZeRO-1 (issue 15) it steps only the ranges of the flat buffer this rank owns and keeps
// state for those alone, back to back; unsharded, its one range is the whole buffer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "worker/model/model.h"
#include "worker/core/ops.h"
#include "worker/train/options.h"

namespace worker {

struct OptimizerConfig {
  OptimizerKind kind = OptimizerKind::Adam;
  float momentum = 0.9f;     // SGD
  bool nesterov = false;     // SGD: torch.optim.SGD(nesterov=True)
  float weight_decay = 0.0f; // L2, added to the gradient (torch.optim)
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;  // Adam: torch's defaults
};

// The buffer names of an optimizer, in the order its checkpoint tensors are written.
std::vector<std::string> optimizer_buffer_names(OptimizerKind kind);

// The weight-decay mask of --no-wd-on-bn-bias (NVIDIA's recipe): every 1-D parameter (batch-norm
// weights and biases, the FC bias) is left out of weight decay, conv and FC weights decay.
std::vector<uint8_t> decay_mask_without_bn_and_bias(const Model& model);

class Optimizer {
 public:
  // State (zeroed, in the backend's memory) for the parameters of `ranges` of the `count`-element
  // buffer (empty: all of it). `decay_mask`: one byte per parameter of the whole buffer, weight
  // decay where non-zero (empty: everywhere).
  Optimizer(const OptimizerConfig& cfg, Ops& ops, size_t count, const std::vector<uint8_t>& decay_mask = {},
            std::vector<ParamView> ranges = {});

  const OptimizerConfig& config() const { return cfg_; }
  const std::vector<ParamView>& ranges() const { return ranges_; }
  // One step over the ranges with learning rate `lr`; after_range(i), when given, right after
  // range i's update is enqueued (the trainer starts that bucket's all-gather there).
  void step(float lr, const std::function<void(size_t)>& after_range = nullptr);
  int64_t steps_taken() const { return taken_; }
  // Under fp16 loss scaling the backend decides which steps apply and keeps the true count
  // (Ops::set_loss_scale): this one then counts the steps asked for, and the trainer puts the
  // backend's count here where it reads the backend's state (the run's steps less the skipped).
  void mirror_steps_taken(int64_t n) { taken_ = n; }
  // A replayed captured step (Ops::replay_step) runs step()'s kernels without step(): the values
  // its optimizer reads for learning rate `lr`, and the count it then advances.
  StepValues next_values(float lr) const { return {lr, taken_ + 1}; }
  void count_replayed_step() { ++taken_; }

  // This rank's state as host vectors by name: the ranges' elements back to back (unsharded:
  // the whole buffer). set_state takes whole-buffer vectors (a checkpoint's) and keeps the
  // ranges' elements; it checks names and sizes.
  std::map<std::string, std::vector<float>> state() const;
  void set_state(const std::map<std::string, std::vector<float>>& buffers, int64_t steps_taken);
  size_t state_bytes() const;  // device memory of the state (and the decay mask)
  size_t whole_state_bytes() const;  // the same for the whole buffer: what every rank keeps without ZeRO

 private:
  float* buffer(const std::string& name) const;

  OptimizerConfig cfg_;
  Ops& ops_;
  size_t count_ = 0;                 // the whole buffer
  std::vector<ParamView> ranges_;    // what this rank steps
  std::vector<size_t> state_offset_; // where range i's state starts
  size_t kept_ = 0;                  // elements of state
  int64_t taken_ = 0;
  float* momentum_buffer_ = nullptr;  // SGD
  float* exp_avg_ = nullptr;          // Adam: first moment
  float* exp_avg_sq_ = nullptr;       // Adam: second moment
  const uint8_t* decay_mask_ = nullptr;  // backend memory, kept elements only; null: decay everywhere
};

}  // namespace worker
