// The end-of-run report (worker/train/report.h) from plain values: the lines rank 0 prints, the
// final metrics record, the memory breakdown, the checksums' verdict, the summary line.
#include <catch2/catch.hpp>

#include <chrono>
#include <sstream>
#include <string>
#include <thread>

#include "worker/train/report.h"

using namespace worker;

namespace {

RunFigures two_ranks() {
  RunFigures f;
  f.world = 2;
  f.steps = 20;
  f.images_per_s = 1234.56;
  f.total_s = 12.34;
  f.peak_bytes = 1500000000;
  f.peak_bytes_max_rank = 2500000000;
  f.recompute = "none";
  f.fp32_weight_bytes = 400;
  f.time = 15.0;
  return f;
}

std::string printed(const RunFigures& f) {
  std::ostringstream out;
  print_run_figures(out, f);
  return out.str();
}

}  // namespace

TEST_CASE("report: rank 0's lines from the run's figures", "[train][report]") {
  RunFigures f = two_ranks();
  CHECK(printed(f) ==
        "Throughput: 1234.6 images/s (2 rank(s), 20 steps, first step excluded), total 12.3 s\n"
        "Peak device memory: 1.50 GB (rank 0, 1500000000 bytes), 2.50 GB (largest over 2 ranks)\n");
  f.eval_s = 2.0;
  f.loss_scaling = true;
  f.loss_scale = 1024.0f;
  f.skipped_steps = 3;
  f.zero = true;
  f.optimizer_bytes_max_rank = 5000000;
  f.optimizer_bytes_unsharded = 10000000;
  f.comm = RunFigures::CommTime{4, 10.0, 2.0};
  const std::string s = printed(f);
  CHECK_THAT(s, Catch::Contains("first step and validation excluded), total 12.3 s (validation 2.0 s)\n"));
  CHECK_THAT(s, Catch::Contains("fp16 loss scaling: scale 1024, 3 step(s) skipped for inf/NaN gradients\n"));
  CHECK_THAT(s, Catch::Contains("Optimizer state: 5.0 MB per rank (largest of 2; unsharded 10.0 MB)\n"));
  CHECK_THAT(s, Catch::Contains("Reduce-scatter: 2.50 ms per step on the communication stream, 0.50 ms of it after "
                                "backward ended (not overlapped), 4 steps\n"));
  // No step taken (a run resumed at its end): no throughput; one rank: no largest.
  RunFigures none;
  CHECK(printed(none) == "Peak device memory: 0.00 GB (rank 0, 0 bytes)\n");
}

TEST_CASE("report: the final metrics record", "[train][report]") {
  RunFigures f = two_ranks();
  f.zero_option = 1;
  f.skipped_images = 7;
  nlohmann::json j = final_record(f);
  CHECK(j["final"] == true);
  CHECK(j["steps"] == 20);
  CHECK(j["world"] == 2);
  CHECK(j["zero"] == 1);
  CHECK(j["skipped_images"] == 7);
  CHECK(j["peak_bytes_max_rank"] == 2500000000u);
  CHECK(j["time"] == 15.0);
  CHECK_FALSE(j.contains("allreduce_ms"));
  CHECK_FALSE(j.contains("first_step_s"));  // no step taken
  f.comm = RunFigures::CommTime{4, 10.0, 2.0};
  f.first_step_s = 1.75;
  j = final_record(f);
  CHECK(j["allreduce_ms"] == 2.5);
  CHECK(j["allreduce_exposed_ms"] == 0.5);
  CHECK(j["first_step_s"] == 1.75);
}

TEST_CASE("report: the Start-up line adds the parts up from the process's start", "[train][report]") {
  StartupFigures f;
  f.to_session = 0.75;
  f.data = 0.01;
  f.model = 0.5;
  f.weights = 0.25;
  f.first_step = 0.3;
  f.backend = {{"context", 0.5}, {"algorithms", 0.45}};
  CHECK(f.total() == Approx(1.81));
  CHECK(startup_line(f) ==
        "Start-up: the first step ended 1.81 s after the process started (to the training session 0.75, data 0.01, "
        "model 0.50, weights 0.25, first step 0.30; the backend's parts: context 0.50, algorithms 0.45)");
  // Without the process's start time (no /proc) the count starts at the session's, and a backend
  // without parts to tell (the CPU) names none.
  f.to_session = -1.0;
  f.backend.clear();
  CHECK(f.total() == Approx(1.06));
  CHECK(startup_line(f) ==
        "Start-up: the first step ended 1.06 s after the training session began (data 0.01, model 0.50, "
        "weights 0.25, first step 0.30)");
}

TEST_CASE("report: the process's age comes from the kernel's record of its start", "[train][report]") {
  // This test process started before the test ran and, under ctest, less than an hour ago; the
  // age grows with the clock.
  const double a = seconds_since_process_start();
  REQUIRE(a >= 0.0);
  CHECK(a < 3600.0);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(seconds_since_process_start() >= a + 0.04);
}

TEST_CASE("report: the memory breakdown names what no one claims as other", "[train][report]") {
  std::ostringstream out;
  print_memory(out, {{"weights", 1000000}, {"optimizer state", 2000000}, {"pool reserved, not handed out", 500000}},
               4000000);
  CHECK(out.str() ==
        "Memory (rank 0, 4.0 MB peak):\n"
        "  weights: 1.0 MB\n"
        "  optimizer state: 2.0 MB\n"
        "  other: 1.0 MB\n"
        "  (pool overhead: 0.5 MB reserved beyond the peak)\n");
}

TEST_CASE("report: the checksums' verdict names the ranks that differ", "[train][report]") {
  ParamChecksum a, b;
  const float x[3] = {1, 2, 3}, y[3] = {1, 2, 4};
  a.add(x, 3);
  b.add(y, 3);
  CHECK(differing_ranks({a, a, a}, a).empty());
  CHECK(differing_ranks({a, b, a, b}, a) == "1, 3");
  CHECK(checksum_verdict(3, "") == "Checksums: all 3 rank(s) agree");
  CHECK(checksum_verdict(4, "1, 3") == "Checksums: ranks 1, 3 DIFFER from rank 0");
}

TEST_CASE("report: the summary line", "[train][report]") {
  RunSummary s;
  s.steps = 100;
  s.total_s = 3725.4;
  s.images_per_s = 99.95;
  CHECK(summary_line(s) == "Summary: 100 steps in 1:02:05, 100.0 images/s");
  s.best_top1 = 71.234;
  s.last_top1 = 70.5;
  s.best_epoch = 3;
  s.checkpoint = "run/ckpt";
  s.best_weights = "run/ckpt.best";
  s.tensorboard = "tb/events.out";
  s.skipped_images = 2;
  CHECK(summary_line(s) ==
        "Summary: 100 steps in 1:02:05, 100.0 images/s; validation top-1 best 71.23 % (epoch 3), last 70.50 %; "
        "checkpoint run/ckpt, best run/ckpt.best; TensorBoard tb/events.out; 2 unreadable image read(s) skipped "
        "(all ranks)");
  CHECK(hms(59.6) == "0:01:00");
}
