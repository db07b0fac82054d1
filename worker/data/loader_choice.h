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

// --- The GPU loader's CPU share
//
// Beside a training step nvJPEG delivers far less than alone: on the H200 machine, 98 real photos
// (500x375), ResNet-50 bf16 b256, the training stream waited 1.49 ms per step for its batch
// against 0.45 ms on random data (docs/benchmarks.md, "On real photos"), while its reader threads
// only read files. So the reader threads also decode a share of each batch themselves, as the CPU
// loader does (its decode, crop, resize and normalisation: the same pixels), and nvJPEG the rest.
// The share is what makes both finish a batch together at the modelled rates, cpu / (cpu + gpu),
// at most half (nvJPEG's loader decodes at least half of each batch; where the CPU loader is the
// faster one, --loader auto picks it whole).
inline constexpr double kMaxCpuShare = 0.5;
inline double gpu_loader_cpu_share(const LoaderChoice& c) {
  const double total = c.cpu_images_per_s + c.gpu_images_per_s;
  if (!(total > 0.0)) return 0.0;
  const double s = c.cpu_images_per_s / total;
  return s < kMaxCpuShare ? s : kMaxCpuShare;
}

// Whether position `pos` of a batch goes to the CPU at `share`: the positions where the running
// count floor((pos + 1) * share) steps up, spread evenly, the same for every batch (a batch of n
// gives floor(n * share) of them to the CPU).
inline bool cpu_decodes_position(int pos, double share) {
  return share > 0.0 && int64_t(double(pos + 1) * share) > int64_t(double(pos) * share);
}

}  // namespace worker
