// The image transforms of training and evaluation, as torchvision's ImageNet recipe:
//   train (--augment standard): RandomResizedCrop(size, scale, ratio) + RandomHorizontalFlip(p)
//   eval, and train with --augment none: Resize(round(size * 256 / 224)) + CenterCrop(size)
// or, for small images at their own scale (--augment pad-crop, CIFAR's recipe):
//   train: RandomCrop(size, padding, pad_if_needed=True) + RandomHorizontalFlip(p)
//   eval:  CenterCrop(size) (zero-padded where the image is smaller, as torchvision's)
// then ToTensor + Normalize(ImageNet mean, std), written NHWC. The padding is black (fill 0,
// before normalisation), torchvision's default.
//
// The random choices (crop box, flip) are a pure function of (seed, epoch, sample index), so a
// resumed run draws what an uninterrupted one draws; the crop box follows torchvision's
// RandomResizedCrop.get_params exactly (10 tries, then the centre crop clamped to the ratio),
// with our own random numbers instead of torch's.
//
// Interpolation: Pillow's antialiased bilinear ("triangle filter whose support grows with the
// downscaling factor", Resample.c), the filter torchvision applies to PIL images and to tensors
// with antialias=True, taps clipped to the crop box as crop-then-resize does. We evaluate it in
// float from the 8-bit decoded pixels, where Pillow rounds to 8 bits after the horizontal pass
// and again at the end: ours equals torch's interpolate(antialias=True) up to float rounding
// and Pillow's result within 1 level of 255 (tests/worker/data/check_transforms.py).
// With DCT scaling on (JPEG), a crop at least twice the output size in both directions is
// decoded at 1/2, 1/4 or 1/8 scale by libjpeg (its scaled IDCT, a box-like average) and the
// filter applied to that: the same idea as Pillow's draft mode, slightly softer than the
// full-resolution filter.
#pragma once

#include <cstdint>
#include <vector>

#include "worker/core/ops.h"
#include "worker/data/decode.h"
#include "worker/data/loader_kind.h"

namespace worker {

struct TransformConfig {
  int size = 224;                    // output height = width
  double scale_min = 0.08, scale_max = 1.0;
  double ratio_min = 3.0 / 4.0, ratio_max = 4.0 / 3.0;
  double hflip = 0.5;
  Augment augment = Augment::Standard;
  int padding = 4;                   // pad-crop: pixels of black added on each side before the crop
  bool dct_scaling = true;
  float mean[3] = {0.485f, 0.456f, 0.406f};
  float std[3] = {0.229f, 0.224f, 0.225f};
  int resize_size() const;           // eval: the short side before the centre crop, size * 256 / 224 rounded
};

// One sample's geometry in the original image's pixel coordinates. The output pixel (x, y) of
// the size x size result is pixel (win_x + x, win_y + y) of the box [box_x0, box_x1) x
// [box_y0, box_y1) resized to out_w x out_h; taps are clipped to the box. Mirrored when flip.
// The window may reach outside the resized box (pad-crop: the box is the image at its own
// size): an output pixel there has no taps and is black, which is torchvision's zero padding.
struct SamplePlan {
  int box_x0 = 0, box_y0 = 0, box_x1 = 0, box_y1 = 0;
  int out_w = 0, out_h = 0;
  int win_x = 0, win_y = 0;
  int size = 0;  // the window: size x size output pixels
  bool flip = false;
};

// torchvision's RandomResizedCrop.get_params with our random numbers: (top, left, height, width).
struct CropBox {
  int top = 0, left = 0, height = 0, width = 0;
};
CropBox random_resized_crop(int width, int height, double scale_min, double scale_max, double ratio_min,
                            double ratio_max, uint64_t seed, int64_t epoch, int64_t index);
// torchvision's RandomCrop(size, padding, pad_if_needed=True).get_params on the padded image, with
// our random numbers: the crop's (top, left) in the padded image's pixels (size x size).
CropBox random_pad_crop(int width, int height, int size, int padding, uint64_t seed, int64_t epoch, int64_t index);
bool random_flip(double p, uint64_t seed, int64_t epoch, int64_t index);

SamplePlan plan_train(int width, int height, const TransformConfig& tf, uint64_t seed, int64_t epoch, int64_t index);
// pad-crop's plan for the crop at (top, left) of the padded image (random_pad_crop's box).
SamplePlan plan_pad_crop(int width, int height, const TransformConfig& tf, int top, int left, bool flip);
SamplePlan plan_eval(int width, int height, const TransformConfig& tf);

// The weights of one axis of the resize (Pillow's precompute_coeffs, relative to the box):
// output pixel i of the window reads taps first[i] .. first[i] + count[i] - 1 of the box's
// pixels with weights w[i * ksize + k].
struct AxisWeights {
  int ksize = 0;
  std::vector<int> first, count;
  std::vector<float> w;
};
// in0/in1: the box in the (possibly DCT-scaled) input, relative to its first pixel `lo`
// (fractional when scaled); clip: taps stay in [0, n_in). out_full: the resized length;
// window [win0, win0 + win_len).
AxisWeights axis_weights(double in0, double in1, int n_in, int out_full, int win0, int win_len);

// How a plan maps onto a decode: the DCT scale (8 = none), the resize weights of both axes in
// the scaled image's coordinates (relative to the box's first pixel lo_x, lo_y) and the region
// of the scaled image the taps read (what has to be decoded).
struct Geometry {
  int scale_num = 8;
  int lo_x = 0, lo_y = 0;
  AxisWeights x, y;
  Region region;
};
// dct_scaling: pick the smallest scale of 1/2, 1/4, 1/8 at which the box still has at least
// as many pixels as its resized size in both directions (JPEG only; else 8/8).
Geometry plan_geometry(const SamplePlan& p, ImageFormat format, int width, int height, bool dct_scaling);

// render's working memory, kept by its caller between images (one per thread), so that an
// image allocates nothing once the buffers have grown to the largest.
struct RenderScratch {
  std::vector<float> line;     // one source row in float
  std::vector<float> rows;     // the horizontal pass: the rows the vertical taps read x size x 3
  std::vector<float> weights;  // the horizontal taps' weights, each 4 lanes wide
  std::vector<int> at;         // where each output pixel's taps start in `line`
  std::vector<float> out;      // one output row before its conversion to bf16 or fp16
};

// Resizes, flips, normalises: writes size x size x 3 values (NHWC, F32, BF16 or F16) to dst from the
// decoded region. Bit-identical to evaluating the filter one value at a time as described
// above (each sum from +0 in the taps' order, each product and sum rounded to float).
void render(const RgbRegion& src, const Geometry& g, const SamplePlan& p, const TransformConfig& tf, DType dtype,
            void* dst, RenderScratch* scratch);

// IEEE binary16 of each value, rounded to nearest even (as CUDA's __float2half_rn): render's fp16
// output.
void store_f16(const float* in, size_t len, uint16_t* out);

}  // namespace worker
