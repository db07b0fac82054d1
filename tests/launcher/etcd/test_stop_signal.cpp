// The launcher's stop signals end an etcd wait, through the one signalfd every other wait of
// the launcher watches (launcher/stop_signals.h): SIGCHLD does not, SIGTERM does at once.
// Its own binary: StopSignals blocks the signals before any thread exists.
#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <thread>

#include "launcher/errors.h"
#include "launcher/etcd/client.h"
#include "launcher/stop_signals.h"
#include "tests/launcher/etcd/etcd_fixture.h"

using namespace launch::etcd;
using namespace std::chrono_literals;

TEST_CASE("stop signals: SIGTERM ends an etcd wait at once, SIGCHLD does not", "[etcd][signals]") {
  etcdtest::require_etcd();
  etcdtest::EtcdServer etcd;  // before StopSignals: etcd starts with the signals it expects
  launch::StopSignals stops(0);
  Options o = etcd.options();
  stops.attach(o);
  Client c(o);
  const std::string p = etcdtest::unique_prefix();
  int64_t r = c.put(p + "k", "v");

  std::thread signaller([] {  // made after StopSignals: the signals are blocked here too
    std::this_thread::sleep_for(200ms);
    ::kill(::getpid(), SIGCHLD);
    std::this_thread::sleep_for(200ms);
    ::kill(::getpid(), SIGTERM);
  });
  auto t0 = std::chrono::steady_clock::now();
  try {
    try {
      c.wait_for_change(p + "k", "", r, 20s);
      FAIL("the wait was not ended");
    } catch (const EtcdError& e) {
      REQUIRE(e.kind() == EtcdError::Kind::Cancelled);
      REQUIRE(stops.stopped() == SIGTERM);
      throw launch::StopRequested(*stops.stopped(), "waiting for the etcd rendezvous");
    }
  } catch (const launch::StopRequested& s) {
    CHECK(s.sig() == SIGTERM);
  }
  signaller.join();
  CHECK(etcdtest::since(t0) >= 0.35);
  CHECK(etcdtest::since(t0) < 2);
}
