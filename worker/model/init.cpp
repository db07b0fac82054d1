// Initial weights from a counter-based generator: value k of state entry i is a pure function
// of (seed, i, k), so the draw runs on every core of the host and does not depend on how many
// there are (25.6 M values for ResNet-50 took 1.4 s from one sequential generator). The
// distributions are written here: the standard library's are not specified bit-exactly.
#include "worker/model/init.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <thread>
#include <utility>
#include <vector>

#include "worker/core/host.h"
#include "worker/core/synthetic.h"

namespace worker {

namespace {

constexpr uint64_t kStreamInit = 17;

double uniform_at(uint64_t seed, size_t entry, size_t k) {  // [0, 1)
  return double(synth::hash4(seed, entry, k, kStreamInit) >> 11) * (1.0 / 9007199254740992.0);
}

// Values 2p and 2p + 1 of a normal draw: Box-Muller on one 64-bit hash gives both.
std::pair<double, double> normal_pair_at(uint64_t seed, size_t entry, size_t p) {
  const uint64_t h = synth::hash4(seed, entry, p, kStreamInit);
  const double u1 = (double(h >> 32) + 1.0) * (1.0 / 4294967296.0);  // (0, 1]
  const double u2 = double(uint32_t(h)) * (1.0 / 4294967296.0);       // [0, 1)
  const double r = std::sqrt(-2.0 * std::log(u1)), t = 6.283185307179586 * u2;
  return {r * std::cos(t), r * std::sin(t)};
}

// One stretch of the draw: units [begin, end) of state entry `entry` (a convolution's normal pairs, the
// classifier's values).
struct Stretch {
  size_t entry, begin, end;
};

constexpr size_t kStretch = size_t(1) << 16;  // units per stretch: small enough to balance the cores

}  // namespace

ModelState initial_state(const Schema& schema, uint64_t seed) {
  ModelState s;
  s.params.assign(schema.nparams, 0.0f);
  s.buffers.assign(schema.nbuffers, 0.0f);
  // The constants here; the random entries as stretches, drawn by one pool of threads (a pool per
  // entry cost a thread start per core for each of ResNet-50's 161 entries).
  std::vector<Stretch> work;
  for (size_t i = 0; i < schema.entries.size(); ++i) {
    const StateEntry& e = schema.entries[i];
    if (e.kind == StateKind::RunningVar) {
      std::fill_n(s.buffers.begin() + long(e.offset), e.count, 1.0f);
    } else if (e.kind != StateKind::Param) {
      continue;
    } else if (e.conv_weight || e.name == "fc.weight" || e.name == "fc.bias") {
      const size_t units = e.conv_weight ? (e.count + 1) / 2 : e.count;
      for (size_t b = 0; b < units; b += kStretch) work.push_back({i, b, std::min(units, b + kStretch)});
    } else {
      // BN: weight 1, bias 0.
      const bool is_weight = e.name.size() > 7 && e.name.compare(e.name.size() - 7, 7, ".weight") == 0;
      std::fill_n(s.params.data() + e.offset, e.count, is_weight ? 1.0f : 0.0f);
    }
  }
  const double fc_bound = 1.0 / std::sqrt(double(schema.fc_in));
  auto draw = [&](const Stretch& w) {
    const StateEntry& e = schema.entries[w.entry];
    float* dst = s.params.data() + e.offset;
    if (!e.conv_weight) {
      // nn.Linear's default: kaiming_uniform_(a=sqrt(5)) == U(-1/sqrt(in), 1/sqrt(in)); bias same.
      for (size_t k = w.begin; k < w.end; ++k) dst[k] = float((2.0 * uniform_at(seed, w.entry, k) - 1.0) * fc_bound);
      return;
    }
    // kaiming_normal_(mode="fan_out", nonlinearity="relu"): std = sqrt(2 / (C_out * kH * kW)), drawn
    // in PyTorch's OIHW order (value k of the entry), stored OHWI.
    const size_t ci = size_t(e.shape[1]), kh = size_t(e.shape[2]), kw = size_t(e.shape[3]);
    const double sd = std::sqrt(2.0 / double(e.shape[0] * kh * kw));
    auto put = [&](size_t k, double v) {
      const size_t x = k % kw, y = k / kw % kh, c = k / (kw * kh) % ci, o = k / (kw * kh * ci);
      dst[((o * kh + y) * kw + x) * ci + c] = float(sd * v);
    };
    for (size_t p = w.begin; p < w.end; ++p) {
      const auto [a, b] = normal_pair_at(seed, w.entry, p);
      put(2 * p, a);
      if (2 * p + 1 < e.count) put(2 * p + 1, b);
    }
  };
  const size_t threads = std::min<size_t>({size_t(process_cores()), 32, work.size()});
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t j; (j = next++) < work.size();) draw(work[j]);
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (auto& t : pool) t.join();
  s.num_batches_tracked = 0;
  return s;
}

}  // namespace worker
