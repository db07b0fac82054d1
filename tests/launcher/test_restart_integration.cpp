// The real build/bin/launch: --max_restart (a new generation of every worker after a failure)
// and --checkpoint-signal (forwarded, the job goes on).
#include <catch2/catch.hpp>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "proc_helpers.h"

using namespace testutil;

namespace {

const std::string kLaunch = LAUNCH_BIN;

Proc launch_sh(const std::string& dir, std::vector<std::string> args, const std::string& script) {
  std::vector<std::string> argv{kLaunch, "--log_dir", dir + "/log"};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.insert(argv.end(), {"sh", "-c", script});
  return start(argv, dir);
}

}  // namespace

// ---------------------------------------------------------------------------------------------

TEST_CASE("restart: rank 1 fails in the first run, every worker starts again and succeeds", "[launcher][restart]") {
  TempDir td;
  const std::string& d = td.path;
  // First run: rank 0 waits forever (our SIGTERM must end it), rank 1 fails once rank 0 is up.
  // Second run: both meet through the store (which must work again after the failure) and exit 0.
  const std::string script =
      "env > " + d + "/env.$RANK.$PADDLE_RESTART_COUNT; echo run $PADDLE_RESTART_COUNT rank $RANK; "
      "if [ $PADDLE_RESTART_COUNT = 0 ]; then "
      "  if [ $RANK = 0 ]; then echo $$ > " + d + "/pid0; exec sleep 30; fi; "
      "  while [ ! -s " + d + "/pid0 ]; do :; done; exit 3; "
      "fi; "
      "if [ $RANK = 1 ]; then " + kLaunch + " kv set hello from-1 || exit 9; fi; "
      "[ \"$(" + kLaunch + " kv get hello --timeout 10)\" = from-1 ] || exit 8; " +
      kLaunch + " kv barrier done --timeout 10 || exit 7";
  Proc p = launch_sh(d, {"--devices", "cpu", "--nproc_per_node", "2", "--max_restart", "2", "--summary",
                         d + "/summary.json"}, script);
  Reaper guard(p.pid);
  REQUIRE(wait_exit(p.pid, 25) == 0);

  for (int r = 0; r < 2; ++r) {
    auto first = parse_env_file(d + "/env." + std::to_string(r) + ".0");
    auto second = parse_env_file(d + "/env." + std::to_string(r) + ".1");
    CHECK(first["PADDLE_RESTART_COUNT"] == "0");
    CHECK(first["TORCHELASTIC_RESTART_COUNT"] == "0");
    CHECK(second["PADDLE_RESTART_COUNT"] == "1");
    CHECK(second["TORCHELASTIC_RESTART_COUNT"] == "1");
    CHECK(second["RANK"] == std::to_string(r));
    // Same job layout in the new generation: ports and store address are kept.
    CHECK(second["PADDLE_TRAINER_ENDPOINTS"] == first["PADDLE_TRAINER_ENDPOINTS"]);
    CHECK(second["LAUNCH_STORE_ADDR"] == first["LAUNCH_STORE_ADDR"]);
  }
  CHECK_FALSE(exists(d + "/env.0.2"));  // no third run
  CHECK(process_gone(read_pid(d + "/pid0")));
  // Each failure is reported; the log holds both runs.
  const std::string err = p.err();
  CHECK_THAT(err, Catch::Contains("root cause: rank 1 exited with code 3"));
  CHECK_THAT(err, Catch::Contains("restart 1 of 2"));
  CHECK(slurp(d + "/log/workerlog.1") == "run 0 rank 1\nrun 1 rank 1\n");
  auto j = nlohmann::json::parse(slurp(d + "/summary.json"));  // the last generation's
  CHECK(j["exit_code"] == 0);
  CHECK(j["restart_count"] == 1);
}

TEST_CASE("restart: when the restarts run out, launch exits with the last failure's code", "[launcher][restart]") {
  TempDir td;
  const std::string& d = td.path;
  // Every run fails, with a code that tells the runs apart: 3, 4, 5.
  const std::string script =
      "touch " + d + "/ran.$RANK.$PADDLE_RESTART_COUNT; "
      "if [ $RANK = 1 ]; then exit $((3 + PADDLE_RESTART_COUNT)); fi; exec sleep 30";
  Proc p = launch_sh(d, {"--devices", "cpu", "--nproc_per_node", "2", "--max_restart", "2"}, script);
  Reaper guard(p.pid);
  REQUIRE(wait_exit(p.pid, 25) == 5);
  for (int g = 0; g < 3; ++g) CHECK(exists(d + "/ran.1." + std::to_string(g)));
  CHECK_FALSE(exists(d + "/ran.1.3"));
  const std::string err = p.err();
  for (int code : {3, 4, 5}) CHECK_THAT(err, Catch::Contains("rank 1 exited with code " + std::to_string(code)));
  CHECK_THAT(err, Catch::Contains("no restart left (--max_restart 2)"));
}

TEST_CASE("restart: a signal to launch stops the job, it is not a failure to restart", "[launcher][restart]") {
  TempDir td;
  const std::string& d = td.path;
  Proc p = launch_sh(d, {"--devices", "cpu", "--nproc_per_node", "2", "--max_restart", "3"},
                     "touch " + d + "/ran.$RANK.$PADDLE_RESTART_COUNT; exec sleep 30");
  Reaper guard(p.pid);
  REQUIRE(wait_until([&] { return exists(d + "/ran.0.0") && exists(d + "/ran.1.0"); }, 20));
  kill(p.pid, SIGTERM);
  REQUIRE(wait_exit(p.pid, 15) == 128 + SIGTERM);
  CHECK_FALSE(exists(d + "/ran.0.1"));
}

TEST_CASE("checkpoint signal: forwarded to every worker, the job goes on", "[launcher][checkpoint]") {
  TempDir td;
  const std::string& d = td.path;
  // Each worker traps the signal, records what it was told, and then finishes normally; its own
  // child (a helper without a handler) must not be hit by the signal.
  const std::string script =
      "sleep 60 & echo $! > " + d + "/helper.$RANK; "
      "trap 'echo $LAUNCH_CHECKPOINT_SIGNAL > " + d + "/saved.$RANK' USR2; "
      "echo $$ > " + d + "/pid.$RANK; "
      "while [ ! -s " + d + "/saved.$RANK ]; do :; done; "
      "kill -0 $(cat " + d + "/helper.$RANK) && echo helper-alive > " + d + "/alive.$RANK; kill $(cat " + d + "/helper.$RANK); exit 0";
  Proc p = launch_sh(d, {"--devices", "cpu", "--nproc_per_node", "2", "--checkpoint-signal", "USR2"}, script);
  Reaper guard(p.pid);
  REQUIRE(wait_until([&] { return exists(d + "/pid.0") && exists(d + "/pid.1"); }, 20));
  // The trap is set before the pid file is written: the signal cannot come too early.
  wait_until([&] { return slurp(d + "/pid.0").find('\n') != std::string::npos &&
                          slurp(d + "/pid.1").find('\n') != std::string::npos; }, 5);
  kill(p.pid, SIGUSR2);
  REQUIRE(wait_exit(p.pid, 15) == 0);
  for (int r = 0; r < 2; ++r) {
    CHECK(slurp(d + "/saved." + std::to_string(r)) == "SIGUSR2\n");
    CHECK(slurp(d + "/alive." + std::to_string(r)) == "helper-alive\n");
  }
  CHECK_THAT(p.err(), Catch::Contains("forwarded it to 2 worker(s)"));
}

TEST_CASE("checkpoint signal: without --checkpoint-signal nothing is exported", "[launcher][checkpoint]") {
  TempDir td;
  const std::string& d = td.path;
  Proc p = launch_sh(d, {"--devices", "cpu", "--nproc_per_node", "1"}, "env > " + d + "/env");
  Reaper guard(p.pid);
  REQUIRE(wait_exit(p.pid, 15) == 0);
  CHECK(parse_env_file(d + "/env").count("LAUNCH_CHECKPOINT_SIGNAL") == 0);
}
