// The rate limit of the store's per-connection warnings (pure: time passed in).
#include <catch2/catch.hpp>

#include "store/log_throttle.h"

using store::LogThrottle;
using namespace std::chrono_literals;

TEST_CASE("log throttle: a burst, then one line per interval, the rest counted", "[store][throttle]") {
  LogThrottle t(3, 1000ms);
  const auto t0 = LogThrottle::Clock::time_point{} + 1h;
  CHECK(t.admit("a", t0) == "a");
  CHECK(t.admit("b", t0) == "b");
  CHECK(t.admit("c", t0) == "c");
  for (int i = 0; i < 1000; ++i) CHECK_FALSE(t.admit("flood", t0 + 1ms * i / 10));
  CHECK(t.held() == 1000);
  CHECK_FALSE(t.flush("lines", t0 + 500ms));  // the interval has not passed
  auto line = t.admit("next", t0 + 1000ms);
  REQUIRE(line);
  CHECK(*line == "next (1000 similar line(s) before this one not logged)");
  CHECK(t.held() == 0);
  CHECK_FALSE(t.admit("again", t0 + 1500ms));
  CHECK(t.flush("lines", t0 + 2000ms) == std::string("1 more lines not logged one by one"));
  CHECK_FALSE(t.flush("lines", t0 + 9000ms));  // nothing held back
  // After a quiet spell the whole burst is available again, and no more than that.
  CHECK(t.admit("x", t0 + 60s));
  CHECK(t.admit("y", t0 + 60s));
  CHECK(t.admit("z", t0 + 60s));
  CHECK_FALSE(t.admit("w", t0 + 60s));
}
