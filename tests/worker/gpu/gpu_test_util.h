// Helpers of the GPU tests: the same layer run on the CPU backend (the oracle) and on the GPU
// backend, from the same host data; bf16 and fp16 conversions on the host; the error measure
// max|ours - ref| / max|ref| with the worst element for the failure message, and the L2 one;
// the small whole model the model tests run.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "worker/core/backend.h"
#include "worker/model/model.h"
#include "worker/core/ops.h"

namespace gputest {

using namespace worker;

inline uint16_t f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
  return uint16_t(u >> 16);
}
inline float bf16_to_f32(uint16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
// IEEE half, round to nearest even (overflow to infinity, subnormals kept).
inline uint16_t f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return uint16_t(sign | 0x7e00u);   // NaN
  if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to infinity (>= 65520)
  if (a < 0x38800000u) {                                   // below 2^-14: a subnormal half
    float v;
    std::memcpy(&v, &a, 4);
    return uint16_t(sign | uint32_t(std::nearbyint(v * 16777216.0f)));  // units of 2^-24 (exact product)
  }
  uint32_t r = a - 0x38000000u;  // exponent 127 -> 15 bias
  r += 0x0fffu + ((r >> 13) & 1u);
  return uint16_t(sign | (r >> 13));
}
inline float f16_to_f32(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) {
    const float v = std::ldexp(float(m), -24);
    return sign ? -v : v;
  }
  const uint32_t u = sign | (e == 31 ? 0x7f800000u | (m << 13) : ((e + 112) << 23) | (m << 13));
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint16_t to_half(DType t, float f) { return t == DType::F16 ? f32_to_f16(f) : f32_to_bf16(f); }
inline float from_half(DType t, uint16_t h) { return t == DType::F16 ? f16_to_f32(h) : bf16_to_f32(h); }
inline float round_to(DType t, float f) { return t == DType::F32 ? f : from_half(t, to_half(t, f)); }

inline std::vector<float> randn(size_t n, uint64_t seed, float scale = 1.f, float mean = 0.f) {
  std::mt19937_64 g(seed);
  std::normal_distribution<float> d(mean, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

// The values a tensor of dtype t can hold (so CPU and GPU start from identical inputs).
inline std::vector<float> rounded(std::vector<float> v, DType t) {
  for (float& x : v) x = round_to(t, x);
  return v;
}

// One backend with its bound flat parameter/gradient buffers.
struct Side {
  std::unique_ptr<Ops> ops;
  float* params = nullptr;
  float* grads = nullptr;
  size_t count = 0;
  DType dt() const { return ops->compute_dtype(); }

  Side(std::unique_ptr<Ops> o, const std::vector<float>& host_params,
       const std::vector<float>& host_grads)
      : ops(std::move(o)), count(host_params.size()) {
    params = static_cast<float*>(ops->alloc(count * 4));
    grads = static_cast<float*>(ops->alloc(count * 4));
    ops->upload(params, host_params.data(), count * 4);
    ops->upload(grads, host_grads.data(), count * 4);
    ops->bind_params(params, grads, count);
    ops->params_updated();
  }

  Act act(int n, int h, int w, int c) {
    Act a;
    a.dtype = dt();
    a.n = n, a.h = h, a.w = w, a.c = c;
    a.data = ops->alloc(a.bytes());
    return a;
  }
  Act act(int n, int h, int w, int c, const std::vector<float>& v) {
    Act a = act(n, h, w, c);
    put(a, v);
    return a;
  }
  void put(Act& a, const std::vector<float>& v) {
    if (a.dtype == DType::F32) {
      ops->upload(a.data, v.data(), v.size() * 4);
    } else {
      std::vector<uint16_t> h(v.size());
      for (size_t i = 0; i < v.size(); ++i) h[i] = to_half(a.dtype, v[i]);
      ops->upload(a.data, h.data(), h.size() * 2);
    }
  }
  std::vector<float> get(const Act& a) {
    std::vector<float> v(a.numel());
    if (a.dtype == DType::F32) {
      ops->download(v.data(), a.data, v.size() * 4);
    } else {
      std::vector<uint16_t> h(v.size());
      ops->download(h.data(), a.data, h.size() * 2);
      for (size_t i = 0; i < v.size(); ++i) v[i] = from_half(a.dtype, h[i]);
    }
    return v;
  }
  float* floats(const std::vector<float>& v) {
    float* p = static_cast<float*>(ops->alloc(v.size() * 4));
    ops->upload(p, v.data(), v.size() * 4);
    return p;
  }
  std::vector<float> get_f(const float* p, size_t n) {
    std::vector<float> v(n);
    ops->download(v.data(), p, n * 4);
    return v;
  }
  std::vector<float> get_grads() { return get_f(grads, count); }
  std::vector<float> get_params() { return get_f(params, count); }
};

struct Err {
  double rel = 0;
  std::string where;
};

inline Err rel_err(const std::vector<float>& ours, const std::vector<float>& ref, size_t begin = 0,
                   size_t end = SIZE_MAX) {
  end = std::min(end, ref.size());
  double dmax = 0, rmax = 0;
  size_t worst = begin;
  bool nan = ours.size() != ref.size();
  for (size_t i = begin; i < end && !nan; ++i) {
    if (!std::isfinite(ours[i])) nan = true;
    const double d = std::fabs(double(ours[i]) - double(ref[i]));
    if (d > dmax) dmax = d, worst = i;
    rmax = std::max(rmax, std::fabs(double(ref[i])));
  }
  Err e;
  e.rel = nan ? INFINITY : dmax / std::max(rmax, 1e-30);
  std::ostringstream s;
  if (ours.size() != ref.size())
    s << "sizes differ: " << ours.size() << " vs " << ref.size();
  else
    s << "rel " << e.rel << ", worst [" << worst << "]: gpu " << ours[worst] << " cpu " << ref[worst];
  e.where = s.str();
  return e;
}

// Where two tensors differ, counted, with the first such element; empty when nowhere. (Catch would
// print every element of a failed ==.)
inline std::string differences(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return "sizes differ: " + std::to_string(a.size()) + " vs " + std::to_string(b.size());
  size_t n = 0, first = 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i] != b[i] && n++ == 0) first = i;
  if (n == 0) return "";
  std::ostringstream s;
  s << n << " of " << a.size() << " differ, the first [" << first << "]: " << a[first] << " vs " << b[first];
  return s.str();
}
#define CHECK_SAME(a, b)                                          \
  do {                                                            \
    const std::string d_ = ::gputest::differences(a, b);          \
    INFO(#a " vs " #b ": " << d_);                                \
    CHECK(d_.empty());                                            \
  } while (0)

#define CHECK_CLOSE_REL(ours, ref, tol)      \
  do {                                       \
    const ::gputest::Err e_ = ::gputest::rel_err(ours, ref); \
    INFO(e_.where);                          \
    CHECK(e_.rel < (tol));                   \
  } while (0)

// sqrt(sum (ours - ref)^2 / sum ref^2); infinite when the sizes differ or a value is not finite.
inline double l2_rel(const std::vector<float>& ours, const std::vector<float>& ref) {
  double d = 0, n = 0;
  for (size_t i = 0; i < ref.size() && i < ours.size(); ++i) {
    d += (double(ours[i]) - ref[i]) * (double(ours[i]) - ref[i]);
    n += double(ref[i]) * ref[i];
  }
  return ours.size() == ref.size() && std::isfinite(d) ? std::sqrt(d / std::max(n, 1e-300)) : INFINITY;
}

// --- The whole-model tests' ResNet: width 16, 64x64 images, 10 classes.
inline ModelConfig small_resnet(int depth, int batch, Recompute recompute = Recompute::None,
                                Stem stem = Stem::ImageNet) {
  ModelConfig cfg;
  cfg.depth = depth;
  cfg.stem = stem;
  cfg.width = 16;
  cfg.num_classes = 10;
  cfg.image_size = 64;
  cfg.batch = batch;
  cfg.recompute = recompute;
  return cfg;
}

// The model's input: learnable samples first, first + 3, ... (seed 11), the same on every backend.
inline void learnable_batch(Ops& ops, Model& m, int64_t first = 100) {
  const ModelConfig& cfg = m.config();
  std::vector<int64_t> idx(static_cast<size_t>(cfg.batch));
  for (int i = 0; i < cfg.batch; ++i) idx[size_t(i)] = first + 3 * i;
  ops.make_batch(DataKind::Learnable, 11, idx.data(), cfg.batch, cfg.image_size, cfg.num_classes, m.input(),
                 m.labels());
}

// What a forward and backward left: the loss, every gradient and the running statistics.
struct ModelRun {
  float loss = 0;
  std::vector<float> grads, buffers;
};

inline ModelRun downloaded(Ops& ops, Model& m) {
  ModelRun r;
  r.loss = m.last_loss();
  r.grads.resize(m.num_params());
  ops.download(r.grads.data(), m.grads(), r.grads.size() * sizeof(float));
  r.buffers.resize(m.num_buffers());
  ops.download(r.buffers.data(), m.buffers(), r.buffers.size() * sizeof(float));
  return r;
}

}  // namespace gputest
