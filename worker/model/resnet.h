// The ResNet's forward and backward passes, run through Ops over the memory a MemoryPlan placed:
// the schema says what the layers are, the plan where their tensors live, this how they run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "worker/core/ops.h"
#include "worker/model/memory_plan.h"
#include "worker/model/schema.h"

namespace worker {

class ResNet {
 public:
  // memory[i] is the plan's buffer i, carved from `ops` (whose parameter buffers are bound).
  ResNet(const Schema& s, const MemoryPlan& plan, const std::vector<void*>& memory, Ops& ops);
  ~ResNet();
  ResNet(const ResNet&) = delete;
  ResNet& operator=(const ResNet&) = delete;

  Act& input();
  int32_t* labels();
  const float* logits() const;  // (batch, classes) fp32
  const float* loss() const;    // one fp32

  // The forward of the current input and the loss; train: batch statistics (running ones
  // updated, saved ones kept for backward), else the running statistics. Asynchronous.
  void forward(bool train, float grad_scale, float label_smoothing);
  // The backward of the last training forward: gradients ADDED to the gradient buffer;
  // on_ready(begin, end) whenever [begin, end) of it is final, from its end towards its start.
  void backward(const std::function<void(size_t begin, size_t end)>& on_ready);

 private:
  struct Net;
  std::unique_ptr<Net> net_;
};

}  // namespace worker
