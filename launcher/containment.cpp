#include "launcher/containment.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <thread>

#include "launcher/errors.h"
#include "launcher/log.h"
#include "launcher/write_all.h"

namespace launch {

namespace {

std::string slurp(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Children of this thread, including orphans adopted as subreaper.
std::vector<pid_t> my_children() {
  std::vector<pid_t> out;
  std::ifstream f("/proc/thread-self/children");
  pid_t p;
  while (f >> p) out.push_back(p);
  return out;
}

bool pid_alive(pid_t pid) { return kill(pid, 0) == 0 || errno == EPERM; }

// --- Async-signal-safe pieces for the forked helpers (no allocation, no locks; write_all.h).
void sleep_ms(long ms) {
  timespec ts{ms / 1000, (ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
  }
}

// Keeps `keep` as fd 3, stderr as it is; stdin/stdout become /dev/null; the rest is closed.
void keep_only(int keep) {
  if (keep != 3) {
    dup2(keep, 3);
    close(keep);
  }
  fcntl(3, F_SETFD, 0);
  if (close_range(4, ~0U, 0) < 0)
    for (int fd = 4; fd < 4096; ++fd) close(fd);
  int null = open("/dev/null", O_RDWR);
  if (null >= 0) {
    dup2(null, STDIN_FILENO);
    dup2(null, STDOUT_FILENO);
    if (null > 3) close(null);
  }
}

bool cgroup_populated(const char* events_path) {
  int fd = open(events_path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[256];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return false;
  buf[n] = '\0';
  return std::strstr(buf, "populated 1") != nullptr;
}

// ---------------------------------------------------------------------------------------------
// cgroup v2

class CgroupContainment final : public Containment {
 public:
  // Returns nullptr and fills `why` when no cgroup can be had here.
  static std::unique_ptr<CgroupContainment> make(std::string& why) {
    auto mount = cgroup2_mount(slurp("/proc/self/mountinfo"));
    if (!mount) {
      why = "no cgroup v2 hierarchy is mounted";
      return nullptr;
    }
    auto path = cgroup2_path(slurp("/proc/self/cgroup"));
    auto parent = path ? cgroup2_dir(*mount, *path) : std::nullopt;
    if (!parent) {
      why = "this process's cgroup v2 is not visible under " + mount->mount_point;
      return nullptr;
    }
    sweep_stale(*parent);
    std::unique_ptr<CgroupContainment> c(new CgroupContainment);
    c->dir_ = *parent + "/launch-" + std::to_string(getpid());
    if (mkdir(c->dir_.c_str(), 0755) < 0) {
      why = "cgroup v2 " + *parent + " is not writable (" + std::strerror(errno) +
            "; it is where systemd or Slurm would delegate one)";
      return nullptr;
    }
    c->made_ = true;
    c->kill_path_ = c->dir_ + "/cgroup.kill";
    c->events_path_ = c->dir_ + "/cgroup.events";
    if (access(c->kill_path_.c_str(), W_OK) < 0) {
      why = "cgroup v2 without cgroup.kill (Linux older than 5.14)";
      return nullptr;
    }
    c->procs_fd_ = open((c->dir_ + "/cgroup.procs").c_str(), O_WRONLY | O_CLOEXEC);
    if (c->procs_fd_ < 0 || !c->probe(why)) {
      if (why.empty()) why = "cannot open " + c->dir_ + "/cgroup.procs: " + std::strerror(errno);
      return nullptr;
    }
    if (!c->start_guard(why)) return nullptr;
    return c;
  }

  ~CgroupContainment() override {
    if (procs_fd_ >= 0) close(procs_fd_);
    if (made_ && !left_) {
      // The supervisor has reaped everything; whatever escaped it goes now.
      if (cgroup_populated(events_path_.c_str())) {
        kill_all();
        for (int i = 0; i < 500 && cgroup_populated(events_path_.c_str()); ++i) sleep_ms(10);
      }
      if (rmdir(dir_.c_str()) < 0 && errno != ENOENT)
        log::warn("cannot remove the job's cgroup " + dir_ + ": " + std::strerror(errno));
    }
    if (guard_fd_ >= 0) close(guard_fd_);  // the guard finds no cgroup and exits
  }

  ContainmentKind kind() const override { return ContainmentKind::Cgroup; }
  std::string describe() const override {
    return "cgroup v2 " + dir_ + " (teardown and a SIGKILLed launch's guard use cgroup.kill)";
  }
  ChildJoin child_join() const override { return {procs_fd_, getpid(), -1, -1}; }

  // The workers are both our children and in the cgroup: each process once.
  std::vector<pid_t> members() const override {
    std::vector<pid_t> out = my_children();
    list_procs(dir_, out, 0);
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
  }
  bool kill_all() override {
    int fd = open(kill_path_.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) return false;
    const bool ok = write(fd, "1", 1) == 1;
    close(fd);
    return ok;
  }
  bool anything_left(bool launcher_has_children) const override { return launcher_has_children; }
  bool on_reaped(pid_t) override { return false; }
  std::string leave() override {
    left_ = true;
    kill_all();
    // The guard waits for the end of our pipe anyway: this byte tells it the launcher's end is
    // no accident (nothing to report) and that processes may stay a while (wait for them).
    if (guard_fd_ >= 0) {
      [[maybe_unused]] ssize_t n = write(guard_fd_, "L", 1);
    }
    return "they stay in the job's cgroup " + dir_ + " (cgroup.kill written: each dies as soon as the kernel lets it); "
           "its guard process (pid " + std::to_string(guard_pid_) + ") removes the cgroup once the last is gone";
  }

 private:
  CgroupContainment() = default;

  // cgroup.procs lists a cgroup's own processes only: a worker may have made child cgroups (a
  // nested launch does), whose processes belong to the job as well.
  static void list_procs(const std::string& dir, std::vector<pid_t>& out, int depth) {
    std::ifstream f(dir + "/cgroup.procs");
    pid_t p;
    while (f >> p) out.push_back(p);
    if (depth >= 16) return;
    DIR* d = opendir(dir.c_str());
    if (!d) return;
    while (dirent* e = readdir(d))
      if (e->d_type == DT_DIR && e->d_name[0] != '.') list_procs(dir + "/" + e->d_name, out, depth + 1);
    closedir(d);
  }

  // Removes the cgroups of launchers that died with their guard (both SIGKILLed): empty ones.
  static void sweep_stale(const std::string& parent) {
    DIR* d = opendir(parent.c_str());
    if (!d) return;
    while (dirent* e = readdir(d)) {
      const std::string name = e->d_name;
      if (name.rfind("launch-", 0) != 0) continue;
      const pid_t pid = static_cast<pid_t>(std::atol(name.c_str() + 7));
      if (pid <= 0 || pid_alive(pid)) continue;
      const std::string dir = parent + "/" + name;
      if (!cgroup_populated((dir + "/cgroup.events").c_str())) rmdir(dir.c_str());
    }
    closedir(d);
  }

  // A child moves itself in, as every worker will: proves the permission to migrate.
  bool probe(std::string& why) {
    const pid_t pid = fork();
    if (pid < 0) {
      why = std::string("fork: ") + std::strerror(errno);
      return false;
    }
    if (pid == 0) _exit(write(procs_fd_, "0", 1) == 1 ? 0 : 1);
    int st = 0;
    while (waitpid(pid, &st, 0) < 0 && errno == EINTR) {
    }
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) return true;
    why = "cannot move a process into " + dir_ + " (no write access to the common ancestor's cgroup.procs)";
    return false;
  }

  // The guard: a process outside the job and outside the launcher's tree (double fork, its own
  // session, started before the launcher becomes a subreaper so that init adopts it). It waits
  // for the end of a pipe the launcher holds; when the launcher is gone, however, it kills the
  // cgroup, waits until it is empty and removes it. After a clean end the launcher has removed
  // it already; after leave() ('L' on the pipe) processes SIGKILL could not end yet may stay
  // in it for as long as the kernel keeps them, and the guard waits that long.
  bool start_guard(std::string& why) {
    int fds[2], pid_pipe[2];
    if (pipe2(fds, O_CLOEXEC) < 0 || pipe2(pid_pipe, O_CLOEXEC) < 0) {
      why = std::string("pipe2: ") + std::strerror(errno);
      return false;
    }
    const char* kill_path = kill_path_.c_str();
    const char* events_path = events_path_.c_str();
    const char* dir = dir_.c_str();
    const pid_t mid = fork();
    if (mid < 0) {
      why = std::string("fork: ") + std::strerror(errno);
      for (int fd : {fds[0], fds[1], pid_pipe[0], pid_pipe[1]}) close(fd);
      return false;
    }
    if (mid == 0) {
      close(fds[1]);
      close(pid_pipe[0]);
      setsid();
      const pid_t guard = fork();
      if (guard != 0) {  // the guard is the grandchild; init adopts it
        [[maybe_unused]] ssize_t n = write(pid_pipe[1], &guard, sizeof guard);
        _exit(0);
      }
      keep_only(fds[0]);
      struct sigaction ign {};
      ign.sa_handler = SIG_IGN;
      for (int s : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE}) sigaction(s, &ign, nullptr);
      bool handed_over = false;
      for (;;) {  // the read returns at the end of the pipe; 'L' may come before it
        char b;
        const ssize_t r = read(3, &b, 1);
        if (r > 0) handed_over = handed_over || b == 'L';
        if (r > 0 || (r < 0 && errno == EINTR)) continue;
        break;
      }
      // The launcher is gone (or done). Kill what is left of its job, then remove the cgroup.
      if (cgroup_populated(events_path)) {
        int fd = open(kill_path, O_WRONLY);
        if (fd >= 0 && write(fd, "1", 1) == 1 && !handed_over)
          write_all(STDERR_FILENO, "launch: the launcher ended before its job: killed the job's remaining processes (cgroup.kill)\n");
        if (fd >= 0) close(fd);
        wait_until_empty(events_path);
      }
      rmdir(dir);
      _exit(0);
    }
    close(fds[0]);
    close(pid_pipe[1]);
    int st;
    while (waitpid(mid, &st, 0) < 0 && errno == EINTR) {
    }
    if (read(pid_pipe[0], &guard_pid_, sizeof guard_pid_) != sizeof guard_pid_) guard_pid_ = -1;
    close(pid_pipe[0]);
    guard_fd_ = fds[1];
    return true;
  }

  // Until cgroup.events says "populated 0", however long that takes: the kernel notifies a
  // change of it as a modification (inotify), so this waits without polling when it can.
  // Async-signal-safe (the guard is a fork of a process with threads).
  static void wait_until_empty(const char* events_path) {
    int in = inotify_init1(IN_CLOEXEC);
    if (in >= 0 && inotify_add_watch(in, events_path, IN_MODIFY) < 0) {
      close(in);
      in = -1;
    }
    alignas(inotify_event) char buf[4096];
    while (cgroup_populated(events_path)) {  // watched before looked at: no change is missed
      if (in < 0) {
        sleep_ms(100);
        continue;
      }
      pollfd p{in, POLLIN, 0};
      if (poll(&p, 1, 1000) > 0 && read(in, buf, sizeof buf) < 0 && errno != EINTR) {
        close(in);
        in = -1;
      }
    }
    if (in >= 0) close(in);
  }

  std::string dir_, kill_path_, events_path_;
  bool made_ = false;
  bool left_ = false;  // leave(): processes stay; the guard removes the cgroup after them
  int procs_fd_ = -1;
  int guard_fd_ = -1;
  pid_t guard_pid_ = -1;
};

// ---------------------------------------------------------------------------------------------
// PID namespace

class PidNamespaceContainment final : public Containment {
 public:
  static std::unique_ptr<PidNamespaceContainment> make(std::string& why) {
    std::unique_ptr<PidNamespaceContainment> c(new PidNamespaceContainment);
    c->own_fd_ = open("/proc/self/ns/pid", O_RDONLY | O_CLOEXEC);
    if (c->own_fd_ < 0) {
      why = std::string("PID namespace: cannot open /proc/self/ns/pid: ") + std::strerror(errno);
      return nullptr;
    }
    // This thread's next child is born in a new namespace, as its init.
    if (unshare(CLONE_NEWPID) < 0) {
      why = std::string("PID namespace: ") + std::strerror(errno) + " (needs CAP_SYS_ADMIN)";
      return nullptr;
    }
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) < 0) {
      why = std::string("pipe2: ") + std::strerror(errno);
      return nullptr;
    }
    const pid_t init = fork();
    if (init < 0) {
      why = std::string("fork of the namespace's init: ") + std::strerror(errno);
      close(fds[0]);
      close(fds[1]);
      return nullptr;
    }
    if (init == 0) run_init(fds[0], fds[1]);
    close(fds[0]);
    c->init_ = init;
    c->pipe_fd_ = fds[1];
    // Children of this thread are born here again until a worker's fork (ChildJoin).
    if (setns(c->own_fd_, CLONE_NEWPID) < 0) {
      why = std::string("PID namespace: setns back: ") + std::strerror(errno);
      return nullptr;
    }
    const std::string ns = "/proc/" + std::to_string(init) + "/ns/pid";
    c->ns_fd_ = open(ns.c_str(), O_RDONLY | O_CLOEXEC);
    char link[128] = {};
    const ssize_t n = readlink(ns.c_str(), link, sizeof link - 1);
    if (n <= 0 || c->ns_fd_ < 0) {
      why = "cannot open " + ns + ": " + std::strerror(errno);
      return nullptr;
    }
    c->ns_link_.assign(link, static_cast<size_t>(n));
    return c;
  }

  ~PidNamespaceContainment() override {
    for (int fd : {ns_fd_, own_fd_})
      if (fd >= 0) close(fd);
    if (pipe_fd_ >= 0) close(pipe_fd_);  // init kills what is left and exits
    if (init_ > 0 && !init_gone_ && !left_) {
      int st;
      for (int i = 0; i < 500; ++i) {
        pid_t r = waitpid(init_, &st, WNOHANG);
        if (r == init_ || (r < 0 && errno != EINTR)) break;
        sleep_ms(10);
      }
    }
  }

  ContainmentKind kind() const override { return ContainmentKind::PidNamespace; }
  std::string describe() const override {
    return "PID namespace " + ns_link_ + " (its init is pid " + std::to_string(init_) +
           "; workers' getpid() counts from 2 inside it)";
  }
  // Inside the namespace a child's parent (the launcher, outside) reads as 0.
  ChildJoin child_join() const override { return {-1, 0, ns_fd_, own_fd_}; }

  std::vector<pid_t> members() const override {
    std::vector<pid_t> out;
    DIR* d = opendir("/proc");
    if (!d) return out;
    char link[128];
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
      const pid_t pid = static_cast<pid_t>(std::atol(e->d_name));
      if (pid == init_) continue;
      const std::string path = std::string("/proc/") + e->d_name + "/ns/pid";
      const ssize_t n = readlink(path.c_str(), link, sizeof link);
      if (n > 0 && ns_link_.compare(0, std::string::npos, link, static_cast<size_t>(n)) == 0) out.push_back(pid);
    }
    closedir(d);
    return out;
  }
  bool kill_all() override { return false; }
  std::string leave() override {
    left_ = true;
    return "they stay in the job's PID namespace " + ns_link_ + ", whose init (pid " + std::to_string(init_) +
           ") kills everything in it when launch exits; the kernel ends the namespace once the last is gone";
  }
  bool anything_left(bool) const override { return !init_gone_ && !members().empty(); }
  bool on_reaped(pid_t pid) override {
    if (pid != init_) return false;
    init_gone_ = true;
    log::error("the PID namespace's init (pid " + std::to_string(init_) +
               ") died: the kernel killed every process of the job with it");
    return true;
  }

 private:
  PidNamespaceContainment() = default;

  // PID 1 of the namespace: reaps the orphans that come to it, and ends (taking the namespace
  // with it) when the launcher does. Only async-signal-safe calls: the launcher may have threads.
  [[noreturn]] static void run_init(int read_fd, int write_fd) {
    close(write_fd);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    keep_only(read_fd);
    // The launcher might have died before the prctl: the pipe tells.
    pollfd p{3, POLLIN, 0};
    if (poll(&p, 1, 0) > 0 && (p.revents & (POLLHUP | POLLIN))) _exit(0);
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, nullptr);
    const int sfd = signalfd(-1, &chld, SFD_CLOEXEC | SFD_NONBLOCK);
    for (;;) {
      while (waitpid(-1, nullptr, WNOHANG) > 0) {
      }
      pollfd fds[2] = {{3, POLLIN, 0}, {sfd, POLLIN, 0}};
      if (poll(fds, sfd >= 0 ? 2 : 1, sfd >= 0 ? -1 : 100) < 0 && errno != EINTR) _exit(1);
      if (fds[0].revents & (POLLHUP | POLLIN)) {
        kill(-1, SIGKILL);  // every process of the namespace but this one
        _exit(0);
      }
      if (sfd >= 0 && (fds[1].revents & POLLIN)) {
        signalfd_siginfo si;
        while (read(sfd, &si, sizeof si) > 0) {
        }
      }
    }
  }

  pid_t init_ = -1;
  int pipe_fd_ = -1;
  int ns_fd_ = -1;   // the namespace, for setns before a worker's fork
  int own_fd_ = -1;  // ours, for setns after it
  bool init_gone_ = false;
  bool left_ = false;  // leave(): the kernel ends the namespace later, nobody waits for it
  std::string ns_link_;
};

// ---------------------------------------------------------------------------------------------
// Process groups (no containment the kernel enforces)

class ProcessGroupContainment final : public Containment {
 public:
  explicit ProcessGroupContainment(std::string why) : why_(std::move(why)) {}
  ContainmentKind kind() const override { return ContainmentKind::ProcessGroups; }
  std::string describe() const override { return "process groups only (" + why_ + ")"; }
  ChildJoin child_join() const override { return {-1, getpid(), -1, -1}; }
  std::vector<pid_t> members() const override { return my_children(); }
  bool kill_all() override { return false; }
  bool anything_left(bool launcher_has_children) const override { return launcher_has_children; }
  bool on_reaped(pid_t) override { return false; }
  std::string leave() override {
    return "nothing holds them once launch exits (no cgroup or PID namespace here): init adopts them, and each "
           "dies as soon as the kernel lets it";
  }

 private:
  std::string why_;
};

}  // namespace

// ---------------------------------------------------------------------------------------------

std::optional<ContainmentKind> parse_containment(const std::string& v) {
  if (v.empty() || v == "auto") return std::nullopt;
  if (v == "cgroup") return ContainmentKind::Cgroup;
  if (v == "pidns") return ContainmentKind::PidNamespace;
  if (v == "none") return ContainmentKind::ProcessGroups;
  throw UsageError("LAUNCH_CONTAINMENT='" + v + "' is not one of auto, cgroup, pidns, none");
}

std::string containment_name(ContainmentKind k) {
  switch (k) {
    case ContainmentKind::Cgroup: return "cgroup";
    case ContainmentKind::PidNamespace: return "pidns";
    case ContainmentKind::ProcessGroups: return "none";
  }
  return "?";
}

std::optional<Cgroup2Mount> cgroup2_mount(const std::string& mountinfo) {
  std::istringstream in(mountinfo);
  std::string line;
  while (std::getline(in, line)) {
    // "36 25 0:30 / /sys/fs/cgroup rw,nosuid,... shared:9 - cgroup2 cgroup2 rw,nsdelegate"
    const size_t dash = line.find(" - ");
    if (dash == std::string::npos) continue;
    std::istringstream tail(line.substr(dash + 3));
    std::string fstype;
    tail >> fstype;
    if (fstype != "cgroup2") continue;
    std::istringstream head(line.substr(0, dash));
    std::string id, parent, devno, root, mount_point;
    if (!(head >> id >> parent >> devno >> root >> mount_point)) continue;
    return Cgroup2Mount{root, mount_point};
  }
  return std::nullopt;
}

std::optional<std::string> cgroup2_path(const std::string& proc_self_cgroup) {
  std::istringstream in(proc_self_cgroup);
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("0::", 0) == 0) return line.substr(3);
  return std::nullopt;
}

std::optional<std::string> cgroup2_dir(const Cgroup2Mount& m, const std::string& path) {
  // A bind mount of a subtree (root "/docker/abc") shows only the paths below it.
  std::string rel;
  if (m.root == "/") {
    rel = path;
  } else if (path == m.root) {
    rel = "";
  } else if (path.rfind(m.root + "/", 0) == 0) {
    rel = path.substr(m.root.size());
  } else {
    return std::nullopt;
  }
  if (rel == "/") rel = "";
  if (rel.find("/..") != std::string::npos) return std::nullopt;
  return m.mount_point + rel;
}

std::unique_ptr<Containment> Containment::create() {
  const char* env = std::getenv("LAUNCH_CONTAINMENT");
  const std::optional<ContainmentKind> want = parse_containment(env ? env : "");
  std::unique_ptr<Containment> c;
  std::string why_not;
  auto note = [&](const std::string& why) { why_not += (why_not.empty() ? "" : "; ") + why; };
  if (!want || *want == ContainmentKind::Cgroup) {
    std::string why;
    c = CgroupContainment::make(why);
    if (!c) note(why);
  }
  if (!c && (!want || *want == ContainmentKind::PidNamespace)) {
    std::string why;
    c = PidNamespaceContainment::make(why);
    if (!c) note(why);
  }
  if (!c && want && *want != ContainmentKind::ProcessGroups)
    throw UsageError("LAUNCH_CONTAINMENT=" + containment_name(*want) + " is not available here: " + why_not);
  if (!c) c = std::make_unique<ProcessGroupContainment>(want ? "LAUNCH_CONTAINMENT=none" : why_not);

  // Orphaned descendants come to us, so we can signal and reap them and know when none is left
  // (after the guard was started: init, not we, adopts it).
  SYS_CHECK(prctl(PR_SET_CHILD_SUBREAPER, 1));
  if (c->kind() == ContainmentKind::ProcessGroups)
    log::warn("containment: " + c->describe() +
              "; a SIGKILLed launch kills its workers but may leave their children running");
  else
    log::info("containment: " + c->describe() + (why_not.empty() ? "" : "; not used: " + why_not));
  return c;
}

}  // namespace launch
