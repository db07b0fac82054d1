// Finite-difference helpers for the CPU layer tests.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <vector>

namespace gradcheck {

inline std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

// Sum of out * r in double: the scalar whose gradient with respect to out is r.
inline double dot(const float* out, const std::vector<float>& r) {
  double s = 0;
  for (size_t i = 0; i < r.size(); ++i) s += double(out[i]) * r[i];
  return s;
}

// Compares the analytic gradient `ana` of `loss` with respect to `v` against central
// differences at up to `max_checks` evenly spread elements. Error measure: max |num - ana|
// over the checked elements, divided by max |ana| over the whole tensor.
inline double check(const char* what, std::vector<float>& v, const std::vector<float>& ana,
                    const std::function<double()>& loss, float eps, double tol,
                    size_t max_checks = 400) {
  REQUIRE(v.size() == ana.size());
  double scale = 1e-12;
  for (float a : ana) scale = std::max(scale, double(std::abs(a)));
  const size_t stride = std::max<size_t>(1, v.size() / max_checks);
  double worst = 0;
  size_t worst_i = 0;
  double worst_num = 0;
  for (size_t i = 0; i < v.size(); i += stride) {
    const float o = v[i];
    const float up = o + eps, down = o - eps;
    v[i] = up;
    const double lp = loss();
    v[i] = down;
    const double lm = loss();
    v[i] = o;
    const double num = (lp - lm) / (double(up) - double(down));
    const double err = std::abs(num - ana[i]) / scale;
    if (err > worst) {
      worst = err;
      worst_i = i;
      worst_num = num;
    }
  }
  INFO(what << ": worst element " << worst_i << " numeric " << worst_num << " analytic "
            << ana[worst_i] << " (max |analytic| " << scale << "), rel err " << worst);
  CHECK(worst < tol);
  return worst;
}

}  // namespace gradcheck
