// The base64 codec of the gateway's keys and values: RFC 4648's vectors, every byte value, and
// the texts a strict decoder must refuse.
#include <catch2/catch.hpp>

#include <random>

#include "launcher/etcd/base64.h"

using launch::etcd::base64_decode;
using launch::etcd::base64_encode;

TEST_CASE("base64: RFC 4648 test vectors both ways", "[etcd][base64]") {
  const std::pair<const char*, const char*> vectors[] = {
      {"", ""}, {"f", "Zg=="}, {"fo", "Zm8="}, {"foo", "Zm9v"}, {"foob", "Zm9vYg=="}, {"fooba", "Zm9vYmE="},
      {"foobar", "Zm9vYmFy"}};
  for (auto [plain, coded] : vectors) {
    CHECK(base64_encode(plain) == coded);
    CHECK(base64_decode(coded) == std::string(plain));
  }
  CHECK(base64_encode(std::string("\xff\xfe\x00", 3)) == "//4A");  // the last two symbols, a NUL
}

TEST_CASE("base64: every byte value and every length round-trip", "[etcd][base64]") {
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  CHECK(base64_decode(base64_encode(all)) == all);
  std::mt19937 rng(21);
  for (size_t len = 0; len < 64; ++len) {
    std::string s;
    for (size_t i = 0; i < len; ++i) s += static_cast<char>(rng() & 0xff);
    std::string coded = base64_encode(s);
    CHECK(coded.size() == (len + 2) / 3 * 4);
    CHECK(base64_decode(coded) == s);
  }
}

TEST_CASE("base64: a strict decoder refuses what Go's encoder never writes", "[etcd][base64]") {
  for (const char* bad : {"Zg=", "Zm9", "Z", "Zg==Zg==", "Z===", "====", "Zm9v\n", "Zm 9", "Zm-_", "Zh==", "Zm9=",
                          "Zm==Zm9v", "Zm9v=", "!!!!"}) {
    INFO(bad);
    CHECK_FALSE(base64_decode(bad).has_value());
  }
}
