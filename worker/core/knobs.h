// The worker's own knobs: every WORKER_* environment variable train_resnet reads, in ONE typed
// table, each with its variable, default and meaning beside it. read_knobs() is the one parser
// and the only place that spells the variables (pure: a name -> value map in, the struct out; it
// throws proto::EnvError naming the variable and its bad value); process_knobs() reads the
// process's environment once. An empty value counts as unset. docs/environment.md lists every
// knob (ctest docs.environment checks that, that this table and the parser name the same
// variables, and that no worker source names a WORKER_* variable that is not a knob).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>

#include "proto/worker_env.h"

namespace worker {

// How convolution algorithms are chosen, once per shape: cuDNN's heuristics (the default: on
// an H200, ResNet-50 bf16 batch 256 ran 6,320 images/s with them against 6,018 with the timed
// search, and reached its first step in 2.4 s instead of 9.6 s) or a timed search
// (cudnnFind*Ex, as torch.backends.cudnn.benchmark).
enum class AlgoSearch : uint8_t { Find, Heuristic };

// fp16: a convolution whose output feeds a training batch norm may write that batch norm's fp32 sums in
// its epilogue (cuDNN's conv+genstats), and the batch norm then skips its statistics pass (docs/gpu.md).
enum class FusedStats : uint8_t {
  Off,     // never
  Timed,   // per shape, where timing on the first calls finds it faster than the plain convolution and
           // the statistics pass together
  Always,  // wherever an engine builds it, untimed (comparisons and tests)
};

// Which nvJPEG back end the GPU JPEG loader decodes with.
enum class NvjpegBackend : uint8_t {
  Hardware,  // the hardware decode engine where the GPU has one, else the GPU hybrid back end
  Hybrid,    // the GPU hybrid back end always (for comparisons)
};

struct Knobs {
  // --- The GPU backend (worker/gpu/gpu_options.h)
  bool gpu_tf32 = false;  // WORKER_GPU_TF32=0|1: TF32 tensor cores for fp32 convolutions and the FC
  AlgoSearch cudnn_search = AlgoSearch::Heuristic;  // WORKER_CUDNN_SEARCH=heuristic|find
  // WORKER_CUDNN_WORKSPACE_MB: the most one convolution's workspace may take. 128: on an H200
  // (ResNet-50 b256, 2026-12-02) fp16 ran as fast as with 512 (medians of 3: 8,982 and 8,977
  // images/s) with a peak 0.41 GB lower, bf16 at 64 as at 512 (8,616 and 8,635).
  size_t cudnn_workspace_mb = 128;
  size_t gpu_pool_chunk_mb = 1024;  // WORKER_GPU_POOL_CHUNK_MB: each device-memory chunk of the pool
  bool conv_s2d = true;  // WORKER_CONV_S2D=0|1: the stem convolution (3 channels) in space-to-depth form
  // WORKER_CONV_ENGINES=auto|legacy: bf16/fp16 convolutions may run on cuDNN graph-API engines,
  // timed on the first calls; legacy: the legacy API's plans only.
  bool conv_graph_engines = true;
  // WORKER_CONV_CANDIDATES=N (1-64): graph-API plans timed per convolution shape and direction
  // besides the legacy plan (the heuristics' first N that build).
  int conv_candidates = 5;
  // WORKER_PLAN_THREADS=auto|N (1-64): host threads that ask cuDNN's heuristics for the model's
  // convolution shapes at start-up (each with a handle of its own); 1: one after another on the
  // backend's thread; auto (0 here): kAutoPlanThreads, at most the cores the process may run on.
  int plan_threads = 0;
  bool wgrad_stream = true;  // WORKER_WGRAD_STREAM=0|1: backward's weight gradients on a second stream
  bool cudnn_deterministic = false;  // WORKER_CUDNN_DETERMINISTIC=0|1: only cuDNN's deterministic algorithms
  FusedStats fp16_fused = FusedStats::Timed;  // WORKER_FP16_FUSED=auto|0|1: fp16 conv+genstats (1: always)
  bool relu_bits = true;  // WORKER_RELU_BITS=0|1: after a residual add, the backward's ReLU mask as bits
  bool bn_join = true;    // WORKER_BN_JOIN=0|1: a projection block's two batch norms and its join in one pass
  // WORKER_CONV_PROLOGUE=0|1: fp16, a block's batch norm + ReLU applied as the next convolution reads
  // its input (cuDNN's fused prologue), where timing chooses it
  bool conv_prologue = true;
  bool stem_pool = true;  // WORKER_STEM_POOL=0|1: the stem's batch norm + ReLU pooled as computed, not stored
  bool pool_tiled = true;  // WORKER_POOL_TILED=0|1: the stem's max-pool backward a 2x2 block of inputs per thread
  // WORKER_DW_BATCHED=0|1: bf16/fp16 weight gradients added to the fp32 gradients in one pass, not each alone
  bool dw_batched = true;
  // WORKER_UNSCALE_ADDS_DW=0|1: fp16 loss scaling's unscale adds the waiting weight gradients in its own pass
  bool unscale_adds_dw = true;
  bool graph_drop_zeroing = true;  // WORKER_GRAPH_DROP_ZEROING=0|1: cuDNN's zeroing of slots already zero left out of the graph
  // --- The NCCL communicator
  double nccl_init_timeout_s = 300;  // WORKER_NCCL_INIT_TIMEOUT_S: how long every rank has to join
  // --- The GPU JPEG loader
  NvjpegBackend nvjpeg_backend = NvjpegBackend::Hardware;  // WORKER_NVJPEG_BACKEND=hardware|hybrid
  // WORKER_NVJPEG_CPU_SHARE=auto|S (0 <= S <= 1): the share of each batch the GPU loader's reader
  // threads decode on the CPU beside nvJPEG; auto (negative here): the cost model's
  // (worker/data/loader_choice.h).
  double nvjpeg_cpu_share = -1.0;
  // WORKER_NVJPEG_ROI=0|1: the hardware engine decodes only the region each image's crop reads (off until
  // measured on a GPU: worker/gpu/NOTES.md, 2026-12-08)
  bool nvjpeg_roi = false;
  // --- Both image loaders
  // WORKER_DATA_NICE=auto|N (0..19): the reader threads' nice increment; auto (negative here):
  // kGpuDataNice beside the GPU backend, 0 on the CPU (worker/data/image_source.h)
  int data_nice = -1;
  // --- The trainer
  bool mem_report = false;  // WORKER_MEM_REPORT=0|1: rank 0 prints where the peak device memory went
  std::chrono::milliseconds test_save_delay{0};  // WORKER_TEST_SAVE_DELAY_MS (tests): before each checkpoint write
  std::chrono::milliseconds test_step_delay{0};  // WORKER_TEST_STEP_DELAY_MS (tests): after each step
};

// WORKER_PLAN_THREADS=auto: on an H100 with 16 cores (2026-12-07), 8 threads took ResNet-50's
// heuristics from 0.60 to 0.26 s of its 1.72 s to the first step.
inline constexpr int kAutoPlanThreads = 8;

// Pure: the knobs `env` sets over the defaults. Throws proto::EnvError naming the variable, its
// value and what it takes.
Knobs read_knobs(const proto::EnvMap& env);

// read_knobs(proto::process_env()), read at the first call (train_resnet makes it at start-up,
// so that a bad value is reported before any work) and kept for the process's life.
const Knobs& process_knobs();

}  // namespace worker
