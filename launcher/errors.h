// Typed errors of the launcher. main() turns them into exit codes in one place (run.cpp).
#pragma once

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

namespace launch {

// Bad input (option, device list, program, log directory): exit code 2, nothing started.
class UsageError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A system call failed where the launcher cannot go on: exit code 1.
class SystemError : public std::runtime_error {
 public:
  SystemError(const std::string& what, int err)
      : std::runtime_error(what + ": " + std::strerror(err)), err_(err) {}
  int err() const { return err_; }

 private:
  int err_;
};

}  // namespace launch

// Names the failing expression and where it is, as the NCCL check macros do.
#define SYS_CHECK(expr)                                                                    \
  do {                                                                                     \
    if ((expr) < 0)                                                                        \
      throw ::launch::SystemError(std::string(#expr) + " (" __FILE__ ":" +                 \
                                      std::to_string(__LINE__) + ")", errno);              \
  } while (0)

namespace launch {

// A stop signal (SIGTERM from Slurm, SIGINT, ...) arrived while the launcher was waiting with no
// worker running (for the other Slurm tasks or nodes, or for them to finish): nothing to forward
// it to, the launcher exits as that signal says (exit_policy).
class StopRequested : public std::runtime_error {
 public:
  StopRequested(int sig, const std::string& doing)
      : std::runtime_error("stopped by signal " + std::to_string(sig) + " while " + doing), sig_(sig), doing_(doing) {}
  int sig() const { return sig_; }
  const std::string& doing() const { return doing_; }

 private:
  int sig_;
  std::string doing_;
};

// The job is over for this launcher before its workers could run (again): an elastic job that
// another node ended, finished or failed. `code` is the job's exit code; the message says why.
class JobOver : public std::runtime_error {
 public:
  JobOver(int code, const std::string& what) : std::runtime_error(what), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

}  // namespace launch
