// The deterministic synthetic data set: a pure function of (seed, sample index, element index),
// so every backend (CPU loop, CUDA kernel) and every rank produces bit-identical batches
// without storing anything. Only integer arithmetic and one float multiply-add per value, so
// host and device agree exactly (no transcendental functions whose rounding differs).
//
// Images are NHWC with 3 channels; the element index of (y, x, c) is (y * size + x) * 3 + c.
#pragma once

#include <cstdint>

#include "worker/core/ops.h"

#if defined(__CUDACC__)
#define WK_HD __host__ __device__
#else
#define WK_HD
#endif

namespace worker {
namespace synth {

constexpr int kChannels = 3;

// --- Counter-based hashing

// splitmix64's finaliser: a bijective 64-bit mix with good avalanche.
WK_HD inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Hash of (seed, sample, element, stream): chained mixes so that neighbouring counters differ
// in every bit. `stream` separates independent uses (pixels, labels, class patterns).
// Its first two mixes depend on (seed, sample, stream) alone: a sample's key, taken once for all of
// its elements (SamplePixels).
WK_HD inline uint64_t sample_key(uint64_t seed, uint64_t sample, uint64_t stream) {
  return mix64(mix64(seed + 0x9e3779b97f4a7c15ULL * (stream + 1)) ^ (sample + 0x632be59bd9b4e019ULL));
}
WK_HD inline uint64_t element_hash(uint64_t key, uint64_t element) {
  return mix64(key ^ (element + 0x85ebca77c2b2ae63ULL));
}
WK_HD inline uint64_t hash4(uint64_t seed, uint64_t sample, uint64_t element, uint64_t stream) {
  return element_hash(sample_key(seed, sample, stream), element);
}

// Uniform in (0, 1): 24 random bits, centred in their cell (never exactly 0 or 1).
WK_HD inline float uniform01(uint64_t h) {
  return (float(uint32_t(h >> 40)) + 0.5f) * (1.0f / 16777216.0f);
}

// Approximately N(0, 1): Irwin-Hall sum of four 16-bit uniforms, centred and scaled to unit
// variance. The sum is an exact integer, so the result is bit-identical everywhere.
WK_HD inline float normalish(uint64_t h) {
  const int32_t s = int32_t(h & 0xffff) + int32_t((h >> 16) & 0xffff) +
                    int32_t((h >> 32) & 0xffff) + int32_t((h >> 48) & 0xffff);
  // Var of one 16-bit uniform (in units of 65536) is 1/12; four of them: 1/3 -> scale sqrt(3).
  return float(s - 131070) * (1.7320508f / 65536.0f);
}

// --- The data set

constexpr uint64_t kStreamPixel = 1, kStreamLabel = 2, kStreamClass = 3;

WK_HD inline int32_t label(uint64_t seed, int64_t sample, int classes) {
  return int32_t(hash4(seed, uint64_t(sample), 0, kStreamLabel) % uint64_t(classes));
}

// Per-class pattern of DataKind::Learnable, a function of (seed, class) only:
// a mean per channel in [-1, 1) and a diagonal stripe (period 2..9 pixels, direction and phase
// per class) of amplitude 1. Both survive global average pooling poorly or well enough that a
// small ResNet separates the classes within ~100 steps.
WK_HD inline float class_mean(uint64_t seed, int32_t cls, int c) {
  return 2.0f * uniform01(hash4(seed, uint64_t(cls), uint64_t(c), kStreamClass)) - 1.0f;
}

// The hash that sets a class's stripe, and the stripe's sign at (y, x) from it.
WK_HD inline uint64_t class_stripe_hash(uint64_t seed, int32_t cls) {
  return hash4(seed, uint64_t(cls), 1000, kStreamClass);
}
WK_HD inline float stripe_sign(uint64_t h, int y, int x) {
  const int period = 2 + int(h % 8);
  const int fx = 1 + int((h >> 8) % 3);
  const int fy = int((h >> 16) % 3);
  const int phase = int((h >> 24) % 16);
  return (((x * fx + y * fy + phase) / period) & 1) ? 1.0f : -1.0f;
}

WK_HD inline float class_stripe(uint64_t seed, int32_t cls, int y, int x) {
  return stripe_sign(class_stripe_hash(seed, cls), y, x);
}

// Value of element e = (y * size + x) * 3 + c of sample `sample`: the definition, one element at a
// time (SamplePixels computes the same bits with what depends on the sample alone taken once).
WK_HD inline float pixel(DataKind kind, uint64_t seed, int64_t sample, int image_size, int classes,
                         int64_t e) {
  const float noise = normalish(hash4(seed, uint64_t(sample), uint64_t(e), kStreamPixel));
  if (kind == DataKind::Random) return noise;
  const int c = int(e % kChannels);
  const int64_t pix = e / kChannels;
  const int y = int(pix / image_size), x = int(pix % image_size);
  const int32_t cls = label(seed, sample, classes);
  return class_mean(seed, cls, c) + 0.5f * class_stripe(seed, cls, y, x) + 0.5f * noise;
}

// pixel() of one sample, element by element, bit for bit, with the sample's key, class, channel means
// and stripe taken once: a third of the hashing per element for random data, a twelfth for learnable
// data. (The GPU's batch of 256 at 224 px took 0.16 ms of an H100's ResNet-50 step before; with this,
// alternating gpu_model_driver runs went from 7,664-7,670 to 7,678-7,684 images/s, fp16, 2026-12-07.)
struct SamplePixels {
  DataKind kind;
  int image_size;
  uint64_t key;       // sample_key of the pixel stream
  float mean[kChannels];
  uint64_t stripe;    // class_stripe_hash of the sample's class
  WK_HD SamplePixels(DataKind kind_, uint64_t seed, int64_t sample, int image_size_, int classes)
      : kind(kind_), image_size(image_size_), key(sample_key(seed, uint64_t(sample), kStreamPixel)), mean{},
        stripe(0) {
    if (kind == DataKind::Random) return;
    const int32_t cls = label(seed, sample, classes);
    for (int c = 0; c < kChannels; ++c) mean[c] = class_mean(seed, cls, c);
    stripe = class_stripe_hash(seed, cls);
  }
  WK_HD float operator()(int64_t e) const {
    const float noise = normalish(element_hash(key, uint64_t(e)));
    if (kind == DataKind::Random) return noise;
    const int c = int(e % kChannels);
    const int64_t pix = e / kChannels;
    const int y = int(pix / image_size), x = int(pix % image_size);
    return mean[c] + 0.5f * stripe_sign(stripe, y, x) + 0.5f * noise;
  }
};

}  // namespace synth
}  // namespace worker
