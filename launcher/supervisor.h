// The supervisor: ONE epoll loop over a signalfd (SIGCHLD and the stop signals, blocked by the
// caller), the workers' output pipes, the console (when it cannot take output at once) and
// timerfds for the grace period, for finding what teardown has not reached yet, for a verdict
// held a moment after a worker lost a peer (blame.h), and for a verdict awaited from another
// node. It spawns the workers into the job's containment, streams
// their output (logs complete, console never blocking), detects the first failure and the rank
// at fault, tears the job down and reaps everything.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "launcher/containment.h"
#include "launcher/devices.h"
#include "launcher/exit_policy.h"
#include "launcher/options.h"
#include "launcher/output.h"
#include "launcher/proc_info.h"

namespace launch {

struct WorkerPlan {
  int rank = 0;
  RankDevice device;
  std::vector<std::string> argv;
  std::vector<std::string> env;  // "K=V", complete
  std::string log_path;
  std::string console_prefix = "[rank 0] ";  // of its lines under --stream all (line_prefix.h)
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
  // Where the workers are born and how teardown reaches all their descendants (required).
  Containment* containment = nullptr;
  // The console streams (output.h): the workers' output goes to `console` (required), the
  // launcher's messages to `log_console` (log.h; the same object when stdout and stderr are one
  // file; null: none to flush). The loop writes what they queued when their reader makes room.
  Console* console = nullptr;
  Console* log_console = nullptr;
  // --checkpoint-signal (also in the signalfd's set): forwarded to every live worker process (not
  // its group), and the job goes on. 0: none. Workers start with it ignored, so that a process
  // without a handler (a wrapper shell, a program not yet ready) is not killed by it.
  int checkpoint_signal = 0;
  // Called as soon as the root cause is known, BEFORE the others are torn down: the rank at
  // fault, how it ended if it did, and what happened ("exited with code 3", "stopped
  // responding (...); rank 0 lost it: ...").
  std::function<void(const RootCause&)> on_failure;
  // Multi-node: readable (an eventfd) once another node has reported the job's failure; then
  // remote_failure() gives its exit code and description, and the workers are stopped.
  int remote_fd = -1;
  std::function<std::pair<int, std::string>()> remote_failure;
  // Multi-node: how long a worker's lost peer on another node waits for that node's report
  // before the worker is named (a dead launcher is declared after 5 s without a heartbeat, one
  // period more to notice, and a margin).
  std::chrono::milliseconds remote_wait{8000};
  // Multi-node: told (on this thread, bounded) when one of our workers lost global rank `rank`
  // of another node, before the wait above: that evidence lets the job monitor name a dead
  // launcher at once (remote_fd fires) instead of after the heartbeat timeout.
  std::function<void(int rank, const std::string& what)> remote_peer_lost;
  // Elastic membership: readable (an eventfd) when the job re-forms around a node that joins;
  // reform_reason() says why. The workers get the checkpoint signal (when there is one) and
  // `reform_save` to save, then they are stopped as at a failure, and the generation ends as a
  // re-forming (ExitPolicy::reform), not as a failure.
  int reform_fd = -1;
  std::function<std::string()> reform_reason;
  std::chrono::milliseconds reform_save{0};
};

struct JobOutcome {
  ExitPolicy policy;
  std::vector<WorkerRecord> records;
  // Processes still alive after SIGKILL and the last bound (uninterruptible sleep; should be
  // none), and what the containment leaves of them (Containment::leave).
  std::vector<ProcessInfo> stragglers;
  std::string stragglers_left;
  int restart_count = 0;  // which generation this was (set by the caller; 0: the first run)
};

// Runs one generation of the job: spawns `plans`, supervises them until every one has ended.
// Throws SystemError (after killing whatever it started) when a worker cannot be started.
JobOutcome supervise(const std::vector<WorkerPlan>& plans, const SupervisorConfig& cfg);

}  // namespace launch
