// Driver of the GPU checks on the GPU machine (scripts/gpu_check.sh, scripts/bench_gpu.sh):
//   gpu_model_driver step  --depth D --width W --classes C --image-size S --batch N --seed K
//                          --precision fp32|bf16 --out DIR [--init WEIGHTS]
//     writes, as safetensors in DIR: init, batch (images NHWC as fp32, labels), grads (loss and
//     every gradient, OIHW), fwd (state after one training forward), sgd and adam (state after
//     one step of each from the same start): the files compare_torch_gpu.py checks.
//   gpu_model_driver bench --depth D --batch N --precision P [--steps-per-window 10 --windows 5]
//                          [--graph 1 [--census 1]] [--profile 1]
//     trains on synthetic data (SGD momentum) and prints images/s (median of timed windows after
//     warm-up: 14 steps, more while the convolution engines are still timed, 60 at most), the time to
//     the first finished step and the pool's peak bytes, as JSON; "startup" says where the time to the
//     first step went (seconds from main: the backend made, the model and its plans, the weights, the
//     first step enqueued; and the backend's parts: the driver's initialisation, the context, cuDNN's
//     and cuBLAS's handles, cudaMalloc, choosing the algorithms), also on stderr.
//     --graph 1: the step (zero, forward, backward, SGD, weight shadow) is then captured as a CUDA
//     graph and timed again replayed (images_per_s is that figure; images_per_s_stream the one
//     without); the graph's kernel count is the number of kernels per step.
//     --census 1: "census" lists the operations that added memsets to the captured graph, with the
//     kernels and memsets each added (OpTimer's census).
//     --profile 1: one more step with CUDA events around every backend operation: "breakdown"
//     lists device ms per operation and shape (the step is the NVTX range "profiled_step").
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <iostream>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include <nvtx3/nvToolsExt.h>

#include "worker/core/backend.h"
#include "worker/model/model.h"
#include "worker/model/safetensors.h"
#include "worker/gpu/gpu_ops.h"
#include "tests/worker/reference_step.h"

namespace {

using namespace worker;
using Clock = std::chrono::steady_clock;

std::map<std::string, std::string> parse(int argc, char** argv) {
  std::map<std::string, std::string> a;
  for (int i = 2; i < argc; i += 2) {
    if (std::strncmp(argv[i], "--", 2) != 0 || i + 1 >= argc)
      throw std::invalid_argument(std::string("expected --key value, got ") + argv[i]);
    a[argv[i] + 2] = argv[i + 1];
  }
  return a;
}

int geti(const std::map<std::string, std::string>& a, const std::string& k, int def) {
  auto it = a.find(k);
  return it == a.end() ? def : std::stoi(it->second);
}

DType precision(const std::map<std::string, std::string>& a) {
  const std::string p = a.count("precision") ? a.at("precision") : "bf16";
  if (p == "fp32") return DType::F32;
  if (p == "bf16") return DType::BF16;
  if (p == "fp16") return DType::F16;
  throw std::invalid_argument("--precision " + p + ": expected fp32, bf16 or fp16");
}

int step(const std::map<std::string, std::string>& a) {
  ModelConfig cfg;
  cfg.depth = geti(a, "depth", 50);
  cfg.width = geti(a, "width", 64);
  cfg.num_classes = geti(a, "classes", 1000);
  cfg.image_size = geti(a, "image-size", 224);
  cfg.batch = geti(a, "batch", 8);
  auto ops = make_gpu_ops(0, precision(a));
  const float loss = testing::write_reference_step(*ops, cfg, DataKind::Learnable, uint64_t(geti(a, "seed", 1)),
                                                   a.count("init") ? a.at("init") : "",
                                                   a.count("out") ? a.at("out") : ".");
  std::printf("loss %.8f\n", double(loss));
  return 0;
}

int bench(const std::map<std::string, std::string>& a, Clock::time_point t_start) {
  ModelConfig cfg;
  cfg.depth = geti(a, "depth", 50);
  cfg.width = geti(a, "width", 64);
  cfg.num_classes = geti(a, "classes", 1000);
  cfg.image_size = geti(a, "image-size", 224);
  cfg.batch = geti(a, "batch", 256);
  const int per_window = geti(a, "steps-per-window", 10), windows = geti(a, "windows", 5);
  // Where the time to the first step goes (stderr): back-end set-up, model, initialisation.
  auto since = [&] { return std::chrono::duration<double>(Clock::now() - t_start).count(); };
  auto ops = make_gpu_ops(0, precision(a));
  const double t_ops = since();
  Model m(cfg, *ops, uint64_t(1));  // the weights of seed 1 drawn while the backend plans (m.init(1))
  const double t_model = since();
  m.init(1);
  const double t_init = since();
  float* mom = static_cast<float*>(ops->alloc(m.num_params() * 4));
  std::vector<int64_t> idx(static_cast<size_t>(cfg.batch));
  int64_t next = 0;
  auto train_step = [&](bool first) {
    for (auto& i : idx) i = next++;
    ops->make_batch(DataKind::Random, 1, idx.data(), cfg.batch, cfg.image_size, cfg.num_classes,
                    m.input(), m.labels());
    ops->zero(m.grads(), m.num_params() * 4);
    m.forward_backward();
    ops->sgd_step(0.1f, 0.9f, 1e-4f, mom, first, false, nullptr);
    ops->params_updated();
  };
  train_step(true);
  const double t_enqueued = since();  // the host's part of the first step (lazy kernel loading in it)
  const float first_loss = m.last_loss();  // synchronizes: the first step is finished
  // From the shell's start time when the benchmark gives it (BENCH_T0, epoch seconds), so
  // process start-up counts as it does for PyTorch; else from main().
  double first_step_s = std::chrono::duration<double>(Clock::now() - t_start).count();
  if (const char* t0 = std::getenv("BENCH_T0"))
    first_step_s = std::chrono::duration<double>(
                       std::chrono::system_clock::now().time_since_epoch()).count() - std::atof(t0);
  std::fprintf(stderr, "startup (s from main): backend %.2f, model and plans %.2f, init %.2f, first step enqueued %.2f, "
               "done %.2f\n", t_ops, t_model, t_init, t_enqueued, since());
  std::string startup = "{";
  if (const auto* go = dynamic_cast<const gpu::GpuOps*>(ops.get())) {
    std::fprintf(stderr, "startup, backend's parts (s):");
    for (const auto& ph : go->startup_seconds()) {
      std::fprintf(stderr, " %s %.3f", ph.first, ph.second);
      startup += std::string(startup.size() > 1 ? ", \"" : "\"") + ph.first + "\": " + std::to_string(ph.second);
    }
    std::fprintf(stderr, "\n");
  }
  startup += std::string(startup.size() > 1 ? ", " : "") + "\"backend\": " + std::to_string(t_ops) +
             ", \"model\": " + std::to_string(t_model) + ", \"init\": " + std::to_string(t_init) +
             ", \"enqueued\": " + std::to_string(t_enqueued) + "}";
  // Warm-up: the convolution engines are timed during these steps (conv_engines.h), 14 at least and
  // until the tuning ends (fp16's fused forwards are timed after the plain ones), 60 at most (the
  // trainer's kMaxWarmupSteps).
  auto* gops = dynamic_cast<gpu::GpuOps*>(ops.get());
  int warmup = 0;
  for (; warmup < 60 && (warmup < 14 || (gops && gops->still_tuning())); ++warmup) train_step(false);
  if (gops) gops->settle_conv_engines();
  ops->synchronize();
  auto time_windows = [&](const std::function<void()>& one_step) {
    std::vector<double> rates;
    for (int w = 0; w < windows; ++w) {
      const auto t0 = Clock::now();
      for (int i = 0; i < per_window; ++i) one_step();
      ops->synchronize();
      const double s = std::chrono::duration<double>(Clock::now() - t0).count();
      rates.push_back(double(per_window) * cfg.batch / s);
    }
    std::sort(rates.begin(), rates.end());
    return rates;
  };
  std::vector<double> rates = time_windows([&] { train_step(false); });
  std::string extra;
  extra += ", \"warmup_steps\": " + std::to_string(warmup);
  if (gops) {
    extra += ", \"fused_half_faster\": " + std::string(gops->fused_half_faster() ? "true" : "false") +
             ", \"fused_bn_forwards\": " + std::to_string(gops->fused_bn_forwards()) +
             ", \"prologue_forwards\": " + std::to_string(gops->prologue_forwards()) +
             ", \"prologue_backwards\": " + std::to_string(gops->prologue_backwards()) +
             ", \"prologue_materialized\": " + std::to_string(gops->prologue_materialized());
    extra += ", \"conv_engines\": [";
    const auto lines = gops->conv_engine_report();
    for (size_t i = 0; i < lines.size(); ++i) extra += std::string(i ? ", " : "") + "\"" + lines[i] + "\"";
    extra += "]";
  }
  if (geti(a, "graph", 0) && gops) {
    // The batch stays outside the graph (its sample indices are kernel arguments); capturing
    // runs one step.
    const bool census = geti(a, "census", 0) != 0;
    if (census) gops->census_start();
    ops->capture_step([&] {
      ops->zero(m.grads(), m.num_params() * 4);
      m.forward_backward();
      ops->sgd_step(0.1f, 0.9f, 1e-4f, mom, false, false, nullptr);
      ops->params_updated();
    });
    if (census) {
      extra += ", \"census\": [";
      bool first = true;
      for (const auto& r : gops->census_stop()) {
        if (r.memsets == 0) continue;
        extra += std::string(first ? "" : ", ") + "{\"op\": \"" + r.category + "\", \"shape\": \"" + r.label +
                 "\", \"calls\": " + std::to_string(r.calls) + ", \"kernels\": " + std::to_string(r.kernels) +
                 ", \"memsets\": " + std::to_string(r.memsets) + ", \"memset_bytes\": {";
        bool first_size = true;
        for (const auto& [bytes, n] : r.memset_bytes) {
          extra += std::string(first_size ? "" : ", ") + "\"" + std::to_string(bytes) + "\": " + std::to_string(n);
          first_size = false;
        }
        extra += "}}";
        first = false;
      }
      extra += "]";
    }
    const std::vector<double> stream_rates = rates;
    rates = time_windows([&] {
      for (auto& i : idx) i = next++;
      ops->make_batch(DataKind::Random, 1, idx.data(), cfg.batch, cfg.image_size, cfg.num_classes,
                      m.input(), m.labels());
      ops->replay_step({0.1f, 0});
    });
    const CaptureInfo graph = ops->captured();
    extra += ", \"graph\": true, \"images_per_s_stream\": " +
             std::to_string(stream_rates[stream_rates.size() / 2]) +
             ", \"kernels_per_step\": " + std::to_string(graph.kernels) +
             ", \"graph_memsets\": " + std::to_string(graph.memsets) +
             ", \"graph_memsets_dropped\": " + std::to_string(graph.memsets_dropped) + ", \"graph_copies\": " +
             std::to_string(graph.copies) + ", \"graph_nodes\": " + std::to_string(graph.nodes);
  }
  if (geti(a, "profile", 0) && gops) {
    // In an NVTX range, so that Nsight Compute can time this one step's kernels:
    //   ncu --nvtx --nvtx-include "profiled_step/" ... gpu_model_driver bench --profile 1
    gops->profile_start();
    nvtxRangePushA("profiled_step");
    train_step(false);
    nvtxRangePop();
    const auto prof = gops->profile_stop();
    extra += ", \"breakdown\": [";
    for (size_t i = 0; i < prof.size(); ++i)
      extra += std::string(i ? ", " : "") + "{\"op\": \"" + prof[i].category + "\", \"shape\": \"" +
               prof[i].label + "\", \"calls\": " + std::to_string(prof[i].calls) +
               ", \"ms\": " + std::to_string(prof[i].ms) + "}";
    extra += "]";
  }
  const auto* g = dynamic_cast<const gpu::GpuOps*>(ops.get());
  const float last_loss = m.last_loss();
  // Where the peak went (model, optimizer, backend), bytes, as one JSON object.
  std::string mem = "{";
  auto add = [&](const std::string& k, size_t v) {
    mem += (mem.size() > 1 ? ", \"" : "\"") + k + "\": " + std::to_string(v);
  };
  for (const auto& kv : m.memory_breakdown()) add(kv.first, kv.second);
  add("optimizer state", m.num_params() * 4);
  for (const auto& kv : ops->memory_breakdown()) add(kv.first, kv.second);
  mem += "}";
  std::printf(
      "{\"what\": \"ours\", \"depth\": %d, \"batch\": %d, \"precision\": \"%s\", "
      "\"images_per_s\": %.1f, \"min\": %.1f, \"max\": %.1f, \"first_step_s\": %.2f, "
      "\"peak_bytes\": %zu, \"workspace_bytes\": %zu, \"reserved_bytes\": %zu, \"algo_search_s\": %.2f, "
      "\"first_loss\": %.4f, \"last_loss\": %.4f, \"memory\": %s, \"startup\": %s, \"backend\": \"%s\"%s}\n",
      cfg.depth, cfg.batch, dtype_name(ops->compute_dtype()), rates[rates.size() / 2], rates.front(),
      rates.back(), first_step_s, ops->peak_bytes(), g ? g->workspace_bytes() : size_t(0),
      g ? g->reserved_bytes() : size_t(0), g ? g->algo_search_seconds() : 0.0, double(first_loss),
      double(last_loss), mem.c_str(), startup.c_str(),
      ops->describe().c_str(), extra.c_str());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const auto t_start = Clock::now();
  try {
    if (argc < 2) throw std::invalid_argument("usage: gpu_model_driver step|bench --key value ...");
    const std::string cmd = argv[1];
    const auto a = parse(argc, argv);
    if (cmd == "step") return step(a);
    if (cmd == "bench") return bench(a, t_start);
    throw std::invalid_argument("unknown command " + cmd + " (step, bench)");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpu_model_driver: %s\n", e.what());
    return 1;
  }
}
