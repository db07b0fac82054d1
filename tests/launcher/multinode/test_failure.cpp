#include <catch2/catch.hpp>

#include <csignal>

#include "launcher/multinode/failure.h"

using namespace launch::multinode;
using std::chrono::milliseconds;

TEST_CASE("failure records name node, host, rank and exit code or signal", "[multinode][failure]") {
  CHECK(worker_failure(1, "10.213.0.2", 5, 3).describe() == "node 1 (10.213.0.2): rank 5 exited with code 3");
  FailureRecord segv = worker_failure(0, "a", 2, 0, SIGSEGV);
  CHECK(segv.exit_code == 139);
  CHECK(segv.describe() == "node 0 (a): rank 2 killed by SIGSEGV (exit code 139)");
  FailureRecord silent;
  silent.node_rank = 2;
  silent.host = "c";
  silent.reason = "launcher stopped responding";
  CHECK(silent.describe() == "node 2 (c): launcher stopped responding");
}

TEST_CASE("failure records round-trip; foreign text becomes the reason", "[multinode][failure]") {
  FailureRecord f = worker_failure(3, "h", 7, 0, SIGKILL);
  CHECK(decode_failure(encode_failure(f)) == f);
  FailureRecord foreign = decode_failure("rank 2: exited with code 1");
  CHECK(foreign.node_rank == -1);
  CHECK(foreign.describe() == "rank 2: exited with code 1");
}

TEST_CASE("heartbeats: a counter that stops moving goes stale after the timeout", "[multinode][failure]") {
  auto t0 = Clock::time_point{} + std::chrono::hours(1);
  HeartbeatTracker hb({1, 2}, milliseconds(10000), t0);
  for (int s = 1; s <= 5; ++s) {
    hb.observe(1, s, t0 + std::chrono::seconds(s));
    hb.observe(2, s, t0 + std::chrono::seconds(s));
  }
  // Node 2 stops at counter 5 (t0+5 s); node 1 keeps beating.
  for (int s = 6; s <= 16; ++s) {
    hb.observe(1, s, t0 + std::chrono::seconds(s));
    hb.observe(2, 5, t0 + std::chrono::seconds(s));
  }
  CHECK(hb.stale(t0 + std::chrono::seconds(15)).empty());  // 10 s silent: not yet more than 10 s
  CHECK(hb.stale(t0 + milliseconds(15001)) == std::vector<int>{2});
  CHECK(hb.silent_for(2, t0 + std::chrono::seconds(16)) == milliseconds(11000));
  CHECK(hb.silent_for(1, t0 + std::chrono::seconds(16)) == milliseconds(0));
}

TEST_CASE("heartbeats: a node that never beats goes stale from the start", "[multinode][failure]") {
  auto t0 = Clock::time_point{} + std::chrono::hours(1);
  HeartbeatTracker hb({0, 3}, milliseconds(500), t0);
  hb.observe(0, 1, t0 + milliseconds(100));
  hb.observe(3, 0, t0 + milliseconds(400));  // absent key reads as 0: no beat yet
  CHECK(hb.stale(t0 + milliseconds(501)) == std::vector<int>{3});
  REQUIRE_THROWS_AS(hb.observe(7, 1, t0), std::out_of_range);
}
