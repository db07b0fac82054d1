#include "worker/core/knobs.h"

#include <cmath>
#include <cstdlib>
#include <initializer_list>
#include <string>
#include <utility>

namespace worker {

namespace {

using proto::EnvError;

// The value of `name`, or null when unset or empty.
const std::string* value_of(const proto::EnvMap& env, const char* name) {
  const auto it = env.find(name);
  return it == env.end() || it->second.empty() ? nullptr : &it->second;
}

std::string quoted(const char* name, const std::string& v) { return std::string(name) + "='" + v + "'"; }

bool all_digits(const std::string& v, size_t max_digits) {
  if (v.empty() || v.size() > max_digits) return false;
  for (char c : v)
    if (c < '0' || c > '9') return false;
  return true;
}

// 0 or 1; `what` says what 1 turns on.
void read_flag(const proto::EnvMap& env, const char* name, const char* what, bool* out) {
  const std::string* v = value_of(env, name);
  if (!v) return;
  if (*v != "0" && *v != "1") throw EnvError(quoted(name, *v) + " is not 0 or 1 (" + what + ")");
  *out = *v == "1";
}

// One of the names, each with its value.
template <typename T>
void read_choice(const proto::EnvMap& env, const char* name,
                 std::initializer_list<std::pair<const char*, T>> choices, T* out) {
  const std::string* v = value_of(env, name);
  if (!v) return;
  std::string names;
  for (const auto& [word, value] : choices) {
    if (*v == word) {
      *out = value;
      return;
    }
    names += std::string(names.empty() ? "" : ", ") + word;
  }
  throw EnvError(quoted(name, *v) + " is not one of: " + names);
}

// A positive whole number of MiB (the default is the example the message gives).
void read_mib(const proto::EnvMap& env, const char* name, size_t* out) {
  const std::string* v = value_of(env, name);
  if (!v) return;
  // 12 digits: below 2^44 MiB, so that the byte count cannot overflow.
  if (!all_digits(*v, 12) || std::stoull(*v) == 0)
    throw EnvError(quoted(name, *v) + " is not a positive number of MiB; unset it or give e.g. " +
                   std::to_string(*out));
  *out = size_t(std::stoull(*v));
}

// A whole number in [lo, hi]. With `auto_example` (> 0) also `auto`, which leaves *out (the default,
// resolved where it is used) as it is; the error then offers auto_example.
void read_count(const proto::EnvMap& env, const char* name, int lo, int hi, int* out, int auto_example = 0) {
  const std::string* v = value_of(env, name);
  if (!v || (auto_example > 0 && *v == "auto")) return;
  if (!all_digits(*v, 4) || std::stoi(*v) < lo || std::stoi(*v) > hi)
    throw EnvError(quoted(name, *v) + " is not " + (auto_example > 0 ? "auto or " : "") + "a whole number from " +
                   std::to_string(lo) + " to " + std::to_string(hi) + "; unset it or give e.g. " +
                   std::to_string(auto_example > 0 ? auto_example : *out));
  *out = std::stoi(*v);
}

void read_seconds(const proto::EnvMap& env, const char* name, double* out) {
  const std::string* v = value_of(env, name);
  if (!v) return;
  char* end = nullptr;
  const double s = std::strtod(v->c_str(), &end);
  if (*end != '\0' || !(s > 0) || !std::isfinite(s))
    throw EnvError(quoted(name, *v) + " is not a positive number of seconds");
  *out = s;
}

// "auto" leaves *out (negative: decided elsewhere); else a number in [0, 1].
void read_share(const proto::EnvMap& env, const char* name, double* out) {
  const std::string* v = value_of(env, name);
  if (!v || *v == "auto") return;
  char* end = nullptr;
  const double s = std::strtod(v->c_str(), &end);
  if (*end != '\0' || !(s >= 0.0 && s <= 1.0))
    throw EnvError(quoted(name, *v) + " is not auto or a share between 0 and 1 (e.g. 0.25)");
  *out = s;
}

void read_ms(const proto::EnvMap& env, const char* name, std::chrono::milliseconds* out) {
  const std::string* v = value_of(env, name);
  if (!v) return;
  if (!all_digits(*v, 9)) throw EnvError(quoted(name, *v) + " is not a whole number of milliseconds");
  *out = std::chrono::milliseconds(std::stoll(*v));
}

}  // namespace

Knobs read_knobs(const proto::EnvMap& env) {
  Knobs k;
  read_flag(env, "WORKER_GPU_TF32", "TF32 tensor cores for fp32", &k.gpu_tf32);
  read_choice(env, "WORKER_CUDNN_SEARCH", {{"find", AlgoSearch::Find}, {"heuristic", AlgoSearch::Heuristic}},
              &k.cudnn_search);
  read_mib(env, "WORKER_CUDNN_WORKSPACE_MB", &k.cudnn_workspace_mb);
  read_mib(env, "WORKER_GPU_POOL_CHUNK_MB", &k.gpu_pool_chunk_mb);
  read_flag(env, "WORKER_CONV_S2D", "the stem convolution in space-to-depth form", &k.conv_s2d);
  read_choice(env, "WORKER_CONV_ENGINES", {{"auto", true}, {"legacy", false}}, &k.conv_graph_engines);
  read_count(env, "WORKER_CONV_CANDIDATES", 1, 64, &k.conv_candidates);
  read_count(env, "WORKER_PLAN_THREADS", 1, 64, &k.plan_threads, kAutoPlanThreads);
  read_flag(env, "WORKER_WGRAD_STREAM", "weight gradients on a second stream", &k.wgrad_stream);
  read_flag(env, "WORKER_CUDNN_DETERMINISTIC", "only cuDNN's deterministic algorithms", &k.cudnn_deterministic);
  read_choice(env, "WORKER_FP16_FUSED",
              {{"auto", FusedStats::Timed}, {"0", FusedStats::Off}, {"1", FusedStats::Always}}, &k.fp16_fused);
  read_flag(env, "WORKER_RELU_BITS", "the ReLU mask after a residual add as bits", &k.relu_bits);
  read_flag(env, "WORKER_BN_JOIN", "a projection block's join in one pass", &k.bn_join);
  read_flag(env, "WORKER_CONV_PROLOGUE", "fp16 batch norms applied in the next convolution's prologue",
            &k.conv_prologue);
  read_flag(env, "WORKER_STEM_POOL", "the stem's batch norm pooled as computed", &k.stem_pool);
  read_flag(env, "WORKER_POOL_TILED", "the stem's max-pool backward in 2x2 blocks", &k.pool_tiled);
  read_flag(env, "WORKER_DW_BATCHED", "the weight gradients added to the fp32 gradients in one pass", &k.dw_batched);
  read_flag(env, "WORKER_UNSCALE_ADDS_DW", "the unscale adding the waiting weight gradients", &k.unscale_adds_dw);
  read_flag(env, "WORKER_GRAPH_DROP_ZEROING", "cuDNN's redundant zeroing left out of the captured step",
            &k.graph_drop_zeroing);
  read_seconds(env, "WORKER_NCCL_INIT_TIMEOUT_S", &k.nccl_init_timeout_s);
  read_choice(env, "WORKER_NVJPEG_BACKEND",
              {{"hardware", NvjpegBackend::Hardware}, {"hybrid", NvjpegBackend::Hybrid}}, &k.nvjpeg_backend);
  read_share(env, "WORKER_NVJPEG_CPU_SHARE", &k.nvjpeg_cpu_share);
  read_flag(env, "WORKER_NVJPEG_ROI", "the JPEG engine decoding only the crop's region", &k.nvjpeg_roi);
  read_count(env, "WORKER_DATA_NICE", 0, 19, &k.data_nice, 10);
  read_flag(env, "WORKER_MEM_REPORT", "rank 0 reports where the peak device memory went", &k.mem_report);
  read_ms(env, "WORKER_TEST_SAVE_DELAY_MS", &k.test_save_delay);
  read_ms(env, "WORKER_TEST_STEP_DELAY_MS", &k.test_step_delay);
  return k;
}

const Knobs& process_knobs() {
  static const Knobs knobs = read_knobs(proto::process_env());
  return knobs;
}

}  // namespace worker
