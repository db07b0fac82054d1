// A multi-node job as the launch flow sees it: this node's launcher meets the others in the
// store that node 0 serves on --master, gets its place in the job, and from then on fails
// together with them. The rendezvous, the failure records and the heartbeats are
// launcher/multinode's; this file only wires them into `launch` (store, ports, supervisor).
#pragma once

#include <signal.h>

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "launcher/devices.h"
#include "launcher/exit_policy.h"
#include "launcher/worker_env.h"

namespace launch {

struct MultinodeConfig {
  std::string master;  // "ip:port" (--master, or from Slurm)
  std::string host;    // this node's address for its endpoints ("": the one that routes to master)
  int nnodes = 2;
  int rank = -1;       // --rank; -1: arrival order (the node whose host is master's serves)
  std::string job_id;
  std::string token;
  std::chrono::milliseconds timeout{std::chrono::seconds(600)};  // --elastic_timeout
  std::vector<RankDevice> devices;   // this node's workers
  std::vector<std::string> expected_hosts;  // Slurm's hostlist, to name missing hosts
  int max_restart = 0;  // the same on every node: each restarts after the same failures
  // The stop signals (blocked by the caller). While this node waits for the others -- up to
  // `timeout`, minutes -- they are unblocked in the calling thread: no worker runs then, so their
  // default action (the launcher ends) is the right one, instead of ignoring Ctrl-C that long.
  sigset_t stop_signals;
};

class MultinodeJob {
 public:
  // Call with the stop signals blocked (the store's and the monitor's threads inherit the mask).
  // Throws UsageError (bad --rank, inconsistent nodes, no token) or std::runtime_error
  // (rendezvous timeout naming the nodes that did not arrive, store unreachable).
  static std::unique_ptr<MultinodeJob> join(const MultinodeConfig& cfg);
  virtual ~MultinodeJob() = default;

  virtual const JobSpec::Cluster& cluster() const = 0;
  virtual int node_rank() const = 0;
  virtual std::string host() const = 0;  // this node's address
  virtual std::string store_address() const = 0;
  virtual void release_sockets() = 0;
  // The monitor's eventfd: readable once the job failed anywhere.
  virtual int event_fd() const = 0;
  // The job's root cause once event_fd() fired: exit code to use, and "node 1 (...): rank 5 ...".
  virtual std::pair<int, std::string> failure() = 0;
  // One of this node's workers failed: tell every node (the first record wins).
  virtual void report_worker_failure(int global_rank, const Termination& t) = 0;
  // This generation is over here (success or not): tell the others; node 0 keeps its store up
  // until they have left it (bounded), so their last calls are answered.
  virtual void finish(bool success) = 0;
  // --max_restart: meet again as generation `generation` (the store and this node's ports are
  // kept; node ranks may change with --rank -1). A new monitor: event_fd() changes.
  virtual void restart(int generation) = 0;
};

// The local IPv4 address the kernel would use to reach `ip` (UDP connect, nothing sent).
std::string route_source_address(const std::string& ip);
// `host` as an IPv4 address (getaddrinfo); throws UsageError naming it.
std::string resolve_ipv4(const std::string& host);
// The job's shared token: --token-file, else LAUNCH_STORE_TOKEN in `env`. UsageError (saying
// how to make one) when neither is there or the file is not private.
std::string resolve_multinode_token(const std::optional<std::string>& token_file, const EnvMap& env);

}  // namespace launch
