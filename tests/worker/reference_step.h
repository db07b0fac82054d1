// The files the comparisons with torchvision read (tests/worker/python/compare_torch.py on the
// CPU, tests/worker/gpu/compare_torch_gpu.py on the GPU), written by one procedure for every
// backend: in DIR, as safetensors, init (the initial state), batch (images NHWC as fp32, labels),
// grads (loss and every gradient, OIHW), fwd (state after one training forward: running
// statistics), sgd and adam (state after one step of each from the same start); the recipe of
// issue 12 from the same start: smooth (loss and gradients with label smoothing) and nesterov
// (state after two Nesterov SGD steps on those gradients, weight decay only on the weights of
// more than one dimension: torch's two parameter groups of --no-wd-on-bn-bias).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "worker/model/model.h"
#include "worker/model/state_dict.h"

namespace worker::testing {

// Must match the Python comparisons.
constexpr float kSgdLr = 0.1f, kSgdMomentum = 0.9f, kSgdWd = 1e-4f;
constexpr float kAdamLr = 1e-3f, kAdamWd = 1e-4f;
constexpr float kSmoothing = 0.1f;
constexpr float kNesterovLr = 0.1f, kNesterovMomentum = 0.875f, kNesterovWd = 5e-2f;

inline StTensor f32_tensor(const std::string& name, std::vector<int64_t> shape, const float* p, size_t n) {
  StTensor t{name, "F32", std::move(shape), {}};
  t.data.resize(n * 4);
  std::memcpy(t.data.data(), p, n * 4);
  return t;
}

// An activation downloaded as fp32, whatever its dtype.
inline std::vector<float> act_to_f32(Ops& ops, const Act& a) {
  std::vector<float> v(a.numel());
  if (a.dtype == DType::F32) {
    ops.download(v.data(), a.data, v.size() * 4);
    return v;
  }
  std::vector<uint16_t> h(v.size());
  ops.download(h.data(), a.data, h.size() * 2);
  for (size_t i = 0; i < v.size(); ++i) {
    if (a.dtype == DType::BF16) {
      const uint32_t u = uint32_t(h[i]) << 16;
      std::memcpy(&v[i], &u, 4);
    } else {
      // fp16 -> fp32 (normal and subnormal numbers; the generator makes no inf/NaN)
      const uint32_t s = (h[i] >> 15) & 1, e = (h[i] >> 10) & 31, m = h[i] & 1023;
      const float f = e == 0 ? std::ldexp(float(m), -24) : std::ldexp(float(m | 1024), int(e) - 25);
      v[i] = s ? -f : f;
    }
  }
  return v;
}

inline void save_state(Model& m, const std::string& path) {
  write_safetensors(path, model_state_to_tensors(m, m.get_state()));
}

// The loss and every gradient, with the parameters' names.
inline void save_grads(Model& m, Ops& ops, float loss, const std::string& path) {
  ModelState g = m.get_state();
  ops.download(g.params.data(), m.grads(), m.num_params() * 4);
  std::vector<StTensor> ts;
  for (StTensor& t : model_state_to_tensors(m, g))
    for (const StateEntry& e : m.state_entries())
      if (e.name == t.name && e.kind == StateKind::Param) ts.push_back(std::move(t));
  ts.push_back(f32_tensor("loss", {}, &loss, 1));
  write_safetensors(path, ts);
}

// Starts from the weights in init_path (written by torch) or, when empty, from init(seed);
// returns the loss of the training forward.
inline float write_reference_step(Ops& ops, const ModelConfig& cfg, DataKind kind, uint64_t seed,
                                  const std::string& init_path, const std::string& out) {
  Model m(cfg, ops);
  if (!init_path.empty())
    m.set_state(model_state_from_tensors(m, read_safetensors(init_path), init_path));
  else
    m.init(seed);
  const ModelState init = m.get_state();
  save_state(m, out + "/init.safetensors");

  std::vector<int64_t> idx(size_t(cfg.batch));
  for (int i = 0; i < cfg.batch; ++i) idx[size_t(i)] = 1000 + i;
  ops.make_batch(kind, 7, idx.data(), cfg.batch, cfg.image_size, cfg.num_classes, m.input(), m.labels());
  {
    std::vector<int32_t> lab(size_t(cfg.batch));
    ops.download(lab.data(), m.labels(), lab.size() * 4);
    const std::vector<float> img = act_to_f32(ops, m.input());
    StTensor lt{"labels", "I64", {cfg.batch}, {}};
    for (int32_t l : lab) {
      const int64_t v = l;
      const auto* b = reinterpret_cast<const uint8_t*>(&v);
      lt.data.insert(lt.data.end(), b, b + 8);
    }
    write_safetensors(out + "/batch.safetensors",
                      {f32_tensor("images", {cfg.batch, cfg.image_size, cfg.image_size, 3}, img.data(), img.size()),
                       lt});
  }

  // One training step from the initial state; gradients saved with the parameters' names.
  auto one_step = [&]() {
    m.set_state(init);
    ops.zero(m.grads(), m.num_params() * 4);
    m.forward_backward();
  };
  one_step();
  const float loss = m.last_loss();
  save_state(m, out + "/fwd.safetensors");
  save_grads(m, ops, loss, out + "/grads.safetensors");
  float* mom = static_cast<float*>(ops.alloc(m.num_params() * 4));
  ops.sgd_step(kSgdLr, kSgdMomentum, kSgdWd, mom, true, false, nullptr);
  ops.params_updated();
  save_state(m, out + "/sgd.safetensors");

  one_step();
  float* am = static_cast<float*>(ops.alloc(m.num_params() * 4));
  float* av = static_cast<float*>(ops.alloc(m.num_params() * 4));
  ops.adam_step(kAdamLr, 0.9f, 0.999f, 1e-8f, kAdamWd, 1, am, av, nullptr);
  ops.params_updated();
  save_state(m, out + "/adam.safetensors");

  m.set_label_smoothing(kSmoothing);
  one_step();
  const float smooth_loss = m.last_loss();
  save_grads(m, ops, smooth_loss, out + "/smooth.safetensors");
  std::vector<uint8_t> decays(m.num_params(), 1);
  for (const StateEntry& e : m.state_entries())
    if (e.kind == StateKind::Param && e.shape.size() == 1)
      for (size_t i = 0; i < e.count; ++i) decays[e.offset + i] = 0;
  auto* mask = static_cast<uint8_t*>(ops.alloc(decays.size()));
  ops.upload(mask, decays.data(), decays.size());
  float* nm = static_cast<float*>(ops.alloc(m.num_params() * 4));
  for (int s = 0; s < 2; ++s) {
    ops.sgd_step(kNesterovLr, kNesterovMomentum, kNesterovWd, nm, s == 0, true, mask);
    ops.params_updated();
  }
  save_state(m, out + "/nesterov.safetensors");
  return loss;
}

}  // namespace worker::testing
