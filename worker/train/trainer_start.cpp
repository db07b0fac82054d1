// The session's start (trainer.h): the weights and training state it resumes from, the settings every
// rank must share, the metrics file, and the lines that say what the run is.
#include "worker/train/trainer.h"

#include <algorithm>
#include <string>

#include "worker/train/agreement.h"
#include "worker/train/recipes.h"
#include "worker/train/report.h"

namespace worker {

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
  // fp16: the backend decides every step from here on, from this state (a fresh one, or the checkpoint's).
  if (scaler_.enabled) ops_.set_loss_scale(scaler_.rules(), scaler_.state(), optimizer_.steps_taken());
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
  out_ << describe_capture(opt_.cuda_graph, capture_, scaler_.enabled) << std::endl;
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

}  // namespace worker
