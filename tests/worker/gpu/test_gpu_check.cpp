// Host-side parts of the GPU backend that need no GPU (they run in CI): the error messages of
// the check macros and the backend's options from the knobs.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

#include "worker/core/knobs.h"
#include "worker/gpu/check.h"
#include "worker/gpu/gpu_options.h"

using worker::gpu::GpuError;

namespace {

std::string message_of(void (*f)()) {
  try {
    f();
  } catch (const GpuError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("check macros name the call, the place, the rank and the host", "[gpu_host]") {
  // where() reads the contract once, at the first error; rank 3 must be below the world size.
  setenv("PADDLE_TRAINER_ID", "3", 1);
  setenv("PADDLE_TRAINERS_NUM", "4", 1);
  const std::string m = message_of([] { CUDA_CHECK(cudaErrorInvalidValue); });
  CHECK_THAT(m, Catch::Contains("cudaErrorInvalidValue"));
  CHECK_THAT(m, Catch::Contains("test_gpu_check.cpp:"));
  CHECK_THAT(m, Catch::Contains("rank 3 on host "));
  CHECK_THAT(message_of([] { CUDNN_CHECK(CUDNN_STATUS_BAD_PARAM); }),
             Catch::Contains("cuDNN error") && Catch::Contains("CUDNN_STATUS_BAD_PARAM"));
  CHECK_THAT(message_of([] { CUBLAS_CHECK(CUBLAS_STATUS_INVALID_VALUE); }),
             Catch::Contains("CUBLAS_STATUS_INVALID_VALUE"));
  CHECK_THAT(message_of([] { NCCL_CHECK(ncclInvalidArgument); }),
             Catch::Contains("NCCL error") && Catch::Contains("ncclInvalidArgument"));
  // ncclInProgress is how a non-blocking communicator says "not yet": not an error.
  CHECK(message_of([] { NCCL_CHECK(ncclInProgress); }).empty());
}

TEST_CASE("out of memory says how much was asked for and what to do", "[gpu_host]") {
  try {
    worker::gpu::throw_oom(size_t(3) << 30, size_t(1) << 30, "pool.cpp", 7);
    FAIL("no exception");
  } catch (const GpuError& e) {
    CHECK(e.kind() == GpuError::Kind::OutOfMemory);
    CHECK_THAT(e.what(), Catch::Contains("3072.0 MiB") && Catch::Contains("--batch-size") &&
                             Catch::Contains("1024.0 MiB already in the pool"));
  }
  const std::string m = message_of([] { CUDA_CHECK(cudaErrorMemoryAllocation); });
  CHECK_THAT(m, Catch::Contains("out of memory") && Catch::Contains("--batch-size"));
}

TEST_CASE("the backend's options come from the knobs", "[gpu_host]") {
  const worker::gpu::GpuOptions d;  // the defaults: the knobs' defaults
  auto o = worker::gpu::gpu_options(worker::Knobs{}, 1, worker::DType::F32);
  CHECK(o.device == 1);
  CHECK(o.precision == worker::DType::F32);
  CHECK(o.search == worker::AlgoSearch::Heuristic);
  CHECK(o.search == d.search);
  CHECK_FALSE(o.allow_tf32);
  CHECK(o.workspace_limit == size_t(128) << 20);
  CHECK(o.workspace_limit == d.workspace_limit);
  CHECK(o.pool_chunk == d.pool_chunk);
  CHECK(o.space_to_depth == d.space_to_depth);
  CHECK(o.graph_engines == d.graph_engines);
  CHECK(o.deterministic == d.deterministic);
  CHECK(o.wgrad_stream == d.wgrad_stream);
  CHECK(o.fused_stats == worker::FusedStats::Timed);
  CHECK(o.fused_stats == d.fused_stats);
  const worker::Knobs k = worker::read_knobs({{"WORKER_GPU_TF32", "1"},
                                              {"WORKER_CUDNN_SEARCH", "find"},
                                              {"WORKER_CUDNN_WORKSPACE_MB", "64"},
                                              {"WORKER_GPU_POOL_CHUNK_MB", "128"},
                                              {"WORKER_CONV_S2D", "0"},
                                              {"WORKER_CONV_ENGINES", "legacy"},
                                              {"WORKER_WGRAD_STREAM", "0"},
                                              {"WORKER_CUDNN_DETERMINISTIC", "1"},
                                              {"WORKER_FP16_FUSED", "0"}});
  o = worker::gpu::gpu_options(k, 0, worker::DType::BF16);
  CHECK(o.precision == worker::DType::BF16);
  CHECK(o.allow_tf32);
  CHECK(o.search == worker::AlgoSearch::Find);
  CHECK(o.workspace_limit == size_t(64) << 20);
  CHECK(o.pool_chunk == size_t(128) << 20);
  CHECK_FALSE(o.space_to_depth);
  CHECK_FALSE(o.graph_engines);
  CHECK(o.deterministic);
  CHECK_FALSE(o.wgrad_stream);
  CHECK(o.fused_stats == worker::FusedStats::Off);
}
