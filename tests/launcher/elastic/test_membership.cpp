// The membership record's rules (launcher/elastic/membership.h) on plain values: no store.
#include <catch2/catch.hpp>

#include "launcher/elastic/membership.h"

using namespace launch::elastic;
using K = Decision::Kind;
using std::chrono::milliseconds;

namespace {

const Clock::time_point T0 = Clock::time_point() + std::chrono::hours(1);

Self node(const std::string& name, int min = 2, int max = 3, bool store = false, int nproc = 1) {
  Self s;
  s.me.node.host = "10.0.0." + name;
  s.me.node.hostname = "host-" + name;
  s.me.node.id = "id-" + name;
  s.me.node.nproc = nproc;
  for (int i = 0; i < nproc; ++i) s.me.node.endpoints.push_back(s.me.node.host + ":" + std::to_string(7000 + i));
  s.me.node.master_endpoint = s.me.node.host + ":6000";
  s.me.node.serves_store = store;
  s.min_nodes = min;
  s.max_nodes = max;
  s.max_restart = 1;
  s.last_call = milliseconds(1000);
  return s;
}

// Steps `self` on `s` and applies its write, as a backend that always wins would.
State apply(const State& s, const Self& self, Clock::time_point now = T0) {
  Decision d = step(s, self, now);
  REQUIRE(d.kind == K::Write);
  CHECK(d.next.version == s.version + 1);
  // Every record survives the wire.
  CHECK(decode_state(encode_state(d.next)) == d.next);
  return d.next;
}

std::vector<std::string> ids(const std::vector<Member>& v) {
  std::vector<std::string> out;
  for (const auto& m : v) out.push_back(m.node.id);
  return out;
}

// Three nodes run round 0 (A serves the store): the record once the round closed.
State three_running() {
  Self a = node("a", 2, 3, true), b = node("b"), c = node("c");
  State s = apply(State{}, b);  // b arrives before the store's own node registers
  s = apply(s, a);
  s = apply(s, c);              // the third: MAX reached ...
  s = apply(s, c);              // ... whoever steps next closes it
  REQUIRE(s.phase == Phase::Running);
  return s;
}

}  // namespace

TEST_CASE("membership: the first node makes the record; MAX nodes close the round at once", "[elastic]") {
  State s = apply(State{}, node("a", 2, 3, true));
  CHECK(s.version == 1);
  CHECK(s.phase == Phase::Forming);
  CHECK(s.min_nodes == 2);
  CHECK(s.max_nodes == 3);
  CHECK(s.nproc == 1);
  CHECK(ids(s.members) == std::vector<std::string>{"id-a"});
  CHECK(step(s, node("a", 2, 3, true), T0).kind == K::Wait);  // alone, below MIN: no wake time
  CHECK_FALSE(step(s, node("a", 2, 3, true), T0).wake);

  const State r = three_running();
  // Node ranks: the store's host first, then by arrival (b came before c).
  CHECK(ids(r.members) == std::vector<std::string>{"id-a", "id-b", "id-c"});
  const Decision d = step(r, node("c"), T0);
  REQUIRE(d.kind == K::Run);
  CHECK(d.place.round == 0);
  CHECK(d.place.index == 2);
  const auto layout = d.place.layout("10.0.0.a:29400");
  CHECK(layout.node_rank == 2);
  CHECK(layout.world_size == 3);
  CHECK(layout.endpoints.front() == "10.0.0.a:7000");
  CHECK(layout.store_address == "10.0.0.a:29400");
}

TEST_CASE("membership: MIN nodes close the round after the last call, counted from when the node saw MIN", "[elastic]") {
  Self a = node("a", 2, 3, true), b = node("b");
  State s = apply(apply(State{}, a), b);
  b.quorum_seen = T0;
  Decision d = step(s, b, T0 + milliseconds(400));
  REQUIRE(d.kind == K::Wait);
  REQUIRE(d.wake);
  CHECK(*d.wake == T0 + milliseconds(1000));
  CHECK_THAT(d.message, Catch::Contains("2 of 2:3 node(s) joined round 0"));
  const State closed = apply(s, b, T0 + milliseconds(1000));
  CHECK(closed.phase == Phase::Running);
  CHECK(ids(closed.members) == std::vector<std::string>{"id-a", "id-b"});
}

TEST_CASE("membership: a node that arrives while a round runs waits; the round's nodes re-form with it", "[elastic]") {
  State r = three_running();
  // One of three was lost in round 0; the two left re-form round 1 without waiting for it.
  Self a = node("a", 2, 3, true), b = node("b"), d = node("d");
  RoundEnd lost;
  lost.round = 0;
  lost.failed = true;
  lost.exit_code = 1;
  lost.what = "node 2: launcher stopped responding";
  lost.lost = {"id-c"};
  a.ended = b.ended = lost;
  State s = apply(r, b);  // b is back first: it opens round 1
  CHECK(s.round == 1);
  CHECK(s.phase == Phase::Forming);
  CHECK(s.failures == 1);
  CHECK(s.expected == std::vector<std::string>{"id-a"});
  s = apply(s, a);        // the one expected is in ...
  s = apply(s, a);        // ... so the round closes without a last call
  REQUIRE(s.phase == Phase::Running);
  CHECK(ids(s.members) == std::vector<std::string>{"id-a", "id-b"});
  a.ended.reset();
  b.ended.reset();
  CHECK(step(s, a, T0).kind == K::Run);

  // d arrives: it is put on the waiting list, and waits.
  s = apply(s, d);
  CHECK(ids(s.waiting) == std::vector<std::string>{"id-d"});
  CHECK(step(s, d, T0).kind == K::Wait);
  CHECK_THAT(step(s, d, T0).message, Catch::Contains("waiting to join"));
  CHECK(step(s, a, T0).kind == K::Run);  // the running nodes are told by their watcher, not by step()

  // The running nodes stop (a join: not a failure) and come back; d was expected.
  RoundEnd join;
  join.round = 1;
  a.ended = b.ended = join;
  s = apply(s, a);
  CHECK(s.round == 2);
  CHECK(s.failures == 1);  // unchanged: a join is no failure
  CHECK(s.expected == std::vector<std::string>{"id-b", "id-d"});
  s = apply(s, d);
  s = apply(s, b);
  s = apply(s, b);
  REQUIRE(s.phase == Phase::Running);
  // Seniority: a (store) and b (since round 0) before d (since round 2).
  CHECK(ids(s.members) == std::vector<std::string>{"id-a", "id-b", "id-d"});
  CHECK(s.members[2].since == 2);
}

TEST_CASE("membership: a failure past --max_restart fails the job; late nodes learn it", "[elastic]") {
  State r = three_running();
  r.failures = 1;  // one restart used already; --max_restart 1
  Self a = node("a", 2, 3, true);
  RoundEnd f;
  f.round = 0;
  f.failed = true;
  f.exit_code = 3;
  f.what = "rank 1 exited with code 3";
  a.ended = f;
  const State s = apply(r, a);
  CHECK(s.phase == Phase::Failed);
  CHECK(s.exit_code == 3);
  CHECK_THAT(s.outcome, Catch::Contains("rank 1 exited with code 3") && Catch::Contains("--max_restart 1"));
  Decision d = step(s, node("b"), T0);
  CHECK(d.kind == K::Over);
  CHECK(d.exit_code == 3);
  // A job that finished: code 0 for latecomers.
  d = step(finished(r, 0, "node 0: its workers exited 0"), node("z"), T0);
  CHECK(d.kind == K::Over);
  CHECK(d.exit_code == 0);
  CHECK_THAT(d.message, Catch::Contains("the job finished"));
}

TEST_CASE("membership: another MIN:MAX or --nproc_per_node is refused before anything is written", "[elastic]") {
  const State s = apply(State{}, node("a", 2, 3, true));
  Decision d = step(s, node("b", 2, 4), T0);
  CHECK(d.kind == K::Refuse);
  CHECK_THAT(d.message, Catch::Contains("--nnodes 2:4") && Catch::Contains("runs --nnodes 2:3"));
  d = step(s, node("b", 2, 3, false, 2), T0);
  CHECK(d.kind == K::Refuse);
  CHECK_THAT(d.message, Catch::Contains("this node runs 2 worker process(es), the job's nodes 1 each"));
}

TEST_CASE("membership: a full job keeps a newcomer waiting without disturbing it; leave() takes a node off", "[elastic]") {
  State r = three_running();
  Decision d = step(r, node("d"), T0);
  CHECK(d.kind == K::Wait);
  CHECK_THAT(d.message, Catch::Contains("maximum of 3"));
  State f = apply(State{}, node("a", 2, 3, true));
  auto gone = leave(f, "id-a");
  REQUIRE(gone);
  CHECK(gone->members.empty());
  CHECK(gone->version == f.version + 1);
  CHECK_FALSE(leave(f, "id-x"));
}

TEST_CASE("membership: the record's format is checked", "[elastic]") {
  CHECK(decode_state("").version == 0);
  CHECK_THROWS_WITH(decode_state("{"), Catch::Contains("not JSON"));
  CHECK_THROWS_WITH(decode_state("{\"format\": 2}"), Catch::Contains("format 2"));
  std::string good = encode_state(three_running());
  CHECK_THROWS_WITH(decode_state(good.replace(good.find("\"running\""), 9, "\"paused\"")), Catch::Contains("unknown phase"));
}

TEST_CASE("membership: prune() takes the nodes a backend knows are gone off the record", "[elastic][etcd]") {
  // Forming: a member and an expected id whose leases ended go; the round then closes on the rest.
  Self a = node("a", 2, 3, true), b = node("b"), c = node("c");
  State r = three_running();
  RoundEnd lost;
  lost.round = 0;
  lost.failed = true;
  a.ended = lost;  // nobody named as lost: b and c are expected
  State s = apply(r, a);
  s = apply(s, c);  // c appends itself, then dies
  REQUIRE(s.expected == std::vector<std::string>{"id-b", "id-c"});
  CHECK_FALSE(prune(s, {"id-a", "id-b", "id-c"}, 1));  // everyone alive: nothing to write
  auto p = prune(s, {"id-a", "id-b"}, 1);
  REQUIRE(p);
  CHECK(p->version == s.version + 1);
  CHECK(ids(p->members) == std::vector<std::string>{"id-a"});
  CHECK(p->expected == std::vector<std::string>{"id-b"});
  CHECK(decode_state(encode_state(*p)) == *p);
  a.ended.reset();
  State t = apply(*p, b);  // b, the one expected left, is in: the round closes at once
  t = apply(t, b);
  CHECK(t.phase == Phase::Running);
  CHECK(ids(t.members) == std::vector<std::string>{"id-a", "id-b"});

  // Running: a waiting node that died goes; a member that died is the monitor's (not touched).
  State w = apply(t, node("d"));
  REQUIRE(ids(w.waiting) == std::vector<std::string>{"id-d"});
  p = prune(w, {"id-a", "id-b"}, 1);
  REQUIRE(p);
  CHECK(p->waiting.empty());
  CHECK(p->phase == Phase::Running);
  CHECK_FALSE(prune(w, {"id-b", "id-d"}, 1));  // a's loss is its round's failure, found by the others

  // Running, every member gone: whoever sees it reopens the round as a failure, the living
  // waiting nodes expected; past --max_restart the job fails.
  REQUIRE(w.failures == 1);  // round 0's
  p = prune(w, {"id-d", "id-z"}, 2);
  REQUIRE(p);
  CHECK(p->phase == Phase::Forming);
  CHECK(p->round == w.round + 1);
  CHECK(p->failures == w.failures + 1);
  CHECK(p->members.empty());
  CHECK(p->expected == std::vector<std::string>{"id-d"});
  CHECK(p->waiting.empty());
  State z = apply(*p, node("z"));  // a newcomer joins the reopened round
  CHECK(ids(z.members) == std::vector<std::string>{"id-z"});
  p = prune(w, {"id-z"}, 1);
  REQUIRE(p);
  CHECK(p->phase == Phase::Failed);
  CHECK(p->exit_code == 1);
  CHECK_THAT(p->outcome, Catch::Contains("every node of round") && Catch::Contains("--max_restart 1"));
  // An ended job is left as it is.
  CHECK_FALSE(prune(finished(r, 0, "done"), {}, 1));
}

TEST_CASE("membership: the node that reopens a round writes its registration as it is now", "[elastic][etcd]") {
  // Under etcd the store's host can change between rounds: b serves the new store.
  State r = three_running();
  Self b = node("b");
  RoundEnd lost;
  lost.round = 0;
  lost.failed = true;
  lost.lost = {"id-a"};
  b.ended = lost;
  b.me.node.serves_store = true;
  b.me.node.endpoints = {"10.0.0.b:7100"};
  State s = apply(r, b);
  REQUIRE(s.members.size() == 1);
  CHECK(s.members[0].node.serves_store);
  CHECK(s.members[0].node.endpoints == std::vector<std::string>{"10.0.0.b:7100"});
  CHECK(s.members[0].since == 0);  // its seniority kept
  Self c = node("c");
  c.ended = lost;
  s = apply(s, c);
  s = apply(s, c);  // the last expected: closed
  REQUIRE(s.phase == Phase::Running);
  CHECK(ids(s.members) == std::vector<std::string>{"id-b", "id-c"});  // the store's host first
}
