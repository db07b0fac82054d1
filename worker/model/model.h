// ResNet v1.5 as torchvision defines it (stride on the bottleneck's 3x3 conv), built once on
// top of the Ops interface, so the same model code runs on every backend. The model is its
// schema (schema.h: layers, state dict), its memory plan (memory_plan.h: where each tensor
// lives) and its passes (resnet.h); this class carves the plan's memory and holds the state.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "worker/core/ops.h"
#include "worker/model/config.h"
#include "worker/model/schema.h"

namespace worker {

class Model {
 public:
  // Throws std::invalid_argument for a bad configuration, ModelTooLarge (before allocating
  // anything) for one beyond the backend's tensor size. With `init_seed`, the initial weights of
  // that seed are drawn on the host while the backend plans and allocates (start-up time): a
  // later init(init_seed) only waits for them and uploads them.
  Model(const ModelConfig& cfg, Ops& ops, std::optional<uint64_t> init_seed = std::nullopt);
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const ModelConfig& config() const;
  const std::vector<StateEntry>& state_entries() const;
  size_t num_params() const;
  size_t num_buffers() const;
  float* params();   // backend memory, fp32 (null without whole_params)
  float* grads();    // backend memory, fp32, same layout as params()
  float* buffers();  // backend memory, fp32 running statistics

  // torchvision's initialisation (Kaiming normal fan_out for convs, BN 1/0, Linear default),
  // deterministic for a seed, identical on every backend (done on the host, then uploaded).
  void init(uint64_t seed);

  // The input of one micro-batch (NHWC images in the compute dtype, int32 labels), allocated
  // by the model; fill them with Ops::make_batch or an upload.
  Act& input();
  int32_t* labels();

  // Training step on the current input: forward, loss, backward. Gradients are ADDED to
  // grads() (scaled by grad_scale). Asynchronous on the backend's stream.
  void forward_backward(float grad_scale = 1.0f);
  // A replay of a captured forward_backward (Ops::replay_step) ran its kernels but not its host
  // side: this counts its training forward (num_batches_tracked), as forward_backward does.
  void count_replayed_forward();
  // Loss of the last forward (synchronizes).
  float last_loss();
  // Logits (n, num_classes) of the last forward, downloaded (synchronizes).
  std::vector<float> last_logits();
  // Forward in eval mode (running statistics); loss available through last_loss().
  void forward_eval();
  // The label smoothing of the loss from now on (ModelConfig::label_smoothing at construction).
  void set_label_smoothing(float e);

  // Called during backward whenever the gradients of [begin, end) of the flat buffer are
  // final for this micro-batch, from the end of the buffer towards the start. Lets the trainer
  // start all-reducing buckets while backward goes on.
  std::function<void(size_t begin, size_t end)> on_grads_ready;

  // Device bytes the model carved, by what they hold, e.g. {"activations kept for backward",
  // 10.7e9} (the memory plan's, MemoryPlan::bytes); the backend's own share is
  // Ops::memory_breakdown().
  std::vector<std::pair<std::string, size_t>> memory_breakdown() const;

  // The 1-D parameters (batch norms' weights and biases, the FC bias), in buffer order.
  std::vector<ParamView> vector_params() const;

  ModelState get_state();               // synchronizes, downloads
  void set_state(const ModelState& s);  // uploads, calls ops.params_updated() (whole_params)
  int64_t num_batches_tracked() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace worker
