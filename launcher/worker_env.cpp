#include "launcher/worker_env.h"

#include <algorithm>
#include <cstring>

namespace launch {

WorkerEnv build_worker_env(const JobSpec& job, int local_rank, const EnvMap& parent) {
  const RankDevice& dev = job.devices.at(static_cast<size_t>(local_rank));
  int local_size = static_cast<int>(job.devices.size());
  int world = local_size * job.nnodes;
  int rank = job.node_rank * local_size + local_rank;
  if (job.task) {
    local_size = job.task->local_size;
    world = job.task->world_size;
    rank = job.task->global_rank;
    local_rank = job.task->local_rank;
  }
  std::vector<std::string> all;
  std::string master = job.host + ":" + std::to_string(job.master_port);
  if (job.cluster) {
    rank = job.cluster->rank_offset + local_rank;
    world = job.cluster->world_size;
    all = job.cluster->endpoints;
    master = job.cluster->master;
  } else {
    for (uint16_t port : job.endpoint_ports) all.push_back(job.host + ":" + std::to_string(port));
  }
  auto endpoint = [&](size_t i) { return all.at(i); };
  std::string endpoints;
  for (size_t i = 0; i < all.size(); ++i) endpoints += (i ? "," : "") + all[i];
  const std::string master_addr = master.substr(0, master.rfind(':'));
  const std::string master_port = master.substr(master.rfind(':') + 1);

  WorkerEnv env;
  EnvMap& e = env.set;
  // Paddle names.
  e["PADDLE_TRAINER_ID"] = e["PADDLE_GLOBAL_RANK"] = std::to_string(rank);
  e["PADDLE_TRAINERS_NUM"] = e["PADDLE_GLOBAL_SIZE"] = std::to_string(world);
  e["PADDLE_LOCAL_RANK"] = e["PADDLE_RANK_IN_NODE"] = std::to_string(local_rank);
  e["PADDLE_LOCAL_SIZE"] = std::to_string(local_size);
  e["PADDLE_NNODES"] = std::to_string(job.nnodes);
  e["PADDLE_TRAINER_ENDPOINTS"] = endpoints;
  e["PADDLE_CURRENT_ENDPOINT"] = endpoint(static_cast<size_t>(rank));
  e["PADDLE_MASTER"] = master;
  e["PADDLE_JOB_ID"] = job.job_id;
  e["PADDLE_LOG_DIR"] = job.log_dir;
  e["PADDLE_DISTRI_BACKEND"] = dev.kind == DeviceKind::Gpu ? "nccl" : "gloo";
  if (dev.kind == DeviceKind::Gpu)
    e["FLAGS_selected_gpus"] = std::to_string(dev.gpu);
  else if (parent.count("FLAGS_selected_gpus"))
    env.unset.push_back("FLAGS_selected_gpus");
  // torchrun names, so PyTorch programs run unchanged.
  e["RANK"] = std::to_string(rank);
  e["WORLD_SIZE"] = std::to_string(world);
  e["LOCAL_RANK"] = std::to_string(local_rank);
  e["LOCAL_WORLD_SIZE"] = std::to_string(local_size);
  e["GROUP_RANK"] = std::to_string(job.node_rank);
  e["MASTER_ADDR"] = master_addr;
  e["MASTER_PORT"] = master_port;
  // Which run this is: the same value under both names.
  e["PADDLE_RESTART_COUNT"] = e["TORCHELASTIC_RESTART_COUNT"] = std::to_string(job.restart_count);
  if (!job.checkpoint_signal.empty()) e["LAUNCH_CHECKPOINT_SIGNAL"] = job.checkpoint_signal;
  // Our store.
  if (!job.store_addr.empty()) {
    e["LAUNCH_STORE_ADDR"] = job.store_addr;
    e[kTokenVar] = job.store_token;
  }
  // N processes each spawning one OpenMP thread per core oversubscribe the node.
  if (local_size > 1 && !parent.count("OMP_NUM_THREADS")) e["OMP_NUM_THREADS"] = "1";
  return env;
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

EnvMap env_from_environ(char** envp) {
  EnvMap m;
  for (char** p = envp; p && *p; ++p) {
    const char* eq = std::strchr(*p, '=');
    if (!eq) continue;
    m.emplace(std::string(*p, static_cast<size_t>(eq - *p)), std::string(eq + 1));
  }
  return m;
}

}  // namespace launch
