#include "launcher/supervisor.h"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <set>

#include "launcher/blame.h"
#include "launcher/errors.h"
#include "launcher/line_buffer.h"
#include "launcher/log.h"
#include "launcher/output.h"
#include "launcher/seconds.h"
#include "launcher/spawn.h"
#include "proto/peer_lost.h"

namespace launch {

namespace {

// After SIGKILL, how long we wait for the kernel to deliver it before we stop waiting (a process
// in uninterruptible sleep, e.g. stuck in a driver, cannot be reaped sooner).
constexpr double kKillBoundS = 5.0;
// While stopping: how often to look for processes the stop signal has not reached yet (adopted
// orphans, processes born since). The kernel tells us of none of these.
constexpr long kRescanNs = 10'000'000;
// At the end: how long the console may make no progress before its queued output is dropped.
constexpr std::chrono::milliseconds kConsoleFinish{250};
// A worker that lost a peer is most likely a consequence: the verdict waits this long after it
// for the end that explains it (the culprit's own exit, or the report of the worker that lost
// the culprit itself). Long enough for the neighbours of a ring to time out in turn; short
// beside any communication timeout.
constexpr double kHoldS = 0.25;

double now_unix() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

void arm(int fd, double seconds, bool periodic = false) {
  itimerspec its{};
  const double whole = std::floor(seconds);
  its.it_value.tv_sec = static_cast<time_t>(whole);
  its.it_value.tv_nsec = static_cast<long>((seconds - whole) * 1e9);
  if (its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0) its.it_value.tv_nsec = 1;
  if (periodic) its.it_interval = its.it_value;
  SYS_CHECK(timerfd_settime(fd, 0, &its, nullptr));
}

// What is left of a one-shot timer (0 when it is not armed).
double seconds_left(int fd) {
  itimerspec its{};
  if (timerfd_gettime(fd, &its) != 0) return 0;
  return double(its.it_value.tv_sec) + double(its.it_value.tv_nsec) * 1e-9;
}

void disarm(int fd) {
  itimerspec its{};
  timerfd_settime(fd, 0, &its, nullptr);
}

bool consume(int fd) {
  uint64_t expirations;
  return read(fd, &expirations, sizeof expirations) > 0;
}

enum class Phase { Running, Stopping, Killing, Done };

struct Worker {
  WorkerRecord rec;
  std::string prefix;  // of its console lines under --stream all
  int pipe_fd = -1;
  LogFile log;
  bool reaped = false;
  LineSplitter lines;
  TailLines tail{20};
  std::optional<proto::PeerLost> peer_lost;  // its LAUNCH_PEER_LOST line, if it wrote one
};

class Loop {
 public:
  Loop(const std::vector<WorkerPlan>& plans, const SupervisorConfig& cfg) : cfg_(cfg) {
    if (!cfg.containment) throw std::logic_error("supervise: no containment");
    if (!cfg.console) throw std::logic_error("supervise: no console");
    workers_.resize(plans.size());
    for (size_t i = 0; i < plans.size(); ++i) {
      workers_[i].rec.rank = plans[i].rank;
      workers_[i].rec.device = plans[i].device;
      workers_[i].rec.log_path = plans[i].log_path;
      workers_[i].prefix = plans[i].console_prefix;
    }
  }
  ~Loop() {
    for (auto& w : workers_)
      if (w.pipe_fd >= 0) close(w.pipe_fd);
    for (int fd : {timer_fd_, rescan_fd_, await_fd_, hold_fd_, save_fd_, epoll_fd_})
      if (fd >= 0) close(fd);
  }

  JobOutcome run(const std::vector<WorkerPlan>& plans);

 private:
  void open_logs();
  void start_all(const std::vector<WorkerPlan>& plans);
  void on_signals();
  void reap();
  void collect_all(std::vector<size_t>& ended);
  bool collect(pid_t pid, int status, std::vector<size_t>& ended);
  void handle_end(size_t i);
  void settle();
  void act_on(const LostPeerReport& r);
  void fail_now();
  void on_output(size_t i);
  void drain(size_t i);
  void emit(Worker& w, const char* data, size_t n);
  void console_write(std::string_view data);
  void watch_consoles();
  void signal_everyone(int sig);
  void signal_members();
  void begin_stop(int sig);
  void on_timer();
  void on_rescan();
  void on_remote();
  void on_await();
  void on_hold();
  void on_reform();
  void on_save_done();
  int forward_checkpoint_signal();
  bool finished();

  const SupervisorConfig& cfg_;
  Containment& box_ = *cfg_.containment;
  std::vector<Worker> workers_;
  std::map<pid_t, size_t> by_pid_;
  ExitPolicy policy_;
  Phase phase_ = Phase::Running;
  int epoll_fd_ = -1;
  int timer_fd_ = -1;   // grace, then the bound after SIGKILL
  int rescan_fd_ = -1;  // while stopping: reach what the stop signal has not reached yet
  int await_fd_ = -1;   // a lost peer on another node: the wait for that node's report
  int hold_fd_ = -1;    // a worker lost a peer: the verdict waits kHoldS (settle)
  int save_fd_ = -1;    // the job re-forms: the workers' time to save before they are stopped
  // The workers that failed while the verdict is held, in the order their ends arrived.
  std::vector<size_t> failed_;
  size_t live_ = 0;
  bool have_children_ = true;
  std::vector<ProcessInfo> stragglers_;
  std::string stragglers_left_;
  Console* console_ = cfg_.console;
  // Teardown: the signal of this phase, the workers' process groups (signalled as groups) and
  // the processes outside them signalled since the phase began (each gets it once).
  int stop_sig_ = 0;
  std::set<pid_t> groups_;
  std::set<pid_t> signalled_;
};

constexpr uint64_t kSignalTag = ~uint64_t{0}, kTimerTag = kSignalTag - 1, kRemoteTag = kSignalTag - 2,
                   kRescanTag = kSignalTag - 3, kAwaitTag = kSignalTag - 4, kConsoleTag = kSignalTag - 5,
                   kLogConsoleTag = kSignalTag - 6, kHoldTag = kSignalTag - 7, kReformTag = kSignalTag - 8,
                   kSaveTag = kSignalTag - 9;

// ---------------------------------------------------------------------------------------------
// Setup

void Loop::open_logs() {
  // All logs are opened before any worker starts: a bad log directory starts nothing.
  for (auto& w : workers_) {
    int flags = O_WRONLY | O_CREAT | O_CLOEXEC | (cfg_.log_overwrite ? O_TRUNC : O_APPEND);
    int fd = open(w.rec.log_path.c_str(), flags, 0644);
    if (fd < 0)
      throw UsageError("cannot open log file " + w.rec.log_path + ": " + std::strerror(errno) +
                       "; choose another --log_dir");
    w.log = LogFile(fd, w.rec.log_path);
  }
}

void Loop::start_all(const std::vector<WorkerPlan>& plans) {
  try {
    for (size_t i = 0; i < plans.size(); ++i) {
      int fds[2];
      SYS_CHECK(pipe2(fds, O_CLOEXEC));
      SpawnRequest req{plans[i].argv, plans[i].env, fds[1], cfg_.checkpoint_signal, box_.child_join()};
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
    box_.kill_all();
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
        const int sent = forward_checkpoint_signal();
        log::info("received " + signal_name(sig) + ": forwarded it to " + std::to_string(sent) +
                  " worker(s) (checkpoint; the job goes on)");
        continue;
      }
      settle();  // a failure held before this signal came first
      if (phase_ == Phase::Running) {
        policy_.on_launcher_signal(sig);
        log::warn("received " + signal_name(sig) + ": forwarding it to every worker, SIGKILL in " +
                  seconds_text(cfg_.grace_s) + " s");
        begin_stop(sig);
      } else if (phase_ == Phase::Stopping && stop_signal_means_now(sig)) {
        log::warn("received " + signal_name(sig) + " while stopping: killing every worker now");
        signal_everyone(SIGKILL);
        phase_ = Phase::Killing;
        arm(timer_fd_, kKillBoundS);
      } else if (phase_ == Phase::Stopping) {
        // Not forwarded: the workers have the request already (a second one would be the same
        // request to them, and a worker whose handler resets would die of it).
        log::info("received " + signal_name(sig) + " while stopping: the same request, the workers keep their grace (SIGKILL in " +
                  seconds_text(seconds_left(timer_fd_)) + " s; SIGINT for now)");
      }
    }
    if (chld) reap();
  }
}

// Records the end of worker `pid` (false: it was none of ours).
bool Loop::collect(pid_t pid, int status, std::vector<size_t>& ended) {
  auto it = by_pid_.find(pid);
  if (it == by_pid_.end()) {
    box_.on_reaped(pid);  // an orphan we adopted, or the namespace's init
    return false;
  }
  Worker& w = workers_[it->second];
  w.reaped = true;
  w.rec.end_time = now_unix();
  w.rec.end = from_wait_status(status);
  --live_;
  drain(it->second);  // its last words, the LAUNCH_PEER_LOST line among them, before its end
  if (!w.peer_lost) w.peer_lost = proto::parse_peer_lost(w.lines.partial());
  ended.push_back(it->second);
  return true;
}

// Collects every worker (and adopted orphan) that has ended, without acting on it.
void Loop::collect_all(std::vector<size_t>& ended) {
  while (true) {
    int st = 0;
    pid_t pid = waitpid(-1, &st, WNOHANG);
    if (pid == 0) {
      have_children_ = true;
      return;
    }
    if (pid < 0) {
      if (errno == EINTR) continue;
      have_children_ = false;  // ECHILD: no child is left anywhere (adopted orphans included)
      return;
    }
    collect(pid, st, ended);
  }
}

void Loop::reap() {
  std::vector<size_t> ended;
  collect_all(ended);
  for (size_t i : ended) handle_end(i);
  // A worker's death hands its orphans to us (or to the namespace's init): reach them now.
  if (phase_ == Phase::Stopping || phase_ == Phase::Killing) signal_members();
}

void Loop::handle_end(size_t i) {
  Worker& w = workers_[i];
  const Termination t = *w.rec.end;
  if (!is_failure(t) || policy_.stopping()) {
    log::debug(describe(w.rec.rank, t) + (w.peer_lost ? " (lost a peer: " + w.peer_lost->what + ")" : ""));
    return;
  }
  failed_.push_back(i);
  if (exit_code_of(t) == proto::kPeerLostExitCode) {
    // Most likely a consequence: wait a moment for what explains it.
    if (failed_.size() == 1) arm(hold_fd_, kHoldS);
    log::debug(describe(w.rec.rank, t) + " (lost a peer: " + (w.peer_lost ? w.peer_lost->what : "it did not say") +
               "): holding the verdict " + seconds_text(kHoldS) + " s");
    return;
  }
  settle();  // a failure of its own: the cause, whatever lost-peer reports came before it
}

// The verdict on the failures held in failed_ (blame.h), from what is known now.
void Loop::settle() {
  if (failed_.empty()) return;
  disarm(hold_fd_);
  // Ends not collected yet are part of the picture (a culprit that has just died).
  std::vector<size_t> ended;
  collect_all(ended);
  for (size_t i : ended)
    if (is_failure(*workers_[i].rec.end)) failed_.push_back(i);
  std::vector<RankView> views;
  for (const auto& w : workers_)
    views.push_back({w.rec.rank, w.rec.end, w.peer_lost,
                     w.reaped || w.rec.pid <= 0 ? char(0) : process_state(w.rec.pid)});
  const Blame b = blame(views, failed_);
  failed_.clear();
  if (b.own_failure) {
    const Worker& w = workers_[*b.own_failure];
    if (policy_.on_worker_end(w.rec.rank, *w.rec.end)) fail_now();
  } else {
    act_on(b.lost);
  }
}

void Loop::act_on(const LostPeerReport& r) {
  switch (policy_.on_peer_lost(r)) {
    case ExitPolicy::Verdict::RootCause:
      fail_now();
      break;
    case ExitPolicy::Verdict::AwaitRemote:
      if (cfg_.remote_fd < 0) {
        // Nobody else will explain it (one Slurm task per worker): the noticer it is.
        policy_.settle_remote();
        fail_now();
        break;
      }
      log::error(describe(r.noticer, r.end) + " after losing rank " + std::to_string(r.peer.value_or(-1)) +
                 ", which runs on another node (" + r.what + "): stopping the workers here; waiting up to " +
                 seconds_text(std::chrono::duration<double>(cfg_.remote_wait).count()) + " s for that node's report");
      begin_stop(SIGTERM);
      arm(await_fd_, std::chrono::duration<double>(cfg_.remote_wait).count());
      if (cfg_.remote_peer_lost && r.peer) cfg_.remote_peer_lost(*r.peer, r.what);
      break;
    case ExitPolicy::Verdict::Consequence:
      log::debug(describe(r.noticer, r.end) + " (lost a peer: " + r.what + ")");
      break;
  }
}

// The root cause is known: tell the store (survivors blocked there learn it at once), say it,
// and stop everyone.
void Loop::fail_now() {
  const RootCause& root = *policy_.root();
  if (cfg_.on_failure) cfg_.on_failure(root);
  log::error("rank " + std::to_string(root.rank) + " " + root.description +
             ": stopping the other workers (SIGTERM, SIGKILL after " + seconds_text(cfg_.grace_s) + " s)");
  if (phase_ == Phase::Running) begin_stop(SIGTERM);
}

void Loop::console_write(std::string_view data) {
  console_->write(data);
  console_->report();
}

// EPOLLOUT on the console streams, edge-triggered for the whole run: an event each time a full
// stream's reader makes room, so that whatever is queued there -- by us, or by the store's thread
// logging meanwhile -- is written then, and no event while nothing changes. A stream epoll
// refuses (a regular file, /dev/null) never makes a writer wait.
void Loop::watch_consoles() {
  auto watch = [&](Console* c, uint64_t tag) {
    if (!c || c->poll_fd() < 0) return;
    epoll_event ev{};
    ev.events = EPOLLOUT | EPOLLET;
    ev.data.u64 = tag;
    epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, c->poll_fd(), &ev);
  };
  watch(console_, kConsoleTag);
  if (cfg_.log_console != console_) watch(cfg_.log_console, kLogConsoleTag);
}

void Loop::emit(Worker& w, const char* data, size_t n) {
  w.log.write(std::string_view(data, n));
  const bool to_console = cfg_.stream == StreamMode::All || (cfg_.stream == StreamMode::Rank0 && w.rec.rank == 0);
  if (to_console && cfg_.stream == StreamMode::Rank0) console_write(std::string_view(data, n));
  const std::string& prefix = w.prefix;
  w.lines.feed(std::string_view(data, n), [&](std::string_view line) {
    w.tail.push(line);
    if (line.find(proto::kPeerLostMarker) != std::string_view::npos)
      if (auto pl = proto::parse_peer_lost(line)) w.peer_lost = std::move(pl);
    if (to_console && cfg_.stream == StreamMode::All) {
      // One queued write per whole line: ranks never interleave inside a line.
      std::string out;
      out.reserve(prefix.size() + line.size() + 1);
      out.append(prefix).append(line).push_back('\n');
      console_write(out);
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
  stop_sig_ = sig;
  signalled_.clear();
  // Every worker's group, reaped or not: its grandchildren may live on in it. A group whose last
  // member is gone cannot have its id reused while we still signal it in this teardown window,
  // except by a new process that also makes itself a group leader: the risk ninja and torchrun
  // accept too.
  for (auto& w : workers_)
    if (w.rec.pid > 0) {
      kill(-w.rec.pid, sig);
      if (sig != SIGKILL) kill(-w.rec.pid, SIGCONT);  // a stopped process never sees its SIGTERM
      groups_.insert(w.rec.pid);
    }
  if (sig == SIGKILL) box_.kill_all();  // cgroup.kill: everything at once, forks in flight too
  signal_members();
}

// The rest of the job: processes outside the workers' groups (they called setsid, or were
// adopted), each once per phase, as the containment lists them.
void Loop::signal_members() {
  if (stop_sig_ == 0) return;
  const pid_t self = getpid();
  for (pid_t p : box_.members()) {
    if (p == self || groups_.count(getpgid(p)) || !signalled_.insert(p).second) continue;
    kill(p, stop_sig_);
    if (stop_sig_ != SIGKILL) kill(p, SIGCONT);
  }
}

void Loop::begin_stop(int sig) {
  signal_everyone(sig);
  phase_ = Phase::Stopping;
  arm(timer_fd_, cfg_.grace_s);
  arm(rescan_fd_, kRescanNs * 1e-9, /*periodic=*/true);
}

void Loop::on_timer() {
  if (!consume(timer_fd_)) return;
  if (phase_ == Phase::Stopping) {
    log::warn("grace period of " + seconds_text(cfg_.grace_s) + " s is over: SIGKILL");
    signal_everyone(SIGKILL);
    phase_ = Phase::Killing;
    arm(timer_fd_, kKillBoundS);
  } else if (phase_ == Phase::Killing) {
    const pid_t self = getpid();
    for (pid_t p : box_.members())  // each once; the dead that wait to be reaped are no stragglers
      if (auto info = p == self ? std::nullopt : process_info(p); info && info->state != 'Z' && info->state != 'X')
        stragglers_.push_back(*info);
    phase_ = Phase::Done;
    if (stragglers_.empty()) return;
    stragglers_left_ = box_.leave();
    log::error(std::to_string(stragglers_.size()) + " process(es) still alive " + seconds_text(kKillBoundS) +
               " s after SIGKILL: " + describe_processes(stragglers_) + "; giving up waiting for them: " +
               stragglers_left_);
  }
}

void Loop::on_rescan() {
  if (!consume(rescan_fd_)) return;
  reap();
  signal_members();
}

void Loop::on_remote() {
  uint64_t count;
  if (read(cfg_.remote_fd, &count, sizeof count) < 0) return;
  if (!cfg_.remote_failure) return;
  settle();  // a verdict held here goes first: it may be what the other node is reporting
  const bool awaited = policy_.awaiting_remote();
  auto [code, what] = cfg_.remote_failure();
  if (!policy_.on_remote_failure(code, what)) return;
  if (awaited) {
    disarm(await_fd_);
    log::error("the job failed on another node (" + what + "): that explains the lost peer");
    return;  // our workers are being stopped already
  }
  log::error("the job failed on another node (" + what + "): stopping the workers (SIGTERM, SIGKILL after " +
             seconds_text(cfg_.grace_s) + " s)");
  if (phase_ == Phase::Running) begin_stop(SIGTERM);
}

void Loop::on_await() {
  if (!consume(await_fd_)) return;
  if (!policy_.settle_remote()) return;
  log::error("no node reported a failure within " +
             seconds_text(std::chrono::duration<double>(cfg_.remote_wait).count()) + " s");
  fail_now();
}

void Loop::on_hold() {
  if (consume(hold_fd_)) settle();
}

// To each worker process alone, not its group: its helpers (data loaders, a shell's children)
// have no handler for it (they inherit it ignored, see spawn.h). Returns how many got it.
int Loop::forward_checkpoint_signal() {
  int sent = 0;
  for (auto& w : workers_)
    if (w.rec.pid > 0 && !w.reaped && kill(w.rec.pid, cfg_.checkpoint_signal) == 0) ++sent;
  return sent;
}

void Loop::on_reform() {
  uint64_t count;
  if (read(cfg_.reform_fd, &count, sizeof count) < 0 || phase_ != Phase::Running) return;
  settle();  // a failure held before it came first
  const std::string why = cfg_.reform_reason ? cfg_.reform_reason() : "a node joins";
  if (!policy_.on_reform(why)) return;
  disarm(await_fd_);  // a lost peer awaiting another node's report: the re-forming explains it
  if (cfg_.checkpoint_signal == 0 || cfg_.reform_save.count() == 0) {
    log::warn("the job re-forms (" + why + "): stopping the workers (SIGTERM, SIGKILL after " +
              seconds_text(cfg_.grace_s) + " s)");
    begin_stop(SIGTERM);
    return;
  }
  const int sent = forward_checkpoint_signal();
  const double save_s = std::chrono::duration<double>(cfg_.reform_save).count();
  log::warn("the job re-forms (" + why + "): " + signal_name(cfg_.checkpoint_signal) + " to " + std::to_string(sent) +
            " worker(s) to save; they are stopped in " + seconds_text(save_s) + " s");
  arm(save_fd_, save_s);
}

void Loop::on_save_done() {
  if (!consume(save_fd_) || phase_ != Phase::Running) return;
  log::info("stopping the workers for the new round (SIGTERM, SIGKILL after " + seconds_text(cfg_.grace_s) + " s)");
  begin_stop(SIGTERM);
}

bool Loop::finished() {
  if (phase_ == Phase::Done) return true;
  if (live_ == 0) settle();  // nothing more can arrive to explain a lost peer
  if (live_ > 0) return false;
  if (policy_.awaiting_remote()) return false;  // bounded by the await timer
  if (phase_ == Phase::Running) {
    // Every worker exited 0. Whatever they left behind in their groups (or orphaned to us)
    // would hold a GPU with nobody to wait for it: stop it the same way.
    reap();
    if (!box_.anything_left(have_children_)) return true;
    log::warn("workers exited but left processes behind: stopping them");
    begin_stop(SIGTERM);
    return false;
  }
  if (!box_.anything_left(have_children_)) return true;
  if (phase_ == Phase::Stopping && stop_sig_ != SIGTERM) {
    // Every worker has ended, but not all they started: a shell's background jobs ignore SIGINT
    // and SIGQUIT by rule. Stop what they left behind as above instead of waiting out the grace.
    log::info("every worker has ended; stopping the processes they left behind (SIGTERM)");
    signal_everyone(SIGTERM);
  }
  return false;
}

// ---------------------------------------------------------------------------------------------

JobOutcome Loop::run(const std::vector<WorkerPlan>& plans) {
  open_logs();
  epoll_fd_ = epoll_create1(EPOLL_CLOEXEC);
  SYS_CHECK(epoll_fd_);
  for (int* fd : {&timer_fd_, &rescan_fd_, &await_fd_, &hold_fd_, &save_fd_}) {
    *fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
    SYS_CHECK(*fd);
  }
  auto watch = [&](int fd, uint64_t tag) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = tag;
    SYS_CHECK(epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &ev));
  };
  watch(cfg_.signal_fd, kSignalTag);
  watch(timer_fd_, kTimerTag);
  watch(rescan_fd_, kRescanTag);
  watch(await_fd_, kAwaitTag);
  watch(hold_fd_, kHoldTag);
  watch(save_fd_, kSaveTag);
  if (cfg_.remote_fd >= 0) watch(cfg_.remote_fd, kRemoteTag);
  if (cfg_.reform_fd >= 0) watch(cfg_.reform_fd, kReformTag);
  watch_consoles();

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
      switch (events[k].data.u64) {
        case kSignalTag: on_signals(); break;
        case kTimerTag: on_timer(); break;
        case kRescanTag: on_rescan(); break;
        case kRemoteTag: on_remote(); break;
        case kAwaitTag: on_await(); break;
        case kHoldTag: on_hold(); break;
        case kReformTag: on_reform(); break;
        case kSaveTag: on_save_done(); break;
        case kConsoleTag:
          console_->flush();
          console_->report();
          break;
        case kLogConsoleTag:  // its notices ("N bytes of launch's messages did not reach stderr") go to it
          cfg_.log_console->flush();
          cfg_.log_console->report();
          break;
        default: break;
      }
    }
  }

  JobOutcome out;
  for (size_t i = 0; i < workers_.size(); ++i) {
    Worker& w = workers_[i];
    drain(i);
    const bool to_console = cfg_.stream == StreamMode::All;
    const std::string& prefix = w.prefix;
    w.lines.finish([&](std::string_view line) {
      w.tail.push(line);
      if (to_console) console_->write(prefix + std::string(line) + "\n");
    });
    w.log.finish();
    w.rec.tail = w.tail.lines();
    out.records.push_back(w.rec);
  }
  console_->finish(kConsoleFinish);
  console_->report();
  if (cfg_.log_console && cfg_.log_console != console_) cfg_.log_console->report();
  out.policy = policy_;
  out.stragglers = stragglers_;
  out.stragglers_left = stragglers_left_;
  return out;
}

}  // namespace

JobOutcome supervise(const std::vector<WorkerPlan>& plans, const SupervisorConfig& cfg) {
  Loop loop(plans, cfg);
  return loop.run(plans);
}

}  // namespace launch
