// Elastic membership as a job mode (job_mode.h): --nnodes MIN:MAX. The nodes meet at --master as
// a fixed-size job's do (store_host.h); the membership record (membership.h) held in the job's
// store (store_backend.h) says who runs each round. While a round runs, the nodes fail together
// through the heartbeat monitor (multinode/monitor.h) and a watcher sees nodes that ask to join;
// either ends the round, and the nodes that are left meet again for the next.
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <mutex>
#include <thread>

#include "launcher/elastic/membership.h"
#include "launcher/elastic/store_backend.h"
#include "launcher/errors.h"
#include "launcher/job_mode.h"
#include "launcher/log.h"
#include "launcher/multinode/multinode_job.h"
#include "launcher/multinode/rendezvous.h"
#include "launcher/multinode/store_host.h"
#include "launcher/ports.h"
#include "launcher/seconds.h"
#include "proto/address.h"

namespace launch {

namespace el = launch::elastic;
namespace mn = launch::multinode;

namespace {

using Clock = std::chrono::steady_clock;
using ms = std::chrono::milliseconds;
using Kind = proto::StoreError::Kind;

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

// --- The watcher: a node that asks to join a running round ------------------------------------

// Parks on the record's change key while a round runs and fires its eventfd when a node is
// waiting to join that round: the supervisor then re-forms the job (SupervisorConfig::reform_fd).
class JoinWatcher {
 public:
  JoinWatcher(proto::ClientOptions opts, int round, int64_t version) : round_(round), seen_(version) {
    efd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (efd_ < 0) throw SystemError("eventfd for the join watcher", errno);
    opts.client_name += " (join watcher)";
    thread_ = std::thread([this, opts] { run(opts); });
  }
  ~JoinWatcher() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
    ::close(efd_);
  }
  JoinWatcher(const JoinWatcher&) = delete;
  JoinWatcher& operator=(const JoinWatcher&) = delete;

  int fd() const { return efd_; }
  std::string reason() const {
    std::lock_guard<std::mutex> lock(mu_);
    return reason_;
  }

 private:
  void run(const proto::ClientOptions& opts) {
    el::StoreBackend backend(opts);
    while (!stop_) {
      try {
        // The record as it is first (a node may have asked before this round's workers began),
        // then each change.
        const el::State s = el::decode_state(backend.load(ms(2000)));
        seen_ = s.version;
        if (s.round != round_ || s.phase != el::Phase::Running) return;  // the round is over anyway
        if (s.waiting.empty()) {
          backend.wait_change(seen_, ms(250));  // short: the destructor waits for it
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
      } catch (const std::exception&) {
        // The store is the monitor's to judge (it reports an unreachable store); look again.
        std::this_thread::sleep_for(ms(250));
      }
    }
  }

  const int round_;
  int64_t seen_;
  int efd_ = -1;
  std::atomic<bool> stop_{false};
  mutable std::mutex mu_;
  std::string reason_;
  std::thread thread_;
};

// --- The job mode -----------------------------------------------------------------------------

class ElasticJob final : public JobMode {
 public:
  ElasticJob(const Plan& p, StopSignals& stops) : stops_(stops) {
    if (p.opt.rank >= 0)
      log::info("--rank " + std::to_string(p.opt.rank) + ": under --nnodes MIN:MAX node ranks follow the "
                "rendezvous (the store's host first, then by seniority and arrival)");
    const auto deadline = Clock::now() + p.elastic_timeout();
    MeetingPoint mp = meet_at_master(p, stops, deadline);
    serve_ = mp.serves;
    store_ = std::move(mp.store);
    presence_ = mp.presence;
    host_ = mp.host;
    ports_ = reserve_ports(host_, p.n() + 1, std::nullopt);
    mn::NodeRegistration& me = self_.me.node;
    me = local_registration(p, host_, ports_, serve_);
    me.id = mn::make_node_id();
    char name[256] = {};
    if (::gethostname(name, sizeof name - 1) == 0) me.hostname = name;
    self_.min_nodes = p.opt.nnodes_min;
    self_.max_nodes = p.opt.nnodes;
    self_.max_restart = p.opt.max_restart;
    self_.last_call = seconds_or(p.opt.rdzv.last_call_timeout_s, kDefaultLastCall);

    store_opts_.address = mp.master;
    store_opts_.address_source = p.master_origin;
    store_opts_.job_id = p.job.job_id;
    store_opts_.token = p.token;
    store_opts_.client_name = "launcher on " + host_;
    timeout_ = p.elastic_timeout();
    first_deadline_ = deadline;
    monitor_cfg_ = monitor_config(p.opt.rdzv);
    close_timeout_ = seconds_or(p.opt.rdzv.close_timeout_s, ms(60000));
    if (p.opt.checkpoint_signal) save_ = seconds_or(p.opt.rdzv.checkpoint_timeout_s, kDefaultCheckpointTimeout);
  }

  RankLayout start(int generation) override {
    const auto deadline = generation == 0 ? first_deadline_ : Clock::now() + timeout_;
    log::info("rendezvous: --nnodes " + std::to_string(self_.min_nodes) + ":" + std::to_string(self_.max_nodes) +
              " at " + store_opts_.address + (serve_ ? " (served here)" : ""));
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
    monitor_ = std::make_unique<mn::JobMonitor>(mc);
    watcher_ = std::make_unique<JoinWatcher>(mc.store, place_.round, version_);
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
    if (end.failed) {
      end.exit_code = pol.exit_code();
      end.what = pol.root() ? "rank " + std::to_string(pol.root()->rank) + " " + pol.root()->description
                            : pol.remote_failure().value_or("a failure");
      // A node whose launcher stopped responding is not waited for.
      if (auto f = monitor_->failure(); f && f->rank == -1 && f->node_rank >= 0 && size_t(f->node_rank) < place_.members.size())
        end.lost.push_back(place_.members[size_t(f->node_rank)].node.id);
    }
    self_.ended = end;
    monitor_->finish(ms(2000));  // our part of the round is over: the store's node need not wait for us
    log::warn(end.failed ? "the job re-forms after its round " + std::to_string(end.round) + " failed (" + end.what + ")"
                         : "the job re-forms for the node(s) that asked to join");
    return true;
  }

  void finish(int exit_code, bool last) override {
    watcher_.reset();
    if (!last || !monitor_) return;
    if (exit_code == 0) {
      monitor_->finish();
      mark_over(0, "its workers exited 0");
    }
    if (!serve_) return;
    // The store's node keeps it up until the others have left it (bounded), as a fixed-size job.
    auto running = monitor_->wait_all_finished(exit_code == 0 ? close_timeout_ : ms(3000));
    if (!running.empty()) log::warn("closing the store while " + std::to_string(running.size()) + " node(s) are still in the job");
  }

 private:
  // The rendezvous: step() on the record until this node runs, is refused, or the job is over.
  el::Place meet(Clock::time_point deadline) {
    proto::ClientOptions opts = store_opts_;
    opts.connect_timeout = left(deadline);
    stops_.attach(opts);
    el::StoreBackend backend(opts);
    const ms call{10000};
    std::string said;
    try {
      std::string raw = backend.load(left(deadline));
      for (;;) {
        const el::State s = el::decode_state(raw);
        const auto now = Clock::now();
        if (s.phase == el::Phase::Forming && s.members.size() >= size_t(s.min_nodes))
          quorum_seen_.emplace(s.round, now);
        const auto q = quorum_seen_.find(s.round);
        self_.quorum_seen = q == quorum_seen_.end() ? std::nullopt : std::optional<Clock::time_point>(q->second);
        const el::Decision d = el::step(s, self_, now);
        switch (d.kind) {
          case el::Decision::Kind::Write:
            raw = backend.compare_and_swap(raw, el::encode_state(d.next), d.next.version, call);
            continue;
          case el::Decision::Kind::Run:
            version_ = s.version;
            return d.place;
          case el::Decision::Kind::Refuse:
            throw UsageError(d.message);
          case el::Decision::Kind::Over:
            linger();
            throw JobOver(d.exit_code, d.message);
          case el::Decision::Kind::Wait:
            break;
        }
        if (d.message != said) log::info("rendezvous: " + (said = d.message));
        if (now >= deadline) {
          give_up(backend, raw);
          throw std::runtime_error("rendezvous timed out after " + seconds_text(seconds(timeout_)) + " s at " +
                                   backend.where() + ": " + d.message + "; start more nodes with the same --nnodes, "
                                   "--master, --job_id and token, or raise --elastic_timeout");
        }
        auto until = std::min(deadline, now + kWaitSlice);
        if (d.wake) until = std::min(until, *d.wake);
        backend.wait_change(s.version, left(until));
        raw = backend.load(call);
      }
    } catch (const proto::StoreError& e) {
      if (e.kind() == Kind::Cancelled) stops_.rethrow(e, "waiting for the other nodes");
      if (e.kind() == Kind::Refused)
        throw UsageError("the job's store at " + store_opts_.address + " refused this node: " + e.what() +
                         " (every node needs the same --job_id and token: --token-file or LAUNCH_STORE_TOKEN)");
      throw std::runtime_error("rendezvous failed at " + store_opts_.address + ": " + e.what() +
                               " (with launch's own store the job ends with the node that serves it)");
    } catch (const el::StateError& e) {
      throw std::runtime_error(e.what());
    }
  }

  // A node that gives up waiting takes itself off the record (best effort), so that a round does
  // not count it.
  void give_up(el::StoreBackend& backend, std::string raw) {
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
  void mark_over(int code, const std::string& why) {
    try {
      el::StoreBackend backend(store_opts_);
      std::string raw = backend.load(ms(2000));
      for (int tries = 0; tries < 5; ++tries) {
        const el::State s = el::decode_state(raw);
        if (s.round != place_.round || s.phase != el::Phase::Running) return;
        const el::State next = el::finished(s, code, "node " + std::to_string(layout_.node_rank) + ": " + why);
        const std::string want = el::encode_state(next);
        const std::string now = backend.compare_and_swap(raw, want, next.version, ms(2000));
        if (now == want) return;
        raw = now;
      }
    } catch (const std::exception&) {
    }
  }

  // The job is over before this node's next round: the store's node lets the others read that
  // first (bounded), and every node says it has left its last round.
  void linger() {
    if (!monitor_) return;
    monitor_->finish(ms(2000));
    if (serve_) monitor_->wait_all_finished(ms(3000));
  }

  StopSignals& stops_;
  bool serve_ = false;
  std::optional<JobStore> store_;
  std::shared_ptr<mn::Presence> presence_;  // where this launcher serves the store: who is connected to it
  std::string host_;
  PortReservation ports_;
  proto::ClientOptions store_opts_;
  el::Self self_;
  el::Place place_;
  int64_t version_ = 0;
  std::map<int, Clock::time_point> quorum_seen_;
  mn::JobLayout layout_;
  mn::MonitorConfig monitor_cfg_;
  ms timeout_{0}, close_timeout_{0}, save_{0};
  Clock::time_point first_deadline_;
  std::unique_ptr<mn::JobMonitor> monitor_;
  std::unique_ptr<JoinWatcher> watcher_;
};

}  // namespace

std::unique_ptr<JobMode> make_elastic_job(const Plan& plan, StopSignals& stops) {
  return std::make_unique<ElasticJob>(plan, stops);
}

}  // namespace launch
