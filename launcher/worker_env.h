// The environment contract between `launch` and its workers: ONE pure function builds every
// rank's variables (Paddle and torchrun names). The worker reads them back in one place too.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "launcher/devices.h"

namespace launch {

using EnvMap = std::map<std::string, std::string>;

struct JobSpec {
  std::string job_id = "default";
  std::string host = "127.0.0.1";        // address of this node (endpoints, master, store)
  std::string log_dir;                   // absolute
  std::vector<RankDevice> devices;       // one per local rank
  std::vector<uint16_t> endpoint_ports;  // one per rank, PADDLE_TRAINER_ENDPOINTS
  uint16_t master_port = 0;              // PADDLE_MASTER / MASTER_PORT: free for the program's rank 0
  std::string store_addr;                // LAUNCH_STORE_ADDR; empty: no store
  std::string store_token;               // LAUNCH_STORE_TOKEN
  int nnodes = 1;
  int node_rank = 0;
  // 0 for the first run, +1 per restart (--max_restart): PADDLE_RESTART_COUNT and
  // TORCHELASTIC_RESTART_COUNT, so a worker can tell a fresh start from a retry (and key its
  // rendezvous, e.g. the NCCL id, by generation).
  int restart_count = 0;
  // --checkpoint-signal, as a name ("SIGUSR2"): LAUNCH_CHECKPOINT_SIGNAL tells the worker which
  // signal means "save at the next step boundary and go on". Empty: not exported.
  std::string checkpoint_signal;
  // One Slurm task per worker (srun --ntasks-per-node=G launch ...): Slurm numbers the ranks
  // and this launcher runs only devices[0]; endpoint_ports then hold every task's port, in
  // global rank order. Unset: rank = node_rank * devices.size() + local rank.
  struct TaskRanks {
    int global_rank = 0;  // SLURM_PROCID
    int local_rank = 0;   // SLURM_LOCALID
    int local_size = 1;   // tasks on this node
    int world_size = 1;   // SLURM_NTASKS
  };
  std::optional<TaskRanks> task;
  // Multi-node: the layout every node agreed on in the rendezvous (launcher/multinode). When set,
  // rank = rank_offset + local rank, and the endpoints and master are the job's, not this node's.
  struct Cluster {
    int rank_offset = 0;
    int world_size = 0;
    std::vector<std::string> endpoints;  // "ip:port", global rank order
    std::string master;                  // "ip:port": node 0's free port for the framework
  };
  std::optional<Cluster> cluster;
};

struct WorkerEnv {
  EnvMap set;                      // what we export (on top of the launcher's environment)
  std::vector<std::string> unset;  // what we remove from it (FLAGS_selected_gpus on CPU ranks)
};

inline constexpr const char* kTokenVar = "LAUNCH_STORE_TOKEN";

// `local_rank` indexes job.devices (always 0 in the one-task-per-worker form).
// `parent` is the launcher's environment (only read: OMP_NUM_THREADS is set to 1 when unset and
// more than one process runs on the node, as torchrun does).
WorkerEnv build_worker_env(const JobSpec& job, int local_rank, const EnvMap& parent);

// parent + env.set - env.unset, as the "K=V" strings execve() wants.
std::vector<std::string> merge_env(const EnvMap& parent, const WorkerEnv& env);

EnvMap env_from_environ(char** envp);

}  // namespace launch
