#include "launcher/worker_env.h"

#include <algorithm>
#include <cstring>

namespace launch {

WorkerEnv build_worker_env(const JobSpec& job, int local_rank, const EnvMap& parent) {
  const int local_size = static_cast<int>(job.devices.size());
  const int world = local_size * job.nnodes;
  const int rank = job.node_rank * local_size + local_rank;
  const RankDevice& dev = job.devices.at(static_cast<size_t>(local_rank));
  auto endpoint = [&](size_t i) { return job.host + ":" + std::to_string(job.endpoint_ports.at(i)); };

  std::string endpoints;
  for (size_t i = 0; i < job.endpoint_ports.size(); ++i) endpoints += (i ? "," : "") + endpoint(i);
  const std::string master = job.host + ":" + std::to_string(job.master_port);

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
  e["MASTER_ADDR"] = job.host;
  e["MASTER_PORT"] = std::to_string(job.master_port);
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
