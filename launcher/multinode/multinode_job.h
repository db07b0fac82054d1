// A multi-node job, as a job mode (job_mode.h): this node's launcher meets the others in the
// store that node 0 serves on --master, gets its place in the job, and from then on fails
// together with them. The rendezvous, the failure records and the heartbeats are
// launcher/multinode's; multinode_job.cpp wires them into `launch` (store, ports, supervisor).
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>

#include "launcher/multinode/monitor.h"
#include "launcher/plan.h"
#include "launcher/ports.h"
#include "launcher/supervisor.h"
#include "launcher/options.h"
#include "proto/worker_env.h"

namespace launch {

// The job's shared token: --token-file, else LAUNCH_STORE_TOKEN in `env`. UsageError (saying
// how to make one) when neither is there or the file is not private.
// torchrun's --rdzv-conf timings for the heartbeat monitor (monitor.h's defaults where unset),
// and how long a worker's lost peer on another node waits for that node's report.
multinode::MonitorConfig monitor_config(const RdzvConf& conf);
std::chrono::milliseconds remote_wait(const multinode::MonitorConfig& mc);
std::chrono::milliseconds seconds_or(const std::optional<double>& s, std::chrono::milliseconds fallback);

// --- What both multi-node modes (fixed --nnodes, elastic MIN:MAX) share ---
// This node's registration: its address, its devices, one endpoint per worker and the
// framework's master port from `ports` (n + 1 of them, reserved on `host`).
multinode::NodeRegistration local_registration(const Plan& p, const std::string& host, const PortReservation& ports,
                                               bool serves_store);
// Where this node's workers sit, from the rendezvous' layout.
RankLayout rank_layout(const multinode::JobLayout& l, const std::string& store_token);
// The node rank of the node whose launcher serves the store (the monitors' store_node).
int store_node(const multinode::JobLayout& l);
// "this is node 1 of 3, global ranks 2..3 of 6"
std::string placement(const multinode::JobLayout& l);
// The supervisor's hooks into the heartbeat monitor: a worker's failure recorded for the whole
// job, another node's failure stopping this one. `published` also sees every root cause (the
// store's node records it in its store too).
void install_monitor(SupervisorConfig& cfg, multinode::JobMonitor& monitor, const multinode::MonitorConfig& mc,
                     std::function<void(const multinode::FailureRecord&)> published = {});

std::string resolve_multinode_token(const std::optional<std::string>& token_file, const proto::EnvMap& env);

}  // namespace launch
