// The launcher's half of the worker-environment contract (proto/worker_env.h names every
// variable): ONE pure function builds every rank's variables, Paddle's and torchrun's names
// alike. The worker reads them back with proto::read_worker_env (tested as a round trip).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "launcher/devices.h"
#include "proto/worker_env.h"

namespace launch {

using proto::EnvMap;
using proto::env_from_environ;

// What every worker of this launcher shares, whatever the job mode.
struct JobSpec {
  std::string job_id = "default";
  std::string log_dir;              // absolute
  std::vector<RankDevice> devices;  // this launcher's workers, one per local index
  // --checkpoint-signal as a name ("SIGUSR2"); empty: not exported.
  std::string checkpoint_signal;
  int max_restarts = 0;  // --max_restart (TORCHELASTIC_MAX_RESTARTS)
  std::string role = "default";  // --role (ROLE_NAME)
  std::string signals_to_handle = "SIGTERM,SIGINT,SIGHUP,SIGQUIT";  // TORCHELASTIC_SIGNALS_TO_HANDLE
  // --virtual-local-rank: every worker's local rank is 0 (LOCAL_RANK, PADDLE_LOCAL_RANK,
  // PADDLE_RANK_IN_NODE), and a GPU rank sees only its GPU (CUDA_VISIBLE_DEVICES narrowed to
  // it, FLAGS_selected_gpus 0).
  bool virtual_local_rank = false;
};

// Where this launcher's workers sit in the job: what a job mode (job_mode.h) answers once it
// has met the other launchers, if there are any.
struct RankLayout {
  int world_size = 1;
  int nnodes = 1;
  int node_rank = 0;
  int local_size = 1;        // processes on this node (one launcher, or the node's Slurm tasks)
  int first_rank = 0;        // global rank of this launcher's first worker
  int first_local_rank = 0;  // its rank on the node (a Slurm task's SLURM_LOCALID; else 0)
  std::vector<std::string> endpoints;  // "ip:port" of every rank, in global rank order
  std::string master;                  // "ip:port": free for the framework's rank 0
  std::string store_addr;              // LAUNCH_STORE_ADDR; empty: no store
  std::string store_token;             // LAUNCH_STORE_TOKEN
  // The job's generation (PADDLE_RESTART_COUNT), when the mode knows it better than this
  // launcher's count of its own runs (elastic membership: a node that joins late).
  std::optional<int> restart_count;
};

struct WorkerEnv {
  EnvMap set;                      // what we export (on top of the launcher's environment)
  std::vector<std::string> unset;  // what we remove from it (FLAGS_selected_gpus on CPU ranks)
};

// Worker `index` (into job.devices) of this launcher in generation `restart_count`. `parent`
// is the launcher's environment, only read: variables the user set (OMP_NUM_THREADS,
// PYTHONUNBUFFERED, TORCH_NCCL_ASYNC_ERROR_HANDLING) are left as they are, and so is
// CUDA_VISIBLE_DEVICES, but under --virtual-local-rank.
WorkerEnv build_worker_env(const JobSpec& job, const RankLayout& layout, int index, int restart_count,
                           const EnvMap& parent);

// The environment the launcher takes its own options and job mode from. Inside another
// launcher's worker (a proto::env::kWorkerMarks variable is set; `outer` names it) the variables
// that describe the outer job are not this launch's and are left out: the worker contract
// (PADDLE_MASTER, PADDLE_LOG_DIR, LAUNCH_STORE_TOKEN, ...), paddle launch's other overrides
// (PADDLE_*, POD_IP), torchrun's PET_* and Slurm's SLURM_* (the step is the outer launcher's).
// Elsewhere: `parent` as it is. The workers' environment still starts from `parent`.
struct LauncherEnv {
  EnvMap env;
  std::optional<std::string> outer;
};
LauncherEnv launcher_env(const EnvMap& parent);

// parent + env.set - env.unset, as the "K=V" strings execve() wants.
std::vector<std::string> merge_env(const EnvMap& parent, const WorkerEnv& env);

// LOG_DIR/workerlog.<global rank> and LOG_DIR/workererror.<global rank>.json (the worker's
// TORCHELASTIC_ERROR_FILE): unique even when nodes or Slurm tasks share a log directory.
std::string worker_log_path(const std::string& log_dir, int rank);
std::string worker_error_file(const std::string& log_dir, int rank);

}  // namespace launch
