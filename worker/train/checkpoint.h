// Checkpoints of a training run: two safetensors files written by rank 0.
//   PATH                      the model's weights and batch-norm buffers, torchvision's names
//                             (loads into torchvision.models.resnetNN() with strict=True);
//   PATH minus ".safetensors" plus ".train.safetensors" (or PATH + ".train.safetensors")
//                             the optimizer state (flat fp32, the internal layout), the step,
//                             the epoch and batch to continue from, and the settings the data
//                             order depends on (seed, data, sample count, global batch).
// Both carry the step in their metadata. A save is a two-phase commit: both files are written
// completely under temporary names (PATH.pending, each itself written as PATH.pending.tmp.XXXXXX
// and renamed), then the training state is renamed into place (the commit point), then the
// weights. A save killed before the commit point leaves the previous pair intact; one killed
// between the two renames is completed at the next start (recover_interrupted_save).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "worker/model/model.h"
#include "worker/train/options.h"

namespace worker {

struct TrainState {
  int64_t step = 0;      // optimizer steps taken
  int64_t epoch = 0;     // where to continue: epoch ...
  int64_t batch = 0;     // ... and step index within its segment (sampler.h) ...
  int64_t segment_start = 0;  // ... which starts at this sample of the epoch (0 unless resized)
  uint64_t seed = 0;
  OptimizerKind optimizer = OptimizerKind::Adam;
  std::string data;      // the data source's name ("random", "learnable")
  int64_t num_samples = 0;
  int64_t global_batch = 0;  // world * batch * accum
  int world = 0;             // the ranks that saved it (0: not recorded, a checkpoint before issue 21)
  int64_t replicas = 0;      // world * accum, the sampler's replicas (0: not recorded)
  // fp16 loss scaling (LossScaler): scale 0 when the run does not scale; `skipped` optimizer
  // steps make the optimizer's own step count (Adam's bias correction) lag `step`.
  float loss_scale = 0.0f;
  int64_t loss_scale_growth_tracker = 0;
  int64_t skipped_steps = 0;
  double best_top1 = -1.0;   // --save-best: the best validation top-1 so far (percent; -1: none)
  // The optimizer's buffers by name (optimizer_buffer_names: "exp_avg", "momentum_buffer", ...),
  // flat fp32 in the internal layout; stored as "optimizer.<name>".
  std::map<std::string, std::vector<float>> optimizer_state;
};

// Throws UsageError naming the first setting in which this run (`now`) differs from the one
// that wrote the checkpoint at `path` (`saved`) such that it could not continue it.
void check_resume_compatible(const std::string& path, const TrainState& saved, const TrainState& now);

std::string train_state_path(const std::string& weights_path);
// Creates the folder that will hold `path` (mkdir -p), so `--save ckpt/run1` works from a fresh
// directory; throws naming the folder when it cannot.
void ensure_parent_dir(const std::string& path);
bool checkpoint_exists(const std::string& weights_path);  // both files present
std::string best_weights_path(const std::string& save);  // ckpt.safetensors -> ckpt.best.safetensors

// `extra`: more metadata of the weights file (the evaluation transform, architecture.h).
void save_checkpoint(const std::string& path, const Model& model, const ModelState& state,
                     const TrainState& train, const std::map<std::string, std::string>& extra = {});

// --- Start-up checks of --save (rank 0, before anything is trained)

// Throws UsageError when `path` (or its training state's path) is a directory, or when its
// folder cannot be created or written (tried with a probe file, removed at once).
void check_save_path(const std::string& path);
// Cleans up after a killed save of `path`: removes PATH.tmp.*, PATH.pending* and the same of
// the training state and of PATH.best, and completes a save killed between its two renames.
// Returns one line per thing done, for the log.
std::vector<std::string> recover_interrupted_save(const std::string& path);
// The checkpoint --resume names: "" (start afresh), the path, or for "auto" --save's path when
// its weights or training state exist; a checkpoint with only one of the two is refused.
std::string resume_source(const std::string& resume, const std::string& save);
// The weights alone (--save-best): torchvision's names; `step` and `extra` in the metadata.
void write_weights(const std::string& path, const Model& model, const ModelState& state, int64_t step,
                   const std::map<std::string, std::string>& extra = {});
// Weights only (--init). Errors name the file and the tensor.
ModelState load_weights(const std::string& path, const Model& model);
// Weights and training state (--resume). Errors name the file and the tensor.
void load_checkpoint(const std::string& path, const Model& model, ModelState* state, TrainState* train);

}  // namespace worker
