#include "launcher/slurm/requeue.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "launcher/log.h"

extern char** environ;

namespace launch::slurm {

namespace {

// '|'-ended fields: "COMPLETING|TimeLimit|N/A|" -> {"COMPLETING", "TimeLimit", "N/A"}.
std::vector<std::string> fields(const std::string& line) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t bar; (bar = line.find('|', start)) != std::string::npos; start = bar + 1) {
    std::string f = line.substr(start, bar - start);
    while (!f.empty() && (f.back() == ' ' || f.back() == '\n')) f.pop_back();
    while (!f.empty() && (f.front() == ' ' || f.front() == '\n')) f.erase(f.begin());
    out.push_back(f);
  }
  return out;
}

std::string first_line(const std::string& s) {
  std::string line = s.substr(0, s.find('\n'));
  return line.empty() ? "no output" : line;
}

bool unset(const std::string& time) { return time.empty() || time == "N/A" || time == "None" || time == "Unknown"; }

constexpr size_t kMaxOutput = 64 * 1024;  // squeue's one line, scontrol's one message

}  // namespace

RequeueVerdict requeue_verdict(const std::string& squeue_line) {
  const std::vector<std::string> f = fields(squeue_line);
  if (f.size() < 3) return {false, "squeue said '" + squeue_line + "', not the job's state"};
  const std::string &state = f[0], &reason = f[1], &preempted = f[2];
  if (reason == "TimeLimit") return {true, "the time limit"};
  if (!unset(preempted)) return {true, "preemption (at " + preempted + ")"};
  if (state == "RUNNING") return {true, "a signal ahead of the job's end (sbatch --signal)"};
  if (state == "COMPLETING" || state == "CANCELLED")
    return {false, "the job was cancelled (scancel), not stopped by its time limit or a preemption"};
  return {false, "the job is " + state + (reason == "None" || reason.empty() ? "" : " (" + reason + ")")};
}

CommandResult run_command(const std::vector<std::string>& argv, double timeout_s) {
  CommandResult r;
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) {
    r.output = std::strerror(errno);
    return r;
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_adddup2(&actions, fds[1], STDERR_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigfillset(&defaults);  // the launcher's own dispositions (SIGPIPE ignored) are not the command's
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, args[0], &actions, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    r.output = argv[0] + ": " + std::strerror(rc);
    return r;
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  char buf[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      r.timed_out = true;
      kill(pid, SIGKILL);
      break;
    }
    pollfd p{fds[0], POLLIN, 0};
    const int n = poll(&p, 1, static_cast<int>(left.count()));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) continue;  // the deadline check above ends it
    const ssize_t got = read(fds[0], buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;  // EOF: the command closed its output (it exits now)
    if (r.output.size() < kMaxOutput) r.output.append(buf, size_t(std::min<ssize_t>(got, ssize_t(kMaxOutput - r.output.size()))));
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

bool requeue_after_stop(const std::string& job_id, double timeout_s) {
  const CommandResult q = run_command({"squeue", "-h", "-j", job_id, "-O", kRequeueSqueueFormat}, timeout_s);
  if (q.status != 0 || q.timed_out) {
    log::warn("--requeue: job " + job_id + " not requeued: squeue " + (q.timed_out ? "timed out" : "failed: " + first_line(q.output)));
    return false;
  }
  const RequeueVerdict v = requeue_verdict(q.output);
  if (!v.requeue) {
    log::info("--requeue: job " + job_id + " not requeued: " + v.why);
    return false;
  }
  const CommandResult c = run_command({"scontrol", "requeue", job_id}, timeout_s);
  if (c.status != 0 || c.timed_out) {
    log::warn("--requeue: scontrol requeue " + job_id + " after " + v.why + " failed: " +
              (c.timed_out ? "timed out" : first_line(c.output)) +
              " (is the job a batch job, submitted without --no-requeue?)");
    return false;
  }
  log::info("--requeue: job " + job_id + " requeued after " + v.why +
            "; the next run starts from its checkpoint (e.g. train_resnet --resume auto)");
  return true;
}

}  // namespace launch::slurm
