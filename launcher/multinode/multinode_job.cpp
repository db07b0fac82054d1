#include "launcher/multinode/multinode_job.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <optional>

#include "launcher/errors.h"
#include "launcher/job_mode.h"
#include "launcher/log.h"
#include "launcher/store/job_store.h"
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

std::string resolve_multinode_token(const std::optional<std::string>& token_file, const proto::EnvMap& env) {
  std::optional<std::string> from_env;
  if (auto it = env.find(proto::env::kStoreToken); it != env.end()) from_env = it->second;
  try {
    return mn::resolve_job_token(token_file, from_env);
  } catch (const mn::TokenError& e) {
    throw UsageError(e.what());
  }
}

namespace {

class MultinodeJob final : public JobMode {
 public:
  // Node 0 serves the store on exactly --master (the other nodes were told that address), and
  // this node's endpoints and the framework's master port come from our own reservation.
  MultinodeJob(const Plan& p, StopSignals& stops) : stops_(stops) {
    const size_t colon = p.master.rfind(':');
    const std::string master_ip = p.master.substr(0, colon);
    const int master_port = std::stoi(p.master.substr(colon + 1));
    host_ = p.opt.host_given ? p.opt.host : route_source_address(master_ip);
    serve_ = p.opt.rank == 0 || (p.opt.rank == -1 && host_ == master_ip);
    if (serve_) {
      presence_ = std::make_shared<mn::Presence>();
      auto seen = [presence = presence_](const std::string& name, bool open) {
        presence->on_client(name, open, mn::Presence::Clock::now());
      };
      try {
        store_ = start_shared_job_store(master_ip, p.job.job_id, static_cast<uint16_t>(master_port), p.token, seen);
      } catch (const std::runtime_error& e) {
        throw std::runtime_error(std::string("node 0 cannot serve the job's store on --master ") + p.master + ": " +
                                 e.what());
      }
    }
    const int n = p.n();
    ports_ = reserve_ports(host_, n + 1, std::nullopt);
    mn::NodeRegistration self;
    self.host = host_;
    self.requested_rank = serve_ && p.opt.rank == -1 ? 0 : p.opt.rank;
    self.nproc = n;
    for (int i = 0; i < n; ++i) {
      const RankDevice& d = p.job.devices[size_t(i)];
      if (d.kind == DeviceKind::Gpu) self.devices.push_back(std::to_string(d.gpu));
      self.endpoints.push_back(host_ + ":" + std::to_string(ports_.ports()[size_t(i)]));
    }
    self.master_endpoint = host_ + ":" + std::to_string(ports_.ports()[size_t(n)]);

    rc_.store.address = p.master;
    rc_.store.address_source = p.master_origin;
    rc_.store.job_id = p.job.job_id;
    rc_.store.token = p.token;
    rc_.store.connect_timeout = p.elastic_timeout();
    rc_.store.client_name = "launcher on " + host_;
    rc_.nnodes = p.opt.nnodes;
    rc_.self = self;
    rc_.timeout = p.elastic_timeout();
    rc_.expected_hosts = p.slurm_hosts;
    max_restart_ = p.opt.max_restart;
  }

  RankLayout start(int generation) override {
    monitor_.reset();
    rc_.generation = generation;
    log::info("rendezvous: " + (generation > 0 ? "generation " + std::to_string(generation) + ", " : std::string()) +
              "waiting for " + std::to_string(rc_.nnodes) + " node(s) at " + rc_.store.address +
              (serve_ ? " (served here)" : ""));
    mn::RendezvousConfig rc = rc_;
    stops_.attach(rc.store);  // a stop signal ends the wait; the monitor's thread has none
    try {
      layout_ = mn::rendezvous(rc);
    } catch (const mn::LayoutError& e) {
      throw UsageError(std::string("the nodes of this job disagree: ") + e.what());
    } catch (const mn::RendezvousError& e) {
      throw std::runtime_error(e.what());
    } catch (const proto::StoreError& e) {
      stops_.rethrow(e, "waiting for the other nodes");
    }
    log::info("rendezvous: this is node " + std::to_string(layout_.node_rank) + " of " +
              std::to_string(layout_.nnodes) + ", global ranks " + std::to_string(layout_.rank_offset) + ".." +
              std::to_string(layout_.rank_offset + layout_.local_size - 1) + " of " +
              std::to_string(layout_.world_size));
    mn::MonitorConfig mc;
    mc.store = rc_.store;
    mc.layout = layout_;
    mc.presence = presence_;  // null but on node 0, which serves the store
    monitor_ = std::make_unique<mn::JobMonitor>(mc);
    ports_.release_sockets();

    RankLayout l;
    l.world_size = layout_.world_size;
    l.nnodes = layout_.nnodes;
    l.node_rank = layout_.node_rank;
    l.local_size = layout_.local_size;
    l.first_rank = layout_.rank_offset;
    l.endpoints = layout_.endpoints;
    l.master = layout_.framework_master;
    l.store_addr = layout_.store_address;
    l.store_token = rc_.store.token;
    return l;
  }

  void install(SupervisorConfig& cfg) override {
    cfg.on_failure = [this](const RootCause& rc) {
      // A rank that stopped responding never ended: the record carries the job's code for it.
      const Termination t = rc.end.value_or(Termination{Termination::How::Exited, rc.exit_code});
      const int sig = t.how == Termination::How::Signaled ? t.value : 0;
      publish_in_store(monitor_->report_worker_exit(rc.rank, exit_code_of(t), sig));
    };
    cfg.remote_fd = monitor_->event_fd();
    cfg.remote_peer_lost = [this](int rank, const std::string& what) { monitor_->peer_lost(rank, what); };
    cfg.remote_failure = [this]() -> std::pair<int, std::string> {
      auto f = monitor_->failure();
      if (!f) return {1, "unknown failure"};
      publish_in_store(*f);
      return {f->exit_code, f->describe()};
    };
  }

  // This generation is over here: tell the others; node 0 keeps its store up until they have
  // left it (bounded), so their last calls are answered. After a failure the others are parked
  // on its record and learn it within milliseconds; a node whose launcher died never leaves,
  // hence the short bound.
  void finish(int exit_code, bool) override {
    const bool success = exit_code == 0;
    if (success) monitor_->finish();
    if (!serve_) return;
    auto left = monitor_->wait_all_finished(success ? std::chrono::seconds(60) : std::chrono::seconds(3));
    if (!left.empty()) {
      std::string list;
      for (int r : left) list += (list.empty() ? "" : ", ") + std::to_string(r);
      log::warn("closing the store while node(s) " + list + " are still in the job");
    }
  }

 private:
  // Node 0's store wakes its own workers' waiters too (JOB_FAILED), whoever failed -- but only
  // when no restart follows: that record is final, and the next generation's rendezvous and
  // workers use the same store (the workers' own SIGTERM ends their waits meanwhile).
  void publish_in_store(const mn::FailureRecord& f) {
    if (store_ && layout_.generation >= max_restart_) store_->report_failure(f.rank, f.describe());
  }

  StopSignals& stops_;
  std::string host_;
  bool serve_ = false;
  int max_restart_ = 0;
  mn::RendezvousConfig rc_;
  std::shared_ptr<mn::Presence> presence_;  // node 0: who is connected to its store
  std::optional<JobStore> store_;
  PortReservation ports_;
  mn::JobLayout layout_;
  std::unique_ptr<mn::JobMonitor> monitor_;
};

}  // namespace

std::unique_ptr<JobMode> make_multinode_job(const Plan& plan, StopSignals& stops) {
  return std::make_unique<MultinodeJob>(plan, stops);
}

}  // namespace launch
