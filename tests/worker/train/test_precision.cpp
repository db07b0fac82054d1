#include <catch2/catch.hpp>

#include "worker/train/precision.h"

using worker::BackendFacts;
using worker::choose_precision;
using worker::DType;
using worker::Precision;
using worker::Stem;

TEST_CASE("--precision auto: bf16 on a GPU unless the backend runs fp16 faster on it", "[train][options]") {
  const BackendFacts same;  // what GpuOps reports without fp16's fused path (not sm_90, or turned off)
  BackendFacts fp16_fast;
  fp16_fast.fp16_faster_than_bf16 = true;
  fp16_fast.stem_space_to_depth = true;
  const auto bf16 = choose_precision(Precision::Auto, true, same, Stem::ImageNet);
  CHECK(bf16.dtype == DType::BF16);
  CHECK(worker::describe_precision(bf16) ==
        "Precision: bf16 (--precision auto: fp16's fused convolution + batch-norm statistics do not run on this GPU "
        "(or are turned off), so fp16 would only add loss scaling)");
  const auto fp16 = choose_precision(Precision::Auto, true, fp16_fast, Stem::ImageNet);
  CHECK(fp16.dtype == DType::F16);
  CHECK_THAT(worker::describe_precision(fp16),
             Catch::StartsWith("Precision: fp16 (--precision auto: this GPU runs fp16's fused convolution") &&
                 Catch::Contains("loss scaling is decided on the device") && Catch::Contains("--precision bf16"));
  // The CPU computes in fp32 only, whatever the facts: nothing to say.
  for (const BackendFacts& f : {same, fp16_fast}) {
    const auto cpu = choose_precision(Precision::Auto, false, f, Stem::ImageNet);
    CHECK(cpu.dtype == DType::F32);
    CHECK(worker::describe_precision(cpu).empty());
  }
}

TEST_CASE("--precision auto: bf16 where the stem's convolution over 3 channels runs on the legacy API",
          "[train][options]") {
  // fp16 ran slower than bf16 with the CIFAR stem on an H100 (0.75-0.99, precision.h), whose weight
  // gradient over 3 channels cuDNN's legacy heuristics run 15x slower in fp16.
  BackendFacts fp16_fast;
  fp16_fast.fp16_faster_than_bf16 = true;
  fp16_fast.stem_space_to_depth = true;
  const auto cifar = choose_precision(Precision::Auto, true, fp16_fast, Stem::Cifar);
  CHECK(cifar.dtype == DType::BF16);
  CHECK_THAT(worker::describe_precision(cifar),
             Catch::StartsWith("Precision: bf16 (--precision auto: the CIFAR stem's 3x3 convolution over 3 channels") &&
                 Catch::Contains("--precision fp16 for the other"));
  // The ImageNet stem without its space-to-depth form reads 3 channels too.
  BackendFacts no_s2d = fp16_fast;
  no_s2d.stem_space_to_depth = false;
  const auto plain_stem = choose_precision(Precision::Auto, true, no_s2d, Stem::ImageNet);
  CHECK(plain_stem.dtype == DType::BF16);
  CHECK_THAT(plain_stem.why, Catch::Contains("WORKER_CONV_S2D=0"));
  // Asked for, fp16 runs whatever the stem.
  CHECK(choose_precision(Precision::Fp16, true, fp16_fast, Stem::Cifar).dtype == DType::F16);
}

TEST_CASE("--precision given: taken as it is, bf16/fp16 refused on the CPU", "[train][options]") {
  BackendFacts fp16_fast;
  fp16_fast.fp16_faster_than_bf16 = true;
  CHECK(choose_precision(Precision::Bf16, true, fp16_fast, Stem::ImageNet).dtype == DType::BF16);  // the facts do not overrule it
  CHECK(choose_precision(Precision::Fp16, true, {}, Stem::ImageNet).dtype == DType::F16);
  CHECK(choose_precision(Precision::Fp32, true, fp16_fast, Stem::ImageNet).dtype == DType::F32);
  CHECK(choose_precision(Precision::Fp32, false, {}, Stem::ImageNet).dtype == DType::F32);
  CHECK(choose_precision(Precision::Bf16, true, {}, Stem::ImageNet).why.empty());
  CHECK_THROWS_WITH(choose_precision(Precision::Fp16, false, {}, Stem::ImageNet),
                    Catch::Contains("--precision fp16 needs a GPU") && Catch::Contains("use --precision fp32"));
}

TEST_CASE("--precision auto is the default and parses", "[train][options]") {
  const worker::TrainOptions defaults;
  CHECK(defaults.precision == Precision::Auto);
  const auto o = worker::parse_options(std::vector<std::string>{"--precision", "auto", "--device", "cpu"});
  REQUIRE(o);
  CHECK(o->precision == Precision::Auto);
  CHECK(std::string(worker::to_string(Precision::Auto)) == "auto");
}
