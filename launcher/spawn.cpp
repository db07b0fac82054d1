#include "launcher/spawn.h"

#include <sched.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cstring>

#include "launcher/errors.h"
#include "launcher/write_all.h"

namespace launch {

pid_t spawn_worker(const SpawnRequest& req) {
  // Everything the child touches is prepared here: between fork and exec only async-signal-safe
  // calls are allowed (the store's thread may hold the allocator's lock at fork time).
  std::vector<char*> argv, envp;
  for (const auto& a : req.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : req.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  if (req.join.pidns_fd >= 0) SYS_CHECK(setns(req.join.pidns_fd, CLONE_NEWPID));
  pid_t pid = fork();
  const int fork_errno = errno;
  if (req.join.pidns_fd >= 0 && pid != 0) SYS_CHECK(setns(req.join.own_pidns_fd, CLONE_NEWPID));
  errno = fork_errno;
  SYS_CHECK(pid);
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != req.join.expected_parent) raise(SIGKILL);  // the launcher died before the prctl
    if (dup2(req.output_fd, STDOUT_FILENO) < 0 || dup2(req.output_fd, STDERR_FILENO) < 0) _exit(127);
    // Into the job's cgroup before anything else runs: every descendant is born there.
    if (req.join.cgroup_procs_fd >= 0 && write(req.join.cgroup_procs_fd, "0", 1) != 1) {
      const char* err = strerrordesc_np(errno);
      write_all(STDERR_FILENO, "launch: cannot join the job's cgroup: ");
      write_all(STDERR_FILENO, err ? err : "unknown error");
      write_all(STDERR_FILENO, "\n");
      _exit(127);
    }
    // Signals as a freshly started program expects them (the launcher ignores SIGPIPE and may
    // have inherited ignored signals; an ignored disposition survives exec, a handler does not),
    // then the checkpoint signal ignored, then the mask emptied: what is pending arrives now.
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int s = 1; s < NSIG; ++s)
      if (s != SIGKILL && s != SIGSTOP) sigaction(s, &dfl, nullptr);  // glibc's own two: EINVAL, fine
    if (req.checkpoint_signal > 0) {
      struct sigaction ign {};
      ign.sa_handler = SIG_IGN;
      sigaction(req.checkpoint_signal, &ign, nullptr);
    }
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    execve(argv[0], argv.data(), envp.data());
    const char* err = strerrordesc_np(errno);  // a static string: no locale, no allocation
    if (!err) err = "unknown error";
    write_all(STDERR_FILENO, "launch: cannot execute ");
    write_all(STDERR_FILENO, argv[0]);
    write_all(STDERR_FILENO, ": ");
    write_all(STDERR_FILENO, err);
    write_all(STDERR_FILENO, "\n");
    _exit(127);
  }
  // Both sides set the group, so it exists before we might signal it, whoever runs first.
  setpgid(pid, pid);
  return pid;
}

}  // namespace launch
