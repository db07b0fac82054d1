// The supervisor: ONE epoll loop over a signalfd (SIGCHLD and the stop signals, blocked by the
// caller), the workers' output pipes and a timerfd for the grace period. It spawns the workers,
// streams their output, detects the first failure, tears the job down and reaps everything.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "launcher/devices.h"
#include "launcher/exit_policy.h"
#include "launcher/options.h"

namespace launch {

struct WorkerPlan {
  int rank = 0;
  RankDevice device;
  std::vector<std::string> argv;
  std::vector<std::string> env;  // "K=V", complete
  std::string log_path;
};

struct WorkerRecord {
  int rank = 0;
  RankDevice device;
  pid_t pid = -1;
  std::string log_path;
  double start_time = 0;  // unix seconds
  double end_time = 0;
  std::optional<Termination> end;
  std::vector<std::string> tail;  // last lines of this run's output, for the failure report
};

struct SupervisorConfig {
  StreamMode stream = StreamMode::Rank0;
  double grace_s = 10;
  bool log_overwrite = false;
  int signal_fd = -1;    // signalfd for SIGCHLD, SIGINT, SIGTERM, SIGHUP, SIGQUIT (blocked)
  sigset_t child_mask;   // the mask workers start with
  // --checkpoint-signal (also in the signalfd's set): forwarded to every live worker process (not
  // its group), and the job goes on. 0: none.
  int checkpoint_signal = 0;
  // Called as soon as the root-cause failure is seen, BEFORE the others are torn down, with the
  // failed rank and how it ended (describe() gives "exited with code 3", "killed by SIGSEGV").
  std::function<void(int rank, const Termination& how)> on_failure;
  // Multi-node: readable (an eventfd) once another node has reported the job's failure; then
  // remote_failure() gives its exit code and description, and the workers are stopped.
  int remote_fd = -1;
  std::function<std::pair<int, std::string>()> remote_failure;
};

struct JobOutcome {
  ExitPolicy policy;
  std::vector<WorkerRecord> records;
  int stragglers = 0;  // processes still alive after SIGKILL and the last bound (should be 0)
  int restart_count = 0;  // which generation this was (set by the caller; 0: the first run)
};

// Runs one generation of the job: spawns `plans`, supervises them until every one has ended.
// Throws SystemError (after killing whatever it started) when a worker cannot be started.
JobOutcome supervise(const std::vector<WorkerPlan>& plans, const SupervisorConfig& cfg);

}  // namespace launch
