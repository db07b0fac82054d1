// The session's checkpoints (trainer.h): rank 0 writes the weights and the training state, the others wait.
#include "worker/train/trainer.h"

#include <map>
#include <string>
#include <thread>
#include <vector>

#include "worker/core/knobs.h"
#include "worker/train/architecture.h"

namespace worker {

// --- Save: rank 0 writes the weights and everything needed to continue from `next`

void TrainingSession::save(const Position& next) {
  if (opt_.save.empty()) return;
  // The same state twice (a stop or the final save right after a scheduled one) is written once:
  // every rank decides alike (step, position and best top-1 agree everywhere).
  if (saved_.step == state_.step && saved_.epoch == next.epoch && saved_.batch == next.batch &&
      saved_.start == next.start && saved_.best_top1 == state_.best_top1) {
    return;
  }
  mirror_loss_scale();  // (a checkpoint synchronizes anyway: it reads the state back)
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
    save_checkpoint(opt_.save, model_, ms, s, eval_transform_metadata(opt_.images.tf.augment == Augment::PadCrop));
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
    if (process_knobs().test_save_delay.count() > 0) std::this_thread::sleep_for(process_knobs().test_save_delay);
    write();
  }
  if (world_ > 1) comm_.barrier_untimed();
}

}  // namespace worker
