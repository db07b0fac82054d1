// Which samples each rank reads: a DistributedSampler over `world * accum` replicas.
//
// Each epoch the data set is permuted with a seed derived from (seed, epoch), padded to a
// multiple of the replica count by repeating its start, and replica s takes indices
// s, s + R, s + 2R, ... (R = world * accum). Rank r's micro-batch k of a step is replica
// r * accum + k. With accum = 1 this is exactly torch's DistributedSampler (drop_last for the
// incomplete last batch); with accum > 1 it makes gradient accumulation read the data as that
// many more ranks would, so "2 ranks x batch B" and "1 rank x batch B x 2 accumulation steps"
// see the same batch-norm batches and agree up to float rounding.
#pragma once

#include <cstdint>
#include <vector>

namespace worker {

struct SamplerConfig {
  int64_t num_samples = 0;
  int world = 1;
  int accum = 1;
  int batch = 1;  // per micro-batch
  uint64_t seed = 0;
};

// The order of an evaluation pass: rank r reads samples r, r + world, r + 2 world, ... of the
// split, in micro-batches of at most `batch` (the last one shorter). No padding and no
// shuffling: every sample is read exactly once by exactly one rank, whatever the split's size.
std::vector<std::vector<int64_t>> eval_order(int64_t size, int rank, int world, int batch);

class Sampler {
 public:
  explicit Sampler(const SamplerConfig& cfg);  // throws std::invalid_argument on bad sizes

  int64_t shard_length() const;     // samples per replica per epoch
  int64_t steps_per_epoch() const;  // optimizer steps per epoch (incomplete batch dropped)

  // The permutation of [0, num_samples) for an epoch (pure function of seed and epoch).
  std::vector<int64_t> permutation(int64_t epoch) const;
  // The sample indices of rank `rank`, micro-batch `micro` of step `step` of the epoch whose
  // permutation is `perm`.
  std::vector<int64_t> batch(const std::vector<int64_t>& perm, int rank, int micro,
                             int64_t step) const;
  // Everything rank `rank` reads in steps [first_step, steps_per_epoch()) of an epoch, one entry
  // per micro-batch in reading order (step by step, micro-batches within a step).
  std::vector<std::vector<int64_t>> epoch_order(int64_t epoch, int rank, int64_t first_step) const;

 private:
  SamplerConfig cfg_;
};

}  // namespace worker
