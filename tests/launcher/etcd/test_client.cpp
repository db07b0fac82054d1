// The client's calls against a real etcd: bytes and revisions round-trip, transactions, leases,
// the watch's three endings (change, timeout, cancel fd), compaction, and the errors when etcd
// is down, hung, or not there at all.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include <curl/curl.h>

#include "launcher/etcd/client.h"
#include "launcher/etcd/primitives.h"
#include "tests/launcher/etcd/etcd_fixture.h"

using namespace launch::etcd;
using etcdtest::since;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

// A port on 127.0.0.1 that is bound but never listens: connecting is refused, and nobody else
// can take it while the socket lives.
struct DeadPort {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  std::string endpoint;
  DeadPort() {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0);
    endpoint = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  }
  ~DeadPort() { ::close(fd); }
};

// What the client has no call for: a compaction, through the gateway directly.
void compact(const std::string& endpoint, int64_t revision) {
  CURL* c = curl_easy_init();
  const std::string url = "http://" + endpoint + "/v3/kv/compaction";
  const std::string body = "{\"revision\":\"" + std::to_string(revision) + "\",\"physical\":true}";
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_POSTFIELDS, body.c_str());
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, 5000L);
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, +[](char*, size_t, size_t n, void*) { return n; });
  long status = 0;
  REQUIRE(curl_easy_perform(c) == CURLE_OK);
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
  curl_easy_cleanup(c);
  REQUIRE(status == 200);
}

}  // namespace

TEST_CASE("client: keys and values are bytes; revisions count every write", "[etcd][client]") {
  auto& etcd = etcdtest::shared_etcd();
  Client c(etcd.options());
  CHECK(c.server_version().rfind("3.", 0) == 0);
  const std::string p = etcdtest::unique_prefix();
  const std::string key = p + std::string("k\0\xff", 3);
  std::string value;
  for (int b = 0; b < 256; ++b) value += static_cast<char>(b);

  int64_t r1 = c.put(key, value);
  auto kv = c.get(key);
  REQUIRE(kv);
  CHECK(kv->key == key);
  CHECK(kv->value == value);
  CHECK(kv->create_revision == r1);
  CHECK(kv->mod_revision == r1);
  CHECK(kv->version == 1);

  int64_t r2 = c.put(key, "");
  CHECK(r2 == r1 + 1);
  kv = c.get(key);
  REQUIRE(kv);
  CHECK(kv->value.empty());
  CHECK(kv->create_revision == r1);
  CHECK(kv->mod_revision == r2);
  CHECK(kv->version == 2);

  c.put(p + "b", "2");
  c.put(p + "a", "1");
  RangeResponse all = c.range(p, prefix_end(p));
  REQUIRE(all.kvs.size() == 3);
  CHECK(all.kvs[0].key == p + "a");  // sorted by key
  CHECK(all.kvs[1].key == p + "b");
  CHECK(all.count == 3);
  CHECK(all.revision == r2 + 2);
  // An old revision is readable until it is compacted.
  CHECK(c.range(key, "", r1).kvs.at(0).value == value);

  CHECK(c.delete_range(p + "a") == 1);
  CHECK(c.delete_range(p + "a") == 0);
  CHECK_FALSE(c.get(p + "a"));
  CHECK(c.delete_range(p, prefix_end(p)) == 2);
  CHECK(c.range(p, prefix_end(p)).kvs.empty());
}

TEST_CASE("client: a transaction runs one branch, atomically, and says which", "[etcd][client]") {
  Client c(etcdtest::shared_etcd().options());
  const std::string p = etcdtest::unique_prefix();
  c.put(p + "x", "1");
  Txn t;
  t.compare.push_back({p + "x", CompareTarget::Value, CompareResult::Equal, 0, "1"});
  t.success = {RequestOp::put(p + "x", "2"), RequestOp::put(p + "y", "2"), RequestOp::range(p + "x")};
  t.failure = {RequestOp::range(p + "x")};
  TxnResponse won = c.txn(t);
  CHECK(won.succeeded);
  REQUIRE(won.responses.size() == 3);
  CHECK(won.responses[2].range.kvs.at(0).value == "2");  // the branch sees its own writes
  CHECK(c.get(p + "y")->mod_revision == won.revision);   // one revision for the whole branch
  TxnResponse lost = c.txn(t);                            // x is 2 now
  CHECK_FALSE(lost.succeeded);
  REQUIRE(lost.responses.size() == 1);
  CHECK(lost.responses[0].range.kvs.at(0).value == "2");
}

TEST_CASE("client: leases: granted, renewed, revoked with their keys; unknown ones refused", "[etcd][client]") {
  auto& etcd = etcdtest::shared_etcd();
  Client c(etcd.options());
  const std::string p = etcdtest::unique_prefix();
  LeaseGrant g = c.grant_lease(1);
  CHECK(g.ttl >= 1);  // etcd raises a TTL under its minimum (2 s with its default timings)
  c.put(p + "owned", "v", g.id);
  CHECK(c.get(p + "owned")->lease == g.id);
  CHECK(c.keep_alive(g.id) == g.ttl);
  CHECK(c.revoke(g.id));
  CHECK_FALSE(c.get(p + "owned"));
  CHECK(c.keep_alive(g.id) == 0);  // gone: 0, not an error
  CHECK_FALSE(c.revoke(g.id));

  try {
    c.put(p + "k", "v", g.id);
    FAIL("a put with a revoked lease was accepted");
  } catch (const EtcdError& e) {
    CHECK(e.kind() == EtcdError::Kind::Server);
    CHECK(e.grpc_code() == 5);
    CHECK_THAT(e.what(), Catch::Contains(etcd.endpoint()) && Catch::Contains("put of '" + p + "k'") &&
                             Catch::Contains("lease not found"));
  }
  CHECK_THROWS_AS(c.grant_lease(0), EtcdError);
}

TEST_CASE("client: a wait ends on a change, at once for one already made", "[etcd][client][watch]") {
  auto& etcd = etcdtest::shared_etcd();
  Client c(etcd.options());
  const std::string p = etcdtest::unique_prefix();
  int64_t r0 = c.put(p + "k", "0");

  std::thread writer([&] {
    Client w(etcd.options());
    std::this_thread::sleep_for(300ms);  // the change must come while the wait is parked
    w.put(p + "k", "1");
  });
  auto t0 = Clock::now();
  WatchResult w = c.wait_for_change(p + "k", "", r0, 10s);
  writer.join();
  CHECK(w.outcome == WatchResult::Outcome::Changed);
  REQUIRE(w.events.size() == 1);
  CHECK(w.events[0].type == EventType::Put);
  CHECK(w.events[0].kv.value == "1");
  CHECK(w.events[0].kv.mod_revision > r0);
  CHECK(since(t0) >= 0.25);
  CHECK(since(t0) < 5);

  // Changed before the wait began, after the revision given: no wait at all.
  REQUIRE(c.delete_range(p + "k") == 1);
  const int64_t r2 = c.range(p + "k").revision;  // the deletion's
  t0 = Clock::now();
  w = c.wait_for_change(p + "k", "", r0, 10s);
  CHECK(w.outcome == WatchResult::Outcome::Changed);
  CHECK(w.events.at(0).kv.value == "1");  // the first change after r0
  CHECK(since(t0) < 1);
  w = c.wait_for_change(p + "k", "", r2 - 1, 10s);
  CHECK(w.events.at(0).type == EventType::Delete);
}

TEST_CASE("client: a wait with nothing changing ends at its timeout, not an error", "[etcd][client][watch]") {
  Client c(etcdtest::shared_etcd().options());
  const std::string p = etcdtest::unique_prefix();
  int64_t r = c.put(p + "k", "0");
  c.put(p + "other", "x");  // a neighbour's change does not end it
  auto t0 = Clock::now();
  WatchResult w = c.wait_for_change(p + "k", "", r, 500ms);
  CHECK(w.outcome == WatchResult::Outcome::TimedOut);
  CHECK(w.events.empty());
  CHECK(since(t0) >= 0.45);
  CHECK(since(t0) < 3);
  // And the client is usable after the dropped connection.
  CHECK(c.get(p + "k")->value == "0");
}

TEST_CASE("client: a wait ends at once on the cancel fd when cancelled() says so", "[etcd][client][watch]") {
  Options o = etcdtest::shared_etcd().options();
  int efd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  REQUIRE(efd >= 0);
  std::atomic<bool> stop{false};
  std::atomic<int> asked{0};
  // As StopSignals::poll: reads what is pending, says whether it was a stop.
  o.cancel_fd = efd;
  o.cancelled = [&] {
    uint64_t v;
    [[maybe_unused]] ssize_t n = ::read(efd, &v, sizeof v);
    ++asked;
    return stop.load();
  };
  Client c(o);
  const std::string p = etcdtest::unique_prefix();
  int64_t r = c.put(p + "k", "0");
  std::thread signaller([&] {
    uint64_t one = 1;
    std::this_thread::sleep_for(200ms);
    [[maybe_unused]] ssize_t n = ::write(efd, &one, sizeof one);  // e.g. SIGCHLD: no stop
    std::this_thread::sleep_for(200ms);
    stop = true;
    n = ::write(efd, &one, sizeof one);
  });
  auto t0 = Clock::now();
  try {
    c.wait_for_change(p + "k", "", r, 20s);
    FAIL("the wait was not cancelled");
  } catch (const EtcdError& e) {
    CHECK(e.kind() == EtcdError::Kind::Cancelled);
    CHECK_THAT(e.what(), Catch::Contains("interrupted") && Catch::Contains("watch of '" + p + "k'"));
  }
  signaller.join();
  CHECK(asked == 2);
  CHECK(since(t0) >= 0.35);
  CHECK(since(t0) < 2);
  ::close(efd);
}

TEST_CASE("client: a wait from a compacted revision says so, so the caller re-reads", "[etcd][client][watch]") {
  auto& etcd = etcdtest::shared_etcd();
  Client c(etcd.options());
  const std::string p = etcdtest::unique_prefix();
  int64_t r1 = c.put(p + "k", "1");
  c.put(p + "k", "2");
  int64_t r3 = c.put(p + "k", "3");
  compact(etcd.endpoint(), r3);
  WatchResult w = c.wait_for_change(p + "k", "", r1, 5s);
  CHECK(w.outcome == WatchResult::Outcome::Compacted);
  CHECK(w.compact_revision == r3);
}

TEST_CASE("client: etcd down, hung, or never there: errors name the endpoint and the call", "[etcd][client][errors]") {
  SECTION("nothing listens") {
    DeadPort dead;
    Options o;
    o.endpoint = dead.endpoint;
    o.endpoint_source = "--rdzv-endpoint";
    o.timeout = 2s;
    Client c(o);
    auto t0 = Clock::now();
    try {
      c.put("/launch/j/x", "v");
      FAIL("no error");
    } catch (const EtcdError& e) {
      CHECK(e.kind() == EtcdError::Kind::Connection);
      CHECK_THAT(e.what(), Catch::Contains("cannot reach etcd at " + dead.endpoint) &&
                               Catch::Contains("check --rdzv-endpoint"));
    }
    CHECK(since(t0) < 1);
    try {
      c.wait_ready(500ms, 100ms);
      FAIL("no error");
    } catch (const EtcdError& e) {
      CHECK(e.kind() == EtcdError::Kind::Timeout);
      CHECK_THAT(e.what(), Catch::Contains("etcd at " + dead.endpoint + " did not answer within 0.5 s") &&
                               Catch::Contains("the last attempt: cannot reach"));
    }
  }
  SECTION("etcd stopped, then hung") {
    etcdtest::require_etcd();
    etcdtest::EtcdServer etcd;
    Options o = etcd.options();
    o.timeout = 1s;
    Client c(o);
    const std::string p = etcdtest::unique_prefix();
    c.put(p + "k", "v");

    etcd.pause();
    auto t0 = Clock::now();
    try {
      c.range(p, prefix_end(p));
      FAIL("no error");
    } catch (const EtcdError& e) {
      CHECK(e.kind() == EtcdError::Kind::Timeout);
      CHECK_THAT(e.what(), Catch::Contains("etcd at " + etcd.endpoint() + " did not answer range of prefix '" + p +
                                           "' within 1 s"));
    }
    CHECK(since(t0) >= 0.9);
    CHECK(since(t0) < 2.5);
    etcd.resume();
    CHECK(c.get(p + "k")->value == "v");

    etcd.stop();
    try {
      c.get(p + "k");
      FAIL("no error");
    } catch (const EtcdError& e) {
      CHECK(e.kind() == EtcdError::Kind::Connection);
      CHECK_THAT(e.what(), Catch::Contains(etcd.endpoint()) && Catch::Contains("range of '" + p + "k'"));
    }
  }
}
