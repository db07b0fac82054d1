// A multi-node job, as a job mode (job_mode.h): this node's launcher meets the others in the
// store that node 0 serves on --master, gets its place in the job, and from then on fails
// together with them. The rendezvous, the failure records and the heartbeats are
// launcher/multinode's; multinode_job.cpp wires them into `launch` (store, ports, supervisor).
#pragma once

#include <optional>
#include <string>

#include "proto/worker_env.h"

namespace launch {

// The job's shared token: --token-file, else LAUNCH_STORE_TOKEN in `env`. UsageError (saying
// how to make one) when neither is there or the file is not private.
std::string resolve_multinode_token(const std::optional<std::string>& token_file, const proto::EnvMap& env);

}  // namespace launch
