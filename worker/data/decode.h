// Decoding one image file held in memory into 8-bit RGB, on the CPU.
//
// JPEG through libjpeg-turbo's libjpeg API (jpeglib.h), which the TurboJPEG API of
// libjpeg-turbo 2.1 lacks two things of: partial decoding (jpeg_crop_scanline +
// jpeg_skip_scanlines: only the rows and iMCU columns a crop needs go through the IDCT and
// the colour conversion) and DCT-domain downscaling by n/8 together with it. Default settings
// otherwise (accurate integer IDCT, fancy upsampling), as Pillow: a full-scale decode gives
// Pillow's pixels exactly. Grayscale JPEGs are expanded to RGB by libjpeg; CMYK and YCCK
// JPEGs are converted as Pillow's convert("RGB") does (Adobe's inverted CMYK included).
// PNG through libpng's simplified API (any bit depth, palette, gray; alpha is dropped, as
// convert("RGB")). Other formats (BMP, PPM, TIFF, WebP) are reported as undecodable.
//
// A file whose JPEG data ends early (no EOI marker at its end) is an error even where the
// region asked for lies before the cut, so a truncated file is skipped in every epoch, not
// only when a crop happens to reach the missing part.
//
// Decompression bombs: a file of a hundred bytes may declare 65,535 x 65,535 pixels (17 GB of
// RGBA, allocated before a pixel is read). Images above kMaxImagePixels are refused from their
// header, before anything is allocated for them, as Pillow refuses them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace worker {

// The file is not a decodable image (corrupt, truncated, unsupported format).
class DecodeError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Pillow's rule (PIL.Image._decompression_bomb_check): more than 2 x Image.MAX_IMAGE_PIXELS
// (2 x 89,478,485) pixels is an error; about 13,377 x 13,377, 537 MB decoded as RGB. Pillow
// warns above MAX_IMAGE_PIXELS; those are decoded here.
inline constexpr int64_t kMaxImagePixels = 178956970;

enum class ImageFormat : uint8_t { Jpeg, Png, Other };
ImageFormat sniff_format(const uint8_t* data, size_t size);

struct ImageHeader {
  ImageFormat format = ImageFormat::Other;
  int width = 0, height = 0;
  int components = 0;        // JPEG: 1 gray, 3 YCbCr/RGB, 4 CMYK/YCCK; PNG: 0
  bool progressive = false;  // JPEG: not baseline/extended sequential (SOF2, SOF6, ...)
};
// Reads the dimensions without decoding. Throws DecodeError, also for an image of more than
// kMaxImagePixels pixels.
ImageHeader read_header(const uint8_t* data, size_t size);

// Scale factors for DCT-domain downscaling: the image is decoded at num/8 of its size
// (dimensions rounded up, as libjpeg does). 8 = full size; JPEG only.
int scaled_size(int size, int scale_num);

// Pixels [x0, x0 + w) x [y0, y0 + h) of the image decoded at scale_num/8, RGB interleaved,
// row stride 3 * w. The region may be larger than asked for (libjpeg widens it to iMCU
// boundaries); x0, y0 say where it starts.
struct RgbRegion {
  std::vector<uint8_t> pixels;
  int x0 = 0, y0 = 0, w = 0, h = 0;
  int full_w = 0, full_h = 0;  // the whole (scaled) image
  int scale_num = 8;
  const uint8_t* row(int y) const { return pixels.data() + size_t(y - y0) * size_t(w) * 3; }  // absolute y
};

struct Region {
  int x0 = 0, y0 = 0, x1 = 0, y1 = 0;  // half-open, in scaled coordinates
};

// True when the JPEG data ends with its end-of-image marker (padding after it allowed).
bool jpeg_complete(const uint8_t* data, size_t size);

// Decodes the region (clamped to the image) at scale_num/8 (PNG: 8 only). Throws DecodeError
// (read_header's checks included), or std::bad_alloc when memory runs out.
void decode_region(const uint8_t* data, size_t size, int scale_num, const Region& region, RgbRegion* out);
// The whole image at full size.
void decode_full(const uint8_t* data, size_t size, RgbRegion* out);

}  // namespace worker
