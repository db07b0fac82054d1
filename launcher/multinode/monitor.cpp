#include "launcher/multinode/monitor.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <set>
#include <system_error>

#include "launcher/multinode/keys.h"

namespace launch::multinode {
namespace {

using ms = std::chrono::milliseconds;
using Kind = proto::StoreError::Kind;

// The longest a parked WAIT for the failure record lasts before the thread looks at its stop
// flag and its heartbeat schedule again. A failure record still wakes it at once.
constexpr ms kWaitSlice{250};

std::string host_of(const std::string& address) {
  auto colon = address.rfind(':');
  std::string h = colon == std::string::npos ? address : address.substr(0, colon);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  return h;
}

// The store's own failure record inside a client error ("job failed while waiting for key
// 'K': RECORD"): the record alone is the root cause worth showing.
std::string store_record(const std::string& what) {
  const std::string lead = "job failed while waiting for ";
  auto end = what.find("': ");
  if (what.compare(0, lead.size(), lead) != 0 || end == std::string::npos) return what;
  return what.substr(end + 3);
}

std::string seconds_text(ms d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", double(d.count()) / 1000.0);
  return buf;
}

}  // namespace

// --- Lifetime ---

JobMonitor::JobMonitor(MonitorConfig cfg) : cfg_(std::move(cfg)) {
  efd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (efd_ < 0) throw std::system_error(errno, std::generic_category(), "eventfd for the job monitor");
  proto::ClientOptions o = cfg_.store;
  o.client_name = "node " + std::to_string(cfg_.layout.node_rank) + " supervisor";
  writer_ = std::make_unique<proto::Client>(o);
  thread_ = std::thread([this] { run(); });
}

JobMonitor::~JobMonitor() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  ::close(efd_);
}

std::optional<FailureRecord> JobMonitor::failure() const {
  std::lock_guard<std::mutex> lock(mu_);
  return failure_;
}

void JobMonitor::fire(const FailureRecord& f) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failure_) return;  // the root cause is the first one we learnt
    failure_ = f;
  }
  uint64_t one = 1;
  // Cannot fail short of a bad descriptor: the counter is far from overflow after one write.
  [[maybe_unused]] ssize_t n = ::write(efd_, &one, sizeof one);
}

// --- Failure records ---

FailureRecord JobMonitor::node_silent(int node_rank, ms silent) const {
  FailureRecord f;
  f.node_rank = node_rank;
  f.host = cfg_.layout.nodes.at(size_t(node_rank)).host;
  f.reason = "launcher stopped responding (no heartbeat for " + seconds_text(silent) + ")";
  return f;
}

FailureRecord JobMonitor::node_gone(int node_rank, ms gone_for, const std::string& evidence) const {
  FailureRecord f;
  f.node_rank = node_rank;
  f.host = cfg_.layout.nodes.at(size_t(node_rank)).host;
  f.reason = "launcher stopped responding (its connection to the store closed " + seconds_text(gone_for) +
             " ago and was not made again" + (evidence.empty() ? "" : "; " + evidence) + ")";
  return f;
}

FailureRecord JobMonitor::store_unreachable(const std::string& why) const {
  // The store lives in the launcher of the node that serves it: that launcher is gone. Named by
  // its rank, not by the store's address: nodes may share an address (two on one host).
  FailureRecord f;
  const auto& nodes = cfg_.layout.nodes;
  if (cfg_.store_node >= 0 && size_t(cfg_.store_node) < nodes.size()) {
    f.node_rank = cfg_.store_node;
    f.host = nodes[size_t(cfg_.store_node)].host;
  } else {
    f.host = host_of(cfg_.store.address);
  }
  f.reason = "launcher stopped responding: its store at " + cfg_.store.address + " is unreachable (" + why + ")";
  return f;
}

void JobMonitor::declare(proto::Client& client, FailureRecord f, ms timeout) {
  try {
    f = decode_failure(client.compare_set(failed_key(cfg_.layout.generation), "", encode_failure(f), timeout));
  } catch (const proto::StoreError&) {
    // The store is gone or slow: our own record is the best root cause we know.
  }
  fire(f);
}

int JobMonitor::node_of_rank(int rank) const {
  for (const auto& n : cfg_.layout.nodes)
    if (rank >= n.rank_offset && rank < n.rank_offset + n.nproc) return n.node_rank;
  return -1;
}

void JobMonitor::peer_lost(int rank, const std::string& what) {
  const JobLayout& L = cfg_.layout;
  const int node = node_of_rank(rank);
  if (node < 0 || node == L.node_rank || failure()) return;
  const std::string evidence = "rank " + std::to_string(rank) + " there was lost: " + what;
  if (node == cfg_.store_node) {
    // Its launcher is the store: alive, it answers at once, whatever its workers do. One
    // connection attempt: a refused one (its host is up, nobody listens) is the answer.
    proto::ClientOptions o = cfg_.store;
    o.client_name = "node " + std::to_string(L.node_rank) + " probe";
    o.connect_timeout = cfg_.probe_timeout;
    o.retry_connect = false;
    try {
      proto::Client(o).ping(cfg_.probe_timeout);
    } catch (const proto::StoreError& e) {
      FailureRecord f = store_unreachable("no answer to a PING within " + seconds_text(cfg_.probe_timeout) + ": " +
                                          e.what() + "; " + evidence);
      fire(f);  // nowhere to record it: the store is that launcher
    }
    return;
  }
  if (!cfg_.presence) return;  // the store's node will tell (presence), or the heartbeat
  std::lock_guard<std::mutex> lock(writer_mu_);
  if (auto since = cfg_.presence->gone_since(L.generation, node)) {
    const ms gone_for = std::chrono::duration_cast<ms>(Clock::now() - *since);
    declare(*writer_, node_gone(node, gone_for, evidence), cfg_.probe_timeout);
  }
}

void JobMonitor::node_lost(int node_rank, const std::string& why, ms timeout) {
  if (node_rank < 0 || size_t(node_rank) >= cfg_.layout.nodes.size() || failure()) return;
  FailureRecord f;
  f.node_rank = node_rank;
  f.host = cfg_.layout.nodes[size_t(node_rank)].host;
  f.reason = why;
  // The store's node: its launcher is the store, so there is nowhere to record it (a write would
  // wait out `timeout` on a store that is gone: 2 s more before the round re-forms).
  if (node_rank == cfg_.store_node) return fire(f);
  std::lock_guard<std::mutex> lock(writer_mu_);
  declare(*writer_, f, timeout);
}

FailureRecord JobMonitor::report_failure(const FailureRecord& f, ms timeout) {
  FailureRecord root = f;
  {
    std::lock_guard<std::mutex> lock(writer_mu_);
    try {
      // COMPARE_SET against "absent": the first node to fail names the root cause for all.
      std::string stored = writer_->compare_set(failed_key(cfg_.layout.generation), "", encode_failure(f), timeout);
      root = decode_failure(stored);
    } catch (const proto::StoreError&) {
      // The store is gone or slow: our own record is the best root cause we know.
    }
  }
  fire(root);
  return failure().value_or(root);
}

FailureRecord JobMonitor::report_worker_exit(int rank, int exit_code, int signal) {
  const auto& L = cfg_.layout;
  return report_failure(worker_failure(L.node_rank, L.nodes.at(size_t(L.node_rank)).host, rank, exit_code, signal));
}

void JobMonitor::finish(ms timeout) {
  std::lock_guard<std::mutex> lock(writer_mu_);
  if (finished_) return;
  try {
    writer_->set(done_key(cfg_.layout.generation, cfg_.layout.node_rank), "1", timeout);
  } catch (const proto::StoreError&) {
    // The others will see our heartbeat stop; nothing better to do on the way out.
  }
  // Only now may the thread end and its connection close: the store's node must find our done
  // key when it sees that (presence.h).
  finished_ = true;
}

std::vector<int> JobMonitor::wait_all_finished(ms timeout) {
  const int g = cfg_.layout.generation;
  // A node whose launcher is the root cause will never leave: not waited for.
  const auto f = failure();
  const int dead = f && f->rank < 0 && f->node_rank != cfg_.layout.node_rank ? f->node_rank : -1;
  std::vector<std::string> keys;
  std::vector<int> waited;
  for (const auto& n : cfg_.layout.nodes)
    if (n.node_rank != dead) {
      keys.push_back(done_key(g, n.node_rank));
      waited.push_back(n.node_rank);
    }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto left = [&] {
    auto d = std::chrono::duration_cast<ms>(deadline - std::chrono::steady_clock::now());
    return std::max(d, ms(1));
  };
  std::lock_guard<std::mutex> lock(writer_mu_);
  std::vector<int> running;
  try {
    writer_->wait(keys, timeout);
    return running;
  } catch (const proto::StoreError& e) {
    // JOB_FAILED: the store was failed (store::StoreServer::report_failure) and from then on answers
    // every request that would park at once, so the only way left to wait is to look again.
    // TIMEOUT: the loop below looks once, to name who is still there.
    if (e.kind() != Kind::JobFailed && e.kind() != Kind::Timeout) return waited;
  }
  for (;;) {
    running.clear();
    try {
      auto present = writer_->check(keys, std::max(left(), ms(1000)));  // CHECK never parks
      for (size_t i = 0; i < keys.size(); ++i)
        if (!present[i]) running.push_back(waited[i]);
    } catch (const proto::StoreError&) {
      return waited;
    }
    if (running.empty() || std::chrono::steady_clock::now() >= deadline) return running;
    std::this_thread::sleep_for(std::min(ms(50), left()));
  }
}

// --- The thread ---

void JobMonitor::run() {
  const JobLayout& L = cfg_.layout;
  const int g = L.generation;
  const ms period = cfg_.heartbeat_period;
  // A round of store calls must not outlast a heartbeat period, or we would beat too slowly.
  const ms call_timeout = std::max(ms(100), period);

  proto::ClientOptions o = cfg_.store;
  o.client_name = monitor_client_name(g, L.node_rank);  // the store's node watches this connection
  o.connect_timeout = call_timeout;
  proto::Client client(o);

  std::vector<int> others;
  std::vector<std::string> done_keys;
  for (const auto& n : L.nodes)
    if (n.node_rank != L.node_rank) {
      others.push_back(n.node_rank);
      done_keys.push_back(done_key(g, n.node_rank));
    }
  HeartbeatTracker beats(others, cfg_.heartbeat_timeout, Clock::now());
  std::set<int> done;
  auto last_ok = Clock::now();
  std::string last_error;
  auto next_beat = Clock::now();
  bool fired = false;
  bool left = false;  // our done key is set

  while (!stop_ && !finished_) {
    auto now = Clock::now();

    // --- Heartbeat round: bump ours, read the others' ---
    if (now >= next_beat) {
      bool fresh = false;  // this round read every counter
      try {
        client.add(heartbeat_key(g, L.node_rank), 1, call_timeout);
        std::vector<bool> present;
        if (!done_keys.empty()) present = client.check(done_keys, call_timeout);
        for (size_t i = 0; i < others.size(); ++i) {
          if (present[i]) {
            done.insert(others[i]);
            continue;
          }
          // ADD 0 reads a counter without blocking (an absent key reads as 0).
          beats.observe(others[i], client.add(heartbeat_key(g, others[i]), 0, call_timeout), Clock::now());
        }
        last_ok = Clock::now();
        fresh = true;
      } catch (const proto::StoreError& e) {
        last_error = e.what();
        if (e.kind() == Kind::JobFailed && !fired) {
          fire(decode_failure(store_record(e.what())));
          fired = true;
        }
      }
      now = Clock::now();
      next_beat = std::max(next_beat + period, now);

      if (!fired) {
        if (now - last_ok > cfg_.store_timeout.value_or(cfg_.heartbeat_timeout)) {
          fire(store_unreachable(last_error));
          fired = true;
        } else if (fresh) {
          // Only judged on counters read just now: when the store itself is slow or gone,
          // the others' old counters would blame a node that is not at fault.
          for (int r : beats.stale(now)) {
            if (done.count(r)) continue;
            declare(client, node_silent(r, beats.silent_for(r, now)), call_timeout);
            fired = true;
            break;
          }
        }
      }
    }

    // --- On the store's node: a launcher whose connection closed and stayed closed ---
    auto presence_due = Clock::time_point::max();
    if (!fired && cfg_.presence) {
      for (int r : others) {
        const auto since = cfg_.presence->gone_since(g, r);
        if (!since || done.count(r)) continue;
        if (Clock::now() < *since + cfg_.presence_grace) {
          presence_due = std::min(presence_due, *since + cfg_.presence_grace);
          continue;
        }
        try {  // it may have finished just before it went (finish() writes its done key first)
          if (client.check({done_key(g, r)}, call_timeout)[0]) {
            done.insert(r);
            continue;
          }
        } catch (const proto::StoreError&) {
        }
        declare(client, node_gone(r, std::chrono::duration_cast<ms>(Clock::now() - *since), ""), call_timeout);
        fired = true;
        break;
      }
    }

    // --- Until the next beat: parked in the store, waiting for a failure record ---
    if (!fired) {
      ms slice = std::min(kWaitSlice, std::chrono::duration_cast<ms>(next_beat - Clock::now()));
      if (presence_due != Clock::time_point::max())
        slice = std::min(slice, std::chrono::duration_cast<ms>(presence_due - Clock::now()) + ms(1));
      try {
        // GET parks until the record exists and returns it in the same reply: no window in
        // which the store could vanish between seeing the key and reading it.
        fire(decode_failure(client.get(failed_key(g), std::max(slice, ms(1)))));
        fired = true;
      } catch (const proto::StoreError& e) {
        if (e.kind() == Kind::JobFailed) {
          // The serving launcher's supervisor failed the whole store; our record may be there too.
          FailureRecord f = decode_failure(store_record(e.what()));
          try {
            if (client.check({failed_key(g)}, call_timeout)[0])
              f = decode_failure(client.get(failed_key(g), call_timeout));
          } catch (const proto::StoreError&) {
          }
          fire(f);
          fired = true;
        } else if (e.kind() != Kind::Timeout) {
          last_error = e.what();
        }
      }
    }
    if (fired && !left) {
      // Tell the node that serves the store we have the record (wait_all_finished), so that
      // it can close the store without leaving us to mistake its exit for the root cause.
      left = true;
      try {
        client.set(done_key(g, L.node_rank), "1", call_timeout);
      } catch (const proto::StoreError&) {
      }
    }
    if (fired) {
      // Failed already: keep beating (so the others do not also see us as dead while the job
      // shuts down or restarts) until stopped.
      std::unique_lock<std::mutex> lock(mu_);
      stop_cv_.wait_until(lock, next_beat, [this] { return stop_.load(); });
    }
  }
}

}  // namespace launch::multinode
