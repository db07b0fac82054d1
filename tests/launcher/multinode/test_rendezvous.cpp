#include <catch2/catch.hpp>

#include <future>
#include <set>

#include "launcher/multinode/rendezvous.h"
#include "store_fixture.h"

using namespace launch::multinode;
using namespace mntest;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

RendezvousConfig config(const Store& s, int nnodes, NodeRegistration self, milliseconds timeout = milliseconds(20000),
                        int generation = 0) {
  RendezvousConfig c;
  c.store = s.client();
  c.nnodes = nnodes;
  c.self = std::move(self);
  c.timeout = timeout;
  c.generation = generation;
  return c;
}

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

TEST_CASE("three nodes rendezvous through a real store and agree on the layout", "[multinode][store]") {
  Store s;
  // Node 2 claims node rank 0; the others go by arrival order.
  std::vector<NodeRegistration> self = {node(0, 2), node(1, 3), node(2, 1, 0)};
  std::vector<std::future<JobLayout>> f;
  for (int i = 0; i < 3; ++i) f.push_back(std::async(std::launch::async, [&, i] { return rendezvous(config(s, 3, self[i])); }));
  std::vector<JobLayout> l;
  for (auto& x : f) {
    REQUIRE(x.wait_for(std::chrono::seconds(30)) == std::future_status::ready);
    l.push_back(x.get());
  }
  CHECK(l[2].node_rank == 0);
  CHECK(l[2].rank_offset == 0);
  std::set<int> ranks;
  for (int i = 0; i < 3; ++i) {
    CHECK(l[i].world_size == 6);
    CHECK(l[i].nnodes == 3);
    CHECK(l[i].endpoints == l[0].endpoints);
    CHECK(l[i].framework_master == "127.0.0.1:6902");
    CHECK(l[i].store_address == s.server->address());
    CHECK(l[i].local_size == self[i].nproc);
    CHECK(l[i].endpoints[size_t(l[i].rank_offset)] == self[i].endpoints[0]);
    CHECK(l[i].restart_count() == 0);
    ranks.insert(l[i].node_rank);
  }
  CHECK(ranks == std::set<int>{0, 1, 2});
  CHECK(l[0].endpoints.front() == "127.0.0.1:7200");  // node rank 0's single process is global rank 0
}

TEST_CASE("a new generation re-registers under a fresh namespace", "[multinode][store]") {
  Store s;
  for (int g = 0; g < 2; ++g) {
    auto a = std::async(std::launch::async, [&] { return rendezvous(config(s, 2, node(0, 1, 1), milliseconds(20000), g)); });
    auto b = std::async(std::launch::async, [&] { return rendezvous(config(s, 2, node(1, 2, 0), milliseconds(20000), g)); });
    JobLayout la = a.get(), lb = b.get();
    CHECK(la.restart_count() == g);
    CHECK(la.node_rank == 1);
    CHECK(la.rank_offset == 2);
    CHECK(lb.node_rank == 0);
  }
}

TEST_CASE("duplicate --rank: every node fails naming both hosts", "[multinode][store]") {
  Store s;
  auto a = std::async(std::launch::async, [&] { return rendezvous(config(s, 2, node(0, 1, 1))); });
  auto b = std::async(std::launch::async, [&] { return rendezvous(config(s, 2, node(1, 1, 1))); });
  for (auto* f : {&a, &b}) {
    REQUIRE(f->wait_for(std::chrono::seconds(30)) == std::future_status::ready);
    REQUIRE_THROWS_WITH(f->get(), Catch::Contains("node rank 1 requested by both") && Catch::Contains("node0") &&
                                      Catch::Contains("node1"));
  }
}

TEST_CASE("a node that never arrives: the timeout names it and the nodes that did", "[multinode][store]") {
  Store s;
  auto t0 = Clock::now();
  auto a = std::async(std::launch::async, [&] { return rendezvous(config(s, 3, node(0, 1, 0), milliseconds(1500))); });
  auto b = std::async(std::launch::async, [&] { return rendezvous(config(s, 3, node(2, 1, 2), milliseconds(1500))); });
  for (auto* f : {&a, &b}) {
    REQUIRE(f->wait_for(std::chrono::seconds(10)) == std::future_status::ready);
    try {
      f->get();
      FAIL("no timeout");
    } catch (const RendezvousError& e) {
      CHECK_THAT(e.what(), Catch::Contains("1 of 3 nodes did not arrive (missing node rank 1)") &&
                               Catch::Contains("node0 (127.0.0.1) rank 0") &&
                               Catch::Contains("node2 (127.0.0.1) rank 2"));
    }
  }
  CHECK(seconds_since(t0) < 5.0);
}

TEST_CASE("alone in a generation: the message counts every missing rank", "[multinode][store]") {
  Store s;
  REQUIRE_THROWS_WITH(rendezvous(config(s, 3, node(3, 1, 2), milliseconds(300), 1)),
                      Catch::Contains("2 of 3 nodes did not arrive (missing node ranks 0, 1)") &&
                          Catch::Contains("arrived: node3 (127.0.0.1) rank 2"));
}

TEST_CASE("more nodes than --nnodes: the extra node is refused", "[multinode][store]") {
  Store s;
  auto a = std::async(std::launch::async, [&] { return rendezvous(config(s, 2, node(0, 1))); });
  auto b = std::async(std::launch::async, [&] { return rendezvous(config(s, 2, node(1, 1))); });
  a.get();
  b.get();
  REQUIRE_THROWS_WITH(rendezvous(config(s, 2, node(2, 1))), Catch::Contains("more nodes than --nnodes 2"));
}

TEST_CASE("a wrong token is refused at once, saying so", "[multinode][store]") {
  Store s;
  auto c = config(s, 2, node(0, 1));
  c.store.token = std::string(64, 'f');
  auto t0 = Clock::now();
  REQUIRE_THROWS_WITH(rendezvous(c), Catch::Contains("token"));
  CHECK(seconds_since(t0) < 5.0);
}

TEST_CASE("a bad --rank fails before anything is published", "[multinode][store]") {
  Store s;
  REQUIRE_THROWS_WITH(rendezvous(config(s, 2, node(0, 1, 5))), Catch::Contains("--rank 5 is out of range"));
  proto::Client c(s.client());
  CHECK_FALSE(c.check({"__multinode/gen/0/arrivals"})[0]);
}

TEST_CASE("no store on --master: the error says so within the timeout", "[multinode][store]") {
  auto s = std::make_unique<Store>();
  RendezvousConfig c = config(*s, 2, node(0, 1), milliseconds(500));
  s.reset();  // the port is closed now
  auto t0 = Clock::now();
  REQUIRE_THROWS_WITH(rendezvous(c), Catch::Contains("registering with the store at " + c.store.address) &&
                                         Catch::Contains("could not reach"));
  CHECK(seconds_since(t0) < 3.0);
}
