#include "worker/data/decode.h"

#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <new>

#include <jpeglib.h>
#include <jerror.h>
#include <png.h>

namespace worker {

namespace {

// --- JPEG (libjpeg API of libjpeg-turbo). Errors longjmp back to the decode call; nothing with
// a destructor lives between setjmp and the calls that may jump.
struct JpegErr {
  jpeg_error_mgr mgr;
  jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

extern "C" void jpeg_on_error(j_common_ptr cinfo) {
  auto* e = reinterpret_cast<JpegErr*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, e->message);
  std::longjmp(e->jump, 1);
}

// Warnings (corrupt-data notices libjpeg recovers from) are not errors: Pillow decodes such
// files too. Truncation is caught before decoding (has_eoi).
extern "C" void jpeg_on_message(j_common_ptr, int) {}

// A complete JPEG ends with the EOI marker (FF D9), possibly followed by padding.
bool has_eoi(const uint8_t* p, size_t n) {
  size_t end = n;
  for (int pad = 0; end > 2 && pad < 64 && (p[end - 1] == 0 || p[end - 1] == 0xff || p[end - 1] == '\n'); ++pad) --end;
  return end >= 4 && p[end - 2] == 0xff && p[end - 1] == 0xd9;
}

// Pillow's cmyk2rgb (Convert.c): r = (255 - k) - c * (255 - k) / 255, rounded as MULDIV255.
inline uint8_t cmyk_channel(int c, int nk) {
  const int t = c * nk + 128;
  const int v = nk - (((t >> 8) + t) >> 8);
  return uint8_t(v < 0 ? 0 : v > 255 ? 255 : v);
}

// Returns nullptr on success, else the error message (owned by err).
const char* jpeg_decode(const uint8_t* data, size_t size, int scale_num, const Region* region, RgbRegion* out,
                        JpegErr* err, std::vector<uint8_t>* cmyk_row) {
  jpeg_decompress_struct cinfo;
  cinfo.err = jpeg_std_error(&err->mgr);
  err->mgr.error_exit = jpeg_on_error;
  err->mgr.emit_message = reinterpret_cast<void (*)(j_common_ptr, int)>(jpeg_on_message);
  err->message[0] = 0;
  if (setjmp(err->jump)) {
    jpeg_destroy_decompress(&cinfo);
    return err->message;
  }
  jpeg_create_decompress(&cinfo);
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&cinfo, TRUE);
  const bool cmyk = cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK;
  const bool inverted = cmyk && cinfo.saw_Adobe_marker;  // Photoshop writes CMYK inverted
  cinfo.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
  cinfo.scale_num = unsigned(scale_num);
  cinfo.scale_denom = 8;
  jpeg_start_decompress(&cinfo);
  const int W = int(cinfo.output_width), H = int(cinfo.output_height);
  Region r = region ? *region : Region{0, 0, W, H};
  // Fancy upsampling treats the edges of a cropped or skipped-to region as image edges, so
  // chroma there would differ from a full decode: decode one iMCU (16 pixels at most) beyond
  // each side of the region where the image has it; those pixels match a full decode.
  const int margin = region ? 16 : 0;
  if (r.x1 <= r.x0 || r.y1 <= r.y0) r = Region{0, 0, 0, 0};
  r.x0 = r.x0 - margin < 0 ? 0 : r.x0 - margin;
  r.y0 = r.y0 - margin < 0 ? 0 : r.y0 - margin;
  r.x1 = r.x1 + margin > W ? W : r.x1 + margin;
  r.y1 = r.y1 > H ? H : r.y1;
  if (r.x1 <= r.x0 || r.y1 <= r.y0) {
    jpeg_abort_decompress(&cinfo);
    jpeg_destroy_decompress(&cinfo);
    std::snprintf(err->message, sizeof err->message, "empty region");
    return err->message;
  }
  JDIMENSION xoff = JDIMENSION(r.x0), width = JDIMENSION(r.x1 - r.x0);
  if (xoff != 0 || int(width) != W) jpeg_crop_scanline(&cinfo, &xoff, &width);  // widened to iMCU columns
  if (r.y0 > 0) jpeg_skip_scanlines(&cinfo, JDIMENSION(r.y0));
  out->x0 = int(xoff);
  out->y0 = r.y0;
  out->w = int(width);
  out->h = r.y1 - r.y0;
  out->full_w = W;
  out->full_h = H;
  out->scale_num = scale_num;
  try {
    out->pixels.resize(size_t(out->w) * size_t(out->h) * 3);
    if (cmyk) cmyk_row->resize(size_t(cinfo.output_width) * 4);
  } catch (const std::bad_alloc&) {
    jpeg_destroy_decompress(&cinfo);  // libjpeg's memory, before the exception leaves
    throw;
  }
  for (int y = 0; y < out->h; ++y) {
    uint8_t* dst = out->pixels.data() + size_t(y) * size_t(out->w) * 3;
    if (!cmyk) {
      JSAMPROW row = dst;
      jpeg_read_scanlines(&cinfo, &row, 1);
      continue;
    }
    JSAMPROW row = cmyk_row->data();
    jpeg_read_scanlines(&cinfo, &row, 1);
    for (int x = 0; x < out->w; ++x) {
      const uint8_t* s = cmyk_row->data() + size_t(x) * 4;
      const int c = inverted ? 255 - s[0] : s[0], m = inverted ? 255 - s[1] : s[1];
      const int yy = inverted ? 255 - s[2] : s[2], nk = inverted ? s[3] : 255 - s[3];
      dst[3 * x] = cmyk_channel(c, nk);
      dst[3 * x + 1] = cmyk_channel(m, nk);
      dst[3 * x + 2] = cmyk_channel(yy, nk);
    }
  }
  jpeg_abort_decompress(&cinfo);  // the rows below the region are not needed
  jpeg_destroy_decompress(&cinfo);
  return nullptr;
}

void decode_jpeg(const uint8_t* data, size_t size, int scale_num, const Region* region, RgbRegion* out) {
  if (!has_eoi(data, size)) throw DecodeError("truncated JPEG (no end-of-image marker)");
  thread_local JpegErr err;
  thread_local std::vector<uint8_t> cmyk_row;
  if (const char* msg = jpeg_decode(data, size, scale_num, region, out, &err, &cmyk_row)) {
    throw DecodeError(std::string("corrupt JPEG: ") + msg);
  }
}

// --- PNG (libpng's simplified API): always to RGBA, then alpha dropped (Pillow's convert("RGB")
// drops alpha too, it does not composite).
void decode_png(const uint8_t* data, size_t size, const Region* region, RgbRegion* out) {
  png_image img;
  std::memset(&img, 0, sizeof img);
  img.version = PNG_IMAGE_VERSION;
  if (!png_image_begin_read_from_memory(&img, data, size)) {
    throw DecodeError(std::string("corrupt PNG: ") + img.message);
  }
  img.format = PNG_FORMAT_RGBA;
  thread_local std::vector<uint8_t> rgba;
  // A large image's buffer is not kept for the thread's lifetime (up to 716 MB at the limit).
  struct Shrink {
    std::vector<uint8_t>& v;
    ~Shrink() {
      if (v.capacity() > (size_t(64) << 20)) std::vector<uint8_t>().swap(v);
    }
  } shrink{rgba};
  try {
    rgba.resize(PNG_IMAGE_SIZE(img));
  } catch (const std::bad_alloc&) {
    png_image_free(&img);
    throw;
  }
  if (!png_image_finish_read(&img, nullptr, rgba.data(), 0, nullptr)) {
    const std::string msg = img.message;
    png_image_free(&img);
    throw DecodeError("corrupt PNG: " + msg);
  }
  const int W = int(img.width), H = int(img.height);
  Region r = region ? *region : Region{0, 0, W, H};
  r.x0 = std::max(r.x0, 0);
  r.y0 = std::max(r.y0, 0);
  r.x1 = std::min(r.x1, W);
  r.y1 = std::min(r.y1, H);
  if (r.x1 <= r.x0 || r.y1 <= r.y0) throw DecodeError("empty region");
  out->x0 = r.x0;
  out->y0 = r.y0;
  out->w = r.x1 - r.x0;
  out->h = r.y1 - r.y0;
  out->full_w = W;
  out->full_h = H;
  out->scale_num = 8;
  out->pixels.resize(size_t(out->w) * size_t(out->h) * 3);
  for (int y = 0; y < out->h; ++y) {
    const uint8_t* s = rgba.data() + (size_t(r.y0 + y) * size_t(W) + size_t(r.x0)) * 4;
    uint8_t* d = out->pixels.data() + size_t(y) * size_t(out->w) * 3;
    for (int x = 0; x < out->w; ++x, s += 4, d += 3) {
      d[0] = s[0];
      d[1] = s[1];
      d[2] = s[2];
    }
  }
}

uint32_t be32(const uint8_t* p) { return uint32_t(p[0]) << 24 | uint32_t(p[1]) << 16 | uint32_t(p[2]) << 8 | p[3]; }

}  // namespace

ImageFormat sniff_format(const uint8_t* p, size_t n) {
  if (n >= 3 && p[0] == 0xff && p[1] == 0xd8 && p[2] == 0xff) return ImageFormat::Jpeg;
  static const uint8_t png_sig[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (n >= 8 && std::memcmp(p, png_sig, 8) == 0) return ImageFormat::Png;
  return ImageFormat::Other;
}

ImageHeader read_header(const uint8_t* p, size_t n) {
  ImageHeader h;
  h.format = sniff_format(p, n);
  if (h.format == ImageFormat::Png) {
    // The IHDR chunk comes first: signature, length, "IHDR", width, height.
    if (n < 24 || std::memcmp(p + 12, "IHDR", 4) != 0) throw DecodeError("corrupt PNG: no IHDR chunk");
    h.width = int(be32(p + 16));
    h.height = int(be32(p + 20));
  } else if (h.format == ImageFormat::Jpeg) {
    // Walk the markers to the first start-of-frame (SOF0..SOF15 except DHT, JPG, DAC).
    size_t i = 2;
    while (true) {
      while (i < n && p[i] != 0xff) ++i;  // tolerate fill bytes
      while (i < n && p[i] == 0xff) ++i;
      if (i + 3 > n) throw DecodeError("corrupt JPEG: no frame header");
      const uint8_t m = p[i++];
      if (m == 0xd8 || (m >= 0xd0 && m <= 0xd7) || m == 0x01) continue;  // no length
      if (m == 0xd9 || m == 0xda) throw DecodeError("corrupt JPEG: no frame header before the scan");
      const size_t len = size_t(p[i]) << 8 | p[i + 1];
      if (len < 2 || i + len > n) throw DecodeError("truncated JPEG (a marker segment runs past the end)");
      if (m >= 0xc0 && m <= 0xcf && m != 0xc4 && m != 0xc8 && m != 0xcc) {
        if (len < 8) throw DecodeError("corrupt JPEG: short frame header");
        h.height = int(p[i + 3]) << 8 | p[i + 4];
        h.width = int(p[i + 5]) << 8 | p[i + 6];
        h.components = p[i + 7];
        h.progressive = m != 0xc0 && m != 0xc1;
        break;
      }
      i += len;
    }
  } else {
    throw DecodeError("not a JPEG or PNG image");
  }
  if (h.width <= 0 || h.height <= 0 || h.width > 65535 || h.height > 65535) {
    throw DecodeError("bad image size " + std::to_string(h.width) + "x" + std::to_string(h.height));
  }
  if (int64_t(h.width) * h.height > kMaxImagePixels) {
    throw DecodeError("image of " + std::to_string(h.width) + "x" + std::to_string(h.height) + " = " +
                      std::to_string(int64_t(h.width) * h.height) + " pixels, more than the " +
                      std::to_string(kMaxImagePixels) + " decoded (Pillow's decompression-bomb limit)");
  }
  return h;
}

bool jpeg_complete(const uint8_t* data, size_t size) { return has_eoi(data, size); }

int scaled_size(int size, int scale_num) { return (size * scale_num + 7) / 8; }

void decode_region(const uint8_t* data, size_t size, int scale_num, const Region& region, RgbRegion* out) {
  read_header(data, size);  // a bomb is refused before the decoder allocates for it
  switch (sniff_format(data, size)) {
    case ImageFormat::Jpeg: return decode_jpeg(data, size, scale_num, &region, out);
    case ImageFormat::Png:
      if (scale_num != 8) throw std::invalid_argument("decode_region: PNG has no scaled decoding");
      return decode_png(data, size, &region, out);
    case ImageFormat::Other: break;
  }
  throw DecodeError("not a JPEG or PNG image");
}

void decode_full(const uint8_t* data, size_t size, RgbRegion* out) {
  read_header(data, size);
  switch (sniff_format(data, size)) {
    case ImageFormat::Jpeg: return decode_jpeg(data, size, 8, nullptr, out);
    case ImageFormat::Png: return decode_png(data, size, nullptr, out);
    case ImageFormat::Other: break;
  }
  throw DecodeError("not a JPEG or PNG image");
}

}  // namespace worker
