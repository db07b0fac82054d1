// Elastic membership as a job mode (job_mode.h): --nnodes MIN:MAX, and any multi-node job over
// etcd. The nodes meet at a site (site.h: launch's own store on --master, or etcd), whose
// membership record (membership.h) says who runs each round and which store the round uses.
// While a round runs, the nodes fail together through the heartbeat monitor over that store
// (multinode/monitor.h), and a watcher of the record sees nodes that ask to join and, where the
// site knows liveness (etcd's leases), members that are gone; either ends the round, and the
// nodes that are left meet again for the next.
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <thread>

#include "launcher/elastic/membership.h"
#include "launcher/elastic/site.h"
#include "launcher/errors.h"
#include "launcher/job_mode.h"
#include "launcher/log.h"
#include "launcher/multinode/multinode_job.h"
#include "launcher/multinode/rendezvous.h"
#include "launcher/ports.h"
#include "launcher/seconds.h"
#include "proto/address.h"

namespace launch {

namespace el = launch::elastic;
namespace mn = launch::multinode;

namespace {

using Clock = std::chrono::steady_clock;
using ms = std::chrono::milliseconds;
using BKind = el::BackendError::Kind;

// The longest a wait on the record lasts before the loop looks at its deadlines again (a writer
// that died between its swap and its change key leaves no key to wake us).
constexpr ms kWaitSlice{1000};
// torchrun's default last call: once MIN nodes are in, how long a round waits for more.
constexpr ms kDefaultLastCall{30000};
// How long the workers have to save when a node joins (--rdzv-conf checkpoint_timeout).
constexpr ms kDefaultCheckpointTimeout{5000};

ms left(Clock::time_point deadline) { return std::max(std::chrono::duration_cast<ms>(deadline - Clock::now()), ms(1)); }

double seconds(ms d) { return std::chrono::duration<double>(d).count(); }

std::string who(const mn::NodeRegistration& n) {
  return n.hostname.empty() || n.hostname == n.host ? n.host : n.hostname + " (" + n.host + ")";
}

// --- The watcher: a node that asks to join a running round, a member that is gone -------------

bool contains(const std::vector<std::string>& ids, const std::string& id) {
  return std::find(ids.begin(), ids.end(), id) != ids.end();
}

// Parks on the record while a round runs. When a node is waiting to join that round it fires its
// eventfd: the supervisor then re-forms the job (SupervisorConfig::reform_fd). When the site knows
// liveness (etcd's leases) and a member of the round is gone, it tells the monitor, which fails
// the round as it fails it for a silent heartbeat.
class RoundWatcher {
 public:
  RoundWatcher(const ElasticSite& site, mn::JobMonitor& monitor, int round, std::string self_id)
      : monitor_(monitor), round_(round), self_(std::move(self_id)) {
    efd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    stop_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (efd_ < 0 || stop_fd_ < 0) throw SystemError("eventfd for the round watcher", errno);
    // Its calls end when the destructor says so (the launcher's stop signals are the main thread's).
    auto backend = site.backend(CancelHook{stop_fd_, [] { return true; }}, ms(5000));
    thread_ = std::thread([this, b = std::move(backend)]() mutable { run(*b); });
  }
  ~RoundWatcher() {
    uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(stop_fd_, &one, sizeof one);
    if (thread_.joinable()) thread_.join();
    ::close(efd_);
    ::close(stop_fd_);
  }
  RoundWatcher(const RoundWatcher&) = delete;
  RoundWatcher& operator=(const RoundWatcher&) = delete;

  int fd() const { return efd_; }
  std::string reason() const {
    std::lock_guard<std::mutex> lock(mu_);
    return reason_;
  }

 private:
  void run(el::MembershipBackend& backend) {
    const ms call{5000};
    for (;;) {
      try {
        // The record as it is first (a node may have asked before this round's workers began),
        // then each change.
        const el::State s = el::decode_state(backend.load(call));
        if (s.round != round_ || s.phase != el::Phase::Running) return;  // the round is over anyway
        if (const auto live = backend.alive(call)) {
          for (size_t i = 0; i < s.members.size(); ++i) {
            if (contains(*live, s.members[i].node.id)) continue;
            monitor_.node_lost(int(i), s.members[i].node.id == self_
                                           ? "this launcher lost its place at " + backend.where() +
                                                 " (its lease ended: no renewal reached etcd for the lease's TTL)"
                                           : "launcher stopped responding (gone from " + backend.where() +
                                                 ": its lease ended)");
            return;
          }
        }
        if (s.waiting.empty()) {
          backend.wait_change(s.version, ms(60000));  // the destructor's eventfd ends it
          continue;
        }
        std::string names;
        for (const auto& m : s.waiting) names += (names.empty() ? "" : ", ") + who(m.node);
        {
          std::lock_guard<std::mutex> lock(mu_);
          reason_ = std::to_string(s.waiting.size()) + " node(s) ask to join: " + names;
        }
        uint64_t one = 1;
        [[maybe_unused]] ssize_t n = ::write(efd_, &one, sizeof one);
        return;
      } catch (const el::BackendError& e) {
        if (e.kind() == BKind::Cancelled) return;
        // The store is the monitor's to judge (it reports an unreachable store); look again.
      } catch (const std::exception&) {
      }
      pollfd p{stop_fd_, POLLIN, 0};
      if (::poll(&p, 1, 250) > 0) return;
    }
  }

  mn::JobMonitor& monitor_;
  const int round_;
  const std::string self_;
  int efd_ = -1, stop_fd_ = -1;
  mutable std::mutex mu_;
  std::string reason_;
  std::thread thread_;
};

// --- The job mode -----------------------------------------------------------------------------

class ElasticJob final : public JobMode {
 public:
  ElasticJob(const Plan& p, StopSignals& stops) : stops_(stops) {
    const bool fixed = p.opt.nnodes_min == 0;  // a fixed-size job over etcd: MIN = MAX
    if (p.opt.rank >= 0)
      log::info("--rank " + std::to_string(p.opt.rank) + ": " +
                (fixed ? std::string("over etcd") : std::string("under --nnodes MIN:MAX")) +
                " node ranks follow the rendezvous (the store's host first, then by seniority and arrival)");
    const auto deadline = Clock::now() + p.elastic_timeout();
    mn::NodeRegistration& me = self_.me.node;
    me.id = mn::make_node_id();
    char name[256] = {};
    if (::gethostname(name, sizeof name - 1) == 0) me.hostname = name;
    site_ = p.etcd ? make_etcd_site(p, stops, deadline, me.id, me.hostname.empty() ? "a launcher" : me.hostname)
                   : make_store_site(p, stops, deadline);
    ports_ = reserve_ports(site_->host(), p.n() + 1, std::nullopt);
    const std::string id = me.id, hostname = me.hostname;
    me = local_registration(p, site_->host(), ports_, false);
    me.id = id;
    me.hostname = hostname;
    self_.min_nodes = fixed ? p.opt.nnodes : p.opt.nnodes_min;
    self_.max_nodes = p.opt.nnodes;
    self_.max_restart = p.opt.max_restart;
    self_.last_call = seconds_or(p.opt.rdzv.last_call_timeout_s, kDefaultLastCall);

    store_opts_.job_id = p.job.job_id;
    store_opts_.token = p.token;
    store_opts_.client_name = "launcher on " + site_->host();
    timeout_ = p.elastic_timeout();
    first_deadline_ = deadline;
    monitor_cfg_ = monitor_config(p.opt.rdzv);
    close_timeout_ = seconds_or(p.opt.rdzv.close_timeout_s, ms(60000));
    if (p.opt.checkpoint_signal) save_ = seconds_or(p.opt.rdzv.checkpoint_timeout_s, kDefaultCheckpointTimeout);
  }

  RankLayout start(int generation) override {
    const auto deadline = generation == 0 ? first_deadline_ : Clock::now() + timeout_;
    check_record(deadline);  // a node that is refused claims nothing
    const RoundStore rs = site_->round_store(self_.ended, deadline);
    serve_ = rs.serves;
    presence_ = rs.presence;
    self_.me.node.serves_store = rs.serves;
    store_opts_.address = rs.address;
    store_opts_.address_source = rs.source;
    log::info("rendezvous: --nnodes " +
              (self_.min_nodes == self_.max_nodes ? "" : std::to_string(self_.min_nodes) + ":") +
              std::to_string(self_.max_nodes) + " at " + where_ + (serve_ ? " (the store served here)" : ""));
    place_ = meet(deadline);
    self_.ended.reset();
    self_.me.since = place_.members[place_.index].since;
    layout_ = place_.layout(store_opts_.address);
    log::info("rendezvous: round " + std::to_string(place_.round) + ": " + placement(layout_));

    mn::MonitorConfig mc = monitor_cfg_;
    mc.store = store_opts_;
    mc.store.connect_timeout = ms(5000);
    mc.layout = layout_;
    mc.presence = presence_;
    mc.store_node = store_node(layout_);
    watcher_.reset();
    monitor_ = std::make_unique<mn::JobMonitor>(mc);
    watcher_ = std::make_unique<RoundWatcher>(*site_, *monitor_, place_.round, self_.me.node.id);
    ports_.release_sockets();

    RankLayout l = rank_layout(layout_, store_opts_.token);
    l.restart_count = place_.round;
    return l;
  }

  void install(SupervisorConfig& cfg) override {
    install_monitor(cfg, *monitor_, monitor_cfg_);
    cfg.reform_fd = watcher_->fd();
    cfg.reform_reason = [this] { return watcher_->reason(); };
    cfg.reform_save = save_;
  }

  std::optional<bool> another_generation(const JobOutcome& o, int, StopSignals& stops) override {
    const ExitPolicy& pol = o.policy;
    watcher_.reset();
    if (pol.launcher_signal()) return false;
    const bool reform = pol.reform() && !pol.root() && !pol.remote_failure();
    if (!reform && pol.exit_code() == 0) return false;
    if (auto s = stops.poll()) {
      log::warn(signal_name(*s) + " arrived while the job was ending its round: not re-forming");
      return false;
    }
    el::RoundEnd end;
    end.round = place_.round;
    end.failed = !reform;
    bool store_lost = false;
    if (end.failed) {
      end.exit_code = pol.exit_code();
      end.what = pol.root() ? "rank " + std::to_string(pol.root()->rank) + " " + pol.root()->description
                            : pol.remote_failure().value_or("a failure");
      // A node whose launcher stopped responding is not waited for (this one is back).
      if (auto f = monitor_->failure(); f && f->rank == -1 && f->node_rank >= 0 && f->node_rank != layout_.node_rank &&
                                        size_t(f->node_rank) < place_.members.size()) {
        end.lost.push_back(place_.members[size_t(f->node_rank)].node.id);
        store_lost = f->node_rank == store_node(layout_);
      }
    }
    self_.ended = end;
    // Our part of the round is over: the store's node need not wait for us (nor can it, lost).
    if (!store_lost) monitor_->finish(ms(2000));
    log::warn(end.failed ? "the job re-forms after its round " + std::to_string(end.round) + " failed (" + end.what + ")"
                         : "the job re-forms for the node(s) that asked to join");
    return true;
  }

  void finish(int exit_code, bool last) override {
    watcher_.reset();
    if (!last || !monitor_) return;
    if (exit_code == 0) {
      monitor_->finish();
      if (mark_over(0, "its workers exited 0")) site_->job_over();
    }
    if (!serve_) return;
    // The store's node keeps it up until the others have left it (bounded), as a fixed-size job.
    auto running = monitor_->wait_all_finished(exit_code == 0 ? close_timeout_ : ms(3000));
    if (!running.empty()) log::warn("closing the store while " + std::to_string(running.size()) + " node(s) are still in the job");
  }

 private:
  std::unique_ptr<el::MembershipBackend> stoppable_backend(Clock::time_point deadline) {
    auto b = site_->backend(CancelHook{stops_.fd(), [this] { return stops_.poll().has_value(); }}, left(deadline));
    where_ = b->where();
    return b;
  }

  // The launcher's error for a backend's.
  [[noreturn]] void fail(const el::BackendError& e, const el::MembershipBackend& b) {
    if (e.kind() == BKind::Cancelled && stops_.stopped()) throw StopRequested(*stops_.stopped(), "waiting for the other nodes");
    if (e.kind() == BKind::Refused)
      throw UsageError(b.where() + " refused this node: " + e.what() +
                       " (every node needs the same --job_id and token: --token-file or LAUNCH_STORE_TOKEN)");
    throw std::runtime_error("rendezvous failed at " + b.where() + ": " + e.what() + site_->failure_note());
  }

  // What step() says at once, before this node takes any part (the store's claim under etcd): a
  // refusal, or a job that is over.
  void check_record(Clock::time_point deadline) {
    auto backend = stoppable_backend(deadline);
    try {
      // As long as the rendezvous may take: a store that is not up yet is waited for.
      const el::Decision d = el::step(el::decode_state(backend->load(left(deadline))), self_, Clock::now());
      if (d.kind == el::Decision::Kind::Refuse) throw UsageError(d.message);
      if (d.kind == el::Decision::Kind::Over) over(d);
    } catch (const el::BackendError& e) {
      fail(e, *backend);
    } catch (const el::StateError& e) {
      throw std::runtime_error(e.what());
    }
  }

  [[noreturn]] void over(const el::Decision& d) {
    linger();
    site_->job_over();
    throw JobOver(d.exit_code, d.message);
  }

  // The rendezvous: step() on the record until this node runs, is refused, or the job is over.
  // Where the site knows liveness, nodes that are gone are taken off the record first (prune).
  el::Place meet(Clock::time_point deadline) {
    auto backend = stoppable_backend(deadline);
    el::MembershipBackend& b = *backend;
    const ms call{10000};
    std::string said;
    try {
      std::string raw = b.load(left(deadline));
      for (;;) {
        const el::State s = el::decode_state(raw);
        if (const auto live = b.alive(call)) {
          if (!contains(*live, self_.me.node.id))
            throw std::runtime_error("this node lost its place at " + b.where() + " while it waited for the others (its "
                                     "lease ended: no renewal reached etcd for the lease's TTL)");
          if (const auto next = el::prune(s, *live, self_.max_restart)) {
            raw = b.compare_and_swap(raw, el::encode_state(*next), next->version, call);
            continue;
          }
        }
        const auto now = Clock::now();
        if (s.phase == el::Phase::Forming && s.members.size() >= size_t(s.min_nodes))
          quorum_seen_.emplace(s.round, now);
        const auto q = quorum_seen_.find(s.round);
        self_.quorum_seen = q == quorum_seen_.end() ? std::nullopt : std::optional<Clock::time_point>(q->second);
        const el::Decision d = el::step(s, self_, now);
        switch (d.kind) {
          case el::Decision::Kind::Write:
            raw = b.compare_and_swap(raw, el::encode_state(d.next), d.next.version, call);
            continue;
          case el::Decision::Kind::Run:
            return d.place;
          case el::Decision::Kind::Refuse:
            throw UsageError(d.message);
          case el::Decision::Kind::Over:
            over(d);
          case el::Decision::Kind::Wait:
            break;
        }
        if (d.message != said) log::info("rendezvous: " + (said = d.message));
        if (now >= deadline) {
          give_up(b, raw);
          throw std::runtime_error("rendezvous timed out after " + seconds_text(seconds(timeout_)) + " s at " +
                                   b.where() + ": " + d.message + "; start more nodes with the same --nnodes, " +
                                   "endpoint, --job_id and token, or raise --elastic_timeout" + site_->timeout_hint());
        }
        auto until = std::min(deadline, now + kWaitSlice);
        if (d.wake) until = std::min(until, *d.wake);
        b.wait_change(s.version, left(until));
        raw = b.load(call);
      }
    } catch (const el::BackendError& e) {
      fail(e, b);
    } catch (const el::StateError& e) {
      throw std::runtime_error(e.what());
    }
  }

  // A node that gives up waiting takes itself off the record (best effort), so that a round does
  // not count it.
  void give_up(el::MembershipBackend& backend, std::string raw) {
    try {
      for (int tries = 0; tries < 5; ++tries) {
        const auto next = el::leave(el::decode_state(raw), self_.me.node.id);
        if (!next) return;
        const std::string want = el::encode_state(*next);
        const std::string now = backend.compare_and_swap(raw, want, next->version, ms(2000));
        if (now == want) return;
        raw = now;
      }
    } catch (const std::exception&) {
    }
  }

  // The job ended here (its workers succeeded): nodes that come late learn it from the record.
  // true: the record says so now.
  bool mark_over(int code, const std::string& why) {
    try {
      auto backend = site_->backend(CancelHook{}, ms(2000));
      std::string raw = backend->load(ms(2000));
      for (int tries = 0; tries < 5; ++tries) {
        const el::State s = el::decode_state(raw);
        if (s.phase == el::Phase::Finished || s.phase == el::Phase::Failed) return true;
        if (s.round != place_.round || s.phase != el::Phase::Running) return false;
        const el::State next = el::finished(s, code, "node " + std::to_string(layout_.node_rank) + ": " + why);
        const std::string want = el::encode_state(next);
        const std::string now = backend->compare_and_swap(raw, want, next.version, ms(2000));
        if (now == want) return true;
        raw = now;
      }
    } catch (const std::exception&) {
    }
    return false;
  }

  // The job is over before this node's next round: the store's node lets the others read that
  // first (bounded), and every node says it has left its last round.
  void linger() {
    if (!monitor_) return;
    monitor_->finish(ms(2000));
    if (serve_) monitor_->wait_all_finished(ms(3000));
  }

  StopSignals& stops_;
  std::unique_ptr<ElasticSite> site_;  // the store's owner where this node serves it
  std::string where_;                  // the site, for messages
  bool serve_ = false;
  std::shared_ptr<mn::Presence> presence_;  // where this launcher serves the store: who is connected to it
  PortReservation ports_;
  proto::ClientOptions store_opts_;  // the round's store
  el::Self self_;
  el::Place place_;
  std::map<int, Clock::time_point> quorum_seen_;
  mn::JobLayout layout_;
  mn::MonitorConfig monitor_cfg_;
  ms timeout_{0}, close_timeout_{0}, save_{0};
  Clock::time_point first_deadline_;
  std::unique_ptr<mn::JobMonitor> monitor_;
  std::unique_ptr<RoundWatcher> watcher_;
};

}  // namespace

std::unique_ptr<JobMode> make_elastic_job(const Plan& plan, StopSignals& stops) {
  return std::make_unique<ElasticJob>(plan, stops);
}

}  // namespace launch
