// The trainer's captured step (--cuda-graph, issue 13) against its uncaptured step: the same
// run (init, data, schedule, optimizer) trained with the graph and without it must end in the
// same weights, batch-norm statistics and optimizer state. The captured optimizer reads lr and
// Adam's bias corrections from device memory before each replay, so a learning rate that
// changes every step (warm-up, then cosine) is what this checks; a frozen lr would be off by
// far more than any rounding.
//
// Both runs launch the same kernels, so they must agree bit for bit, provided a run is
// reproducible at all: cuDNN is limited to its deterministic algorithms and the timed
// graph-API engine choice is off (it can differ between runs). The batch norms still add block
// partials into double accumulators with atomics; should that ever make two uncaptured runs
// differ, the graph may differ from the first run by what the second one does (x4), and the
// message says so.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "tests/temp_dir.h"
#include "tests/worker/loss_scale_scenario.h"
#include "worker/core/backend.h"
#include "worker/comm/comm.h"
#include "worker/model/safetensors.h"
#include "worker/gpu/gpu_ops.h"
#include "worker/train/checkpoint.h"
#include "worker/train/trainer.h"

namespace {

using namespace worker;
using testing_support::TempDir;

struct Run {
  std::string log;
  std::vector<StTensor> tensors;  // weights + buffers, then the optimizer's state
  std::vector<std::string> loss_scales;  // fp16: the metrics file's loss_scale after every step (log_every 1)
};

// Every "loss_scale" value of a metrics file, as written.
std::vector<std::string> loss_scales(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> v;
  const std::string key = "\"loss_scale\":";
  for (std::string line; std::getline(in, line);) {
    const size_t at = line.find(key);
    if (at == std::string::npos) continue;
    const size_t from = at + key.size(), to = line.find_first_of(",}", from);
    v.push_back(line.substr(from, to - from));
  }
  return v;
}

TrainOptions recipe(OptimizerKind kind) {
  TrainOptions o;
  o.depth = 18;
  o.width = 16;
  o.image_size = 32;
  o.num_classes = 10;
  o.batch_size = 16;
  o.data = DataSourceKind::Learnable;
  o.num_samples = 16 * 12;  // 12 steps per epoch: 2 warm-up, 1 capturing, then replays
  o.epochs = 1;
  o.seed = 7;
  o.optimizer = kind;
  o.lr = kind == OptimizerKind::Sgd ? 0.2 : 2e-3;
  o.momentum = 0.9;
  o.weight_decay = 5e-4;
  o.no_wd_on_bn_bias = true;  // a decay mask too
  o.lr_schedule = LrScheduleKind::Cosine;
  o.warmup_epochs = 0.25;     // 3 warm-up steps, then cosine: lr differs every step
  o.log_every = 1;            // the loss read back after every replay
  return o;
}

// reproducible: cuDNN's deterministic algorithms, no timed engine choice (it can differ between runs).
// expect_steps: the steps this run makes (default: every step of --epochs).
// hooks: fp16's loss scale forced to move (TestHooks).
Run train_once(TrainOptions o, DType precision, CudaGraph graph, const std::string& dir, const std::string& tag,
               bool reproducible = true, int64_t expect_steps = -1, const TestHooks& hooks = {}) {
  o.cuda_graph = graph;
  o.save = dir + "/" + tag + ".safetensors";
  o.metrics_file = dir + "/" + tag + ".jsonl";
  gpu::GpuOptions g;
  g.precision = precision;
  g.graph_engines = !reproducible;
  g.deterministic = reproducible;
  gpu::GpuOps ops(g);
  std::unique_ptr<Comm> comm = make_single_process_comm();
  std::ostringstream log;
  const TrainResult r = train(o, DataEnv{}, ops, *comm, log, Requests{}, hooks);
  REQUIRE(r.steps == (expect_steps >= 0 ? expect_steps : o.epochs * (o.num_samples / o.batch_size)));
  Run run{log.str(), read_safetensors(o.save), loss_scales(o.metrics_file)};
  for (StTensor& t : read_safetensors(train_state_path(o.save))) run.tensors.push_back(std::move(t));
  return run;
}

// The largest |a - b| over every float tensor, and where.
double max_diff(const Run& a, const Run& b, std::string* where) {
  REQUIRE(a.tensors.size() == b.tensors.size());
  double worst = 0;
  for (size_t k = 0; k < a.tensors.size(); ++k) {
    const StTensor &x = a.tensors[k], &y = b.tensors[k];
    REQUIRE(x.name == y.name);
    REQUIRE(x.data.size() == y.data.size());
    if (x.dtype != "F32") {
      CHECK(x.data == y.data);  // num_batches_tracked
      continue;
    }
    const size_t n = x.data.size() / 4;
    for (size_t i = 0; i < n; ++i) {
      float u, v;
      std::memcpy(&u, x.data.data() + 4 * i, 4);
      std::memcpy(&v, y.data.data() + 4 * i, 4);
      const double d = std::isnan(u) || std::isnan(v) ? INFINITY : std::fabs(double(u) - double(v));
      if (d > worst) {
        worst = d;
        *where = x.name + "[" + std::to_string(i) + "]: " + std::to_string(u) + " vs " + std::to_string(v);
      }
    }
  }
  return worst;
}

// The log's validation lines (top-1, top-5, loss): evaluation runs uncaptured between replays.
std::vector<std::string> validations(const std::string& log) {
  std::vector<std::string> v;
  std::istringstream in(log);
  for (std::string line; std::getline(in, line);)
    if (line.rfind("Validation: epoch", 0) == 0) v.push_back(line.substr(0, line.find(" images")));
  return v;
}

// A resumed run against the uninterrupted one: bit for bit, or only as far as two uninterrupted
// runs differ (`again` trains one more).
void check_resumed(const Run& whole, const Run& resumed, const std::function<Run()>& again, const char* what) {
  std::string where;
  const double d = max_diff(whole, resumed, &where);
  if (d == 0) {
    std::printf("test_train_graph: %s resumed under the graph: bit-identical to the uninterrupted run (%zu tensors)\n",
                what, whole.tensors.size());
    return;
  }
  const Run other = again();
  std::string where_ref;
  const double spread = max_diff(whole, other, &where_ref);
  INFO("resumed vs uninterrupted: " << d << " at " << where << "; two uninterrupted runs: " << spread << " at "
                                    << where_ref);
  CHECK(spread > 0);
  CHECK(d <= 4 * spread);
}

// The report's fp16 line, "fp16 loss scaling: scale S, N step(s) skipped for inf/NaN gradients"
// (empty without it), and N.
std::string scaling_line(const std::string& log) {
  const size_t at = log.find("fp16 loss scaling: scale ");
  return at == std::string::npos ? "" : log.substr(at, log.find('\n', at) - at);
}
long skipped_in(const std::string& line) {
  const size_t comma = line.find(", ");
  return comma == std::string::npos ? -1 : std::stol(line.substr(comma + 2));
}

void compare(const TrainOptions& o, DType precision, const TestHooks& hooks = {}) {
  const OptimizerKind kind = o.optimizer;
  const TempDir td("test_train_graph");
  const std::string& dir = td.path;
  const int64_t all = -1;
  const Run off = train_once(o, precision, CudaGraph::Off, dir, "off", true, all, hooks);
  const Run on = train_once(o, precision, CudaGraph::On, dir, "on", true, all, hooks);
  INFO("graph run's log:\n" << on.log);
  // The graph really ran: captured at the third step, after the warm-up.
  CHECK_THAT(off.log, Catch::Contains("Step: uncaptured (--cuda-graph off)"));
  CHECK_THAT(on.log, Catch::Contains("Step: one CUDA graph (--cuda-graph on)"));
  CHECK_THAT(on.log, Catch::Contains("Step 2: captured as one CUDA graph"));
  CHECK(validations(on.log).size() == (o.val_samples > 0 ? size_t(o.epochs) : 0));
  CHECK(validations(on.log) == validations(off.log));
  // fp16: the same scale after every step, the same skipped steps at the end (both read from the device).
  CHECK(on.loss_scales == off.loss_scales);
  CHECK(scaling_line(on.log) == scaling_line(off.log));
  std::string where;
  const double d = max_diff(off, on, &where);
  if (d == 0) {
    std::printf("test_train_graph: %s %s: bit-identical (%zu tensors)\n", to_string(kind), dtype_name(precision),
                on.tensors.size());
    return;
  }
  // Not bit for bit: allowed only as far as two uncaptured runs differ from each other.
  const Run again = train_once(o, precision, CudaGraph::Off, dir, "again", true, all, hooks);
  std::string where_ref;
  const double spread = max_diff(off, again, &where_ref);
  INFO("graph vs uncaptured: max |diff| " << d << " at " << where << "; uncaptured vs uncaptured: " << spread
                                          << " at " << where_ref);
  std::printf("test_train_graph: %s %s: graph differs by %g, two uncaptured runs by %g\n", to_string(kind),
              dtype_name(precision), d, spread);
  CHECK(spread > 0);  // else the graph changed the result
  CHECK(d <= 4 * spread);
}

}  // namespace

TEST_CASE("captured and uncaptured steps train alike: SGD momentum, warm-up + cosine, bf16, validation between",
          "[gpu][train][graph]") {
  TrainOptions o = recipe(OptimizerKind::Sgd);
  o.epochs = 2;  // an evaluation (uncaptured) between the replays of epoch 0 and those of epoch 1
  o.val_samples = 40;  // the last validation batch is partial
  compare(o, DType::BF16);
}

TEST_CASE("captured and uncaptured steps train alike: Adam, warm-up + cosine, bf16, blocks recomputed",
          "[gpu][train][graph]") {
  TrainOptions o = recipe(OptimizerKind::Adam);
  o.recompute = Recompute::Block;
  compare(o, DType::BF16);
}

TEST_CASE("captured and uncaptured steps train alike: SGD momentum, fp32", "[gpu][train][graph]") {
  compare(recipe(OptimizerKind::Sgd), DType::F32);
}

TEST_CASE("a graph run stopped and resumed equals the uninterrupted graph run: Adam, warm-up + cosine, bf16",
          "[gpu][train][graph]") {
  // The replays skip the host's counts (Adam's step, num_batches_tracked) and the schedule's lr
  // reaches the graph through device memory: all of it must come back from the checkpoint, and the
  // resumed run warms up again before it captures its own graph.
  TrainOptions o = recipe(OptimizerKind::Adam);
  o.epochs = 2;  // 24 steps
  const TempDir td("test_train_graph");
  const std::string& dir = td.path;
  const Run whole = train_once(o, DType::BF16, CudaGraph::On, dir, "whole");
  TrainOptions first = o;
  first.max_steps = 17;  // in epoch 1, after 14 replays
  const Run part = train_once(first, DType::BF16, CudaGraph::On, dir, "part", true, 17);
  TrainOptions rest = o;
  rest.resume = dir + "/part.safetensors";
  const Run resumed = train_once(rest, DType::BF16, CudaGraph::On, dir, "rest", true, 24 - 17);
  INFO("resumed run's log:\n" << resumed.log);
  CHECK_THAT(part.log, Catch::Contains("Step 2: captured as one CUDA graph"));
  CHECK_THAT(resumed.log, Catch::Contains("Resuming from") && Catch::Contains("at step 17"));
  CHECK_THAT(resumed.log, Catch::Contains("Step 19: captured as one CUDA graph"));
  check_resumed(whole, resumed, [&] { return train_once(o, DType::BF16, CudaGraph::On, dir, "again"); }, "bf16");
}

TEST_CASE("with the timed convolution engines (the default) the step is captured and replays to the end",
          "[gpu][train][graph]") {
  TrainOptions o = recipe(OptimizerKind::Sgd);
  o.num_samples = 16 * 70;  // the capture comes within kMaxWarmupSteps (60)
  const TempDir td("test_train_graph");
  const std::string& dir = td.path;
  const Run on = train_once(o, DType::BF16, CudaGraph::On, dir, "engines", false);
  INFO(on.log);
  const size_t at = on.log.find(": captured as one CUDA graph");
  REQUIRE(at != std::string::npos);
  const size_t from = on.log.rfind("Step ", at) + 5;
  const long step = std::stol(on.log.substr(from, at - from));
  std::printf("test_train_graph: timed engines: captured at step %ld\n", step);
  // After the warm-up, and no later than its bound whatever the tuning does (a build without
  // cudnn-frontend has nothing to tune: step 2).
  CHECK(step >= kMinWarmupSteps);
  CHECK(step <= kMaxWarmupSteps);
}

// --- fp16: loss scaling decided on the device, inside the graph (issue 24)

namespace {

// A first scale far too large for fp16's activation gradients (the first steps overflow and are
// skipped, halving it) and a growth interval of 2 (the scale doubles after two clean steps until it
// overflows again): over 24 steps the scale moves both ways, within the warm-up and in the replays.
TestHooks moving_scale() {
  TestHooks h;
  h.loss_scale = 16777216.0f;  // 2^24
  h.loss_scale_growth_interval = 2;
  return h;
}

void compare_fp16(OptimizerKind kind) {
  TrainOptions o = recipe(kind);
  o.epochs = 2;  // 24 steps
  const TempDir td("test_train_graph_fp16");
  const Run off = train_once(o, DType::F16, CudaGraph::Off, td.path, "off", true, -1, moving_scale());
  const std::string line = scaling_line(off.log);
  INFO("uncaptured run's log:\n" << off.log);
  REQUIRE_FALSE(line.empty());
  const long skipped = skipped_in(line);
  std::string seq;
  for (const std::string& v : off.loss_scales) seq += " " + v;
  std::printf("test_train_graph: %s fp16: %s; the scale after each step:%s\n", to_string(kind), line.c_str(),
              seq.c_str());
  CHECK(skipped > 0);   // some steps overflowed and were skipped ...
  CHECK(skipped < 24);  // ... and some applied
  CHECK_THAT(off.log, Catch::Contains("fp16 loss scaling decided on the device"));
  // Where the graph replays (steps 3 on, after the capturing step 2) the scale both backs off (a
  // skipped replay) and grows (applied replays): what the graph must decide on its own.
  REQUIRE(off.loss_scales.size() == 24);
  bool backs_off = false, grows = false;
  for (size_t k = 3; k < off.loss_scales.size(); ++k) {
    const double was = std::stod(off.loss_scales[k - 1]), now = std::stod(off.loss_scales[k]);
    backs_off |= now < was;
    grows |= now > was;
  }
  CHECK(backs_off);
  CHECK(grows);
  compare(o, DType::F16, moving_scale());  // captured vs uncaptured, bit for bit, scale and skipped included
}

}  // namespace

TEST_CASE("fp16 with loss scaling: captured and uncaptured steps train alike through skipped steps: SGD momentum",
          "[gpu][train][graph][fp16]") {
  compare_fp16(OptimizerKind::Sgd);
}

TEST_CASE("fp16 with loss scaling: captured and uncaptured steps train alike through skipped steps: Adam",
          "[gpu][train][graph][fp16]") {
  compare_fp16(OptimizerKind::Adam);
}

TEST_CASE("fp16 graph run stopped and resumed equals the uninterrupted graph run: the device's scale comes back",
          "[gpu][train][graph][fp16]") {
  TrainOptions o = recipe(OptimizerKind::Adam);
  o.epochs = 2;
  const TempDir td("test_train_graph_fp16");
  const std::string& dir = td.path;
  const Run whole = train_once(o, DType::F16, CudaGraph::On, dir, "whole", true, -1, moving_scale());
  TrainOptions first = o;
  first.max_steps = 17;
  const Run part = train_once(first, DType::F16, CudaGraph::On, dir, "part", true, 17, moving_scale());
  TrainOptions rest = o;
  rest.resume = dir + "/part.safetensors";
  const Run resumed = train_once(rest, DType::F16, CudaGraph::On, dir, "rest", true, 24 - 17, moving_scale());
  INFO("resumed run's log:\n" << resumed.log);
  CHECK_THAT(resumed.log, Catch::Contains("Step 19: captured as one CUDA graph"));
  CHECK(scaling_line(resumed.log) == scaling_line(whole.log));  // scale and skipped steps, restored and continued
  REQUIRE(whole.loss_scales.size() == 24);
  CHECK(resumed.loss_scales == std::vector<std::string>(whole.loss_scales.begin() + 17, whole.loss_scales.end()));
  check_resumed(
      whole, resumed, [&] { return train_once(o, DType::F16, CudaGraph::On, dir, "again", true, -1, moving_scale()); },
      "fp16");
}

TEST_CASE("the device's loss scaling kernels follow LossScaler, skip without a trace, and count applied steps",
          "[gpu][fp16]") {
  for (const bool adam : {false, true}) {
    INFO((adam ? "adam" : "sgd"));
    gpu::GpuOptions g;
    g.precision = DType::F16;
    gpu::GpuOps gpu_ops(g);
    const testing::LossScaleRun on_gpu = testing::run_loss_scale_scenario(gpu_ops, adam);
    // The CPU's host default, the oracle, through the same steps: the same states; the parameters
    // as close as two fp32 implementations of one formula (both checked against double above).
    std::unique_ptr<Ops> cpu = make_cpu_ops(1);
    const testing::LossScaleRun on_cpu = testing::run_loss_scale_scenario(*cpu, adam);
    REQUIRE(on_gpu.states.size() == on_cpu.states.size());
    for (size_t k = 0; k < on_gpu.states.size(); ++k) {
      CHECK(on_gpu.states[k].scale == on_cpu.states[k].scale);
      CHECK(on_gpu.states[k].growth_tracker == on_cpu.states[k].growth_tracker);
      CHECK(on_gpu.states[k].skipped == on_cpu.states[k].skipped);
      for (size_t i = 0; i < on_gpu.params[k].size(); ++i)
        CHECK(on_gpu.params[k][i] == Approx(on_cpu.params[k][i]).epsilon(1e-6).margin(1e-7));
    }
  }
}

TEST_CASE("one fp16 optimizer step captured with its loss scaling replays the uncaptured steps bit for bit",
          "[gpu][graph][fp16]") {
  // The backend alone, without the model: the gradients are put in place before each step (an inf
  // where the scenario's verdict is false), then unscale, update and the optimizer, uncaptured in
  // one run and, in the other, captured at step 2 and replayed after; lr changes every step.
  for (const bool adam : {false, true}) {
    INFO((adam ? "adam" : "sgd"));
    const std::vector<bool>& verdicts = testing::scenario_verdicts();
    auto run = [&](bool graph) {
      gpu::GpuOptions g;
      g.precision = DType::F16;
      gpu::GpuOps ops(g);
      testing::DeviceFloats params(ops, {0.5f, -1.0f, 2.0f, 0.0f}), grads(ops, std::vector<float>(4, 0.0f));
      testing::DeviceFloats buf(ops, std::vector<float>(4, 0.0f)), m(ops, std::vector<float>(4, 0.0f)),
          v(ops, std::vector<float>(4, 0.0f));
      ops.bind_params(params.p, grads.p, 4);
      LossScaler rules(2);
      ops.set_loss_scale(rules.rules(), {1024.0f, 0, 0}, 0);
      std::vector<std::vector<float>> out;
      float scale = 1024.0f;
      for (size_t k = 0; k < verdicts.size(); ++k) {
        std::vector<float> gk{0.1f, 0.2f, -0.3f, 1e-3f};
        for (float& x : gk) x *= scale;
        if (!verdicts[k]) gk[2] = -std::numeric_limits<float>::infinity();
        grads.set(gk);
        const StepValues sv{0.1f / float(k + 1), int64_t(k) + 1};
        auto body = [&] {
          ops.unscale_grads(1.0f);
          ops.update_loss_scale();
          if (adam)
            ops.adam_step(sv.lr, 0.9f, 0.999f, 1e-8f, 0.01f, sv.step, m.p, v.p, nullptr);
          else
            ops.sgd_step(sv.lr, 0.9f, 0.01f, buf.p, false, false, nullptr);
        };
        if (!graph || k < 2)
          body();
        else if (k == 2)
          ops.capture_step(body);
        else
          ops.replay_step(sv);
        scale = ops.loss_scale().scale;
        std::vector<float> row = params.get();
        for (const auto* t : {&buf, &m, &v})
          for (float x : t->get()) row.push_back(x);
        row.push_back(scale);
        out.push_back(row);
      }
      return out;
    };
    const auto plain = run(false), captured = run(true);
    REQUIRE(plain.size() == captured.size());
    for (size_t k = 0; k < plain.size(); ++k) {
      INFO("step " << k);
      CHECK(testing::same_bits(plain[k], captured[k]));
    }
    CHECK(plain.back() != plain.front());  // it trained
  }
}
