// The rendezvous primitives against a real etcd: create-if-absent and compare-and-swap are
// atomic among racing clients, listings carry the revision a wait continues from.
#include <catch2/catch.hpp>

#include <atomic>
#include <set>
#include <thread>
#include <vector>

#include "launcher/etcd/primitives.h"
#include "tests/launcher/etcd/etcd_fixture.h"

using namespace launch::etcd;
using etcdtest::since;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

TEST_CASE("primitives: create_if_absent creates once and shows the loser the winner's key", "[etcd][primitives]") {
  Client c(etcdtest::shared_etcd().options());
  const std::string k = etcdtest::unique_prefix() + "store";
  CreateResult first = create_if_absent(c, k, "10.0.0.1:29500");
  CHECK(first.created);
  CreateResult second = create_if_absent(c, k, "10.0.0.2:29500");
  CHECK_FALSE(second.created);
  CHECK(second.existing.value == "10.0.0.1:29500");
  CHECK(second.existing.create_revision == first.revision);
  CHECK(c.get(k)->value == "10.0.0.1:29500");
}

TEST_CASE("primitives: of 8 clients racing to create one key, exactly one wins", "[etcd][primitives]") {
  auto& etcd = etcdtest::shared_etcd();
  const std::string k = etcdtest::unique_prefix() + "store";
  constexpr int kClients = 8;
  std::vector<CreateResult> results(kClients);
  std::vector<std::thread> threads;
  std::atomic<int> ready{0};
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      Client c(etcd.options());
      c.server_version();  // connected before the start line
      ++ready;
      while (ready.load() < kClients) std::this_thread::yield();
      results[i] = create_if_absent(c, k, "node" + std::to_string(i));
    });
  }
  for (auto& t : threads) t.join();
  int winners = 0;
  std::string winner;
  for (int i = 0; i < kClients; ++i)
    if (results[i].created) {
      ++winners;
      winner = "node" + std::to_string(i);
    }
  REQUIRE(winners == 1);
  for (const auto& r : results)
    if (!r.created) CHECK(r.existing.value == winner);
}

TEST_CASE("primitives: compare_and_swap compares revisions: stale readers lose, A-B-A is a change", "[etcd][primitives]") {
  Client c(etcdtest::shared_etcd().options());
  const std::string k = etcdtest::unique_prefix() + "state";
  SwapResult created = compare_and_swap(c, k, 0, "A");  // 0: the key must be absent
  REQUIRE(created.swapped);
  SwapResult again = compare_and_swap(c, k, 0, "X");
  CHECK_FALSE(again.swapped);
  REQUIRE(again.current);
  CHECK(again.current->value == "A");

  const int64_t seen = c.get(k)->mod_revision;
  c.put(k, "B");
  c.put(k, "A");  // back to the value the reader saw
  SwapResult stale = compare_and_swap(c, k, seen, "C");
  CHECK_FALSE(stale.swapped);
  CHECK(stale.current->value == "A");
  SwapResult fresh = compare_and_swap(c, k, stale.current->mod_revision, "C");
  CHECK(fresh.swapped);
  CHECK(c.get(k)->value == "C");
  CHECK(c.get(k)->mod_revision == fresh.revision);

  // On an absent key a non-zero expectation fails and says it is absent.
  SwapResult absent = compare_and_swap(c, k + "-none", 5, "v");
  CHECK_FALSE(absent.swapped);
  CHECK_FALSE(absent.current);
}

TEST_CASE("primitives: of 6 clients incrementing a counter by compare_and_swap, no update is lost", "[etcd][primitives]") {
  auto& etcd = etcdtest::shared_etcd();
  const std::string k = etcdtest::unique_prefix() + "counter";
  constexpr int kClients = 6, kEach = 5;
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&] {
      Client c(etcd.options());
      for (int done = 0; done < kEach;) {
        auto kv = c.get(k);
        int v = kv ? std::stoi(kv->value) : 0;
        if (compare_and_swap(c, k, kv ? kv->mod_revision : 0, std::to_string(v + 1)).swapped) ++done;
      }
    });
  }
  for (auto& t : threads) t.join();
  Client c(etcd.options());
  CHECK(c.get(k)->value == std::to_string(kClients * kEach));
}

TEST_CASE("primitives: delete_if_unchanged gives up a key only while it is the one read", "[etcd][primitives]") {
  Client c(etcdtest::shared_etcd().options());
  const std::string k = etcdtest::unique_prefix() + "store";
  int64_t mine = c.put(k, "me");
  c.put(k, "successor");
  CHECK_FALSE(delete_if_unchanged(c, k, mine));
  CHECK(c.get(k)->value == "successor");
  CHECK(delete_if_unchanged(c, k, c.get(k)->mod_revision));
  CHECK_FALSE(c.get(k));
  CHECK_FALSE(delete_if_unchanged(c, k, 0));  // absent: nothing to give up
}

TEST_CASE("primitives: list_prefix lists the prefix alone, sorted, with its revision", "[etcd][primitives]") {
  Client c(etcdtest::shared_etcd().options());
  const std::string base = etcdtest::unique_prefix();
  const std::string p = base + "nodes/";
  c.put(base + "nodes", "not under nodes/");
  c.put(base + "nodes0", "a neighbour");
  c.put(p + "b", "2");
  int64_t last = c.put(p + "a", "1");
  Listing l = list_prefix(c, p);
  REQUIRE(l.kvs.size() == 2);
  CHECK(l.kvs[0].key == p + "a");
  CHECK(l.kvs[1].key == p + "b");
  CHECK(l.revision == last);
  CHECK(list_prefix(c, base + "none/").kvs.empty());
}

TEST_CASE("primitives: wait_prefix_change misses nothing between a listing and the wait", "[etcd][primitives][watch]") {
  auto& etcd = etcdtest::shared_etcd();
  Client c(etcd.options());
  const std::string p = etcdtest::unique_prefix() + "nodes/";
  c.put(p + "0", "n0");
  Listing l = list_prefix(c, p);

  // A node joins after the listing, before the wait: the wait returns it at once.
  c.put(p + "1", "n1");
  auto t0 = Clock::now();
  WatchResult w = wait_prefix_change(c, p, l.revision, 10s);
  CHECK(since(t0) < 1);
  REQUIRE(w.outcome == WatchResult::Outcome::Changed);
  CHECK(w.events.at(0).kv.key == p + "1");

  // Writes outside the prefix do not end it; a node leaving does.
  l = list_prefix(c, p);
  c.put(p.substr(0, p.size() - 1), "the prefix without its slash");
  std::thread leaver([&] {
    Client other(etcd.options());
    std::this_thread::sleep_for(300ms);
    other.delete_range(p + "0");
  });
  w = wait_prefix_change(c, p, l.revision, 10s);
  leaver.join();
  REQUIRE(w.outcome == WatchResult::Outcome::Changed);
  CHECK(w.events.at(0).type == EventType::Delete);
  CHECK(w.events.at(0).kv.key == p + "0");
  CHECK(wait_prefix_change(c, p, w.events.at(0).kv.mod_revision, 300ms).outcome == WatchResult::Outcome::TimedOut);
}
