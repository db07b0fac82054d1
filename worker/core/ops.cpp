// dtype helpers shared by every backend, the defaults of a backend without step capture, and fp16
// loss scaling kept on the host (the default of a backend that does not keep it in its own memory).
#include "worker/core/ops.h"

#include <stdexcept>
#include <string>

namespace worker {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::BF16: return 2;
    case DType::F16: return 2;
  }
  return 0;
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "fp32";
    case DType::BF16: return "bf16";
    case DType::F16: return "fp16";
  }
  return "?";
}

ParamView optimizer_range(const ParamView& range, size_t bound) {
  if (range.count == 0) return {0, bound};
  if (range.offset > bound || range.count > bound - range.offset)
    throw std::out_of_range("optimizer range [" + std::to_string(range.offset) + ", +" + std::to_string(range.count) +
                            ") outside the " + std::to_string(bound) + " parameters");
  return range;
}

// --- A projection block's join as two batch norms (a backend may fuse them)

void Ops::bn_forward_train_join(const BnSide& a, const BnSide& b, Act& y) {
  bn_forward_train(b.d, b.x, b.gamma, b.beta, b.running_mean, b.running_var, b.save_mean, b.save_invstd, nullptr,
                   false, y);
  bn_forward_train(a.d, a.x, a.gamma, a.beta, a.running_mean, a.running_var, a.save_mean, a.save_invstd, &y, true,
                   y);
}

void Ops::bn_backward_join(const BnSide& a, const BnSide& b, Act& y, const Act& dy, const Act* dy2, Act& dx,
                           Act& dx_ds) {
  bn_backward(a.d, a.x, y, dy, a.gamma, a.save_mean, a.save_invstd, true, dx, &y, a.gamma, a.beta, dy2);
  bn_backward(b.d, b.x, y, y, b.gamma, b.save_mean, b.save_invstd, false, dx_ds, nullptr, b.gamma, b.beta);
}

void Ops::bn_relu_maxpool_forward_train(const BnSide& s, const PoolDesc& pool, Act& bn_y, Act& y) {
  bn_forward_train(s.d, s.x, s.gamma, s.beta, s.running_mean, s.running_var, s.save_mean, s.save_invstd, nullptr,
                   true, bn_y);
  maxpool_forward(pool, bn_y, y);
}

void Ops::bn_relu_conv_forward_train(const BnSide& s, Act& bn_y, const ConvDesc& conv, ParamView w, Act& y) {
  bn_forward_train(s.d, s.x, s.gamma, s.beta, s.running_mean, s.running_var, s.save_mean, s.save_invstd, nullptr,
                   true, bn_y);
  conv_forward(conv, bn_y, w, y);
}

void Ops::conv_bn_relu_backward(const ConvDesc& conv, ParamView w, const Act& dy, const BnSide& s, Act& bn_y,
                                Act& dbn_y, Act& dx) {
  conv_backward(conv, bn_y, w, dy, &dbn_y, false, w);
  bn_backward(s.d, s.x, bn_y, dbn_y, s.gamma, s.save_mean, s.save_invstd, true, dx, nullptr, s.gamma, s.beta);
}

// --- Step capture: unsupported unless a backend says otherwise (the trainer asks
// step_capture_unsupported() first, so reaching these is a bug of the caller).

void Ops::capture_step(const std::function<void()>&) {
  throw std::logic_error("capture_step on a backend that cannot capture: " + step_capture_unsupported());
}

void Ops::replay_step(const StepValues&) {
  throw std::logic_error("replay_step on a backend that cannot capture: " + step_capture_unsupported());
}

// --- Sharded master weights: only a backend with a working copy has them (the trainer asks
// keeps_working_copy() first).

namespace {
[[noreturn]] void no_master_shards(const char* call) {
  throw std::logic_error(std::string(call) + " on a backend whose fp32 weights are its working weights");
}
}  // namespace

void Ops::shard_master_weights(const std::vector<ParamView>&, const std::vector<ParamView>&) {
  no_master_shards("shard_master_weights");
}
void Ops::export_master(float*, ParamView) { no_master_shards("export_master"); }
void Ops::import_master(const float*) { no_master_shards("import_master"); }

}  // namespace worker

// --- fp16 loss scaling on the host: the default, over the backend's own scale_grads and
// grads_finite (the state machine is loss_scale.h's, the same the GPU's kernel runs).

namespace worker {

void Ops::set_loss_scale(const LossScaleRules& rules, const LossScaleState& s, int64_t optimizer_steps) {
  host_scale_ = HostLossScale{true, rules, s, optimizer_steps, true, true};
}

LossScaleState Ops::loss_scale() { return host_scale_.state; }

void Ops::unscale_grads(float divisor) {
  if (!host_scale_.on) throw std::logic_error("unscale_grads before set_loss_scale");
  scale_grads(1.0f / (divisor * host_scale_.state.scale));
  host_scale_.grads_finite = grads_finite();
}

bool Ops::grads_verdict() { return host_scale_.grads_finite; }

void Ops::set_grads_verdict(bool grads_finite) { host_scale_.grads_finite = grads_finite; }

void Ops::update_loss_scale() {
  if (!host_scale_.on) throw std::logic_error("update_loss_scale before set_loss_scale");
  host_scale_.applies = advance_loss_scale(host_scale_.state, host_scale_.rules, host_scale_.grads_finite);
  if (host_scale_.applies) ++host_scale_.optimizer_steps;
}

}  // namespace worker
