#include "worker/train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "worker/core/model.h"
#include "worker/core/safetensors.h"
#include "worker/train/checkpoint.h"
#include "worker/train/loss_scaler.h"
#include "worker/train/checksum.h"
#include "worker/train/grad_reducer.h"
#include "worker/train/sampler.h"

namespace worker {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

const char* st_dtype(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::BF16: return "BF16";
    case DType::F16: return "F16";
  }
  return "F32";
}

void dump_batch(const std::string& path, Ops& ops, Model& model, const std::vector<int64_t>& indices) {
  const Act& x = model.input();
  StTensor images;
  images.name = "images";
  images.dtype = st_dtype(x.dtype);
  images.shape = {x.n, x.h, x.w, x.c};
  images.data.resize(x.bytes());
  ops.synchronize();
  ops.download(images.data.data(), x.data, x.bytes());
  std::vector<int32_t> lab(size_t(x.n));
  ops.download(lab.data(), model.labels(), lab.size() * sizeof(int32_t));
  StTensor labels{"labels", "I64", {x.n}, std::vector<uint8_t>(lab.size() * 8)};
  StTensor idx{"indices", "I64", {x.n}, std::vector<uint8_t>(lab.size() * 8)};
  for (size_t i = 0; i < lab.size(); ++i) {
    const int64_t l = lab[i];
    std::memcpy(labels.data.data() + 8 * i, &l, 8);
    std::memcpy(idx.data.data() + 8 * i, &indices[i], 8);
  }
  ensure_parent_dir(path);
  write_safetensors(path, {images, labels, idx}, {{"layout", "NHWC"}});
}

std::string gb(size_t bytes) { return fmt("%.2f GB", double(bytes) / 1e9); }
std::string mb(size_t bytes) { return fmt("%.1f MB", double(bytes) / 1e6); }

// WORKER_MEM_REPORT=1: where the device memory went (the model's and the backend's shares, the
// optimizer state), one line per item; what no one claims (NCCL's gather buffer, ...) is "other".
void memory_report(std::ostream& out, const Model& model, const Ops& ops, size_t optimizer_bytes) {
  std::vector<std::pair<std::string, size_t>> items = model.memory_breakdown();
  items.emplace_back("optimizer state", optimizer_bytes);
  size_t pool_free = 0;
  for (auto& kv : ops.memory_breakdown()) {
    if (kv.first.rfind("pool reserved", 0) == 0) {
      pool_free = kv.second;  // not handed out: not part of the peak
      continue;
    }
    items.push_back(kv);
  }
  size_t sum = 0;
  for (const auto& kv : items) sum += kv.second;
  const size_t peak = ops.peak_bytes();
  out << "Memory (rank 0, " << mb(peak) << " peak):" << std::endl;
  for (const auto& kv : items) out << "  " << kv.first << ": " << mb(kv.second) << std::endl;
  out << "  other: " << mb(peak > sum ? peak - sum : 0) << std::endl;
  if (pool_free > 0) out << "  (pool overhead: " << mb(pool_free) << " reserved beyond the peak)" << std::endl;
}

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::string(v) != "0";
}

}  // namespace

TrainResult train(const TrainOptions& opt, const WorkerEnv& env, Ops& ops, Comm& comm, std::ostream& out,
                  std::atomic<bool>* save_request, BatchSource* data) {
  const int rank = comm.rank(), world = comm.size();
  const bool lead = rank == 0;
  const DataKind kind = opt.data == "learnable" ? DataKind::Learnable : DataKind::Random;

  Sampler sampler({opt.num_samples, world, opt.accum_steps, opt.batch_size, opt.seed});
  const int64_t steps_per_epoch = sampler.steps_per_epoch();
  if (steps_per_epoch == 0) {
    throw UsageError("--num-samples " + std::to_string(opt.num_samples) + " is too small: split over " +
                     std::to_string(world) + " rank(s) x " + std::to_string(opt.accum_steps) +
                     " micro-batch(es), each gets " + std::to_string(sampler.shard_length()) +
                     " samples per epoch, fewer than --batch-size " + std::to_string(opt.batch_size));
  }
  const int64_t global_batch = int64_t(world) * opt.batch_size * opt.accum_steps;

  ModelConfig mc;
  mc.depth = opt.depth;
  mc.width = opt.width;
  mc.num_classes = opt.num_classes;
  mc.image_size = opt.image_size;
  mc.batch = opt.batch_size;
  Model model(mc, ops);
  const size_t np = model.num_params(), nb = model.num_buffers();

  // --- Initial state: seed, --init weights, or a whole --resume checkpoint.
  model.init(opt.seed);
  TrainState ts;
  // fp16 needs loss scaling (GradScaler's semantics); bf16 and fp32 do not.
  LossScaler scaler;
  scaler.enabled = ops.compute_dtype() == DType::F16;
  ts.seed = opt.seed;
  ts.optimizer = opt.optimizer;
  ts.data = opt.data;
  ts.num_samples = opt.num_samples;
  ts.global_batch = global_batch;
  const bool adam = opt.optimizer == "adam";
  auto* slot_a = static_cast<float*>(ops.alloc(np * sizeof(float)));
  auto* slot_b = adam ? static_cast<float*>(ops.alloc(np * sizeof(float))) : nullptr;

  std::string resume = opt.resume;
  if (resume == "auto") resume = checkpoint_exists(opt.save) ? opt.save : "";
  if (!opt.init.empty()) {
    model.set_state(load_weights(opt.init, model));
  } else if (!resume.empty()) {
    ModelState ms;
    TrainState loaded;
    load_checkpoint(resume, model, &ms, &loaded);
    auto differs = [&](const char* what, const std::string& was, const std::string& now) {
      if (was != now) {
        throw UsageError("cannot resume from '" + resume + "': it was trained with " + what + " " + was +
                         ", this run has " + now + " (the data order would not continue)");
      }
    };
    differs("--optimizer", loaded.optimizer, opt.optimizer);
    differs("--seed", std::to_string(loaded.seed), std::to_string(opt.seed));
    differs("--data", loaded.data, opt.data);
    differs("--num-samples", std::to_string(loaded.num_samples), std::to_string(opt.num_samples));
    differs("a global batch (ranks x batch x accum-steps) of", std::to_string(loaded.global_batch),
            std::to_string(global_batch));
    model.set_state(ms);
    ops.upload(slot_a, loaded.slot_a.data(), np * sizeof(float));
    if (adam) ops.upload(slot_b, loaded.slot_b.data(), np * sizeof(float));
    ts.step = loaded.step;
    if (scaler.enabled && loaded.loss_scale > 0.0f) {
      scaler.scale = loaded.loss_scale;
      scaler.growth_tracker = loaded.loss_scale_growth_tracker;
    }
    scaler.skipped = loaded.skipped_steps;
    ts.epoch = loaded.epoch;
    ts.batch = loaded.batch;
    if (lead) {
      out << "Resuming from " << resume << " at step " << ts.step << " (epoch " << ts.epoch << ", batch " << ts.batch
          << ")" << std::endl;
    }
  }
  // Every rank starts from rank 0's weights and buffers (as DDP does at construction).
  if (world > 1) {
    comm.broadcast(model.params(), np * sizeof(float), 0);
    comm.broadcast(model.buffers(), nb * sizeof(float), 0);
    comm.wait();
    ops.params_updated();
  }

  if (lead) {
    out << "train_resnet: ResNet-" << opt.depth << " (width " << opt.width << ", " << opt.num_classes << " classes, "
        << opt.image_size << "x" << opt.image_size << ", " << np << " parameters) on " << ops.describe() << "; "
        << world << " rank(s) x batch " << opt.batch_size << " x " << opt.accum_steps << " micro-batch(es), "
        << steps_per_epoch << " steps per epoch, " << opt.optimizer << " lr " << opt.lr << std::endl;
    out << "Data: " << (data ? data->describe() : "synthetic (" + opt.data + ", " + std::to_string(opt.num_samples) + " samples)")
        << std::endl;
  }

  std::ofstream metrics;
  if (lead && !opt.metrics_file.empty()) {
    ensure_parent_dir(opt.metrics_file);
    metrics.open(opt.metrics_file, std::ios::trunc);
    if (!metrics) throw std::runtime_error("cannot write --metrics-file '" + opt.metrics_file + "'");
  }

  auto save = [&](int64_t epoch, int64_t next_batch) {
    if (!lead || opt.save.empty()) return;
    TrainState s = ts;  // position = (epoch, next_batch), normalised to a batch inside an epoch
    s.loss_scale = scaler.enabled ? scaler.scale : 0.0f;
    s.loss_scale_growth_tracker = scaler.growth_tracker;
    s.skipped_steps = scaler.skipped;
    s.epoch = epoch + next_batch / steps_per_epoch;
    s.batch = next_batch % steps_per_epoch;
    s.slot_a.resize(np);
    ops.synchronize();
    ops.download(s.slot_a.data(), slot_a, np * sizeof(float));
    if (adam) {
      s.slot_b.resize(np);
      ops.download(s.slot_b.data(), slot_b, np * sizeof(float));
    }
    save_checkpoint(opt.save, model, model.get_state(), s);
  };

  // Gradient all-reduce during backward only where the communicator overlaps with compute.
  const bool overlap = world > 1 && ops.device() == DeviceKind::Gpu;
  GradReducer reducer(comm, model.grads(), np, size_t(25) << 18);  // 25 MiB of fp32, as DDP's bucket

  TrainResult result;
  Comm::Timing comm_prev;
  bool comm_timed = comm.timing(&comm_prev);
  const auto t_start = Clock::now();
  Clock::time_point t_first{}, t_window{};
  int64_t window_steps = 0;
  // Time the step blocked waiting for its input (data_wait_ms): per log window and overall.
  double wait_window_ms = 0, wait_total_ms = 0;
  int64_t wait_window_steps = 0;
  bool dumped = opt.dump_batch.empty() || !lead;
  bool done = opt.max_steps > 0 && ts.step >= opt.max_steps;
  int64_t epoch = ts.epoch;
  for (; epoch < opt.epochs && !done; ++epoch) {
    const auto perm = sampler.permutation(epoch);
    const int64_t first = epoch == ts.epoch ? ts.batch : 0;
    if (data) {  // the rest of this epoch's order, so the source can read ahead
      std::vector<BatchIndices> order;
      for (int64_t b = first; b < steps_per_epoch; ++b) {
        for (int k = 0; k < opt.accum_steps; ++k) order.push_back(sampler.batch(perm, rank, k, b));
      }
      data->start(epoch, std::move(order));
    }
    for (int64_t b = first; b < steps_per_epoch; ++b) {
      if (opt.max_steps > 0 && ts.step >= opt.max_steps) {
        done = true;
        break;
      }
      const bool log = b % opt.log_every == 0;
      // DDP broadcasts buffers from rank 0 before every forward: running statistics agree.
      if (world > 1) comm.broadcast(model.buffers(), nb * sizeof(float), 0);
      comm.wait();
      ops.zero(model.grads(), np * sizeof(float));
      double loss_sum = 0.0;
      for (int k = 0; k < opt.accum_steps; ++k) {
        const auto idx = sampler.batch(perm, rank, k, b);
        double waited = 0;
        if (data) {
          data->next(model.input(), model.labels(), &waited);
        } else {
          const auto t_make = Clock::now();
          ops.make_batch(kind, opt.seed, idx.data(), opt.batch_size, opt.image_size, opt.num_classes, model.input(),
                         model.labels());
          waited = std::chrono::duration<double, std::milli>(Clock::now() - t_make).count();
        }
        wait_window_ms += waited;
        wait_total_ms += waited;
        if (!dumped) {
          dump_batch(opt.dump_batch, ops, model, idx);
          dumped = true;
        }
        const bool last = k + 1 == opt.accum_steps;
        if (overlap && last) {
          reducer.begin();
          model.on_grads_ready = [&](size_t gb, size_t ge) { reducer.ready(gb, ge); };
        }
        model.forward_backward(scaler.multiplier() / float(opt.accum_steps));
        model.on_grads_ready = nullptr;
        if (log) loss_sum += model.last_loss();
      }
      if (world > 1) {
        if (overlap) {
          reducer.finish();
        } else {
          comm.allreduce_sum(model.grads(), np);
          comm.wait();
        }
      }
      // Average over ranks and undo the loss scale in one pass. An inf or NaN on any rank
      // survives the all-reduce, so every rank reaches the same verdict.
      if (world > 1 || scaler.enabled) ops.scale_grads(1.0f / (float(world) * scaler.multiplier()));
      if (scaler.update(!scaler.enabled || ops.grads_finite())) {
        const int64_t taken = ts.step - scaler.skipped;  // the optimizer's own step count so far
        if (adam) {
          ops.adam_step(float(opt.lr), 0.9f, 0.999f, 1e-8f, float(opt.weight_decay), taken + 1, slot_a, slot_b);
        } else {
          ops.sgd_step(float(opt.lr), float(opt.momentum), float(opt.weight_decay), slot_a, taken == 0);
        }
        ops.params_updated();
      }
      ++ts.step;
      ++result.steps;
      ++window_steps;
      ++wait_window_steps;
      if (result.steps == 1) {  // the first step pays for warm-up: throughput starts after it
        ops.synchronize();
        t_first = t_window = Clock::now();
        window_steps = 0;
      }

      if (log) {
        double local = loss_sum / opt.accum_steps;
        std::vector<double> all(static_cast<size_t>(world));
        comm.allgather_host(&local, all.data(), sizeof(double));
        double mean = 0.0;
        for (double l : all) mean += l;
        mean /= world;
        ops.synchronize();
        const auto now = Clock::now();
        const double dt = std::chrono::duration<double>(now - t_window).count();
        const double ips = window_steps > 0 && dt > 0 ? double(window_steps * global_batch) / dt : 0.0;
        t_window = now;
        window_steps = 0;
        const double wait_ms = wait_window_steps > 0 ? wait_window_ms / double(wait_window_steps) : 0.0;
        wait_window_ms = 0;
        wait_window_steps = 0;
        // All-reduce time per step over this window (NCCL: device-side events).
        Comm::Timing ct;
        double ar_ms = -1, exposed_ms = -1;
        if (comm_timed && comm.timing(&ct) && ct.steps > comm_prev.steps) {
          const double k = double(ct.steps - comm_prev.steps);
          ar_ms = (ct.allreduce_ms - comm_prev.allreduce_ms) / k;
          exposed_ms = (ct.exposed_ms - comm_prev.exposed_ms) / k;
          comm_prev = ct;
        }
        if (lead) {
          out << "Epoch[" << epoch << "], Batch[" << b << "], Loss: " << fmt("%.6f", mean);
          if (ips > 0) out << ", images/s: " << fmt("%.1f", ips);
          out << ", data_wait_ms: " << fmt("%.1f", wait_ms) << std::endl;
          if (metrics.is_open()) {
            nlohmann::json j = {{"epoch", epoch}, {"batch", b}, {"step", ts.step - 1}, {"loss", mean},
                                {"images_per_s", ips > 0 ? nlohmann::json(ips) : nlohmann::json(nullptr)},
                                {"time", seconds_since(t_start)}, {"data_wait_ms", wait_ms}};
            if (ar_ms >= 0) {
              j["allreduce_ms"] = ar_ms;
              j["allreduce_exposed_ms"] = exposed_ms;
            }
            metrics << j.dump() << "\n" << std::flush;
          }
        }
        if (!std::isfinite(mean)) throw std::runtime_error("loss is " + fmt("%f", mean) + " at step " + std::to_string(ts.step - 1) + ": training diverged (lower --lr)");
      }
      bool save_now = opt.save_every > 0 && ts.step % opt.save_every == 0;
      if (save_request && save_request->exchange(false)) save_now = true;
      if (save_now) {
        save(epoch, b + 1);
        if (lead && !(opt.save_every > 0 && ts.step % opt.save_every == 0)) {
          out << "Saved " << opt.save << " at step " << ts.step << " (checkpoint signal)" << std::endl;
        }
      }
    }
  }

  ops.synchronize();
  if (result.steps > 1) {
    const double dt = seconds_since(t_first);
    result.images_per_s = dt > 0 ? double((result.steps - 1) * global_batch) / dt : 0.0;
  }
  if (lead && result.steps > 0) {
    out << "Throughput: " << fmt("%.1f", result.images_per_s) << " images/s (" << world << " rank(s), "
        << result.steps << " steps, first step excluded), total " << fmt("%.1f", seconds_since(t_start)) << " s"
        << std::endl;
  }

  if (lead && scaler.enabled) {
    out << "fp16 loss scaling: scale " << scaler.scale << ", " << scaler.skipped
        << " step(s) skipped for inf/NaN gradients" << std::endl;
  }

  // --- Peak device memory (issue 5), every rank's, and the all-reduce time per step overall.
  const uint64_t my_peak = ops.peak_bytes();
  std::vector<uint64_t> peaks(static_cast<size_t>(world));
  comm.allgather_host(&my_peak, peaks.data(), sizeof(uint64_t));
  uint64_t max_peak = 0;
  for (uint64_t p : peaks) max_peak = std::max(max_peak, p);
  // Unreadable images skipped, over all ranks (each rank reads its own shard).
  const int64_t my_skipped = data ? data->skipped() : 0;
  std::vector<int64_t> skipped(static_cast<size_t>(world));
  comm.allgather_host(&my_skipped, skipped.data(), sizeof(int64_t));
  int64_t skipped_all = 0;
  for (int64_t k : skipped) skipped_all += k;
  Comm::Timing ct;
  const bool have_ct = comm.timing(&ct) && ct.steps > 0;
  if (lead) {
    out << "Peak device memory: " << gb(my_peak) << " (rank 0, " << my_peak << " bytes)";
    if (world > 1) out << ", " << gb(max_peak) << " (largest over " << world << " ranks)";
    out << std::endl;
    if (have_ct) {
      out << "All-reduce: " << fmt("%.2f", ct.allreduce_ms / double(ct.steps)) << " ms per step on the communication stream, "
          << fmt("%.2f", ct.exposed_ms / double(ct.steps)) << " ms of it after backward ended (not overlapped), "
          << ct.steps << " steps" << std::endl;
    }
    out << "Data: waited " << fmt("%.2f", result.steps > 0 ? wait_total_ms / double(result.steps) : 0.0)
        << " ms per step for input (rank 0)";
    if (data) out << ", " << skipped_all << " unreadable image read(s) skipped (all ranks)";
    out << std::endl;
    if (env_flag("WORKER_MEM_REPORT")) memory_report(out, model, ops, (adam ? 2 : 1) * np * sizeof(float));
    if (metrics.is_open()) {
      nlohmann::json j = {{"final", true}, {"steps", result.steps}, {"throughput_images_per_s", result.images_per_s},
                          {"peak_bytes", my_peak}, {"peak_bytes_max_rank", max_peak}, {"world", world},
                          {"skipped_images", skipped_all},
                          {"time", seconds_since(t_start)}};
      if (have_ct) {
        j["allreduce_ms"] = ct.allreduce_ms / double(ct.steps);
        j["allreduce_exposed_ms"] = ct.exposed_ms / double(ct.steps);
      }
      metrics << j.dump() << "\n" << std::flush;
    }
  }

  // Rank 0's buffers for everyone, so the checksums (and rank 0's checkpoint) cover one state.
  if (world > 1) {
    comm.broadcast(model.buffers(), nb * sizeof(float), 0);
    comm.wait();
  }
  if (!opt.save.empty() && result.steps > 0) {
    save(ts.epoch, ts.batch + result.steps);
    if (lead) out << "Saved " << opt.save << " (training state: " << train_state_path(opt.save) << ")" << std::endl;
  }

  // --- Checksums: every rank prints its own, rank 0 says whether they agree.
  ModelState st = model.get_state();
  ParamChecksum cs;
  cs.add(st.params.data(), st.params.size());
  cs.add(st.buffers.data(), st.buffers.size());
  out << "rank " << rank << ": params checksum " << cs.str() << std::endl;
  struct Wire {
    uint64_t fnv, count;
    double sum;
  } mine{cs.fnv, cs.count, cs.sum};
  std::vector<Wire> all(static_cast<size_t>(world));
  comm.allgather_host(&mine, all.data(), sizeof(Wire));
  std::string differing;
  for (int r = 0; r < world; ++r) {
    if (all[size_t(r)].fnv != mine.fnv || all[size_t(r)].count != mine.count) {
      differing += (differing.empty() ? "" : ", ") + std::to_string(r);
    }
  }
  result.checksums_agree = differing.empty();
  if (lead) {
    if (result.checksums_agree) {
      out << "Checksums: all " << world << " rank(s) agree" << std::endl;
    } else {
      out << "Checksums: ranks " << differing << " DIFFER from rank 0" << std::endl;
    }
  }
  return result;
}

}  // namespace worker
