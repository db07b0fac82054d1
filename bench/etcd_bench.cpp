// Latencies of the etcd client (launcher/etcd/) against a real etcd on 127.0.0.1 that it starts
// (tests/launcher/etcd/etcd_fixture.h): unary calls, a watch's wake-up after a write, a
// keep-alive, the time from a node's death to its key's deletion (lease TTL 2 s, etcd's
// minimum), a 3-node rendezvous. scripts/bench_etcd.sh runs it.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

#include "launcher/etcd/etcd_rendezvous.h"
#include "launcher/etcd/primitives.h"
#include "tests/launcher/etcd/etcd_fixture.h"

using namespace launch::etcd;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

namespace {

double ms_since(Clock::time_point t0) { return std::chrono::duration<double, std::milli>(Clock::now() - t0).count(); }

void report(const char* what, std::vector<double> v) {
  std::sort(v.begin(), v.end());
  std::printf("%-58s n=%-4zu median %8.2f ms   p99 %8.2f ms   max %8.2f ms\n", what, v.size(), v[v.size() / 2],
              v[std::min(v.size() - 1, v.size() * 99 / 100)], v.back());
}

template <class F>
std::vector<double> timed(int n, F&& f) {
  std::vector<double> v;
  for (int i = 0; i < n; ++i) {
    auto t0 = Clock::now();
    f(i);
    v.push_back(ms_since(t0));
  }
  return v;
}

}  // namespace

int main() {
  if (etcdtest::etcd_binary().empty()) {
    std::printf("SKIPPED: no etcd binary (apt-get install etcd-server, or set ETCD_BIN)\n");
    return 77;
  }
  etcdtest::EtcdServer etcd;
  Options o = etcd.options();
  Client c(o);
  std::printf("# etcd %s at %s\n", c.server_version().c_str(), etcd.endpoint().c_str());

  report("put (one key, 64-byte value)", timed(500, [&](int i) { c.put("/b/put", std::string(64, char('a' + i % 26))); }));
  report("get (range of one key)", timed(500, [&](int) { c.get("/b/put"); }));
  report("create_if_absent (txn), a new key each", timed(500, [&](int i) { create_if_absent(c, "/b/c/" + std::to_string(i), "v"); }));
  report("list_prefix of 500 keys", timed(100, [&](int) { list_prefix(c, "/b/c/"); }));
  LeaseGrant g = c.grant_lease(60);
  report("keep_alive (a connection each: the stream is dropped)", timed(200, [&](int) { c.keep_alive(g.id); }));

  {  // A watch's wake-up: from just before the put to the waiter's return.
    std::vector<double> v;
    Client w(o);
    for (int i = 0; i < 100; ++i) {
      int64_t r = c.put("/b/watch", "x");
      std::atomic<int64_t> put_at{0};
      std::thread writer([&] {
        Client wc(o);
        wc.server_version();
        std::this_thread::sleep_for(20ms);  // the waiter is parked by then
        put_at = Clock::now().time_since_epoch().count();
        wc.put("/b/watch", "y");
      });
      WatchResult res = w.wait_for_change("/b/watch", "", r, 5s);
      double lat = double((Clock::now().time_since_epoch().count() - put_at.load())) / 1e6;
      writer.join();
      if (res.outcome == WatchResult::Outcome::Changed) v.push_back(lat);
    }
    report("watch wake-up after a put elsewhere", v);
  }

  {  // A node dies (its keeper stops, no revoke): its key's deletion as a watcher sees it.
    std::vector<double> v;
    for (int i = 0; i < 3; ++i) {
      LeaseKeeper lease(o, 2);
      int64_t r = c.put("/b/node", "alive", lease.id());
      auto t0 = Clock::now();
      lease.stop(LeaseKeeper::Revoke::No);
      if (c.wait_for_change("/b/node", "", r, 10s).outcome == WatchResult::Outcome::Changed) v.push_back(ms_since(t0));
    }
    report("node dead (TTL 2 s) -> its key deleted, seen by a watch", v);
  }

  {  // 3 nodes as threads: from the first join to all three seeing each other.
    std::vector<double> v;
    for (int run = 0; run < 5; ++run) {
      const std::string job = "bench" + std::to_string(run);
      std::vector<std::unique_ptr<EtcdRendezvous>> nodes;
      for (int i = 0; i < 3; ++i) {
        RendezvousConfig cfg{o, job, "n" + std::to_string(i), 10};
        nodes.push_back(std::make_unique<EtcdRendezvous>(cfg));
      }
      auto t0 = Clock::now();
      std::vector<std::thread> threads;
      for (auto& n : nodes)
        threads.emplace_back([&n] {
          n->join("");
          n->wait_for_members(3, 10s);
        });
      for (auto& t : threads) t.join();
      v.push_back(ms_since(t0));
    }
    report("3-node rendezvous (join + wait_for_members), leases granted", v);
  }
  return 0;
}
