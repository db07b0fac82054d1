// torchvision's initialisation of a ResNet's state, drawn on the host: Kaiming normal fan_out
// for convolutions, batch norms 1/0 (running variance 1), nn.Linear's default for the FC.
#pragma once

#include <cstdint>

#include "worker/model/schema.h"

namespace worker {

// Deterministic for a seed and identical on every machine: value k of state entry i is a pure
// function of (seed, i, k), whatever the number of cores that draw it.
ModelState initial_state(const Schema& s, uint64_t seed);

}  // namespace worker
