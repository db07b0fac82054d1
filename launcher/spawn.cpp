#include "launcher/spawn.h"

#include <sys/prctl.h>
#include <unistd.h>

#include <cstring>

#include "launcher/errors.h"

namespace launch {

namespace {

void write_all(int fd, const char* s) {
  size_t n = std::strlen(s);
  while (n > 0) {
    ssize_t w = write(fd, s, n);
    if (w <= 0) return;
    s += w;
    n -= static_cast<size_t>(w);
  }
}

}  // namespace

pid_t spawn_worker(const SpawnRequest& req) {
  // Everything the child touches is prepared here: between fork and exec only async-signal-safe
  // calls are allowed (the store's thread may hold the allocator's lock at fork time).
  std::vector<char*> argv, envp;
  for (const auto& a : req.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : req.env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const pid_t parent = getpid();

  pid_t pid = fork();
  SYS_CHECK(pid);
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) raise(SIGKILL);  // the launcher died before the prctl took effect
    if (dup2(req.output_fd, STDOUT_FILENO) < 0 || dup2(req.output_fd, STDERR_FILENO) < 0) _exit(127);
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigaction(SIGPIPE, &dfl, nullptr);  // the launcher ignores it; an ignored disposition survives exec
    sigprocmask(SIG_SETMASK, &req.child_mask, nullptr);
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
