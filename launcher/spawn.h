// Starting one worker: fork/exec into its own process group, dying with the launcher.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <string>
#include <vector>

namespace launch {

struct SpawnRequest {
  std::vector<std::string> argv;  // argv[0] is a path (program.h resolved it)
  std::vector<std::string> env;   // "K=V"
  int output_fd = -1;             // becomes the child's stdout and stderr
  sigset_t child_mask;            // the launcher's mask before it blocked its signals
};

// The child: setpgid(0,0), PR_SET_PDEATHSIG(SIGKILL) (then getppid() to close the race with a
// launcher that died before the prctl), signal mask and SIGPIPE disposition restored, execve.
// An exec failure is written to the worker's output (its log) and the child exits 127.
// Throws SystemError when fork() fails.
pid_t spawn_worker(const SpawnRequest& req);

}  // namespace launch
