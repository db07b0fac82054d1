// The transforms' geometry: RandomResizedCrop's boxes (in bounds, a pure function of the sample,
// torchvision's distribution of areas and ratios), the evaluation plan, the resize weights and
// DCT-scale choice. (Pixels against torchvision and Pillow: check_data.py transforms.)
#include <catch2/catch.hpp>

#include <cmath>

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
