#include "launcher/exit_policy.h"

#include <sys/wait.h>

#include <cctype>
#include <csignal>

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

std::optional<int> parse_checkpoint_signal(const std::string& name) {
  std::string n;
  for (char c : name) n += static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (n.rfind("SIG", 0) == 0) n = n.substr(3);
  if (n == "USR1" || n == std::to_string(SIGUSR1)) return SIGUSR1;
  if (n == "USR2" || n == std::to_string(SIGUSR2)) return SIGUSR2;
  return std::nullopt;
}

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
  root_rank_ = rank;
  root_ = t;
  return true;
}

bool ExitPolicy::on_launcher_signal(int sig) {
  if (stopping()) return false;
  signal_ = sig;
  return true;
}

bool ExitPolicy::on_remote_failure(int exit_code, const std::string& description) {
  if (stopping()) return false;
  remote_ = description;
  // The root cause's code, so every node of the job exits alike; 1 when it was no worker's exit
  // (a launcher that stopped responding).
  remote_code_ = exit_code > 0 ? exit_code : 1;
  return true;
}

int ExitPolicy::exit_code() const {
  if (root_) return exit_code_of(*root_);
  if (signal_) return exit_code_for_signal(*signal_);
  if (remote_) return remote_code_;
  return 0;
}

}  // namespace launch
