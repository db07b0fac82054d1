#include "worker/train/trainer.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "worker/train/agreement.h"
#include "worker/train/architecture.h"
#include "worker/train/recipes.h"
#include "worker/train/report.h"

namespace worker {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::string(v) != "0";
}

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

std::string hms(double seconds) {
  const int64_t s = std::llround(std::max(seconds, 0.0));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", (long long)(s / 3600), (long long)(s / 60 % 60),
                (long long)(s % 60));
  return buf;
}


}  // namespace

// --- Set-up: data, sampler, model, optimizer (nothing is allocated in the loop)

TrainingSession::TrainingSession(const TrainOptions& opt, const DataEnv& data_env, Ops& ops, Comm& comm,
                                 std::ostream& out, const Requests& requests)
    : opt_(opt), ops_(ops), comm_(comm), out_(out), requests_(requests, comm), rank_(comm.rank()),
      world_(comm.size()), lead_(rank_ == 0),
      // fp16 is the dtype with loss scaling (scaler_.enabled below).
      capture_(plan_step_capture(opt.cuda_graph, {ops.step_capture_unsupported(), world_,
                                                  ops.compute_dtype() == DType::F16, opt.accum_steps})),
      train_data_(train_source(opt, data_env, ops)),
      val_data_(make_batch_source(opt, data_env, Split::Val, ops)),
      sampler_(sampler_config(opt, *train_data_, world_)), steps_per_epoch_(checked_steps_per_epoch(sampler_, opt, world_, train_data_->info().size)),
      global_batch_(int64_t(world_) * opt.batch_size * opt.accum_steps),
      model_(model_config(opt, *train_data_,
                          ParamSharding::whole_params(ParamSharding::decide(opt.zero, world_, ops.keeps_working_copy()))),
             ops),
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
  if (const char* d = std::getenv("WORKER_TEST_STEP_DELAY_MS"); d && *d) test_step_delay_ = std::chrono::milliseconds(std::atoll(d));
  total_steps_ = int64_t(opt.epochs) * steps_per_epoch_;
  if (opt.max_steps > 0) total_steps_ = std::min(total_steps_, opt.max_steps);
  // fp16 needs loss scaling (GradScaler's semantics); bf16 and fp32 do not.
  scaler_.enabled = ops.compute_dtype() == DType::F16;
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
  open_metrics();
  announce();
  if (opt_.eval_only) return eval_only();
  comm_timed_ = comm_.timing(&comm_prev_);
  t_start_ = Clock::now();
  for (int64_t epoch = pos_.epoch; epoch < opt_.epochs && !finished(); ++epoch) {
    const bool resumed = epoch == pos_.epoch;
    const int64_t first = resumed ? pos_.batch : 0, start = resumed ? pos_.start : 0;
    const int64_t steps = sampler_.steps_from(start);
    pass_order_ = sampler_.epoch_order(epoch, rank_, first, start);
    train_data_->start(epoch, pass_order_);
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
      if (lead_ && asked.save && !scheduled) {
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

// --- One optimizer step

StepStats TrainingSession::step(bool want_loss) {
  const size_t np = model_.num_params(), nb = model_.num_buffers();
  // DDP broadcasts buffers from rank 0 before every forward: running statistics agree.
  if (world_ > 1) comm_.broadcast(model_.buffers(), nb * sizeof(float), 0);
  comm_.wait();
  if (capture_.capture && (captured_ || capture_due(result_.steps, ops_.still_tuning()))) return replayed_step(want_loss);
  sharding_.zero_grads();
  StepStats s;
  double loss_sum = 0.0;
  for (int k = 0; k < opt_.accum_steps; ++k) {
    double wait_ms = 0.0;
    train_data_->next(model_.input(), model_.labels(), &wait_ms);
    s.data_wait_ms += wait_ms;
    if (result_.steps == 0 && k == 0) dump_first_batch(pass_order_.front());
    if (overlap_ && k + 1 == opt_.accum_steps) {  // the last micro-batch's backward carries the all-reduce
      reducer_.begin();
      model_.on_grads_ready = [this](size_t gb, size_t ge) { reducer_.ready(gb, ge); };
    }
    model_.forward_backward(scaler_.multiplier() / float(opt_.accum_steps));
    model_.on_grads_ready = nullptr;
    if (want_loss) loss_sum += model_.last_loss();
  }
  s.loss = loss_sum / opt_.accum_steps;
  if (world_ > 1) {
    if (!overlap_) {  // the ring is synchronous: the same buckets, in the same order, after backward
      reducer_.begin();
      reducer_.ready(0, np);
    }
    reducer_.finish();
  }
  // Average over ranks and undo the loss scale in one pass.
  if (world_ > 1 || scaler_.enabled) ops_.scale_grads(1.0f / (float(world_) * scaler_.multiplier()));
  s.lr = schedule_.lr(schedule_step());
  if (scaler_.update(!scaler_.enabled || sharding_.grads_finite_everywhere()))
    sharding_.update(optimizer_, float(s.lr));
  else
    sharding_.discard_grads();
  count_step(s);
  return s;
}

// One step as a captured graph (step_capture.h says when): the batch is filled before the replay
// (its sample indices change), the loss read after it; the graph holds the rest of step() for
// one rank, one micro-batch and no loss scaling, and its optimizer reads lr from device memory.
StepStats TrainingSession::replayed_step(bool want_loss) {
  StepStats s;
  train_data_->next(model_.input(), model_.labels(), &s.data_wait_ms);
  s.lr = schedule_.lr(schedule_step());
  if (captured_) {
    ops_.replay_step(optimizer_.next_values(float(s.lr)));
    // The host side of what the graph holds: the counts forward_backward and step() keep.
    model_.count_replayed_forward();
    optimizer_.count_replayed_step();
  } else {
    ops_.capture_step([&] {  // runs this step once, as the replays will
      sharding_.zero_grads();
      model_.forward_backward(1.0f);
      sharding_.update(optimizer_, float(s.lr));
    });
    captured_ = true;
    if (lead_) {
      const CaptureInfo c = ops_.captured();
      out_ << "Step " << state_.step << ": captured as one CUDA graph (" << c.kernels << " kernels, " << c.nodes
           << " nodes), replayed from now on" << std::endl;
    }
  }
  if (want_loss) s.loss = model_.last_loss();
  count_step(s);
  return s;
}

void TrainingSession::count_step(const StepStats& s) {
  ++state_.step;
  ++result_.steps;
  ++window_steps_;
  window_wait_ms_ += s.data_wait_ms;
  if (result_.steps == 1) {  // the first step pays for warm-up: throughput starts after it
    ops_.synchronize();
    t_first_ = t_window_ = Clock::now();
    window_steps_ = 0;
    window_wait_ms_ = 0.0;
  }
}

void TrainingSession::dump_first_batch(const std::vector<int64_t>& indices) {
  if (lead_ && !opt_.dump_batch.empty()) dump_batch(opt_.dump_batch, ops_, model_, indices);
}

// --- Start: weights and training state

void TrainingSession::resume() {
  model_.init(opt_.seed);
  const std::string from = resume_source(opt_.resume, opt_.save);
  if (!opt_.init.empty()) {
    model_.set_state(load_weights(opt_.init, model_));
  } else if (!from.empty()) {
    ModelState ms;
    TrainState saved;
    load_checkpoint(from, model_, &ms, &saved);
    check_resume_compatible(from, saved, state_);
    model_.set_state(ms);
    optimizer_.set_state(saved.optimizer_state, saved.step - saved.skipped_steps);
    state_.step = saved.step;
    if (scaler_.enabled && saved.loss_scale > 0.0f) {
      scaler_.scale = saved.loss_scale;
      scaler_.growth_tracker = saved.loss_scale_growth_tracker;
    }
    scaler_.skipped = saved.skipped_steps;
    state_.best_top1 = saved.best_top1;
    pos_ = {saved.epoch, saved.batch, saved.segment_start};
    resumed_from_ = from;
    // A checkpoint of an older train_resnet records no layout: check_resume_compatible let it
    // through only at its own global batch.
    const bool same_layout = saved.replicas == 0 || (saved.replicas == state_.replicas && saved.global_batch == global_batch_);
    if (same_layout) {
      if (lead_) {
        out_ << "Resuming from " << from << " at step " << state_.step << " (epoch " << pos_.epoch << ", batch "
             << pos_.batch << ")" << std::endl;
      }
    } else {
      continue_at_new_layout(from, saved);
    }
    // The steps this run will take from here, in its own layout.
    const int64_t left = pos_.epoch >= opt_.epochs ? 0
                                                   : sampler_.steps_from(pos_.start) - pos_.batch +
                                                         (opt_.epochs - pos_.epoch - 1) * steps_per_epoch_;
    total_steps_ = state_.step + left;
    if (opt_.max_steps > 0) total_steps_ = std::min(total_steps_, opt_.max_steps);
  }
  sharding_.weights_loaded();
  check_same_run();  // the first collective: before it, nothing another rank does depends on this one
  // Every rank starts from rank 0's weights and buffers (as DDP does at construction).
  if (world_ > 1) {
    comm_.broadcast(sharding_.whole_weights(), model_.num_params() * sizeof(float), 0);
    comm_.broadcast(model_.buffers(), model_.num_buffers() * sizeof(float), 0);
    comm_.wait();
    sharding_.take_whole_weights();
  }
}

void TrainingSession::continue_at_new_layout(const std::string& from, const TrainState& saved) {
  const int64_t at = saved.segment_start + saved.batch * saved.global_batch;  // the epoch's samples read
  const int64_t n = state_.num_samples;
  pos_ = {saved.epoch, 0, at};
  const int64_t left = sampler_.steps_from(at);
  if (left == 0) pos_ = {saved.epoch + 1, 0, 0};  // no whole batch of the new size left in it
  if (!lead_) return;
  out_ << "Resuming from " << from << " at step " << state_.step << " on " << world_ << " rank(s) x batch "
       << opt_.batch_size << " x " << opt_.accum_steps << ", saved on " << saved.world << " rank(s): global batch "
       << global_batch_ << " (was " << saved.global_batch << "); kept the weights, the optimizer state ("
       << (sharding_.zero() ? "ZeRO-1: re-partitioned over " + std::to_string(world_) + " ranks" : std::string("whole on every rank"))
       << "), the step count and the data position: ";
  if (left > 0) {
    out_ << "epoch " << saved.epoch << " continues at its sample " << at << " of " << n << ", " << left
         << " step(s) left in it";
    if (at + left * global_batch_ < n) out_ << " (its last " << n - at - left * global_batch_ << " sample(s) dropped)";
  } else {
    out_ << "epoch " << saved.epoch << " had " << n - at << " sample(s) left, fewer than a batch: epoch "
         << saved.epoch + 1 << " starts";
  }
  out_ << "; lr " << schedule_.base_lr;
  if (opt_.lr_base_batch > 0) {
    out_ << " (--lr " << opt_.lr << " x " << global_batch_ << " / " << opt_.lr_base_batch << ", for the new global batch)";
  } else {
    out_ << " (--lr as given: --lr-base-batch N scales it to the global batch)";
  }
  out_ << std::endl;
}

void TrainingSession::check_same_run() {
  RunFacts f;
  f.precision = ops_.compute_dtype();
  f.train_samples = train_data_->info().size;
  f.val_samples = val_data_ ? val_data_->info().size : 0;
  f.num_classes = model_.config().num_classes;
  f.num_params = model_.num_params();
  f.resumed_step = state_.step;
  f.resumed_epoch = pos_.epoch;
  f.resumed_batch = pos_.batch;
  f.resumed_start = pos_.start;
  check_settings_agree(shared_settings(opt_, f), comm_);
}

// --metrics-file: a resumed run appends to the file of the run it continues, after a record that
// marks where it resumed, and its times go on from the last record up to that step.
void TrainingSession::open_metrics() {
  if (!lead_) return;
  if (resumed_from_.empty()) {
    metrics_.open(opt_.metrics_file);
    return;
  }
  time_offset_ = metrics_.open(opt_.metrics_file, state_.step);
  metrics_.write({{"resume", true}, {"from", resumed_from_}, {"step", state_.step}, {"epoch", pos_.epoch},
                  {"batch", pos_.batch}, {"time", time_offset_}});
}

double TrainingSession::run_time() const {
  return time_offset_ + std::chrono::duration<double>(Clock::now() - t_start_).count();
}

void TrainingSession::announce() {
  if (!lead_) return;
  out_ << "train_resnet: ResNet-" << opt_.depth << " (width " << opt_.width << ", "
       << (opt_.stem == Stem::Cifar ? "cifar stem, " : "") << model_.config().num_classes << " classes, "
       << opt_.image_size << "x" << opt_.image_size << ", " << model_.num_params() << " parameters) on "
       << ops_.describe() << "; " << world_ << " rank(s) x batch " << opt_.batch_size;
  // --eval-only trains nothing: no training data, transform, optimizer or schedule to show.
  if (!opt_.eval_only) {
    out_ << " x " << opt_.accum_steps << " micro-batch(es), " << steps_per_epoch_ << " steps per epoch, "
         << to_string(opt_.optimizer) << " lr " << opt_.lr;
  }
  out_ << std::endl;
  if (!opt_.eval_only) out_ << "Data: " << train_data_->describe() << std::endl;
  if (val_data_) {
    out_ << "Validation: " << val_data_->describe();
    if (!opt_.eval_only) out_ << "; every " << opt_.eval_every << " epoch(s) and at the end";
    out_ << std::endl;
  } else {
    out_ << "Validation: none (" << missing_validation(opt_) << ")" << std::endl;
  }
  if (opt_.eval_only) return;
  announce_recipe();
  if (opt_.recompute != Recompute::None || sharding_.zero()) {
    out_ << "Memory: recompute " << to_string(opt_.recompute);
    if (sharding_.zero()) {
      out_ << ", ZeRO-1 over " << world_ << " rank(s): optimizer state " << strf("%.1f MB", double(optimizer_.state_bytes()) / 1e6)
           << " on rank 0 (unsharded " << strf("%.1f MB", double(optimizer_.whole_state_bytes()) / 1e6) << "), "
           << sharding_.layout().buckets.size() << " bucket(s) of " << strf("%g", opt_.bucket_mb) << " MiB, fp32 ";
      if (sharding_.shards_master())
        out_ << "master weights " << strf("%.1f MB", double(sharding_.master_bytes()) / 1e6) << " on rank 0 (whole "
             << strf("%.1f MB", double(model_.num_params() * sizeof(float)) / 1e6) << ")";
      else if (ops_.keeps_working_copy())
        out_ << "master weights whole (one rank)";
      else
        out_ << "weights whole (they are the working weights)";
    }
    out_ << std::endl;
  }
  out_ << describe_capture(opt_.cuda_graph, capture_) << std::endl;
}

// The Recipe: line: the recipe's whole set of options, those the command line changed, and what
// the run then uses (the global batch, the rate rule, the schedule, the optimizer).
void TrainingSession::announce_recipe() {
  const Recipe* recipe = find_recipe(opt_.recipe);
  out_ << "Recipe: " << opt_.recipe;
  if (recipe) {
    out_ << " (" << recipe_text(*recipe) << ")";
    std::string changed;
    for (const auto& option : recipe->options)
      if (opt_.given.count(option.first)) changed += (changed.empty() ? "" : " ") + option.first;
    if (!changed.empty()) out_ << ", the command line's own " << changed;
  }
  out_ << "; global batch " << global_batch_ << " (" << world_ << " rank(s) x " << opt_.batch_size << " x "
       << opt_.accum_steps << "), lr " << schedule_.base_lr;
  if (opt_.lr_base_batch > 0) {
    out_ << " (--lr " << opt_.lr << " per " << opt_.lr_base_batch << " images x " << global_batch_ << " / "
         << opt_.lr_base_batch << ")";
  } else {
    out_ << " (--lr as given)";
  }
  out_ << ", " << to_string(opt_.lr_schedule) << " schedule";
  if (opt_.lr_schedule == LrScheduleKind::Step) {
    out_ << " (x " << opt_.lr_gamma << " at epochs";
    for (size_t i = 0; i < opt_.lr_steps.size(); ++i) out_ << (i ? "," : " ") << opt_.lr_steps[i];
    out_ << ")";
  }
  if (schedule_.warmup_steps > 0) out_ << ", " << schedule_.warmup_steps << " warm-up steps";
  out_ << ", " << to_string(opt_.optimizer);
  if (opt_.optimizer == OptimizerKind::Sgd) out_ << " momentum " << opt_.momentum << (opt_.nesterov ? " (Nesterov)" : "");
  out_ << ", weight decay " << opt_.weight_decay << (opt_.no_wd_on_bn_bias ? " (not on batch-norm and biases)" : "")
       << ", label smoothing " << opt_.label_smoothing << "; " << total_steps_ << " steps" << std::endl;
}

// --- Log: the loss averaged over ranks, throughput over the window since the last log

// Every rank's sample indices of the step just taken (its micro-batches from `first_micro` of
// pass_order_), gathered to rank 0, one JSON line: what the sampler dealt and the ranks read.
void TrainingSession::log_samples(int64_t epoch, size_t first_micro) {
  std::vector<int64_t> mine;
  for (int k = 0; k < opt_.accum_steps; ++k) {
    const auto& m = pass_order_[first_micro + size_t(k)];
    mine.insert(mine.end(), m.begin(), m.end());
  }
  mine.resize(size_t(opt_.accum_steps) * size_t(opt_.batch_size), -1);  // the same size on every rank
  std::vector<int64_t> all(mine.size() * size_t(world_));
  comm_.allgather_host(mine.data(), all.data(), mine.size() * sizeof(int64_t));
  if (!lead_) return;
  nlohmann::json ranks = nlohmann::json::array();
  for (int r = 0; r < world_; ++r) {
    ranks.push_back(std::vector<int64_t>(all.begin() + long(size_t(r) * mine.size()),
                                         all.begin() + long(size_t(r + 1) * mine.size())));
  }
  samples_log_ << nlohmann::json{{"epoch", epoch}, {"step", state_.step - 1}, {"world", world_}, {"samples", ranks}}.dump()
               << std::endl;
}

void TrainingSession::log(const Position& at, const StepStats& s) {
  double local = s.loss;
  std::vector<double> all(static_cast<size_t>(world_));
  comm_.allgather_host(&local, all.data(), sizeof(double));
  double mean = 0.0;
  for (double l : all) mean += l;
  mean /= world_;
  ops_.synchronize();
  const auto now = Clock::now();
  const double dt = std::chrono::duration<double>(now - t_window_).count();
  const double ips = window_steps_ > 0 && dt > 0 ? double(window_steps_ * global_batch_) / dt : 0.0;
  const double wait_ms = window_steps_ > 0 ? window_wait_ms_ / double(window_steps_) : s.data_wait_ms;
  const double eta = window_steps_ > 0 ? dt / double(window_steps_) * double(total_steps_ - state_.step) : -1.0;
  t_window_ = now;
  window_steps_ = 0;
  window_wait_ms_ = 0.0;
  // All-reduce time per step over this window (NCCL: device-side events).
  Comm::Timing ct;
  double ar_ms = -1, exposed_ms = -1;
  if (comm_timed_ && comm_.timing(&ct) && ct.steps > comm_prev_.steps) {
    const double k = double(ct.steps - comm_prev_.steps);
    ar_ms = (ct.allreduce_ms - comm_prev_.allreduce_ms) / k;
    exposed_ms = (ct.exposed_ms - comm_prev_.exposed_ms) / k;
    comm_prev_ = ct;
  }
  if (lead_) {
    // The paddle guide's "Epoch[e], Batch[b], Loss: x" first, then what a user watches.
    out_ << "Epoch[" << at.epoch << "], Batch[" << at.batch << "], Loss: " << strf("%.6f", mean)
         << ", lr: " << strf("%.6g", s.lr);
    if (ips > 0) out_ << ", images/s: " << strf("%.1f", ips);
    out_ << ", data wait: " << strf("%.2f", wait_ms) << " ms/step, step " << state_.step << "/" << total_steps_;
    if (eta >= 0) out_ << ", ETA " << hms(eta);
    out_ << std::endl;
    nlohmann::json j = {{"epoch", at.epoch}, {"batch", at.batch}, {"step", state_.step - 1}, {"loss", mean},
                        {"lr", s.lr}, {"images_per_s", ips > 0 ? nlohmann::json(ips) : nlohmann::json(nullptr)},
                        {"data_wait_ms", wait_ms}, {"time", run_time()}};
    if (ar_ms >= 0) {
      j["allreduce_ms"] = ar_ms;
      j["allreduce_exposed_ms"] = exposed_ms;
    }
    if (scaler_.enabled) j["loss_scale"] = scaler_.scale;
    metrics_.write(j);
    std::vector<std::pair<std::string, float>> tb = {
        {"train/loss", float(mean)}, {"train/lr", float(s.lr)}, {"train/data_wait_ms", float(wait_ms)}};
    if (ips > 0) tb.emplace_back("train/images_per_s", float(ips));
    if (scaler_.enabled) tb.emplace_back("train/loss_scale", scaler_.scale);
    tensorboard_.scalars(state_.step - 1, tb);
  }
  if (!std::isfinite(mean)) {
    throw std::runtime_error("loss is " + strf("%f", mean) + " at step " + std::to_string(state_.step - 1) +
                             ": training diverged (lower --lr)");
  }
}

// --- Evaluate: eval mode (batch-norm running statistics), every validation image once

EvalCounts TrainingSession::evaluate() {
  // Rank 0's running statistics everywhere: the ranks evaluate the model rank 0 saves.
  if (world_ > 1) {
    comm_.broadcast(model_.buffers(), model_.num_buffers() * sizeof(float), 0);
    comm_.wait();
  }
  const int classes = model_.config().num_classes;
  const auto order = eval_order(val_data_->info().size, rank_, world_, opt_.batch_size);
  val_data_->start(0, order);
  EvalCounts mine;
  std::vector<int32_t> labels(size_t(opt_.batch_size));
  for (size_t i = 0; i < order.size(); ++i) {
    const int n = val_data_->next(model_.input(), model_.labels(), nullptr);
    model_.forward_eval();
    const std::vector<float> logits = model_.last_logits();  // synchronizes
    ops_.download(labels.data(), model_.labels(), size_t(n) * sizeof(int32_t));
    mine.add(logits.data(), labels.data(), n, classes, float(opt_.label_smoothing));
  }
  // Summed in rank order on every rank: exact counts, one identical result everywhere.
  std::vector<EvalCounts> all(static_cast<size_t>(world_));
  comm_.allgather_host(&mine, all.data(), sizeof(EvalCounts));
  EvalCounts total;
  for (const EvalCounts& c : all) total += c;
  return total;
}

void TrainingSession::validate(int64_t epoch) {
  // The training steps still queued on the device belong to training's time, not validation's:
  // without this wait, the first logits' download drained them into the validation's seconds,
  // which are taken out of the images/s window (a 7 % spike after every validation on an H200).
  ops_.synchronize();
  const auto t0 = Clock::now();
  const EvalCounts c = evaluate();
  const double secs = seconds_since(t0);
  // Training throughput leaves the validation passes out (the summary gives their time).
  eval_seconds_ += secs;
  t_window_ += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(secs));
  last_eval_step_ = state_.step;
  result_.last_top1 = c.top1_percent();
  const bool best = c.top1_percent() > state_.best_top1;
  if (best) {
    state_.best_top1 = c.top1_percent();
    best_epoch_ = epoch;
  }
  result_.best_top1 = state_.best_top1;
  if (lead_) {
    out_ << "Validation: epoch " << epoch << ", step " << state_.step << ": top-1 " << strf("%.2f", c.top1_percent())
         << " %, top-5 " << strf("%.2f", c.top5_percent()) << " %, loss " << strf("%.4f", c.mean_loss()) << " ("
         << c.images << " images, " << strf("%.1f", secs) << " s)" << std::endl;
    metrics_.write({{"eval", true}, {"epoch", epoch}, {"step", state_.step}, {"top1", c.top1_percent()},
                    {"top5", c.top5_percent()}, {"val_loss", c.mean_loss()}, {"val_images", c.images},
                    {"eval_s", secs}, {"time", run_time()}});
    tensorboard_.scalars(state_.step, {{"val/top1", float(c.top1_percent())},
                                       {"val/top5", float(c.top5_percent())},
                                       {"val/loss", float(c.mean_loss())}});
  }
  if (best && opt_.save_best) {  // the same verdict on every rank: the counts are summed everywhere
    const ModelState ms = sharding_.lead_model_state();
    lead_writes([&] {
      std::map<std::string, std::string> meta = eval_transform_metadata(opt_.augment == Augment::PadCrop);
      meta.insert({{"top1", strf("%.4f", c.top1_percent())}, {"epoch", std::to_string(epoch)}});
      write_weights(best_weights_path(opt_.save), model_, ms, state_.step, meta);
      out_ << "Saved " << best_weights_path(opt_.save) << " (best top-1 so far)" << std::endl;
    });
  }
}

TrainResult TrainingSession::eval_only() {
  t_start_ = Clock::now();
  const EvalCounts c = evaluate();
  result_.best_top1 = result_.last_top1 = c.top1_percent();
  if (lead_) {
    out_ << "Evaluated " << opt_.init << ": top-1 " << strf("%.2f", c.top1_percent()) << " %, top-5 "
         << strf("%.2f", c.top5_percent()) << " %, loss " << strf("%.4f", c.mean_loss()) << " (" << c.images
         << " images, " << strf("%.1f", seconds_since(t_start_)) << " s; the loss is the training criterion, label "
         << "smoothing " << opt_.label_smoothing << ", as a training run's validation reports it)" << std::endl;
    metrics_.write({{"eval", true}, {"epoch", 0}, {"step", 0}, {"top1", c.top1_percent()},
                    {"top5", c.top5_percent()}, {"val_loss", c.mean_loss()}, {"val_images", c.images},
                    {"weights", opt_.init}});
  }
  return result_;
}

// --- Save: rank 0 writes the weights and everything needed to continue from `next`

void TrainingSession::save(const Position& next) {
  if (opt_.save.empty()) return;
  // The same state twice (a stop or the final save right after a scheduled one) is written once:
  // every rank decides alike (step, position and best top-1 agree everywhere).
  if (saved_.step == state_.step && saved_.epoch == next.epoch && saved_.batch == next.batch &&
      saved_.start == next.start && saved_.best_top1 == state_.best_top1) {
    return;
  }
  std::map<std::string, std::vector<float>> optimizer_state = sharding_.whole_optimizer_state(optimizer_);
  const ModelState ms = sharding_.lead_model_state();  // after the optimizer's: both gather in the gradient buffer
  lead_writes([&] {
    TrainState s = state_;
    s.epoch = next.epoch;
    s.batch = next.batch;
    s.segment_start = next.start;
    s.loss_scale = scaler_.enabled ? scaler_.scale : 0.0f;
    s.loss_scale_growth_tracker = scaler_.growth_tracker;
    s.skipped_steps = scaler_.skipped;
    s.optimizer_state = std::move(optimizer_state);
    save_checkpoint(opt_.save, model_, ms, s, eval_transform_metadata(opt_.augment == Augment::PadCrop));
  });
  saved_ = {state_.step, next.epoch, next.batch, next.start, state_.best_top1};
}

// Rank 0 writes a file while the others wait in a barrier without the communication timeout: a
// save takes as long as the file system needs (gigabytes to a network file system), and would
// otherwise count as rank 0's silence in the others' next collective and end a healthy run
// (--comm-timeout). All ranks leave together, so the next collective's clock starts afresh.
// WORKER_TEST_SAVE_DELAY_MS (tests only) makes each write that much slower.
void TrainingSession::lead_writes(const std::function<void()>& write) {
  if (lead_) {
    if (const char* d = std::getenv("WORKER_TEST_SAVE_DELAY_MS"); d && *d) {
      std::this_thread::sleep_for(std::chrono::milliseconds(std::atoll(d)));
    }
    write();
  }
  if (world_ > 1) comm_.barrier_untimed();
}

// --- Report: throughput, memory, the final checkpoint, whether the ranks agree

void TrainingSession::report() {
  ops_.synchronize();
  if (result_.steps > 1) {
    const double dt = seconds_since(t_first_) - eval_seconds_;
    result_.images_per_s = dt > 0 ? double((result_.steps - 1) * global_batch_) / dt : 0.0;
  }
  if (lead_ && result_.steps > 0) {
    out_ << "Throughput: " << strf("%.1f", result_.images_per_s) << " images/s (" << world_ << " rank(s), "
         << result_.steps << " steps, first step" << (eval_seconds_ > 0 ? " and validation" : "")
         << " excluded), total " << strf("%.1f", seconds_since(t_start_)) << " s";
    if (eval_seconds_ > 0) out_ << " (validation " << strf("%.1f", eval_seconds_) << " s)";
    out_ << std::endl;
  }
  if (lead_ && scaler_.enabled) {
    out_ << "fp16 loss scaling: scale " << scaler_.scale << ", " << scaler_.skipped
         << " step(s) skipped for inf/NaN gradients" << std::endl;
  }

  // Peak device memory (issue 5), every rank's, and the all-reduce time per step overall.
  const uint64_t my_peak = ops_.peak_bytes();
  std::vector<uint64_t> peaks(static_cast<size_t>(world_));
  comm_.allgather_host(&my_peak, peaks.data(), sizeof(uint64_t));
  const uint64_t max_peak = *std::max_element(peaks.begin(), peaks.end());
  // Unreadable images skipped (issue 11), over all ranks: each reads its own shard.
  const int64_t my_skipped = train_data_->skipped() + (val_data_ ? val_data_->skipped() : 0);
  std::vector<int64_t> skipped(static_cast<size_t>(world_));
  comm_.allgather_host(&my_skipped, skipped.data(), sizeof(int64_t));
  int64_t skipped_all = 0;
  for (int64_t k : skipped) skipped_all += k;
  const uint64_t my_opt = optimizer_.state_bytes();
  std::vector<uint64_t> opts(static_cast<size_t>(world_));
  comm_.allgather_host(&my_opt, opts.data(), sizeof(uint64_t));
  const uint64_t max_opt = *std::max_element(opts.begin(), opts.end());
  Comm::Timing ct;
  const bool have_ct = comm_.timing(&ct) && ct.steps > 0;
  if (lead_) {
    out_ << "Peak device memory: " << strf("%.2f GB", double(my_peak) / 1e9) << " (rank 0, " << my_peak << " bytes)";
    if (world_ > 1) out_ << ", " << strf("%.2f GB", double(max_peak) / 1e9) << " (largest over " << world_ << " ranks)";
    out_ << std::endl;
    if (sharding_.zero()) {
      out_ << "Optimizer state: " << strf("%.1f MB", double(max_opt) / 1e6) << " per rank (largest of " << world_
           << "; unsharded " << strf("%.1f MB", double(optimizer_.whole_state_bytes()) / 1e6) << ")" << std::endl;
    }
    if (have_ct) {
      out_ << (sharding_.zero() ? "Reduce-scatter: " : "All-reduce: ") << strf("%.2f", ct.allreduce_ms / double(ct.steps))
           << " ms per step on the communication stream, " << strf("%.2f", ct.exposed_ms / double(ct.steps))
           << " ms of it after backward ended (not overlapped), " << ct.steps << " steps" << std::endl;
    }
    if (env_flag("WORKER_MEM_REPORT")) memory_report(out_, model_, ops_, optimizer_.state_bytes());
    nlohmann::json j = {{"final", true}, {"steps", result_.steps}, {"throughput_images_per_s", result_.images_per_s},
                        {"eval_s", eval_seconds_}, {"skipped_images", skipped_all},
                        {"peak_bytes", my_peak}, {"peak_bytes_max_rank", max_peak}, {"world", world_},
                        {"optimizer_state_bytes_max_rank", max_opt}, {"recompute", to_string(opt_.recompute)},
                        {"zero", opt_.zero}, {"fp32_weight_bytes", sharding_.master_bytes()},
                        {"time", run_time()}};
    if (have_ct) {
      j["allreduce_ms"] = ct.allreduce_ms / double(ct.steps);
      j["allreduce_exposed_ms"] = ct.exposed_ms / double(ct.steps);
    }
    metrics_.write(j);
  }

  // Rank 0's buffers for everyone, so the checksums (and rank 0's checkpoint) cover one state.
  if (world_ > 1) {
    comm_.broadcast(model_.buffers(), model_.num_buffers() * sizeof(float), 0);
    comm_.wait();
  }
  if (!opt_.save.empty() && result_.steps > 0) {
    save(pos_);
    if (lead_) out_ << "Saved " << opt_.save << " (training state: " << train_state_path(opt_.save) << ")" << std::endl;
  }
  result_.checksums_agree = report_checksums(sharding_.model_state(), comm_, out_);
  if (!lead_) return;
  out_ << "Summary: " << result_.steps << " steps in " << hms(seconds_since(t_start_)) << ", "
       << strf("%.1f", result_.images_per_s) << " images/s";
  if (result_.last_top1 >= 0) {
    out_ << "; validation top-1 best " << strf("%.2f", state_.best_top1) << " %";
    if (best_epoch_ >= 0) out_ << " (epoch " << best_epoch_ << ")";
    out_ << ", last " << strf("%.2f", result_.last_top1) << " %";
  }
  if (!opt_.save.empty()) {
    out_ << "; checkpoint " << opt_.save;
    if (opt_.save_best && best_epoch_ >= 0) out_ << ", best " << best_weights_path(opt_.save);
  }
  if (tensorboard_.is_open()) out_ << "; TensorBoard " << tensorboard_.path();
  if (opt_.data == DataSourceKind::Images) out_ << "; " << skipped_all << " unreadable image read(s) skipped (all ranks)";
  out_ << std::endl;
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
                  const Requests& requests) {
  TrainingSession session(opt, data_env, ops, comm, out, requests);
  return session.run();
}

}  // namespace worker
