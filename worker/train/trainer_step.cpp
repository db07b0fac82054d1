// One optimizer step of the session (trainer.h): the micro-batches' forward and backward, the gradients' reduction,
// the update (param_sharding.h), or one replay of the step captured as a CUDA graph.
#include "worker/train/trainer.h"

#include <algorithm>
#include <chrono>

namespace worker {

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
    model_.forward_backward(1.0f / float(opt_.accum_steps));  // fp16: the backend multiplies by its loss scale
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
  s.lr = schedule_.lr(schedule_step());
  update(float(s.lr));
  count_step(s);
  return s;
}

// The reduced gradients averaged over ranks and the update. fp16: the loss scale is undone in the
// same pass, and the backend decides whether the update applies (Ops::set_loss_scale): no host
// read, except that ranks under ZeRO, whose verdicts can differ, combine theirs.
void TrainingSession::update(float lr) {
  if (scaler_.enabled) {
    ops_.unscale_grads(float(world_));
    if (sharding_.verdicts_differ()) ops_.set_grads_verdict(sharding_.grads_finite_everywhere());
    ops_.update_loss_scale();
  } else if (world_ > 1) {
    ops_.scale_grads(1.0f / float(world_));
  }
  sharding_.update(optimizer_, lr);  // a step the backend skips leaves the weights and the state as they were
}

// The host's copies of what the backend decides on its own: fp16 loss scaling's state, and the
// optimizer's step count, which lags the run's by the skipped steps. Where the host needs them
// (log, records, checkpoints, the report), after the work so far (a synchronization).
void TrainingSession::mirror_loss_scale() {
  if (!scaler_.enabled) return;
  scaler_.mirror(ops_.loss_scale());
  optimizer_.mirror_steps_taken(state_.step - scaler_.skipped);
}

// One step as a captured graph (step_capture.h says when): the batch is filled before the replay
// (its sample indices change), the loss read after it; the graph holds the rest of step() for
// one rank and one micro-batch (fp16 loss scaling included: it decides on the device), and its
// optimizer reads lr from device memory.
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
      update(float(s.lr));
    });
    captured_ = true;
    if (lead_) {
      const CaptureInfo c = ops_.captured();
      out_ << "Step " << state_.step << ": captured as one CUDA graph (" << c.kernels << " kernels, " << c.memsets
           << " memsets, " << c.copies << " copies, " << c.nodes << " nodes";
      if (c.memsets_dropped) out_ << "; " << c.memsets_dropped << " redundant zeroings left out";
      out_ << "), replayed from now on" << std::endl;
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
    StartupFigures f;
    const double since_start = seconds_since_process_start();
    auto secs = [](Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); };
    f.data = secs(t_begin_, t_data_);
    f.model = secs(t_data_, t_built_);
    f.weights = secs(t_built_, t_resumed_);
    f.first_step = secs(t_resumed_, t_first_);
    if (since_start >= 0) f.to_session = std::max(0.0, since_start - secs(t_begin_, t_first_));
    f.backend = ops_.startup_seconds();
    if (lead_) out_ << startup_line(f) << std::endl;
    first_step_s_ = f.total();
  }
}

void TrainingSession::dump_first_batch(const std::vector<int64_t>& indices) {
  if (lead_ && !opt_.dump_batch.empty()) dump_batch(opt_.dump_batch, ops_, model_, indices);
}

}  // namespace worker
