// The model's state as torchvision's state_dict() (names, shapes, OIHW conv weights, int64
// num_batches_tracked): the tensors a checkpoint file holds (safetensors.h), and back.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "worker/model/model.h"
#include "worker/model/safetensors.h"

namespace worker {

std::vector<StTensor> model_state_to_tensors(const Model& model, const ModelState& state);
// Checks names and shapes strictly: a missing, unexpected or mis-shaped tensor is an error
// naming it and `what` (e.g. the file's path).
ModelState model_state_from_tensors(const Model& model, const std::vector<StTensor>& tensors,
                                    const std::string& what);

// Throws std::runtime_error "<what>: tensor '<name>' holds NaN (...)" (or inf) when a value is
// not finite: a checkpoint that would train into "loss is nan" is refused as what it is
// (model_state_from_tensors checks every tensor; the trainer its training-state file's).
void check_finite(const float* values, size_t count, const std::string& what, const std::string& name);

}  // namespace worker
