// The one-task-per-worker form on one node (srun --ntasks-per-node=G launch PROGRAM), a job
// mode (job_mode.h): the G launchers of a job step meet in the store that task 0's launcher
// serves, exchange their endpoint ports, and task 0 keeps the store up until every task is done.
//
// Minimal and deterministic; every key lives in task 0's store (job id: the step's):
//   1. task 0 starts the store on HOST:<port derived from the job and step id> (any free port if
//      that one is taken), then writes "ADDR\nTOKEN\n" to
//      /tmp/launch-<uid>/slurm-<job>.<step>[-<SLURM_STEP_LAUNCHER_PORT>].token (mode 0600, in a
//      0700 directory owned by the user; temporary name, then rename). It holds an exclusive
//      flock on that file for as long as it serves: the kernel drops the lock when task 0 dies,
//      even by SIGKILL, so a file whose lock is free is stale. Readers ignore a stale file, and
//      every task of the form removes the stale files of its user when it starts and ends.
//   2. every task reads that file (waiting for it with inotify, bounded by --elastic_timeout),
//      connects, reserves its endpoint port and SETs launch/slurm/endpoint/<rank>; task 0 also
//      reserves the master port and SETs launch/slurm/master. Then every task MULTI_GETs all of
//      them (bounded by --elastic_timeout).
//   3. when its worker has ended, every task SETs launch/slurm/done/<rank> = its exit code. Task 0,
//      if its own worker succeeded, keeps serving until every task's done key is there (bounded:
//      the other workers may still use the store), then removes the token file.
// A worker failure in another task is not propagated through the store: Slurm stops the step
// (srun --kill-on-bad-exit=1), and each launcher forwards Slurm's SIGTERM to its worker.
#pragma once

#include <string>
#include <vector>

namespace launch {

// The token files of `dir` whose writer is gone (their lock is free): removed. Returns their paths.
std::vector<std::string> remove_stale_token_files(const std::string& dir);

}  // namespace launch
