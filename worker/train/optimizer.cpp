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
  for (const ParamView& v : model.vector_params()) std::fill_n(mask.begin() + long(v.offset), v.count, uint8_t(0));
  return mask;
}

Optimizer::Optimizer(const OptimizerConfig& cfg, Ops& ops, size_t count, const std::vector<uint8_t>& decay_mask,
                     std::vector<ParamView> ranges)
    : cfg_(cfg), ops_(ops), count_(count), ranges_(std::move(ranges)) {
  if (ranges_.empty()) ranges_.push_back({0, count_});
  for (const ParamView& r : ranges_) {
    if (r.offset > count_ || r.count > count_ - r.offset)
      throw std::invalid_argument("optimizer: a range leaves the " + std::to_string(count_) + " parameters");
    state_offset_.push_back(kept_);
    kept_ += r.count;
  }
  auto alloc = [&] { return static_cast<float*>(ops_.alloc(std::max<size_t>(kept_, 1) * sizeof(float))); };
  if (!decay_mask.empty()) {
    if (decay_mask.size() != count_) throw std::invalid_argument("optimizer: the weight-decay mask has the wrong size");
    std::vector<uint8_t> kept_mask;
    kept_mask.reserve(kept_);
    for (const ParamView& r : ranges_)
      kept_mask.insert(kept_mask.end(), decay_mask.begin() + long(r.offset), decay_mask.begin() + long(r.offset + r.count));
    auto* mask = static_cast<uint8_t*>(ops_.alloc(std::max<size_t>(kept_, 1)));
    ops_.upload(mask, kept_mask.data(), kept_);
    decay_mask_ = mask;
  }
  if (cfg_.kind == OptimizerKind::Adam) {
    exp_avg_ = alloc();
    exp_avg_sq_ = alloc();
  } else {
    momentum_buffer_ = alloc();
  }
}

void Optimizer::step(float lr, const std::function<void(size_t)>& after_range) {
  for (size_t i = 0; i < ranges_.size(); ++i) {
    const ParamView& r = ranges_[i];
    const size_t o = state_offset_[i];
    const uint8_t* mask = decay_mask_ ? decay_mask_ + o : nullptr;
    if (r.count == 0) {
      // nothing of this bucket is ours (an Ops range of count 0 would mean everything)
    } else if (cfg_.kind == OptimizerKind::Adam) {
      ops_.adam_step(lr, cfg_.beta1, cfg_.beta2, cfg_.eps, cfg_.weight_decay, taken_ + 1, exp_avg_ + o,
                     exp_avg_sq_ + o, mask, r);
    } else {
      ops_.sgd_step(lr, cfg_.momentum, cfg_.weight_decay, momentum_buffer_ + o, taken_ == 0, cfg_.nesterov, mask, r);
    }
    if (after_range) after_range(i);
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
    v.resize(kept_);
    ops_.download(v.data(), buffer(name), kept_ * sizeof(float));
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
    std::vector<float> kept;
    kept.reserve(kept_);
    for (const ParamView& r : ranges_)
      kept.insert(kept.end(), it->second.begin() + long(r.offset), it->second.begin() + long(r.offset + r.count));
    ops_.upload(buffer(name), kept.data(), kept_ * sizeof(float));
  }
  taken_ = steps_taken;
}

size_t Optimizer::state_bytes() const {
  return optimizer_buffer_names(cfg_.kind).size() * kept_ * sizeof(float) + (decay_mask_ ? kept_ : 0);
}

size_t Optimizer::whole_state_bytes() const {
  return optimizer_buffer_names(cfg_.kind).size() * count_ * sizeof(float) + (decay_mask_ ? count_ : 0);
}

}  // namespace worker
