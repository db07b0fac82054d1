#include "launcher/devices.h"

#include <dirent.h>

#include <set>

#include "launcher/errors.h"
#include "proto/worker_env.h"

namespace launch {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool all_digits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

std::vector<std::string_view> split_commas(std::string_view s) {
  std::vector<std::string_view> out;
  size_t start = 0;
  while (true) {
    size_t comma = s.find(',', start);
    out.push_back(s.substr(start, comma == std::string_view::npos ? std::string_view::npos : comma - start));
    if (comma == std::string_view::npos) return out;
    start = comma + 1;
  }
}

bool is_cpu(std::string_view s) {
  s = trim(s);
  return s.size() == 3 && (s[0] | 0x20) == 'c' && (s[1] | 0x20) == 'p' && (s[2] | 0x20) == 'u';
}

}  // namespace

// ---------------------------------------------------------------------------------------------

std::vector<int> parse_device_list(std::string_view list, std::string_view option) {
  const std::string opt(option);
  const std::string whole(list);
  if (trim(list).empty()) throw UsageError(opt + " is empty; give device ids such as 0,1");
  std::vector<int> ids;
  std::set<int> seen;
  auto parts = split_commas(list);
  for (size_t i = 0; i < parts.size(); ++i) {
    std::string_view e = trim(parts[i]);
    const std::string el(e);
    if (e.empty())
      throw UsageError("empty element at position " + std::to_string(i + 1) + " in " + opt + " '" +
                       whole + "'; give ids such as 0,1");
    if (e[0] == '-' && all_digits(e.substr(1)))
      throw UsageError("negative device id '" + el + "' in " + opt + " '" + whole + "'; ids start at 0");
    if (!all_digits(e))
      throw UsageError("device id '" + el + "' in " + opt + " '" + whole + "' is not a number");
    if (e.size() > 6)
      throw UsageError("device id '" + el + "' in " + opt + " '" + whole + "' is out of range");
    int id = std::atoi(el.c_str());
    if (!seen.insert(id).second)
      throw UsageError("duplicate device id '" + el + "' in " + opt + " '" + whole + "'");
    ids.push_back(id);
  }
  return ids;
}

DeviceList parse_devices(std::string_view value, std::string_view option) {
  if (is_cpu(value)) return DeviceList::cpu_processes(std::string(option));
  return DeviceList::gpu_ids(parse_device_list(value, option), std::string(option));
}

DeviceList parse_gpus(std::string_view value) {
  if (is_cpu(value)) throw UsageError("--gpus takes GPU ids; use --devices cpu for CPU processes");
  return DeviceList::gpu_ids(parse_device_list(value, "--gpus"), "--gpus");
}

std::vector<RankDevice> plan_devices(const DeviceRequest& req, int visible) {
  const std::optional<int>& nproc = req.nproc_per_node;
  if (nproc && *nproc < 1)
    throw UsageError("--nproc_per_node " + std::to_string(*nproc) + " must be at least 1");

  std::vector<RankDevice> out;
  auto cpus = [&](int n) {
    out.assign(static_cast<size_t>(n), RankDevice{DeviceKind::Cpu, -1});
    return out;
  };

  if (req.devices && req.devices->cpu) return cpus(nproc.value_or(1));

  if (req.devices) {
    const std::string& opt = req.devices->option;
    const std::vector<int>& ids = req.devices->gpus;
    for (int id : ids) {
      if (visible == 0)
        throw UsageError("GPU " + std::to_string(id) + " in " + opt +
                         " is not visible: no GPU is visible (check CUDA_VISIBLE_DEVICES); use "
                         "--devices cpu for CPU processes");
      if (id >= visible)
        throw UsageError("GPU " + std::to_string(id) + " in " + opt + " is not visible: " +
                         std::to_string(visible) + " GPU(s) visible, ids 0-" +
                         std::to_string(visible - 1));
    }
    if (nproc && *nproc != static_cast<int>(ids.size()))
      throw UsageError("--nproc_per_node " + std::to_string(*nproc) + " does not match the " +
                       std::to_string(ids.size()) + " device(s) of " + opt + "; drop one of them");
    for (int id : ids) out.push_back({DeviceKind::Gpu, id});
    return out;
  }

  if (visible == 0) return cpus(nproc.value_or(1));
  int n = nproc.value_or(visible);
  if (n > visible)
    throw UsageError("--nproc_per_node " + std::to_string(n) + " exceeds the " +
                     std::to_string(visible) +
                     " visible GPU(s); use --devices cpu for CPU processes");
  for (int i = 0; i < n; ++i) out.push_back({DeviceKind::Gpu, i});
  return out;
}

int detect_visible_gpus(const proto::EnvMap& env) {
  if (auto it = env.find(proto::env::kCudaVisibleDevices); it != env.end())
    return proto::count_cuda_visible(it->second);
  int n = 0;
  if (DIR* d = opendir("/dev")) {
    while (dirent* e = readdir(d)) {
      std::string_view name = e->d_name;
      if (name.size() > 6 && name.substr(0, 6) == "nvidia" && all_digits(name.substr(6))) ++n;
    }
    closedir(d);
  }
  return n;
}

std::string describe(const RankDevice& d) {
  return d.kind == DeviceKind::Gpu ? "gpu:" + std::to_string(d.gpu) : "cpu";
}

std::string describe(const DeviceList& d) {
  if (d.cpu) return "cpu";
  std::string s;
  for (int id : d.gpus) s += (s.empty() ? "" : ",") + std::to_string(id);
  return s;
}

}  // namespace launch
