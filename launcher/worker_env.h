// The environment contract between `launch` and its workers: ONE pure function builds every
// rank's variables (Paddle and torchrun names). The worker reads them back in one place too.
#pragma once

#include <cstdint>
#include <map>
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
};

struct WorkerEnv {
  EnvMap set;                      // what we export (on top of the launcher's environment)
  std::vector<std::string> unset;  // what we remove from it (FLAGS_selected_gpus on CPU ranks)
};

inline constexpr const char* kTokenVar = "LAUNCH_STORE_TOKEN";

// `parent` is the launcher's environment (only read: OMP_NUM_THREADS is set to 1 when unset and
// more than one process runs on the node, as torchrun does).
WorkerEnv build_worker_env(const JobSpec& job, int local_rank, const EnvMap& parent);

// parent + env.set - env.unset, as the "K=V" strings execve() wants.
std::vector<std::string> merge_env(const EnvMap& parent, const WorkerEnv& env);

EnvMap env_from_environ(char** envp);

}  // namespace launch
