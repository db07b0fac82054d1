// The space-to-depth form's geometry (worker/gpu/space_to_depth.cu), on the host: which
// convolutions take it, and the equivalent stride-1 convolution each becomes. (The [gpu] tests
// check its kernels: the form against the plain convolution, and against the CPU backend.)
#include <catch2/catch.hpp>

#include "worker/gpu/kernels.h"

using worker::ConvDesc;
using namespace worker::gpu;

namespace {

ConvDesc conv(int n, int hw, int cin, int cout, int k, int stride, int pad) {
  const int ho = (hw + 2 * pad - k) / stride + 1;
  return ConvDesc{n, hw, hw, cin, cout, k, k, stride, pad, ho, ho};
}

// s2d_conv(d): a k x k stride-1 convolution without padding over `cin` channels of h x h, with d's output.
void check_rearranged(const ConvDesc& d, int cin, int k, int h) {
  const ConvDesc s = s2d_conv(d);
  CHECK(s.cin == cin);
  CHECK(s.kh == k);
  CHECK(s.stride == 1);
  CHECK(s.pad == 0);
  CHECK(s.h == h);
  CHECK(s.ho == d.ho);  // the same output
  CHECK(s.ho == s.h - s.kh + 1);
}

}  // namespace

TEST_CASE("space-to-depth: the ImageNet stem becomes a 4x4/1 over 16 channels", "[s2d]") {
  const ConvDesc d = conv(256, 224, 3, 64, 7, 2, 3);
  REQUIRE(s2d_applies(d));
  const S2dDesc g = s2d_desc(d);
  CHECK(g.b == 2);
  CHECK(g.kp == 4);
  CHECK(g.cs == 16);  // 2x2 blocks of 3 channels: 12, padded to 16
  CHECK(g.hs == 115);
  CHECK(d.ho == 112);
  check_rearranged(d, 16, 4, 115);
}

TEST_CASE("space-to-depth: the CIFAR stem keeps its 3x3/1, over 8 channels with the padding written out",
          "[s2d]") {
  const ConvDesc d = conv(128, 32, 3, 32, 3, 1, 1);
  REQUIRE(s2d_applies(d));
  const S2dDesc g = s2d_desc(d);
  CHECK(g.b == 1);
  CHECK(g.kp == 3);
  CHECK(g.cs == 8);
  CHECK(g.hs == 34);  // 32 + 2 x the padding of 1
  CHECK(d.ho == 32);
  check_rearranged(d, 8, 3, 34);
  // One input channel, a 5x5: still 8 channels, the padding of 2 written out.
  const S2dDesc g1 = s2d_desc(conv(4, 10, 1, 8, 5, 1, 2));
  CHECK(g1.cs == 8);
  CHECK(g1.hs == 14);
}

TEST_CASE("space-to-depth: only square convolutions of 3+ taps over 1-4 channels, stride 1 or 2", "[s2d]") {
  CHECK_FALSE(s2d_applies(conv(8, 56, 64, 64, 3, 1, 1)));  // enough channels for the engines as it is
  CHECK_FALSE(s2d_applies(conv(8, 56, 8, 64, 3, 2, 1)));
  CHECK_FALSE(s2d_applies(conv(8, 56, 3, 64, 1, 1, 0)));   // 1x1: nothing to gain
  CHECK_FALSE(s2d_applies(conv(8, 56, 3, 64, 3, 3, 1)));   // stride 3
  ConvDesc rect = conv(8, 32, 3, 16, 3, 1, 1);
  rect.kw = 5;
  CHECK_FALSE(s2d_applies(rect));
  CHECK(s2d_applies(conv(8, 18, 4, 8, 5, 2, 2)));
}
