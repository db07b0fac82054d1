// Where the nodes of a job meet: the store on --master (torchrun's --rdzv-endpoint, paddle's
// PADDLE_MASTER). Every launch resolves the master's name (retrying while it does not resolve
// yet: a Kubernetes service has no address until its pod runs), then tries to serve the store
// there; the one that wins the bind serves it, every other launch -- on other hosts, where the
// address is not theirs, and on the same host, where the port is taken -- joins it as a client.
// Shared by the multi-node modes (fixed --nnodes and elastic MIN:MAX).
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "launcher/multinode/presence.h"
#include "launcher/plan.h"
#include "launcher/stop_signals.h"
#include "launcher/store/job_store.h"

namespace launch {

struct MeetingPoint {
  std::string master;  // "ip:port" of the store, resolved (IPv6 in brackets)
  std::string master_ip;
  std::string host;    // this node's address: --host, else the one that routes to the master
  bool serves = false;  // this launch serves the store
  std::optional<JobStore> store;  // when it does ...
  std::shared_ptr<multinode::Presence> presence;  // ... and who is connected to it (presence.h)
};

// The address of the master's host `host` (a name is looked up again every second, one log line
// each time, until `deadline`; a stop signal ends the wait: StopRequested). std::runtime_error
// naming p.master_origin when it never resolved.
std::string resolve_master_host(const std::string& host, const Plan& p, StopSignals& stops,
                                std::chrono::steady_clock::time_point deadline);

// Resolves --master until `deadline` (one log line per retry; a stop signal ends the wait:
// StopRequested) and serves or joins the store as above. A launch with --rank 1 or more joins;
// --rdzv-conf is_host=1/0 forces serving/joining. Throws UsageError when the store cannot be
// served where it must be (is_host=1, or --rank 0 and the master's address is not this host's)
// and std::runtime_error when the name never resolved.
MeetingPoint meet_at_master(const Plan& p, StopSignals& stops, std::chrono::steady_clock::time_point deadline);

}  // namespace launch
