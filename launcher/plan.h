// Everything decided before anything starts: the options (with Slurm's and the environment's
// values), the devices, the command, and which job mode runs it. make_plan reads the machine
// (GPUs, PATH, the token file) but starts and creates nothing.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "launcher/options.h"
#include "launcher/slurm/slurm_options.h"
#include "launcher/worker_env.h"

namespace launch {

struct Plan {
  Options opt;      // the user's options, completed from Slurm
  EnvMap parent;    // the launcher's environment
  JobSpec job;      // what every worker of this launcher shares
  std::vector<std::string> command;  // resolved: argv[0] is a path
  std::string summary_path;          // absolute; empty: no --summary
  // The job mode (job_mode.h): one Slurm task per worker, several nodes, or this node alone.
  std::optional<SlurmTaskForm> task;
  bool multinode = false;
  bool elastic = false;       // --nnodes MIN:MAX with MIN < MAX (multinode too)
  bool etcd = false;          // multi-node over etcd (--rdzv-backend etcd): the elastic job mode, even at a fixed size
  std::string master;         // multi-node: "host:port" of node 0's store (--master), or of etcd
  std::string master_origin;  // "--master", or the Slurm variable it was derived from
  std::string token;          // multi-node: the job's shared token
  std::vector<std::string> slurm_hosts;  // the step's host names, to name those missing
  std::vector<std::string> slurm_notes;  // for --dry-run: what Slurm decided, and from what
  std::string log_dir_note;  // inside another launcher's worker: why the log directory moved
  // --requeue: the Slurm job to requeue after a time limit or preemption; empty: none (not
  // asked, or another task's launcher does it: task 0's alone).
  std::string requeue_job;

  int n() const { return static_cast<int>(job.devices.size()); }
  std::chrono::milliseconds elastic_timeout() const {
    return std::chrono::milliseconds(static_cast<long long>(opt.elastic_timeout_s * 1000));
  }
};

// Validates everything; throws UsageError naming what is wrong and how to fix it.
Plan make_plan(const Options& given, const EnvMap& parent);

}  // namespace launch
