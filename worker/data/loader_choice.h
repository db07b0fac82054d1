// --loader auto where both decoders could run (the GPU backend with nvJPEG built in; issue 24
// item 5): the one that delivers more images/s for images of the measured size. Each decoder's
// cost per image is modelled as a fixed part plus a part per pixel of the source image, fitted to
// what both loaders delivered on the H200 machine (16 cores) on two data sets at either end
// (docs/data.md, "Which loader --loader auto picks"):
//   32x32 JPEGs (1,024 px): CPU loader 272,239 images/s on 16 threads, nvJPEG 33,790;
//   250 ImageNet photos (108 KB mean, taken at ImageNet's typical 500x375, 187,500 px): CPU loader
//   5,781 images/s on 16 threads, nvJPEG 17,739.
// The CPU loader scales with its threads (its figure above is 16 threads' work); nvJPEG does not.
#pragma once

#include <cstdint>

#include "worker/data/loader_kind.h"

namespace worker {

struct LoaderCost {
  double fixed_us = 0.0;      // per image
  double per_pixel_ns = 0.0;  // per pixel of the source image
  double seconds(int64_t pixels) const { return fixed_us * 1e-6 + per_pixel_ns * 1e-9 * double(pixels); }
};
// One CPU reader thread (libjpeg-turbo + the transform): 58.8 us at 1,024 px, 2,768 us at 187,500.
inline constexpr LoaderCost kCpuLoaderPerThread{44.0, 14.5};
// nvJPEG and our resize kernel, the whole loader: 29.6 us at 1,024 px, 56.4 us at 187,500.
inline constexpr LoaderCost kGpuLoader{29.5, 0.143};

struct LoaderChoice {
  Loader loader = Loader::Gpu;
  double cpu_images_per_s = 0.0, gpu_images_per_s = 0.0;  // the model's rates
};

// The faster loader for images of `pixels` (median width x height) with `threads` CPU reader
// threads; nvJPEG on a tie.
inline LoaderChoice choose_loader(int64_t pixels, int threads) {
  LoaderChoice c;
  c.cpu_images_per_s = double(threads) / kCpuLoaderPerThread.seconds(pixels);
  c.gpu_images_per_s = 1.0 / kGpuLoader.seconds(pixels);
  c.loader = c.cpu_images_per_s > c.gpu_images_per_s ? Loader::Cpu : Loader::Gpu;
  return c;
}

}  // namespace worker
