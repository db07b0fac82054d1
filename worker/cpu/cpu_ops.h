// The CPU backend: fp32 NHWC kernels, convolution as im2col + Eigen GEMM, OpenMP threads.
// Internal to worker/cpu; everyone else goes through worker::make_cpu_ops (backend.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "worker/core/ops.h"

namespace worker {
namespace cpu {

class CpuOps final : public Ops {
 public:
  explicit CpuOps(int threads);
  ~CpuOps() override;

  DeviceKind device() const override { return DeviceKind::Cpu; }
  DType compute_dtype() const override { return DType::F32; }
  std::string describe() const override;
  std::string step_capture_unsupported() const override { return "the CPU backend has no graphs"; }
  int threads() const { return threads_; }
  // Upper bound on the im2col buffer per chunk of images, in floats (tests shrink it to force
  // one image per chunk).
  void set_column_budget(size_t floats) { column_budget_ = floats; }

  void* alloc(size_t bytes) override;
  void upload(void* dst, const void* host_src, size_t bytes) override;
  void download(void* host_dst, const void* src, size_t bytes) override;
  void zero(void* dst, size_t bytes) override;
  size_t peak_bytes() const override { return pool_bytes_ + workspace_.size() * sizeof(float); }

  void bind_params(float* params, float* grads, size_t count) override;
  void register_conv(const ConvDesc& d, ParamView w) override;
  void params_updated() override {}

  void conv_forward(const ConvDesc& d, const Act& x, ParamView w, Act& y) override;
  void conv_backward(const ConvDesc& d, const Act& x, ParamView w, const Act& dy, Act* dx,
                     bool accumulate_dx, ParamView dw) override;
  void bn_forward_train(const BnDesc& d, const Act& x, ParamView gamma, ParamView beta,
                        float* running_mean, float* running_var, float* save_mean,
                        float* save_invstd, const Act* residual, bool relu, Act& y) override;
  void bn_forward_eval(const BnDesc& d, const Act& x, ParamView gamma, ParamView beta,
                       const float* running_mean, const float* running_var, const Act* residual,
                       bool relu, Act& y) override;
  void bn_backward(const BnDesc& d, const Act& x, const Act& y, const Act& dy, ParamView gamma,
                   const float* save_mean, const float* save_invstd, bool relu, Act& dx,
                   Act* dresidual, ParamView dgamma, ParamView dbeta, const Act* dy2 = nullptr) override;
  void maxpool_forward(const PoolDesc& d, const Act& x, Act& y) override;
  void maxpool_backward(const PoolDesc& d, const Act& x, const Act& y, const Act& dy,
                        Act& dx) override;
  void avgpool_forward(const Act& x, Act& y) override;
  void avgpool_backward(const Act& dy, Act& dx) override;
  void fc_forward(const Act& x, ParamView w, ParamView b, int out, float* logits) override;
  void fc_backward(const Act& x, ParamView w, const float* dlogits, int out, Act& dx,
                   ParamView dw, ParamView db) override;
  void softmax_xent(int n, int classes, const float* logits, const int32_t* labels,
                    float grad_scale, float label_smoothing, float* loss, float* dlogits) override;
  void make_batch(DataKind kind, uint64_t seed, const int64_t* host_indices, int n,
                  int image_size, int classes, Act& images, int32_t* labels) override;
  void scale_grads(float s) override;
  bool grads_finite() override;
  void sgd_step(float lr, float momentum, float weight_decay, float* momentum_buf,
                bool first_step, bool nesterov, const uint8_t* decay_mask,
                ParamView range = {}) override;
  void adam_step(float lr, float beta1, float beta2, float eps, float weight_decay, int64_t step,
                 float* m, float* v, const uint8_t* decay_mask,
                 ParamView range = {}) override;
  void synchronize() override {}

 private:
  // Images per im2col chunk of a conv, bounded so the column buffer stays cache/memory friendly.
  int conv_chunk(const ConvDesc& d) const;
  // Per-channel sums over the rows of an (m, c) matrix, in double, summed by `threads_` threads:
  // s1[c] = sum f1(row, c), s2[c] = sum f2(row, c). See cpu_norm.cpp.
  std::vector<double>& partials(size_t n);

  int threads_ = 1;
  std::vector<void*> blocks_;
  size_t pool_bytes_ = 0;
  float* params_ = nullptr;
  float* grads_ = nullptr;
  size_t count_ = 0;
  size_t column_budget_ = size_t(8) << 20;  // 32 MiB: GEMMs of hundreds of rows, little memory
  std::vector<float> workspace_;   // im2col columns (and their gradient), sized at register_conv
  std::vector<double> partials_;   // per-thread reduction scratch
};

// The factory behind make_cpu_ops (which first checks the CPU; see cpu_backend.cpp).
std::unique_ptr<Ops> make_cpu_ops_impl(int threads);

// Validates that a tensor's shape is what the descriptor says (a programming error otherwise).
void check_act(const Act& a, int n, int h, int w, int c, const char* what);

}  // namespace cpu
}  // namespace worker
