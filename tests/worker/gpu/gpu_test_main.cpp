// Catch2 main of the [gpu] tests: where no GPU is visible the binary says so and exits with
// 77, which CTest (SKIP_RETURN_CODE) reports as skipped, never as passed.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>

#include <cuda_runtime.h>

int main(int argc, char** argv) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    std::printf("SKIPPED: no GPU visible (%s)\n",
                e == cudaSuccess ? "0 devices" : cudaGetErrorString(e));
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
