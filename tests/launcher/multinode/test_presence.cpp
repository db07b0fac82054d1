#include <catch2/catch.hpp>

#include "launcher/multinode/keys.h"
#include "launcher/multinode/presence.h"

using namespace launch::multinode;
using std::chrono::milliseconds;

TEST_CASE("presence: a monitor's client name carries its node and generation", "[multinode][presence]") {
  CHECK(monitor_client_name(3, 12) == "node 12 monitor, generation 3");
  CHECK(parse_monitor_client_name("node 12 monitor, generation 3") == std::make_pair(3, 12));
  CHECK(monitor_client_name(1000000, 65535).size() <= 64);  // the store keeps 64 bytes of a name
  for (const char* other : {"rank 3", "node 1 supervisor", "launcher on 10.0.0.2", "node 1 monitor",
                            "node 1 monitor, generation 2x", "node -1 monitor, generation 0",
                            "node 01 monitor, generation 0", "node 1 monitor, generation 0 ", ""}) {
    INFO(other);
    CHECK_FALSE(parse_monitor_client_name(other));
  }
}

TEST_CASE("presence: gone once its last connection closed, back when it reconnects; per generation",
          "[multinode][presence]") {
  Presence p;
  const Presence::Clock::time_point t0{};
  const std::string n1 = monitor_client_name(0, 1);
  CHECK_FALSE(p.gone_since(0, 1));  // never seen: not gone (it may still be starting)
  p.on_client(n1, true, t0);
  CHECK_FALSE(p.gone_since(0, 1));
  // A reconnect that overlaps the old connection's end is no absence.
  p.on_client(n1, true, t0 + milliseconds(10));
  p.on_client(n1, false, t0 + milliseconds(20));
  CHECK_FALSE(p.gone_since(0, 1));
  p.on_client(n1, false, t0 + milliseconds(30));
  REQUIRE(p.gone_since(0, 1));
  CHECK(*p.gone_since(0, 1) == t0 + milliseconds(30));
  p.on_client(n1, true, t0 + milliseconds(40));  // it came back
  CHECK_FALSE(p.gone_since(0, 1));
  // The next generation's monitor is another; a stray close never goes below zero.
  CHECK_FALSE(p.gone_since(1, 1));
  p.on_client(monitor_client_name(1, 1), false, t0);
  CHECK_FALSE(p.gone_since(1, 1));
  p.on_client("rank 0", true, t0);
  p.on_client("rank 0", false, t0);
  CHECK_FALSE(p.gone_since(0, 0));
}
