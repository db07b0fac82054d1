// A multi-node job, as a job mode (job_mode.h): this node's launcher meets the others in the
// store that node 0 serves on --master, gets its place in the job, and from then on fails
// together with them. The rendezvous, the failure records and the heartbeats are
// launcher/multinode's; multinode_job.cpp wires them into `launch` (store, ports, supervisor).
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "launcher/multinode/monitor.h"
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

std::string resolve_multinode_token(const std::optional<std::string>& token_file, const proto::EnvMap& env);

}  // namespace launch
