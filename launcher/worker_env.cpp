#include "launcher/worker_env.h"

#include <cstdint>

#include "proto/address.h"

namespace launch {

namespace {

using namespace proto::env;

// Paddle names its launcher's "pod" with 6 random letters; ours are derived from the job and the
// node, so that a dry run shows what the real run exports.
std::string pod_name(const std::string& job_id, int node_rank) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (char c : job_id + "/" + std::to_string(node_rank)) h = (h ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  std::string name;
  for (int i = 0; i < 6; ++i, h /= 26) name += static_cast<char>('a' + h % 26);
  return name;
}

// Entry `index` of the launcher's CUDA_VISIBLE_DEVICES (an id or a UUID), or `index` itself
// when it is not set: the device a worker keeps under --virtual-local-rank.
std::string visible_device(const EnvMap& parent, int index) {
  auto it = parent.find(kCudaVisibleDevices);
  if (it == parent.end()) return std::to_string(index);
  std::vector<std::string> entries;
  size_t start = 0;
  for (;;) {
    const size_t comma = it->second.find(',', start);
    std::string entry = it->second.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
    while (!entry.empty() && entry.front() == ' ') entry.erase(entry.begin());
    while (!entry.empty() && entry.back() == ' ') entry.pop_back();
    entries.push_back(entry);
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return size_t(index) < entries.size() ? entries[size_t(index)] : std::to_string(index);
}

}  // namespace

WorkerEnv build_worker_env(const JobSpec& job, const RankLayout& l, int index, int restart_count,
                           const EnvMap& parent) {
  const RankDevice& dev = job.devices.at(static_cast<size_t>(index));
  const bool gpu = dev.kind == DeviceKind::Gpu;
  const std::string rank = std::to_string(l.first_rank + index);
  const std::string local_rank = job.virtual_local_rank ? "0" : std::to_string(l.first_local_rank + index);
  const std::string world = std::to_string(l.world_size);
  const std::string local_size = std::to_string(l.local_size);
  std::string endpoints;
  for (size_t i = 0; i < l.endpoints.size(); ++i) endpoints += (i ? "," : "") + l.endpoints[i];
  // "[::1]:29500" -> MASTER_ADDR=::1: torch takes the bare address.
  const std::optional<proto::HostPort> master = proto::split_host_port(l.master, /*allow_zero=*/true);
  auto keep_or = [&](EnvMap& e, const char* name, const char* value) {
    if (!parent.count(name)) e[name] = value;
  };

  WorkerEnv env;
  EnvMap& e = env.set;
  // --- Paddle's names
  e[kPaddleTrainerId] = e[kPaddleGlobalRank] = rank;
  e[kPaddleTrainersNum] = e[kPaddleGlobalSize] = world;
  e[kPaddleLocalRank] = e[kPaddleRankInNode] = local_rank;
  e[kPaddleLocalSize] = local_size;
  e[kPaddleNnodes] = std::to_string(l.nnodes);
  e[kPaddleTrainerEndpoints] = endpoints;
  e[kPaddleCurrentEndpoint] = l.endpoints.at(static_cast<size_t>(l.first_rank + index));
  e[kPaddleMaster] = l.master;
  e[kPaddleJobId] = job.job_id;
  e[kPaddleLogDir] = job.log_dir;
  e[kPaddleDistriBackend] = gpu ? "nccl" : "gloo";
  if (gpu) e[kSelectedGpus] = job.virtual_local_rank ? "0" : std::to_string(dev.gpu);
  e[kPodName] = pod_name(job.job_id, l.node_rank);
  e[kPaddleAutoCluster] = "0";          // paddle launch's default (--auto_cluster_config 0)
  e[kPaddleTrainingRole] = "TRAINER";   // what fleet's role maker assumes in collective mode
  // --- torchrun's names, so PyTorch programs run unchanged
  e[kRank] = e[kRoleRank] = rank;
  e[kWorldSize] = e[kRoleWorldSize] = world;
  e[kLocalRank] = local_rank;
  e[kLocalWorldSize] = local_size;
  e[kGroupRank] = std::to_string(l.node_rank);
  e[kGroupWorldSize] = std::to_string(l.nnodes);
  e[kRoleName] = job.role;
  e[kMasterAddr] = master ? master->host : l.master;
  e[kMasterPort] = master ? std::to_string(master->port) : "";
  e[kTorchRunId] = job.job_id;
  e[kTorchMaxRestarts] = std::to_string(job.max_restarts);
  e[kTorchUseAgentStore] = "False";
  e[kTorchErrorFile] = worker_error_file(job.log_dir, l.first_rank + index);
  e[kTorchSignalsToHandle] = job.signals_to_handle;
  keep_or(e, kTorchNcclAsyncErrorHandling, "1");
  if (gpu && job.virtual_local_rank) e[kCudaVisibleDevices] = visible_device(parent, dev.gpu);
  // Which run this is: the same value under both names.
  e[kPaddleRestartCount] = e[kTorchRestartCount] = std::to_string(restart_count);
  if (!job.checkpoint_signal.empty()) e[kCheckpointSignal] = job.checkpoint_signal;
  // --- our store
  if (!l.store_addr.empty()) {
    e[kStoreAddr] = l.store_addr;
    e[kStoreToken] = l.store_token;
  }
  // N processes each spawning one OpenMP thread per core oversubscribe the node.
  if (l.local_size > 1) keep_or(e, kOmpNumThreads, "1");
  // A Python worker's last prints must not die in its buffer at teardown.
  keep_or(e, kPythonUnbuffered, "1");
  // The contract is ours alone: what an outer launch (or a shell) set and we do not, goes.
  for (const char* name : kWorkerContract)
    if (parent.count(name) && !e.count(name)) env.unset.push_back(name);
  return env;
}

LauncherEnv launcher_env(const EnvMap& parent) {
  LauncherEnv out;
  for (const char* mark : kWorkerMarks)
    if (parent.count(mark)) {
      out.outer = mark;
      break;
    }
  if (!out.outer) {
    out.env = parent;
    return out;
  }
  auto outer_job = [](const std::string& k) {
    for (const char* name : kWorkerContract)
      if (k == name) return true;
    for (const char* prefix : {"PADDLE_", "PET_", "SLURM_"})
      if (k.rfind(prefix, 0) == 0) return true;
    return k == "POD_IP";
  };
  for (const auto& [k, v] : parent)
    if (!outer_job(k)) out.env.emplace(k, v);
  return out;
}

std::vector<std::string> merge_env(const EnvMap& parent, const WorkerEnv& env) {
  EnvMap all = parent;
  for (const auto& u : env.unset) all.erase(u);
  for (const auto& [k, v] : env.set) all[k] = v;
  std::vector<std::string> out;
  out.reserve(all.size());
  for (const auto& [k, v] : all) out.push_back(k + "=" + v);
  return out;
}

std::string worker_log_path(const std::string& log_dir, int rank) {
  return log_dir + "/workerlog." + std::to_string(rank);
}

std::string worker_error_file(const std::string& log_dir, int rank) {
  return log_dir + "/workererror." + std::to_string(rank) + ".json";
}

}  // namespace launch
