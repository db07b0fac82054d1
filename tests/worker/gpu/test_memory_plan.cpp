// The model's device-memory plan for the benchmark configuration (ResNet-50, batch 256, bf16),
// computed without a GPU: an Ops that only hands out addresses and counts bytes. The figures
// are the ones the trainer's WORKER_MEM_REPORT prints on the GPU for the model's share; they
// guard the savings against PyTorch's 11.8 GB peak (docs/memory.md).
#include <catch2/catch.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "worker/core/model.h"

namespace {

using namespace worker;

// Hands out distinct, never dereferenced addresses; the model is only built, never run.
class CountingOps final : public Ops {
 public:
  explicit CountingOps(DType t, int64_t max_elements = INT64_MAX) : dtype_(t), max_elements_(max_elements) {}
  int64_t max_tensor_elements() const override { return max_elements_; }
  DeviceKind device() const override { return DeviceKind::Gpu; }
  DType compute_dtype() const override { return dtype_; }
  std::string describe() const override { return "counting"; }
  void* alloc(size_t bytes) override {
    const size_t need = (bytes + 255) & ~size_t(255);
    void* p = reinterpret_cast<void*>(next_);
    next_ += need;
    used_ += need;
    return p;
  }
  void upload(void*, const void*, size_t) override {}
  void download(void*, const void*, size_t) override {}
  void zero(void*, size_t) override {}
  size_t peak_bytes() const override { return used_; }
  void bind_params(float*, float*, size_t) override {}
  void register_conv(const ConvDesc&, ParamView) override {}
  void params_updated() override {}
  void conv_forward(const ConvDesc&, const Act&, ParamView, Act&) override {}
  void conv_backward(const ConvDesc&, const Act&, ParamView, const Act&, Act*, bool, ParamView) override {}
  void bn_forward_train(const BnDesc&, const Act&, ParamView, ParamView, float*, float*, float*, float*,
                        const Act*, bool, Act&) override {}
  void bn_forward_eval(const BnDesc&, const Act&, ParamView, ParamView, const float*, const float*,
                       const Act*, bool, Act&) override {}
  void bn_backward(const BnDesc&, const Act&, const Act&, const Act&, ParamView, const float*, const float*,
                   bool, Act&, Act*, ParamView, ParamView, const Act*) override {}
  void maxpool_forward(const PoolDesc&, const Act&, Act&) override {}
  void maxpool_backward(const PoolDesc&, const Act&, const Act&, const Act&, Act&) override {}
  void avgpool_forward(const Act&, Act&) override {}
  void avgpool_backward(const Act&, Act&) override {}
  void fc_forward(const Act&, ParamView, ParamView, int, float*) override {}
  void fc_backward(const Act&, ParamView, const float*, int, Act&, ParamView, ParamView) override {}
  void softmax_xent(int, int, const float*, const int32_t*, float, float, float*, float*) override {}
  void make_batch(DataKind, uint64_t, const int64_t*, int, int, int, Act&, int32_t*) override {}
  void scale_grads(float) override {}
  bool grads_finite() override { return true; }
  void sgd_step(float, float, float, float*, bool, bool, const uint8_t*, ParamView) override {}
  void adam_step(float, float, float, float, float, int64_t, float*, float*, const uint8_t*, ParamView) override {}
  void synchronize() override {}

 private:
  DType dtype_;
  int64_t max_elements_;
  uintptr_t next_ = 4096;
  size_t used_ = 0;
};

std::map<std::string, double> plan_gb(int depth, int batch, DType t, Recompute mode = Recompute::None) {
  CountingOps ops(t);
  ModelConfig cfg;
  cfg.depth = depth;
  cfg.batch = batch;
  cfg.recompute = mode;
  Model m(cfg, ops);
  std::map<std::string, double> gb;
  double total = 0;
  for (const auto& kv : m.memory_breakdown()) {
    gb[kv.first] = double(kv.second) / 1e9;
    total += double(kv.second);
  }
  gb["total"] = total / 1e9;
  gb["peak"] = double(ops.peak_bytes()) / 1e9;
  return gb;
}

}  // namespace

TEST_CASE("ResNet-50 bf16 batch 256: the model's memory plan", "[gpu_host][memory]") {
  const auto gb = plan_gb(50, 256, DType::BF16);
  std::string all;
  for (const auto& kv : gb) all += kv.first + ": " + std::to_string(kv.second) + " GB; ";
  INFO(all);
  // Every allocation is attributed (the breakdown adds up to what the model carved).
  CHECK(gb.at("total") == Approx(gb.at("peak")).epsilon(1e-6));
  // Conv and BN outputs in bf16 minus the downsample BN outputs (written into the block outputs):
  // 11.48 GB - 0.77 GB.
  CHECK(gb.at("activations kept for backward") == Approx(10.71).margin(0.02));
  // Activation gradients live in dead activations; the scratch only holds the gradient of the
  // top block's output (256 x 7 x 7 x 2048 bf16) and the average pool's (instead of three
  // buffers of the largest activation: 1.23 GB).
  CHECK(gb.at("activation-gradient scratch") == Approx(0.0524).margin(0.002));
  CHECK(gb.at("params fp32") == Approx(0.1022).margin(0.001));
  // With the backend's share (bf16 shadow 0.05, cuDNN workspace ~0.21, cuBLAS 0.03) and SGD's
  // momentum (0.10): about 11.45 GB, under PyTorch's 11.8 GB.
  CHECK(gb.at("total") < 11.1);
}

TEST_CASE("ResNet-18 fp32: the stem's gradient goes to the scratch (no dead activation fits)", "[gpu_host][memory]") {
  const auto gb = plan_gb(18, 32, DType::F32);
  // 32 x 112 x 112 x 64 fp32 (bn1's output gradient) is the largest gradient without a home.
  CHECK(gb.at("activation-gradient scratch") == Approx(32.0 * 112 * 112 * 64 * 4 / 1e9).margin(0.001));
}

TEST_CASE("recompute: what each mode keeps (ResNet-50 and -152, bf16, batch 256)", "[gpu_host][memory]") {
  const auto bn = plan_gb(50, 256, DType::BF16, Recompute::Bn);
  const auto block = plan_gb(50, 256, DType::BF16, Recompute::Block);
  for (const auto* gb : {&bn, &block}) {
    std::string all;
    for (const auto& kv : *gb) all += kv.first + ": " + std::to_string(kv.second) + " GB; ";
    INFO(all);
    CHECK(gb->at("total") == Approx(gb->at("peak")).epsilon(1e-6));
  }
  const double mb = 256.0 * 2 / 1e9;  // one bf16 channel of a 1x1 map over the batch, in GB
  // Bn: bn1's output (112x112x64) and each block's inner BN outputs go; one buffer of the largest
  // of them (bn1's, 0.41 GB) takes their place: 10.71 - 2.09 kept, 0.41 shared.
  CHECK(bn.at("recomputed activations (shared)") == Approx(112 * 112 * 64 * mb).margin(0.001));
  CHECK(bn.at("activations kept for backward") == Approx(8.62).margin(0.02));
  // Block: the pool output and the 16 block outputs are kept (3 x 56x56x256, 4 x 28x28x512,
  // 6 x 14x14x1024, 3 x 7x7x2048, + 56x56x64, + the average pool's 2048), the largest segment is layer1.0's (its four
  // 56x56x64 inner tensors, the 56x56x256 last conv and downsample outputs).
  const double outputs = (3 * 56 * 56 * 256 + 4 * 28 * 28 * 512 + 6 * 14 * 14 * 1024 + 3 * 7 * 7 * 2048 + 56 * 56 * 64 + 2048) * mb;
  CHECK(block.at("activations kept for backward") == Approx(outputs).margin(0.001));
  CHECK(block.at("recomputed activations (shared)") == Approx((4 * 56 * 56 * 64 + 2 * 56 * 56 * 256) * mb).margin(0.001));
  // The activation gradients still live in dead tensors: the scratch is the top output's.
  CHECK(block.at("activation-gradient scratch") == Approx(0.0524).margin(0.002));
  // 4.50 GB for the model; with the backend's ~0.3 GB and the optimizer under half of PyTorch's 11.8.
  CHECK(block.at("total") < 4.6);
  // ResNet-152 (3, 8, 36, 3 blocks): the same rule; the largest segment is layer1.0's again.
  const auto block152 = plan_gb(152, 256, DType::BF16, Recompute::Block);
  const double outputs152 =
      (3 * 56 * 56 * 256 + 8 * 28 * 28 * 512 + 36 * 14 * 14 * 1024 + 3 * 7 * 7 * 2048 + 56 * 56 * 64 + 2048) * mb;
  CHECK(block152.at("activations kept for backward") == Approx(outputs152).margin(0.001));
  CHECK(block152.at("recomputed activations (shared)") == Approx((4 * 56 * 56 * 64 + 2 * 56 * 56 * 256) * mb).margin(0.001));
  CHECK(block152.at("total") == Approx(block152.at("peak")).epsilon(1e-6));
}

TEST_CASE("a batch beyond cuDNN's 2^31 elements per tensor is refused before anything is allocated", "[gpu_host][memory]") {
  // ResNet-50 at 224 px: conv1's output holds 64 x 112 x 112 = 802,816 values per image, so
  // 2,674 images are the most one tensor of 2^31 - 1 elements holds (the GPU backend's limit).
  {
    CountingOps ops(DType::BF16, INT32_MAX);
    ModelConfig c;
    c.batch = 2674;
    CHECK_NOTHROW(Model(c, ops));
  }
  CountingOps ops(DType::BF16, INT32_MAX);
  ModelConfig c;
  c.batch = 2675;
  try {
    Model m(c, ops);
    FAIL("batch 2675 was accepted");
  } catch (const ModelTooLarge& e) {
    CHECK_THAT(e.what(), Catch::Contains("batch 2675") && Catch::Contains("at most 2674"));
    CHECK(ops.peak_bytes() == 0);
  }
}
