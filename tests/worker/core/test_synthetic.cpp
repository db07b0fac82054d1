// The synthetic data generator: deterministic, in range, roughly N(0, 1), class-dependent.
#include <catch2/catch.hpp>

#include <cmath>
#include <set>

#include "worker/core/synthetic.h"

using namespace worker;

TEST_CASE("synthetic: labels are deterministic, in range and spread over all classes", "[synthetic]") {
  std::set<int32_t> seen;
  for (int64_t s = 0; s < 2000; ++s) {
    const int32_t l = synth::label(9, s, 10);
    REQUIRE(l >= 0);
    REQUIRE(l < 10);
    REQUIRE(l == synth::label(9, s, 10));
    seen.insert(l);
  }
  CHECK(seen.size() == 10);
  int differ = 0;
  for (int64_t s = 0; s < 100; ++s) differ += synth::label(9, s, 1000) != synth::label(10, s, 1000);
  CHECK(differ > 90);
}

TEST_CASE("synthetic: random pixels are ~N(0, 1)", "[synthetic]") {
  double s = 0, s2 = 0;
  const int n = 200000;
  float mx = 0;
  for (int e = 0; e < n; ++e) {
    const double v = synth::pixel(DataKind::Random, 1, e % 50, 32, 10, e / 50);
    s += v;
    s2 += v * v;
    mx = std::max(mx, float(std::abs(v)));
  }
  CHECK(std::abs(s / n) < 0.01);
  CHECK(s2 / n == Approx(1.0).epsilon(0.02));
  CHECK(mx <= 3.47f);  // Irwin-Hall(4) is bounded by 2 sqrt(3)
  CHECK(synth::pixel(DataKind::Random, 1, 3, 32, 10, 7) == synth::pixel(DataKind::Random, 1, 3, 32, 10, 7));
  CHECK(synth::pixel(DataKind::Random, 1, 3, 32, 10, 7) != synth::pixel(DataKind::Random, 1, 4, 32, 10, 7));
}

TEST_CASE("synthetic: learnable images carry their class's channel means", "[synthetic]") {
  // Average many images of one class: the per-channel mean approaches class_mean (the stripe
  // averages out over the image), and differs between classes.
  const int size = 16, classes = 4;
  const uint64_t seed = 3;
  std::vector<std::vector<double>> mean(classes, std::vector<double>(3, 0.0));
  std::vector<int> count(classes, 0);
  for (int64_t s = 0; s < 400; ++s) {
    const int32_t c = synth::label(seed, s, classes);
    ++count[size_t(c)];
    for (int64_t e = 0; e < size * size * 3; ++e)
      mean[size_t(c)][size_t(e % 3)] += synth::pixel(DataKind::Learnable, seed, s, size, classes, e);
  }
  for (int c = 0; c < classes; ++c) {
    REQUIRE(count[size_t(c)] > 20);
    for (int ch = 0; ch < 3; ++ch) {
      const double m = mean[size_t(c)][size_t(ch)] / (count[size_t(c)] * size * size);
      CHECK(m == Approx(synth::class_mean(seed, c, ch)).margin(0.15));
    }
  }
  double spread = 0;
  for (int ch = 0; ch < 3; ++ch) spread += std::abs(synth::class_mean(seed, 0, ch) - synth::class_mean(seed, 1, ch));
  CHECK(spread > 0.1);
}
