#include "worker/train/optimizer.h"

#include <algorithm>
#include <stdexcept>

namespace worker {

std::vector<std::string> optimizer_buffer_names(OptimizerKind kind) {
  switch (kind) {
    case OptimizerKind::Adam: return {"exp_avg", "exp_avg_sq"};
    case OptimizerKind::Sgd: return {"momentum_buffer"};
  }
  return {};
}

std::vector<uint8_t> decay_mask_without_bn_and_bias(const Model& model) {
  std::vector<uint8_t> mask(model.num_params(), 1);
  for (const StateEntry& e : model.state_entries())
    if (e.kind == StateKind::Param && e.shape.size() == 1) std::fill_n(mask.begin() + long(e.offset), e.count, uint8_t(0));
  return mask;
}

Optimizer::Optimizer(const OptimizerConfig& cfg, Ops& ops, size_t count, const std::vector<uint8_t>& decay_mask)
    : cfg_(cfg), ops_(ops), count_(count) {
  auto alloc = [&] { return static_cast<float*>(ops_.alloc(count_ * sizeof(float))); };
  if (!decay_mask.empty()) {
    if (decay_mask.size() != count_) throw std::invalid_argument("optimizer: the weight-decay mask has the wrong size");
    auto* mask = static_cast<uint8_t*>(ops_.alloc(count_));
    ops_.upload(mask, decay_mask.data(), count_);
    decay_mask_ = mask;
  }
  if (cfg_.kind == OptimizerKind::Adam) {
    exp_avg_ = alloc();
    exp_avg_sq_ = alloc();
  } else {
    momentum_buffer_ = alloc();
  }
}

void Optimizer::step(float lr) {
  if (cfg_.kind == OptimizerKind::Adam) {
    ops_.adam_step(lr, cfg_.beta1, cfg_.beta2, cfg_.eps, cfg_.weight_decay, taken_ + 1, exp_avg_, exp_avg_sq_,
                   decay_mask_);
  } else {
    ops_.sgd_step(lr, cfg_.momentum, cfg_.weight_decay, momentum_buffer_, taken_ == 0, cfg_.nesterov, decay_mask_);
  }
  ++taken_;
}

float* Optimizer::buffer(const std::string& name) const {
  if (name == "momentum_buffer") return momentum_buffer_;
  if (name == "exp_avg") return exp_avg_;
  if (name == "exp_avg_sq") return exp_avg_sq_;
  return nullptr;
}

std::map<std::string, std::vector<float>> Optimizer::state() const {
  std::map<std::string, std::vector<float>> out;
  ops_.synchronize();
  for (const std::string& name : optimizer_buffer_names(cfg_.kind)) {
    std::vector<float>& v = out[name];
    v.resize(count_);
    ops_.download(v.data(), buffer(name), count_ * sizeof(float));
  }
  return out;
}

void Optimizer::set_state(const std::map<std::string, std::vector<float>>& buffers, int64_t steps_taken) {
  for (const std::string& name : optimizer_buffer_names(cfg_.kind)) {
    auto it = buffers.find(name);
    if (it == buffers.end() || it->second.size() != count_) {
      throw std::invalid_argument("optimizer state: buffer '" + name + "' is missing or not of " +
                                  std::to_string(count_) + " values");
    }
    ops_.upload(buffer(name), it->second.data(), count_ * sizeof(float));
  }
  taken_ = steps_taken;
}

size_t Optimizer::state_bytes() const { return optimizer_buffer_names(cfg_.kind).size() * count_ * sizeof(float); }

}  // namespace worker
