// The prefetcher: every item once, batches in order, never more than `depth` batches ahead,
// a pass abandoned for the next, a worker's exception handed to the consumer, a followed pass
// read ahead and kept (or dropped by another start()), the threads' lowered priority.
#include <catch2/catch.hpp>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>
#include <utility>

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

namespace {

// n batches of `size` samples: batch b holds b * 100 + i.
std::vector<BatchIndices> batches_of(int n, int size, int64_t base = 0) {
  std::vector<BatchIndices> order;
  for (int b = 0; b < n; ++b) {
    BatchIndices idx;
    for (int i = 0; i < size; ++i) idx.push_back(base + b * 100 + i);
    order.push_back(idx);
  }
  return order;
}

// Waits (at most 10 s) until pred() holds under mu.
template <typename Pred>
bool eventually(std::mutex& mu, Pred pred) {
  for (int i = 0; i < 10000; ++i) {
    {
      std::lock_guard<std::mutex> lk(mu);
      if (pred()) return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

}  // namespace

TEST_CASE("prefetcher: a followed pass is read while the current one ends, and kept by its start()") {
  std::mutex mu;
  std::map<int, std::vector<std::pair<int64_t, int64_t>>> seen;  // slot -> (sample, epoch) done since its release
  Prefetcher p(3, 2, [&](int slot, int, int64_t sample, int64_t epoch, int) {
    std::lock_guard<std::mutex> lk(mu);
    seen[slot].push_back({sample, epoch});
  });
  const std::vector<BatchIndices> first = batches_of(3, 4), second = batches_of(5, 4, 10000);
  p.start(0, first);
  p.follow(1, second);
  CHECK_THROWS_WITH(p.follow(1, second), "prefetcher: follow() twice for one pass");
  auto take_batch = [&](const BatchIndices& want, int64_t epoch) {
    const int slot = p.take(nullptr);
    REQUIRE(slot >= 0);
    std::lock_guard<std::mutex> lk(mu);
    std::multiset<std::pair<int64_t, int64_t>> got(seen[slot].begin(), seen[slot].end()), expected;
    for (int64_t s : want) expected.insert({s, epoch});
    REQUIRE(got == expected);  // every sample of the batch once, with its own pass's epoch
    seen[slot].clear();
  };
  for (const BatchIndices& b : first) {
    take_batch(b, 0);
    p.release();
  }
  CHECK(p.take(nullptr) == -1);
  // Before the next pass starts, the threads have read its first depth (2) batches.
  size_t ahead = 0;
  CHECK(eventually(mu, [&] {
    ahead = 0;
    for (const auto& [slot, items] : seen) ahead += items.size();
    return ahead == 8;
  }));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  {
    std::lock_guard<std::mutex> lk(mu);
    size_t now = 0;
    for (const auto& [slot, items] : seen) now += items.size();
    CHECK(now == 8);  // and no more: still at most depth batches past the consumer
  }
  p.start(1, second);  // the followed pass: what was read is kept
  for (const BatchIndices& b : second) {
    take_batch(b, 1);
    p.release();
  }
  CHECK(p.take(nullptr) == -1);
}

TEST_CASE("prefetcher: a start() other than the followed pass abandons it; its errors wait for their batch") {
  std::mutex mu;
  std::map<int, std::vector<int64_t>> seen;
  Prefetcher p(2, 2, [&](int slot, int, int64_t sample, int64_t epoch, int) {
    if (epoch == 7 && sample == 10001) throw std::runtime_error("bad sample 10001");
    std::lock_guard<std::mutex> lk(mu);
    seen[slot].push_back(sample);
  });
  const std::vector<BatchIndices> first = batches_of(2, 3), other = batches_of(2, 3, 50000);
  SECTION("another order: the followed one is dropped, the new one read from its start") {
    p.start(0, first);
    p.follow(7, batches_of(2, 3, 10000));
    for (int b = 0; b < 2; ++b) {
      REQUIRE(p.take(nullptr) >= 0);
      p.release();
    }
    p.start(7, other);  // same epoch, other samples
    for (const BatchIndices& b : other) {
      const int slot = p.take(nullptr);  // the followed pass's error (batch 0, sample 10001) must not reach here
      REQUIRE(slot >= 0);
      std::lock_guard<std::mutex> lk(mu);
      std::multiset<int64_t> got, want(b.begin(), b.end());
      for (int64_t s : seen[slot])
        if (s >= 50000) got.insert(s);  // (what the abandoned passes left in the slot aside)
      CHECK(got == want);
      seen[slot].clear();
      p.release();
    }
  }
  SECTION("the followed pass: a failed item is reported at its batch, not before") {
    p.start(0, first);
    p.follow(7, batches_of(2, 3, 10000));
    for (int b = 0; b < 2; ++b) {
      REQUIRE(p.take(nullptr) >= 0);  // the current pass ends cleanly although the next one has failed
      p.release();
    }
    p.start(7, batches_of(2, 3, 10000));
    CHECK_THROWS_WITH(p.take(nullptr), "bad sample 10001");
  }
}

TEST_CASE("prefetcher: the threads run at the process's priority lowered by nice, the consumer's unchanged") {
  errno = 0;
  const int base = ::getpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)));
  REQUIRE(errno == 0);
  for (const int nice : {0, 5}) {
    std::mutex mu;
    std::set<int> seen;
    Prefetcher p(3, 2, [&](int, int, int64_t, int64_t, int) {
      errno = 0;
      const int now = ::getpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)));
      std::lock_guard<std::mutex> lk(mu);
      seen.insert(errno == 0 ? now : -100);
    }, nice);
    p.start(0, {{0, 1, 2, 3}, {4, 5, 6, 7}});
    while (p.take(nullptr) >= 0) p.release();
    CHECK(seen == std::set<int>{std::min(19, base + nice)});
  }
  CHECK(::getpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid))) == base);
  CHECK_THROWS_AS(Prefetcher(1, 1, [](int, int, int64_t, int64_t, int) {}, -1), std::invalid_argument);
}
