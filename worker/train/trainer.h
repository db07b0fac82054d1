// The data-parallel training loop, independent of the backend and of the communicator.
#pragma once

#include <atomic>
#include <cstdint>
#include <ostream>

#include "worker/core/comm.h"
#include "worker/core/ops.h"
#include "worker/data/batch_source.h"
#include "worker/train/env.h"
#include "worker/train/options.h"

namespace worker {

struct TrainResult {
  int64_t steps = 0;           // optimizer steps taken in this run
  double images_per_s = 0.0;   // all ranks together, first step excluded (0 if < 2 steps)
  bool checksums_agree = true;
};

// Trains as the options say; rank 0 writes the log to `out`. `save_request` (may be null) is
// polled at every step boundary: when set, rank 0 saves to --save and clears it (for a
// checkpoint signal). `data` (may be null: synthetic data from Ops::make_batch) reads the
// micro-batches of a real data set (worker/train/data_setup.h). Throws on any failure
// (checkpoint, communication, backend, data).
TrainResult train(const TrainOptions& opt, const WorkerEnv& env, Ops& ops, Comm& comm, std::ostream& out,
                  std::atomic<bool>* save_request = nullptr, BatchSource* data = nullptr);

}  // namespace worker
