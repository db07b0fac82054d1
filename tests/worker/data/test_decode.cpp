// Decompression bombs (worker/data/decode.h): a file of a few hundred bytes whose header
// declares 20000 x 20000 pixels is refused from its header, before any buffer is allocated
// for its pixels. The files are real JPEG / PNG streams (only their dimensions patched, the
// PNG's checksum redone), so without the check libjpeg / libpng would accept them and the
// decoder would allocate 1.2 GB (RGB) / 1.6 GB (RGBA) for them.
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>
#include <vector>

#include <jpeglib.h>
#include <png.h>

#include "worker/data/decode.h"

using namespace worker;

// --- The largest single operator-new request of the test thread while `g_watch` is on: what a
// decode allocates for its pixels (std::vector) shows here. Replacing the global operator new
// is the standard's own hook; outside a watched region it only forwards to malloc.
namespace {
thread_local bool g_watch = false;
thread_local size_t g_largest = 0;
}  // namespace

void* operator new(size_t n) {
  if (g_watch && n > g_largest) g_largest = n;
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

namespace {

struct Watch {
  Watch() {
    g_largest = 0;
    g_watch = true;
  }
  ~Watch() { g_watch = false; }
};

std::vector<uint8_t> gradient(int w, int h, int channels) {
  std::vector<uint8_t> px(size_t(w) * size_t(h) * size_t(channels));
  for (size_t i = 0; i < px.size(); ++i) px[i] = uint8_t(i * 37 + 11);
  return px;
}

std::vector<uint8_t> small_jpeg() {
  const int w = 16, h = 16;
  const std::vector<uint8_t> px = gradient(w, h, 3);
  jpeg_compress_struct c;
  jpeg_error_mgr err;
  c.err = jpeg_std_error(&err);
  jpeg_create_compress(&c);
  unsigned char* buf = nullptr;
  unsigned long len = 0;
  jpeg_mem_dest(&c, &buf, &len);
  c.image_width = w;
  c.image_height = h;
  c.input_components = 3;
  c.in_color_space = JCS_RGB;
  jpeg_set_defaults(&c);
  jpeg_start_compress(&c, TRUE);
  for (int y = 0; y < h; ++y) {
    JSAMPROW row = const_cast<uint8_t*>(px.data() + size_t(y) * w * 3);
    jpeg_write_scanlines(&c, &row, 1);
  }
  jpeg_finish_compress(&c);
  jpeg_destroy_compress(&c);
  std::vector<uint8_t> out(buf, buf + len);
  std::free(buf);
  return out;
}

std::vector<uint8_t> small_png() {
  const int w = 4, h = 4;
  const std::vector<uint8_t> px = gradient(w, h, 3);
  png_image img{};
  img.version = PNG_IMAGE_VERSION;
  img.width = w;
  img.height = h;
  img.format = PNG_FORMAT_RGB;
  png_alloc_size_t len = 0;
  REQUIRE(png_image_write_to_memory(&img, nullptr, &len, 0, px.data(), 0, nullptr));
  std::vector<uint8_t> out(len);
  REQUIRE(png_image_write_to_memory(&img, out.data(), &len, 0, px.data(), 0, nullptr));
  out.resize(len);
  return out;
}

void put_be16(uint8_t* p, unsigned v) {
  p[0] = uint8_t(v >> 8);
  p[1] = uint8_t(v);
}
void put_be32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (24 - 8 * i));
}

uint32_t crc32(const uint8_t* p, size_t n) {  // PNG's CRC (ISO 3309), bit by bit
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
  }
  return c ^ 0xffffffffu;
}

// The JPEG's baseline frame header (SOF0) declares w x h.
std::vector<uint8_t> jpeg_declaring(int w, int h) {
  std::vector<uint8_t> f = small_jpeg();
  for (size_t i = 2; i + 9 < f.size(); ++i) {
    if (f[i] == 0xff && f[i + 1] == 0xc0) {
      put_be16(&f[i + 5], unsigned(h));
      put_be16(&f[i + 7], unsigned(w));
      return f;
    }
  }
  FAIL("libjpeg wrote no SOF0 marker");
  return f;
}

// The PNG's IHDR declares w x h, with its CRC recomputed (libpng checks it).
std::vector<uint8_t> png_declaring(uint32_t w, uint32_t h) {
  std::vector<uint8_t> f = small_png();
  REQUIRE(std::memcmp(&f[12], "IHDR", 4) == 0);
  put_be32(&f[16], w);
  put_be32(&f[20], h);
  put_be32(&f[29], crc32(&f[12], 4 + 13));
  return f;
}

}  // namespace

TEST_CASE("decompression bombs: a tiny JPEG or PNG declaring 20000x20000 is refused before allocating", "[data][decode]") {
  const std::vector<uint8_t> jpeg = jpeg_declaring(20000, 20000), png = png_declaring(20000, 20000);
  CHECK(jpeg.size() < 2000);
  CHECK(png.size() < 200);
  for (const std::vector<uint8_t>* f : {&jpeg, &png}) {
    INFO((f == &jpeg ? "JPEG" : "PNG"));
    const std::string want = "image of 20000x20000 = 400000000 pixels, more than the 178956970 decoded";
    CHECK_THROWS_WITH(read_header(f->data(), f->size()), Catch::Contains(want));
    RgbRegion out;
    {
      Watch w;
      CHECK_THROWS_AS(decode_full(f->data(), f->size(), &out), DecodeError);
      CHECK_THROWS_WITH(decode_region(f->data(), f->size(), 8, Region{0, 0, 224, 224}, &out),
                        Catch::Contains("decompression-bomb"));
      CHECK(g_largest < (size_t(1) << 20));  // the error's text, not the pixels'
    }
    CHECK(out.pixels.empty());
  }
}

TEST_CASE("decompression bombs: Pillow's limit, 2 x 89478485 pixels, is the largest image decoded", "[data][decode]") {
  // 13377 x 13377 = 178,944,129 pixels: under the limit, the header passes (not decoded here).
  // 13377 x 13378 = 178,957,506: over it by 536.
  for (bool png : {false, true}) {
    INFO((png ? "PNG" : "JPEG"));
    const auto declaring = [&](int w, int h) { return png ? png_declaring(uint32_t(w), uint32_t(h)) : jpeg_declaring(w, h); };
    const std::vector<uint8_t> under = declaring(13377, 13377), over = declaring(13377, 13378);
    CHECK(read_header(under.data(), under.size()).width == 13377);
    CHECK_THROWS_WITH(read_header(over.data(), over.size()), Catch::Contains("13377x13378 = 178957506 pixels"));
  }
  static_assert(kMaxImagePixels == 2 * 89478485, "PIL.Image.MAX_IMAGE_PIXELS is 89478485");
}

TEST_CASE("decode: the unpatched files decode (the bombs above differ only in their dimensions)", "[data][decode]") {
  const std::vector<uint8_t> jpeg = small_jpeg(), png = small_png();
  RgbRegion out;
  decode_full(jpeg.data(), jpeg.size(), &out);
  CHECK((out.w == 16 && out.h == 16 && out.pixels.size() == 16 * 16 * 3));
  decode_full(png.data(), png.size(), &out);
  CHECK((out.w == 4 && out.h == 4));
  CHECK(out.pixels == gradient(4, 4, 3));  // PNG is lossless
}
