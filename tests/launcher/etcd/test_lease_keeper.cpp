// The lease keeper against a real etcd: a kept lease outlives its TTL; one whose keeper stops
// expires with its keys; loss is reported on lost_fd() when etcd drops the lease or stops
// answering. TTLs are etcd's minimum (2 s with its default timings), so these take seconds.
#include <catch2/catch.hpp>

#include <poll.h>

#include "launcher/etcd/lease_keeper.h"
#include "launcher/etcd/primitives.h"
#include "tests/launcher/etcd/etcd_fixture.h"

using namespace launch::etcd;
using etcdtest::since;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

bool readable_within(int fd, std::chrono::milliseconds t) {
  pollfd p{fd, POLLIN, 0};
  return ::poll(&p, 1, int(t.count())) == 1;
}

}  // namespace

TEST_CASE("lease keeper: a kept lease and its key outlive the TTL several times", "[etcd][lease]") {
  auto& etcd = etcdtest::shared_etcd();
  Client c(etcd.options());
  const std::string k = etcdtest::unique_prefix() + "node";
  LeaseKeeper lease(etcd.options(), 2);
  CHECK(lease.ttl() == 2);
  c.put(k, "alive", lease.id());
  // 3 TTLs without a loss (the wait is the test: time has to pass).
  CHECK_FALSE(readable_within(lease.lost_fd(), 6s));
  CHECK_FALSE(lease.lost());
  CHECK(c.get(k)->lease == lease.id());
  lease.stop(LeaseKeeper::Revoke::Yes);
  CHECK_FALSE(c.get(k));  // revoked: gone at once, not a TTL later
  CHECK_FALSE(lease.lost());
}

TEST_CASE("lease keeper: when the keeper stops without revoking, etcd expires the lease and its key", "[etcd][lease]") {
  auto& etcd = etcdtest::shared_etcd();
  Client c(etcd.options());
  const std::string k = etcdtest::unique_prefix() + "node";
  LeaseKeeper lease(etcd.options(), 2);
  int64_t r = c.put(k, "alive", lease.id());
  auto t0 = Clock::now();
  lease.stop(LeaseKeeper::Revoke::No);  // as a node that died
  WatchResult w = c.wait_for_change(k, "", r, 10s);
  REQUIRE(w.outcome == WatchResult::Outcome::Changed);
  CHECK(w.events.at(0).type == EventType::Delete);
  // Within the TTL of the last renewal (made at most ttl/3 before the stop) plus etcd's expiry
  // sweep (every 0.5 s).
  CHECK(since(t0) <= 2 + 1.0);
  CHECK(since(t0) >= 2 * 2.0 / 3 - 0.1);
  CHECK_FALSE(c.get(k));
}

TEST_CASE("lease keeper: a lease revoked behind the keeper's back is reported lost", "[etcd][lease]") {
  auto& etcd = etcdtest::shared_etcd();
  Client c(etcd.options());
  LeaseKeeper lease(etcd.options(), 2);
  auto t0 = Clock::now();
  REQUIRE(c.revoke(lease.id()));
  // The next renewal (every ttl/3) hears it.
  REQUIRE(readable_within(lease.lost_fd(), 3s));
  CHECK(since(t0) < 2);
  CHECK(lease.lost());
  CHECK_THAT(lease.lost_reason(), Catch::Contains(etcd.endpoint()) && Catch::Contains(lease_name(lease.id())) &&
                                      Catch::Contains("expired or was revoked"));
  CHECK(readable_within(lease.lost_fd(), 0ms));  // and stays readable
}

TEST_CASE("lease keeper: etcd that stops answering loses the lease after one TTL", "[etcd][lease]") {
  etcdtest::require_etcd();
  etcdtest::EtcdServer etcd;
  Options o = etcd.options();
  o.timeout = 1s;
  LeaseKeeper lease(o, 2);
  auto t0 = Clock::now();
  etcd.pause();
  REQUIRE(readable_within(lease.lost_fd(), 5s));
  // Not before the TTL since the last renewal (at most ttl/3 before the pause), soon after it.
  CHECK(since(t0) >= 2 - 2.0 / 3 - 0.1);
  CHECK(since(t0) < 2 + 1.0);
  CHECK_THAT(lease.lost_reason(), Catch::Contains("not renewed for its TTL of 2 s") && Catch::Contains(etcd.endpoint()));
  etcd.resume();
}

TEST_CASE("lease keeper: stopping with etcd gone returns within the call timeout", "[etcd][lease]") {
  etcdtest::require_etcd();
  etcdtest::EtcdServer etcd;
  Options o = etcd.options();
  o.timeout = 1s;
  auto lease = std::make_unique<LeaseKeeper>(o, 2);
  etcd.pause();  // hung: the revoke can only time out
  auto t0 = Clock::now();
  lease.reset();
  CHECK(since(t0) < 1.5);
  etcd.resume();
}
