// The flat parameter buffer cut into communication buckets, and the part of each bucket a rank
// owns under ZeRO-1 (issue 15). One layout, computed the same way on every rank, serves the
// gradient reduction (all-reduce or reduce-scatter, bucket by bucket as backward finishes them),
// the optimizer (each rank steps its blocks only) and the all-gather of the updated weights.
//
// Buckets are cut from the end of the buffer, where backward finishes first: all but the one at
// the buffer's start hold exactly `bucket` elements rounded down to a multiple of the world size,
// so NCCL's equal-block reduce-scatter and all-gather apply to them. Bucket k's block r (its
// comm_block) belongs to rank r; block boundaries fall anywhere, inside tensors included.
#pragma once

#include <cstddef>
#include <vector>

#include "worker/core/ops.h"

namespace worker {

struct Bucket {
  size_t begin = 0, end = 0;  // [begin, end) of the flat buffer
  size_t size() const { return end - begin; }
};

struct ShardLayout {
  int rank = 0, world = 1;
  std::vector<Bucket> buckets;  // in reduction order: from the end of the buffer to its start
  std::vector<ParamView> owned;  // owned[k]: this rank's block of buckets[k] (count may be 0)
  size_t owned_total = 0;        // elements this rank owns (the optimizer state it keeps)
};

// Throws std::invalid_argument for count 0, bucket 0 or a world size below 1.
ShardLayout make_shard_layout(size_t count, size_t bucket, int rank, int world);

}  // namespace worker
