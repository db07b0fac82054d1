#include "worker/train/precision.h"

namespace worker {

PrecisionChoice choose_precision(Precision p, bool gpu, const BackendFacts& facts) {
  switch (p) {
    case Precision::Auto:
      if (!gpu) return {DType::F32, ""};  // the CPU's only dtype, as before auto existed: nothing to say
      if (!facts.fp16_faster_than_bf16)
        return {DType::BF16, "fp16's fused convolution + batch-norm statistics do not run on this GPU (or are "
                             "turned off), so fp16 would only add loss scaling"};
      if (!facts.stem_space_to_depth)
        return {DType::BF16, "the stem's convolution over 3 channels runs in its plain form (WORKER_CONV_S2D=0), "
                             "on cuDNN's legacy API, where fp16 ran slower than bf16 (docs/gpu.md); --precision fp16 "
                             "for the other"};
      return {DType::F16, "this GPU runs fp16's fused convolution + batch-norm statistics, which bf16 lacks; "
                          "its loss scaling is decided on the device; --precision bf16 for the other"};
    case Precision::Fp32: return {DType::F32, ""};
    case Precision::Bf16:
    case Precision::Fp16:
      if (!gpu) {
        throw UsageError(std::string("--precision ") + to_string(p) +
                         " needs a GPU: this run uses the CPU backend, which computes in fp32 only (use --precision fp32)");
      }
      return {p == Precision::Bf16 ? DType::BF16 : DType::F16, ""};
  }
  return {DType::F32, ""};
}

std::string describe_precision(const PrecisionChoice& c) {
  if (c.why.empty()) return "";
  return std::string("Precision: ") + dtype_name(c.dtype) + " (--precision auto: " + c.why + ")";
}

}  // namespace worker
