#include <catch2/catch.hpp>

#include "launcher/errors.h"
#include "launcher/restart_backoff.h"

using namespace launch;

TEST_CASE("restart back-off: INITIAL[:MAX] parsed, bad forms refused with the syntax", "[launcher][restart]") {
  BackoffSpec s = parse_restart_backoff("1:60");
  CHECK(s.initial_s == 1);
  CHECK(s.max_s == 60);
  s = parse_restart_backoff("0.5");
  CHECK(s.initial_s == 0.5);
  CHECK(s.max_s == 60);  // MAX defaults to 60 s ...
  CHECK(parse_restart_backoff("120").max_s == 120);  // ... or to INITIAL when that is larger
  CHECK(parse_restart_backoff("0").initial_s == 0);
  CHECK(describe(parse_restart_backoff("0")) == "none");
  CHECK(describe(parse_restart_backoff("1:60")) == "1 s doubling to 60 s");
  CHECK(describe(parse_restart_backoff("5:5")) == "5 s");
  for (const char* bad : {"", ":", "-1", "1:", "x", "1:2:3", "nan", "inf", "1e3", "100000", "2:1"}) {
    INFO(bad);
    CHECK_THROWS_AS(parse_restart_backoff(bad), UsageError);
  }
  CHECK_THROWS_WITH(parse_restart_backoff("2:1"), Catch::Contains("MAX (1 s) is below INITIAL (2 s)"));
  CHECK_THROWS_WITH(parse_restart_backoff("soon"), Catch::Contains("INITIAL or INITIAL:MAX") && Catch::Contains("e.g. 1:60"));
}

TEST_CASE("restart back-off doubles up to MAX; a long generation starts it over", "[launcher][restart]") {
  RestartBackoff b(BackoffSpec{1, 60});
  std::vector<double> got;
  for (int i = 0; i < 9; ++i) got.push_back(b.next(0.01));
  CHECK(got == std::vector<double>{1, 2, 4, 8, 16, 32, 60, 60, 60});
  // 50 restarts of a worker that always fails now take 45 minutes, not 287 ms.
  RestartBackoff fifty(BackoffSpec{});
  double total = 0;
  for (int i = 0; i < 50; ++i) total += fifty.next(0.005);
  CHECK(total == 1 + 2 + 4 + 8 + 16 + 32 + 44 * 60);
  CHECK(b.next(kBackoffResetS) == 1);  // it ran 10 minutes: not the crash loop
  CHECK(b.next(kBackoffResetS - 1) == 2);
  RestartBackoff none(parse_restart_backoff("0"));
  CHECK(none.next(0) == 0);
  CHECK(none.next(0) == 0);
}
