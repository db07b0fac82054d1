// How a job ends: pure functions from worker terminations (and signals to the launcher) to the
// launcher's exit code. The root cause is the first failure; whatever dies after it (usually
// from our own SIGTERM) is a consequence, not a cause.
#pragma once

#include <csignal>
#include <optional>
#include <string>

namespace launch {

struct Termination {
  enum class How { Exited, Signaled };
  How how = How::Exited;
  int value = 0;  // exit code or signal number
};

// The signals that stop a job (forwarded to the workers, or ending a wait before they run).
inline constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

Termination from_wait_status(int wait_status);
// A process ended by a signal counts as 128+signal, as shells and flux do: a worker killed by
// it, or the launcher itself stopped by it. The one place of that rule.
int exit_code_for_signal(int sig);
int exit_code_of(const Termination& t);
bool is_failure(const Termination& t);
std::string signal_name(int sig);  // "SIGSEGV"; "SIGRTMIN+2"; "signal 99"
// The signals --checkpoint-signal accepts: "USR1", "SIGUSR2", "usr2", "12". nullopt for anything
// else (the stop signals already stop the job; others are nobody's convention for "save now").
std::optional<int> parse_checkpoint_signal(const std::string& name);
std::string describe(const Termination& t);            // "exited with code 3", "killed by SIGSEGV"
std::string describe(int rank, const Termination& t);  // "rank 2 exited with code 3"

class ExitPolicy {
 public:
  // Returns true when this end is the job's root cause (the first failure while running).
  bool on_worker_end(int rank, const Termination& t);
  // Returns true when this signal stops the job (the first one while running).
  bool on_launcher_signal(int sig);
  // Multi-node: another node reported the job's root cause (e.g. "node 1 (10.0.0.2): rank 5
  // exited with code 3"). Returns true when it stops the job (nothing did before).
  bool on_remote_failure(int exit_code, const std::string& description);

  bool stopping() const { return root_rank_.has_value() || signal_.has_value() || remote_.has_value(); }
  std::optional<std::string> remote_failure() const { return remote_; }
  std::optional<int> root_rank() const { return root_rank_; }
  std::optional<Termination> root_termination() const { return root_; }
  std::optional<int> launcher_signal() const { return signal_; }
  int exit_code() const;  // 0 when every worker succeeded and no signal stopped the job

 private:
  std::optional<int> root_rank_;
  std::optional<Termination> root_;
  std::optional<int> signal_;
  std::optional<std::string> remote_;
  int remote_code_ = 1;
};

}  // namespace launch
