// The GPU back end's transform kernel: crop + antialiased bilinear resize (the CPU path's
// filter, worker/data/transform.h, evaluated the same way: horizontal taps, then vertical) +
// flip + normalise, from decoded 8-bit RGB images in device memory straight into the model's
// NHWC input (fp32, bf16 or fp16).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "worker/core/ops.h"

namespace worker {
namespace gpu {

// One image of a batch: where its decoded pixels are and what to cut out of them (the fields
// of worker::SamplePlan, in the decoded image's pixels).
struct ResizeJob {
  const uint8_t* src;  // RGB interleaved, row pitch `pitch` bytes; null: the image is in place already
  int pitch;
  int box_x0, box_y0, box_x1, box_y1;
  int out_w, out_h;
  int win_x, win_y;
  int flip;
};

struct Normalize {
  float scale[3];  // 1 / (255 std)
  float shift[3];  // -mean / std
};

// jobs: device array of n jobs. out: n x size x size x 3 in `dtype`.
void launch_resize_normalize(const ResizeJob* jobs, int n, int size, DType dtype, const Normalize& norm, void* out,
                             cudaStream_t stream);

}  // namespace gpu
}  // namespace worker
