// The session's validation (trainer.h): every validation image once in eval mode, the counts summed over
// the ranks, the best top-1's weights (--save-best); --eval-only.
#include "worker/train/trainer.h"

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "worker/train/architecture.h"
#include "worker/train/report.h"

namespace worker {

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
      std::map<std::string, std::string> meta = eval_transform_metadata(opt_.images.tf.augment == Augment::PadCrop);
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

}  // namespace worker
