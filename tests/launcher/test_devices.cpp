#include <catch2/catch.hpp>

#include "launcher/devices.h"
#include "launcher/errors.h"

using namespace launch;

namespace {
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "<no error>";
}
}  // namespace

TEST_CASE("device list: valid lists keep their order", "[launcher][devices]") {
  CHECK(parse_device_list("0,1,3", "--gpus") == std::vector<int>{0, 1, 3});
  CHECK(parse_device_list("2", "--gpus") == std::vector<int>{2});
  CHECK(parse_device_list(" 3, 1 ", "--gpus") == std::vector<int>{3, 1});
}

TEST_CASE("device list: each bad element is named", "[launcher][devices]") {
  auto err = [](const char* list) { return error_of([&] { parse_device_list(list, "--gpus"); }); };
  CHECK_THAT(err("0,a,1"), Catch::Contains("'a'") && Catch::Contains("not a number"));
  CHECK_THAT(err("0,-1"), Catch::Contains("negative") && Catch::Contains("'-1'"));
  CHECK_THAT(err("0,1,0"), Catch::Contains("duplicate") && Catch::Contains("'0'"));
  CHECK_THAT(err("0,,1"), Catch::Contains("empty element at position 2"));
  CHECK_THAT(err("0,"), Catch::Contains("empty element at position 2"));
  CHECK_THAT(err(""), Catch::Contains("--gpus is empty"));
  CHECK_THAT(err("1.5"), Catch::Contains("'1.5'"));
  CHECK_THAT(err("99999999999"), Catch::Contains("out of range"));
}

TEST_CASE("--gpus and --devices are parsed once: cpu, or ids naming where they came from", "[launcher][devices]") {
  CHECK(parse_devices("cpu") == DeviceList::cpu_processes("--devices"));
  CHECK(parse_devices(" CPU ").cpu);
  CHECK(parse_devices("1,0").gpus == std::vector<int>{1, 0});
  CHECK(parse_gpus("0,2") == DeviceList::gpu_ids({0, 2}, "--gpus"));
  CHECK(parse_devices("3", "PADDLE_DEVICES").option == "PADDLE_DEVICES");
  CHECK_THAT(error_of([] { parse_gpus("cpu"); }), Catch::Contains("--devices cpu"));
  CHECK_THAT(error_of([] { parse_devices("0,x", "SLURM_STEP_GPUS"); }),
             Catch::Contains("SLURM_STEP_GPUS") && Catch::Contains("'x'"));
  CHECK(describe(parse_gpus("3,1")) == "3,1");
  CHECK(describe(parse_devices("cpu")) == "cpu");
}

TEST_CASE("CUDA_VISIBLE_DEVICES counting follows the CUDA runtime", "[launcher][devices]") {
  CHECK(proto::count_cuda_visible("") == 0);
  CHECK(proto::count_cuda_visible("0,1,2") == 3);
  CHECK(proto::count_cuda_visible("3") == 1);
  CHECK(proto::count_cuda_visible("-1") == 0);
  CHECK(proto::count_cuda_visible("0,1,-1,2") == 2);
  CHECK(proto::count_cuda_visible("GPU-8f2e,GPU-91aa") == 2);
}

TEST_CASE("device plan", "[launcher][devices]") {
  const RankDevice cpu{DeviceKind::Cpu, -1};
  auto gpu = [](int i) { return RankDevice{DeviceKind::Gpu, i}; };
  auto gpus = [](const char* list) { return std::optional<DeviceList>(parse_gpus(list)); };
  auto devices = [](const char* list) { return std::optional<DeviceList>(parse_devices(list)); };

  SECTION("explicit GPUs") {
    CHECK(plan_devices({gpus("0,2"), {}}, 4) == std::vector<RankDevice>{gpu(0), gpu(2)});
    CHECK(plan_devices({devices("1"), {}}, 2) == std::vector<RankDevice>{gpu(1)});
  }
  SECTION("cpu with nproc_per_node") {
    CHECK(plan_devices({devices("cpu"), 3}, 8) == std::vector<RankDevice>(3, cpu));
    CHECK(plan_devices({devices("CPU"), {}}, 8) == std::vector<RankDevice>(1, cpu));
  }
  SECTION("defaults: every visible GPU, else one CPU process") {
    CHECK(plan_devices({}, 2) == std::vector<RankDevice>{gpu(0), gpu(1)});
    CHECK(plan_devices({}, 0) == std::vector<RankDevice>{cpu});
    CHECK(plan_devices({{}, 4}, 0) == std::vector<RankDevice>(4, cpu));
    CHECK(plan_devices({{}, 1}, 2) == std::vector<RankDevice>{gpu(0)});
  }
  SECTION("errors") {
    CHECK_THAT(error_of([&] { plan_devices({gpus("2"), {}}, 2); }),
               Catch::Contains("GPU 2 in --gpus") && Catch::Contains("not visible"));
    CHECK_THAT(error_of([&] { plan_devices({gpus("0"), {}}, 0); }), Catch::Contains("no GPU is visible"));
    CHECK_THAT(error_of([&] { plan_devices({gpus("0,1"), 3}, 2); }), Catch::Contains("does not match"));
    CHECK_THAT(error_of([&] { plan_devices({devices("0,1"), 3}, 2); }), Catch::Contains("device(s) of --devices"));
    CHECK_THAT(error_of([] { plan_devices({{}, 3}, 2); }), Catch::Contains("exceeds"));
    CHECK_THAT(error_of([&] { plan_devices({devices("cpu"), 0}, 2); }), Catch::Contains("at least 1"));
  }
}
