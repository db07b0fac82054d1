// Activation recomputation (issue 15) on the CPU backend, the numerical oracle: every mode gives
// the same bits as keeping everything -- loss, logits, every gradient, running statistics, the
// order in which gradients are reported ready -- over several training steps and in eval mode,
// with two threads (the backend's reductions are split over threads in a fixed order).
#include <catch2/catch.hpp>

#include <cstring>
#include <numeric>
#include <string>
#include <utility>
#include <vector>

#include "worker/core/backend.h"
#include "worker/model/model.h"

using namespace worker;

namespace {

struct Run {
  std::vector<float> losses, logits, grads, params, buffers, eval_logits;
  std::vector<std::pair<size_t, size_t>> ready;  // on_grads_ready of the first backward
  int64_t batches_tracked = 0;
  size_t kept = 0, shared = 0;  // memory_breakdown: kept activations, recomputed buffer
};

std::vector<float> download(Ops& ops, const float* p, size_t n) {
  std::vector<float> v(n);
  ops.download(v.data(), p, n * sizeof(float));
  return v;
}

// Three SGD steps with momentum and weight decay on learnable data, then one eval forward.
Run train(int depth, Recompute mode, Stem stem = Stem::ImageNet) {
  auto ops = make_cpu_ops(2);
  ModelConfig c;
  c.depth = depth;
  c.stem = stem;
  c.width = 8;
  c.num_classes = 10;
  c.image_size = 32;
  c.batch = 4;
  c.label_smoothing = 0.1f;
  c.recompute = mode;
  Model m(c, *ops);
  m.init(7);
  const size_t np = m.num_params();
  auto* mom = static_cast<float*>(ops->alloc(np * sizeof(float)));
  Run r;
  for (int step = 0; step < 3; ++step) {
    std::vector<int64_t> idx(size_t(c.batch));
    std::iota(idx.begin(), idx.end(), int64_t(step) * c.batch);
    ops->make_batch(DataKind::Learnable, 3, idx.data(), c.batch, c.image_size, c.num_classes, m.input(), m.labels());
    ops->zero(m.grads(), np * sizeof(float));
    if (step == 0) m.on_grads_ready = [&r](size_t b, size_t e) { r.ready.emplace_back(b, e); };
    m.forward_backward();
    m.on_grads_ready = nullptr;
    r.losses.push_back(m.last_loss());
    if (step == 0) {
      r.logits = m.last_logits();
      r.grads = download(*ops, m.grads(), np);
    }
    ops->sgd_step(0.05f, 0.9f, 1e-3f, mom, step == 0, false, nullptr);
    ops->params_updated();
  }
  r.params = download(*ops, m.params(), np);
  r.buffers = download(*ops, m.buffers(), m.num_buffers());
  r.batches_tracked = m.num_batches_tracked();
  m.forward_eval();
  r.eval_logits = m.last_logits();
  for (const auto& kv : m.memory_breakdown()) {
    if (kv.first == "activations kept for backward") r.kept = kv.second;
    if (kv.first == "recomputed activations (shared)") r.shared = kv.second;
  }
  return r;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("recompute bn and block give the bits of keeping everything (ResNet-18 and -50)", "[cpu][model][recompute]") {
  // The cifar stem (issue 25) keeps bn1's output as block 0's input and has no max-pool: the
  // stem's memory plan differs in every mode.
  for (auto [depth, stem] : {std::pair{18, Stem::ImageNet}, std::pair{50, Stem::ImageNet}, std::pair{18, Stem::Cifar},
                             std::pair{50, Stem::Cifar}}) {
    const Run none = train(depth, Recompute::None, stem);
    for (Recompute mode : {Recompute::Bn, Recompute::Block}) {
      INFO("ResNet-" << depth << (stem == Stem::Cifar ? " (cifar stem)" : "") << ", recompute "
                     << (mode == Recompute::Bn ? "bn" : "block"));
      const Run r = train(depth, mode, stem);
      CHECK(same_bits(r.losses, none.losses));
      CHECK(same_bits(r.logits, none.logits));
      CHECK(same_bits(r.grads, none.grads));  // the first backward, every parameter
      CHECK(r.ready == none.ready);           // the same buckets become ready at the same points
      CHECK(same_bits(r.params, none.params));   // after three steps
      CHECK(same_bits(r.buffers, none.buffers)); // running statistics: updated by the forwards only
      CHECK(r.batches_tracked == none.batches_tracked);
      CHECK(same_bits(r.eval_logits, none.eval_logits));
      // It keeps less: the shared buffer is smaller than what it replaces.
      CHECK(r.shared > 0);
      CHECK(r.kept + r.shared < none.kept);
    }
  }
}
