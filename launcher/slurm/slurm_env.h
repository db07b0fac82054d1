// What a Slurm job step tells the launcher, derived from its environment alone (pure: tested
// with recorded environments). The launcher uses it for the options the user did not give.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace launch::slurm {

class SlurmEnvError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

struct SlurmLayout {
  std::string job_id;                 // SLURM_JOB_ID
  std::string step_id;                // SLURM_STEP_ID (empty outside a step)
  int nnodes = 1;                     // SLURM_STEP_NUM_NODES, then SLURM_NNODES
  int node_rank = 0;                  // SLURM_NODEID
  std::vector<std::string> hosts;     // expanded SLURM_STEP_NODELIST, then SLURM_JOB_NODELIST
  std::string master_host;            // hosts[0]
  uint16_t master_port = 0;           // derived from job and step id
  std::optional<std::string> devices; // SLURM_STEP_GPUS, then CUDA_VISIBLE_DEVICES
  // One task per GPU (srun --ntasks-per-node=G launch ...): this task runs one worker.
  bool task_per_worker = false;
  int global_rank = 0;                // SLURM_PROCID
  int local_rank = 0;                 // SLURM_LOCALID
  int world_size = 1;                 // SLURM_NTASKS (or SLURM_STEP_NUM_TASKS)
  int tasks_per_node = 1;
  // Where each value came from, for `launch --dry-run`: field name ("nnodes", "node_rank",
  // "hosts", "devices", "world_size", "tasks_per_node", "global_rank", "local_rank") ->
  // "VARIABLE=value". A field absent here kept its default.
  std::map<std::string, std::string> origin;
};

using EnvMap = std::map<std::string, std::string>;

// nullopt when SLURM_JOB_ID is not set. Throws SlurmEnvError naming the variable that is
// malformed or inconsistent.
std::optional<SlurmLayout> derive_slurm_layout(const EnvMap& env);

// The store port for a job step: the same on every node of the step, different for the steps
// of one job and for jobs that share nodes, in [kPortBase, kPortBase + kPortSpan).
inline constexpr uint16_t kPortBase = 20000;
inline constexpr uint16_t kPortSpan = 30000;
uint16_t derive_port(const std::string& job_id, const std::string& step_id);

}  // namespace launch::slurm
