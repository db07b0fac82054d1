#include <catch2/catch.hpp>

#include <string>

#include "worker/train/step_capture.h"

using worker::capture_due;
using worker::CaptureFacts;
using worker::CudaGraph;
using worker::plan_step_capture;
using worker::UsageError;

namespace {

CaptureFacts gpu_one_rank() { return {"", 1, 1}; }

std::string refusal(const CaptureFacts& f) {
  try {
    plan_step_capture(CudaGraph::On, f);
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("auto captures one GPU rank's step of one micro-batch, fp16's loss scaling included", "[train][graph]") {
  CHECK(plan_step_capture(CudaGraph::Auto, gpu_one_rank()).capture);
  CHECK(plan_step_capture(CudaGraph::On, gpu_one_rank()).capture);
  const auto off = plan_step_capture(CudaGraph::Off, gpu_one_rank());
  CHECK_FALSE(off.capture);
  CHECK(off.why == "--cuda-graph off");
  // fp16 is no obstacle (its loss scaling decides on the device); the start-up line says so.
  const auto on = plan_step_capture(CudaGraph::On, gpu_one_rank());
  CHECK_THAT(worker::describe_capture(CudaGraph::On, on, true),
             Catch::StartsWith("Step: one CUDA graph (--cuda-graph on)") &&
                 Catch::Contains("fp16 loss scaling decided on the device, inside the graph"));
  CHECK_THAT(worker::describe_capture(CudaGraph::On, on, false), !Catch::Contains("loss scaling"));
  CHECK_THAT(worker::describe_capture(CudaGraph::Off, off, true),
             Catch::Contains("uncaptured (--cuda-graph off)") && Catch::Contains("decided on the device"));
}

TEST_CASE("auto stays uncaptured, and says why, where a graph cannot hold the step", "[train][graph]") {
  CaptureFacts cpu = gpu_one_rank();
  cpu.backend_unsupported = "the CPU backend has no graphs";
  CaptureFacts ranks = gpu_one_rank();
  ranks.world = 2;
  CaptureFacts accum = gpu_one_rank();
  accum.accum_steps = 4;
  const std::pair<CaptureFacts, const char*> cases[] = {
      {cpu, "the CPU backend has no graphs"}, {ranks, "2 ranks"}, {accum, "--accum-steps 4"}};
  for (const auto& [facts, reason] : cases) {
    const auto plan = plan_step_capture(CudaGraph::Auto, facts);
    CHECK_FALSE(plan.capture);
    CHECK_THAT(plan.why, Catch::Contains(reason));
    CHECK_THAT(worker::describe_capture(CudaGraph::Auto, plan), Catch::Contains("uncaptured") && Catch::Contains(reason));
    // on: refused at start-up, naming the obstacle and the way out.
    CHECK_THAT(refusal(facts), Catch::Contains("--cuda-graph on") && Catch::Contains(reason) &&
                                   Catch::Contains("--cuda-graph auto or off"));
  }
}

TEST_CASE("the capture waits for the warm-up and for the backend's tuning, within a bound", "[train][graph]") {
  CHECK_FALSE(capture_due(0, false));
  CHECK_FALSE(capture_due(worker::kMinWarmupSteps - 1, false));
  CHECK(capture_due(worker::kMinWarmupSteps, false));
  CHECK_FALSE(capture_due(worker::kMinWarmupSteps, true));
  CHECK_FALSE(capture_due(worker::kMaxWarmupSteps - 1, true));
  CHECK(capture_due(worker::kMaxWarmupSteps, true));
}
