// The transforms' geometry: RandomResizedCrop's boxes (in bounds, a pure function of the sample,
// torchvision's distribution of areas and ratios), the evaluation plan, the resize weights and
// DCT-scale choice; render bit for bit against the filter evaluated one value at a time. (Pixels
// against torchvision and Pillow: check_data.py transforms.)
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "worker/data/image_source.h"
#include "worker/data/transform.h"

using namespace worker;

TEST_CASE("RandomResizedCrop: in bounds, deterministic, torchvision's area and ratio ranges") {
  int differ = 0;
  for (int64_t i = 0; i < 4000; ++i) {
    const int W = 100 + int(i % 400), H = 80 + int((i * 7) % 300);
    const CropBox b = random_resized_crop(W, H, 0.08, 1.0, 3.0 / 4, 4.0 / 3, 7, 2, i);
    REQUIRE(b.width >= 1);
    REQUIRE(b.height >= 1);
    REQUIRE(b.left >= 0);
    REQUIRE(b.top >= 0);
    REQUIRE(b.left + b.width <= W);
    REQUIRE(b.top + b.height <= H);
    const CropBox again = random_resized_crop(W, H, 0.08, 1.0, 3.0 / 4, 4.0 / 3, 7, 2, i);
    REQUIRE((again.left == b.left && again.top == b.top && again.width == b.width && again.height == b.height));
    const CropBox other = random_resized_crop(W, H, 0.08, 1.0, 3.0 / 4, 4.0 / 3, 7, 3, i);
    differ += other.left != b.left || other.width != b.width;
  }
  CHECK(differ > 3900);  // another epoch draws other boxes
}

TEST_CASE("RandomResizedCrop: the area distribution of torchvision's algorithm") {
  // On a square image a try is kept iff scale <= min(r, 1/r) (r: the ratio, log-uniform), and
  // every try draws alike, so the kept area fraction has mean E[s; s <= m(r)] / P(s <= m(r)),
  // s ~ U[0.08, 1]: integrated over r here, independently of the sampler.
  double num = 0, den = 0;
  for (int k = 0; k < 10000; ++k) {
    const double r = std::exp(std::log(0.75) + (k + 0.5) / 10000 * (std::log(4.0 / 3) - std::log(0.75)));
    const double m = std::min(r, 1 / r);
    num += (m * m - 0.08 * 0.08) / 2;
    den += m - 0.08;
  }
  const double expected = num / den;
  double sum = 0, sum2 = 0;
  const int n = 20000;
  for (int64_t i = 0; i < n; ++i) {
    const CropBox b = random_resized_crop(1000, 1000, 0.08, 1.0, 3.0 / 4, 4.0 / 3, 11, 0, i);
    const double f = double(b.width) * b.height / 1e6;
    sum += f;
    sum2 += f * f;
  }
  const double mean = sum / n, sd = std::sqrt(sum2 / n - mean * mean);
  CHECK(mean == Approx(expected).margin(5 * sd / std::sqrt(double(n))));  // 5 standard errors
}

TEST_CASE("RandomResizedCrop fallback: the centre crop clamped to the ratio range") {
  // A 1000x10 strip: no box of ratio <= 4/3 and area >= 8 % fits in 10 tries.
  const CropBox b = random_resized_crop(1000, 10, 0.5, 1.0, 3.0 / 4, 4.0 / 3, 1, 0, 0);
  CHECK(b.height == 10);
  CHECK(b.width == 13);  // round(10 * 4/3)
  CHECK(b.left == (1000 - 13) / 2);
}

TEST_CASE("flip: probability p, a function of the sample") {
  int flips = 0;
  for (int64_t i = 0; i < 10000; ++i) flips += random_flip(0.5, 3, 0, i);
  CHECK(flips == Approx(5000).margin(250));
  for (int64_t i = 0; i < 100; ++i) {
    CHECK_FALSE(random_flip(0.0, 3, 0, i));
    CHECK(random_flip(1.0, 3, 0, i));
  }
}

TEST_CASE("eval plan: Resize(256) of the short side, then CenterCrop(224), as torchvision") {
  TransformConfig tf;
  CHECK(tf.resize_size() == 256);
  const SamplePlan p = plan_eval(500, 375, tf);
  CHECK(p.out_h == 256);
  CHECK(p.out_w == 341);  // int(256 * 500 / 375)
  CHECK(p.win_x == 58);   // int(round((341 - 224) / 2.0)) = round(58.5) = 58 (half to even)
  CHECK(p.win_y == 16);
  tf.size = 32;
  CHECK(tf.resize_size() == 37);  // round(32 * 256 / 224) = round(36.57)
}

TEST_CASE("resize weights: normalised, inside the box, Pillow's support") {
  for (int out : {7, 32, 224}) {
    for (int in : {5, 31, 224, 500}) {
      const AxisWeights a = axis_weights(0, in, in, out, 0, out);
      for (int i = 0; i < out; ++i) {
        double s = 0;
        for (int k = 0; k < a.count[size_t(i)]; ++k) s += a.w[size_t(i) * size_t(a.ksize) + size_t(k)];
        REQUIRE(s == Approx(1.0).epsilon(1e-6));
        REQUIRE(a.first[size_t(i)] >= 0);
        REQUIRE(a.first[size_t(i)] + a.count[size_t(i)] <= in);
        REQUIRE(a.count[size_t(i)] <= a.ksize);
      }
    }
  }
}

TEST_CASE("DCT scaling: only when the box keeps at least the output's pixels") {
  SamplePlan p;
  p.box_x1 = 500;
  p.box_y1 = 400;
  p.out_w = p.out_h = p.size = 224;
  CHECK(plan_geometry(p, ImageFormat::Jpeg, 500, 400, true).scale_num == 8);  // 250 x 200 at 1/2: too few rows
  p.box_y1 = 460;
  CHECK(plan_geometry(p, ImageFormat::Jpeg, 500, 460, true).scale_num == 4);
  CHECK(plan_geometry(p, ImageFormat::Jpeg, 500, 460, false).scale_num == 8);
  CHECK(plan_geometry(p, ImageFormat::Png, 500, 460, true).scale_num == 8);
  p.out_w = p.out_h = p.size = 32;
  const Geometry g = plan_geometry(p, ImageFormat::Jpeg, 500, 460, true);
  CHECK(g.scale_num == 1);  // at 1/8 still 63 x 58 >= 32
}

TEST_CASE("substitutes: the next good sample of the micro-batch, cyclically") {
  CHECK(substitutes({0, 1, 0, 1}, "") == std::vector<int>{0, 2, 2, 0});
  CHECK_THROWS(substitutes({1, 1}, "x"));
}

// --- render against its definition, bit for bit: the filter one value at a time, as Pillow orders
// it (horizontal pass, then vertical, then normalisation), each sum from 0 in the taps' order and
// each product and sum rounded to float. The CPU loader is the GPU loader's oracle, so a faster
// render must not move a single bit (an FMA, a reordered sum or a tap out of place would).
namespace {

uint16_t bf16_reference(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// binary16 by the compiler's own conversion (GCC/Clang's _Float16: round to nearest even).
uint16_t f16_reference(float f) {
  const _Float16 h = static_cast<_Float16>(f);
  uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
}

std::vector<uint8_t> render_reference(const RgbRegion& src, const Geometry& g, const SamplePlan& p,
                                      const TransformConfig& tf, DType dtype) {
  const int n = p.size, rows = g.region.y1 - g.region.y0;
  std::vector<float> h(size_t(rows) * size_t(n) * 3);
  for (int r = 0; r < rows; ++r) {
    for (int i = 0; i < n; ++i) {
      for (int c = 0; c < 3; ++c) {
        float a = 0;
        for (int k = 0; k < g.x.count[size_t(i)]; ++k) {
          const int x = g.lo_x + g.x.first[size_t(i)] + k;
          a += g.x.w[size_t(i) * size_t(g.x.ksize) + size_t(k)] * src.row(g.region.y0 + r)[size_t(x - src.x0) * 3 + size_t(c)];
        }
        h[(size_t(r) * size_t(n) + size_t(i)) * 3 + size_t(c)] = a;
      }
    }
  }
  std::vector<uint8_t> out(size_t(n) * size_t(n) * 3 * dtype_size(dtype));
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < n; ++i) {
      for (int c = 0; c < 3; ++c) {
        float a = 0;
        for (int k = 0; k < g.y.count[size_t(j)]; ++k) {
          const int r = g.lo_y + g.y.first[size_t(j)] + k - g.region.y0;
          a += g.y.w[size_t(j) * size_t(g.y.ksize) + size_t(k)] * h[(size_t(r) * size_t(n) + size_t(i)) * 3 + size_t(c)];
        }
        const float v = a * (1.0f / (255.0f * tf.std[c])) + -tf.mean[c] / tf.std[c];
        const size_t at = (size_t(j) * size_t(n) + size_t(p.flip ? n - 1 - i : i)) * 3 + size_t(c);
        if (dtype == DType::F32) {
          std::memcpy(out.data() + at * 4, &v, 4);
        } else {
          const uint16_t b = dtype == DType::BF16 ? bf16_reference(v) : f16_reference(v);
          std::memcpy(out.data() + at * 2, &b, 2);
        }
      }
    }
  }
  return out;
}

// A decoded region covering the plan's taps with a few pixels more on each side (as the JPEG
// decoder's margin and iMCU widening give), filled with noise that includes 0 and 255.
RgbRegion noise_region(const Geometry& g, int width, int height, uint64_t seed) {
  RgbRegion r;
  r.scale_num = g.scale_num;
  r.full_w = scaled_size(width, g.scale_num);
  r.full_h = scaled_size(height, g.scale_num);
  r.x0 = std::max(0, g.region.x0 - 5);
  r.y0 = std::max(0, g.region.y0 - 3);
  r.w = std::min(r.full_w, g.region.x1 + 7) - r.x0;
  r.h = std::min(r.full_h, g.region.y1 + 2) - r.y0;
  r.pixels.resize(size_t(r.w) * size_t(r.h) * 3);
  for (auto& v : r.pixels) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    const int b = int(seed >> 56);
    v = uint8_t(b < 16 ? 0 : b > 240 ? 255 : b);
  }
  return r;
}

}  // namespace

TEST_CASE("store_f16: binary16 rounded to nearest even, as the compiler converts, for every kind of value") {
  std::vector<float> in;
  // Every 4,099th bit pattern (both signs, normals, subnormals, infinities, NaNs) ...
  for (uint64_t u = 0; u < (uint64_t(1) << 32); u += 4099) {
    const uint32_t b = uint32_t(u);
    float f;
    std::memcpy(&f, &b, 4);
    in.push_back(f);
  }
  // ... and the edges: ties at each end of the ranges, the overflow threshold, the subnormal halves.
  for (float f : {0.0f, -0.0f, 65504.0f, 65519.99f, 65520.0f, -65520.0f, 6.1035156e-05f, 6.1035152e-05f,
                  5.9604645e-08f, 2.9802322e-08f, 2.9802326e-08f, 8.940697e-08f, 1.0f + 1.0f / 2048, 1.0f + 3.0f / 2048,
                  2.75f, -2.1179f, 1e-20f, 1e20f})
    in.push_back(f);
  for (size_t len : {in.size(), size_t(1), size_t(3), size_t(7), size_t(13)}) {  // the 8-wide body and the tail
    std::vector<uint16_t> got(len + 1, 0xABCD);
    store_f16(in.data(), len, got.data());
    size_t bad = 0, first = len;
    for (size_t i = 0; i < len; ++i) {
      const uint16_t want = f16_reference(in[i]);
      const bool nan = (want & 0x7c00u) == 0x7c00u && (want & 0x3ffu);
      const bool same = nan ? ((got[i] & 0x7c00u) == 0x7c00u && (got[i] & 0x3ffu) && (got[i] & 0x8000u) == (want & 0x8000u))
                            : got[i] == want;
      if (!same && bad++ == 0) first = i;
    }
    INFO(len << " values: " << bad << " differ, the first at " << first
              << (first < len ? " (" + std::to_string(in[first]) + ")" : std::string()));
    CHECK(bad == 0);
    CHECK(got[len] == 0xABCD);  // nothing written past the end
  }
}

TEST_CASE("render: bit-identical to the filter evaluated one value at a time (fp32, bf16, fp16)") {
  RenderScratch scratch;  // one for every case, as a loader thread keeps it: a stale buffer must not leak in
  int cases = 0, flipped = 0, scaled = 0, padded = 0;
  for (int64_t i = 0; i < 96; ++i) {
    TransformConfig tf;
    tf.size = std::vector<int>{224, 17, 32, 5, 64, 130}[size_t(i % 6)];
    const int W = 60 + int((i * 97) % 900), H = 50 + int((i * 61) % 700);
    std::vector<SamplePlan> plans;
    tf.augment = Augment::Standard;
    plans.push_back(plan_train(W, H, tf, 5, 0, i));
    plans.push_back(plan_eval(W, H, tf));
    tf.augment = Augment::PadCrop;  // windows partly outside the image: outputs without taps
    tf.padding = 4 + int(i % 3) * 20;
    plans.push_back(plan_train(W, H, tf, 5, 0, i));
    plans.push_back(plan_eval(W, H, tf));
    for (const SamplePlan& p : plans) {
      const Geometry g = plan_geometry(p, ImageFormat::Jpeg, W, H, i % 4 != 0);
      if (g.region.x1 <= g.region.x0 || g.region.y1 <= g.region.y0) continue;  // a window wholly outside
      const RgbRegion src = noise_region(g, W, H, uint64_t(i));
      for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
        const std::vector<uint8_t> want = render_reference(src, g, p, tf, dt);
        std::vector<uint8_t> got(want.size() + 8, 0xAB);  // + a guard: nothing written past the image
        render(src, g, p, tf, dt, got.data(), &scratch);
        size_t first_diff = want.size();
        for (size_t b = 0; b < want.size() && first_diff == want.size(); ++b) first_diff = got[b] != want[b] ? b : first_diff;
        INFO("image " << W << "x" << H << ", size " << tf.size << ", box " << p.box_x0 << "," << p.box_y0 << " - "
                      << p.box_x1 << "," << p.box_y1 << ", window " << p.win_x << "," << p.win_y << ", flip " << p.flip
                      << ", DCT scale " << g.scale_num << "/8, " << dtype_name(dt) << ": first differing byte "
                      << first_diff << " of " << want.size());
        REQUIRE(first_diff == want.size());
        REQUIRE(std::all_of(got.end() - 8, got.end(), [](uint8_t b) { return b == 0xAB; }));
        ++cases;
      }
      flipped += p.flip;
      scaled += g.scale_num != 8;
      padded += std::find(g.x.count.begin(), g.x.count.end(), 0) != g.x.count.end();
    }
  }
  CHECK(cases > 700);
  CHECK(flipped > 40);  // every branch of the faster code was taken
  CHECK(scaled > 40);
  CHECK(padded > 10);
}
