// The training session's set-up and its loop (trainer.h); its named steps are in trainer_start.cpp
// (resume, announce), trainer_step.cpp, trainer_log.cpp, trainer_evaluate.cpp, trainer_save.cpp
// and trainer_report.cpp.
#include "worker/train/trainer.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <thread>

#include "worker/core/knobs.h"

namespace worker {

namespace {

std::unique_ptr<BatchSource> train_source(const TrainOptions& opt, const DataEnv& env, Ops& ops) {
  std::unique_ptr<BatchSource> s = make_batch_source(opt, env, Split::Train, ops);
  if (!s) throw std::logic_error("make_batch_source: no training data");
  return s;
}

SamplerConfig sampler_config(const TrainOptions& opt, const BatchSource& data, int world) {
  return {data.info().size, world, opt.accum_steps, opt.batch_size, opt.seed};
}

// Checked before the model is built: a data set too small for one step is a usage error (but
// for --eval-only, which trains nothing).
int64_t checked_steps_per_epoch(const Sampler& sampler, const TrainOptions& opt, int world, int64_t size) {
  if (sampler.steps_per_epoch() > 0 || opt.eval_only) return sampler.steps_per_epoch();
  const std::string data = opt.data == DataSourceKind::Images
                               ? "the training split's " + std::to_string(size) + " images are too few"
                               : "--num-samples " + std::to_string(opt.num_samples) + " is too small";
  throw UsageError(data + ": split over " +
                   std::to_string(world) + " rank(s) x " + std::to_string(opt.accum_steps) +
                   " micro-batch(es), each gets " + std::to_string(sampler.shard_length()) +
                   " samples per epoch, fewer than --batch-size " + std::to_string(opt.batch_size));
}

ModelConfig model_config(const TrainOptions& opt, const BatchSource& data, bool whole_params) {
  ModelConfig mc;
  mc.whole_params = whole_params;
  mc.label_smoothing = float(opt.label_smoothing);
  mc.depth = opt.depth;
  mc.width = opt.width;
  mc.num_classes = data.info().num_classes;
  mc.image_size = opt.image_size;
  mc.stem = opt.stem;
  mc.batch = opt.batch_size;
  mc.recompute = opt.recompute;
  return mc;
}

OptimizerConfig optimizer_config(const TrainOptions& opt) {
  OptimizerConfig c;
  c.kind = opt.optimizer;
  c.momentum = float(opt.momentum);
  c.weight_decay = float(opt.weight_decay);
  c.nesterov = opt.nesterov;
  return c;
}

// The learning rate rule: --lr as given, or (--lr-base-batch N) scaled linearly to the global
// batch, lr x global / N (Goyal et al.; NVIDIA's recipe gives 0.256 per 256 images).
LrSchedule lr_schedule(const TrainOptions& opt, int64_t global_batch, int64_t steps_per_epoch) {
  LrSchedule s;
  s.kind = opt.lr_schedule;
  s.base_lr = opt.lr_base_batch > 0 ? opt.lr * double(global_batch) / double(opt.lr_base_batch) : opt.lr;
  s.steps_per_epoch = steps_per_epoch;
  s.total_steps = int64_t(opt.epochs) * steps_per_epoch;
  s.warmup_steps = std::llround(opt.warmup_epochs * double(steps_per_epoch));
  s.milestones = opt.lr_steps;
  s.gamma = opt.lr_gamma;
  return s;
}

// --bucket-mb in fp32 elements (at least one).
size_t bucket_floats(const TrainOptions& opt) {
  return std::max<size_t>(1, size_t(opt.bucket_mb * double(1 << 20) / sizeof(float)));
}

}  // namespace

// --- Set-up: data, sampler, model, optimizer (nothing is allocated in the loop)

TrainingSession::TrainingSession(const TrainOptions& opt, const DataEnv& data_env, Ops& ops, Comm& comm,
                                 std::ostream& out, const Requests& requests, const TestHooks& hooks)
    : opt_(opt), ops_(ops), comm_(comm), out_(out), requests_(requests, comm), rank_(comm.rank()),
      world_(comm.size()), lead_(rank_ == 0),
      capture_(plan_step_capture(opt.cuda_graph, {ops.step_capture_unsupported(), world_, opt.accum_steps})),
      train_data_(train_source(opt, data_env, ops)),
      val_data_(make_batch_source(opt, data_env, Split::Val, ops)),
      sampler_(sampler_config(opt, *train_data_, world_)), steps_per_epoch_(checked_steps_per_epoch(sampler_, opt, world_, train_data_->info().size)),
      global_batch_(int64_t(world_) * opt.batch_size * opt.accum_steps),
      model_(model_config(opt, *train_data_,
                          ParamSharding::whole_params(ParamSharding::decide(opt.zero, world_, ops.keeps_working_copy()))),
             ops, opt.seed),  // resume()'s init draws with this seed: drawn while the backend plans
      sharding_(opt.zero, bucket_floats(opt), model_, ops, comm),
      optimizer_(optimizer_config(opt), ops, model_.num_params(),
                 opt.no_wd_on_bn_bias ? decay_mask_without_bn_and_bias(model_) : std::vector<uint8_t>{},
                 sharding_.optimizer_ranges()),
      reducer_(comm, model_.grads(), sharding_.layout(), sharding_.reduction()) {
  if (!val_data_ && (opt.eval_only || opt.save_best)) {
    throw UsageError(std::string(opt.eval_only ? "--eval-only" : "--save-best") + " needs validation data: " +
                     missing_validation(opt));
  }
  schedule_ = lr_schedule(opt, global_batch_, steps_per_epoch_);
  test_step_delay_ = process_knobs().test_step_delay;
  total_steps_ = int64_t(opt.epochs) * steps_per_epoch_;
  if (opt.max_steps > 0) total_steps_ = std::min(total_steps_, opt.max_steps);
  // fp16 needs loss scaling (GradScaler's semantics); bf16 and fp32 do not. The backend keeps its
  // state from resume() on.
  scaler_.enabled = ops.compute_dtype() == DType::F16;
  if (hooks.loss_scale > 0.0f) scaler_.scale = hooks.loss_scale;
  if (hooks.loss_scale_growth_interval > 0) scaler_.growth_interval = hooks.loss_scale_growth_interval;
  sharding_.bind_backend();  // after the optimizer's state: the backend's memory is carved in this order
  // Gradient all-reduce during backward only where the communicator overlaps with compute.
  overlap_ = world_ > 1 && comm.overlaps_compute();
  state_.seed = opt.seed;
  state_.optimizer = opt.optimizer;
  state_.data = data_source_name(opt);
  state_.num_samples = train_data_->info().size;
  state_.global_batch = global_batch_;
  state_.world = world_;
  state_.replicas = int64_t(world_) * opt.accum_steps;
  t_built_ = Clock::now();
}

// --- The run: llm.c's main loop, in named steps

TrainResult TrainingSession::run() {
  if (lead_) {
    tensorboard_.open(opt_.tensorboard);
    if (!opt_.log_samples.empty()) {
      ensure_parent_dir(opt_.log_samples);
      samples_log_.open(opt_.log_samples, std::ios::trunc);
      if (!samples_log_) throw std::runtime_error("--log-samples: cannot write '" + opt_.log_samples + "'");
    }
  }
  resume();
  t_resumed_ = Clock::now();
  open_metrics();
  announce();
  if (opt_.eval_only) return eval_only();
  comm_timed_ = comm_.timing(&comm_prev_);
  t_start_ = Clock::now();
  for (int64_t epoch = pos_.epoch; epoch < opt_.epochs && !finished(); ++epoch) {
    const bool resumed = epoch == pos_.epoch;
    const int64_t first = resumed ? pos_.batch : 0, start = resumed ? pos_.start : 0;
    const int64_t steps = sampler_.steps_from(start);
    // (next_order_: this epoch's, announced to the source as the last one began)
    pass_order_ = next_order_.empty() ? sampler_.epoch_order(epoch, rank_, first, start) : std::move(next_order_);
    next_order_.clear();
    train_data_->start(epoch, pass_order_);
    // The next epoch's order, so that the source reads its first batches while this one ends: where
    // this epoch is read to its end (a run whose --max-steps ends in it reads nothing after it).
    if (epoch + 1 < opt_.epochs && (opt_.max_steps == 0 || state_.step + (steps - first) < opt_.max_steps)) {
      next_order_ = sampler_.epoch_order(epoch + 1, rank_, 0, 0);
      train_data_->follow(epoch + 1, next_order_);
    }
    for (int64_t b = first; b < steps && !finished(); ++b) {
      const int64_t shown = start / global_batch_ + b;  // the step's place in the epoch, in this run's steps
      const bool log_now = shown % opt_.log_every == 0;
      const StepStats s = step(log_now);
      if (test_step_delay_.count() > 0) std::this_thread::sleep_for(test_step_delay_);
      if (!opt_.log_samples.empty()) log_samples(epoch, size_t(b - first) * size_t(opt_.accum_steps));
      pos_ = b + 1 < steps ? Position{epoch, b + 1, start} : Position{epoch + 1, 0, 0};
      if (log_now) log({epoch, shown}, s);
      const Verdict asked = requests_.at_boundary();  // what the ranks had received a step ago
      // An epoch's validation comes before its last step's save, so that the checkpoint holds the
      // best top-1 so far (resumed from it, a worse epoch would take the best weights' place). A
      // stop leaves without it: it must be quick (launch's --grace).
      if (pos_.batch == 0 && !asked.stop_signal && validation_due(epoch)) validate(epoch);
      const bool scheduled = opt_.save_every > 0 && state_.step % opt_.save_every == 0;
      if (scheduled || asked.save) save(pos_);
      // Said whenever the checkpoint signal asked for it, also when the schedule saves at that step:
      // whoever sent the signal (launch's re-forming job, Slurm) waits for this line.
      if (lead_ && asked.save) {
        out_ << "Saved " << opt_.save << " at step " << state_.step << " (checkpoint signal)" << std::endl;
      }
      if (asked.stop_signal) return stop(asked.stop_signal);
    }
  }
  // A stop asked for in the last step; a save asked for then is the final save's.
  if (const Verdict asked = requests_.drain(); asked.stop_signal) return stop(asked.stop_signal);
  if (val_data_ && last_eval_step_ != state_.step && result_.steps > 0) validate(pos_.batch ? pos_.epoch : pos_.epoch - 1);
  report();
  return result_;
}

// --- Stop (SIGINT, SIGTERM with --save): every rank stops at the same step boundary, agreed by
// requests_ (worker/train/requests.h), and leaves once rank 0's checkpoint is written.

TrainResult TrainingSession::stop(int signal) {
  save(pos_);
  result_.stop_signal = signal;
  if (lead_) {
    out_ << "Stopped by signal " << signal << " at step " << state_.step << ": saved " << opt_.save
         << " (training state " << train_state_path(opt_.save) << "); continue with --resume " << opt_.save
         << std::endl;
  }
  return result_;
}

TrainResult train(const TrainOptions& opt, const DataEnv& data_env, Ops& ops, Comm& comm, std::ostream& out,
                  const Requests& requests, const TestHooks& hooks) {
  TrainingSession session(opt, data_env, ops, comm, out, requests, hooks);
  return session.run();
}

}  // namespace worker
