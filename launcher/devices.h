// Which device each local rank runs on. The parsers are pure; detect_visible_gpus() is the only
// function here that looks at the machine.
#pragma once

#include <optional>
#include <string>
#include <string_view>
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


struct DeviceRequest {
  std::optional<std::string> gpus;
  std::optional<std::string> devices;
  std::optional<int> nproc_per_node;
};

// One entry per local rank. `visible_gpus` comes from detect_visible_gpus(). Throws UsageError.
std::vector<RankDevice> plan_devices(const DeviceRequest& req, int visible_gpus);

// CUDA_VISIBLE_DEVICES of `env` when set (proto::count_cuda_visible), else the number of
// /dev/nvidiaN device nodes. No CUDA linkage: the launcher must start (and stay fast) on
// machines without a driver.
int detect_visible_gpus(const proto::EnvMap& env);

std::string describe(const RankDevice& d);  // "gpu:1" or "cpu"

}  // namespace launch
