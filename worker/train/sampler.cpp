#include "worker/train/sampler.h"

#include <numeric>
#include <stdexcept>
#include <string>

namespace worker {

namespace {

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Uniform in [0, n) without modulo bias (Lemire's method would do too; rejection is simpler).
uint64_t below(uint64_t& state, uint64_t n) {
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t r;
  do {
    r = splitmix64(state);
  } while (r >= limit);
  return r % n;
}

}  // namespace

std::vector<std::vector<int64_t>> eval_order(int64_t size, int rank, int world, int batch) {
  if (size < 0 || world < 1 || rank < 0 || rank >= world || batch < 1) throw std::invalid_argument("eval_order: bad sizes");
  std::vector<std::vector<int64_t>> order;
  for (int64_t i = rank; i < size; i += world) {
    if (order.empty() || int64_t(order.back().size()) == batch) order.emplace_back();
    order.back().push_back(i);
  }
  return order;
}

Sampler::Sampler(const SamplerConfig& cfg) : cfg_(cfg) {
  if (cfg.num_samples < 1 || cfg.world < 1 || cfg.accum < 1 || cfg.batch < 1) {
    throw std::invalid_argument("sampler: sizes must be positive");
  }
}

int64_t Sampler::shard_length() const {
  const int64_t replicas = int64_t(cfg_.world) * cfg_.accum;
  return (cfg_.num_samples + replicas - 1) / replicas;
}

int64_t Sampler::steps_per_epoch() const { return shard_length() / cfg_.batch; }

int64_t Sampler::global_batch() const { return int64_t(cfg_.world) * cfg_.accum * cfg_.batch; }

int64_t Sampler::steps_from(int64_t start) const {
  if (start == 0) return steps_per_epoch();
  return start < 0 || start >= cfg_.num_samples ? 0 : (cfg_.num_samples - start) / global_batch();
}

std::vector<int64_t> Sampler::permutation(int64_t epoch) const {
  std::vector<int64_t> perm(size_t(cfg_.num_samples));
  std::iota(perm.begin(), perm.end(), int64_t(0));
  uint64_t state = cfg_.seed * 0x2545f4914f6cdd1dULL ^ (uint64_t(epoch) + 0x5851f42d4c957f2dULL);
  splitmix64(state);
  for (size_t i = perm.size(); i > 1; --i) {  // Fisher-Yates
    const size_t j = size_t(below(state, i));
    std::swap(perm[i - 1], perm[j]);
  }
  return perm;
}

std::vector<int64_t> Sampler::batch(const std::vector<int64_t>& perm, int rank, int micro,
                                    int64_t step, int64_t start) const {
  if (rank < 0 || rank >= cfg_.world || micro < 0 || micro >= cfg_.accum || step < 0 ||
      step >= steps_from(start)) {
    throw std::out_of_range("sampler: batch (rank " + std::to_string(rank) + ", micro " +
                            std::to_string(micro) + ", step " + std::to_string(step) + " from sample " +
                            std::to_string(start) + ") out of range");
  }
  const int64_t replicas = int64_t(cfg_.world) * cfg_.accum;
  const int64_t replica = int64_t(rank) * cfg_.accum + micro;
  const int64_t n = int64_t(perm.size());
  std::vector<int64_t> out(size_t(cfg_.batch));
  for (int i = 0; i < cfg_.batch; ++i) {
    const int64_t pos = start + (step * cfg_.batch + i) * replicas + replica;  // in the padded list
    out[size_t(i)] = perm[size_t(pos % n)];  // padding repeats the start, as DistributedSampler
  }
  return out;
}

std::vector<std::vector<int64_t>> Sampler::epoch_order(int64_t epoch, int rank, int64_t first_step,
                                                       int64_t start) const {
  const std::vector<int64_t> perm = permutation(epoch);
  std::vector<std::vector<int64_t>> order;
  const int64_t steps = steps_from(start);
  for (int64_t step = first_step; step < steps; ++step)
    for (int micro = 0; micro < cfg_.accum; ++micro) order.push_back(batch(perm, rank, micro, step, start));
  return order;
}

}  // namespace worker
