#include <catch2/catch.hpp>

#include <algorithm>
#include <set>

#include "worker/train/sampler.h"

using worker::Sampler;
using worker::SamplerConfig;

TEST_CASE("each epoch is a permutation; epochs and seeds differ; deterministic", "[train][sampler]") {
  Sampler s({100, 1, 1, 10, 7});
  const auto p0 = s.permutation(0), p1 = s.permutation(1);
  auto sorted = p0;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 100; ++i) REQUIRE(sorted[size_t(i)] == i);
  CHECK(p0 != p1);
  CHECK(p0 == Sampler({100, 1, 1, 10, 7}).permutation(0));
  CHECK(p0 != Sampler({100, 1, 1, 10, 8}).permutation(0));
}

TEST_CASE("ranks read disjoint, equal shards that cover the epoch", "[train][sampler]") {
  for (int world : {1, 2, 3, 4}) {
    Sampler s({120, world, 1, 5, 1});
    const int64_t steps = s.steps_per_epoch();
    CHECK(steps == 120 / world / 5);
    const auto perm = s.permutation(3);
    std::set<int64_t> seen;
    size_t total = 0;
    for (int r = 0; r < world; ++r) {
      for (int64_t b = 0; b < steps; ++b) {
        const auto idx = s.batch(perm, r, 0, b);
        REQUIRE(idx.size() == 5);
        seen.insert(idx.begin(), idx.end());
        total += idx.size();
      }
    }
    CHECK(seen.size() == total);  // disjoint
    CHECK(total == 120);          // 120 divides evenly here: everything is read once
  }
}

TEST_CASE("rank r takes r, r + world, ... of the permutation (DistributedSampler)", "[train][sampler]") {
  Sampler s({10, 3, 1, 2, 5});
  CHECK(s.shard_length() == 4);  // padded to 12 by repeating the start
  CHECK(s.steps_per_epoch() == 2);
  const auto perm = s.permutation(0);
  CHECK(s.batch(perm, 1, 0, 0) == std::vector<int64_t>{perm[1], perm[4]});
  CHECK(s.batch(perm, 1, 0, 1) == std::vector<int64_t>{perm[7], perm[0]});  // position 10 wraps to 0
  CHECK(s.batch(perm, 2, 0, 1) == std::vector<int64_t>{perm[8], perm[1]});
  CHECK_THROWS(s.batch(perm, 3, 0, 0));
  CHECK_THROWS(s.batch(perm, 0, 0, 2));
}

TEST_CASE("accumulation reads as more ranks would: 1 rank x 2 micro == 2 ranks x 1", "[train][sampler]") {
  Sampler two_ranks({64, 2, 1, 4, 9}), accum({64, 1, 2, 4, 9});
  CHECK(two_ranks.steps_per_epoch() == accum.steps_per_epoch());
  const auto perm = two_ranks.permutation(2);
  REQUIRE(perm == accum.permutation(2));
  for (int64_t b = 0; b < two_ranks.steps_per_epoch(); ++b) {
    for (int r = 0; r < 2; ++r) CHECK(two_ranks.batch(perm, r, 0, b) == accum.batch(perm, 0, r, b));
  }
}

TEST_CASE("too few samples for one batch give zero steps; bad sizes throw", "[train][sampler]") {
  CHECK(Sampler({10, 4, 1, 8, 0}).steps_per_epoch() == 0);
  CHECK_THROWS(Sampler({0, 1, 1, 1, 0}));
  CHECK_THROWS(Sampler({10, 0, 1, 1, 0}));
}

TEST_CASE("epoch_order lists a rank's micro-batches from a step on, in reading order", "[train][sampler]") {
  Sampler s({64, 2, 2, 4, 3});  // 2 ranks x 2 micro-batches of 4: 4 steps per epoch
  REQUIRE(s.steps_per_epoch() == 4);
  const auto perm = s.permutation(5);
  const auto order = s.epoch_order(5, 1, 1);  // rank 1 resumed at step 1
  REQUIRE(order.size() == 3 * 2);
  for (int64_t step = 1; step < 4; ++step)
    for (int micro = 0; micro < 2; ++micro) CHECK(order[size_t((step - 1) * 2 + micro)] == s.batch(perm, 1, micro, step));
  CHECK(s.epoch_order(5, 1, 4).empty());
}

// --- A new world size mid-epoch (issue 21): the epoch continues from its sample position.

TEST_CASE("segments: another global batch continues the epoch from the same sample, nothing twice", "[train][sampler]") {
  const int64_t n = 50;
  Sampler two({n, 2, 1, 4, 9}), three({n, 3, 1, 4, 9}), five({n, 5, 2, 1, 9});
  REQUIRE(two.global_batch() == 8);
  REQUIRE(three.global_batch() == 12);
  REQUIRE(five.global_batch() == 10);
  CHECK(two.steps_from(0) == two.steps_per_epoch());
  const auto perm = two.permutation(4);
  CHECK(three.permutation(4) == perm);  // the permutation does not depend on the layout
  // 3 steps on 2 ranks (samples 0..23), then 3 ranks from 24: 2 whole steps (24..47); then 5
  // ranks x 2 micro-batches of 1 from 48: no whole batch left.
  std::vector<int> seen(size_t(n), 0);
  auto read = [&](const Sampler& s, int world, int accum, int64_t start, int64_t steps) {
    for (int r = 0; r < world; ++r)
      for (int64_t b = 0; b < steps; ++b)
        for (int k = 0; k < accum; ++k)
          for (int64_t i : s.batch(perm, r, k, b, start)) ++seen[size_t(i)];
  };
  read(two, 2, 1, 0, 3);
  CHECK(three.steps_from(24) == 2);
  read(three, 3, 1, 24, 2);
  CHECK(five.steps_from(48) == 0);
  CHECK(two.steps_from(48) == 0);
  CHECK(three.steps_from(n) == 0);
  // Positions 0..47 of the permutation once each, the tail (48, 49) dropped.
  for (int64_t p = 0; p < n; ++p) CHECK(seen[size_t(perm[size_t(p)])] == (p < 48 ? 1 : 0));
  // A segment's step reads the next global batch of positions, dealt as DistributedSampler.
  CHECK(three.batch(perm, 1, 0, 0, 24) == std::vector<int64_t>{perm[25], perm[28], perm[31], perm[34]});
  CHECK(three.epoch_order(4, 2, 1, 24).size() == 1);
  CHECK_THROWS(three.batch(perm, 0, 0, 2, 24));
}
