// The GPU back end's factory (jpeg_source.cpp, built when nvJPEG is found): nvJPEG
// batched decode on the hardware engine (hybrid where there is none), our crop/resize/flip/
// normalise kernel writing the backend's input; files nvJPEG cannot take (PNG, CMYK,
// progressive on the hardware engine) are decoded by the CPU path of image_source.h.
#pragma once

#include <memory>
#include <string>

#include "worker/data/image_source.h"

namespace worker {

std::unique_ptr<BatchSource> make_gpu_image_source(std::shared_ptr<const DatasetIndex> index, SplitInfo info,
                                                   const LoaderConfig& cfg, Ops& gpu_ops, std::string describe);

}  // namespace worker
