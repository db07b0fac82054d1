#include "worker/data/transform.h"

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cmath>
#include <cstring>
#include <stdexcept>

namespace worker {

namespace {

// --- Random numbers: one splitmix64 stream per (seed, epoch, index, purpose).
uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

struct Rng {
  uint64_t state;
  Rng(uint64_t seed, int64_t epoch, int64_t index, uint64_t purpose)
      : state(mix(mix(mix(seed + 0x9e3779b97f4a7c15ULL) ^ uint64_t(epoch)) ^ uint64_t(index)) ^ purpose) {}
  uint64_t next() { return mix(state += 0x9e3779b97f4a7c15ULL); }
  double uniform(double a, double b) { return a + (b - a) * double(next() >> 11) * 0x1.0p-53; }
  int64_t below(int64_t n) {  // uniform in [0, n), no modulo bias
    const uint64_t un = uint64_t(n), limit = UINT64_MAX - UINT64_MAX % un;
    uint64_t r;
    do r = next(); while (r >= limit);
    return int64_t(r % un);
  }
};

constexpr uint64_t kCropStream = 0x43524f50ULL, kFlipStream = 0x464c4950ULL;

// The image at its own size with the window at (x, y) of it: pad-crop's plans.
SamplePlan native_window(int width, int height, int size, int x, int y) {
  SamplePlan p;
  p.box_x1 = p.out_w = width;
  p.box_y1 = p.out_h = height;
  p.win_x = x;
  p.win_y = y;
  p.size = size;
  return p;
}

// torchvision's pad_if_needed: a padded side shorter than the crop is padded again by the
// difference on both ends. Returns the extra padding of each end.
int pad_if_needed(int padded, int size) { return padded < size ? size - padded : 0; }

// Python's round(): half to even (the default rounding mode of nearbyint).
int pyround(double v) { return int(std::nearbyint(v)); }

uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return uint16_t(u >> 16);
}

// --- render's arithmetic, four lanes at a time (GCC/Clang vector extensions: SSE on x86-64,
// NEON on AArch64). Every lane does the multiplies and adds of the scalar definition in the
// same order, so the results are bit-identical to it; the file is built with
// -ffp-contract=off, as a fused multiply-add would round once where the definition rounds twice.
// Taps beyond an output's own count get weight 0 where a loop of one length serves a whole row:
// the sums start at +0 and add products >= +0 of finite values, and x + 0 == x for those.
typedef float v4f __attribute__((vector_size(16)));
typedef uint32_t v4u __attribute__((vector_size(16)));
typedef uint16_t v8h __attribute__((vector_size(16)));

v4f load4(const float* p) {
  v4f v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
void store4(float* p, v4f v) { std::memcpy(p, &v, sizeof v); }

// At least n values: a buffer that only grows is not cleared for every image (resize would
// zero what a smaller image left out).
void grow(std::vector<float>* v, size_t n) {
  if (v->size() < n) v->resize(n);
}

// The most taps any output pixel of the axis has.
int max_taps(const AxisWeights& a) {
  int m = 0;
  for (int c : a.count) m = std::max(m, c);
  return m;
}

// R rows of the horizontal pass (row q's source at line + q * line_stride, its output at out + q
// * out_stride): output pixel o = sum over k < taps of weights[o][k] * line[at[o] + 3k ..], the
// weights already 4 lanes wide and each loaded once for the R rows (K > 0: taps == K, the loop
// unrolled). A pixel is read as 4 floats (r, g, b, the next pixel's r) and stored as 4: the
// fourth lane is never kept (o ascends, so the next pixel's store overwrites it; the last one's
// lands in the float after each output row).
template <int K, int R>
void horizontal_rows(const float* line, size_t line_stride, const int* at, const float* weights, int n, int taps,
                     float* out, size_t out_stride) {
  if (K > 0) taps = K;
  for (int o = 0; o < n; ++o) {
    const float* px = line + at[o];
    const float* w = weights + size_t(o) * size_t(taps) * 4;
    v4f acc[R] = {};
    for (int k = 0; k < taps; ++k) {
      const v4f wk = load4(w + size_t(k) * 4);
      for (int q = 0; q < R; ++q) acc[q] += load4(px + size_t(q) * line_stride + size_t(k) * 3) * wk;
    }
    for (int q = 0; q < R; ++q) store4(out + size_t(q) * out_stride + size_t(o) * 3, acc[q]);
  }
}

// horizontal_rows with the common tap counts unrolled: 2-3 below 2x downscaling, 3-5 after DCT
// scaling.
template <int R>
void horizontal(const float* line, size_t line_stride, const int* at, const float* weights, int n, int taps,
                float* out, size_t out_stride) {
  switch (taps) {
    case 2: return horizontal_rows<2, R>(line, line_stride, at, weights, n, taps, out, out_stride);
    case 3: return horizontal_rows<3, R>(line, line_stride, at, weights, n, taps, out, out_stride);
    case 4: return horizontal_rows<4, R>(line, line_stride, at, weights, n, taps, out, out_stride);
    case 5: return horizontal_rows<5, R>(line, line_stride, at, weights, n, taps, out, out_stride);
    default: return horizontal_rows<0, R>(line, line_stride, at, weights, n, taps, out, out_stride);
  }
}

// One row of the vertical pass, normalised: out[e] = sum over k < taps of w[k] * in[k * stride
// + e], then * scale + shift of channel e % 3 (K > 0: taps == K). Value e of a row is channel
// e % 3, so 12 values are 4 lanes x 3 with the channels' constants at phases 0, 4, 8.
template <int K>
void vertical_row(const float* in, size_t stride, const float* w, int taps, size_t len, const float scale[3],
                  const float shift[3], float* out) {
  if (K > 0) taps = K;
  const v4f sc[3] = {{scale[0], scale[1], scale[2], scale[0]},
                     {scale[1], scale[2], scale[0], scale[1]},
                     {scale[2], scale[0], scale[1], scale[2]}};
  const v4f sh[3] = {{shift[0], shift[1], shift[2], shift[0]},
                     {shift[1], shift[2], shift[0], shift[1]},
                     {shift[2], shift[0], shift[1], shift[2]}};
  size_t e = 0;
  for (; e + 12 <= len; e += 12) {
    for (int ph = 0; ph < 3; ++ph) {
      v4f acc = {0, 0, 0, 0};
      for (int k = 0; k < taps; ++k) acc += load4(in + size_t(k) * stride + e + size_t(ph) * 4) * w[k];
      store4(out + e + size_t(ph) * 4, acc * sc[ph] + sh[ph]);
    }
  }
  for (; e < len; ++e) {  // a row of 3n values, n not a multiple of 4: its last 3, 6 or 9
    float acc = 0;
    for (int k = 0; k < taps; ++k) acc += in[size_t(k) * stride + e] * w[k];
    out[e] = acc * scale[e % 3] + shift[e % 3];
  }
}

// vertical_row with the common tap counts unrolled.
void vertical(const float* in, size_t stride, const float* w, int taps, size_t len, const float scale[3],
              const float shift[3], float* out) {
  switch (taps) {
    case 2: return vertical_row<2>(in, stride, w, taps, len, scale, shift, out);
    case 3: return vertical_row<3>(in, stride, w, taps, len, scale, shift, out);
    case 4: return vertical_row<4>(in, stride, w, taps, len, scale, shift, out);
    case 5: return vertical_row<5>(in, stride, w, taps, len, scale, shift, out);
    default: return vertical_row<0>(in, stride, w, taps, len, scale, shift, out);
  }
}

// to_bf16 of each value, 8 at a time: the rounding in 32-bit lanes, then the high halves of two
// registers' lanes gathered into one (a NaN keeps its high half with the quiet bit set).
void store_bf16(const float* in, size_t len, uint16_t* out) {
  const auto round = [](const float* f) {
    v4u u;
    std::memcpy(&u, f, sizeof u);
    const v4u nan = (u & 0x7fffffffu) > 0x7f800000u;  // all ones where NaN
    const v4u rounded = u + 0x7fffu + ((u >> 16) & 1u);
    v8h h;
    const v4u r = (nan & (u | 0x400000u)) | (~nan & rounded);
    std::memcpy(&h, &r, sizeof h);
    return h;
  };
  size_t e = 0;
  for (; e + 8 <= len; e += 8) {
    const v8h h = __builtin_shufflevector(round(in + e), round(in + e + 4), 1, 3, 5, 7, 9, 11, 13, 15);
    std::memcpy(out + e, &h, sizeof h);
  }
  for (; e < len; ++e) out[e] = to_bf16(in[e]);
}

}  // namespace

// Round to nearest even, 4 lanes at a time, without branches (every case computed, one selected):
// normal results by rounding away the 13 low mantissa bits (the carry may reach the exponent, and
// from 65520 up the result is infinity), results below 2^-14 by a float addition of 0.5, whose own
// rounding to nearest even leaves the subnormal half's bits in the low mantissa; NaN stays NaN.
void store_f16(const float* in, size_t len, uint16_t* out) {
  const auto convert = [](const float* f) {
    v4u x;
    std::memcpy(&x, f, sizeof x);
    const v4u sign = (x >> 16) & 0x8000u;
    const v4u a = x & 0x7fffffffu;
    const v4u normal = (a + ((uint32_t(15 - 127) << 23) + 0xfffu) + ((a >> 13) & 1u)) >> 13;
    v4f fa;
    std::memcpy(&fa, &a, sizeof fa);
    fa += 0.5f;
    v4u sub;
    std::memcpy(&sub, &fa, sizeof sub);
    sub -= 0x3f000000u;
    const v4u is_sub = a < 0x38800000u, is_inf = a >= 0x477ff000u, is_nan = a > 0x7f800000u;
    v4u r = (is_sub & sub) | (~is_sub & normal);
    r = (is_inf & 0x7c00u) | (~is_inf & r);
    r = (is_nan & 0x7e00u) | (~is_nan & r);
    return r | sign;
  };
  size_t e = 0;
  for (; e + 8 <= len; e += 8) {
    const v4u lo = convert(in + e), hi = convert(in + e + 4);
    v8h l, h;
    std::memcpy(&l, &lo, sizeof l);
    std::memcpy(&h, &hi, sizeof h);
    const v8h packed = __builtin_shufflevector(l, h, 0, 2, 4, 6, 8, 10, 12, 14);  // each lane's low half
    std::memcpy(out + e, &packed, sizeof packed);
  }
  for (; e < len; e += 4) {  // the rest, through a zero-padded group of four
    float f[4] = {0, 0, 0, 0};
    const size_t k = std::min<size_t>(4, len - e);
    std::memcpy(f, in + e, k * sizeof(float));
    const v4u r = convert(f);
    for (size_t i = 0; i < k; ++i) out[e + i] = uint16_t(r[i]);
  }
}

int TransformConfig::resize_size() const { return std::max(size, pyround(size * 256.0 / 224.0)); }

CropBox random_resized_crop(int width, int height, double scale_min, double scale_max, double ratio_min,
                            double ratio_max, uint64_t seed, int64_t epoch, int64_t index) {
  Rng rng(seed, epoch, index, kCropStream);
  const double area = double(width) * double(height);
  const double lr0 = std::log(ratio_min), lr1 = std::log(ratio_max);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target = area * rng.uniform(scale_min, scale_max);
    const double aspect = std::exp(rng.uniform(lr0, lr1));
    const int w = pyround(std::sqrt(target * aspect));
    const int h = pyround(std::sqrt(target / aspect));
    if (0 < w && w <= width && 0 < h && h <= height) {
      CropBox b;
      b.top = int(rng.below(height - h + 1));
      b.left = int(rng.below(width - w + 1));
      b.height = h;
      b.width = w;
      return b;
    }
  }
  // torchvision's fallback: the centre crop, clamped to the ratio range.
  const double in_ratio = double(width) / double(height);
  int w = width, h = height;
  if (in_ratio < ratio_min) {
    h = pyround(w / ratio_min);
  } else if (in_ratio > ratio_max) {
    w = pyround(h * ratio_max);
  }
  return CropBox{(height - h) / 2, (width - w) / 2, h, w};
}

CropBox random_pad_crop(int width, int height, int size, int padding, uint64_t seed, int64_t epoch, int64_t index) {
  const int pw = width + 2 * padding, ph = height + 2 * padding;
  const int w = pw + 2 * pad_if_needed(pw, size), h = ph + 2 * pad_if_needed(ph, size);
  Rng rng(seed, epoch, index, kCropStream);
  CropBox b;
  b.top = int(rng.below(h - size + 1));  // torch.randint(0, h - th + 1)
  b.left = int(rng.below(w - size + 1));
  b.height = b.width = size;
  return b;
}

bool random_flip(double p, uint64_t seed, int64_t epoch, int64_t index) {
  if (p <= 0) return false;
  Rng rng(seed, epoch, index, kFlipStream);
  return rng.uniform(0.0, 1.0) < p;
}

SamplePlan plan_train(int width, int height, const TransformConfig& tf, uint64_t seed, int64_t epoch, int64_t index) {
  if (tf.augment == Augment::None) return plan_eval(width, height, tf);
  if (tf.augment == Augment::PadCrop) {
    const CropBox c = random_pad_crop(width, height, tf.size, tf.padding, seed, epoch, index);
    return plan_pad_crop(width, height, tf, c.top, c.left, random_flip(tf.hflip, seed, epoch, index));
  }
  const CropBox b = random_resized_crop(width, height, tf.scale_min, tf.scale_max, tf.ratio_min, tf.ratio_max, seed,
                                        epoch, index);
  SamplePlan p;
  p.box_x0 = b.left;
  p.box_y0 = b.top;
  p.box_x1 = b.left + b.width;
  p.box_y1 = b.top + b.height;
  p.out_w = p.out_h = tf.size;
  p.size = tf.size;
  p.flip = random_flip(tf.hflip, seed, epoch, index);
  return p;
}

SamplePlan plan_pad_crop(int width, int height, const TransformConfig& tf, int top, int left, bool flip) {
  // The crop's corner in the padded image, in the image's own pixels: minus all padding.
  const int left_pad = tf.padding + pad_if_needed(width + 2 * tf.padding, tf.size);
  const int top_pad = tf.padding + pad_if_needed(height + 2 * tf.padding, tf.size);
  SamplePlan p = native_window(width, height, tf.size, left - left_pad, top - top_pad);
  p.flip = flip;
  return p;
}

SamplePlan plan_eval(int width, int height, const TransformConfig& tf) {
  if (tf.augment == Augment::PadCrop) {
    // CenterCrop(size) at the image's own size: padded by (size - w) // 2 on the left where the
    // image is narrower (then the crop starts at 0), else at int(round((w - size) / 2.0)).
    auto start = [&](int n) { return n < tf.size ? -((tf.size - n) / 2) : pyround((n - tf.size) / 2.0); };
    return native_window(width, height, tf.size, start(width), start(height));
  }
  // Resize(r): the short side to r, the long side to int(r * long / short) (torchvision).
  const int r = tf.resize_size();
  SamplePlan p;
  p.box_x1 = width;
  p.box_y1 = height;
  if (width <= height) {
    p.out_w = r;
    p.out_h = int(int64_t(r) * height / width);
  } else {
    p.out_h = r;
    p.out_w = int(int64_t(r) * width / height);
  }
  // CenterCrop(size): int(round((resized - size) / 2.0)).
  p.win_x = pyround((p.out_w - tf.size) / 2.0);
  p.win_y = pyround((p.out_h - tf.size) / 2.0);
  p.size = tf.size;
  return p;
}

AxisWeights axis_weights(double in0, double in1, int n_in, int out_full, int win0, int win_len) {
  // Pillow's precompute_coeffs (bilinear: support 1, filter 1 - |x|), in double as Pillow.
  const double scale = (in1 - in0) / out_full;
  const double filterscale = std::max(scale, 1.0);
  const double support = filterscale;
  AxisWeights a;
  a.ksize = int(std::ceil(support)) * 2 + 1;
  a.first.resize(size_t(win_len));
  a.count.resize(size_t(win_len));
  a.w.assign(size_t(win_len) * size_t(a.ksize), 0.0f);
  std::vector<double> k(size_t(a.ksize));
  for (int i = 0; i < win_len; ++i) {
    const double center = in0 + (win0 + i + 0.5) * scale;
    int xmin = int(center - support + 0.5);  // truncation toward zero, as Pillow's (int) cast
    if (xmin < 0) xmin = 0;
    int xmax = int(center + support + 0.5);
    if (xmax > n_in) xmax = n_in;
    xmax -= xmin;
    double ww = 0.0;
    for (int x = 0; x < xmax; ++x) {
      double t = (x + xmin - center + 0.5) / filterscale;
      t = t < 0 ? -t : t;
      k[size_t(x)] = t < 1.0 ? 1.0 - t : 0.0;
      ww += k[size_t(x)];
    }
    for (int x = 0; x < xmax; ++x) a.w[size_t(i) * size_t(a.ksize) + size_t(x)] = float(ww != 0.0 ? k[size_t(x)] / ww : 0.0);
    a.first[size_t(i)] = xmin;
    a.count[size_t(i)] = std::max(xmax, 0);
  }
  return a;
}

Geometry plan_geometry(const SamplePlan& p, ImageFormat format, int width, int height, bool dct_scaling) {
  Geometry g;
  const int bw = p.box_x1 - p.box_x0, bh = p.box_y1 - p.box_y0;
  if (dct_scaling && format == ImageFormat::Jpeg) {
    for (int s : {1, 2, 4}) {  // the scaled IDCTs libjpeg-turbo has SIMD code for
      if (int64_t(bw) * s >= int64_t(p.out_w) * 8 && int64_t(bh) * s >= int64_t(p.out_h) * 8) {
        g.scale_num = s;
        break;
      }
    }
  }
  const double s = g.scale_num / 8.0;
  const int sw = scaled_size(width, g.scale_num), sh = scaled_size(height, g.scale_num);
  g.lo_x = int(std::floor(p.box_x0 * s));
  g.lo_y = int(std::floor(p.box_y0 * s));
  const int hi_x = std::min(sw, int(std::ceil(p.box_x1 * s))), hi_y = std::min(sh, int(std::ceil(p.box_y1 * s)));
  g.x = axis_weights(p.box_x0 * s - g.lo_x, p.box_x1 * s - g.lo_x, hi_x - g.lo_x, p.out_w, p.win_x, p.size);
  g.y = axis_weights(p.box_y0 * s - g.lo_y, p.box_y1 * s - g.lo_y, hi_y - g.lo_y, p.out_h, p.win_y, p.size);
  auto span = [](const AxisWeights& a, int lo, int* r0, int* r1) {
    int a0 = INT32_MAX, a1 = 0;
    for (size_t i = 0; i < a.first.size(); ++i) {
      if (a.count[i] == 0) continue;
      a0 = std::min(a0, a.first[i]);
      a1 = std::max(a1, a.first[i] + a.count[i]);
    }
    if (a0 > a1) a0 = a1 = 0;
    *r0 = lo + a0;
    *r1 = lo + a1;
  };
  span(g.x, g.lo_x, &g.region.x0, &g.region.x1);
  span(g.y, g.lo_y, &g.region.y0, &g.region.y1);
  return g;
}

void render(const RgbRegion& src, const Geometry& g, const SamplePlan& p, const TransformConfig& tf, DType dtype,
            void* dst, RenderScratch* scratch) {
  if (src.scale_num != g.scale_num || src.x0 > g.region.x0 || src.y0 > g.region.y0 ||
      src.x0 + src.w < g.region.x1 || src.y0 + src.h < g.region.y1) {
    throw std::logic_error("render: the decoded region does not cover the plan's taps");
  }

  RenderScratch& sc = *scratch;
  const int n = p.size, rows = g.region.y1 - g.region.y0, cols = g.region.x1 - g.region.x0;
  const size_t row_len = size_t(n) * 3;
  // The horizontal weights as the loop reads them: output o (where the flip puts it) takes
  // htaps taps starting at float at[o] of the row, each weight 4 lanes wide, 0 beyond its count;
  // an output without taps (a pad-crop window beyond the image) reads pixel 0 with weight 0.
  const int htaps = max_taps(g.x);
  sc.at.resize(size_t(n));
  sc.weights.assign(size_t(n) * size_t(htaps) * 4, 0.0f);
  for (int o = 0; o < n; ++o) {
    const size_t i = size_t(p.flip ? n - 1 - o : o);
    const int count = g.x.count[i];
    sc.at[size_t(o)] = count > 0 ? (g.lo_x + g.x.first[i] - g.region.x0) * 3 : 0;
    for (int k = 0; k < count; ++k) {
      const float w = g.x.w[i * size_t(g.x.ksize) + size_t(k)];
      for (int l = 0; l < 4; ++l) sc.weights[(size_t(o) * size_t(htaps) + size_t(k)) * 4 + size_t(l)] = w;
    }
  }
  // Source rows in float, kRows of them, each followed by htaps black pixels and one float (the
  // padded taps' reads, the fourth lane of the last pixel's load); the horizontal pass's rows,
  // each followed by one float (the last pixel's 4-float store).
  constexpr int kRows = 4;  // rows sharing each weight's load: a quarter fewer loads than one at a time
  const size_t line_len = size_t(cols + htaps) * 3 + 1, hstride = row_len + 1;
  grow(&sc.line, line_len * kRows);
  for (int q = 0; q < kRows; ++q) {
    std::fill(sc.line.begin() + ptrdiff_t(line_len * size_t(q) + size_t(cols) * 3),
              sc.line.begin() + ptrdiff_t(line_len * size_t(q + 1)), 0.0f);
  }
  grow(&sc.rows, size_t(rows) * hstride);
  // Horizontal pass over the rows the vertical taps read. Its output is mirrored already when
  // flipping: the vertical pass is per element, so mirroring its input mirrors its output.
  for (int r = 0; r < rows;) {
    const int take = rows - r >= kRows ? kRows : 1;
    for (int q = 0; q < take; ++q) {
      const uint8_t* in = src.row(g.region.y0 + r + q) + size_t(g.region.x0 - src.x0) * 3;
      float* line = sc.line.data() + line_len * size_t(q);
      for (size_t e = 0; e < size_t(cols) * 3; ++e) line[e] = in[e];
    }
    float* out = sc.rows.data() + size_t(r) * hstride;
    if (take == kRows) {
      horizontal<kRows>(sc.line.data(), line_len, sc.at.data(), sc.weights.data(), n, htaps, out, hstride);
    } else {
      horizontal<1>(sc.line.data(), line_len, sc.at.data(), sc.weights.data(), n, htaps, out, hstride);
    }
    r += take;
  }
  // Vertical pass, then (v / 255 - mean) / std, into dst (fp32) or a row converted to bf16/fp16.
  float scale[3], shift[3];
  for (int c = 0; c < 3; ++c) {
    scale[c] = 1.0f / (255.0f * tf.std[c]);
    shift[c] = -tf.mean[c] / tf.std[c];
  }
  if (dtype != DType::F32) grow(&sc.out, row_len);
  for (int j = 0; j < n; ++j) {
    const float* w = g.y.w.data() + size_t(j) * size_t(g.y.ksize);
    const float* in = sc.rows.data() + size_t(g.lo_y + g.y.first[size_t(j)] - g.region.y0) * hstride;
    float* out = dtype == DType::F32 ? static_cast<float*>(dst) + size_t(j) * row_len : sc.out.data();
    vertical(in, hstride, w, g.y.count[size_t(j)], row_len, scale, shift, out);
    if (dtype == DType::BF16) store_bf16(out, row_len, static_cast<uint16_t*>(dst) + size_t(j) * row_len);
    if (dtype == DType::F16) store_f16(out, row_len, static_cast<uint16_t*>(dst) + size_t(j) * row_len);
  }
}

}  // namespace worker
