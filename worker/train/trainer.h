// The data-parallel training loop, independent of the backend and of the communicator: a
// training session whose named parts run() strings together, each in a file of its own:
// trainer.cpp (set-up, the loop, stop), trainer_start.cpp (resume, the settings the ranks share,
// announce), trainer_step.cpp (one optimizer step), trainer_log.cpp, trainer_evaluate.cpp,
// trainer_save.cpp and trainer_report.cpp. ZeRO's partition and its rules: param_sharding.h.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <fstream>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "worker/comm/comm.h"
#include "worker/model/model.h"
#include "worker/core/ops.h"
#include "worker/data/batch_source.h"
#include "worker/train/checkpoint.h"
#include "worker/train/data.h"
#include "worker/train/evaluation.h"
#include "worker/train/lr_schedule.h"
#include "worker/train/grad_reducer.h"
#include "worker/train/loss_scaler.h"
#include "worker/train/metrics.h"
#include "worker/train/optimizer.h"
#include "worker/train/options.h"
#include "worker/train/report.h"
#include "worker/train/requests.h"
#include "worker/train/sampler.h"
#include "worker/train/param_sharding.h"
#include "worker/train/step_capture.h"
#include "worker/train/tensorboard.h"

namespace worker {

struct TrainResult {
  int64_t steps = 0;           // optimizer steps taken in this run
  double images_per_s = 0.0;   // all ranks together, first step excluded (0 if < 2 steps)
  bool checksums_agree = true;
  double best_top1 = -1.0;     // validation top-1 in percent (-1: not evaluated)
  double last_top1 = -1.0;
  int stop_signal = 0;         // the signal that stopped training early (after saving), else 0
};

// What tests set of a run that no option reaches (tests/worker/gpu/test_train_graph.cpp).
struct TestHooks {
  float loss_scale = 0.0f;                 // fp16: the first loss scale (0: GradScaler's 2^16)
  int64_t loss_scale_growth_interval = 0;  // fp16: clean steps before the scale grows (0: GradScaler's 2000)
};

// Trains as the options say, on the data `data_env` places; rank 0 writes the log to `out`.
// Throws on any failure (checkpoint, communication, backend).
TrainResult train(const TrainOptions& opt, const DataEnv& data_env, Ops& ops, Comm& comm, std::ostream& out,
                  const Requests& requests = {}, const TestHooks& hooks = {});

// Where a run stands in its data: the epoch and the step within it that comes next, counted from
// the sample where this run's layout began in that epoch (0 unless it resumed at another global
// batch mid-epoch: a segment, sampler.h).
struct Position {
  int64_t epoch = 0;
  int64_t batch = 0;
  int64_t start = 0;
};

// What one optimizer step measured.
struct StepStats {
  double loss = 0.0;          // mean over this rank's micro-batches (when asked for)
  double lr = 0.0;            // the learning rate it stepped with
  double data_wait_ms = 0.0;  // time the data source blocked this step
};

class TrainingSession {
 public:
  TrainingSession(const TrainOptions& opt, const DataEnv& data_env, Ops& ops, Comm& comm, std::ostream& out,
                  const Requests& requests, const TestHooks& hooks = {});
  TrainResult run();

 private:
  using Clock = std::chrono::steady_clock;
  static double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

  void resume();                             // --init, --resume or fresh; rank 0's state for all
  void check_same_run();                     // every rank's settings are rank 0's (agreement.h)
  // Resumed with another global batch (world size, batch, accumulation): the epoch continues from
  // the checkpoint's sample position; says what changed and what was kept.
  void continue_at_new_layout(const std::string& from, const TrainState& saved);
  void announce();                           // the start-up lines: model, data, recipe
  void announce_recipe();                    // the Recipe: line
  void open_metrics();                       // --metrics-file: new, or continued by a resumed run
  double run_time() const;                   // the metrics' `time`: seconds of this run (and those it resumes)
  StepStats step(bool want_loss);            // one optimizer step at the current position
  StepStats replayed_step(bool want_loss);   // the same as one captured graph (captured on its first call)
  void update(float lr);                     // the gradients averaged, unscaled (fp16), the optimizer's update
  void mirror_loss_scale();                  // fp16: the backend's loss scale state read into scaler_
  void count_step(const StepStats& s);       // step counters and the throughput window
  EvalCounts evaluate();                     // the whole validation split, summed over ranks
  void validate(int64_t epoch);              // evaluate, log, record, keep the best
  bool validation_due(int64_t epoch) const { return val_data_ && (epoch + 1) % opt_.eval_every == 0; }
  void log(const Position& at, const StepStats& s);
  void log_samples(int64_t epoch, size_t first_micro);  // --log-samples: every rank's indices of this step
  // Where the learning rate schedule stands: the epochs done in this run's steps, so that a run
  // resumed at another global batch keeps its place in the schedule (equals state_.step otherwise).
  int64_t schedule_step() const { return pos_.epoch * steps_per_epoch_ + pos_.start / global_batch_ + pos_.batch; }
  void save(const Position& next);           // rank 0: weights + training state to --save
  void lead_writes(const std::function<void()>& write);  // rank 0 writes, the others wait (untimed)
  void report();                             // throughput, memory, final save, checksums, summary
  TrainResult eval_only();                   // --eval-only
  TrainResult stop(int signal);              // save, say how to continue
  bool finished() const { return opt_.max_steps > 0 && state_.step >= opt_.max_steps; }
  void dump_first_batch(const std::vector<int64_t>& indices);

  const TrainOptions& opt_;
  Ops& ops_;
  Comm& comm_;
  std::ostream& out_;
  RequestAgreement requests_;  // stop / checkpoint signals, agreed by all ranks one step late
  const int rank_, world_;
  const bool lead_;
  // Where the start-up goes (the Start-up: line): the session's start, the data's end (the model's
  // start), the constructor's end, resume()'s end; first_step_s_ is the line's total once it is printed.
  Clock::time_point t_begin_ = Clock::now();
  // --cuda-graph: whether steps replay one captured graph. Before the data: `on` where the step
  // cannot be captured is refused before an image folder is scanned.
  const CapturePlan capture_;

  std::unique_ptr<BatchSource> train_data_;
  std::unique_ptr<BatchSource> val_data_;    // null: no validation
  Clock::time_point t_data_ = Clock::now();
  Clock::time_point t_built_{}, t_resumed_{};
  double first_step_s_ = -1.0;
  Sampler sampler_;
  int64_t steps_per_epoch_ = 0;
  int64_t global_batch_ = 0;
  Model model_;              // whole fp32 parameters unless sharding_ keeps the master weights sharded
  ParamSharding sharding_;   // ZeRO-1: what each rank keeps and steps, the buckets (param_sharding.h)
  Optimizer optimizer_;
  LossScaler scaler_;
  GradReducer reducer_;
  bool overlap_ = false;     // reduce buckets during backward (NCCL's own stream)
  bool captured_ = false;    // the graph exists: every step from here on replays it

  LrSchedule schedule_;
  int64_t total_steps_ = 0;  // what this run will reach: --epochs, or --max-steps when sooner
  // WORKER_TEST_STEP_DELAY_MS (tests only): a pause after each step, so that a test that waits
  // for a scheduler's signal (Slurm checks time limits every 30 s) trains few steps meanwhile.
  std::chrono::milliseconds test_step_delay_{0};

  TrainState state_;         // the run's settings and step count (what a checkpoint records)
  Position pos_;             // the next step's place in the data
  std::vector<std::vector<int64_t>> pass_order_;  // this rank's micro-batches of the current epoch
  std::vector<std::vector<int64_t>> next_order_;  // ... and of the next, announced to the source (follow)
  MetricsLog metrics_;       // --metrics-file (rank 0)
  EventWriter tensorboard_;  // --tensorboard (rank 0)
  int64_t best_epoch_ = -1, last_eval_step_ = -1;
  struct {
    int64_t step = -1, epoch = -1, batch = -1, start = -1;
    double best_top1 = -2.0;
  } saved_;  // what the last save() wrote: the same state is not written again
  std::ofstream samples_log_;  // --log-samples (rank 0)

  // Timing: the first step pays for warm-up, throughput counts from its end.
  TrainResult result_;
  Clock::time_point t_start_{}, t_first_{}, t_window_{};
  double time_offset_ = 0.0;   // a resumed run's times go on from the run it continues
  std::string resumed_from_;   // the checkpoint this run resumed from ("": none)
  int64_t window_steps_ = 0;
  double eval_seconds_ = 0.0;  // spent in validation passes
  double window_wait_ms_ = 0.0;
  Comm::Timing comm_prev_;
  bool comm_timed_ = false;
};

}  // namespace worker
