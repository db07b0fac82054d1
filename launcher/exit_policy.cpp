#include "launcher/exit_policy.h"

#include <sys/wait.h>

#include <csignal>

#include "proto/worker_env.h"

namespace launch {

Termination from_wait_status(int st) {
  if (WIFSIGNALED(st)) return {Termination::How::Signaled, WTERMSIG(st)};
  return {Termination::How::Exited, WIFEXITED(st) ? WEXITSTATUS(st) : 0};
}

int exit_code_for_signal(int sig) { return 128 + sig; }

int exit_code_of(const Termination& t) {
  return t.how == Termination::How::Signaled ? exit_code_for_signal(t.value) : t.value;
}

bool is_failure(const Termination& t) { return exit_code_of(t) != 0; }

// The worker reads LAUNCH_CHECKPOINT_SIGNAL with the same parser.
std::optional<int> parse_checkpoint_signal(const std::string& name) { return proto::parse_checkpoint_signal(name); }

std::string signal_name(int sig) {
  switch (sig) {
    case SIGHUP: return "SIGHUP";
    case SIGINT: return "SIGINT";
    case SIGQUIT: return "SIGQUIT";
    case SIGILL: return "SIGILL";
    case SIGTRAP: return "SIGTRAP";
    case SIGABRT: return "SIGABRT";
    case SIGBUS: return "SIGBUS";
    case SIGFPE: return "SIGFPE";
    case SIGKILL: return "SIGKILL";
    case SIGUSR1: return "SIGUSR1";
    case SIGSEGV: return "SIGSEGV";
    case SIGUSR2: return "SIGUSR2";
    case SIGPIPE: return "SIGPIPE";
    case SIGALRM: return "SIGALRM";
    case SIGTERM: return "SIGTERM";
    case SIGSTKFLT: return "SIGSTKFLT";
    case SIGCHLD: return "SIGCHLD";
    case SIGCONT: return "SIGCONT";
    case SIGSTOP: return "SIGSTOP";
    case SIGTSTP: return "SIGTSTP";
    case SIGTTIN: return "SIGTTIN";
    case SIGTTOU: return "SIGTTOU";
    case SIGURG: return "SIGURG";
    case SIGXCPU: return "SIGXCPU";
    case SIGXFSZ: return "SIGXFSZ";
    case SIGVTALRM: return "SIGVTALRM";
    case SIGPROF: return "SIGPROF";
    case SIGWINCH: return "SIGWINCH";
    case SIGIO: return "SIGIO";
    case SIGPWR: return "SIGPWR";
    case SIGSYS: return "SIGSYS";
    default: break;
  }
  // SIGRTMIN is a function call in glibc (it reserves a few for itself).
  if (sig >= SIGRTMIN && sig <= SIGRTMAX)
    return sig == SIGRTMIN ? "SIGRTMIN" : "SIGRTMIN+" + std::to_string(sig - SIGRTMIN);
  return "signal " + std::to_string(sig);
}

std::string describe(const Termination& t) {
  if (t.how == Termination::How::Signaled) return "killed by " + signal_name(t.value);
  return "exited with code " + std::to_string(t.value);
}

std::string describe(int rank, const Termination& t) { return "rank " + std::to_string(rank) + " " + describe(t); }

// ---------------------------------------------------------------------------------------------

bool ExitPolicy::on_worker_end(int rank, const Termination& t) {
  if (!is_failure(t) || stopping()) return false;
  root_ = RootCause{rank, t, describe(t), std::nullopt, exit_code_of(t)};
  code_from_ = t;
  return true;
}

ExitPolicy::Verdict ExitPolicy::on_peer_lost(const LostPeerReport& r) {
  if (stopping()) return Verdict::Consequence;
  const std::string peer = r.peer ? "rank " + std::to_string(*r.peer) : "a peer";
  const std::string noticer = "rank " + std::to_string(r.noticer);
  code_from_ = r.end;
  switch (r.peer_is) {
    case LostPeerReport::Peer::Alive:
      root_ = RootCause{*r.peer, std::nullopt,
                        "stopped responding (its process " + r.peer_state + "); " + noticer +
                            (r.named ? " lost it: " : " gave up: ") + r.what,
                        r.noticer, exit_code_of(r.end)};
      return Verdict::RootCause;
    case LostPeerReport::Peer::Ended:
      root_ = RootCause{r.noticer, r.end,
                        describe(r.end) + " after losing " + peer + ", which had already exited cleanly: " + r.what,
                        std::nullopt, exit_code_of(r.end)};
      return Verdict::RootCause;
    case LostPeerReport::Peer::Unknown:
      root_ = RootCause{r.noticer, r.end, describe(r.end) + " after losing a peer it could not name: " + r.what,
                        std::nullopt, exit_code_of(r.end)};
      return Verdict::RootCause;
    case LostPeerReport::Peer::Remote:
      pending_ = r;
      return Verdict::AwaitRemote;
  }
  return Verdict::Consequence;
}

bool ExitPolicy::settle_remote() {
  if (!pending_) return false;
  const LostPeerReport& r = *pending_;
  root_ = RootCause{r.noticer, r.end,
                    describe(r.end) + " after losing rank " + std::to_string(r.peer.value_or(-1)) +
                        ", which is not one of this launcher's workers and whose failure nobody reported: " + r.what,
                    std::nullopt, exit_code_of(r.end)};
  pending_.reset();
  return true;
}

bool ExitPolicy::on_launcher_signal(int sig) {
  if (stopping()) return false;
  signal_ = sig;
  return true;
}

bool ExitPolicy::on_remote_failure(int exit_code, const std::string& description) {
  if (stopping() && !pending_) return false;
  // A local worker's lost peer on another node, explained: that node's failure is the cause.
  pending_.reset();
  code_from_.reset();
  remote_ = description;
  // The root cause's code, so every node of the job exits alike; 1 when it was no worker's exit
  // (a launcher that stopped responding).
  remote_code_ = exit_code > 0 ? exit_code : 1;
  return true;
}

bool ExitPolicy::on_reform(const std::string& why) {
  if (stopping() && !pending_) return false;
  pending_.reset();
  code_from_.reset();
  reform_ = why;
  return true;
}

int ExitPolicy::exit_code() const {
  if (remote_) return remote_code_;
  if (code_from_) return exit_code_of(*code_from_);
  if (pending_) return exit_code_of(pending_->end);
  if (signal_) return exit_code_for_signal(*signal_);
  return 0;
}

}  // namespace launch
