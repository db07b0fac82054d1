// The worker's knobs (worker/core/knobs.h): every knob's default, every knob set, empty values as
// unset, and each kind of bad value named with its variable.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

#include "worker/core/knobs.h"

using namespace worker;
using proto::EnvMap;

TEST_CASE("knobs: the defaults when nothing is set", "[knobs]") {
  const Knobs k = read_knobs({{"PATH", "/usr/bin"}, {"WORKER_HAVE_GPU", "1"}});  // not knobs: ignored
  CHECK_FALSE(k.gpu_tf32);
  CHECK(k.cudnn_search == AlgoSearch::Heuristic);
  CHECK(k.cudnn_workspace_mb == 512);
  CHECK(k.gpu_pool_chunk_mb == 1024);
  CHECK(k.conv_s2d);
  CHECK(k.conv_graph_engines);
  CHECK(k.wgrad_stream);
  CHECK_FALSE(k.cudnn_deterministic);
  CHECK(k.nccl_init_timeout_s == 300);
  CHECK(k.nvjpeg_backend == NvjpegBackend::Hardware);
  CHECK_FALSE(k.mem_report);
  CHECK(k.test_save_delay.count() == 0);
  CHECK(k.test_step_delay.count() == 0);
}

TEST_CASE("knobs: every knob set to its other value", "[knobs]") {
  const Knobs k = read_knobs({
      {knob::kGpuTf32, "1"},
      {knob::kCudnnSearch, "find"},
      {knob::kCudnnWorkspaceMb, "64"},
      {knob::kGpuPoolChunkMb, "256"},
      {knob::kConvS2d, "0"},
      {knob::kConvEngines, "legacy"},
      {knob::kWgradStream, "0"},
      {knob::kCudnnDeterministic, "1"},
      {knob::kNcclInitTimeoutS, "2.5"},
      {knob::kNvjpegBackend, "hybrid"},
      {knob::kMemReport, "1"},
      {knob::kTestSaveDelayMs, "1500"},
      {knob::kTestStepDelayMs, "20"},
  });
  CHECK(k.gpu_tf32);
  CHECK(k.cudnn_search == AlgoSearch::Find);
  CHECK(k.cudnn_workspace_mb == 64);
  CHECK(k.gpu_pool_chunk_mb == 256);
  CHECK_FALSE(k.conv_s2d);
  CHECK_FALSE(k.conv_graph_engines);
  CHECK_FALSE(k.wgrad_stream);
  CHECK(k.cudnn_deterministic);
  CHECK(k.nccl_init_timeout_s == 2.5);
  CHECK(k.nvjpeg_backend == NvjpegBackend::Hybrid);
  CHECK(k.mem_report);
  CHECK(k.test_save_delay.count() == 1500);
  CHECK(k.test_step_delay.count() == 20);
}

TEST_CASE("knobs: the default values spelled out, and empty values, read as the defaults", "[knobs]") {
  const Knobs d;
  for (const bool spelled : {true, false}) {
    INFO((spelled ? "spelled out" : "empty"));
    auto v = [&](const char* s) { return spelled ? std::string(s) : std::string(); };
    const Knobs k = read_knobs({
        {knob::kGpuTf32, v("0")},
        {knob::kCudnnSearch, v("heuristic")},
        {knob::kCudnnWorkspaceMb, v("512")},
        {knob::kGpuPoolChunkMb, v("1024")},
        {knob::kConvS2d, v("1")},
        {knob::kConvEngines, v("auto")},
        {knob::kWgradStream, v("1")},
        {knob::kCudnnDeterministic, v("0")},
        {knob::kNcclInitTimeoutS, v("300")},
        {knob::kNvjpegBackend, v("hardware")},
        {knob::kMemReport, v("0")},
        {knob::kTestSaveDelayMs, v("0")},
        {knob::kTestStepDelayMs, v("0")},
    });
    CHECK(k.gpu_tf32 == d.gpu_tf32);
    CHECK(k.cudnn_search == d.cudnn_search);
    CHECK(k.cudnn_workspace_mb == d.cudnn_workspace_mb);
    CHECK(k.gpu_pool_chunk_mb == d.gpu_pool_chunk_mb);
    CHECK(k.conv_s2d == d.conv_s2d);
    CHECK(k.conv_graph_engines == d.conv_graph_engines);
    CHECK(k.wgrad_stream == d.wgrad_stream);
    CHECK(k.cudnn_deterministic == d.cudnn_deterministic);
    CHECK(k.nccl_init_timeout_s == d.nccl_init_timeout_s);
    CHECK(k.nvjpeg_backend == d.nvjpeg_backend);
    CHECK(k.mem_report == d.mem_report);
    CHECK(k.test_save_delay == d.test_save_delay);
    CHECK(k.test_step_delay == d.test_step_delay);
  }
}

TEST_CASE("knobs: a bad value names the variable, the value and what it takes", "[knobs]") {
  struct Bad {
    const char* name;
    const char* value;
    const char* says;
  };
  const Bad bad[] = {
      {knob::kGpuTf32, "yes", "is not 0 or 1"},
      {knob::kConvS2d, "2", "is not 0 or 1"},
      {knob::kWgradStream, "on", "is not 0 or 1"},
      {knob::kCudnnDeterministic, "true", "is not 0 or 1"},
      {knob::kMemReport, "01", "is not 0 or 1"},
      {knob::kCudnnSearch, "fastest", "is not one of: find, heuristic"},
      {knob::kConvEngines, "graph", "is not one of: auto, legacy"},
      {knob::kNvjpegBackend, "cpu", "is not one of: hardware, hybrid"},
      {knob::kCudnnWorkspaceMb, "12abc", "is not a positive number of MiB; unset it or give e.g. 512"},
      {knob::kCudnnWorkspaceMb, "0", "is not a positive number of MiB"},
      {knob::kCudnnWorkspaceMb, "-5", "is not a positive number of MiB"},
      {knob::kGpuPoolChunkMb, "99999999999999", "is not a positive number of MiB; unset it or give e.g. 1024"},
      {knob::kNcclInitTimeoutS, "0", "is not a positive number of seconds"},
      {knob::kNcclInitTimeoutS, "5s", "is not a positive number of seconds"},
      {knob::kNcclInitTimeoutS, "inf", "is not a positive number of seconds"},
      {knob::kNcclInitTimeoutS, "nan", "is not a positive number of seconds"},
      {knob::kTestSaveDelayMs, "-1", "is not a whole number of milliseconds"},
      {knob::kTestStepDelayMs, "1.5", "is not a whole number of milliseconds"},
  };
  for (const Bad& b : bad) {
    INFO(b.name << "=" << b.value);
    CHECK_THROWS_AS(read_knobs({{b.name, b.value}}), proto::EnvError);
    CHECK_THROWS_WITH(read_knobs({{b.name, b.value}}),
                      Catch::StartsWith(std::string(b.name) + "='" + b.value + "' ") && Catch::Contains(b.says));
  }
}

TEST_CASE("knobs: the process's knobs are read once, from its environment", "[knobs]") {
  const Knobs& first = process_knobs();
  CHECK(first.gpu_pool_chunk_mb == read_knobs(proto::process_env()).gpu_pool_chunk_mb);
  const size_t was = first.gpu_pool_chunk_mb;
  setenv(knob::kGpuPoolChunkMb, std::to_string(was + 1).c_str(), 1);
  CHECK(read_knobs(proto::process_env()).gpu_pool_chunk_mb == was + 1);
  CHECK(&process_knobs() == &first);
  CHECK(process_knobs().gpu_pool_chunk_mb == was);  // not read again
  unsetenv(knob::kGpuPoolChunkMb);
}
