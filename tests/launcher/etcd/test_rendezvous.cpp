// The etcd rendezvous with several nodes as threads against a real etcd: all agree on the ranks,
// exactly one serves the store, and when that node dies another takes over.
#include <catch2/catch.hpp>

#include <poll.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "launcher/etcd/etcd_rendezvous.h"
#include "tests/launcher/etcd/etcd_fixture.h"

using namespace launch::etcd;
using etcdtest::since;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

RendezvousConfig config(const std::string& job, const std::string& node) {
  RendezvousConfig c;
  c.etcd = etcdtest::shared_etcd().options();
  c.job_id = job;
  c.node_id = node;
  c.lease_ttl_s = 2;
  return c;
}

// Also starts the shared etcd on the test's thread, before any node thread asks for it.
std::string job_name() {
  etcdtest::shared_etcd();
  std::string p = etcdtest::unique_prefix();  // "/test-<pid>-<n>/"
  return "job" + p.substr(1, p.size() - 2);
}

}  // namespace

TEST_CASE("rendezvous: 3 nodes joining at once agree on the members and their ranks", "[etcd][rendezvous]") {
  const std::string job = job_name();
  constexpr int kNodes = 3;
  std::vector<Membership> seen(kNodes);
  std::vector<std::thread> threads;
  std::mutex mu;
  std::condition_variable cv;
  int done = 0;
  for (int i = 0; i < kNodes; ++i) {
    threads.emplace_back([&, i] {
      EtcdRendezvous r(config(job, "node-" + std::to_string(i)));
      r.join("record of node " + std::to_string(i));
      seen[i] = r.wait_for_members(kNodes, 10s);
      // Stay a member until every node has seen all three (leaving is a change of membership).
      std::unique_lock<std::mutex> lock(mu);
      ++done;
      cv.notify_all();
      cv.wait_for(lock, 10s, [&] { return done == kNodes; });
    });
  }
  for (auto& t : threads) t.join();
  for (int i = 1; i < kNodes; ++i) {
    REQUIRE(seen[i].nodes.size() == kNodes);
    for (int k = 0; k < kNodes; ++k) CHECK(seen[i].nodes[k].node_id == seen[0].nodes[k].node_id);
  }
  std::set<int> ranks;
  for (int i = 0; i < kNodes; ++i) ranks.insert(seen[0].rank_of("node-" + std::to_string(i)));
  CHECK(ranks == std::set<int>{0, 1, 2});
  CHECK(seen[0].nodes[seen[0].rank_of("node-1")].record == "record of node 1");
}

TEST_CASE("rendezvous: a node id that is taken is refused; missing nodes time out by count", "[etcd][rendezvous]") {
  const std::string job = job_name();
  EtcdRendezvous a(config(job, "same-id"));
  a.join("a");
  EtcdRendezvous b(config(job, "same-id"));
  CHECK_THROWS_WITH(b.join("b"), Catch::Contains("node id 'same-id' is registered already in job '" + job + "'"));
  auto t0 = Clock::now();
  CHECK_THROWS_WITH(a.wait_for_members(2, 500ms),
                    Catch::Contains("only 1 of 2 nodes joined job '" + job + "'") && Catch::Contains("(same-id)"));
  CHECK(since(t0) >= 0.45);
  CHECK(since(t0) < 3);
}

TEST_CASE("rendezvous: a node that leaves or dies is gone from the membership", "[etcd][rendezvous]") {
  const std::string job = job_name();
  EtcdRendezvous a(config(job, "a"));
  a.join("");
  auto b = std::make_unique<EtcdRendezvous>(config(job, "b"));
  b->join("");
  auto c = std::make_unique<EtcdRendezvous>(config(job, "c"));
  c->join("");
  Membership m = a.wait_for_members(3, 5s);

  auto t0 = Clock::now();
  b->leave();  // revoked: at once
  auto after_leave = a.wait_for_change(m, 5s);
  REQUIRE(after_leave);
  CHECK(since(t0) < 1);
  CHECK(after_leave->nodes.size() == 2);
  CHECK(after_leave->rank_of("b") == -1);
  CHECK(after_leave->rank_of("c") == 1);

  t0 = Clock::now();
  c->lease().stop(LeaseKeeper::Revoke::No);  // as if c's launcher was killed
  auto after_death = a.wait_for_change(*after_leave, 10s);
  REQUIRE(after_death);
  CHECK(since(t0) < 2 + 1.0);  // its TTL, plus etcd's expiry sweep
  CHECK(after_death->nodes.size() == 1);
  CHECK(after_death->rank_of("a") == 0);
  CHECK_FALSE(a.wait_for_change(*after_death, 300ms));  // nothing else happens
}

TEST_CASE("rendezvous: one node serves the store; when it dies, exactly one other takes over", "[etcd][rendezvous]") {
  const std::string job = job_name();
  constexpr int kNodes = 3;
  std::vector<std::unique_ptr<EtcdRendezvous>> nodes;
  for (int i = 0; i < kNodes; ++i) {
    nodes.push_back(std::make_unique<EtcdRendezvous>(config(job, "n" + std::to_string(i))));
    nodes.back()->join("");
  }
  std::vector<StoreHolder> holders(kNodes);
  std::vector<std::thread> threads;
  for (int i = 0; i < kNodes; ++i)
    threads.emplace_back([&, i] { holders[i] = nodes[i]->claim_store("127.0.0." + std::to_string(i + 1) + ":29500"); });
  for (auto& t : threads) t.join();
  int winner = -1;
  for (int i = 0; i < kNodes; ++i)
    if (holders[i].mine) {
      REQUIRE(winner == -1);
      winner = i;
    }
  REQUIRE(winner >= 0);
  for (const StoreHolder& h : holders) {
    CHECK(h.node_id == "n" + std::to_string(winner));
    CHECK(h.address == "127.0.0." + std::to_string(winner + 1) + ":29500");
  }

  // The server dies: the others' waits return once its lease expires; one of them takes over.
  auto t0 = Clock::now();
  nodes[winner]->lease().stop(LeaseKeeper::Revoke::No);
  std::vector<StoreHolder> next(kNodes);
  std::vector<double> noticed(kNodes, -1);
  threads.clear();
  for (int i = 0; i < kNodes; ++i) {
    if (i == winner) continue;
    threads.emplace_back([&, i] {
      if (!nodes[i]->wait_store_vacant(holders[i], 10s)) return;
      noticed[i] = since(t0);
      next[i] = nodes[i]->claim_store("127.0.0." + std::to_string(i + 1) + ":29500");
    });
  }
  for (auto& t : threads) t.join();
  int successor = -1;
  for (int i = 0; i < kNodes; ++i) {
    if (i == winner) continue;
    CHECK(noticed[i] >= 0);
    CHECK(noticed[i] < 2 + 1.0);
    if (next[i].mine) {
      CHECK(successor == -1);
      successor = i;
    }
  }
  REQUIRE(successor >= 0);
  for (int i = 0; i < kNodes; ++i)
    if (i != winner) CHECK(next[i].address == "127.0.0." + std::to_string(successor + 1) + ":29500");

  // Resigning hands it on at once.
  int other = 3 - winner - successor;
  t0 = Clock::now();
  std::thread waiter([&] { CHECK(nodes[other]->wait_store_vacant(next[other], 5s)); });
  nodes[successor]->resign_store(next[successor]);
  waiter.join();
  CHECK(since(t0) < 1);
  CHECK(nodes[other]->claim_store("127.0.0.9:1").mine);
}

TEST_CASE("rendezvous: a node whose lease is lost hears it on lost_fd", "[etcd][rendezvous]") {
  const std::string job = job_name();
  EtcdRendezvous a(config(job, "a"));
  a.join("");
  Client admin(etcdtest::shared_etcd().options());
  REQUIRE(admin.revoke(a.lease().id()));  // e.g. an operator, or etcd after a partition
  pollfd p{a.lost_fd(), POLLIN, 0};
  CHECK(::poll(&p, 1, 3000) == 1);
  CHECK(a.members().rank_of("a") == -1);
}
