#include "launcher/slurm/slurm_env.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>

#include "launcher/slurm/hostlist.h"

namespace launch::slurm {
namespace {

const std::string* find(const EnvMap& env, const char* name) {
  auto it = env.find(name);
  return it == env.end() || it->second.empty() ? nullptr : &it->second;
}

int to_int(const std::string& name, const std::string& value, int min) {
  // Slurm writes counts like "4" or, for per-node task counts, "4(x2)": take the leading number.
  errno = 0;
  char* end = nullptr;
  long v = std::strtol(value.c_str(), &end, 10);
  if (end == value.c_str() || errno != 0 || v < min || v > 1000000 || (*end != '\0' && *end != '('))
    throw SlurmEnvError(name + "='" + value + "' is not a valid number (expected an integer >= " +
                        std::to_string(min) + ")");
  return int(v);
}

}  // namespace

uint16_t derive_port(const std::string& job_id, const std::string& step_id) {
  // FNV-1a: stable across machines and compilers, unlike std::hash.
  uint64_t h = 1469598103934665603ull;
  for (char c : job_id + "." + step_id) {
    h ^= uint8_t(c);
    h *= 1099511628211ull;
  }
  return uint16_t(kPortBase + h % kPortSpan);
}

std::optional<SlurmLayout> derive_slurm_layout(const EnvMap& env) {
  const std::string* job = find(env, "SLURM_JOB_ID");
  if (!job) return std::nullopt;
  SlurmLayout l;
  l.job_id = *job;
  if (auto* s = find(env, "SLURM_STEP_ID")) l.step_id = *s;

  if (auto* s = find(env, "SLURM_STEP_NUM_NODES")) l.nnodes = to_int("SLURM_STEP_NUM_NODES", *s, 1);
  else if (auto* s2 = find(env, "SLURM_NNODES")) l.nnodes = to_int("SLURM_NNODES", *s2, 1);
  if (auto* s = find(env, "SLURM_NODEID")) l.node_rank = to_int("SLURM_NODEID", *s, 0);

  const char* list_var = find(env, "SLURM_STEP_NODELIST") ? "SLURM_STEP_NODELIST" : "SLURM_JOB_NODELIST";
  if (auto* s = find(env, list_var)) {
    try {
      l.hosts = expand_hostlist(*s);
    } catch (const HostlistError& e) {
      throw SlurmEnvError(std::string(list_var) + ": " + e.what());
    }
  }
  if (!l.hosts.empty()) {
    l.master_host = l.hosts.front();
    if (int(l.hosts.size()) != l.nnodes)
      throw SlurmEnvError(std::string(list_var) + " names " + std::to_string(l.hosts.size()) +
                          " hosts but the step has " + std::to_string(l.nnodes) + " nodes");
  }
  if (l.node_rank >= l.nnodes)
    throw SlurmEnvError("SLURM_NODEID=" + std::to_string(l.node_rank) + " is not below the node count " +
                        std::to_string(l.nnodes));
  l.master_port = derive_port(l.job_id, l.step_id);

  if (auto* s = find(env, "SLURM_STEP_GPUS")) l.devices = *s;
  else if (auto* s2 = find(env, "CUDA_VISIBLE_DEVICES")) l.devices = *s2;

  // Tasks: several per node means one worker per task, ranked by Slurm itself.
  if (auto* s = find(env, "SLURM_STEP_NUM_TASKS")) l.world_size = to_int("SLURM_STEP_NUM_TASKS", *s, 1);
  else if (auto* s2 = find(env, "SLURM_NTASKS")) l.world_size = to_int("SLURM_NTASKS", *s2, 1);
  if (auto* s = find(env, "SLURM_STEP_TASKS_PER_NODE")) l.tasks_per_node = to_int("SLURM_STEP_TASKS_PER_NODE", *s, 1);
  else if (auto* s2 = find(env, "SLURM_NTASKS_PER_NODE")) l.tasks_per_node = to_int("SLURM_NTASKS_PER_NODE", *s2, 1);
  else l.tasks_per_node = std::max(1, l.world_size / std::max(1, l.nnodes));
  if (auto* s = find(env, "SLURM_PROCID")) l.global_rank = to_int("SLURM_PROCID", *s, 0);
  if (auto* s = find(env, "SLURM_LOCALID")) l.local_rank = to_int("SLURM_LOCALID", *s, 0);
  l.task_per_worker = l.world_size > l.nnodes;
  if (l.global_rank >= l.world_size)
    throw SlurmEnvError("SLURM_PROCID=" + std::to_string(l.global_rank) + " is not below the task count " +
                        std::to_string(l.world_size));
  return l;
}

}  // namespace launch::slurm
