// --precision: the compute dtype of a run, resolved once at start-up before the backend is built.
// auto (the default) picks from what the backend reports of itself (BackendFacts,
// worker/core/backend.h): bf16, which needs no loss scaling, unless the backend runs fp16 faster
// than bf16 for this model; fp32 on the CPU, which computes in fp32 only. Pure, tested with plain
// values.
//
// Measured on an H100 (2026-12-07, scripts/bench_precision.sh, train_resnet --data random), fp16
// against bf16 images/s: 1.02-1.05 for ResNet-18 to 101 at 64-224 px with the ImageNet stem,
// 1.05-1.07 for ResNet-18 and 50 at 32 px with the CIFAR stem; but with the stem's convolution over
// 3 channels on cuDNN's legacy API (its plain form, WORKER_CONV_S2D=0; the CIFAR stem's before it had
// a space-to-depth form) 0.75-0.99: that convolution's fp16 weight gradient took 2.46 ms per step
// where bf16's took 0.16 ms (ResNet-18 width 32, batch 1024, CUPTI).
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
PrecisionChoice choose_precision(Precision p, bool gpu, const BackendFacts& facts);

// The start-up line, e.g. "Precision: bf16 (--precision auto: ...)"; empty where `why` is.
std::string describe_precision(const PrecisionChoice& c);

}  // namespace worker
