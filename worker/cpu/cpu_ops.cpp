// CPU backend: memory, parameters, synthetic data, optimizers, and the factory.
#include "worker/cpu/cpu_ops.h"

#include <omp.h>

#include <Eigen/Core>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <thread>

#include "worker/core/backend.h"
#include "worker/core/synthetic.h"

namespace worker {
namespace cpu {

void check_act(const Act& a, int n, int h, int w, int c, const char* what) {
  if (a.data == nullptr || a.dtype != DType::F32 || a.n != n || a.h != h || a.w != w || a.c != c)
    throw std::logic_error(std::string("cpu backend: ") + what + " is (" + std::to_string(a.n) +
                           ", " + std::to_string(a.h) + ", " + std::to_string(a.w) + ", " +
                           std::to_string(a.c) + ") " + dtype_name(a.dtype) + ", expected (" +
                           std::to_string(n) + ", " + std::to_string(h) + ", " +
                           std::to_string(w) + ", " + std::to_string(c) + ") fp32");
}

// --- Construction

CpuOps::CpuOps(int threads) : threads_(threads) {
  if (threads_ <= 0) {
    const char* env = std::getenv("OMP_NUM_THREADS");
    threads_ = env ? std::atoi(env) : 0;
    if (threads_ <= 0) threads_ = int(std::thread::hardware_concurrency());
    if (threads_ <= 0) threads_ = 1;
  }
  // Eigen's GEMM parallelises with OpenMP; its thread count is process-wide.
  Eigen::setNbThreads(threads_);
}

CpuOps::~CpuOps() {
  for (void* p : blocks_) std::free(p);
}

std::string CpuOps::describe() const {
  return "cpu (fp32, " + std::to_string(threads_) + (threads_ == 1 ? " thread)" : " threads)");
}

// --- Memory

void* CpuOps::alloc(size_t bytes) {
  const size_t rounded = (std::max<size_t>(bytes, 1) + 255) / 256 * 256;
  void* p = std::aligned_alloc(256, rounded);
  if (p == nullptr)
    throw std::runtime_error("cpu backend: out of memory allocating " + std::to_string(bytes) +
                             " bytes (" + std::to_string(pool_bytes_ >> 20) +
                             " MiB already allocated); use a smaller --batch-size or --image-size");
  std::memset(p, 0, rounded);
  blocks_.push_back(p);
  pool_bytes_ += rounded;
  return p;
}

void CpuOps::upload(void* dst, const void* host_src, size_t bytes) {
  if (bytes) std::memcpy(dst, host_src, bytes);
}
void CpuOps::download(void* host_dst, const void* src, size_t bytes) {
  if (bytes) std::memcpy(host_dst, src, bytes);
}
void CpuOps::zero(void* dst, size_t bytes) {
  if (bytes) std::memset(dst, 0, bytes);
}

std::vector<double>& CpuOps::partials(size_t n) {
  if (partials_.size() < n) partials_.resize(n);
  return partials_;
}

// --- Parameters

void CpuOps::bind_params(float* params, float* grads, size_t count) {
  params_ = params;
  grads_ = grads;
  count_ = count;
}

void CpuOps::register_conv(const ConvDesc& d, ParamView w) {
  if (w.count != size_t(d.cout) * d.kh * d.kw * d.cin)
    throw std::logic_error("cpu backend: conv weight view does not match its descriptor");
  const size_t need = size_t(conv_chunk(d)) * d.ho * d.wo * d.kh * d.kw * d.cin;
  if (workspace_.size() < need) workspace_.resize(need);
}

// --- Data

void CpuOps::make_batch(DataKind kind, uint64_t seed, const int64_t* host_indices, int n,
                        int image_size, int classes, Act& images, int32_t* labels) {
  check_act(images, n, image_size, image_size, synth::kChannels, "make_batch images");
  const int64_t per = int64_t(image_size) * image_size * synth::kChannels;
  float* img = static_cast<float*>(images.data);
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (int i = 0; i < n; ++i) {
    const int64_t s = host_indices[i];
    labels[i] = synth::label(seed, s, classes);
    float* dst = img + i * per;
    const synth::SamplePixels sample(kind, seed, s, image_size, classes);
    for (int64_t e = 0; e < per; ++e) dst[e] = sample(e);
  }
}

// --- Optimizers (torch.optim semantics)

void CpuOps::scale_grads(float s) {
  float* g = grads_;
  const long n = long(count_);
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (long i = 0; i < n; ++i) g[i] *= s;
}

bool CpuOps::grads_finite() {
  const float* g = grads_;
  const long n = long(count_);
  int bad = 0;
#pragma omp parallel for num_threads(threads_) schedule(static) reduction(| : bad)
  for (long i = 0; i < n; ++i) bad |= !std::isfinite(g[i]);
  return bad == 0;
}

// torch.optim.SGD (dampening 0): d = g + wd * p; buf = first ? d : m * buf + d;
// p -= lr * (nesterov ? d + m * buf : buf).
void CpuOps::sgd_step(float lr, float momentum, float weight_decay, float* momentum_buf,
                      bool first_step, bool nesterov, const uint8_t* decay_mask, ParamView range) {
  const HostLossScale& ls = host_loss_scale();
  if (ls.on) {  // fp16 loss scaling (ops.h): the verdict decides, and the step count is its own
    if (!ls.applies) return;
    first_step = ls.optimizer_steps == 1;
  }
  const ParamView r = optimizer_range(range, count_);
  float* p = params_ + r.offset;
  const float* g = grads_ + r.offset;
  float* buf = momentum_buf;
  const long n = long(r.count);
  if (momentum != 0.0f && buf == nullptr)
    throw std::logic_error("cpu backend: sgd_step with momentum needs a momentum buffer");
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (long i = 0; i < n; ++i) {
    float d = g[i];
    if (weight_decay != 0.0f && (!decay_mask || decay_mask[i])) d += weight_decay * p[i];
    if (momentum != 0.0f) {
      buf[i] = first_step ? d : buf[i] * momentum + d;
      d = nesterov ? d + momentum * buf[i] : buf[i];
    }
    p[i] += -lr * d;
  }
}

// torch.optim.Adam (amsgrad off): bias corrections in double as Python computes them.
void CpuOps::adam_step(float lr, float beta1, float beta2, float eps, float weight_decay,
                       int64_t step, float* m, float* v, const uint8_t* decay_mask, ParamView range) {
  const HostLossScale& ls = host_loss_scale();
  if (ls.on) {  // fp16 loss scaling (ops.h): the verdict decides, and the step count is its own
    if (!ls.applies) return;
    step = ls.optimizer_steps;
  }
  const ParamView r = optimizer_range(range, count_);
  float* p = params_ + r.offset;
  const float* g = grads_ + r.offset;
  const long n = long(r.count);
  const double bc1 = 1.0 - std::pow(double(beta1), double(step));
  const double bc2 = 1.0 - std::pow(double(beta2), double(step));
  const float step_size = float(double(lr) / bc1);
  const float bc2_sqrt = float(std::sqrt(bc2));
#pragma omp parallel for num_threads(threads_) schedule(static)
  for (long i = 0; i < n; ++i) {
    float gi = g[i];
    if (weight_decay != 0.0f && (!decay_mask || decay_mask[i])) gi += weight_decay * p[i];
    m[i] = m[i] * beta1 + gi * (1.0f - beta1);
    v[i] = v[i] * beta2 + (1.0f - beta2) * gi * gi;
    const float denom = std::sqrt(v[i]) / bc2_sqrt + eps;
    p[i] += -step_size * (m[i] / denom);
  }
}

std::unique_ptr<Ops> make_cpu_ops_impl(int threads) { return std::make_unique<CpuOps>(threads); }

}  // namespace cpu

}  // namespace worker
