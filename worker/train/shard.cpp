#include "worker/train/shard.h"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "worker/comm/comm.h"

namespace worker {

ShardLayout make_shard_layout(size_t count, size_t bucket, int rank, int world) {
  if (count == 0 || bucket == 0 || world < 1 || rank < 0 || rank >= world)
    throw std::invalid_argument("shard layout: " + std::to_string(count) + " elements, bucket " + std::to_string(bucket) +
                                ", rank " + std::to_string(rank) + " of " + std::to_string(world));
  const size_t w = size_t(world);
  const size_t step = std::max(w, bucket / w * w);
  ShardLayout l;
  l.rank = rank;
  l.world = world;
  for (size_t end = count; end > 0;) {
    const size_t begin = end > step ? end - step : 0;
    l.buckets.push_back({begin, end});
    const auto [off, n] = comm_block(end - begin, world, rank);
    l.owned.push_back({begin + off, n});
    l.owned_total += n;
    end = begin;
  }
  return l;
}

}  // namespace worker
