#include <catch2/catch.hpp>

#include "proto/address.h"

using proto::HostPort;
using proto::join_host_port;
using proto::split_host_port;

TEST_CASE("address: host:port, [v6]:port and names split; the rest is refused", "[proto][address]") {
  auto hp = split_host_port("10.0.0.1:29400");
  REQUIRE(hp);
  CHECK(hp->host == "10.0.0.1");
  CHECK(hp->port == 29400);
  hp = split_host_port("[::1]:29400");
  REQUIRE(hp);
  CHECK(hp->host == "::1");
  CHECK(hp->port == 29400);
  hp = split_host_port("[fd00:1::2]:1");
  REQUIRE(hp);
  CHECK(hp->host == "fd00:1::2");
  hp = split_host_port("job-master-0.job.svc:23456");
  REQUIRE(hp);
  CHECK(hp->host == "job-master-0.job.svc");
  for (const char* bad : {"", ":1", "host", "host:", "host:port", "host:65536", "host:0", "::1:29400", "[::1]29400",
                          "[::1]:", "[not-v6]:1", "[::1]:1x", "h:123456"})
    CHECK_FALSE(split_host_port(bad));
  CHECK(split_host_port("127.0.0.1:0", /*allow_zero=*/true)->port == 0);
}

TEST_CASE("address: join brackets IPv6 hosts only, and splits back to what it joined", "[proto][address]") {
  CHECK(join_host_port("::1", 29400) == "[::1]:29400");
  CHECK(join_host_port("10.0.0.1", 80) == "10.0.0.1:80");
  CHECK(join_host_port("master-0", 80) == "master-0:80");
  for (const char* host : {"::1", "fe80::1", "10.1.2.3", "node-7"}) {
    auto hp = split_host_port(join_host_port(host, 4242));
    REQUIRE(hp);
    CHECK(hp->host == host);
    CHECK(hp->port == 4242);
  }
  CHECK(proto::is_ipv6_literal("::1"));
  CHECK_FALSE(proto::is_ipv6_literal("[::1]"));
  CHECK(proto::is_ipv4_literal("127.0.0.1"));
  CHECK_FALSE(proto::is_ip_literal("localhost"));
}
