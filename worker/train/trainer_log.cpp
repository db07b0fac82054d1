// The session's log (trainer.h): every --log-every steps the loss averaged over the ranks, the throughput
// since the last log line, the metrics file and TensorBoard; --log-samples' indices.
#include "worker/train/trainer.h"

#include <chrono>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "worker/train/report.h"

namespace worker {

// --- Log: the loss averaged over ranks, throughput over the window since the last log

double TrainingSession::run_time() const {
  return time_offset_ + std::chrono::duration<double>(Clock::now() - t_start_).count();
}

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
  mirror_loss_scale();
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

}  // namespace worker
