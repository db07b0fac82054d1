// Multi-node rendezvous through the store that node 0 serves: every node's launcher registers
// itself and receives its JobLayout. Thin I/O around compute_layout (layout.h).
#pragma once

#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

#include "launcher/multinode/layout.h"
#include "proto/client.h"

namespace launch::multinode {

// The rendezvous could not complete: timeout (the message names the nodes that did not
// arrive), a store that refused us (wrong token or job id), or a job that failed meanwhile.
class RendezvousError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// --elastic_timeout default: long enough for the nodes of a Slurm allocation or a batch of
// containers to start one after another, short enough not to burn an allocation for an hour.
inline constexpr std::chrono::seconds kDefaultRendezvousTimeout{600};

struct RendezvousConfig {
  proto::ClientOptions store;       // address (--master), job id, token (resolve_job_token)
  int nnodes = 1;                   // --nnodes
  // This node; an empty id and host name are filled in. The node that serves the store should
  // ask for rank 0 when the user gave --rank -1, so that node 0 is the --master host.
  NodeRegistration self;
  int generation = 0;               // 0, then +1 per restart (JobLayout::restart_count)
  std::chrono::milliseconds timeout = kDefaultRendezvousTimeout;  // --elastic_timeout
  std::vector<std::string> expected_hosts;  // optional (Slurm's hostlist): named when missing
};

// Registers this node under the generation's namespace, waits (bounded by cfg.timeout) until
// all nnodes have registered, and returns this node's layout. Every node computes the same
// node ranks from the same records. Throws RendezvousError (timeout, refusal, job failure) or
// LayoutError (duplicate/out-of-range --rank, too many nodes, mismatched --nnodes).
JobLayout rendezvous(const RendezvousConfig& cfg);

// A unique id for this launcher run: "hostname/pid/16 hex chars from getrandom".
std::string make_node_id();

}  // namespace launch::multinode
