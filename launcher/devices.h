// Which device each local rank runs on. The parsers are pure; detect_visible_gpus() is the only
// function here that looks at the machine.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "proto/worker_env.h"

namespace launch {

enum class DeviceKind { Cpu, Gpu };

struct RankDevice {
  DeviceKind kind = DeviceKind::Cpu;
  int gpu = -1;  // index among the visible GPUs (what FLAGS_selected_gpus carries); -1 for CPU
  bool operator==(const RankDevice& o) const { return kind == o.kind && gpu == o.gpu; }
};

// "0,1,3" -> {0,1,3}. Throws UsageError naming the bad element (not a number, negative,
// duplicate, empty) and `option` (e.g. "--gpus").
std::vector<int> parse_device_list(std::string_view list, std::string_view option);

// The devices asked for (--gpus, --devices, PADDLE_DEVICES, or what Slurm derived), parsed once at
// option parsing: CPU processes, or GPU ids among the visible GPUs.
struct DeviceList {
  bool cpu = false;      // --devices cpu
  std::vector<int> gpus;  // the ids, in the order given (empty when cpu)
  std::string option;     // where the list came from, for messages ("--gpus", "SLURM_STEP_GPUS")

  static DeviceList cpu_processes(std::string option) { return {true, {}, std::move(option)}; }
  static DeviceList gpu_ids(std::vector<int> ids, std::string option) { return {false, std::move(ids), std::move(option)}; }
  bool operator==(const DeviceList& o) const { return cpu == o.cpu && gpus == o.gpus; }
};

// --devices (and its other sources: PADDLE_DEVICES, SLURM_STEP_GPUS): "cpu" in any case, or ids as
// parse_device_list reads them. --gpus: ids only, "cpu" refused naming --devices cpu. Both throw
// UsageError naming the option and how to fix it.
DeviceList parse_devices(std::string_view value, std::string_view option = "--devices");
DeviceList parse_gpus(std::string_view value);

struct DeviceRequest {
  std::optional<DeviceList> devices;  // none: every visible GPU, else one CPU process
  std::optional<int> nproc_per_node;
};

// One entry per local rank. `visible_gpus` comes from detect_visible_gpus(). Throws UsageError.
std::vector<RankDevice> plan_devices(const DeviceRequest& req, int visible_gpus);

// CUDA_VISIBLE_DEVICES of `env` when set (proto::count_cuda_visible), else the number of
// /dev/nvidiaN device nodes. No CUDA linkage: the launcher must start (and stay fast) on
// machines without a driver.
int detect_visible_gpus(const proto::EnvMap& env);

std::string describe(const RankDevice& d);  // "gpu:1" or "cpu"
std::string describe(const DeviceList& d);  // "0,1,3" or "cpu"

}  // namespace launch
