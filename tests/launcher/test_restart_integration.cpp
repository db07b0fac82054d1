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
  Proc p = launch_sh(d, {"--devices", "cpu", "--nproc_per_node", "2", "--max_restart", "2", "--restart-backoff", "0.05"},
                     script);
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

TEST_CASE("restart: the wait before each restart doubles, is logged, and the report says a restart follows", "[launcher][restart]") {
  // Issue 22, item 8: --max_restart 50 with a worker that always fails ran 51 generations in 287 ms.
  TempDir td;
  const std::string& d = td.path;
  const std::string script = "date +%s%N > " + d + "/t.$RANK.$PADDLE_RESTART_COUNT; exit 3";
  Proc p = launch_sh(d, {"--devices", "cpu", "--nproc_per_node", "1", "--max_restart", "3", "--restart-backoff",
                         "0.2:0.5"}, script);
  Reaper guard(p.pid);
  REQUIRE(wait_exit(p.pid, 25) == 3);
  std::vector<double> t;
  for (int g = 0; g < 4; ++g) t.push_back(std::atof(slurp(d + "/t.0." + std::to_string(g)).c_str()) * 1e-9);
  CHECK_FALSE(exists(d + "/t.0.4"));
  // 0.2, 0.4, then 0.5 (the cap): each gap is at least the wait, and not much more on this machine.
  const double want[] = {0.2, 0.4, 0.5};
  for (int g = 0; g < 3; ++g) {
    INFO("gap before restart " << g + 1 << ": " << t[size_t(g) + 1] - t[size_t(g)] << " s");
    CHECK(t[size_t(g) + 1] - t[size_t(g)] >= want[g]);
    CHECK(t[size_t(g) + 1] - t[size_t(g)] < want[g] + 2);
  }
  const std::string err = p.err();
  INFO(err);
  CHECK_THAT(err, Catch::Contains("restarting all 1 worker(s) in 0.2 s (restart 1 of 3"));
  CHECK_THAT(err, Catch::Contains("restarting all 1 worker(s) in 0.4 s (restart 2 of 3"));
  CHECK_THAT(err, Catch::Contains("restarting all 1 worker(s) in 0.5 s (restart 3 of 3"));
  CHECK_THAT(err, Catch::Contains("--restart-backoff 0.2 s doubling to 0.5 s"));
  // Item 15: a report that a restart follows does not say how launch exits.
  CHECK_THAT(err, Catch::Contains("root cause: rank 0 exited with code 3 (pid "));
  CHECK_THAT(err, Catch::Contains("; restart 1 of 3 follows"));
  CHECK_THAT(err, Catch::Contains("; restart 3 of 3 follows"));
  size_t exits = 0;
  for (size_t at = err.find("; launch exits with 3"); at != std::string::npos; at = err.find("; launch exits with 3", at + 1))
    ++exits;
  CHECK(exits == 2);  // the last report and "no restart left": once the restarts are spent
}

TEST_CASE("restart: a stop signal during the wait before a restart ends it at once", "[launcher][restart]") {
  TempDir td;
  const std::string& d = td.path;
  Proc p = launch_sh(d, {"--devices", "cpu", "--nproc_per_node", "2", "--max_restart", "5", "--restart-backoff", "30",
                         "--summary", d + "/summary.json"},
                     "touch " + d + "/ran.$RANK.$PADDLE_RESTART_COUNT; [ $RANK = 1 ] && exit 4; exec sleep 30");
  Reaper guard(p.pid);
  REQUIRE(wait_until([&] { return p.err().find("restarting all 2 worker(s) in 30 s") != std::string::npos; }, 20));
  const double t0 = now_s();
  kill(p.pid, SIGTERM);
  const auto code = wait_exit(p.pid, 10);
  const double took = now_s() - t0;
  REQUIRE(code.has_value());
  CHECK(*code == 4);  // the failure's code: the signal stopped a restart, not a running job
  CHECK(took < 1.0);
  CHECK_FALSE(exists(d + "/ran.0.1"));
  CHECK_THAT(p.err(), Catch::Contains("SIGTERM arrived during the wait before restart 1: not restarting"));
  auto j = nlohmann::json::parse(slurp(d + "/summary.json"));
  CHECK(j["exit_code"] == 4);
}

TEST_CASE("checkpoint signal: forwarded to every worker, the job goes on", "[launcher][checkpoint]") {
  TempDir td;
  const std::string& d = td.path;
  // Each worker (a shell that execs a program with a handler, as `exec python train.py` does)
  // records what it was told, and then finishes normally; its helper child, started before the
  // exec and without a handler, must not be hit by the signal. A POSIX shell itself cannot trap
  // it: the signal is ignored on entry, and such signals stay ignored in a non-interactive sh.
  const std::string program =
      "import os, signal, sys, time\n"
      "d, r = sys.argv[1], os.environ['RANK']\n"
      "got = []\n"
      "signal.signal(signal.SIGUSR2, lambda *a: got.append(1))\n"
      "open(d + '/pid.' + r + '.tmp', 'w').write(str(os.getpid()) + '\\n')\n"
      "os.rename(d + '/pid.' + r + '.tmp', d + '/pid.' + r)\n"
      "deadline = time.time() + 20\n"
      "while not got and time.time() < deadline: time.sleep(0.005)\n"
      "open(d + '/saved.' + r, 'w').write(os.environ['LAUNCH_CHECKPOINT_SIGNAL'] + '\\n')\n"
      "helper = int(open(d + '/helper.' + r).read())\n"
      "os.kill(helper, 0)\n"
      "open(d + '/alive.' + r, 'w').write('helper-alive\\n')\n"
      "os.kill(helper, signal.SIGTERM)\n";
  { std::ofstream(d + "/worker.py") << program; }
  const std::string script = "sleep 60 & echo $! > " + d + "/helper.$RANK; exec /usr/bin/python3 " + d +
                             "/worker.py " + d;
  Proc p = launch_sh(d, {"--devices", "cpu", "--nproc_per_node", "2", "--checkpoint-signal", "USR2"}, script);
  Reaper guard(p.pid);
  // The handler is set before the pid file appears: the signal cannot come too early.
  REQUIRE(wait_until([&] { return exists(d + "/pid.0") && exists(d + "/pid.1"); }, 20));
  kill(p.pid, SIGUSR2);
  REQUIRE(wait_exit(p.pid, 15) == 0);
  for (int r = 0; r < 2; ++r) {
    CHECK(slurp(d + "/saved." + std::to_string(r)) == "SIGUSR2\n");
    CHECK(slurp(d + "/alive." + std::to_string(r)) == "helper-alive\n");
  }
  CHECK_THAT(p.err(), Catch::Contains("forwarded it to 2 worker(s)"));
}

TEST_CASE("checkpoint signal: a wrapper shell or a program without its handler yet is not killed", "[launcher][checkpoint]") {
  // Issue 14, item 5: today the signal kills such a worker ("rank 0 killed by SIGUSR2").
  TempDir td;
  const std::string& d = td.path;
  // The worker is a shell with no trap (the wrapper of `sh -c "python train.py"`), and its child
  // has not set a handler either; both must live on and the job succeed.
  Proc p = launch_sh(d, {"--devices", "cpu", "--nproc_per_node", "2", "--checkpoint-signal", "USR1"},
                     "sleep 30 & echo $! > " + d + "/child.$RANK; while [ ! -e " + d +
                         "/go ]; do sleep 0.01; done; kill -USR1 $(cat " + d + "/child.$RANK) && sleep 0.2; "
                         "kill -0 $(cat " + d + "/child.$RANK) && kill $(cat " + d + "/child.$RANK)");
  Reaper guard(p.pid);
  REQUIRE(wait_until([&] { return exists(d + "/child.0") && exists(d + "/child.1"); }, 20));
  kill(p.pid, SIGUSR1);  // to the shells (the launcher forwards it)
  REQUIRE(wait_until([&] { return p.err().find("forwarded it to 2 worker(s)") != std::string::npos; }, 10));
  { std::ofstream(d + "/go") << "1"; }  // and straight to their children
  CHECK(wait_exit(p.pid, 15) == 0);
  CHECK_THAT(p.err(), !Catch::Contains("killed by SIGUSR1"));
}

TEST_CASE("workers start with default signal dispositions and an empty mask", "[launcher][signals]") {
  // Issue 14, item 5: a launcher started from a script with `&` has SIGINT and SIGQUIT ignored;
  // its workers must not inherit that (they would only die by SIGKILL after the grace).
  TempDir td;
  const std::string& d = td.path;
  std::vector<std::string> argv{"/bin/sh", "-c",
                                "trap '' INT QUIT HUP USR1 && exec \"$0\" \"$@\"", kLaunch, "--log_dir", d + "/log",
                                "--devices", "cpu", "--nproc_per_node", "1", "--checkpoint-signal", "USR2",
                                "sh", "-c", "cat /proc/self/status | grep -E '^Sig(Ign|Blk):' > " + d + "/sig"};
  Proc p = start(argv, d);
  Reaper guard(p.pid);
  REQUIRE(wait_exit(p.pid, 15) == 0);
  const std::string sig = slurp(d + "/sig");
  INFO(sig);
  // Only SIGUSR2 (the checkpoint signal, bit 11 of the mask) is ignored; nothing is blocked.
  CHECK_THAT(sig, Catch::Contains("SigBlk:\t0000000000000000"));
  CHECK_THAT(sig, Catch::Contains("SigIgn:\t0000000000000800"));
}

TEST_CASE("checkpoint signal: without --checkpoint-signal nothing is exported", "[launcher][checkpoint]") {
  TempDir td;
  const std::string& d = td.path;
  Proc p = launch_sh(d, {"--devices", "cpu", "--nproc_per_node", "1"}, "env > " + d + "/env");
  Reaper guard(p.pid);
  REQUIRE(wait_exit(p.pid, 15) == 0);
  CHECK(parse_env_file(d + "/env").count("LAUNCH_CHECKPOINT_SIGNAL") == 0);
}
