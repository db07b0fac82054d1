// The elastic job's site over etcd (site.h; --rdzv-backend etcd, --master etcd://HOST:PORT): the
// membership record (etcd_backend.h) and one lease per node (launcher/etcd/etcd_rendezvous.h) in
// etcd, and the job's key-value store served by the node that holds etcd's claim on it:
//   - each round, a node claims the store with its own address; the first claim wins and serves,
//     the others use the winner's store once it answers a PING (with the job's token);
//   - a node whose last round lost the claim's holder (its store unreachable: the heartbeat
//     monitor's record) revokes that holder's lease, so that the claim goes at once, and claims
//     again: one survivor serves a fresh store, the workers restart from their checkpoint;
//   - a holder whose store does not answer without such evidence keeps its claim until its lease
//     ends (a TTL after its last renewal).
// Who may take part is checked against the job record (a fingerprint of the token) before this
// node registers; its node key and claim go with its lease when it leaves or dies.
#include "launcher/elastic/etcd_backend.h"
#include "launcher/elastic/site.h"
#include "launcher/errors.h"
#include "launcher/etcd/etcd_rendezvous.h"
#include "launcher/log.h"
#include "launcher/multinode/multinode_job.h"
#include "launcher/multinode/store_host.h"
#include "launcher/net_address.h"
#include "launcher/ports.h"
#include "launcher/seconds.h"
#include "launcher/store/job_store.h"
#include "proto/address.h"
#include "proto/client.h"
#include "proto/token.h"

#include <algorithm>
#include <cmath>

namespace launch {

namespace {

using ms = std::chrono::milliseconds;
using EKind = etcd::EtcdError::Kind;

// How long a store's holder has to answer a PING before it counts as not answering.
constexpr ms kProbeTimeout{2000};

ms left(ElasticSite::Clock::time_point deadline) {
  return std::max(std::chrono::duration_cast<ms>(deadline - ElasticSite::Clock::now()), ms(1));
}

class EtcdSite final : public ElasticSite {
 public:
  EtcdSite(const Plan& p, StopSignals& stops, Clock::time_point deadline, std::string node_id, std::string who)
      : stops_(stops), timeout_s_(p.opt.elastic_timeout_s), token_(p.token), job_id_(p.job.job_id),
        node_id_(std::move(node_id)), who_(std::move(who)) {
    const std::optional<proto::HostPort> hp = proto::split_host_port(p.master);
    if (!hp) throw UsageError(p.master_origin + " '" + p.master + "' must be HOST:PORT, e.g. 10.0.0.1:2379");
    const std::string ip = resolve_master_host(hp->host, p, stops, deadline);
    host_ = p.opt.host_given ? p.opt.host : route_source_address(ip);
    opts_.endpoint = p.master;
    opts_.endpoint_source = p.master_origin;
    // The lease is the node's liveness: as long as a silent node's heartbeat lasts (etcd grants
    // whole seconds, and raises a TTL below its minimum).
    const ms hb = monitor_config(p.opt.rdzv).heartbeat_timeout;
    ttl_s_ = std::max<int64_t>(1, static_cast<int64_t>(std::ceil(double(hb.count()) / 1000.0)));
    end_ttl_s_ = std::max<int64_t>(
        1, static_cast<int64_t>(std::ceil(seconds_or(p.opt.rdzv.close_timeout_s, ms(60000)).count() / 1000.0)));
    wait_for_etcd(deadline);
    store_port_ = reserve_ports(host_, 1, std::nullopt);
    my_address_ = proto::join_host_port(host_, store_port_.ports()[0]);
    call([&] { register_node(); }, "registering with etcd");
  }

  const std::string& host() const override { return host_; }

  std::unique_ptr<elastic::MembershipBackend> backend(const CancelHook& hook, ms) const override {
    etcd::Options o = opts_;
    hook.apply(o);
    return std::make_unique<elastic::EtcdBackend>(std::move(o), job_id_);
  }

  RoundStore round_store(const std::optional<elastic::RoundEnd>& ended, Clock::time_point deadline) override {
    return call([&] { return elect(ended, deadline); }, "choosing the job's store");
  }

  void job_over() override {
    try {
      rdzv_->expire_job(end_ttl_s_);
    } catch (const std::exception&) {
      // Best effort: the records stay; a new job needs a new --rdzv-id then.
    }
  }

  std::string timeout_hint() override {
    try {
      etcd::Client c(opts_);
      c.set_timeout(ms(2000));
      const auto jobs = etcd::jobs_with_nodes(etcd::list_prefix(c, etcd::kJobsPrefix), job_id_);
      if (jobs.empty()) return "";
      std::string list;
      for (const auto& [job, n] : jobs) list += (list.empty() ? "'" : ", '") + job + "' (" + std::to_string(n) + ")";
      return "; etcd at " + opts_.endpoint + " has node(s) of other job id(s): " + list +
             ": the nodes of one job need the same --rdzv-id (--job_id)";
    } catch (const std::exception&) {
      return "";
    }
  }

  std::string failure_note() const override { return ""; }

 private:
  // Runs `f`, turning etcd's errors into the launcher's: a stop signal, or a failed rendezvous.
  template <class F>
  auto call(F&& f, const char* doing) -> decltype(f()) {
    try {
      return f();
    } catch (const etcd::EtcdError& e) {
      if (e.kind() == EKind::Cancelled && stops_.stopped()) throw StopRequested(*stops_.stopped(), doing);
      throw std::runtime_error(std::string("rendezvous failed while ") + doing + ": " + e.what());
    } catch (const etcd::RendezvousError& e) {
      throw std::runtime_error(std::string("rendezvous failed while ") + doing + ": " + e.what());
    }
  }

  etcd::Options stoppable() const {
    etcd::Options o = opts_;
    stops_.attach(o);
    return o;
  }

  // etcd answers, or the rendezvous times out as any other: exit 1 naming the endpoint.
  void wait_for_etcd(Clock::time_point deadline) {
    etcd::Client c(stoppable());
    c.set_timeout(std::min(opts_.timeout, left(deadline)));
    try {
      c.server_version();
      return;
    } catch (const etcd::EtcdError& e) {
      if (e.kind() == EKind::Cancelled && stops_.stopped()) throw StopRequested(*stops_.stopped(), "waiting for etcd");
      if (e.kind() != EKind::Connection && e.kind() != EKind::Timeout) throw std::runtime_error(e.what());
      if (Clock::now() + ms(100) >= deadline)
        throw std::runtime_error("rendezvous timed out after " + seconds_text(timeout_s_) + " s: " + e.what() +
                                 "; start etcd there, or raise --elastic_timeout");
      log::info("rendezvous: etcd at " + opts_.endpoint + " does not answer yet (" + e.what() + "); asking again "
                "until --elastic_timeout");
    }
    try {
      c.wait_ready(left(deadline));
    } catch (const etcd::EtcdError& e) {
      if (e.kind() == EKind::Cancelled && stops_.stopped()) throw StopRequested(*stops_.stopped(), "waiting for etcd");
      throw std::runtime_error("rendezvous timed out after " + seconds_text(timeout_s_) + " s: " + e.what() +
                               "; start etcd there, or raise --elastic_timeout");
    }
  }

  // A lease of this node's own, the token checked against the job's, and its node key. A node
  // that lost its lease comes here again: the old lease is revoked first (etcd may not have
  // expired it yet), so that the node's id is free.
  void register_node() {
    if (rdzv_) {
      const int64_t old = rdzv_->lease().id();
      rdzv_.reset();
      try {
        etcd::Client(opts_).revoke(old);
      } catch (const etcd::EtcdError&) {
      }
    }
    etcd::RendezvousConfig cfg;
    cfg.etcd = stoppable();
    cfg.job_id = job_id_;
    cfg.node_id = node_id_;
    cfg.lease_ttl_s = ttl_s_;
    rdzv_ = std::make_unique<etcd::EtcdRendezvous>(cfg);
    if (!rdzv_->admit(proto::token_fingerprint(token_, "etcd job " + job_id_)))
      throw UsageError("job '" + job_id_ + "' at etcd " + opts_.endpoint + " runs with another token than this " +
                       "node's: give every node the same token (--token-file or LAUNCH_STORE_TOKEN), or this job " +
                       "another --rdzv-id (--job_id)");
    rdzv_->join(who_);
    log::info("rendezvous: registered in job '" + job_id_ + "' at etcd " + opts_.endpoint + " (lease of " +
              std::to_string(rdzv_->lease().ttl()) + " s)");
  }

  RoundStore elect(const std::optional<elastic::RoundEnd>& ended, Clock::time_point deadline) {
    if (rdzv_->lease().lost()) {
      log::warn("rendezvous: this node's etcd lease was lost (" + rdzv_->lease().lost_reason() + "): registering again");
      register_node();
    }
    std::string said;
    for (;;) {
      const etcd::StoreHolder h = rdzv_->claim_store(my_address_);
      if (h.mine) {
        serve();
        claim_revision_ = h.mod_revision;
        return RoundStore{my_address_, "the job's store (served here)", true, presence_};
      }
      drop_store();
      const bool lost_last_round = ended && h.mod_revision == claim_revision_ &&
                                   std::find(ended->lost.begin(), ended->lost.end(), h.node_id) != ended->lost.end();
      if (lost_last_round) {
        if (rdzv_->evict_store(h))
          log::warn("rendezvous: the store's node (" + h.address + ") was lost: its etcd lease is revoked, a node "
                    "that is left serves a fresh store");
        claim_revision_ = 0;
        continue;
      }
      std::string why;
      if (answers(h.address, &why)) {
        claim_revision_ = h.mod_revision;
        return RoundStore{h.address, "the job's store (its holder in etcd " + opts_.endpoint + ")", false, nullptr};
      }
      if (Clock::now() >= deadline)
        throw std::runtime_error("rendezvous timed out after " + seconds_text(timeout_s_) + " s: the job's store at " +
                                 h.address + " (its holder in etcd " + opts_.endpoint + ") does not answer (" + why +
                                 "), and its holder's lease did not end");
      const std::string note = "rendezvous: the job's store at " + h.address + " does not answer (" + why +
                               "): waiting for its holder's etcd lease to end";
      if (note != said) log::info(said = note);
      rdzv_->wait_store_vacant(h, std::min(left(deadline), ms((ttl_s_ + 1) * 1000)));
    }
  }

  // One PING with the job's id and token; a refusal is this node's bad input.
  bool answers(const std::string& address, std::string* why) {
    proto::ClientOptions o;
    o.address = address;
    o.address_source = "the job's store in etcd " + opts_.endpoint;
    o.job_id = job_id_;
    o.token = token_;
    o.client_name = "launcher on " + host_ + " (probe)";
    o.connect_timeout = kProbeTimeout;
    o.retry_connect = false;
    stops_.attach(o);
    try {
      proto::Client(o).ping(kProbeTimeout);
      return true;
    } catch (const proto::StoreError& e) {
      if (e.kind() == proto::StoreError::Kind::Cancelled) stops_.rethrow(e, "choosing the job's store");
      if (e.kind() == proto::StoreError::Kind::Refused)
        throw UsageError("the job's store at " + address + " refused this node: " + e.what() +
                         " (every node needs the same --job_id and token: --token-file or LAUNCH_STORE_TOKEN)");
      *why = e.what();
      return false;
    }
  }

  void serve() {
    if (store_) return;
    store_port_.release_sockets();  // the lock stays ours
    auto presence = std::make_shared<multinode::Presence>();
    auto seen = [presence](const std::string& name, bool open) {
      presence->on_client(name, open, multinode::Presence::Clock::now());
    };
    store_ = start_shared_job_store(host_, job_id_, store_port_.ports()[0], token_, seen);
    presence_ = presence;
    log::info("rendezvous: serving the job's store on " + my_address_ + " (this node holds its claim in etcd)");
  }

  void drop_store() {
    if (!store_) return;
    log::info("rendezvous: another node holds the store's claim in etcd now: no longer serving " + my_address_);
    store_.reset();
    presence_.reset();
  }

  StopSignals& stops_;
  double timeout_s_;
  std::string token_, job_id_, node_id_, who_;
  std::string host_;
  etcd::Options opts_;  // without a cancel hook: each use adds its own
  int64_t ttl_s_ = 5, end_ttl_s_ = 60;
  PortReservation store_port_;
  std::string my_address_;  // where this node serves the store when it holds the claim
  std::optional<JobStore> store_;
  std::shared_ptr<multinode::Presence> presence_;
  int64_t claim_revision_ = 0;  // of the claim whose store the last round used
  std::unique_ptr<etcd::EtcdRendezvous> rdzv_;  // last member: its lease goes first
};

}  // namespace

std::unique_ptr<ElasticSite> make_etcd_site(const Plan& p, StopSignals& stops, ElasticSite::Clock::time_point deadline,
                                            const std::string& node_id, const std::string& who) {
  return std::make_unique<EtcdSite>(p, stops, deadline, node_id, who);
}

}  // namespace launch
