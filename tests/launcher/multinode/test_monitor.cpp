#include <catch2/catch.hpp>

#include <csignal>
#include <functional>
#include <thread>

#include "launcher/multinode/monitor.h"
#include "store_fixture.h"

using namespace launch::multinode;
using namespace mntest;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

namespace {

// The layouts of a 3-node job (node i has i+1 processes), as each node sees it.
std::vector<JobLayout> three_nodes(const Store& s) {
  std::vector<NodeRegistration> regs = {node(0, 1), node(1, 2), node(2, 3)};
  regs[1].host = "127.0.0.2";  // distinct hosts, so that reports can name them
  regs[2].host = "127.0.0.3";
  std::vector<JobLayout> out;
  for (size_t i = 0; i < regs.size(); ++i) {
    out.push_back(compute_layout(regs, 3, i));
    out.back().store_address = s.server->address();
  }
  return out;
}

std::vector<std::unique_ptr<JobMonitor>> monitors(const Store& s, milliseconds period, milliseconds timeout,
                                                  const std::function<void(MonitorConfig&)>& tweak = {},
                                                  std::vector<JobLayout> layouts = {}) {
  std::vector<std::unique_ptr<JobMonitor>> m;
  for (auto& l : layouts.empty() ? three_nodes(s) : layouts) {
    MonitorConfig c;
    c.store = s.client();
    c.layout = l;
    c.heartbeat_period = period;
    c.heartbeat_timeout = timeout;
    if (tweak) tweak(c);
    m.push_back(std::make_unique<JobMonitor>(c));
  }
  return m;
}

// A store whose connections node 0's presence tracking sees, as in the launcher that serves it.
struct WatchedStore {
  std::shared_ptr<Presence> presence = std::make_shared<Presence>();
  Store store{[p = presence](const std::string& name, bool open) { p->on_client(name, open, Clock::now()); }};
  // Node 0's monitor gets the presence, as multinode_job.cpp gives it.
  std::function<void(MonitorConfig&)> node0(milliseconds grace = kDefaultPresenceGrace) const {
    return [p = presence, grace](MonitorConfig& c) {
      if (c.layout.node_rank == 0) c.presence = p;
      c.presence_grace = grace;
    };
  }
};

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Until the store has seen node `r`'s monitor connection of generation 0 close.
bool wait_until_gone(const Presence& p, int r, milliseconds timeout) {
  const auto end = Clock::now() + timeout;
  while (!p.gone_since(0, r)) {
    if (Clock::now() > end) return false;
    std::this_thread::sleep_for(milliseconds(2));
  }
  return true;
}

}  // namespace

TEST_CASE("a worker failure on one node reaches every other node within 2 s, with the root cause",
          "[multinode][store]") {
  Store s;
  auto m = monitors(s, milliseconds(1000), milliseconds(10000));
  auto t0 = Clock::now();
  FailureRecord root = m[1]->report_worker_exit(2, 0, SIGSEGV);
  CHECK(root.describe() == "node 1 (127.0.0.2): rank 2 killed by SIGSEGV (exit code 139)");
  for (int i : {0, 2}) {
    REQUIRE(readable_within(m[i]->event_fd(), milliseconds(2000)));
    REQUIRE(m[i]->failure());
    CHECK(*m[i]->failure() == root);
  }
  CHECK(seconds_since(t0) < 2.0);
  WARN("failure propagated to both other nodes in " << int(seconds_since(t0) * 1000) << " ms");
  CHECK(readable_within(m[1]->event_fd(), milliseconds(0)));

  // A later failure elsewhere does not replace the root cause.
  CHECK(m[2]->report_worker_exit(5, 1) == root);
  // Every node that learnt the failure has left the generation: the store's node may close it.
  CHECK(m[0]->wait_all_finished(milliseconds(2000)).empty());
}

TEST_CASE("a node whose launcher stops heartbeating is reported by the others", "[multinode][store]") {
  Store s;
  const milliseconds timeout(1000);
  auto m = monitors(s, milliseconds(100), timeout);
  // All alive for longer than the timeout: nobody is reported.
  CHECK_FALSE(readable_within(m[0]->event_fd(), milliseconds(1500)));
  CHECK_FALSE(m[1]->failure());

  auto t0 = Clock::now();
  m[2].reset();  // node 2's launcher is gone: its heartbeat stops
  for (int i : {0, 1}) {
    REQUIRE(readable_within(m[i]->event_fd(), milliseconds(3000)));
    auto f = m[i]->failure();
    REQUIRE(f);
    CHECK(f->node_rank == 2);
    CHECK(f->host == "127.0.0.3");
    CHECK_THAT(f->reason, Catch::Contains("launcher stopped responding"));
  }
  double took = seconds_since(t0);
  CHECK(took > 0.5);  // not at once: only after the timeout (less a period and scheduling slack)
  CHECK(took < 2.5);
  WARN("heartbeat loss (timeout 1 s, period 0.1 s) detected after " << int(took * 1000) << " ms");
}

TEST_CASE("a node that finished is not reported when it goes quiet", "[multinode][store]") {
  Store s;
  auto m = monitors(s, milliseconds(100), milliseconds(600));
  m[2]->finish();
  m[2].reset();
  CHECK_FALSE(readable_within(m[0]->event_fd(), milliseconds(1200)));
  CHECK(m[0]->wait_all_finished(milliseconds(200)) == std::vector<int>{0, 1});
  m[1]->finish();
  m[0]->finish();
  CHECK(m[0]->wait_all_finished(milliseconds(2000)).empty());
}

TEST_CASE("the serving store's own job failure fires every monitor", "[multinode][store]") {
  Store s;
  auto m = monitors(s, milliseconds(1000), milliseconds(10000));
  s.server->report_failure(4, "exited with code 7");
  for (auto& x : m) {
    REQUIRE(readable_within(x->event_fd(), milliseconds(2000)));
    CHECK(x->failure()->describe() == "rank 4: exited with code 7");
  }
}

TEST_CASE("the store going away is reported as its node's failure", "[multinode][store]") {
  Store s;
  auto m = monitors(s, milliseconds(100), milliseconds(800));
  auto t0 = Clock::now();
  s.server.reset();  // the launcher of node 0 (127.0.0.1) serves it; every monitor loses it
  for (auto& x : m) {
    REQUIRE(readable_within(x->event_fd(), milliseconds(4000)));
    auto f = x->failure();
    CHECK(f->node_rank == 0);
    CHECK_THAT(f->reason, Catch::Contains("launcher stopped responding: its store at") &&
                              Catch::Contains("is unreachable"));
  }
  CHECK(seconds_since(t0) < 3.0);
}

TEST_CASE("a restarted generation does not see the failure of the one before", "[multinode][store]") {
  Store s;
  auto gen0 = monitors(s, milliseconds(100), milliseconds(5000));
  FailureRecord root = gen0[0]->report_worker_exit(0, 1);
  REQUIRE(readable_within(gen0[2]->event_fd(), milliseconds(2000)));
  auto t0 = Clock::now();
  gen0.clear();
  CHECK(seconds_since(t0) < 1.5);  // three monitors stop promptly

  std::vector<std::unique_ptr<JobMonitor>> gen1;
  for (auto& l : three_nodes(s)) {
    MonitorConfig c;
    c.store = s.client();
    c.layout = l;
    c.layout.generation = 1;
    c.heartbeat_period = milliseconds(100);
    gen1.push_back(std::make_unique<JobMonitor>(c));
  }
  CHECK(gen1[0]->layout().restart_count() == 1);
  CHECK_FALSE(readable_within(gen1[1]->event_fd(), milliseconds(500)));
  FailureRecord again = gen1[2]->report_worker_exit(4, 2);
  CHECK(again.rank == 4);  // not generation 0's root cause
  REQUIRE(readable_within(gen1[0]->event_fd(), milliseconds(2000)));
  CHECK(*gen1[0]->failure() == again);
}

TEST_CASE("after the store itself failed the job, node 0 still waits for the others to leave",
          "[multinode][store]") {
  Store s;
  auto m = monitors(s, milliseconds(1000), milliseconds(10000));
  FailureRecord root = m[1]->report_worker_exit(3, 9);
  s.server->report_failure(3, root.describe());  // as node 0's supervisor does
  // Every monitor learns the failure and leaves; a parked WAIT is no longer possible.
  CHECK(m[0]->wait_all_finished(milliseconds(3000)).empty());
  for (auto& x : m) {
    REQUIRE(x->failure());
    CHECK(*x->failure() == root);
  }
}

// --- issue 22, item 4 ----------------------------------------------------------------------------

TEST_CASE("the store going away names node 0, also when every node has the same address", "[multinode][store]") {
  // Before: the node whose host matched the store's address last -- with one address for all,
  // node 2, which named itself as the root cause.
  Store s;
  std::vector<NodeRegistration> regs = {node(0, 1), node(1, 2), node(2, 3)};  // all on 127.0.0.1
  std::vector<JobLayout> layouts;
  for (size_t i = 0; i < regs.size(); ++i) {
    layouts.push_back(compute_layout(regs, 3, i));
    layouts.back().store_address = s.server->address();
  }
  auto m = monitors(s, milliseconds(100), milliseconds(800), {}, layouts);
  s.server.reset();
  for (auto& x : m) {
    REQUIRE(readable_within(x->event_fd(), milliseconds(4000)));
    CHECK(x->failure()->node_rank == 0);
    CHECK_THAT(x->failure()->describe(), Catch::StartsWith("node 0 (127.0.0.1): launcher stopped responding"));
  }
}

TEST_CASE("node 0 declares a node whose launcher died within 1 s, from its closed store connection",
          "[multinode][store]") {
  WatchedStore w;
  // A heartbeat timeout of 10 s: only the closed connection can tell within the test's bound.
  auto m = monitors(w.store, milliseconds(100), milliseconds(10000), w.node0());
  CHECK_FALSE(readable_within(m[0]->event_fd(), milliseconds(700)));  // all connected: nothing
  auto t0 = Clock::now();
  m[2].reset();  // its launcher is gone: the kernel (here its destructor) closes its connections
  for (int i : {0, 1}) {
    REQUIRE(readable_within(m[i]->event_fd(), milliseconds(2000)));
    auto f = m[i]->failure();
    CHECK(f->node_rank == 2);
    CHECK(f->rank == -1);
    CHECK_THAT(f->reason, Catch::Contains("launcher stopped responding (its connection to the store closed 0.5 s ago"));
  }
  const double took = seconds_since(t0);
  CHECK(took >= 0.45);  // the grace for a reconnect
  CHECK(took < 1.0);
  WARN("a dead launcher declared from its closed connection after " << int(took * 1000) << " ms");
  // Node 0 does not wait for the dead node to leave before it closes its store.
  t0 = Clock::now();
  CHECK(m[0]->wait_all_finished(milliseconds(3000)).empty());
  CHECK(seconds_since(t0) < 1.0);
}

TEST_CASE("a node that finished and went is not declared from its closed connection", "[multinode][store]") {
  WatchedStore w;
  auto m = monitors(w.store, milliseconds(100), milliseconds(10000), w.node0(milliseconds(100)));
  m[2]->finish();
  m[2].reset();
  CHECK_FALSE(readable_within(m[0]->event_fd(), milliseconds(1000)));
  CHECK_FALSE(m[1]->failure());
}

TEST_CASE("with a worker's evidence, node 0 declares a node whose connection closed at once", "[multinode][store]") {
  WatchedStore w;
  // A grace of 10 s: only the evidence can make it quick.
  auto m = monitors(w.store, milliseconds(100), milliseconds(10000), w.node0(milliseconds(10000)));
  m[0]->peer_lost(3, "rank 3 closed the connection");  // node 2 is alive: nothing to declare
  CHECK_FALSE(readable_within(m[0]->event_fd(), milliseconds(300)));
  m[2].reset();
  // The store sees the connection close within moments; the evidence then decides at once.
  REQUIRE(wait_until_gone(*w.presence, 2, milliseconds(2000)));
  const auto t0 = Clock::now();
  m[0]->peer_lost(3, "rank 3 closed the connection");
  REQUIRE(readable_within(m[0]->event_fd(), milliseconds(100)));
  CHECK(seconds_since(t0) < 0.1);
  const auto f = m[0]->failure();
  CHECK(f->node_rank == 2);
  CHECK_THAT(f->reason, Catch::Contains("rank 3 there was lost: rank 3 closed the connection"));
  REQUIRE(readable_within(m[1]->event_fd(), milliseconds(1000)));  // recorded: every node learns it
  CHECK(*m[1]->failure() == *f);
}

TEST_CASE("a lost peer on the store's node: a PING it does not answer names node 0 at once", "[multinode][store]") {
  Store s;
  auto m = monitors(s, milliseconds(100), milliseconds(10000));
  m[1]->peer_lost(0, "rank 0 closed the connection");  // the store answers: node 0's launcher lives
  CHECK_FALSE(readable_within(m[1]->event_fd(), milliseconds(300)));
  s.server.reset();
  const auto t0 = Clock::now();
  m[1]->peer_lost(0, "rank 0 closed the connection");
  REQUIRE(readable_within(m[1]->event_fd(), milliseconds(1000)));
  CHECK(seconds_since(t0) < 0.7);  // the probe's bound, 0.5 s, and no more
  const auto f = m[1]->failure();
  CHECK(f->node_rank == 0);
  CHECK_THAT(f->reason, Catch::Contains("its store at") && Catch::Contains("no answer to a PING within 0.5 s") &&
                            Catch::Contains("rank 0 there was lost: rank 0 closed the connection"));
}

TEST_CASE("node_lost: another node's loss is recorded for all; the store's node's fires at once, the store gone",
          "[multinode][store][etcd]") {
  {
    Store s;
    auto m = monitors(s, milliseconds(100), milliseconds(10000));
    m[1]->node_lost(2, "launcher stopped responding (its lease ended)");
    REQUIRE(readable_within(m[1]->event_fd(), milliseconds(1000)));
    REQUIRE(readable_within(m[0]->event_fd(), milliseconds(2000)));  // through the store
    CHECK(m[0]->failure()->node_rank == 2);
    CHECK_THAT(m[0]->failure()->reason, Catch::Contains("its lease ended"));
  }
  // Under etcd a survivor learns that the store's node is gone from its lease, while its own
  // store connection still retries: nothing to write to, no 2 s spent trying.
  Store s;
  auto m = monitors(s, milliseconds(100), milliseconds(10000));
  s.server.reset();
  const auto t0 = Clock::now();
  m[1]->node_lost(0, "launcher stopped responding (its lease ended)");
  REQUIRE(readable_within(m[1]->event_fd(), milliseconds(3000)));
  CHECK(seconds_since(t0) < 0.5);
  CHECK(m[1]->failure()->node_rank == 0);
}
