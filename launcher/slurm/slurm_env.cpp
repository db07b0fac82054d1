#include "launcher/slurm/slurm_env.h"

#include "proto/worker_env.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <initializer_list>

#include "launcher/slurm/hostlist.h"

namespace launch::slurm {

namespace vars = proto::env;  // the variable names (proto/worker_env.h)
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
  const std::string* job = find(env, vars::kSlurmJobId);
  if (!job) return std::nullopt;
  SlurmLayout l;
  l.job_id = *job;
  if (auto* s = find(env, vars::kSlurmStepId)) l.step_id = *s;

  // The first of `names` that is set, parsed as an integer >= min, its origin recorded.
  auto take = [&](const char* field, int& out, std::initializer_list<const char*> names, int min) {
    for (const char* name : names)
      if (auto* s = find(env, name)) {
        out = to_int(name, *s, min);
        l.origin[field] = std::string(name) + "=" + *s;
        return true;
      }
    return false;
  };
  take("nnodes", l.nnodes, {vars::kSlurmStepNumNodes, vars::kSlurmNnodes}, 1);
  take("node_rank", l.node_rank, {vars::kSlurmNodeId}, 0);

  const char* list_var = find(env, vars::kSlurmStepNodelist) ? vars::kSlurmStepNodelist : vars::kSlurmJobNodelist;
  if (auto* s = find(env, list_var)) {
    try {
      l.hosts = expand_hostlist(*s);
      l.origin["hosts"] = std::string(list_var) + "=" + *s;
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

  for (const char* name : {vars::kSlurmStepGpus, vars::kCudaVisibleDevices})
    if (auto* s = find(env, name)) {
      l.devices = *s;
      l.origin["devices"] = std::string(name) + "=" + *s;
      break;
    }

  // Tasks: several per node means one worker per task, ranked by Slurm itself.
  take("world_size", l.world_size, {vars::kSlurmStepNumTasks, vars::kSlurmNtasks}, 1);
  if (!take("tasks_per_node", l.tasks_per_node, {vars::kSlurmStepTasksPerNode, vars::kSlurmNtasksPerNode}, 1))
    l.tasks_per_node = std::max(1, l.world_size / std::max(1, l.nnodes));
  take("global_rank", l.global_rank, {vars::kSlurmProcId}, 0);
  take("local_rank", l.local_rank, {vars::kSlurmLocalId}, 0);
  l.task_per_worker = l.world_size > l.nnodes;
  if (l.global_rank >= l.world_size)
    throw SlurmEnvError("SLURM_PROCID=" + std::to_string(l.global_rank) + " is not below the task count " +
                        std::to_string(l.world_size));
  return l;
}

}  // namespace launch::slurm
