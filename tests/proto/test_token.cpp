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

TEST_CASE("hmac_sha256 (RFC 4231), token_fingerprint", "[proto][token]") {
  // RFC 4231, test case 2: key "Jefe", "what do ya want for nothing?".
  const auto mac = proto::hmac_sha256("Jefe", "what do ya want for nothing?");
  std::string hex;
  for (uint8_t b : mac) {
    static const char d[] = "0123456789abcdef";
    hex += d[b >> 4];
    hex += d[b & 15];
  }
  CHECK(hex == "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
  const std::string fp = proto::token_fingerprint("a-token", "etcd job j1");
  CHECK(fp.size() == 64);
  CHECK(fp.find_first_not_of("0123456789abcdef") == std::string::npos);
  CHECK(fp == proto::token_fingerprint("a-token", "etcd job j1"));
  CHECK(fp != proto::token_fingerprint("b-token", "etcd job j1"));
  CHECK(fp != proto::token_fingerprint("a-token", "etcd job j2"));
  CHECK(fp.find("a-token") == std::string::npos);
}
