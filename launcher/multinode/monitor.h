// Failing together, the I/O half: a background thread per node that heartbeats through the
// store, watches the other nodes' heartbeats and waits (parked in the store, never polling) for
// the generation's failure record. The launcher's epoll supervisor adds event_fd() to its loop.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "launcher/multinode/failure.h"
#include "launcher/multinode/layout.h"
#include "launcher/multinode/presence.h"
#include "proto/client.h"

namespace launch::multinode {

inline constexpr std::chrono::milliseconds kDefaultHeartbeatPeriod{1000};
// A launcher silent this long is declared dead. Detection takes up to one period more, and
// the others must still stop their workers: 5 s keeps all of it within the 10 s the job
// promises, while a launcher that misses 5 beats in a row is not merely slow.
inline constexpr std::chrono::milliseconds kDefaultHeartbeatTimeout{5000};

// How long the node serving the store waits for a node whose connection closed to connect again
// before it declares that node's launcher stopped: a live monitor reconnects within its call.
inline constexpr std::chrono::milliseconds kDefaultPresenceGrace{500};
// How long a node whose worker lost a peer on the store's node waits for the store to answer a
// PING before that node's launcher is declared stopped (the store is its thread).
inline constexpr std::chrono::milliseconds kDefaultProbeTimeout{500};

struct MonitorConfig {
  proto::ClientOptions store;  // the store the rendezvous used (same address, job id, token)
  JobLayout layout;            // this node and the generation whose nodes are watched
  std::chrono::milliseconds heartbeat_period = kDefaultHeartbeatPeriod;
  std::chrono::milliseconds heartbeat_timeout = kDefaultHeartbeatTimeout;
  // The store unreachable this long: its node's launcher is taken for gone (unset: heartbeat_timeout).
  std::optional<std::chrono::milliseconds> store_timeout;
  int store_node = 0;  // the node whose launcher serves the store: node 0 (multinode_job.cpp)
  // On the node that serves the store: the connections it sees (presence.h). Null elsewhere.
  std::shared_ptr<const Presence> presence;
  std::chrono::milliseconds presence_grace = kDefaultPresenceGrace;
  std::chrono::milliseconds probe_timeout = kDefaultProbeTimeout;
};

class JobMonitor {
 public:
  // Starts the thread. Throws std::system_error if the eventfd or the thread cannot be made.
  explicit JobMonitor(MonitorConfig cfg);
  // Stops the thread (within ~0.3 s, or one store call's timeout when the store is unreachable).
  ~JobMonitor();
  JobMonitor(const JobMonitor&) = delete;
  JobMonitor& operator=(const JobMonitor&) = delete;

  // Readable (an eventfd counter, EFD_NONBLOCK) once failure() holds a value. Stays readable
  // until read; the monitor never writes it twice.
  int event_fd() const { return efd_; }
  // The job's root cause, once known: the first failure any node recorded for this generation,
  // a node whose heartbeat stopped, an unreachable store, or the store's own job failure.
  std::optional<FailureRecord> failure() const;

  // For the supervisor, when one of this node's workers failed: records it for the whole job
  // (first record wins) and returns the root cause -- another node's earlier failure, or this
  // one. Also fires event_fd(). If the store cannot be reached within `timeout`, returns `f`.
  FailureRecord report_failure(const FailureRecord& f,
                               std::chrono::milliseconds timeout = std::chrono::seconds(5));
  // Convenience for a worker exit on this node: rank is the global rank.
  FailureRecord report_worker_exit(int rank, int exit_code, int signal = 0);

  // For the supervisor, when one of this node's workers lost global rank `rank` of another node
  // (`what`: what it saw). That is evidence against the node's launcher, checked at once rather
  // than after the heartbeat timeout: on the store's node, whether that launcher's connection has
  // closed; for the store's node itself, whether its store answers a PING within probe_timeout.
  // When the evidence holds, its launcher is the root cause (recorded, event_fd() fires);
  // otherwise nothing happens and that node's own report, or its heartbeat, will tell. Bounded
  // by probe_timeout.
  void peer_lost(int rank, const std::string& what);

  // Evidence from outside the store that node `node_rank`'s launcher is gone -- under etcd, its
  // lease ended (this node's own, when it is ours) -- `why` naming it: recorded as the round's
  // root cause unless one is there already (first record wins), and event_fd() fires. Bounded
  // by `timeout` when the store is slow or gone; the store's node is not recorded (its launcher
  // is the store), only fired.
  void node_lost(int node_rank, const std::string& why, std::chrono::milliseconds timeout = std::chrono::seconds(2));

  // This node's workers all exited 0: tell the others not to count our silence as a failure
  // from now on, and stop heartbeating. Idempotent; bounded by `timeout`.
  void finish(std::chrono::milliseconds timeout = std::chrono::seconds(5));

  // For the node that serves the store, before it closes the store (after finish(), or after a
  // failure once its workers are stopped): waits until every node has left this generation --
  // finished, or learnt the failure record -- so that the store outlives the others' last
  // calls. A node whose launcher the failure record names as gone is not waited for. Returns
  // the node ranks still there when `timeout` passed (empty: all gone).
  std::vector<int> wait_all_finished(std::chrono::milliseconds timeout);

  const JobLayout& layout() const { return cfg_.layout; }

 private:
  void run();
  void fire(const FailureRecord& f);
  FailureRecord node_silent(int node_rank, std::chrono::milliseconds silent) const;
  FailureRecord node_gone(int node_rank, std::chrono::milliseconds gone_for, const std::string& evidence) const;
  FailureRecord store_unreachable(const std::string& why) const;
  // Records `f` as the generation's root cause unless one is there already; fires with the one
  // that is.
  void declare(proto::Client& client, FailureRecord f, std::chrono::milliseconds timeout);
  int node_of_rank(int rank) const;  // -1: no node has it

  MonitorConfig cfg_;
  int efd_ = -1;
  std::atomic<bool> stop_{false};
  std::atomic<bool> finished_{false};
  mutable std::mutex mu_;
  std::optional<FailureRecord> failure_;  // guarded by mu_
  std::mutex writer_mu_;                  // serialises report_failure/finish on writer_
  std::unique_ptr<proto::Client> writer_; // the supervisor's calls; the thread has its own
  std::condition_variable stop_cv_;       // with mu_: wakes the thread's heartbeat pause
  std::thread thread_;
};

}  // namespace launch::multinode
