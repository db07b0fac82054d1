#include "launcher/slurm_tasks.h"

#include "launcher/errors.h"

#include <poll.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <optional>
#include <sstream>

#include "launcher/job_store.h"
#include "launcher/log.h"
#include "launcher/ports.h"
#include "proto/client.h"

namespace launch {

namespace {

using Clock = std::chrono::steady_clock;
using ms = std::chrono::milliseconds;

// Waits are cut into slices this long, so that a stop signal (blocked, pending) ends them soon.
constexpr ms kSlice{500};

void throw_if_stop_pending(const sigset_t& stops) {
  sigset_t pending;
  if (sigpending(&pending) < 0) return;
  for (int s = 1; s < NSIG; ++s)
    if (sigismember(&stops, s) == 1 && sigismember(&pending, s) == 1) throw StopRequested(s);
}

ms left_until(Clock::time_point deadline) {
  auto d = std::chrono::duration_cast<ms>(deadline - Clock::now());
  return d.count() > 0 ? d : ms(0);
}

// /tmp/launch-<uid>, ours alone: another user must neither read the token nor plant one.
std::string private_dir() {
  const std::string dir = "/tmp/launch-" + std::to_string(getuid());
  if (mkdir(dir.c_str(), 0700) < 0 && errno != EEXIST) throw SystemError("mkdir " + dir, errno);
  struct stat st;
  SYS_CHECK(lstat(dir.c_str(), &st));
  if (!S_ISDIR(st.st_mode) || st.st_uid != getuid() || (st.st_mode & 077) != 0)
    throw UsageError(dir + " must be a directory of yours that only you can access (chmod 700 " + dir + ")");
  return dir;
}

std::optional<std::pair<std::string, std::string>> read_token_file(const std::string& path) {
  std::ifstream f(path);
  std::string addr, token;
  if (!(f >> addr >> token)) return std::nullopt;
  return std::make_pair(addr, token);
}

void write_token_file(const std::string& path, const std::string& addr, const std::string& token) {
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  {
    std::ofstream f;
    const mode_t old = umask(077);
    f.open(tmp, std::ios::trunc);
    umask(old);
    f << addr << "\n" << token << "\n";
    if (!f.flush()) throw SystemError("write " + tmp, errno);
  }
  SYS_CHECK(rename(tmp.c_str(), path.c_str()));
}

// Task 0 renames the file into place; inotify tells us, no polling of the file system.
std::pair<std::string, std::string> wait_for_token_file(const SlurmTaskConfig& cfg, const std::string& dir,
                                                        const std::string& path, Clock::time_point deadline) {
  int ifd = inotify_init1(IN_CLOEXEC | IN_NONBLOCK);
  SYS_CHECK(ifd);
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{ifd};
  SYS_CHECK(inotify_add_watch(ifd, dir.c_str(), IN_MOVED_TO | IN_CLOSE_WRITE));
  while (true) {
    if (auto t = read_token_file(path)) return *t;
    throw_if_stop_pending(cfg.stop_signals);
    ms left = left_until(deadline);
    if (left.count() == 0)
      throw std::runtime_error("waited " + std::to_string(cfg.meet_timeout.count()) + " s for task 0 of Slurm step " +
                               cfg.form.step + " to write " + path + " (is its launcher running?)");
    pollfd p{ifd, POLLIN, 0};
    poll(&p, 1, static_cast<int>(std::min(left, kSlice).count()));
    char buf[4096];
    while (read(ifd, buf, sizeof buf) > 0) {
    }
  }
}

std::string key_endpoint(int rank) { return "launch/slurm/endpoint/" + std::to_string(rank); }
std::string key_done(int rank) { return "launch/slurm/done/" + std::to_string(rank); }
const char* const kKeyMaster = "launch/slurm/master";

// MULTI_GET in slices; a stop signal or the deadline ends it. nullopt: deadline passed.
std::optional<std::vector<std::string>> get_all(proto::Client& c, const std::vector<std::string>& keys,
                                                Clock::time_point deadline, const sigset_t& stops) {
  while (true) {
    throw_if_stop_pending(stops);
    ms left = left_until(deadline);
    if (left.count() == 0) return std::nullopt;
    try {
      return c.multi_get(keys, std::min(left, kSlice));
    } catch (const proto::StoreError& e) {
      if (e.kind() != proto::StoreError::Kind::Timeout) throw;
    }
  }
}

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

class Group : public SlurmTaskGroup {
 public:
  explicit Group(const SlurmTaskConfig& cfg) : cfg_(cfg) {}
  ~Group() override {
    if (!token_path_.empty()) unlink(token_path_.c_str());
  }

  void meet() {
    const SlurmTaskForm& f = cfg_.form;
    const auto deadline = Clock::now() + cfg_.meet_timeout;
    const std::string dir = private_dir();
    const std::string path = dir + "/slurm-" + f.step +
                             (cfg_.launcher_port.empty() ? "" : "-" + cfg_.launcher_port) + ".token";
    std::string addr, token;
    if (f.global_rank == 0) {
      store_ = start_job_store(cfg_.host, cfg_.job_id, f.store_port);
      if (store_->address != cfg_.host + ":" + std::to_string(f.store_port))
        log::warn("port " + std::to_string(f.store_port) + " (derived from the Slurm step) is taken: store at " +
                  store_->address);
      addr = store_->address;
      token = store_->token;
      // After the store listens: whoever reads the file can connect at once.
      write_token_file(path, addr, token);
      token_path_ = path;
    } else {
      log::info("Slurm task " + std::to_string(f.global_rank) + ": waiting for task 0 of step " + f.step +
                " to serve the store (" + path + ")");
      std::tie(addr, token) = wait_for_token_file(cfg_, dir, path, deadline);
    }
    addr_ = addr;
    token_ = token;

    proto::ClientOptions co;
    co.address = addr;
    co.job_id = cfg_.job_id;
    co.token = token;
    co.connect_timeout = std::chrono::duration_cast<ms>(cfg_.meet_timeout);
    co.client_name = "launcher of Slurm task " + std::to_string(f.global_rank);
    client_.emplace(co);

    ports_ = reserve_ports(cfg_.host, f.global_rank == 0 ? 2 : 1, std::nullopt);
    client_->set(key_endpoint(f.global_rank), std::to_string(ports_.ports()[0]), left_until(deadline));
    if (f.global_rank == 0) client_->set(kKeyMaster, std::to_string(ports_.ports()[1]), left_until(deadline));

    std::vector<std::string> keys;
    std::vector<int> ranks;
    for (int r = 0; r < f.world_size; ++r) keys.push_back(key_endpoint(r)), ranks.push_back(r);
    keys.push_back(kKeyMaster);
    auto values = get_all(*client_, keys, deadline, cfg_.stop_signals);
    if (!values)
      throw std::runtime_error("waited " + std::to_string(cfg_.meet_timeout.count()) + " s for the launchers of Slurm step " +
                               f.step + "; missing task(s): " + missing_ranks(*client_, keys, ranks));
    for (int r = 0; r < f.world_size; ++r) endpoints_.push_back(static_cast<uint16_t>(std::stoi((*values)[size_t(r)])));
    master_ = static_cast<uint16_t>(std::stoi(values->back()));
    log::info("Slurm task " + std::to_string(f.global_rank) + " of " + std::to_string(f.world_size) +
              ": met the other tasks in the store at " + addr);
  }

  const std::vector<uint16_t>& endpoint_ports() const override { return endpoints_; }
  uint16_t master_port() const override { return master_; }
  std::string store_address() const override { return addr_; }
  std::string store_token() const override { return token_; }
  std::function<void(int, const std::string&)> failure_reporter() override {
    return store_ ? store_->report_failure : nullptr;
  }
  void release_sockets() override { ports_.release_sockets(); }

  void finish(int exit_code) override {
    const SlurmTaskForm& f = cfg_.form;
    try {
      client_->set(key_done(f.global_rank), std::to_string(exit_code), ms(5000));
    } catch (const proto::StoreError& e) {
      log::debug(std::string("could not tell task 0 that this task is done: ") + e.what());
    }
    if (f.global_rank != 0 || exit_code != 0) return;
    std::vector<std::string> keys;
    std::vector<int> ranks;
    for (int r = 1; r < f.world_size; ++r) keys.push_back(key_done(r)), ranks.push_back(r);
    if (keys.empty()) return;
    log::info("keeping the store up until the other " + std::to_string(keys.size()) + " task(s) are done");
    try {
      if (!get_all(*client_, keys, Clock::now() + cfg_.drain_timeout, cfg_.stop_signals))
        log::error("gave up waiting " + std::to_string(cfg_.drain_timeout.count()) +
                   " s for Slurm task(s) " + missing_ranks(*client_, keys, ranks) + " to finish; closing the store");
    } catch (const proto::StoreError& e) {
      log::warn(std::string("while waiting for the other tasks: ") + e.what());
    }
  }

 private:
  SlurmTaskConfig cfg_;
  std::optional<JobStore> store_;
  std::optional<proto::Client> client_;
  PortReservation ports_;
  std::vector<uint16_t> endpoints_;
  uint16_t master_ = 0;
  std::string addr_, token_, token_path_;
};

}  // namespace

std::unique_ptr<SlurmTaskGroup> SlurmTaskGroup::meet(const SlurmTaskConfig& cfg) {
  auto g = std::make_unique<Group>(cfg);
  g->meet();
  return g;
}

}  // namespace launch
