#include "launcher/slurm/slurm_tasks.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <optional>

#include "launcher/errors.h"
#include "launcher/job_mode.h"
#include "launcher/log.h"
#include "launcher/ports.h"
#include "launcher/private_dir.h"
#include "launcher/store/job_store.h"
#include "proto/client.h"

namespace launch {

namespace {

using Clock = std::chrono::steady_clock;
using ms = std::chrono::milliseconds;

// Task 0 keeps its store up at most this long for the other tasks to finish.
constexpr std::chrono::seconds kDrainTimeout{600};

ms left_until(Clock::time_point deadline) {
  auto d = std::chrono::duration_cast<ms>(deadline - Clock::now());
  return d.count() > 0 ? d : ms(1);  // a store call needs a positive timeout
}

// /tmp/launch-<uid>, ours alone: another user must neither read the token nor plant one. Always
// /tmp, whatever TMPDIR says: the other tasks of the step look for the token file there.
std::string meeting_dir() {
  return launch::private_dir("/tmp/launch-" + std::to_string(getuid()),
                             "the Slurm tasks of a step meet through it: ask its owner or root to remove it");
}

struct Fd {
  int fd = -1;
  explicit Fd(int f = -1) : fd(f) {}
  Fd(Fd&& o) noexcept : fd(o.fd) { o.fd = -1; }
  Fd& operator=(Fd&& o) noexcept {
    std::swap(fd, o.fd);
    return *this;
  }
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

// `path` is stale when nobody holds its lock. Then it is removed -- while we hold the lock, and
// only if the name still refers to the file we locked (task 0 may have renamed a new one there).
bool remove_if_stale(const std::string& path) {
  Fd f(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (f.fd < 0) return false;
  if (flock(f.fd, LOCK_EX | LOCK_NB) < 0) return false;  // its writer is alive
  struct stat mine, now;
  if (fstat(f.fd, &mine) == 0 && stat(path.c_str(), &now) == 0 && mine.st_ino == now.st_ino &&
      mine.st_dev == now.st_dev)
    return unlink(path.c_str()) == 0;
  return false;
}

// The address and token, when the file is there and its writer alive.
std::optional<std::pair<std::string, std::string>> read_live_token_file(const std::string& path) {
  Fd f(open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW));
  if (f.fd < 0) return std::nullopt;
  if (flock(f.fd, LOCK_SH | LOCK_NB) == 0) {
    // Nobody serves: left by a task 0 that was killed. Not ours to use.
    flock(f.fd, LOCK_UN);
    f = Fd();
    if (remove_if_stale(path)) log::warn("removed " + path + ", left by a Slurm task 0 that is gone");
    return std::nullopt;
  }
  char buf[512];
  const ssize_t n = pread(f.fd, buf, sizeof buf - 1, 0);
  if (n <= 0) return std::nullopt;
  buf[n] = '\0';
  const std::string text(buf);
  const size_t nl = text.find('\n');
  if (nl == std::string::npos) return std::nullopt;
  std::string addr = text.substr(0, nl), token = text.substr(nl + 1);
  while (!token.empty() && (token.back() == '\n' || token.back() == ' ')) token.pop_back();
  if (addr.empty() || token.empty()) return std::nullopt;
  return std::make_pair(addr, token);
}

// Written under a temporary name, locked before it is renamed into place: a file readers can see
// is always locked while its writer lives. Returns the descriptor that holds the lock.
Fd write_locked_token_file(const std::string& path, const std::string& addr, const std::string& token) {
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  Fd f(open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (f.fd < 0) throw SystemError("cannot write " + tmp, errno);
  SYS_CHECK(flock(f.fd, LOCK_EX));
  const std::string text = addr + "\n" + token + "\n";
  if (write(f.fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
    const int err = errno;
    unlink(tmp.c_str());
    throw SystemError("cannot write " + tmp, err);
  }
  SYS_CHECK(rename(tmp.c_str(), path.c_str()));
  return f;
}

std::string key_endpoint(int rank) { return "launch/slurm/endpoint/" + std::to_string(rank); }
std::string key_done(int rank) { return "launch/slurm/done/" + std::to_string(rank); }
const char* const kKeyMaster = "launch/slurm/master";

std::string missing_ranks(proto::Client& c, const std::vector<std::string>& keys, const std::vector<int>& ranks) {
  std::string out;
  try {
    auto have = c.check(keys, ms(2000));
    for (size_t i = 0; i < keys.size(); ++i)
      if (!have[i]) out += (out.empty() ? "" : ", ") + std::to_string(ranks[i]);
  } catch (const proto::StoreError&) {
    out = "unknown (the store did not answer)";
  }
  return out;
}

// ---------------------------------------------------------------------------------------------

class TaskGroup final : public JobMode {
 public:
  TaskGroup(const Plan& p, StopSignals& stops)
      : form_(*p.task), host_(p.opt.host), job_id_(p.job.job_id), timeout_(p.elastic_timeout()), stops_(stops) {
    dir_ = meeting_dir();
    auto it = p.parent.find(proto::env::kSlurmStepLauncherPort);
    const std::string launcher_port = it == p.parent.end() ? "" : it->second;
    path_ = dir_ + "/slurm-" + form_.step + (launcher_port.empty() ? "" : "-" + launcher_port) + ".token";
    for (const auto& gone : remove_stale_token_files(dir_))
      log::info("removed " + gone + ", left by a Slurm task 0 that is gone");
  }
  ~TaskGroup() override {
    if (lock_.fd >= 0) unlink(path_.c_str());
  }

  RankLayout start(int) override {
    const auto deadline = Clock::now() + timeout_;
    std::string addr, token;
    if (form_.rank() == 0) {
      store_ = start_job_store(host_, job_id_, form_.store_port);
      if (store_->address != host_ + ":" + std::to_string(form_.store_port))
        log::warn("port " + std::to_string(form_.store_port) + " (derived from the Slurm step) is taken: store at " +
                  store_->address);
      addr = store_->address;
      token = store_->token;
      // After the store listens: whoever reads the file can connect at once.
      lock_ = write_locked_token_file(path_, addr, token);
    } else {
      log::info("Slurm task " + std::to_string(form_.rank()) + ": waiting for task 0 of step " + form_.step +
                " to serve the store (" + path_ + ")");
      std::tie(addr, token) = wait_for_token_file(deadline);
    }

    proto::ClientOptions co;
    co.address = addr;
    co.address_source = path_ + " (written by Slurm task 0)";
    co.job_id = job_id_;
    co.token = token;
    co.connect_timeout = timeout_;
    co.client_name = "launcher of Slurm task " + std::to_string(form_.rank());
    stops_.attach(co);
    client_.emplace(co);

    RankLayout l = form_.ranks;
    l.store_addr = addr;
    l.store_token = token;
    const char* doing = "waiting for the other Slurm tasks";
    try {
      ports_ = reserve_ports(host_, form_.rank() == 0 ? 2 : 1, std::nullopt);
      client_->set(key_endpoint(form_.rank()), std::to_string(ports_.ports()[0]), left_until(deadline));
      if (form_.rank() == 0) client_->set(kKeyMaster, std::to_string(ports_.ports()[1]), left_until(deadline));
      std::vector<std::string> keys;
      std::vector<int> ranks;
      for (int r = 0; r < form_.ranks.world_size; ++r) keys.push_back(key_endpoint(r)), ranks.push_back(r);
      keys.push_back(kKeyMaster);
      std::vector<std::string> values;
      try {
        values = client_->multi_get(keys, left_until(deadline));
      } catch (const proto::StoreError& e) {
        if (e.kind() != proto::StoreError::Kind::Timeout) throw;
        throw std::runtime_error("waited " + seconds_text() + " for the launchers of Slurm step " + form_.step +
                                 "; missing task(s): " + missing_ranks(*client_, keys, ranks) +
                                 " (--elastic_timeout to wait longer)");
      }
      for (int r = 0; r < form_.ranks.world_size; ++r) l.endpoints.push_back(host_ + ":" + values[size_t(r)]);
      l.master = host_ + ":" + values.back();
    } catch (const proto::StoreError& e) {
      stops_.rethrow(e, doing);
    }
    log::info("Slurm task " + std::to_string(form_.rank()) + " of " + std::to_string(form_.ranks.world_size) +
              ": met the other tasks in the store at " + addr);
    ports_.release_sockets();
    return l;
  }

  void install(SupervisorConfig& cfg) override {
    // Task 0 publishes a worker failure in its store (wakes waiters with JOB_FAILED).
    if (store_)
      cfg.on_failure = [report = store_->report_failure](const RootCause& rc) { report(rc.rank, rc.description); };
  }

  void finish(int exit_code, bool last) override {
    if (!last) return;
    try {
      client_->set(key_done(form_.rank()), std::to_string(exit_code), ms(5000));
    } catch (const proto::StoreError& e) {
      log::debug(std::string("could not tell task 0 that this task is done: ") + e.what());
    }
    if (form_.rank() == 0 && exit_code == 0) drain();
    if (lock_.fd >= 0) {
      unlink(path_.c_str());
      lock_ = Fd();
    }
    for (const auto& gone : remove_stale_token_files(dir_))
      log::info("removed " + gone + ", left by a Slurm task 0 that is gone");
  }

 private:
  std::string seconds_text() const { return std::to_string(timeout_.count() / 1000) + " s"; }

  // Task 0 renames the file into place; inotify tells us, no polling of the file system.
  std::pair<std::string, std::string> wait_for_token_file(Clock::time_point deadline) {
    Fd ifd(inotify_init1(IN_CLOEXEC | IN_NONBLOCK));
    SYS_CHECK(ifd.fd);
    SYS_CHECK(inotify_add_watch(ifd.fd, dir_.c_str(), IN_MOVED_TO | IN_CLOSE_WRITE));
    while (true) {
      if (auto t = read_live_token_file(path_)) return *t;
      const auto left = std::chrono::duration_cast<ms>(deadline - Clock::now());
      if (left.count() <= 0)
        throw std::runtime_error("waited " + seconds_text() + " for task 0 of Slurm step " + form_.step +
                                 " to write " + path_ + " (is its launcher running? --elastic_timeout to wait longer)");
      stops_.wait_readable(ifd.fd, static_cast<int>(left.count()), "waiting for Slurm task 0");
      char buf[4096];
      while (read(ifd.fd, buf, sizeof buf) > 0) {
      }
    }
  }

  // Task 0's worker succeeded: keep serving until every other task is done (bounded).
  void drain() {
    std::vector<std::string> keys;
    std::vector<int> ranks;
    for (int r = 1; r < form_.ranks.world_size; ++r) keys.push_back(key_done(r)), ranks.push_back(r);
    if (keys.empty()) return;
    log::info("keeping the store up until the other " + std::to_string(keys.size()) + " task(s) are done");
    try {
      client_->wait(keys, kDrainTimeout);
    } catch (const proto::StoreError& e) {
      if (e.kind() == proto::StoreError::Kind::Timeout)
        log::error("gave up waiting " + std::to_string(kDrainTimeout.count()) + " s for Slurm task(s) " +
                   missing_ranks(*client_, keys, ranks) + " to finish; closing the store");
      else if (e.kind() == proto::StoreError::Kind::Cancelled)
        log::warn("stopped by " + signal_name(stops_.stopped().value_or(0)) +
                  " while waiting for the other tasks; closing the store");
      else
        log::warn(std::string("while waiting for the other tasks: ") + e.what());
    }
  }

  SlurmTaskForm form_;
  std::string host_, job_id_, dir_, path_;
  ms timeout_;
  StopSignals& stops_;
  std::optional<JobStore> store_;
  std::optional<proto::Client> client_;
  PortReservation ports_;
  Fd lock_;  // task 0: holds the token file's lock while it serves
};

}  // namespace

std::vector<std::string> remove_stale_token_files(const std::string& dir) {
  std::vector<std::string> removed;
  DIR* d = opendir(dir.c_str());
  if (!d) return removed;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name.rfind("slurm-", 0) != 0 || name.find(".token") == std::string::npos) continue;
    if (remove_if_stale(dir + "/" + name)) removed.push_back(dir + "/" + name);
  }
  closedir(d);
  return removed;
}

std::unique_ptr<JobMode> make_slurm_task_group(const Plan& plan, StopSignals& stops) {
  return std::make_unique<TaskGroup>(plan, stops);
}

}  // namespace launch
