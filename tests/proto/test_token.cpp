#include <catch2/catch.hpp>

#include <set>

#include "proto/token.h"

TEST_CASE("tokens are 64 lowercase hex characters and differ", "[proto][token]") {
  std::set<std::string> seen;
  for (int i = 0; i < 50; ++i) {
    std::string t = proto::generate_token();
    REQUIRE(t.size() == 64);
    CHECK(t.find_first_not_of("0123456789abcdef") == std::string::npos);
    seen.insert(t);
  }
  CHECK(seen.size() == 50);
}

TEST_CASE("constant_time_equal", "[proto][token]") {
  CHECK(proto::constant_time_equal("abc", "abc"));
  CHECK_FALSE(proto::constant_time_equal("abc", "abd"));
  CHECK_FALSE(proto::constant_time_equal("abc", "ab"));
  CHECK(proto::constant_time_equal("", ""));
}
