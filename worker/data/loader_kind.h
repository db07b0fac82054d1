// The data pipeline's choices as the command line names them (parsed once, in options.cpp).
#pragma once

#include <cstdint>

namespace worker {

// Which back end decodes: auto = the CPU one on the CPU backend or without nvJPEG; on the GPU
// backend the one faster for the images' measured size (loader_choice.h).
enum class Loader : uint8_t { Auto, Cpu, Gpu };
// Training augmentation: standard = RandomResizedCrop + flip; none = the evaluation transform;
// pad-crop = RandomCrop(size, padding) + flip at the images' own scale (CIFAR's; issue 25).
enum class Augment : uint8_t { Standard, None, PadCrop };

// --max-image-bytes' default, 256 MiB: several times a 100-megapixel camera's finest JPEG (tens
// of MB), far above the photos of a training set, yet a bound on what one sample may make a
// reader thread allocate (a 64 GB sparse file, a device).
inline constexpr uint64_t kDefaultMaxImageBytes = uint64_t(256) << 20;

}  // namespace worker
