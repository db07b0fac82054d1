// launch --requeue: after the stop signal of a Slurm time limit or preemption, once the workers
// have saved and ended, put the batch job back into the queue (scontrol requeue), so that the
// next allocation runs the same script and resumes from the checkpoint (train_resnet
// --resume auto). A job cancelled by its user (scancel) stays cancelled.
//
// The verdict comes from the job's state as squeue shows it at that moment, read by a pure
// function (tested with recorded lines); the commands run apart from it, each bounded.
#pragma once

#include <string>
#include <vector>

namespace launch::slurm {

// squeue -O: the fields the verdict reads, each ended by '|'.
inline constexpr const char* kRequeueSqueueFormat = "State:|,Reason:|,PreemptTime:|";

struct RequeueVerdict {
  bool requeue = false;
  std::string why;  // "the time limit", "preemption (at ...)", "the job was cancelled (scancel)", ...
};

// From one line of `squeue -h -j JOB -O kRequeueSqueueFormat`, read while the job ends:
//   - Reason=TimeLimit: the time limit (the state is COMPLETING by then) -> requeue;
//   - a PreemptTime: preempted (COMPLETING, Reason None) -> requeue;
//   - still RUNNING: a signal ahead of the end (sbatch --signal=TERM@120) -> requeue;
//   - anything else (COMPLETING or CANCELLED without either): cancelled -> not requeued.
RequeueVerdict requeue_verdict(const std::string& squeue_line);

// A short command's output and status. Runs `argv` (looked up in PATH) with an empty signal
// mask, stdout and stderr captured (at most 64 KiB), killed after `timeout_s`.
struct CommandResult {
  int status = -1;      // exit code; 128+signal when killed; -1: could not start
  bool timed_out = false;
  std::string output;   // stdout and stderr together
};
CommandResult run_command(const std::vector<std::string>& argv, double timeout_s);

// Reads the job's state, requeues it when the verdict says so and logs what it did either way
// (one line). Returns whether the job is back in the queue.
bool requeue_after_stop(const std::string& job_id, double timeout_s = 10.0);

}  // namespace launch::slurm
