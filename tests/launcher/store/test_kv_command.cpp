// `launch kv`: exit codes and output, run in-process against a real store.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <iostream>
#include <sstream>
#include <thread>

#include "launcher/store/kv_command.h"
#include "tests/store/store_test_util.h"

using namespace store_test;

namespace {

struct Result {
  int code;
  std::string out, err;
};

// Runs `launch kv ARGS...` with stdout/stderr captured.
Result kv(std::vector<std::string> args) {
  args.insert(args.begin(), "kv");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  std::ostringstream out, err;
  auto* old_out = std::cout.rdbuf(out.rdbuf());
  auto* old_err = std::cerr.rdbuf(err.rdbuf());
  int code = launch::run_kv_command(static_cast<int>(argv.size()), argv.data());
  std::cout.rdbuf(old_out);
  std::cerr.rdbuf(old_err);
  return {code, out.str(), err.str()};
}

struct Env {
  explicit Env(const TestStore& ts) {
    ::setenv("LAUNCH_STORE_ADDR", ts.server->address().c_str(), 1);
    ::setenv("LAUNCH_STORE_TOKEN", ts.cfg.token.c_str(), 1);
    ::setenv("PADDLE_JOB_ID", ts.cfg.job_id.c_str(), 1);
    ::setenv("PADDLE_TRAINERS_NUM", "1", 1);
  }
  ~Env() {
    for (const char* v : {"LAUNCH_STORE_ADDR", "LAUNCH_STORE_TOKEN", "PADDLE_JOB_ID", "PADDLE_TRAINERS_NUM"})
      ::unsetenv(v);
  }
};

}  // namespace

TEST_CASE("launch kv: set, get, add, check, wait, delete, compare-set, ping, barrier", "[store][kv]") {
  TestStore ts;
  Env env(ts);
  CHECK(kv({"set", "peer/0", "1234"}).code == 0);
  auto r = kv({"get", "peer/0"});
  CHECK(r.code == 0);
  CHECK(r.out == "1234\n");
  CHECK(kv({"add", "n", "5"}).out == "5\n");
  CHECK(kv({"add", "n", "-7"}).out == "-2\n");
  r = kv({"check", "peer/0", "nope"});
  CHECK(r.code == 1);
  CHECK(r.out == "1\n0\n");
  CHECK(kv({"wait", "peer/0", "n", "--timeout", "1"}).code == 0);
  CHECK(kv({"compare-set", "c", "", "x"}).out == "x\n");
  CHECK(kv({"delete", "c"}).code == 0);
  CHECK(kv({"delete", "c"}).code == 1);
  CHECK(kv({"ping"}).code == 0);
  CHECK(kv({"barrier", "start"}).code == 0);  // world 1 from PADDLE_TRAINERS_NUM
  r = kv({"job-status"});
  CHECK(r.code == 0);
  CHECK(r.out == "running\n");
}

TEST_CASE("launch kv: timeouts, job failure and refusals exit 1 with a message", "[store][kv]") {
  TestStore ts;
  Env env(ts);
  auto r = kv({"get", "missing", "--timeout", "0.2"});
  CHECK(r.code == 1);
  CHECK_THAT(r.err, Catch::Contains("waited 200 ms for key 'missing'"));
  r = kv({"barrier", "b", "--world", "2", "--timeout", "0.2"});
  CHECK(r.code == 1);
  CHECK_THAT(r.err, Catch::Contains("barrier 'b' of 2 ranks"));
  ts.server->report_failure(1, "killed by signal 9");
  r = kv({"wait", "x"});
  CHECK(r.code == 1);
  CHECK_THAT(r.err, Catch::Contains("rank 1: killed by signal 9"));
  r = kv({"job-status"});
  CHECK(r.code == 1);
  CHECK(r.out == "failed: rank 1: killed by signal 9\n");
  ::setenv("LAUNCH_STORE_TOKEN", "wrong", 1);
  r = kv({"ping"});
  CHECK(r.code == 1);
  CHECK_THAT(r.err, Catch::Contains("BAD_TOKEN"));
}

TEST_CASE("launch kv: usage errors exit 2", "[store][kv]") {
  TestStore ts;
  Env env(ts);
  CHECK(kv({}).code == 2);
  CHECK(kv({"frobnicate"}).code == 2);
  CHECK(kv({"set", "only-key"}).code == 2);
  CHECK(kv({"add", "k", "not-a-number"}).code == 2);
  CHECK(kv({"help-me", "--timeout", "-1"}).code == 2);
  CHECK(kv({"--help"}).code == 0);
  ::unsetenv("PADDLE_TRAINERS_NUM");
  auto r = kv({"barrier", "b"});
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("PADDLE_TRAINERS_NUM"));
  ::unsetenv("LAUNCH_STORE_ADDR");
  r = kv({"ping"});
  CHECK(r.code == 2);
  CHECK_THAT(r.err, Catch::Contains("LAUNCH_STORE_ADDR is not set"));
}
