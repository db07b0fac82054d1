// What the trainer says about a finished run, built from plain values: the trainer gathers the
// figures over the ranks (trainer_report.cpp), these functions only format them -- the
// throughput, loss-scaling, memory, optimizer-state and all-reduce lines, the final metrics
// record, the memory breakdown (WORKER_MEM_REPORT=1), the checksums' verdict and the summary line.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "worker/train/checksum.h"

namespace worker {

// printf-style formatting of one number ("%.6f").
std::string strf(const char* format, double v);
// Seconds as H:MM:SS.
std::string hms(double seconds);

// Where the time to the first step went (rank 0's), in seconds: from the process's start to the
// training session (the backend and the communicator are made in it), then the session's parts.
struct StartupFigures {
  double to_session = -1.0;  // -1: the process's start time is unknown (no /proc)
  double data = 0.0, model = 0.0, weights = 0.0, first_step = 0.0;
  std::vector<std::pair<const char*, double>> backend;  // Ops::startup_seconds()
  // From the process's start when it is known, else from the session's.
  double total() const { return std::max(to_session, 0.0) + data + model + weights + first_step; }
};
// The Start-up: line.
std::string startup_line(const StartupFigures& f);
// Seconds since this process started (/proc/self/stat against CLOCK_BOOTTIME, to the kernel's
// clock tick); -1 where that cannot be read.
double seconds_since_process_start();

// The figures of a run at its end, over all ranks.
struct RunFigures {
  int world = 1;
  int64_t steps = 0;           // optimizer steps of this run
  double images_per_s = 0.0;   // first step and validation excluded
  double total_s = 0.0;        // since the run started
  double eval_s = 0.0;         // in validation passes
  double time = 0.0;           // the metrics' time: this run's and those it resumes
  bool loss_scaling = false;   // fp16
  float loss_scale = 0.0f;
  int64_t skipped_steps = 0;   // fp16 steps skipped for inf/NaN gradients
  uint64_t peak_bytes = 0;          // rank 0's
  uint64_t peak_bytes_max_rank = 0;
  int64_t skipped_images = 0;       // unreadable images, all ranks
  bool zero = false;                // --zero 1
  int zero_option = 0;              // --zero as given
  uint64_t optimizer_bytes_max_rank = 0;
  uint64_t optimizer_bytes_unsharded = 0;  // what every rank would keep without ZeRO
  uint64_t fp32_weight_bytes = 0;          // rank 0's fp32 weights
  std::string recompute;                   // --recompute
  struct CommTime {
    long long steps = 0;
    double allreduce_ms = 0.0, exposed_ms = 0.0;  // summed over the steps
  };
  std::optional<CommTime> comm;  // where the communicator times its all-reduces
  double first_step_s = -1.0;    // StartupFigures::total() (-1: no step taken)
};

// Rank 0's lines: "Throughput: ...", the loss scaling, "Peak device memory: ...", under ZeRO
// "Optimizer state: ...", and the all-reduce time where it was measured.
void print_run_figures(std::ostream& out, const RunFigures& f);
// The metrics file's last record ({"final": true, ...}).
nlohmann::json final_record(const RunFigures& f);

// Where the device memory went: `items` (the model's shares, the backend's, the optimizer state),
// one line each; what no one claims of the `peak` (NCCL's gather buffer, ...) is "other". A
// backend item named "pool reserved..." is the pool's memory beyond the peak, shown apart.
void print_memory(std::ostream& out, const std::vector<std::pair<std::string, size_t>>& items, size_t peak);

// The ranks whose checksum is not `mine` ("1, 3"; empty when all agree), and rank 0's verdict line.
std::string differing_ranks(const std::vector<ParamChecksum>& all, const ParamChecksum& mine);
std::string checksum_verdict(int world, const std::string& differing);

// The run's last line.
struct RunSummary {
  int64_t steps = 0;
  double total_s = 0.0;
  double images_per_s = 0.0;
  double best_top1 = -1.0, last_top1 = -1.0;  // -1: not evaluated
  int64_t best_epoch = -1;
  std::string checkpoint;   // --save ("": none)
  std::string best_weights; // --save-best's file, when a best was kept ("": none)
  std::string tensorboard;  // the event file ("": none)
  std::optional<int64_t> skipped_images;  // image data: unreadable reads skipped (all ranks)
};
std::string summary_line(const RunSummary& s);

}  // namespace worker
