// Starting one worker: fork/exec into its own process group and the job's containment, dying
// with the launcher.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <string>
#include <vector>

#include "launcher/containment.h"

namespace launch {

struct SpawnRequest {
  std::vector<std::string> argv;  // argv[0] is a path (program.h resolved it)
  std::vector<std::string> env;   // "K=V"
  int output_fd = -1;             // becomes the child's stdout and stderr
  // --checkpoint-signal (0: none): ignored in the child. An ignored signal stays ignored across
  // execve and fork, so a process without a handler for it (a wrapper shell, a data loader, a
  // program that has not installed its handler yet) survives it; a program's own handler
  // replaces the ignore.
  int checkpoint_signal = 0;
  ChildJoin join;                 // how the child joins the job's containment
};

// The child: setpgid(0,0), PR_SET_PDEATHSIG(SIGKILL) (then getppid() against
// join.expected_parent to close the race with a launcher that died before the prctl), into the
// job's cgroup when there is one, every signal's disposition back to the default but the
// checkpoint signal ignored, an empty signal mask (whatever the launcher inherited: a script
// started with `&` has SIGINT ignored, which its workers must not inherit), execve.
// An exec failure is written to the worker's output (its log) and the child exits 127.
// Throws SystemError when fork() fails.
pid_t spawn_worker(const SpawnRequest& req);

}  // namespace launch
