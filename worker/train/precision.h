// --precision: the compute dtype of a run, resolved once at start-up before the backend is built.
// auto (the default) picks from what the backend reports of itself (BackendFacts,
// worker/core/backend.h) and the model's stem: bf16, which needs no loss scaling, unless the backend
// runs fp16 faster than bf16 for this model; fp32 on the CPU, which computes in fp32 only. Pure,
// tested with plain values.
//
// Measured on an H100 (2026-12-07, scripts/bench_precision.sh, train_resnet --data random), fp16
// against bf16 images/s: with the ImageNet stem 1.020-1.048 (ResNet-18, 34, 50, 101 at 224 px,
// ResNet-18 and 50 at 64 and 112 px, batch 256); with the CIFAR stem, whose 3x3 convolution over
// 3 channels runs on cuDNN's legacy API, 0.934-0.950 (ResNet-18 width 32, 32 px, batch 128),
// 0.745 (batch 1024) and 0.986 (ResNet-50 width 32, batch 256): that convolution's fp16 weight
// gradient took 2.46 ms per step where bf16's took 0.16 ms (CUPTI, batch 1024).
#pragma once

#include <string>

#include "worker/core/backend.h"
#include "worker/core/ops.h"
#include "worker/train/options.h"

namespace worker {

struct PrecisionChoice {
  DType dtype = DType::F32;
  std::string why;  // what auto weighed (empty: the dtype was asked for, or the CPU's fp32 by default)
};

// Throws UsageError for bf16 or fp16 on the CPU.
PrecisionChoice choose_precision(Precision p, bool gpu, const BackendFacts& facts, Stem stem);

// The start-up line, e.g. "Precision: bf16 (--precision auto: ...)"; empty where `why` is.
std::string describe_precision(const PrecisionChoice& c);

}  // namespace worker
