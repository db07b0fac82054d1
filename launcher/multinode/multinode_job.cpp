#include "launcher/multinode/multinode_job.h"

#include <optional>

#include "launcher/errors.h"
#include "launcher/job_mode.h"
#include "launcher/log.h"
#include "launcher/store/job_store.h"
#include "launcher/multinode/monitor.h"
#include "launcher/multinode/rendezvous.h"
#include "launcher/multinode/store_host.h"
#include "launcher/multinode/token.h"
#include "launcher/ports.h"
#include "proto/address.h"

namespace launch {

namespace mn = launch::multinode;

std::string resolve_multinode_token(const std::optional<std::string>& token_file, const proto::EnvMap& env) {
  std::optional<std::string> from_env;
  if (auto it = env.find(proto::env::kStoreToken); it != env.end()) from_env = it->second;
  try {
    return mn::resolve_job_token(token_file, from_env);
  } catch (const mn::TokenError& e) {
    throw UsageError(e.what());
  }
}

std::chrono::milliseconds seconds_or(const std::optional<double>& s, std::chrono::milliseconds fallback) {
  return s ? std::chrono::milliseconds(static_cast<long long>(*s * 1000)) : fallback;
}

mn::MonitorConfig monitor_config(const RdzvConf& conf) {
  mn::MonitorConfig mc;
  mc.heartbeat_period = seconds_or(conf.heartbeat_period_s, mc.heartbeat_period);
  mc.heartbeat_timeout = seconds_or(conf.heartbeat_timeout_s, mc.heartbeat_timeout);
  if (conf.store_timeout_s) mc.store_timeout = seconds_or(conf.store_timeout_s, mc.heartbeat_timeout);
  return mc;
}

std::chrono::milliseconds remote_wait(const mn::MonitorConfig& mc) {
  // A lost peer on another node waits for that node's report: declared after the heartbeat
  // timeout (or the store's), noticed within a period more, and a margin.
  return std::max(mc.heartbeat_timeout, mc.store_timeout.value_or(mc.heartbeat_timeout)) + mc.heartbeat_period +
         std::chrono::milliseconds(2000);
}

mn::NodeRegistration local_registration(const Plan& p, const std::string& host, const PortReservation& ports,
                                        bool serves_store) {
  mn::NodeRegistration self;
  const int n = p.n();
  self.host = host;
  self.requested_rank = p.opt.rank;
  self.serves_store = serves_store;
  self.nproc = n;
  for (int i = 0; i < n; ++i) {
    const RankDevice& d = p.job.devices[size_t(i)];
    if (d.kind == DeviceKind::Gpu) self.devices.push_back(std::to_string(d.gpu));
    self.endpoints.push_back(proto::join_host_port(host, ports.ports()[size_t(i)]));
  }
  self.master_endpoint = proto::join_host_port(host, ports.ports()[size_t(n)]);
  return self;
}

RankLayout rank_layout(const mn::JobLayout& layout, const std::string& store_token) {
  RankLayout l;
  l.world_size = layout.world_size;
  l.nnodes = layout.nnodes;
  l.node_rank = layout.node_rank;
  l.local_size = layout.local_size;
  l.first_rank = layout.rank_offset;
  l.endpoints = layout.endpoints;
  l.master = layout.framework_master;
  l.store_addr = layout.store_address;
  l.store_token = store_token;
  return l;
}

int store_node(const mn::JobLayout& l) {
  for (const auto& n : l.nodes)
    if (n.serves_store) return n.node_rank;
  return 0;
}

std::string placement(const mn::JobLayout& l) {
  return "this is node " + std::to_string(l.node_rank) + " of " + std::to_string(l.nnodes) + ", global ranks " +
         std::to_string(l.rank_offset) + ".." + std::to_string(l.rank_offset + l.local_size - 1) + " of " +
         std::to_string(l.world_size);
}

void install_monitor(SupervisorConfig& cfg, mn::JobMonitor& monitor, const mn::MonitorConfig& mc,
                     std::function<void(const mn::FailureRecord&)> published) {
  if (!published) published = [](const mn::FailureRecord&) {};
  cfg.on_failure = [&monitor, published](const RootCause& rc) {
    // A rank that stopped responding never ended: the record carries the job's code for it.
    const Termination t = rc.end.value_or(Termination{Termination::How::Exited, rc.exit_code});
    const int sig = t.how == Termination::How::Signaled ? t.value : 0;
    published(monitor.report_worker_exit(rc.rank, exit_code_of(t), sig));
  };
  cfg.remote_fd = monitor.event_fd();
  cfg.remote_wait = remote_wait(mc);
  cfg.remote_peer_lost = [&monitor](int rank, const std::string& what) { monitor.peer_lost(rank, what); };
  cfg.remote_failure = [&monitor, published]() -> std::pair<int, std::string> {
    auto f = monitor.failure();
    if (!f) return {1, "unknown failure"};
    published(*f);
    return {f->exit_code, f->describe()};
  };
}

namespace {

class MultinodeJob final : public JobMode {
 public:
  // The launch that wins the bind on --master serves the store there (store_host.h); this node's
  // endpoints and the framework's master port come from our own reservation.
  MultinodeJob(const Plan& p, StopSignals& stops) : stops_(stops) {
    const auto deadline = std::chrono::steady_clock::now() + p.elastic_timeout();
    MeetingPoint mp = meet_at_master(p, stops, deadline);
    host_ = mp.host;
    serve_ = mp.serves;
    store_ = std::move(mp.store);
    presence_ = mp.presence;
    ports_ = reserve_ports(host_, p.n() + 1, std::nullopt);
    const mn::NodeRegistration self = local_registration(p, host_, ports_, serve_);

    rc_.store.address = mp.master;
    rc_.store.address_source = p.master_origin;
    rc_.store.job_id = p.job.job_id;
    rc_.store.token = p.token;
    rc_.store.client_name = "launcher on " + host_;
    rc_.nnodes = p.opt.nnodes;
    rc_.self = self;
    rc_.expected_hosts = p.slurm_hosts;
    timeout_ = p.elastic_timeout();
    // The first meeting has what resolving the master left of --elastic_timeout.
    first_timeout_ = std::max(std::chrono::duration_cast<std::chrono::milliseconds>(
                                  deadline - std::chrono::steady_clock::now()),
                              std::chrono::milliseconds(1000));
    max_restart_ = p.opt.max_restart;
    monitor_cfg_ = monitor_config(p.opt.rdzv);
    close_timeout_ = seconds_or(p.opt.rdzv.close_timeout_s, std::chrono::seconds(60));
  }

  RankLayout start(int generation) override {
    monitor_.reset();
    rc_.generation = generation;
    rc_.timeout = generation == 0 ? first_timeout_ : timeout_;
    rc_.store.connect_timeout = rc_.timeout;
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
    log::info("rendezvous: " + placement(layout_));
    mn::MonitorConfig mc = monitor_cfg_;
    mc.store = rc_.store;
    mc.layout = layout_;
    mc.presence = presence_;  // null but where this launcher serves the store
    mc.store_node = store_node(layout_);
    monitor_ = std::make_unique<mn::JobMonitor>(mc);
    ports_.release_sockets();

    return rank_layout(layout_, rc_.store.token);
  }

  void install(SupervisorConfig& cfg) override {
    install_monitor(cfg, *monitor_, monitor_cfg_, [this](const mn::FailureRecord& f) { publish_in_store(f); });
  }

  // This generation is over here: tell the others; the store's node keeps it up until they have
  // left it (bounded), so their last calls are answered. After a failure the others are parked
  // on its record and learn it within milliseconds; a node whose launcher died never leaves,
  // hence the short bound.
  void finish(int exit_code, bool) override {
    const bool success = exit_code == 0;
    if (success) monitor_->finish();
    if (!serve_) return;
    auto left = monitor_->wait_all_finished(success ? close_timeout_ : std::chrono::milliseconds(3000));
    if (!left.empty()) {
      std::string list;
      for (int r : left) list += (list.empty() ? "" : ", ") + std::to_string(r);
      log::warn("closing the store while node(s) " + list + " are still in the job");
    }
  }

 private:
  // The store's node wakes its own workers' waiters too (JOB_FAILED), whoever failed -- but only
  // when no restart follows: that record is final, and the next generation's rendezvous and
  // workers use the same store (the workers' own SIGTERM ends their waits meanwhile).
  void publish_in_store(const mn::FailureRecord& f) {
    if (store_ && layout_.generation >= max_restart_) store_->report_failure(f.rank, f.describe());
  }

  StopSignals& stops_;
  std::string host_;
  bool serve_ = false;
  int max_restart_ = 0;
  std::chrono::milliseconds timeout_{0}, first_timeout_{0}, close_timeout_{0};
  mn::MonitorConfig monitor_cfg_;
  mn::RendezvousConfig rc_;
  std::shared_ptr<mn::Presence> presence_;  // where this launcher serves the store: who is connected to it
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
