// --loader auto's model (worker/data/loader_choice.h): it reproduces the rates it was fitted to
// and picks by them.
#include <catch2/catch.hpp>

#include "worker/data/loader_choice.h"

using namespace worker;

TEST_CASE("the loader model reproduces the measured rates and picks the faster", "[loader]") {
  // The two data sets measured on the H200 machine, 16 threads (loader_choice.h); the constants
  // are rounded to three figures, so within 1 %.
  const LoaderChoice tiny = choose_loader(32 * 32, 16), photos = choose_loader(500 * 375, 16);
  CHECK(tiny.cpu_images_per_s == Approx(272239.0).epsilon(0.01));
  CHECK(tiny.gpu_images_per_s == Approx(33790.0).epsilon(0.01));
  CHECK(photos.cpu_images_per_s == Approx(5781.0).epsilon(0.01));
  CHECK(photos.gpu_images_per_s == Approx(17739.0).epsilon(0.01));
  CHECK(tiny.loader == Loader::Cpu);
  CHECK(photos.loader == Loader::Gpu);
}

TEST_CASE("the CPU loader wins below a size that grows with its threads", "[loader]") {
  CHECK(choose_loader(32 * 32, 1).loader == Loader::Gpu);  // one thread never outpaces nvJPEG
  int64_t last = 0;
  for (int threads : {2, 4, 8, 16, 32}) {
    // The largest square side the CPU loader still wins at.
    int64_t side = 1;
    while (side < 100000 && choose_loader((side + 1) * (side + 1), threads).loader == Loader::Cpu) ++side;
    INFO(threads << " threads: the CPU loader up to " << side << "x" << side);
    CHECK(side > last);
    CHECK(choose_loader((side + 1) * (side + 1), threads).loader == Loader::Gpu);
    last = side;
  }
  CHECK(last > 187);  // 32 threads outpace nvJPEG beyond 16's crossover, about 187x187
}
