#include <catch2/catch.hpp>

#include "worker/train/precision.h"

using worker::BackendFacts;
using worker::choose_precision;
using worker::DType;
using worker::Precision;

TEST_CASE("--precision auto: bf16 on a GPU unless the backend runs fp16 faster on it", "[train][options]") {
  const BackendFacts same;  // what GpuOps reports without fp16's fused path (not sm_90, or turned off)
  BackendFacts fp16_fast;
  fp16_fast.fp16_faster_than_bf16 = true;
  fp16_fast.stem_space_to_depth = true;
  const auto bf16 = choose_precision(Precision::Auto, true, same);
  CHECK(bf16.dtype == DType::BF16);
  CHECK(worker::describe_precision(bf16) ==
        "Precision: bf16 (--precision auto: fp16's fused convolution + batch-norm statistics do not run on this GPU "
        "(or are turned off), so fp16 would only add loss scaling)");
  const auto fp16 = choose_precision(Precision::Auto, true, fp16_fast);
  CHECK(fp16.dtype == DType::F16);
  CHECK_THAT(worker::describe_precision(fp16),
             Catch::StartsWith("Precision: fp16 (--precision auto: this GPU runs fp16's fused convolution") &&
                 Catch::Contains("loss scaling is decided on the device") && Catch::Contains("--precision bf16"));
  // The CPU computes in fp32 only, whatever the facts: nothing to say.
  for (const BackendFacts& f : {same, fp16_fast}) {
    const auto cpu = choose_precision(Precision::Auto, false, f);
    CHECK(cpu.dtype == DType::F32);
    CHECK(worker::describe_precision(cpu).empty());
  }
}

TEST_CASE("--precision auto: bf16 where the stem's convolution over 3 channels runs on the legacy API",
          "[train][options]") {
  // Without its space-to-depth form (WORKER_CONV_S2D=0) the stem's convolution runs on cuDNN's legacy
  // API, where fp16 ran 0.75-0.99 of bf16 on an H100 (precision.h).
  BackendFacts plain_stem;
  plain_stem.fp16_faster_than_bf16 = true;
  plain_stem.stem_space_to_depth = false;
  const auto c = choose_precision(Precision::Auto, true, plain_stem);
  CHECK(c.dtype == DType::BF16);
  CHECK_THAT(worker::describe_precision(c),
             Catch::StartsWith("Precision: bf16 (--precision auto: the stem's convolution over 3 channels") &&
                 Catch::Contains("WORKER_CONV_S2D=0") && Catch::Contains("--precision fp16 for the other"));
  // Asked for, fp16 runs all the same.
  CHECK(choose_precision(Precision::Fp16, true, plain_stem).dtype == DType::F16);
}

TEST_CASE("--precision given: taken as it is, bf16/fp16 refused on the CPU", "[train][options]") {
  BackendFacts fp16_fast;
  fp16_fast.fp16_faster_than_bf16 = true;
  CHECK(choose_precision(Precision::Bf16, true, fp16_fast).dtype == DType::BF16);  // the facts do not overrule it
  CHECK(choose_precision(Precision::Fp16, true, {}).dtype == DType::F16);
  CHECK(choose_precision(Precision::Fp32, true, fp16_fast).dtype == DType::F32);
  CHECK(choose_precision(Precision::Fp32, false, {}).dtype == DType::F32);
  CHECK(choose_precision(Precision::Bf16, true, {}).why.empty());
  CHECK_THROWS_WITH(choose_precision(Precision::Fp16, false, {}),
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
