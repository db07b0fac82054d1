#include "launcher/supervisor.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>

#include "launcher/errors.h"
#include "launcher/line_buffer.h"
#include "launcher/log.h"
#include "launcher/spawn.h"

namespace launch {

namespace {

// After SIGKILL, how long we wait for the kernel to deliver it before we stop waiting (a process
// in uninterruptible sleep, e.g. stuck in a driver, cannot be reaped sooner).
constexpr double kKillBoundS = 5.0;

double now_unix() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

std::string secs(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", s);
  return buf;
}

bool write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

// Children of this thread, including orphans adopted as subreaper (they may have left their
// worker's process group with setsid, so signalling the groups does not reach them).
std::vector<pid_t> my_children() {
  std::vector<pid_t> out;
  std::ifstream f("/proc/thread-self/children");
  pid_t p;
  while (f >> p) out.push_back(p);
  return out;
}

enum class Phase { Running, Stopping, Killing, Done };

struct Worker {
  WorkerRecord rec;
  int pipe_fd = -1;
  int log_fd = -1;
  bool reaped = false;
  LineSplitter lines;
  TailLines tail{20};
};

class Loop {
 public:
  Loop(const std::vector<WorkerPlan>& plans, const SupervisorConfig& cfg) : cfg_(cfg) {
    workers_.resize(plans.size());
    for (size_t i = 0; i < plans.size(); ++i) {
      workers_[i].rec.rank = plans[i].rank;
      workers_[i].rec.device = plans[i].device;
      workers_[i].rec.log_path = plans[i].log_path;
    }
  }
  ~Loop() {
    for (auto& w : workers_) {
      if (w.pipe_fd >= 0) close(w.pipe_fd);
      if (w.log_fd >= 0) close(w.log_fd);
    }
    if (timer_fd_ >= 0) close(timer_fd_);
    if (epoll_fd_ >= 0) close(epoll_fd_);
  }

  JobOutcome run(const std::vector<WorkerPlan>& plans);

 private:
  void open_logs();
  void start_all(const std::vector<WorkerPlan>& plans);
  void on_signals();
  void reap();
  void on_output(size_t i);
  void drain(size_t i);
  void emit(Worker& w, const char* data, size_t n);
  void signal_everyone(int sig);
  void begin_stop(int sig);
  void arm_timer(double seconds);
  void on_timer();
  void on_remote();
  bool finished();

  const SupervisorConfig& cfg_;
  std::vector<Worker> workers_;
  std::map<pid_t, size_t> by_pid_;
  ExitPolicy policy_;
  Phase phase_ = Phase::Running;
  int epoll_fd_ = -1;
  int timer_fd_ = -1;
  size_t live_ = 0;
  bool have_children_ = true;
  bool console_ok_ = true;
  int stragglers_ = 0;
};

// ---------------------------------------------------------------------------------------------
// Setup

void Loop::open_logs() {
  // All logs are opened before any worker starts: a bad log directory starts nothing.
  for (auto& w : workers_) {
    int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (cfg_.log_overwrite ? O_TRUNC : O_APPEND);
    w.log_fd = open(w.rec.log_path.c_str(), flags, 0644);
    if (w.log_fd < 0)
      throw UsageError("cannot open log file " + w.rec.log_path + ": " + std::strerror(errno) +
                       "; choose another --log_dir");
  }
}

void Loop::start_all(const std::vector<WorkerPlan>& plans) {
  try {
    for (size_t i = 0; i < plans.size(); ++i) {
      int fds[2];
      SYS_CHECK(pipe2(fds, O_CLOEXEC));
      SpawnRequest req{plans[i].argv, plans[i].env, fds[1], cfg_.child_mask};
      pid_t pid;
      try {
        pid = spawn_worker(req);
      } catch (...) {
        close(fds[0]);
        close(fds[1]);
        throw;
      }
      close(fds[1]);
      Worker& w = workers_[i];
      w.pipe_fd = fds[0];
      SYS_CHECK(fcntl(w.pipe_fd, F_SETFL, O_NONBLOCK));
      w.rec.pid = pid;
      w.rec.start_time = now_unix();
      by_pid_[pid] = i;
      ++live_;
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u64 = i;
      SYS_CHECK(epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, w.pipe_fd, &ev));
    }
  } catch (...) {
    // Half a job is no job: take down what started, then report.
    for (auto& w : workers_)
      if (w.rec.pid > 0) kill(-w.rec.pid, SIGKILL);
    for (auto& w : workers_)
      if (w.rec.pid > 0) waitpid(w.rec.pid, nullptr, 0);
    throw;
  }
}

// ---------------------------------------------------------------------------------------------
// Events

void Loop::on_signals() {
  signalfd_siginfo si[16];
  while (true) {
    ssize_t n = read(cfg_.signal_fd, si, sizeof si);
    if (n <= 0) return;
    bool chld = false;
    for (size_t k = 0; k < static_cast<size_t>(n) / sizeof si[0]; ++k) {
      int sig = static_cast<int>(si[k].ssi_signo);
      if (sig == SIGCHLD) {
        chld = true;
        continue;
      }
      if (sig == cfg_.checkpoint_signal) {
        // Not a stop: the workers save at their next step boundary and go on.
        // To the worker process alone, not its group: its helpers (data loaders, a shell's
        // children) do not handle it, and its default action would kill them.
        int sent = 0;
        for (auto& w : workers_)
          if (w.rec.pid > 0 && !w.reaped && kill(w.rec.pid, sig) == 0) ++sent;
        log::info("received " + signal_name(sig) + ": forwarded it to " + std::to_string(sent) +
                  " worker(s) (checkpoint; the job goes on)");
        continue;
      }
      if (phase_ == Phase::Running) {
        policy_.on_launcher_signal(sig);
        log::warn("received " + signal_name(sig) + ": forwarding it to every worker, SIGKILL in " +
                  secs(cfg_.grace_s) + " s");
        begin_stop(sig);
      } else if (phase_ == Phase::Stopping) {
        log::warn("received " + signal_name(sig) + " again: killing every worker now");
        signal_everyone(SIGKILL);
        phase_ = Phase::Killing;
        arm_timer(kKillBoundS);
      }
    }
    if (chld) reap();
  }
}

void Loop::reap() {
  while (true) {
    int st = 0;
    pid_t pid = waitpid(-1, &st, WNOHANG);
    if (pid == 0) {
      have_children_ = true;
      return;
    }
    if (pid < 0) {
      if (errno == EINTR) continue;
      have_children_ = false;  // ECHILD: no descendant is left anywhere
      return;
    }
    auto it = by_pid_.find(pid);
    if (it == by_pid_.end()) continue;  // an orphaned grandchild we adopted as subreaper
    Worker& w = workers_[it->second];
    w.reaped = true;
    w.rec.end_time = now_unix();
    w.rec.end = from_wait_status(st);
    --live_;
    drain(it->second);
    const std::string what = describe(w.rec.rank, *w.rec.end);
    if (policy_.on_worker_end(w.rec.rank, *w.rec.end)) {
      // Survivors blocked in the store learn who failed before we start killing them.
      if (cfg_.on_failure) cfg_.on_failure(w.rec.rank, *w.rec.end);
      log::error(what + ": stopping the other workers (SIGTERM, SIGKILL after " +
                 secs(cfg_.grace_s) + " s)");
      begin_stop(SIGTERM);
    } else {
      log::debug(what);
    }
  }
}

void Loop::emit(Worker& w, const char* data, size_t n) {
  if (w.log_fd >= 0 && !write_all(w.log_fd, data, n)) {
    log::warn("cannot write " + w.rec.log_path + ": " + std::strerror(errno) + "; log truncated");
    close(w.log_fd);
    w.log_fd = -1;
  }
  const bool to_console = console_ok_ && (cfg_.stream == StreamMode::All ||
                                          (cfg_.stream == StreamMode::Rank0 && w.rec.rank == 0));
  if (to_console && cfg_.stream == StreamMode::Rank0 && !write_all(STDOUT_FILENO, data, n))
    console_ok_ = false;
  const std::string prefix = "[rank " + std::to_string(w.rec.rank) + "] ";
  w.lines.feed(std::string_view(data, n), [&](std::string_view line) {
    w.tail.push(line);
    if (to_console && console_ok_ && cfg_.stream == StreamMode::All) {
      // One write per whole line: ranks never interleave inside a line.
      std::string out;
      out.reserve(prefix.size() + line.size() + 1);
      out.append(prefix).append(line).push_back('\n');
      if (!write_all(STDOUT_FILENO, out.data(), out.size())) console_ok_ = false;
    }
  });
}

void Loop::drain(size_t i) {
  Worker& w = workers_[i];
  char buf[65536];
  while (w.pipe_fd >= 0) {
    ssize_t n = read(w.pipe_fd, buf, sizeof buf);
    if (n > 0) {
      emit(w, buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return;
    // EOF (or an error): nobody holds the write end any more.
    epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, w.pipe_fd, nullptr);
    close(w.pipe_fd);
    w.pipe_fd = -1;
  }
}

void Loop::on_output(size_t i) { drain(i); }

// ---------------------------------------------------------------------------------------------
// Teardown

void Loop::signal_everyone(int sig) {
  // Every worker's group, reaped or not: its grandchildren may live on in it. A group whose last
  // member is gone cannot have its id reused while we still signal it in this teardown window,
  // except by a new process that also makes itself a group leader: the risk ninja and torchrun
  // accept too.
  std::set<pid_t> groups;
  for (auto& w : workers_)
    if (w.rec.pid > 0) {
      kill(-w.rec.pid, sig);
      groups.insert(w.rec.pid);
    }
  // Adopted orphans outside those groups (once each: a second SIGINT is not the same as one).
  for (pid_t p : my_children())
    if (!groups.count(getpgid(p))) kill(p, sig);
}

void Loop::begin_stop(int sig) {
  signal_everyone(sig);
  if (sig != SIGCONT) signal_everyone(SIGCONT);  // a stopped process never sees its SIGTERM
  phase_ = Phase::Stopping;
  arm_timer(cfg_.grace_s);
}

void Loop::arm_timer(double seconds) {
  itimerspec its{};
  double whole = std::floor(seconds);
  its.it_value.tv_sec = static_cast<time_t>(whole);
  its.it_value.tv_nsec = static_cast<long>((seconds - whole) * 1e9);
  if (its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0) its.it_value.tv_nsec = 1;
  SYS_CHECK(timerfd_settime(timer_fd_, 0, &its, nullptr));
}

void Loop::on_timer() {
  uint64_t expirations;
  if (read(timer_fd_, &expirations, sizeof expirations) < 0) return;
  if (phase_ == Phase::Stopping) {
    log::warn("grace period of " + secs(cfg_.grace_s) + " s is over: SIGKILL");
    signal_everyone(SIGKILL);
    phase_ = Phase::Killing;
    arm_timer(kKillBoundS);
  } else if (phase_ == Phase::Killing) {
    stragglers_ = static_cast<int>(my_children().size());
    log::error(std::to_string(stragglers_) + " process(es) still alive " + secs(kKillBoundS) +
               " s after SIGKILL (uninterruptible sleep?); giving up waiting for them");
    phase_ = Phase::Done;
  }
}

void Loop::on_remote() {
  uint64_t count;
  if (read(cfg_.remote_fd, &count, sizeof count) < 0) return;
  if (!cfg_.remote_failure) return;
  auto [code, what] = cfg_.remote_failure();
  if (policy_.on_remote_failure(code, what)) {
    log::error("the job failed on another node (" + what + "): stopping the workers (SIGTERM, SIGKILL after " +
               secs(cfg_.grace_s) + " s)");
    begin_stop(SIGTERM);
  }
}

bool Loop::finished() {
  if (phase_ == Phase::Done) return true;
  if (live_ > 0) return false;
  if (phase_ == Phase::Running) {
    // Every worker exited 0. Whatever they left behind in their groups (or orphaned to us)
    // would hold a GPU with nobody to wait for it: stop it the same way.
    reap();
    if (!have_children_) return true;
    log::warn("workers exited but left processes behind: stopping them");
    begin_stop(SIGTERM);
    return false;
  }
  return !have_children_;
}

// ---------------------------------------------------------------------------------------------

JobOutcome Loop::run(const std::vector<WorkerPlan>& plans) {
  open_logs();
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  SYS_CHECK(epoll_fd_);
  timer_fd_ = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
  SYS_CHECK(timer_fd_);
  constexpr uint64_t kSignalTag = ~uint64_t{0}, kTimerTag = ~uint64_t{0} - 1, kRemoteTag = ~uint64_t{0} - 2;
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kSignalTag;
  SYS_CHECK(epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, cfg_.signal_fd, &ev));
  ev.data.u64 = kTimerTag;
  SYS_CHECK(epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, timer_fd_, &ev));
  if (cfg_.remote_fd >= 0) {
    ev.data.u64 = kRemoteTag;
    SYS_CHECK(epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, cfg_.remote_fd, &ev));
  }

  start_all(plans);
  on_signals();  // anything that arrived while we were spawning

  epoll_event events[64];
  while (!finished()) {
    int n = epoll_wait(epoll_fd_, events, 64, -1);
    if (n < 0 && errno == EINTR) continue;
    SYS_CHECK(n);
    // Output first, so a worker's last words are in its log before its exit is handled.
    for (int k = 0; k < n; ++k)
      if (events[k].data.u64 < workers_.size()) on_output(events[k].data.u64);
    for (int k = 0; k < n; ++k) {
      if (events[k].data.u64 == kSignalTag) on_signals();
      if (events[k].data.u64 == kTimerTag) on_timer();
      if (events[k].data.u64 == kRemoteTag) on_remote();
    }
  }

  JobOutcome out;
  for (size_t i = 0; i < workers_.size(); ++i) {
    Worker& w = workers_[i];
    drain(i);
    const bool to_console = console_ok_ && cfg_.stream == StreamMode::All;
    const std::string prefix = "[rank " + std::to_string(w.rec.rank) + "] ";
    w.lines.finish([&](std::string_view line) {
      w.tail.push(line);
      if (to_console) {
        std::string s = prefix + std::string(line) + "\n";
        write_all(STDOUT_FILENO, s.data(), s.size());
      }
    });
    w.rec.tail = w.tail.lines();
    out.records.push_back(w.rec);
  }
  out.policy = policy_;
  out.stragglers = stragglers_;
  return out;
}

}  // namespace

JobOutcome supervise(const std::vector<WorkerPlan>& plans, const SupervisorConfig& cfg) {
  Loop loop(plans, cfg);
  return loop.run(plans);
}

}  // namespace launch
