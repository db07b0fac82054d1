// How a Slurm job step fills in the options the user did not give. Pure: the step's layout
// (launcher/slurm/slurm_env.h, derived from the environment) and the user's options in, the
// options to run with out, with one line per derived value for `launch --dry-run`.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "launcher/options.h"
#include "launcher/slurm/slurm_env.h"
#include "launcher/worker_env.h"

namespace launch {

// Slurm's default KillWait: seconds between the SIGTERM at the time limit and the SIGKILL. It
// is a slurm.conf setting, not in the job's environment; our default --grace (10 s) stays below.
inline constexpr double kSlurmDefaultKillWait = 30.0;

// The one-task-per-worker form (srun --ntasks-per-node=G launch ...), single node: every task's
// launcher runs one worker; they meet in the store that task 0's launcher serves on
// 127.0.0.1:store_port (derived from the job and step id, the same for every task).
struct SlurmTaskForm {
  // This task's worker in the job, as Slurm numbers it: world_size SLURM_NTASKS, local_size the
  // tasks on this node, first_rank SLURM_PROCID, first_local_rank SLURM_LOCALID. The endpoints, the
  // master and the store are the meeting's (slurm_tasks.h); --dry-run shows them as undecided.
  RankLayout ranks;
  uint16_t store_port = 0;
  std::string step;     // "<job id>.<step id>": names the step in messages and the token file

  int rank() const { return ranks.first_rank; }
};

struct SlurmDerived {
  Options options;                 // the user's, with Slurm's values where none was given
  std::optional<SlurmTaskForm> task;
  std::vector<std::string> hosts;  // the step's nodes, to name those missing at the rendezvous
  std::vector<std::string> notes;  // "nnodes = 1 (from SLURM_STEP_NUM_NODES=1)", ...
};

// `visible_gpus`: what detect_visible_gpus() found (Slurm's CUDA_VISIBLE_DEVICES included).
// A step of several nodes (one launcher per node) becomes a multi-node job: --nnodes, --rank
// and --master ("<first host>:<port derived from the job and step>", the host still a name)
// from the step. Throws UsageError for what cannot run: one task per worker on several nodes,
// or a task form that contradicts the options.
SlurmDerived apply_slurm(const Options& given, const slurm::SlurmLayout& layout, int visible_gpus);

}  // namespace launch
