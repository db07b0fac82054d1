#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

#include "launcher/failure_report.h"

using namespace launch;

namespace {

// What print_failure_report writes on stderr (the launcher's log before attach()).
std::string report_of(const JobOutcome& o, NextStep next = {}) {
  char path[] = "/tmp/failure_report_XXXXXX";
  const int fd = mkstemp(path);
  REQUIRE(fd >= 0);
  std::fflush(stderr);
  const int saved = dup(2);
  dup2(fd, 2);
  print_failure_report(o, "/nonexistent-log-dir", next);
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  close(fd);
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  unlink(path);
  return ss.str();
}

}  // namespace

TEST_CASE("failure report: a root cause with no record of its rank is still named", "[launcher][report]") {
  JobOutcome o;
  REQUIRE(o.policy.on_worker_end(5, {Termination::How::Exited, 3}));
  o.records.push_back({});  // rank 0 only
  const std::string text = report_of(o);
  CHECK_THAT(text, Catch::Contains("root cause: rank 5 exited with code 3; launch exits with 3"));
  CHECK_THAT(text, Catch::Contains("rank 5 is not one of this launcher's workers"));
}

TEST_CASE("failure report: the root cause's pid, device and last lines", "[launcher][report]") {
  JobOutcome o;
  REQUIRE(o.policy.on_worker_end(1, {Termination::How::Signaled, 11}));
  WorkerRecord r;
  r.rank = 1;
  r.pid = 4242;
  r.log_path = "/tmp/log/workerlog.1";
  r.tail = {"step 7", "Segmentation fault"};
  o.records = {WorkerRecord{}, r};
  const std::string text = report_of(o);
  CHECK_THAT(text, Catch::Contains("root cause: rank 1 killed by SIGSEGV (pid 4242, "));
  CHECK_THAT(text, Catch::Contains("log: /tmp/log/workerlog.1; its last 2 line(s) of this run:"));
  CHECK_THAT(text, Catch::Contains("  | Segmentation fault"));
}

TEST_CASE("failure report: when a restart follows it says so, not how launch exits", "[launcher][report]") {
  // Issue 22, item 15: "launch exits with 137" above a restart.
  JobOutcome o;
  REQUIRE(o.policy.on_worker_end(1, {Termination::How::Signaled, 9}));
  o.records = {WorkerRecord{}};
  std::string text = report_of(o, NextStep{2, 5});
  CHECK_THAT(text, Catch::Contains("root cause: rank 1 killed by SIGKILL; restart 2 of 5 follows"));
  CHECK_THAT(text, !Catch::Contains("exits with"));
  JobOutcome remote;
  REQUIRE(remote.policy.on_remote_failure(3, "node 1 (10.0.0.2): rank 5 exited with code 3"));
  text = report_of(remote, NextStep{1, 1});
  CHECK_THAT(text, Catch::Contains("root cause, on another node: node 1 (10.0.0.2): rank 5 exited with code 3; restart 1 of 1 follows"));
  text = report_of(remote);
  CHECK_THAT(text, Catch::Contains("; launch exits with 3"));
}
