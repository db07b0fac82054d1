// --loader auto's model (worker/data/loader_choice.h): it reproduces the rates it was fitted to
// and picks by them.
#include <catch2/catch.hpp>

#include <algorithm>

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

TEST_CASE("the GPU loader's CPU share balances the modelled rates and is spread over the batch", "[loader]") {
  // Photos at 16 threads: the CPU loader's 5,781 against nvJPEG's 17,739: about a quarter.
  const LoaderChoice photos = choose_loader(500 * 375, 16);
  const double share = gpu_loader_cpu_share(photos);
  CHECK(share == Approx(photos.cpu_images_per_s / (photos.cpu_images_per_s + photos.gpu_images_per_s)));
  CHECK(share > 0.2);
  CHECK(share < 0.3);
  // At these rates both halves of a batch take the same time.
  CHECK(share / photos.cpu_images_per_s == Approx((1 - share) / photos.gpu_images_per_s));
  // Fewer threads, a smaller share; where the CPU would win outright, at most half.
  CHECK(gpu_loader_cpu_share(choose_loader(500 * 375, 4)) < share);
  CHECK(gpu_loader_cpu_share(choose_loader(32 * 32, 16)) == kMaxCpuShare);
  CHECK(gpu_loader_cpu_share(LoaderChoice{}) == 0.0);

  for (double s : {0.0, 0.1, 0.25, 0.5, 1.0}) {
    for (int n : {1, 7, 16, 256}) {
      int count = 0, run = 0, longest_run = 0;
      for (int pos = 0; pos < n; ++pos) {
        const bool cpu = cpu_decodes_position(pos, s);
        count += cpu;
        run = cpu ? 0 : run + 1;
        longest_run = std::max(longest_run, run);
      }
      INFO("share " << s << ", batch " << n);
      CHECK(count == int(double(n) * s));  // floor(n * share) positions
      // Evenly spread: never more than 1/share nvJPEG positions in a row (+1 for the rounding).
      if (s > 0) CHECK(longest_run <= int(1.0 / s) + 1);
    }
  }
}
