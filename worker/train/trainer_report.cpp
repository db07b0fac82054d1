// The session's report (trainer.h): the figures gathered over the ranks, the final checkpoint, the
// checksums of every rank's parameters; report.h formats them.
#include <algorithm>
#include <string>
#include <vector>

#include "worker/core/knobs.h"
#include "worker/train/checksum.h"
#include "worker/train/report.h"
#include "worker/train/trainer.h"

namespace worker {

namespace {

// Every rank's `mine`, gathered.
template <typename T>
std::vector<T> gathered(Comm& comm, const T& mine) {
  std::vector<T> all(static_cast<size_t>(comm.size()));
  comm.allgather_host(&mine, all.data(), sizeof(T));
  return all;
}

}  // namespace

// --- Report: throughput, memory, the final checkpoint, whether the ranks agree

void TrainingSession::report() {
  ops_.synchronize();
  mirror_loss_scale();
  if (result_.steps > 1) {
    const double dt = seconds_since(t_first_) - eval_seconds_;
    result_.images_per_s = dt > 0 ? double((result_.steps - 1) * global_batch_) / dt : 0.0;
  }
  RunFigures f;
  f.world = world_;
  f.steps = result_.steps;
  f.images_per_s = result_.images_per_s;
  f.total_s = seconds_since(t_start_);
  f.eval_s = eval_seconds_;
  f.loss_scaling = scaler_.enabled;
  f.loss_scale = scaler_.scale;
  f.skipped_steps = scaler_.skipped;
  // Peak device memory (issue 5), every rank's; unreadable images skipped (issue 11), over all
  // ranks: each reads its own shard; the optimizer state's largest share; the all-reduce time.
  f.peak_bytes = ops_.peak_bytes();
  const std::vector<uint64_t> peaks = gathered<uint64_t>(comm_, f.peak_bytes);
  f.peak_bytes_max_rank = *std::max_element(peaks.begin(), peaks.end());
  const int64_t my_skipped = train_data_->skipped() + (val_data_ ? val_data_->skipped() : 0);
  for (int64_t k : gathered<int64_t>(comm_, my_skipped)) f.skipped_images += k;
  const std::vector<uint64_t> opts = gathered<uint64_t>(comm_, optimizer_.state_bytes());
  f.optimizer_bytes_max_rank = *std::max_element(opts.begin(), opts.end());
  f.optimizer_bytes_unsharded = optimizer_.whole_state_bytes();
  f.zero = sharding_.zero();
  f.zero_option = opt_.zero;
  f.fp32_weight_bytes = sharding_.master_bytes();
  f.recompute = to_string(opt_.recompute);
  f.first_step_s = first_step_s_;
  Comm::Timing ct;
  if (comm_.timing(&ct) && ct.steps > 0) f.comm = RunFigures::CommTime{ct.steps, ct.allreduce_ms, ct.exposed_ms};
  if (lead_) {
    print_run_figures(out_, f);
    if (process_knobs().mem_report) {
      std::vector<std::pair<std::string, size_t>> items = model_.memory_breakdown();
      items.emplace_back("optimizer state", optimizer_.state_bytes());
      for (const auto& kv : ops_.memory_breakdown()) items.push_back(kv);
      print_memory(out_, items, ops_.peak_bytes());
    }
    f.time = run_time();
    metrics_.write(final_record(f));
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
  // Every rank prints the checksum of its parameters and buffers; rank 0 says whether all agree.
  const ModelState st = sharding_.model_state();
  ParamChecksum cs;
  cs.add(st.params.data(), st.params.size());
  cs.add(st.buffers.data(), st.buffers.size());
  out_ << "rank " << rank_ << ": params checksum " << cs.str() << std::endl;
  const std::string differing = differing_ranks(gathered<ParamChecksum>(comm_, cs), cs);
  result_.checksums_agree = differing.empty();
  if (!lead_) return;
  out_ << checksum_verdict(world_, differing) << std::endl;
  RunSummary s;
  s.steps = result_.steps;
  s.total_s = seconds_since(t_start_);
  s.images_per_s = result_.images_per_s;
  s.best_top1 = state_.best_top1;
  s.last_top1 = result_.last_top1;
  s.best_epoch = best_epoch_;
  s.checkpoint = opt_.save;
  if (!opt_.save.empty() && opt_.save_best && best_epoch_ >= 0) s.best_weights = best_weights_path(opt_.save);
  if (tensorboard_.is_open()) s.tensorboard = tensorboard_.path();
  if (opt_.data == DataSourceKind::Images) s.skipped_images = f.skipped_images;
  out_ << summary_line(s) << std::endl;
}

}  // namespace worker
