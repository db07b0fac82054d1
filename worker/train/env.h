// The worker's view of the launcher's environment: the contract's one parsed struct
// (proto/worker_env.h), under the names the trainer uses.
#pragma once

#include "proto/worker_env.h"

namespace worker {

using proto::EnvError;
using proto::EnvMap;
using proto::WorkerEnv;
using proto::process_env;
using proto::read_worker_env;

}  // namespace worker
