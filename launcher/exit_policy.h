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
// A stop signal that arrives while the job is already stopping: whether it means "now" (SIGKILL
// every worker at once) or repeats the request (the workers keep their grace). Schedulers repeat
// SIGTERM as a matter of course -- Slurm sends SIGTERM, SIGCONT, SIGTERM within milliseconds at a
// time limit, and under scancel signals the workers itself besides us -- and a terminal hangs up
// (SIGHUP) once per process it knew; neither is a user losing patience. A Ctrl-C (SIGINT) or
// Ctrl-\ (SIGQUIT) typed while the job stops is.
constexpr bool stop_signal_means_now(int sig) { return sig == SIGINT || sig == SIGQUIT; }

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

// A worker that ended with proto::kPeerLostExitCode and said which peer it lost (the
// LAUNCH_PEER_LOST line), with what the supervisor knows of that peer now.
struct LostPeerReport {
  int noticer = 0;       // the worker that gave up
  Termination end;       // how it ended (the peer-lost exit code)
  std::optional<int> peer;  // the rank it lost; nullopt: it could not tell
  std::string what;      // what it saw ("no progress for 30000 ms waiting for rank 1 ...")
  enum class Peer {
    Alive,    // one of this node's workers, still running: hung, stopped or stuck (peer_state says)
    Ended,    // one of this node's workers that had already ended without failing
    Remote,   // not one of this node's ranks: another node's report should follow
    Unknown,  // no peer named, and none of this node's workers looks stuck
  } peer_is = Peer::Unknown;
  std::string peer_state;  // for Alive: "is stopped (SIGSTOP or SIGTSTP)", ...
  bool named = true;       // for Alive: the noticer named that peer (else it is only the one stuck)
};

// The rank at fault and what happened to it, for the report, the store and the summary.
struct RootCause {
  int rank = -1;
  std::optional<Termination> end;  // how it ended, when it ended on its own
  std::string description;         // "exited with code 3"; "stopped responding: ...; rank 0 lost it: ..."
  std::optional<int> noticed_by;   // the worker that reported losing it, if that is how we know
  int exit_code = 1;               // the job's exit code for it (the noticer's for a lost peer)
};

class ExitPolicy {
 public:
  // Returns true when this end is the job's root cause (the first failure while running).
  bool on_worker_end(int rank, const Termination& t);
  // A worker gave up because a peer vanished. While nothing stopped the job yet, the peer it
  // names is the root cause when it is one of ours and still alive (hung or stopped: its own
  // silence is the failure, the noticer's exit only its consequence); the noticer itself when
  // the peer had ended cleanly or is unknown. For a peer on another node the verdict waits for
  // that node's report (on_remote_failure) or for settle_remote(), whichever comes first.
  enum class Verdict { Consequence, RootCause, AwaitRemote };
  Verdict on_peer_lost(const LostPeerReport& r);
  // No report came from the other nodes in time: the noticer becomes the root cause, naming the
  // peer it lost. Returns false when nothing was awaited.
  bool settle_remote();
  bool awaiting_remote() const { return pending_.has_value(); }
  // Returns true when this signal stops the job (the first one while running).
  bool on_launcher_signal(int sig);
  // Multi-node: another node reported the job's root cause (e.g. "node 1 (10.0.0.2): rank 5
  // exited with code 3"). Returns true when it stops the job (nothing did before), or when it
  // explains a local worker's lost peer that was awaiting it.
  bool on_remote_failure(int exit_code, const std::string& description);

  // Elastic membership: the job re-forms around a node that joins (`why`). Not a failure: the
  // workers' ends from here on are its consequence, and a local worker's lost peer on another
  // node that awaited a report is explained by it. Returns true when it stops the job (nothing
  // did before, or only that awaited peer).
  bool on_reform(const std::string& why);
  std::optional<std::string> reform() const { return reform_; }

  bool stopping() const {
    return root_.has_value() || signal_.has_value() || remote_.has_value() || pending_.has_value() ||
           reform_.has_value();
  }
  std::optional<std::string> remote_failure() const { return remote_; }
  const std::optional<RootCause>& root() const { return root_; }
  std::optional<int> root_rank() const { return root_ ? std::optional<int>(root_->rank) : std::nullopt; }
  std::optional<int> launcher_signal() const { return signal_; }
  int exit_code() const;  // 0 when every worker succeeded (or the job re-forms) and no signal stopped the job

 private:
  std::optional<RootCause> root_;
  // The end that decides the exit code: the root cause's own or, for a rank that stopped
  // responding, that of the worker that lost it (proto::kPeerLostExitCode).
  std::optional<Termination> code_from_;
  std::optional<LostPeerReport> pending_;
  std::optional<int> signal_;
  std::optional<std::string> remote_;
  int remote_code_ = 1;
  std::optional<std::string> reform_;
};

}  // namespace launch
