// Failing together: the failure record every node reports, and the heartbeat bookkeeping that
// turns a silent node into one. Pure: no store, no clock of its own (callers pass `now`).
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace launch::multinode {

using Clock = std::chrono::steady_clock;

// The root cause of a job's failure, as written to the store and shown in every node's report.
struct FailureRecord {
  int node_rank = -1;   // -1: unknown (e.g. a record the store itself wrote)
  std::string host;
  int rank = -1;        // global rank of the failed worker; -1: the node's launcher itself
  int exit_code = 0;    // for a worker killed by a signal: exit_code_for_signal (exit_policy.h)
  int signal = 0;       // 0: exited normally
  std::string reason;   // free text when not a worker exit ("launcher stopped responding ...")

  // "node 1 (10.213.0.2): rank 5 exited with code 3" / "... killed by SIGSEGV (exit code 139)"
  std::string describe() const;
  bool operator==(const FailureRecord& o) const;
};

// A worker exit: exit code, or signal (its exit code then as exit_policy.h says).
FailureRecord worker_failure(int node_rank, const std::string& host, int rank, int exit_code,
                             int signal = 0);

std::string encode_failure(const FailureRecord& f);
// A record that is not ours (e.g. the store's own job-failure text) becomes `reason`.
FailureRecord decode_failure(const std::string& text);

// --- Heartbeats ---
// Tracks the heartbeat counters of the other nodes as read from the store. A node is stale when
// its counter has not changed for longer than `timeout`, measured on this node's clock only
// (no clock agreement between nodes is needed).
class HeartbeatTracker {
 public:
  HeartbeatTracker(std::vector<int> node_ranks, std::chrono::milliseconds timeout, Clock::time_point start);

  // The counter of `node_rank` as read at `now` (0 when the node has not beaten yet).
  void observe(int node_rank, long long counter, Clock::time_point now);
  // Node ranks whose counter has not moved for more than the timeout, lowest first.
  std::vector<int> stale(Clock::time_point now) const;
  // Time since `node_rank`'s counter last moved.
  std::chrono::milliseconds silent_for(int node_rank, Clock::time_point now) const;
  const std::vector<int>& node_ranks() const { return ranks_; }

 private:
  struct Seen {
    long long counter = 0;
    Clock::time_point changed;
  };
  std::vector<int> ranks_;
  std::vector<Seen> seen_;
  std::chrono::milliseconds timeout_;
  size_t index(int node_rank) const;
};

}  // namespace launch::multinode
