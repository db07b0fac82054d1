#include <catch2/catch.hpp>

#include "launcher/line_prefix.h"

using namespace launch;

TEST_CASE("line prefix: the default, and torchrun's template macros", "[launcher][output]") {
  CHECK(line_prefix("", 3, 1, "default") == "[rank 3] ");
  CHECK(line_prefix("[${role_name}${rank}]:", 3, 1, "default") == "[default3]:");
  CHECK(line_prefix("${local_rank}/${rank} ${rank}|", 12, 4, "r") == "4/12 12|");
  CHECK(line_prefix("no macros ", 0, 0, "x") == "no macros ");
  CHECK(line_prefix("${rank", 5, 0, "x") == "${rank");  // unclosed: as written
  CHECK_FALSE(unknown_prefix_macro("[${role_name}${rank}/${local_rank}]"));
  CHECK(unknown_prefix_macro("${rank}${host}${pid}") == "${host}");
}
