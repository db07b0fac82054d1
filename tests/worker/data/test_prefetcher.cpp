// The prefetcher: every item once, batches in order, never more than `depth` batches ahead,
// a pass abandoned for the next, a worker's exception handed to the consumer.
#include <catch2/catch.hpp>

#include <atomic>
#include <mutex>
#include <set>
#include <stdexcept>

#include "worker/data/prefetcher.h"

using namespace worker;

TEST_CASE("prefetcher: items of each batch done before take(), at most depth batches ahead") {
  std::mutex mu;
  std::vector<std::vector<int64_t>> seen(3);  // per slot
  std::atomic<int64_t> max_ahead{0};
  std::atomic<int64_t> consumed{0};
  Prefetcher p(4, 3, [&](int slot, int, int64_t sample, int64_t, int) {
    const int64_t batch = sample / 10;
    int64_t ahead = batch - consumed.load();
    int64_t m = max_ahead.load();
    while (ahead > m && !max_ahead.compare_exchange_weak(m, ahead)) {}
    std::lock_guard<std::mutex> lk(mu);
    seen[size_t(slot)].push_back(sample);
  });
  std::vector<BatchIndices> order;
  for (int b = 0; b < 20; ++b) {
    BatchIndices idx;
    for (int i = 0; i < 7; ++i) idx.push_back(b * 10 + i);
    order.push_back(idx);
  }
  p.start(0, order);
  for (int b = 0; b < 20; ++b) {
    const int slot = p.take(nullptr);
    REQUIRE(slot == b % 3);
    {
      std::lock_guard<std::mutex> lk(mu);
      std::set<int64_t> got(seen[size_t(slot)].begin(), seen[size_t(slot)].end());
      std::set<int64_t> want(order[size_t(b)].begin(), order[size_t(b)].end());
      REQUIRE(got == want);
      seen[size_t(slot)].clear();
    }
    consumed = b + 1;
    p.release();
  }
  CHECK(p.take(nullptr) == -1);
  CHECK(max_ahead.load() <= 3);
}

TEST_CASE("prefetcher: start() abandons a pass; errors reach take()") {
  Prefetcher p(2, 2, [&](int, int, int64_t sample, int64_t epoch, int) {
    if (epoch == 9 && sample == 3) throw std::runtime_error("bad sample 3");
  });
  p.start(0, {{0, 1}, {2, 3}, {4, 5}});
  REQUIRE(p.take(nullptr) == 0);  // read one batch of three, then begin another pass
  p.release();
  p.start(9, {{0, 1}, {2, 3}});
  REQUIRE(p.take(nullptr) == 0);
  p.release();
  CHECK_THROWS_WITH(p.take(nullptr), "bad sample 3");
}
