#include "launcher/multinode_job.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <optional>

#include "launcher/errors.h"
#include "launcher/job_store.h"
#include "launcher/log.h"
#include "launcher/multinode/monitor.h"
#include "launcher/multinode/rendezvous.h"
#include "launcher/multinode/token.h"
#include "launcher/ports.h"

namespace launch {

namespace mn = launch::multinode;

std::string route_source_address(const std::string& ip) {
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  SYS_CHECK(s);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(9);
  inet_pton(AF_INET, ip.c_str(), &to.sin_addr);
  sockaddr_in me{};
  socklen_t len = sizeof me;
  const bool ok = connect(s, reinterpret_cast<sockaddr*>(&to), sizeof to) == 0 &&
                  getsockname(s, reinterpret_cast<sockaddr*>(&me), &len) == 0;
  const int err = errno;
  close(s);
  if (!ok) throw UsageError("no route to --master " + ip + " (" + std::strerror(err) + "); give --host");
  char buf[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &me.sin_addr, buf, sizeof buf);
  return buf;
}

std::string resolve_ipv4(const std::string& host) {
  if (is_ipv4_address(host)) return host;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res);
  if (rc != 0 || !res) throw UsageError("cannot resolve host '" + host + "' of --master: " + gai_strerror(rc));
  char buf[INET_ADDRSTRLEN];
  inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr, buf, sizeof buf);
  freeaddrinfo(res);
  return buf;
}

std::string resolve_multinode_token(const std::optional<std::string>& token_file, const EnvMap& env) {
  std::optional<std::string> from_env;
  if (auto it = env.find(kTokenVar); it != env.end()) from_env = it->second;
  try {
    return mn::resolve_job_token(token_file, from_env);
  } catch (const mn::TokenError& e) {
    throw UsageError(e.what());
  }
}

namespace {

class Job : public MultinodeJob {
 public:
  void join(const MultinodeConfig& cfg) {
    const size_t colon = cfg.master.rfind(':');
    const std::string master_ip = cfg.master.substr(0, colon);
    const int master_port = std::stoi(cfg.master.substr(colon + 1));
    host_ = cfg.host.empty() ? route_source_address(master_ip) : cfg.host;
    serve_ = cfg.rank == 0 || (cfg.rank == -1 && host_ == master_ip);

    // Node 0 serves the store on exactly --master: the other nodes were told that address.
    if (serve_) {
      try {
        store_ = start_shared_job_store(master_ip, cfg.job_id, static_cast<uint16_t>(master_port), cfg.token);
      } catch (const std::runtime_error& e) {
        throw std::runtime_error(std::string("node 0 cannot serve the job's store on --master ") + cfg.master +
                                 ": " + e.what());
      }
      if (!store_) throw UsageError("a multi-node job needs the store; this launch was built without it");
    }

    // This node's endpoints and the framework's master port, from our own reservation.
    const int n = static_cast<int>(cfg.devices.size());
    ports_ = reserve_ports(host_, n + 1, std::nullopt);
    mn::NodeRegistration self;
    self.host = host_;
    self.requested_rank = serve_ && cfg.rank == -1 ? 0 : cfg.rank;
    self.nproc = n;
    for (int i = 0; i < n; ++i) {
      const RankDevice& d = cfg.devices[size_t(i)];
      if (d.kind == DeviceKind::Gpu) self.devices.push_back(std::to_string(d.gpu));
      self.endpoints.push_back(host_ + ":" + std::to_string(ports_.ports()[size_t(i)]));
    }
    self.master_endpoint = host_ + ":" + std::to_string(ports_.ports()[size_t(n)]);

    mn::RendezvousConfig& rc = rc_;
    rc.store.address = cfg.master;
    rc.store.job_id = cfg.job_id;
    rc.store.token = cfg.token;
    rc.store.connect_timeout = cfg.timeout;
    rc.store.client_name = "launcher on " + host_;
    rc.nnodes = cfg.nnodes;
    rc.self = self;
    rc.timeout = cfg.timeout;
    rc.expected_hosts = cfg.expected_hosts;
    max_restart_ = cfg.max_restart;
    stops_ = cfg.stop_signals;
    log::info("rendezvous: waiting for " + std::to_string(cfg.nnodes) + " node(s) at " + cfg.master +
              (serve_ ? " (served here)" : ""));
    meet();
  }

  void restart(int generation) override {
    monitor_.reset();
    rc_.generation = generation;
    log::info("rendezvous: generation " + std::to_string(generation) + ", waiting for " +
              std::to_string(rc_.nnodes) + " node(s) at " + rc_.store.address);
    meet();
  }

  void meet() {
    {
      // Threads made so far (the store's) were made with the stop signals blocked; the
      // monitor's thread is made below, once they are blocked again.
      pthread_sigmask(SIG_UNBLOCK, &stops_, nullptr);
      struct Reblock {
        const sigset_t* s;
        ~Reblock() { pthread_sigmask(SIG_BLOCK, s, nullptr); }
      } reblock{&stops_};
      try {
        layout_ = mn::rendezvous(rc_);
      } catch (const mn::LayoutError& e) {
        throw UsageError(std::string("the nodes of this job disagree: ") + e.what());
      } catch (const mn::RendezvousError& e) {
        throw std::runtime_error(e.what());
      }
    }
    cluster_.rank_offset = layout_.rank_offset;
    cluster_.world_size = layout_.world_size;
    cluster_.endpoints = layout_.endpoints;
    cluster_.master = layout_.framework_master;
    log::info("rendezvous: this is node " + std::to_string(layout_.node_rank) + " of " +
              std::to_string(layout_.nnodes) + ", global ranks " + std::to_string(layout_.rank_offset) + ".." +
              std::to_string(layout_.rank_offset + layout_.local_size - 1) + " of " +
              std::to_string(layout_.world_size));
    monitor_ = std::make_unique<mn::JobMonitor>(mn::MonitorConfig{rc_.store, layout_});
  }

  const JobSpec::Cluster& cluster() const override { return cluster_; }
  int node_rank() const override { return layout_.node_rank; }
  std::string host() const override { return host_; }
  std::string store_address() const override { return layout_.store_address; }
  void release_sockets() override { ports_.release_sockets(); }
  int event_fd() const override { return monitor_->event_fd(); }

  std::pair<int, std::string> failure() override {
    auto f = monitor_->failure();
    if (!f) return {1, "unknown failure"};
    publish_in_store(*f);
    return {f->exit_code, f->describe()};
  }

  void report_worker_failure(int global_rank, const Termination& t) override {
    const int sig = t.how == Termination::How::Signaled ? t.value : 0;
    publish_in_store(monitor_->report_worker_exit(global_rank, exit_code_of(t), sig));
  }

  // Node 0's store wakes its own workers' waiters too (JOB_FAILED), whoever failed -- but only
  // when no restart follows: that record is final, and the next generation's rendezvous and
  // workers use the same store (the workers' own SIGTERM ends their waits meanwhile).
  void publish_in_store(const mn::FailureRecord& f) {
    if (store_ && layout_.generation >= max_restart_) store_->report_failure(f.rank, f.describe());
  }

  void finish(bool success) override {
    if (success) monitor_->finish();
    if (!serve_) return;
    // The others may still be reading the failure record or writing their done key.
    // After a failure the others are parked on its record and learn it within milliseconds; a
    // node whose launcher died never leaves, hence the short bound.
    auto left = monitor_->wait_all_finished(success ? std::chrono::seconds(60) : std::chrono::seconds(3));
    if (!left.empty()) {
      std::string list;
      for (int r : left) list += (list.empty() ? "" : ", ") + std::to_string(r);
      log::warn("closing the store while node(s) " + list + " are still in the job");
    }
  }

 private:
  std::string host_;
  bool serve_ = false;
  int max_restart_ = 0;
  sigset_t stops_;
  mn::RendezvousConfig rc_;
  std::optional<JobStore> store_;
  PortReservation ports_;
  mn::JobLayout layout_;
  JobSpec::Cluster cluster_;
  std::unique_ptr<mn::JobMonitor> monitor_;
};

}  // namespace

std::unique_ptr<MultinodeJob> MultinodeJob::join(const MultinodeConfig& cfg) {
  auto j = std::make_unique<Job>();
  j->join(cfg);
  return j;
}

}  // namespace launch
