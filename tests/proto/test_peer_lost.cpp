// The worker's "a peer vanished" line: written by the worker, read by the launcher.
#include <catch2/catch.hpp>

#include "proto/peer_lost.h"

using namespace proto;

TEST_CASE("peer lost: the line round-trips, with or without the peer's rank", "[proto][peer_lost]") {
  for (const PeerLost& p : {PeerLost{3, "no progress for 30000 ms waiting for rank 3"}, PeerLost{std::nullopt, "NCCL hung"},
                            PeerLost{0, ""}}) {
    const std::string line = format_peer_lost(p);
    CHECK(line.rfind(std::string(kPeerLostMarker), 0) == 0);
    auto back = parse_peer_lost(line);
    REQUIRE(back);
    CHECK(back->peer == p.peer);
    CHECK(back->what == p.what);
    // Found after a prefix (a logger's), too.
    auto prefixed = parse_peer_lost("[rank 1] 12:00:01 " + line);
    REQUIRE(prefixed);
    CHECK(prefixed->peer == p.peer);
  }
  CHECK(format_peer_lost({1, "two\nlines"}) == "LAUNCH_PEER_LOST rank=1: two?lines");
}

TEST_CASE("peer lost: anything else is not a record", "[proto][peer_lost]") {
  for (const char* line : {"", "rank 1 exited", "LAUNCH_PEER_LOST rank=", "LAUNCH_PEER_LOST rank=x: y",
                           "LAUNCH_PEER_LOST rank=12 no colon", "LAUNCH_PEER_LOST rank=99999999999: big",
                           "LAUNCH_PEER_LOST rank=-1: negative"})
    CHECK_FALSE(parse_peer_lost(line));
}
