// The membership record's etcd backend (launcher/elastic/etcd_backend.h) against a real etcd:
// compare-and-swap on the value, no lost update among racing writers, waits that park until the
// record or a node's key changes, liveness from the nodes' leases, the cancel hook.
#include <catch2/catch.hpp>

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <thread>
#include <vector>

#include "launcher/elastic/etcd_backend.h"
#include "launcher/etcd/etcd_rendezvous.h"
#include "tests/launcher/etcd/etcd_fixture.h"

using namespace launch;
using elastic::BackendError;
using elastic::EtcdBackend;
using etcdtest::since;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

std::string job_name() {
  etcdtest::shared_etcd();
  std::string p = etcdtest::unique_prefix();
  return "backend" + p.substr(1, p.size() - 2);
}

EtcdBackend backend(const std::string& job) { return EtcdBackend(etcdtest::shared_etcd().options(), job); }

}  // namespace

TEST_CASE("etcd backend: the record by compare-and-swap on its value; a lost race returns what is there", "[etcd][elastic]") {
  const std::string job = job_name();
  EtcdBackend a = backend(job), b = backend(job);
  CHECK(a.load(2s).empty());
  CHECK(a.compare_and_swap("", "v1", 1, 2s) == "v1");
  CHECK(b.compare_and_swap("", "v2", 1, 2s) == "v1");  // "none yet" no longer holds
  CHECK(b.compare_and_swap("v1", "v2", 2, 2s) == "v2");
  CHECK(a.compare_and_swap("v1", "v3", 2, 2s) == "v2");  // a's view is stale: it gets b's
  CHECK(a.load(2s) == "v2");
  CHECK_THAT(a.where(), Catch::Contains("etcd at " + etcdtest::shared_etcd().endpoint()));
  // Where it lives, beside the job's other keys.
  launch::etcd::Client c(etcdtest::shared_etcd().options());
  REQUIRE(c.get(launch::etcd::membership_key(job)));
  CHECK(c.get(launch::etcd::membership_key(job))->value == "v2");
}

TEST_CASE("etcd backend: racing writers lose no update", "[etcd][elastic]") {
  const std::string job = job_name();
  constexpr int kWriters = 6, kEach = 15;
  std::vector<std::thread> writers;
  // Each write is "count writer": two writers never want the same bytes (a value compared equal
  // would let both believe they won, as they rightly may when they want the same record).
  for (int w = 0; w < kWriters; ++w)
    writers.emplace_back([&, w] {
      EtcdBackend b = backend(job);
      std::string seen = b.load(5s);
      for (int done = 0; done < kEach;) {
        const std::string want = std::to_string((seen.empty() ? 0 : std::stoi(seen)) + 1) + " " + std::to_string(w);
        const std::string now = b.compare_and_swap(seen, want, 0, 5s);
        if (now == want) ++done;
        seen = now;
      }
    });
  for (auto& t : writers) t.join();
  const std::string last = backend(job).load(2s);
  CHECK(last.substr(0, last.find(' ')) == std::to_string(kWriters * kEach));
}

TEST_CASE("etcd backend: wait_change parks until the record or a node's key changes; liveness from the leases", "[etcd][elastic]") {
  const std::string job = job_name();
  EtcdBackend watcher = backend(job), writer = backend(job);
  REQUIRE(writer.compare_and_swap("", "r1", 1, 2s) == "r1");
  REQUIRE(watcher.load(2s) == "r1");

  // Nothing changes: the wait lasts its timeout, and a wait too short for etcd to confirm the
  // watch is no error.
  auto t0 = Clock::now();
  watcher.wait_change(1, 300ms);
  CHECK(since(t0) >= 0.25);
  CHECK(since(t0) < 2.0);
  CHECK_NOTHROW(watcher.wait_change(1, 1ms));

  // The record changes while the watcher waits: it returns then, not at its timeout.
  std::thread later([&] {
    std::this_thread::sleep_for(300ms);
    writer.compare_and_swap("r1", "r2", 2, 2s);
  });
  t0 = Clock::now();
  watcher.wait_change(1, 10s);
  const double woke = since(t0);
  later.join();
  CHECK(woke >= 0.25);
  CHECK(woke < 5.0);
  CHECK(watcher.load(2s) == "r2");

  // A change made before the wait (after the last read) is not missed.
  writer.compare_and_swap("r2", "r3", 3, 2s);
  t0 = Clock::now();
  watcher.wait_change(2, 10s);
  CHECK(since(t0) < 2.0);

  // alive(): the nodes whose key (with its lease) is there; a lease that ends wakes the wait.
  CHECK(watcher.alive(2s) == std::vector<std::string>{});
  launch::etcd::RendezvousConfig cfg;
  cfg.etcd = etcdtest::shared_etcd().options();
  cfg.job_id = job;
  cfg.node_id = "node-a";
  cfg.lease_ttl_s = 2;
  auto node = std::make_unique<launch::etcd::EtcdRendezvous>(cfg);
  node->join("a");
  CHECK(watcher.alive(2s) == std::vector<std::string>{"node-a"});
  REQUIRE(watcher.load(2s) == "r3");
  std::thread leave([&] {
    std::this_thread::sleep_for(300ms);
    node.reset();  // revokes its lease: its key goes
  });
  t0 = Clock::now();
  watcher.wait_change(3, 10s);
  leave.join();
  CHECK(since(t0) < 5.0);
  CHECK(watcher.alive(2s) == std::vector<std::string>{});
}

TEST_CASE("etcd backend: the cancel hook ends a wait at once", "[etcd][elastic]") {
  const std::string job = job_name();
  const int efd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  REQUIRE(efd >= 0);
  launch::etcd::Options o = etcdtest::shared_etcd().options();
  o.cancel_fd = efd;
  o.cancelled = [] { return true; };
  EtcdBackend b(o, job);
  b.load(2s);
  std::thread poke([&] {
    std::this_thread::sleep_for(200ms);
    uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(efd, &one, sizeof one);
  });
  const auto t0 = Clock::now();
  BackendError::Kind kind = BackendError::Kind::Unavailable;
  try {
    b.wait_change(0, 20s);
  } catch (const BackendError& e) {
    kind = e.kind();
  }
  poke.join();
  ::close(efd);
  CHECK(kind == BackendError::Kind::Cancelled);
  CHECK(since(t0) < 3.0);
}
