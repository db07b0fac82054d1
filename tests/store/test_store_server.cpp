// The real server, in-process, over loopback: every op through the client, many concurrent
// clients, refusals, hostile input, stalls, job failure, reconnects.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/resource.h>

#include <atomic>
#include <thread>
#include <vector>

#include "store_test_util.h"

using namespace store_test;
using proto::StoreError;
using Kind = proto::StoreError::Kind;

namespace {

// Waits (bounded) until the server reports `n` parked requests.
bool wait_parked(const store::StoreServer& s, size_t n, std::chrono::milliseconds limit = 10s) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (s.parked_waiters() != n) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(1ms);
  }
  return true;
}

}  // namespace

TEST_CASE("listens on 127.0.0.1 on a kernel-chosen port by default", "[store]") {
  TestStore ts;
  CHECK(ts.server->address().rfind("127.0.0.1:", 0) == 0);
  CHECK(ts.server->address() != "127.0.0.1:0");
}

TEST_CASE("every op through the client", "[store]") {
  TestStore ts;
  auto c = ts.client();
  c.ping();
  c.set("a", std::string("x\0y", 3));
  CHECK(c.get("a", 1s) == std::string("x\0y", 3));
  CHECK(c.add("n", 5) == 5);
  CHECK(c.add("n", -2) == 3);
  CHECK(c.check({"a", "n", "zz"}) == std::vector<bool>{true, true, false});
  c.wait({"a", "n"}, 1s);
  CHECK(c.multi_get({"n", "a"}, 1s) == std::vector<std::string>{"3", std::string("x\0y", 3)});
  CHECK(c.compare_set("cas", "", "v1") == "v1");
  CHECK(c.compare_set("cas", "wrong", "v2") == "v1");
  CHECK(c.del("a"));
  CHECK_FALSE(c.del("a"));
  CHECK_FALSE(c.job_failure().has_value());
  CHECK_THROWS_WITH(c.set("__launch/job_failed", "x"), Catch::Contains("RESERVED_KEY"));
  c.set("t", "text");
  CHECK_THROWS_WITH(c.add("t", 1), Catch::Contains("NOT_INTEGER"));
  CHECK_THROWS_AS(c.get(std::string(5000, 'k'), 1s), StoreError);
}

TEST_CASE("a parked GET is answered by another client's SET", "[store]") {
  TestStore ts;
  std::string got;
  std::thread t([&] { got = ts.client("rank 1").get("nccl/uid/0", 10s, "rank 0"); });
  REQUIRE(wait_parked(*ts.server, 1));
  ts.client("rank 0").set("nccl/uid/0", "id");
  t.join();
  CHECK(got == "id");
}

TEST_CASE("timeouts say what was waited for", "[store]") {
  TestStore ts;
  auto c = ts.client();
  auto t0 = std::chrono::steady_clock::now();
  try {
    c.get("nccl/uid/0", 300ms, "rank 0");
    FAIL("no timeout");
  } catch (const StoreError& e) {
    CHECK(e.kind() == Kind::Timeout);
    CHECK_THAT(e.what(), Catch::StartsWith("waited 300 ms for key 'nccl/uid/0' (written by rank 0)"));
  }
  CHECK(std::chrono::steady_clock::now() - t0 < 2s);
  try {
    c.barrier("start", 3, 200ms);
    FAIL("no timeout");
  } catch (const StoreError& e) {
    CHECK(e.kind() == Kind::Timeout);
    CHECK_THAT(e.what(), Catch::Contains("barrier 'start' of 3 ranks (1 arrived)"));
  }
  // The connection is still usable after a server-side timeout.
  c.ping();
}

TEST_CASE("1000 concurrent clients each SET then meet at a barrier", "[store][slow]") {
  raise_fd_limit();
  TestStore ts;
  const int n = 1000;
  std::atomic<int> ok{0};
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  threads.reserve(n);
  for (int i = 0; i < n; ++i)
    threads.emplace_back([&, i] {
      try {
        auto c = ts.client("rank " + std::to_string(i));
        c.set("peer/" + std::to_string(i), std::to_string(i));
        c.barrier("start", n, 60s);
        ++ok;
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    });
  for (auto& t : threads) t.join();
  for (int i = 0; i < n; ++i) INFO(errors[i]);
  for (int i = 0; i < n; ++i)
    if (!errors[i].empty()) FAIL("rank " << i << ": " << errors[i]);
  CHECK(ok == n);
  std::vector<std::string> keys;
  for (int i = 0; i < n; ++i) keys.push_back("peer/" + std::to_string(i));
  auto values = ts.client().multi_get(keys, 5s);
  CHECK(values[999] == "999");
}

TEST_CASE("barrier names can be reused", "[store]") {
  TestStore ts;
  for (int round = 0; round < 3; ++round) {
    std::thread t([&] { ts.client("a").barrier("loop", 2, 10s); });
    ts.client("b").barrier("loop", 2, 10s);
    t.join();
  }
  CHECK(ts.client().get("barrier/loop/count", 1s) == "6");
}

TEST_CASE("wrong token, job id or version is refused and sees nothing", "[store]") {
  TestStore ts;
  ts.client().set("secret", "value");

  SECTION("client library reports which") {
    auto o = ts.options();
    o.token = proto::generate_token();
    try {
      proto::Client(o).get("secret", 1s);
      FAIL("accepted a wrong token");
    } catch (const StoreError& e) {
      CHECK(e.kind() == Kind::Refused);
      CHECK_THAT(e.what(), Catch::Contains("BAD_TOKEN"));
      CHECK_THAT(e.what(), !Catch::Contains(o.token) && !Catch::Contains(ts.cfg.token));
    }
    o = ts.options();
    o.job_id = "other-job";
    CHECK_THROWS_WITH(proto::Client(o).ping(), Catch::Contains("BAD_JOB"));
  }
  SECTION("a GET pipelined behind a bad HELLO is never answered") {
    for (auto [job, token] : {std::pair<std::string, std::string>{ts.cfg.job_id, "nope"},
                              std::pair<std::string, std::string>{"other", ts.cfg.token}}) {
      RawConn raw(ts.server->address());
      REQUIRE(raw.ok());
      proto::Request get;
      get.op = proto::Op::Get;
      get.key = "secret";
      REQUIRE(raw.send(hello_frame(job, token) + proto::encode_request(get)));
      auto [bytes, closed] = raw.read_until_close(5s);
      CHECK(closed);
      auto d = proto::decode_reply(bytes, proto::Limits{});
      REQUIRE(d.state == proto::Parse::Ok);
      CHECK((d.value.status == proto::Status::BadToken || d.value.status == proto::Status::BadJob));
      CHECK(d.consumed == bytes.size());  // exactly one reply, and no value in it
      CHECK(bytes.find("value") == std::string::npos);
    }
  }
  SECTION("a request before HELLO is refused") {
    RawConn raw(ts.server->address());
    proto::Request get;
    get.op = proto::Op::Get;
    get.key = "secret";
    REQUIRE(raw.send(proto::encode_request(get)));
    auto d = raw.read_reply(5s);
    REQUIRE(d.state == proto::Parse::Ok);
    CHECK(d.value.status == proto::Status::NotAuthenticated);
    CHECK(raw.read_until_close(5s).second);
  }
  SECTION("another protocol version") {
    RawConn raw(ts.server->address());
    std::string h = hello_frame(ts.cfg.job_id, ts.cfg.token);
    h[4] = 9;
    REQUIRE(raw.send(h));
    auto d = raw.read_reply(5s);
    REQUIRE(d.state == proto::Parse::Ok);
    CHECK(d.value.status == proto::Status::BadVersion);
    CHECK_THAT(d.value.message, Catch::Contains("version 9"));
  }
  ts.client().ping();
}

TEST_CASE("garbage and a 2^63 length prefix close that connection only, without growing memory", "[store]") {
  TestStore ts;
  auto good = ts.client("good");
  good.set("k", "v");
  long before = rss_kib();
  for (int i = 0; i < 20; ++i) {
    {
      RawConn raw(ts.server->address());
      REQUIRE(raw.send("GET / HTTP/1.1\r\nHost: x\r\n\r\n"));
      auto d = raw.read_reply(5s);
      REQUIRE(d.state == proto::Parse::Ok);
      CHECK(d.value.status == proto::Status::Malformed);
      CHECK(raw.read_until_close(5s).second);
    }
    {
      RawConn raw(ts.server->address());
      REQUIRE(raw.send(hello_frame(ts.cfg.job_id, ts.cfg.token)));
      REQUIRE(raw.read_reply(5s).value.status == proto::Status::Ok);
      proto::Request ping;
      ping.op = proto::Op::Set;
      std::string f = proto::encode_request(ping);
      for (int b = 0; b < 8; ++b) f[8 + b] = b == 7 ? '\x80' : 0;  // 2^63
      REQUIRE(raw.send(f + std::string(4096, 'x')));
      auto d = raw.read_reply(5s);
      REQUIRE(d.state == proto::Parse::Ok);
      CHECK(d.value.status == proto::Status::TooLarge);
      CHECK(raw.read_until_close(5s).second);
    }
    {
      // Announces the largest legal payload, sends 1 MiB of it, then hangs up mid-frame.
      RawConn raw(ts.server->address());
      REQUIRE(raw.send(hello_frame(ts.cfg.job_id, ts.cfg.token)));
      proto::Request set;
      set.op = proto::Op::Set;
      std::string f = proto::encode_request(set);
      uint64_t len = proto::Limits{}.max_payload();
      for (int b = 0; b < 8; ++b) f[8 + b] = static_cast<char>((len >> (8 * b)) & 0xff);
      REQUIRE(raw.send(f + std::string(1 << 20, 'x')));
    }
  }
  CHECK(good.get("k", 1s) == "v");
  long after = rss_kib();
  INFO("RSS before " << before << " KiB, after " << after << " KiB");
#if defined(__SANITIZE_ADDRESS__)
  WARN("RSS not checked: AddressSanitizer's quarantine holds freed memory");
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  WARN("RSS not checked: AddressSanitizer's quarantine holds freed memory");
#else
  CHECK(after - before < 32 * 1024);
#endif
#else
  CHECK(after - before < 32 * 1024);
#endif
}

TEST_CASE("a client that stalls mid-frame or never says HELLO is closed; others go on", "[store]") {
  store::StoreServerConfig cfg;
  cfg.stall_timeout = 300ms;
  cfg.hello_timeout = 300ms;
  cfg.sweep_interval = 50ms;
  TestStore ts(cfg);
  RawConn silent(ts.server->address());
  RawConn stalled(ts.server->address());
  REQUIRE(stalled.send(hello_frame(ts.cfg.job_id, ts.cfg.token)));
  REQUIRE(stalled.read_reply(5s).value.status == proto::Status::Ok);
  REQUIRE(stalled.send("LSTR" + std::string(1, char(proto::kVersion)) + "\x02"));
  auto c = ts.client();
  auto t0 = std::chrono::steady_clock::now();
  CHECK(stalled.read_until_close(5s).second);
  CHECK(silent.read_until_close(5s).second);
  CHECK(std::chrono::steady_clock::now() - t0 < 3s);
  c.set("still", "here");
  CHECK(c.get("still", 1s) == "here");
}

TEST_CASE("report_failure wakes parked waiters with JOB_FAILED within 1 s", "[store]") {
  TestStore ts;
  const int n = 4;
  std::vector<std::string> errors(n);
  std::vector<Kind> kinds(n, Kind::Invalid);
  std::vector<std::chrono::steady_clock::time_point> woke(n);
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i)
    threads.emplace_back([&, i] {
      try {
        auto c = ts.client("rank " + std::to_string(i));
        if (i % 2)
          c.barrier("never", n + 1, 60s);
        else
          c.get("nccl/uid/0", 60s, "rank 0");
      } catch (const StoreError& e) {
        kinds[i] = e.kind();
        errors[i] = e.what();
      }
      woke[i] = std::chrono::steady_clock::now();
    });
  REQUIRE(wait_parked(*ts.server, n));
  auto t0 = std::chrono::steady_clock::now();
  ts.server->report_failure(2, "exited with code 3");
  for (auto& t : threads) t.join();
  for (int i = 0; i < n; ++i) {
    INFO(errors[i]);
    CHECK(kinds[i] == Kind::JobFailed);
    CHECK_THAT(errors[i], Catch::Contains("rank 2: exited with code 3"));
    CHECK(woke[i] - t0 < 1s);
  }
  // Later blocking calls fail at once; the record is readable.
  auto c = ts.client();
  auto t1 = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(c.wait({"anything"}, 60s), Catch::Contains("job failed while waiting for key 'anything'"));
  CHECK(std::chrono::steady_clock::now() - t1 < 1s);
  CHECK(c.job_failure() == std::optional<std::string>("rank 2: exited with code 3"));
  ts.server->report_failure(5, "second report is ignored");
  CHECK(c.job_failure() == std::optional<std::string>("rank 2: exited with code 3"));
}

TEST_CASE("the client reconnects when the store restarts on the same port", "[store]") {
  auto ts = std::make_unique<TestStore>();
  auto cfg = ts->cfg;
  auto c = ts->client();
  c.set("before", "1");
  auto addr = ts->server->address();
  cfg.port = static_cast<uint16_t>(std::stoi(addr.substr(addr.rfind(':') + 1)));
  ts.reset();
  TestStore again(cfg);
  c.set("after", "2");
  CHECK(c.get("after", 1s) == "2");
}

TEST_CASE("an unreachable store is a Connection error naming the address", "[store]") {
  std::string addr;
  {
    TestStore ts;
    addr = ts.server->address();
  }
  proto::ClientOptions o;
  o.address = addr;
  o.token = "t";
  o.connect_timeout = 200ms;
  try {
    proto::Client(o).ping(5s);
    FAIL("connected to nothing");
  } catch (const StoreError& e) {
    CHECK(e.kind() == Kind::Connection);
    CHECK_THAT(e.what(), Catch::Contains(addr));
  }
  // One attempt (a probe): refused at once, not retried until the connect timeout.
  o.connect_timeout = 5s;
  o.retry_connect = false;
  const auto t0 = std::chrono::steady_clock::now();
  CHECK_THROWS_AS(proto::Client(o).ping(5s), StoreError);
  CHECK(std::chrono::steady_clock::now() - t0 < 1s);
  o.address = "no-port-here";
  CHECK_THROWS_WITH(proto::Client(o).ping(1s), Catch::Contains("is not ip:port"));
}

TEST_CASE("a bad listen address is an error naming it", "[store]") {
  store::StoreServerConfig cfg;
  cfg.host = "203.0.113.7";  // TEST-NET-3: not ours
  cfg.token = "t";
  CHECK_THROWS_WITH(store::StoreServer::start(cfg), Catch::Contains("203.0.113.7"));
}

TEST_CASE("identical MULTI_GETs share one answer until a value changes", "[store]") {
  TestStore ts;
  auto a = ts.client("a");
  auto b = ts.client("b");
  std::vector<std::string> keys;
  for (int i = 0; i < 100; ++i) {
    keys.push_back("peer/" + std::to_string(i));
    a.set(keys.back(), "v" + std::to_string(i));
  }
  auto first = a.multi_get(keys, 5s);
  CHECK(b.multi_get(keys, 7s) == first);  // different timeout, same keys
  b.set("peer/42", "changed");
  auto after = a.multi_get(keys, 5s);
  CHECK(after[42] == "changed");
  CHECK(after[41] == "v41");
  b.del("peer/7");
  CHECK_THROWS_AS(a.multi_get(keys, 100ms), StoreError);
  b.set("peer/7", "back");
  keys.pop_back();
  auto last = b.multi_get(keys, 5s);
  REQUIRE(last.size() == 99);
  CHECK(last[7] == "back");
}

TEST_CASE("out of file descriptors: new connections are shed, the loop does not spin", "[store]") {
  TestStore ts;
  auto c = ts.client();
  c.ping();
  rlimit saved{};
  ::getrlimit(RLIMIT_NOFILE, &saved);
  int open_now = 0;
  for (int fd = 0; fd < 65536 && open_now < 100000; ++fd)
    if (::fcntl(fd, F_GETFD) != -1) open_now = fd + 1;  // highest open descriptor + 1
  // Fill the holes below the highest open descriptor, so that the limit below leaves exactly
  // a handful free.
  std::vector<int> fillers;
  for (;;) {
    int f = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (f < 0) break;
    if (f >= open_now) {
      ::close(f);
      break;
    }
    fillers.push_back(f);
  }
  rlimit tight = saved;
  tight.rlim_cur = static_cast<rlim_t>(open_now + 4);
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &tight) == 0);
  std::vector<std::unique_ptr<RawConn>> conns;
  // Connect until this process (test and store share the limit) has no descriptor left: the
  // store then cannot accept the connections still queued.
  for (int i = 0; i < 64; ++i) {
    auto r = std::make_unique<RawConn>(ts.server->address());
    if (!r->ok()) break;
    conns.push_back(std::move(r));
  }
  INFO(conns.size() << " raw connections, limit " << tight.rlim_cur);
  CHECK(conns.size() < 64);
  rusage before{}, after{};
  ::getrusage(RUSAGE_SELF, &before);
  std::this_thread::sleep_for(300ms);  // a measurement window, not synchronisation
  ::getrusage(RUSAGE_SELF, &after);
  auto cpu_us = [](const rusage& u) {
    return (u.ru_utime.tv_sec + u.ru_stime.tv_sec) * 1000000L + u.ru_utime.tv_usec + u.ru_stime.tv_usec;
  };
  REQUIRE(::setrlimit(RLIMIT_NOFILE, &saved) == 0);
  for (int f : fillers) ::close(f);
  CHECK(cpu_us(after) - cpu_us(before) < 150000);  // a spinning loop would burn ~300 ms
  conns.clear();
  c.set("alive", "yes");
  CHECK(ts.client().get("alive", 5s) == "yes");
}
