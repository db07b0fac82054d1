// The worker's knobs (worker/core/knobs.h): every knob's default, every knob set, empty values as
// unset, and each kind of bad value named with its variable.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

#include "worker/core/knobs.h"

using namespace worker;
using proto::EnvMap;

namespace {

// The defaults, as docs/environment.md's knob table gives them.
void check_defaults(const Knobs& k) {
  CHECK_FALSE(k.gpu_tf32);
  CHECK(k.cudnn_search == AlgoSearch::Heuristic);
  CHECK(k.cudnn_workspace_mb == 128);
  CHECK(k.gpu_pool_chunk_mb == 1024);
  CHECK(k.conv_s2d);
  CHECK(k.conv_graph_engines);
  CHECK(k.conv_candidates == 5);
  CHECK(k.plan_threads == 0);  // auto
  CHECK(k.wgrad_stream);
  CHECK_FALSE(k.cudnn_deterministic);
  CHECK(k.fp16_fused == FusedStats::Timed);
  CHECK(k.relu_bits);
  CHECK(k.bn_join);
  CHECK(k.conv_prologue);
  CHECK(k.stem_pool);
  CHECK(k.pool_tiled);
  CHECK(k.dw_batched);
  CHECK(k.unscale_adds_dw);
  CHECK(k.graph_drop_zeroing);
  CHECK(k.nccl_init_timeout_s == 300);
  CHECK(k.nvjpeg_backend == NvjpegBackend::Hardware);
  CHECK(k.nvjpeg_cpu_share < 0);  // auto
  CHECK(k.data_nice < 0);         // auto
  CHECK_FALSE(k.nvjpeg_roi);
  CHECK_FALSE(k.mem_report);
  CHECK(k.test_save_delay.count() == 0);
  CHECK(k.test_step_delay.count() == 0);
}

}  // namespace

TEST_CASE("knobs: the defaults when nothing is set", "[knobs]") {
  check_defaults(Knobs{});
  check_defaults(read_knobs({{"PATH", "/usr/bin"}, {"WORKER_HAVE_GPU", "1"}}));  // not knobs: ignored
}

TEST_CASE("knobs: every knob set to its other value", "[knobs]") {
  const Knobs k = read_knobs({
      {"WORKER_GPU_TF32", "1"},
      {"WORKER_CUDNN_SEARCH", "find"},
      {"WORKER_CUDNN_WORKSPACE_MB", "64"},
      {"WORKER_GPU_POOL_CHUNK_MB", "256"},
      {"WORKER_CONV_S2D", "0"},
      {"WORKER_CONV_ENGINES", "legacy"},
      {"WORKER_CONV_CANDIDATES", "64"},
      {"WORKER_PLAN_THREADS", "8"},
      {"WORKER_WGRAD_STREAM", "0"},
      {"WORKER_CUDNN_DETERMINISTIC", "1"},
      {"WORKER_FP16_FUSED", "0"},
      {"WORKER_RELU_BITS", "0"},
      {"WORKER_BN_JOIN", "0"},
      {"WORKER_CONV_PROLOGUE", "0"},
      {"WORKER_STEM_POOL", "0"},
      {"WORKER_POOL_TILED", "0"},
      {"WORKER_DW_BATCHED", "0"},
      {"WORKER_UNSCALE_ADDS_DW", "0"},
      {"WORKER_GRAPH_DROP_ZEROING", "0"},
      {"WORKER_NCCL_INIT_TIMEOUT_S", "2.5"},
      {"WORKER_NVJPEG_BACKEND", "hybrid"},
      {"WORKER_NVJPEG_CPU_SHARE", "0.25"},
      {"WORKER_NVJPEG_ROI", "1"},
      {"WORKER_DATA_NICE", "0"},
      {"WORKER_MEM_REPORT", "1"},
      {"WORKER_TEST_SAVE_DELAY_MS", "1500"},
      {"WORKER_TEST_STEP_DELAY_MS", "20"},
  });
  CHECK(k.gpu_tf32);
  CHECK(k.cudnn_search == AlgoSearch::Find);
  CHECK(k.cudnn_workspace_mb == 64);
  CHECK(k.gpu_pool_chunk_mb == 256);
  CHECK_FALSE(k.conv_s2d);
  CHECK_FALSE(k.conv_graph_engines);
  CHECK(k.conv_candidates == 64);
  CHECK(k.plan_threads == 8);
  CHECK_FALSE(k.wgrad_stream);
  CHECK(k.cudnn_deterministic);
  CHECK(k.fp16_fused == FusedStats::Off);
  CHECK(read_knobs({{"WORKER_FP16_FUSED", "1"}}).fp16_fused == FusedStats::Always);
  CHECK_FALSE(k.relu_bits);
  CHECK_FALSE(k.bn_join);
  CHECK_FALSE(k.conv_prologue);
  CHECK_FALSE(k.stem_pool);
  CHECK_FALSE(k.pool_tiled);
  CHECK_FALSE(k.dw_batched);
  CHECK_FALSE(k.unscale_adds_dw);
  CHECK_FALSE(k.graph_drop_zeroing);
  CHECK(k.nccl_init_timeout_s == 2.5);
  CHECK(k.nvjpeg_backend == NvjpegBackend::Hybrid);
  CHECK(k.nvjpeg_cpu_share == 0.25);
  CHECK(k.nvjpeg_roi);
  CHECK(k.data_nice == 0);
  CHECK(read_knobs({{"WORKER_DATA_NICE", "19"}}).data_nice == 19);
  CHECK(k.mem_report);
  CHECK(k.test_save_delay.count() == 1500);
  CHECK(k.test_step_delay.count() == 20);
}

TEST_CASE("knobs: the default values spelled out, and empty values, read as the defaults", "[knobs]") {
  for (const bool spelled : {true, false}) {
    INFO((spelled ? "spelled out" : "empty"));
    auto v = [&](const char* s) { return spelled ? std::string(s) : std::string(); };
    check_defaults(read_knobs({
        {"WORKER_GPU_TF32", v("0")},
        {"WORKER_CUDNN_SEARCH", v("heuristic")},
        {"WORKER_CUDNN_WORKSPACE_MB", v("128")},
        {"WORKER_GPU_POOL_CHUNK_MB", v("1024")},
        {"WORKER_CONV_S2D", v("1")},
        {"WORKER_CONV_ENGINES", v("auto")},
        {"WORKER_CONV_CANDIDATES", v("5")},
        {"WORKER_PLAN_THREADS", v("auto")},
        {"WORKER_WGRAD_STREAM", v("1")},
        {"WORKER_CUDNN_DETERMINISTIC", v("0")},
        {"WORKER_FP16_FUSED", v("auto")},
        {"WORKER_RELU_BITS", v("1")},
        {"WORKER_BN_JOIN", v("1")},
        {"WORKER_CONV_PROLOGUE", v("1")},
        {"WORKER_STEM_POOL", v("1")},
        {"WORKER_POOL_TILED", v("1")},
        {"WORKER_DW_BATCHED", v("1")},
        {"WORKER_UNSCALE_ADDS_DW", v("1")},
        {"WORKER_GRAPH_DROP_ZEROING", v("1")},
        {"WORKER_NCCL_INIT_TIMEOUT_S", v("300")},
        {"WORKER_NVJPEG_BACKEND", v("hardware")},
        {"WORKER_NVJPEG_CPU_SHARE", v("auto")},
        {"WORKER_NVJPEG_ROI", v("0")},
        {"WORKER_DATA_NICE", v("auto")},
        {"WORKER_MEM_REPORT", v("0")},
        {"WORKER_TEST_SAVE_DELAY_MS", v("0")},
        {"WORKER_TEST_STEP_DELAY_MS", v("0")},
    }));
  }
}

TEST_CASE("knobs: a bad value names the variable, the value and what it takes", "[knobs]") {
  struct Bad {
    const char* name;
    const char* value;
    const char* says;
  };
  const Bad bad[] = {
      {"WORKER_GPU_TF32", "yes", "is not 0 or 1"},
      {"WORKER_CONV_S2D", "2", "is not 0 or 1"},
      {"WORKER_WGRAD_STREAM", "on", "is not 0 or 1"},
      {"WORKER_DW_BATCHED", "yes", "is not 0 or 1"},
      {"WORKER_CUDNN_DETERMINISTIC", "true", "is not 0 or 1"},
      {"WORKER_MEM_REPORT", "01", "is not 0 or 1"},
      {"WORKER_NVJPEG_ROI", "on", "is not 0 or 1"},
      {"WORKER_CUDNN_SEARCH", "fastest", "is not one of: find, heuristic"},
      {"WORKER_CONV_ENGINES", "graph", "is not one of: auto, legacy"},
      {"WORKER_FP16_FUSED", "on", "is not one of: auto, 0, 1"},
      {"WORKER_NVJPEG_BACKEND", "cpu", "is not one of: hardware, hybrid"},
      {"WORKER_NVJPEG_CPU_SHARE", "1.5", "is not auto or a share between 0 and 1"},
      {"WORKER_NVJPEG_CPU_SHARE", "-0.1", "is not auto or a share between 0 and 1"},
      {"WORKER_NVJPEG_CPU_SHARE", "25%", "is not auto or a share between 0 and 1"},
      {"WORKER_NVJPEG_CPU_SHARE", "nan", "is not auto or a share between 0 and 1"},
      {"WORKER_CUDNN_WORKSPACE_MB", "12abc", "is not a positive number of MiB; unset it or give e.g. 128"},
      {"WORKER_CUDNN_WORKSPACE_MB", "0", "is not a positive number of MiB"},
      {"WORKER_CUDNN_WORKSPACE_MB", "-5", "is not a positive number of MiB"},
      {"WORKER_GPU_POOL_CHUNK_MB", "99999999999999", "is not a positive number of MiB; unset it or give e.g. 1024"},
      {"WORKER_CONV_CANDIDATES", "0", "is not a whole number from 1 to 64; unset it or give e.g. 5"},
      {"WORKER_CONV_CANDIDATES", "65", "is not a whole number from 1 to 64"},
      {"WORKER_CONV_CANDIDATES", "8.5", "is not a whole number from 1 to 64"},
      {"WORKER_PLAN_THREADS", "0", "is not auto or a whole number from 1 to 64; unset it or give e.g. 8"},
      {"WORKER_PLAN_THREADS", "many", "is not auto or a whole number from 1 to 64"},
      {"WORKER_DATA_NICE", "20", "is not auto or a whole number from 0 to 19; unset it or give e.g. 10"},
      {"WORKER_DATA_NICE", "-5", "is not auto or a whole number from 0 to 19"},
      {"WORKER_NCCL_INIT_TIMEOUT_S", "0", "is not a positive number of seconds"},
      {"WORKER_NCCL_INIT_TIMEOUT_S", "5s", "is not a positive number of seconds"},
      {"WORKER_NCCL_INIT_TIMEOUT_S", "inf", "is not a positive number of seconds"},
      {"WORKER_NCCL_INIT_TIMEOUT_S", "nan", "is not a positive number of seconds"},
      {"WORKER_TEST_SAVE_DELAY_MS", "-1", "is not a whole number of milliseconds"},
      {"WORKER_TEST_STEP_DELAY_MS", "1.5", "is not a whole number of milliseconds"},
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
  setenv("WORKER_GPU_POOL_CHUNK_MB", std::to_string(was + 1).c_str(), 1);
  CHECK(read_knobs(proto::process_env()).gpu_pool_chunk_mb == was + 1);
  CHECK(&process_knobs() == &first);
  CHECK(process_knobs().gpu_pool_chunk_mb == was);  // not read again
  unsetenv("WORKER_GPU_POOL_CHUNK_MB");
}
