// Which samples each rank reads: a DistributedSampler over `world * accum` replicas.
//
// Each epoch the data set is permuted with a seed derived from (seed, epoch), padded to a
// multiple of the replica count by repeating its start, and replica s takes indices
// s, s + R, s + 2R, ... (R = world * accum). Rank r's micro-batch k of a step is replica
// r * accum + k. With accum = 1 this is exactly torch's DistributedSampler (drop_last for the
// incomplete last batch); with accum > 1 it makes gradient accumulation read the data as that
// many more ranks would, so "2 ranks x batch B" and "1 rank x batch B x 2 accumulation steps"
// see the same batch-norm batches and agree up to float rounding.
//
// Step s of an epoch reads the permutation's positions [s G, (s + 1) G), G = R x batch (the global
// batch): the epoch's progress is a sample position, whatever R. A run resumed with another
// global batch (another world size, issue 21) continues the epoch from that position, a
// "segment" of the epoch: step s of a segment that starts at sample P reads [P + s G', P + (s + 1) G'),
// dealt out the same way, and the segment ends with the last whole batch before the end of the
// permutation (its tail is dropped, not padded: padding would repeat samples read before P).
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
  int64_t global_batch() const;     // samples per step: replicas x batch
  // Steps of the epoch's segment that starts at sample `start`: steps_per_epoch() from 0, else the
  // whole global batches left in the permutation.
  int64_t steps_from(int64_t start) const;

  // The permutation of [0, num_samples) for an epoch (pure function of seed and epoch).
  std::vector<int64_t> permutation(int64_t epoch) const;
  // The sample indices of rank `rank`, micro-batch `micro` of step `step` of the epoch whose
  // permutation is `perm` (of its segment that starts at sample `start`).
  std::vector<int64_t> batch(const std::vector<int64_t>& perm, int rank, int micro,
                             int64_t step, int64_t start = 0) const;
  // Everything rank `rank` reads in steps [first_step, steps_from(start)) of an epoch's segment,
  // one entry per micro-batch in reading order (step by step, micro-batches within a step).
  std::vector<std::vector<int64_t>> epoch_order(int64_t epoch, int rank, int64_t first_step,
                                                int64_t start = 0) const;

 private:
  SamplerConfig cfg_;
};

}  // namespace worker
