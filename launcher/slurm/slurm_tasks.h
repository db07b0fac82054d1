// The one-task-per-worker form on one node (srun --ntasks-per-node=G launch PROGRAM), the I/O
// shell around slurm_options.h: the G launchers of a job step meet in the store that task 0's
// launcher serves, exchange their endpoint ports, and task 0 keeps the store up until every task
// is done.
//
// Minimal and deterministic; every key lives in task 0's store (job id: the step's):
//   1. task 0 starts the store on HOST:<port derived from the job and step id> (any free port if
//      that one is taken), then writes "ADDR\nTOKEN\n" to
//      /tmp/launch-<uid>/slurm-<job>.<step>[-<SLURM_STEP_LAUNCHER_PORT>].token (mode 0600, in a
//      0700 directory owned by the user; temporary name, then rename).
//   2. every task reads that file (waiting for it with inotify, bounded), connects, reserves its
//      endpoint port and SETs launch/slurm/endpoint/<rank>; task 0 also reserves the master port
//      and SETs launch/slurm/master. Then every task MULTI_GETs all of them (bounded).
//   3. when its worker has ended, every task SETs launch/slurm/done/<rank> = its exit code. Task 0,
//      if its own worker succeeded, keeps serving until every task's done key is there (bounded:
//      the other workers may still use the store), then removes the token file.
// A worker failure in another task is not propagated through the store: Slurm stops the step
// (srun --kill-on-bad-exit=1), and each launcher forwards Slurm's SIGTERM to its worker.
#pragma once

#include <signal.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "launcher/slurm_options.h"

namespace launch {

struct SlurmTaskConfig {
  SlurmTaskForm form;
  std::string host = "127.0.0.1";
  std::string job_id;
  std::string launcher_port;  // SLURM_STEP_LAUNCHER_PORT: tells two runs of the same step id apart
  std::chrono::seconds meet_timeout{120};   // every task of a step starts within seconds
  std::chrono::seconds drain_timeout{600};  // task 0 waits this long for the others to finish
  sigset_t stop_signals;  // blocked; a pending one ends a wait (StopRequested): INT, TERM, HUP, QUIT
};

class SlurmTaskGroup {
 public:
  // Call with the stop signals blocked (task 0's store thread inherits the mask). Throws
  // StopRequested, or std::runtime_error naming what was waited for.
  static std::unique_ptr<SlurmTaskGroup> meet(const SlurmTaskConfig& cfg);
  virtual ~SlurmTaskGroup() = default;

  virtual const std::vector<uint16_t>& endpoint_ports() const = 0;  // every rank's
  virtual uint16_t master_port() const = 0;
  virtual std::string store_address() const = 0;
  virtual std::string store_token() const = 0;
  // Task 0: publishes a worker failure in its store (wakes waiters with JOB_FAILED); else empty.
  virtual std::function<void(int rank, const std::string& what)> failure_reporter() = 0;
  // Lets the worker bind its ports (the cross-launch locks stay held).
  virtual void release_sockets() = 0;
  // This task's worker has ended with `exit_code`: see step 3 above.
  virtual void finish(int exit_code) = 0;
};

}  // namespace launch
