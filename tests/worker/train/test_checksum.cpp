#include <catch2/catch.hpp>

#include <cmath>
#include <vector>

#include "worker/train/checksum.h"

TEST_CASE("the parameter checksum sees every bit", "[train][checksum]") {
  std::vector<float> a(1000, 0.25f);
  worker::ParamChecksum x, y, z;
  x.add(a.data(), a.size());
  y.add(a.data(), 500);
  y.add(a.data() + 500, 500);  // incremental == whole
  CHECK(x == y);
  CHECK(x.sum == 250.0);
  a[999] = std::nextafter(0.25f, 1.0f);
  z.add(a.data(), a.size());
  CHECK_FALSE(x == z);
  CHECK(x.str().rfind("fnv1a64=", 0) == 0);
}
