// dtype helpers shared by every backend.
#include "worker/core/ops.h"

#include <stdexcept>
#include <string>

namespace worker {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::BF16: return 2;
    case DType::F16: return 2;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "fp32";
    case DType::BF16: return "bf16";
    case DType::F16: return "fp16";
  }
  return "?";
}

ParamView optimizer_range(const ParamView& range, size_t bound) {
  if (range.count == 0) return {0, bound};
  if (range.offset > bound || range.count > bound - range.offset)
    throw std::out_of_range("optimizer range [" + std::to_string(range.offset) + ", +" + std::to_string(range.count) +
                            ") outside the " + std::to_string(bound) + " parameters");
  return range;
}

}  // namespace worker
