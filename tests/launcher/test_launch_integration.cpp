// Runs the real build/bin/launch on small shell workers.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>
#include <algorithm>
#include <deque>
#include <regex>
#include <set>

#include "proc_helpers.h"

using namespace testutil;

namespace {

const std::string kLaunch = LAUNCH_BIN;

// launch ARGS... sh -c SCRIPT, in dir, logs in dir/log.
Proc launch_sh(const std::string& dir, std::vector<std::string> args, const std::string& script,
               const std::map<std::string, std::string>& env = {}, const std::string& tag = "launch") {
  std::vector<std::string> argv{kLaunch};
  if (std::find(args.begin(), args.end(), "--log_dir") == args.end()) argv.insert(argv.end(), {"--log_dir", dir + "/log"});
  argv.insert(argv.end(), args.begin(), args.end());
  argv.insert(argv.end(), {"sh", "-c", script});
  return start(argv, dir, env, tag);
}

std::vector<uint16_t> ports_of(const std::string& list) {
  std::vector<uint16_t> out;
  std::stringstream ss(list);
  std::string ep;
  while (std::getline(ss, ep, ',')) out.push_back(static_cast<uint16_t>(std::stoi(ep.substr(ep.rfind(':') + 1))));
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------------------------

TEST_CASE("launch: every worker sees its environment; logs hold its output", "[launcher][integration]") {
  TempDir td;
  const std::string& d = td.path;
  Proc p = launch_sh(d, {"--devices", "cpu", "--nproc_per_node", "3", "--job_id", "envjob"},
                     "env > " + d + "/env.$PADDLE_TRAINER_ID; echo hello from $RANK",
                     {{"FLAGS_selected_gpus", "7"}, {"OMP_NUM_THREADS", ""}});
  Reaper guard(p.pid);
  REQUIRE(wait_exit(p.pid, 20) == 0);

  std::set<uint16_t> ports;
  std::vector<uint16_t> endpoints;
  for (int r = 0; r < 3; ++r) {
    auto e = parse_env_file(d + "/env." + std::to_string(r));
    const std::string R = std::to_string(r);
    CHECK(e["PADDLE_TRAINER_ID"] == R);
    CHECK(e["PADDLE_GLOBAL_RANK"] == R);
    CHECK(e["PADDLE_LOCAL_RANK"] == R);
    CHECK(e["PADDLE_RANK_IN_NODE"] == R);
    CHECK(e["RANK"] == R);
    CHECK(e["LOCAL_RANK"] == R);
    CHECK(e["PADDLE_TRAINERS_NUM"] == "3");
    CHECK(e["PADDLE_GLOBAL_SIZE"] == "3");
    CHECK(e["PADDLE_LOCAL_SIZE"] == "3");
    CHECK(e["WORLD_SIZE"] == "3");
    CHECK(e["LOCAL_WORLD_SIZE"] == "3");
    CHECK(e["PADDLE_NNODES"] == "1");
    CHECK(e["GROUP_RANK"] == "0");
    CHECK(e["PADDLE_JOB_ID"] == "envjob");
    CHECK(e["PADDLE_LOG_DIR"] == d + "/log");
    CHECK(e["PADDLE_DISTRI_BACKEND"] == "gloo");
    CHECK(e.count("FLAGS_selected_gpus") == 0);  // CPU rank: removed even though we had it
    CHECK(e["OMP_NUM_THREADS"] == "");           // set (empty) by the caller: left alone
    CHECK(e["MASTER_ADDR"] == "127.0.0.1");
    CHECK(e["PADDLE_MASTER"] == "127.0.0.1:" + e["MASTER_PORT"]);
    CHECK(std::regex_match(e["LAUNCH_STORE_ADDR"], std::regex(R"(127\.0\.0\.1:\d+)")));
    CHECK(std::regex_match(e["LAUNCH_STORE_TOKEN"], std::regex("[0-9a-f]{64}")));
    endpoints = ports_of(e["PADDLE_TRAINER_ENDPOINTS"]);
    REQUIRE(endpoints.size() == 3);
    CHECK(e["PADDLE_CURRENT_ENDPOINT"] == "127.0.0.1:" + std::to_string(endpoints[static_cast<size_t>(r)]));
    ports.insert(static_cast<uint16_t>(std::stoi(e["MASTER_PORT"])));
    CHECK(slurp(d + "/log/workerlog." + R) == "hello from " + R + "\n");
  }
  for (uint16_t p2 : endpoints) ports.insert(p2);
  CHECK(ports.size() == 4);  // endpoints and master all distinct
  // Default --stream rank0: rank 0 on the console, the others only in their logs.
  CHECK(p.out() == "hello from 0\n");
  // The token never reaches the launcher's own output.
  auto token = parse_env_file(d + "/env.0")["LAUNCH_STORE_TOKEN"];
  CHECK(p.err().find(token) == std::string::npos);
}

TEST_CASE("launch: GPU ranks get FLAGS_selected_gpus and nccl; CUDA_VISIBLE_DEVICES untouched", "[launcher][integration]") {
  TempDir td;
  const std::string& d = td.path;
  // Shell workers never touch a GPU, so two "visible" GPUs are enough to exercise the GPU path.
  Proc p = launch_sh(d, {"--gpus", "1,0"}, "env > " + d + "/env.$PADDLE_TRAINER_ID",
                     {{"CUDA_VISIBLE_DEVICES", "0,1"}, {"OMP_NUM_THREADS", "3"}});
  Reaper guard(p.pid);
  REQUIRE(wait_exit(p.pid, 20) == 0);
  auto e0 = parse_env_file(d + "/env.0"), e1 = parse_env_file(d + "/env.1");
  CHECK(e0["FLAGS_selected_gpus"] == "1");
  CHECK(e1["FLAGS_selected_gpus"] == "0");
  CHECK(e0["PADDLE_DISTRI_BACKEND"] == "nccl");
  CHECK(e0["CUDA_VISIBLE_DEVICES"] == "0,1");
  CHECK(e1["OMP_NUM_THREADS"] == "3");
}

TEST_CASE("launch: one worker exits 3 -> launch exits 3 within 1 s, the others are gone", "[launcher][integration]") {
  TempDir td;
  const std::string& d = td.path;
  // Rank 1 fails once the others are up, and writes the time it does so.
  const std::string script =
      "echo $$ > " + d + "/pid.$RANK; "
      "if [ $RANK = 1 ]; then "
      "  while [ ! -s " + d + "/pid.0 ] || [ ! -s " + d + "/pid.2 ]; do :; done; "
      "  echo 'rank 1 last words'; date +%s.%N > " + d + "/t_fail; exit 3; "
      "fi; exec sleep 30";
  Proc p = launch_sh(d, {"--devices", "cpu", "--nproc_per_node", "3", "--summary", d + "/summary.json"}, script);
  Reaper guard(p.pid);
  auto code = wait_exit(p.pid, 20);
  const double t_exit = now_s();
  REQUIRE(code == 3);
  const double t_fail = std::stod(slurp(d + "/t_fail"));
  CHECK(t_exit - t_fail < 1.0);
  CHECK(process_gone(read_pid(d + "/pid.0")));
  CHECK(process_gone(read_pid(d + "/pid.2")));
  const std::string err = p.err();
  CHECK_THAT(err, Catch::Contains("root cause: rank 1 exited with code 3"));
  CHECK_THAT(err, Catch::Contains(d + "/log/workerlog.1"));
  CHECK_THAT(err, Catch::Contains("| rank 1 last words"));

  auto j = nlohmann::json::parse(slurp(d + "/summary.json"));
  CHECK(j["exit_code"] == 3);
  CHECK(j["root_cause"]["rank"] == 1);
  REQUIRE(j["ranks"].size() == 3);
  CHECK(j["ranks"][1]["exit_code"] == 3);
  CHECK(j["ranks"][0]["signal"] == "SIGTERM");
  CHECK(j["ranks"][2]["pid"] == read_pid(d + "/pid.2"));
  CHECK(j["ranks"][1]["log"] == d + "/log/workerlog.1");
  CHECK_FALSE(exists(d + "/summary.json.tmp." + std::to_string(p.pid)));
}

TEST_CASE("launch: a worker killed by SIGSEGV -> 139 and SIGSEGV in the report", "[launcher][integration]") {
  TempDir td;
  const std::string& d = td.path;
  Proc p = launch_sh(d, {"--devices", "cpu", "--nproc_per_node", "2", "--stream", "none"},
                     "if [ $RANK = 1 ]; then echo crashing; kill -SEGV $$; fi; exec sleep 30");
  Reaper guard(p.pid);
  REQUIRE(wait_exit(p.pid, 20) == 139);
  CHECK_THAT(p.err(), Catch::Contains("rank 1 killed by SIGSEGV"));
  CHECK_THAT(p.err(), Catch::Contains("| crashing"));
  CHECK(p.out().empty());  // --stream none
}

TEST_CASE("launch: survivors blocked in the store learn who failed", "[launcher][integration]") {
  TempDir td;
  const std::string& d = td.path;
  // Rank 0 ignores SIGTERM (so does its `launch kv`, which inherits that) to outlive our
  // teardown long enough to show what the store told it; --grace bounds it anyway.
  const std::string script =
      "if [ $RANK = 0 ]; then trap '' TERM; touch " + d + "/ready; " + kLaunch +
      " kv get never-set --timeout 20 2> " + d + "/kv.err; echo $? > " + d + "/kv.rc; exit 0; fi; "
      "while [ ! -e " + d + "/ready ]; do :; done; exit 3";
  Proc p = launch_sh(d, {"--devices", "cpu", "--nproc_per_node", "2", "--grace", "15"}, script);
  Reaper guard(p.pid);
  REQUIRE(wait_exit(p.pid, 25) == 3);
  CHECK(slurp(d + "/kv.rc") != "0\n");
  CHECK_THAT(slurp(d + "/kv.err"), Catch::Contains("rank 1") && Catch::Contains("exited with code 3"));
}

TEST_CASE("launch: SIGTERM to launch -> every descendant gone, grandchildren too", "[launcher][integration]") {
  TempDir td;
  const std::string& d = td.path;
  // Each rank leaves three grandchildren: a plain one, one that ignores SIGTERM (needs the
  // SIGKILL after --grace) and one that left the process group with setsid.
  const std::string script =
      "echo $$ > " + d + "/pid.$RANK; "
      "sleep 1000 & echo $! > " + d + "/gc_a.$RANK; "
      "(trap '' TERM; exec sleep 1000) & echo $! > " + d + "/gc_b.$RANK; "
      "setsid sleep 1000 & echo $! > " + d + "/gc_c.$RANK; "
      "wait";
  Proc p = launch_sh(d, {"--devices", "cpu", "--nproc_per_node", "2", "--grace", "0.5"}, script);
  Reaper guard(p.pid);
  REQUIRE(wait_until([&] {
    return all_written(d, "pid.", 2) && all_written(d, "gc_a.", 2) && all_written(d, "gc_b.", 2) &&
           all_written(d, "gc_c.", 2);
  }, 20));
  std::vector<pid_t> all;
  for (const char* f : {"pid.", "gc_a.", "gc_b.", "gc_c."})
    for (int r = 0; r < 2; ++r) all.push_back(read_pid(d + "/" + f + std::to_string(r)));
  for (pid_t q : all) REQUIRE_FALSE(process_gone(q));
  kill(p.pid, SIGTERM);
  REQUIRE(wait_exit(p.pid, 10) == 128 + SIGTERM);
  for (pid_t q : all) CHECK(wait_until([&] { return process_gone(q); }, 1.0));
  CHECK_THAT(p.err(), Catch::Contains("received SIGTERM"));
}

TEST_CASE("launch: workers that succeed leave no process behind", "[launcher][integration]") {
  TempDir td;
  const std::string& d = td.path;
  // The worker exits 0 at once, its background child would live for 1000 s.
  Proc p = launch_sh(d, {"--devices", "cpu", "--nproc_per_node", "2"},
                     "sleep 1000 & echo $! > " + d + "/gc.$RANK; exit 0");
  Reaper guard(p.pid);
  REQUIRE(wait_exit(p.pid, 10) == 0);
  for (int r = 0; r < 2; ++r) CHECK(process_gone(read_pid(d + "/gc." + std::to_string(r))));
}

TEST_CASE("launch: SIGTERM, SIGCONT, SIGTERM (Slurm's time limit) is one request: the workers keep their grace",
          "[launcher][integration]") {
  TempDir td;
  const std::string& d = td.path;
  // Each worker counts the SIGTERMs it gets and needs 1.5 s to "save" after the first: what a
  // trainer does. Before, the second SIGTERM to launch killed every worker at once.
  Proc p = launch_sh(d, {"--devices", "cpu", "--nproc_per_node", "2", "--grace", "30"},
                     "n=0; trap 'n=$((n+1)); echo $n >> " + d + "/terms.$RANK' TERM; echo $$ > " + d +
                         "/pid.$RANK; while [ $n = 0 ]; do sleep 0.05; done; sleep 1.5; echo saved > " + d +
                         "/saved.$RANK; exit 0");
  Reaper guard(p.pid);
  REQUIRE(wait_until([&] { return all_written(d, "pid.", 2); }, 20));
  const double t0 = now_s();
  kill(p.pid, SIGTERM);
  // The second one after launch took the first (two pending SIGTERMs are one to the kernel).
  REQUIRE(wait_until([&] { return p.err().find("received SIGTERM") != std::string::npos; }, 5));
  kill(p.pid, SIGCONT);
  kill(p.pid, SIGTERM);
  // The workers exited 0 after saving, but launch was stopped by SIGTERM: 143, as a shell reports.
  REQUIRE(wait_exit(p.pid, 20) == 128 + SIGTERM);
  CHECK(now_s() - t0 > 1.4);
  for (int r = 0; r < 2; ++r) {
    CHECK(slurp(d + "/saved." + std::to_string(r)) == "saved\n");
    CHECK(slurp(d + "/terms." + std::to_string(r)) == "1\n");  // forwarded once, not twice
  }
  CHECK_THAT(p.err(), Catch::Contains("received SIGTERM while stopping: the same request"));
  CHECK_THAT(p.err(), !Catch::Contains("killing every worker now"));
}

TEST_CASE("launch: SIGINT is forwarded; a second SIGINT kills at once", "[launcher][integration]") {
  TempDir td;
  const std::string& d = td.path;
  // The workers ignore SIGINT and SIGTERM: only the SIGKILL that the second SIGINT brings ends
  // them, long before the 60 s grace. A SIGTERM in between changes nothing.
  Proc p = launch_sh(d, {"--devices", "cpu", "--nproc_per_node", "2", "--grace", "60"},
                     "trap '' INT TERM; echo $$ > " + d + "/pid.$RANK; while :; do sleep 1; done");
  Reaper guard(p.pid);
  REQUIRE(wait_until([&] { return all_written(d, "pid.", 2); }, 20));
  kill(p.pid, SIGINT);
  REQUIRE(wait_until([&] { return p.err().find("received SIGINT") != std::string::npos; }, 5));
  kill(p.pid, SIGTERM);
  REQUIRE(wait_until([&] { return p.err().find("received SIGTERM while stopping") != std::string::npos; }, 5));
  CHECK_FALSE(wait_exit(p.pid, 0.5).has_value());  // still in its grace
  kill(p.pid, SIGINT);
  REQUIRE(wait_exit(p.pid, 10) == 128 + SIGINT);
  CHECK_THAT(p.err(), Catch::Contains("received SIGINT while stopping: killing every worker now"));
  for (int r = 0; r < 2; ++r) CHECK(process_gone(read_pid(d + "/pid." + std::to_string(r))));
}

TEST_CASE("launch: SIGKILL to launch -> workers gone within 1 s", "[launcher][integration]") {
  TempDir td;
  const std::string& d = td.path;
  Proc p = launch_sh(d, {"--devices", "cpu", "--nproc_per_node", "3"},
                     "echo $$ > " + d + "/pid.$RANK; exec sleep 30");
  Reaper guard(p.pid);
  REQUIRE(wait_until([&] { return all_written(d, "pid.", 3); }, 20));
  kill(p.pid, SIGKILL);
  REQUIRE(wait_exit(p.pid, 5) == 128 + SIGKILL);
  for (int r = 0; r < 3; ++r) {
    pid_t w = read_pid(d + "/pid." + std::to_string(r));
    CHECK(wait_until([&] { return process_gone(w); }, 1.0));
  }
}

TEST_CASE("launch: 8 concurrent launches never share a port", "[launcher][integration]") {
  TempDir td;
  const std::string& d = td.path;
  std::vector<Proc> procs;
  std::deque<Reaper> guards;
  for (int j = 0; j < 8; ++j) {
    // Rank 0 reports the job's ports; every worker then lives until we stop the job, so all 8
    // jobs hold their ports at the same time.
    Proc p = launch_sh(d, {"--devices", "cpu", "--nproc_per_node", "4", "--job_id", "j" + std::to_string(j),
                           "--log_dir", d + "/log" + std::to_string(j)},
                       "if [ $RANK = 0 ]; then echo $PADDLE_TRAINER_ENDPOINTS,$PADDLE_MASTER,$LAUNCH_STORE_ADDR > " +
                           d + "/ports.tmp.$PADDLE_JOB_ID && mv " + d + "/ports.tmp.$PADDLE_JOB_ID " + d +
                           "/ports.$PADDLE_JOB_ID; fi; exec sleep 60",
                       {}, "launch" + std::to_string(j));
    procs.push_back(p);
    guards.emplace_back(p.pid);
  }
  REQUIRE(wait_until([&] {
    for (int j = 0; j < 8; ++j)
      if (!exists(d + "/ports.j" + std::to_string(j))) return false;
    return true;
  }, 30));
  std::multiset<uint16_t> ports;
  for (int j = 0; j < 8; ++j) {
    auto list = ports_of(lines_of(slurp(d + "/ports.j" + std::to_string(j))).at(0));
    CHECK(list.size() == 6);  // 4 endpoints, the master, the store
    ports.insert(list.begin(), list.end());
  }
  for (uint16_t port : ports) CHECK(ports.count(port) == 1);
  for (auto& p : procs) kill(p.pid, SIGTERM);
  for (auto& p : procs) CHECK(wait_exit(p.pid, 15) == 128 + SIGTERM);
}

TEST_CASE("launch: --dry-run prints every rank and starts nothing", "[launcher][integration]") {
  TempDir td;
  const std::string& d = td.path;
  Proc p = launch_sh(d, {"--dry-run", "--devices", "cpu", "--nproc_per_node", "2"}, "touch " + d + "/started");
  Reaper guard(p.pid);
  REQUIRE(wait_exit(p.pid, 10) == 0);
  const std::string out = p.out();
  CHECK_THAT(out, Catch::Contains("rank 0 (cpu): ") && Catch::Contains("rank 1 (cpu): "));
  CHECK_THAT(out, Catch::Contains("sh -c 'touch " + d + "/started'"));
  CHECK_THAT(out, Catch::Contains("  PADDLE_TRAINER_ID=1\n"));
  CHECK_THAT(out, Catch::Contains("  WORLD_SIZE=2\n"));
  CHECK_THAT(out, Catch::Contains("  LAUNCH_STORE_TOKEN=<redacted>\n"));
  CHECK_FALSE(std::regex_search(out, std::regex("[0-9a-f]{64}")));
  CHECK_FALSE(exists(d + "/started"));
  CHECK_FALSE(exists(d + "/log"));
}

TEST_CASE("launch: --stream all prefixes and never splits a line", "[launcher][integration]") {
  TempDir td;
  const std::string& d = td.path;
  // Each line goes out in three writes, and is long enough to straddle pipe reads.
  const std::string script =
      "i=0; pad=$(printf '%02000d' 0); while [ $i -lt 150 ]; do "
      "printf 'r%s-begin-' $RANK; printf '%s' $pad; printf -- '-end-r%s\\n' $RANK; i=$((i+1)); done; "
      "printf 'r%s-unterminated' $RANK";
  Proc p = launch_sh(d, {"--devices", "cpu", "--nproc_per_node", "4", "--stream", "all"}, script);
  Reaper guard(p.pid);
  REQUIRE(wait_exit(p.pid, 30) == 0);
  const std::regex line_re(R"(\[rank (\d)\] r(\d)-begin-0{2000}-end-r(\d))");
  const std::regex last_re(R"(\[rank (\d)\] r(\d)-unterminated)");
  std::map<std::string, int> per_rank;
  int bad = 0;
  for (const auto& l : lines_of(p.out())) {
    std::smatch m;
    if (std::regex_match(l, m, line_re) && m[1] == m[2] && m[2] == m[3]) {
      per_rank[m[1]]++;
    } else if (!(std::regex_match(l, m, last_re) && m[1] == m[2])) {
      ++bad;
    }
  }
  CHECK(bad == 0);
  for (const char* r : {"0", "1", "2", "3"}) CHECK(per_rank[r] == 150);
}

TEST_CASE("launch: logs are appended unless --log_overwrite", "[launcher][integration]") {
  TempDir td;
  const std::string& d = td.path;
  for (int run = 0; run < 2; ++run) {
    Proc p = launch_sh(d, {"--devices", "cpu"}, "echo run");
    REQUIRE(wait_exit(p.pid, 10) == 0);
  }
  CHECK(slurp(d + "/log/workerlog.0") == "run\nrun\n");
  Proc p = launch_sh(d, {"--devices", "cpu", "--log_overwrite"}, "echo run");
  REQUIRE(wait_exit(p.pid, 10) == 0);
  CHECK(slurp(d + "/log/workerlog.0") == "run\n");
}

TEST_CASE("launch: a second launch on the same --log_dir is refused, naming the first", "[launcher][integration][log_lock]") {
  // Issue 22, item 9: two launches on one --log_dir interleaved into the same workerlog.N.
  TempDir td;
  const std::string& d = td.path;
  // The first fails once (generation 0) and then runs on: its lock outlives its restart.
  Proc a = launch_sh(d, {"--devices", "cpu", "--nproc_per_node", "2", "--max_restart", "1", "--restart-backoff", "0"},
                     "if [ $PADDLE_RESTART_COUNT = 0 ]; then [ $RANK = 1 ] && exit 3; exec sleep 30; fi; "
                     "touch " + d + "/gen1.$RANK; exec sleep 30", {}, "first");
  Reaper ga(a.pid);
  REQUIRE(wait_until([&] { return exists(d + "/gen1.0") && exists(d + "/gen1.1"); }, 20));
  Proc b = launch_sh(d, {"--devices", "cpu", "--nproc_per_node", "1", "--log_dir", "./log/"},
                     "touch " + d + "/second.$RANK", {}, "second");
  Reaper gb(b.pid);
  CHECK(wait_exit(b.pid, 10) == 2);
  const std::string err = b.err();
  INFO(err);
  CHECK_THAT(err, Catch::Contains("launch: error: --log_dir " + d + "/log is in use: another launch (pid " +
                                  std::to_string(a.pid) + ") is writing " + d + "/log/workerlog.0; wait for it to end, "
                                  "or give this launch its own --log_dir"));
  CHECK_THAT(err, !Catch::Contains("worker(s) of"));  // no job began
  CHECK_FALSE(exists(d + "/second.0"));
  // Another folder is fine meanwhile, and so is this one once the first launch has ended.
  Proc c = launch_sh(d, {"--devices", "cpu", "--log_dir", d + "/other"}, "true", {}, "third");
  CHECK(wait_exit(c.pid, 10) == 0);
  kill(a.pid, SIGTERM);
  REQUIRE(wait_exit(a.pid, 15) == 128 + SIGTERM);
  Proc e = launch_sh(d, {"--devices", "cpu"}, "touch " + d + "/fourth.$RANK", {}, "fourth");
  CHECK(wait_exit(e.pid, 10) == 0);
  CHECK(exists(d + "/fourth.0"));
}

TEST_CASE("launch: 100,000 arguments make no 600 KB log line", "[launcher][integration]") {
  // Issue 22, item 15: the job's first log line held the whole command (589 KB).
  TempDir td;
  std::vector<std::string> argv{kLaunch, "--log_dir", td.path + "/log", "--devices", "cpu", "true"};
  for (int i = 1; i <= 100000; ++i) argv.push_back(std::to_string(i));
  Proc p = start(argv, td.path);
  Reaper guard(p.pid);
  REQUIRE(wait_exit(p.pid, 20) == 0);
  size_t longest = 0;
  for (const auto& l : lines_of(p.err())) longest = std::max(longest, l.size());
  CHECK(longest < 2048);
  CHECK_THAT(p.err(), Catch::Contains("more argument(s), ") && Catch::Contains(" bytes, not shown)"));
}

TEST_CASE("launch: bad input -> one line, exit 2, nothing started", "[launcher][integration]") {
  TempDir td;
  const std::string& d = td.path;
  auto check_bad = [&](std::vector<std::string> args, const std::string& needle) {
    std::vector<std::string> argv{kLaunch};
    if (std::find(args.begin(), args.end(), "--log_dir") == args.end()) argv.insert(argv.end(), {"--log_dir", d + "/log"});
    argv.insert(argv.end(), args.begin(), args.end());
    Proc p = start(argv, d);
    Reaper guard(p.pid);
    CHECK(wait_exit(p.pid, 10) == 2);
    auto lines = lines_of(p.err());
    REQUIRE(lines.size() == 1);
    CHECK_THAT(lines[0], Catch::StartsWith("launch: error: ") && Catch::Contains(needle));
    CHECK_FALSE(exists(d + "/started"));
  };
  const std::string touch = "touch " + d + "/started";
  check_bad({"--devices", "0,x", "sh", "-c", touch}, "'x'");
  check_bad({"--gpus", "0,999", "sh", "-c", touch}, "not visible");
  check_bad({"--devices", "cpu", "--nproc_per_node", "-2", "sh", "-c", touch}, "--nproc_per_node");
  check_bad({"--devices", "cpu", "no-such-program-xyz"}, "no-such-program-xyz");
  check_bad({"--devices", "cpu", "--host", "10.255.255.1", "sh", "-c", touch}, "--host");
  check_bad({"--devices", "cpu", "--log_dir", "/proc/no/such", "sh", "-c", touch}, "log directory");
  check_bad({"--devices", "cpu", "--summary", d + "/missing/s.json", "sh", "-c", touch}, "--summary");
  CHECK_FALSE(exists(d + "/log"));
}

// Issue 14, item 4: a --summary that cannot be written replaced the job's exit code with 1.
TEST_CASE("launch: a --summary that cannot be written keeps the job's exit code, with a warning", "[launcher][integration]") {
  TempDir td;
  const std::string& d = td.path;
  for (int code : {0, 3}) {
    const std::string dir = d + "/summary" + std::to_string(code);
    std::filesystem::create_directory(dir);
    // The directory is there at start-up (checked), and gone when the job ends (as root no mode
    // bits stop a write, a missing directory does).
    Proc p = launch_sh(d, {"--devices", "cpu", "--summary", dir + "/s.json"},
                       "rm -rf " + dir + "; exit " + std::to_string(code), {}, "s" + std::to_string(code));
    Reaper g(p.pid);
    CHECK(wait_exit(p.pid, 20) == code);
    CHECK_THAT(p.err(), Catch::Contains("--summary not written") && Catch::Contains("the job's code " + std::to_string(code)));
  }
}

TEST_CASE("launch: small things a new user meets", "[launcher][integration]") {
  TempDir td;
  const std::string& d = td.path;
  // `launch -- -prog`: after --, a program whose name starts with '-'.
  const std::string prog = d + "/-prog";
  { std::ofstream(prog) << "#!/bin/sh\necho dashed $RANK\n"; }
  chmod(prog.c_str(), 0755);
  Proc dash = start({kLaunch, "--log_dir", d + "/log", "--devices", "cpu", "--", prog}, d, {}, "dash");
  Reaper g1(dash.pid);
  CHECK(wait_exit(dash.pid, 10) == 0);
  CHECK(dash.out() == "dashed 0\n");
  // --nproc_per_node abc: says what a value looks like.
  Proc abc = start({kLaunch, "--nproc_per_node", "abc", "true"}, d, {}, "abc");
  Reaper g2(abc.pid);
  CHECK(wait_exit(abc.pid, 10) == 2);
  CHECK_THAT(abc.err(), Catch::Contains("'abc' is not a number of processes") && Catch::Contains("gpu"));
  // 100 processes under `ulimit -n 64`: the error says what to raise, nothing starts.
  Proc nofile = start({"/bin/sh", "-c", "ulimit -n 64 && exec " + kLaunch + " --log_dir " + d +
                                            "/log2 --devices cpu --nproc_per_node 100 touch " + d + "/started"},
                      d, {}, "nofile");
  Reaper g3(nofile.pid);
  CHECK(wait_exit(nofile.pid, 10) == 2);
  CHECK_THAT(nofile.err(), Catch::Contains("ulimit -n 364") && Catch::Contains("the limit is 64"));
  CHECK_FALSE(exists(d + "/started"));
  // --help and --version.
  Proc help = start({kLaunch, "--help"}, d, {}, "help");
  Reaper g4(help.pid);
  CHECK(wait_exit(help.pid, 10) == 0);
  CHECK_THAT(help.out(), Catch::Contains("Usage: launch [OPTIONS] PROGRAM [ARGS...]") &&
                             Catch::Contains("launch kv COMMAND") && Catch::Contains("Examples:"));
  Proc version = start({kLaunch, "--version"}, d, {}, "version");
  Reaper g5(version.pid);
  CHECK(wait_exit(version.pid, 10) == 0);
  CHECK_THAT(version.out(), Catch::StartsWith("launch "));
}

// --- a launch inside another launcher's worker --------------------------------------------------

namespace {

// The inner job's ranks, each as its own launcher set it up: its rank among `n`, its log
// directory, no checkpoint signal, a store that is not `outer_store`.
void check_inner_ranks(const std::string& d, const std::string& log_dir, int n, const std::string& outer_store) {
  for (int r = 0; r < n; ++r) {
    auto e = parse_env_file(d + "/env." + std::to_string(r));
    const std::string R = std::to_string(r);
    INFO("inner rank " << r);
    CHECK(e["RANK"] == R);
    CHECK(e["PADDLE_TRAINER_ID"] == R);
    CHECK(e["LOCAL_RANK"] == R);
    CHECK(e["WORLD_SIZE"] == std::to_string(n));
    CHECK(e["PADDLE_TRAINERS_NUM"] == std::to_string(n));
    CHECK(e["PADDLE_NNODES"] == "1");
    CHECK(e["GROUP_RANK"] == "0");
    CHECK(e["PADDLE_JOB_ID"] == "default");
    CHECK(e["PADDLE_LOG_DIR"] == log_dir);
    CHECK(e["TORCHELASTIC_ERROR_FILE"] == log_dir + "/workererror." + R + ".json");
    CHECK(e["PADDLE_RESTART_COUNT"] == "0");
    CHECK(e.count("LAUNCH_CHECKPOINT_SIGNAL") == 0);
    CHECK(e.count("FLAGS_selected_gpus") == 0);
    CHECK(e["MASTER_ADDR"] == "127.0.0.1");
    CHECK(std::regex_match(e["LAUNCH_STORE_ADDR"], std::regex(R"(127\.0\.0\.1:\d+)")));
    CHECK(e["LAUNCH_STORE_ADDR"] != outer_store);
    CHECK(exists(log_dir + "/workerlog." + R));
  }
}

}  // namespace

TEST_CASE("launch inside launch: the inner ranks get the inner job's environment", "[launcher][integration][nested]") {
  TempDir td;
  const std::string& d = td.path;
  // Outer rank 1 of 2 (with --checkpoint-signal, a job id and a restart budget of its own)
  // runs a 3-rank launch of its own, with no option but the essentials.
  const std::string script = "if [ $RANK = 1 ]; then env > " + d + "/outer.1; exec " + kLaunch + " --log_dir " + d +
                             "/inner --devices cpu --nproc_per_node 3 sh -c 'env > " + d + "/env.$RANK'; fi";
  Proc p = launch_sh(d, {"--log_dir", d + "/outer", "--devices", "cpu", "--nproc_per_node", "2", "--job_id", "outerjob",
                         "--checkpoint-signal", "USR2", "--max_restart", "0"},
                     script);
  Reaper guard(p.pid);
  REQUIRE(wait_exit(p.pid, 30) == 0);
  INFO(p.err() << slurp(d + "/outer/workerlog.1"));
  auto outer = parse_env_file(d + "/outer.1");
  REQUIRE(outer["LAUNCH_CHECKPOINT_SIGNAL"] == "SIGUSR2");
  REQUIRE(outer["PADDLE_JOB_ID"] == "outerjob");
  check_inner_ranks(d, d + "/inner", 3, outer["LAUNCH_STORE_ADDR"]);
  // The inner launcher said why it ignored the outer job's variables; its logs are its own.
  CHECK_THAT(slurp(d + "/outer/workerlog.1"), Catch::Contains("inside another launcher's worker (PADDLE_TRAINER_ID is set)"));
  CHECK_FALSE(exists(d + "/outer/workerlog.2"));
}

TEST_CASE("launch inside launch: a shell that exported a worker's and Slurm's variables fools nothing", "[launcher][integration][nested]") {
  TempDir td;
  const std::string& d = td.path;
  // What `export $(cat /proc/<worker>/environ)` in a Slurm job leaves: a torchrun worker's
  // variables (rank 5 of 8 on 2 nodes), a paddle launcher's overrides, an outer store, Slurm's step.
  const std::map<std::string, std::string> outer = {
      {"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"TORCHELASTIC_RUN_ID", "outer"},
      {"MASTER_ADDR", "10.255.0.1"}, {"MASTER_PORT", "6000"}, {"PADDLE_MASTER", "10.255.0.1:6000"},
      {"PADDLE_NNODES", "2"}, {"PADDLE_JOB_ID", "outer"}, {"PADDLE_LOG_DIR", "/nonexistent/outer"},
      {"PADDLE_NPROC_PER_NODE", "8"}, {"PET_NNODES", "2"}, {"LAUNCH_STORE_ADDR", "127.0.0.1:9"},
      {"LAUNCH_STORE_TOKEN", "0123456789abcdef0123456789abcdef-outer"}, {"LAUNCH_CHECKPOINT_SIGNAL", "SIGUSR1"},
      {"TORCHELASTIC_ERROR_FILE", "/nonexistent/error.json"}, {"SLURM_JOB_ID", "77"}, {"SLURM_STEP_ID", "0"},
      {"SLURM_NNODES", "2"}, {"SLURM_NODEID", "1"}, {"SLURM_NTASKS", "2"}, {"SLURM_PROCID", "1"},
      {"SLURM_LOCALID", "0"}, {"SLURM_JOB_NODELIST", "node[1-2]"}, {"SLURM_STEP_NODELIST", "node[1-2]"}};
  Proc p = launch_sh(d, {"--devices", "cpu", "--nproc_per_node", "2"}, "env > " + d + "/env.$RANK", outer);
  Reaper guard(p.pid);
  REQUIRE(wait_exit(p.pid, 30) == 0);
  INFO(p.err());
  check_inner_ranks(d, d + "/log", 2, "127.0.0.1:9");
  CHECK_THAT(p.err(), Catch::Contains("inside another launcher's worker (LOCAL_RANK is set)"));
  CHECK(parse_env_file(d + "/env.0")["SLURM_JOB_ID"] == "77");  // not the contract: passed on
}

TEST_CASE("launch inside launch: never the outer launcher's log directory", "[launcher][integration][nested]") {
  // An outer rank runs a launch of its own in the outer's folder. Its default log directory (log)
  // is the outer's: it would write the outer's workerlog.0 (holding its own output), as would
  // the inner launch of every other outer rank. The default moves to log/inner.RANK; naming the
  // outer's directory (here by another spelling) is refused.
  {
    TempDir td;
    const std::string& d = td.path;
    Proc p = launch_sh(d, {"--devices", "cpu", "--nproc_per_node", "2"},
                       "exec " + kLaunch + " --devices cpu --nproc_per_node 1 sh -c 'echo inner of $PADDLE_TRAINER_ID'");
    Reaper guard(p.pid);
    REQUIRE(wait_exit(p.pid, 30) == 0);
    for (const std::string r : {"0", "1"}) {
      INFO("outer rank " << r);
      const std::string outer = slurp(d + "/log/workerlog." + r);
      CHECK_THAT(outer, Catch::Contains("log directory " + d + "/log/inner." + r + ": the default"));
      CHECK(slurp(d + "/log/inner." + r + "/workerlog.0") == "inner of 0\n");
    }
  }
  {
    TempDir td;
    const std::string& d = td.path;
    Proc p = launch_sh(d, {"--devices", "cpu", "--nproc_per_node", "1"},
                       "exec " + kLaunch + " --log_dir ./log/ --devices cpu --nproc_per_node 1 true");
    Reaper guard(p.pid);
    CHECK(wait_exit(p.pid, 30) == 2);
    const std::string log = slurp(d + "/log/workerlog.0");
    INFO(log);
    CHECK_THAT(log, Catch::Contains("launch: error: --log_dir " + d + "/") &&
                        Catch::Contains("is the log directory of the launcher this launch runs inside (PADDLE_LOG_DIR)") &&
                        Catch::Contains("--log_dir " + d + "/log/inner.0"));
    CHECK_THAT(log, !Catch::Contains("worker(s) of /usr/bin/true"));  // the inner job never started
  }
}

// --- torchrun's remaining options, with their effect (issue 21, item 6) ---------------------------

TEST_CASE("launch: --tee 3 with --log-line-prefix-template and --role prefixes every console line", "[launcher][integration][torchrun]") {
  TempDir td;
  Proc p = launch_sh(td.path, {"--devices", "cpu", "--nproc_per_node", "2", "-t", "3", "--role", "trainer",
                               "--log-line-prefix-template", "[${role_name}${rank}/${local_rank}]:"},
                     "echo role=$ROLE_NAME signals=$TORCHELASTIC_SIGNALS_TO_HANDLE nccl=$TORCH_NCCL_ASYNC_ERROR_HANDLING");
  Reaper guard(p.pid);
  REQUIRE(wait_exit(p.pid, 20) == 0);
  const std::string out = p.out();
  CHECK_THAT(out, Catch::Contains("[trainer0/0]:role=trainer signals=SIGTERM,SIGINT,SIGHUP,SIGQUIT nccl=1\n"));
  CHECK_THAT(out, Catch::Contains("[trainer1/1]:role=trainer"));
  CHECK_THAT(out, !Catch::Contains("[rank "));
}

TEST_CASE("launch: --signals-to-handle SIGUSR1 makes SIGUSR1 stop the job, forwarded to the workers", "[launcher][integration][torchrun]") {
  TempDir td;
  const std::string& d = td.path;
  // The worker says which signal ended it (a trap, then exit 0 would be no failure: it exits 7).
  Proc p = launch_sh(d, {"--devices", "cpu", "--nproc_per_node", "1", "--signals-to-handle", "SIGTERM,SIGINT,SIGUSR1"},
                     "trap 'echo got USR1 > " + d + "/got; exit 7' USR1; echo up > " + d + "/up; "
                     "while :; do sleep 0.05; done");
  Reaper guard(p.pid);
  REQUIRE(wait_until([&] { return exists(d + "/up"); }, 10));
  kill(p.pid, SIGUSR1);
  CHECK(wait_exit(p.pid, 10) == 128 + SIGUSR1);
  CHECK_THAT(slurp(d + "/got"), Catch::Contains("got USR1"));
  CHECK_THAT(p.err(), Catch::Contains("received SIGUSR1: forwarding it to every worker"));
  CHECK_THAT(p.err(), Catch::Contains("launch handles SIGINT, SIGTERM, SIGHUP and SIGQUIT whether listed or not"));
}

TEST_CASE("launch: a script without .py that is not executable runs under python3, as torchrun does", "[launcher][integration][torchrun]") {
  TempDir td;
  const std::string& d = td.path;
  {
    std::ofstream f(d + "/train");
    f << "import os, sys\nprint('python', os.environ['RANK'], sys.argv[1:])\n";
  }
  Proc p = start({kLaunch, "--log_dir", d + "/log", "--devices", "cpu", "--nproc_per_node", "1", "train", "--lr", "1"}, d);
  Reaper guard(p.pid);
  REQUIRE(wait_exit(p.pid, 30) == 0);
  CHECK_THAT(p.out(), Catch::Contains("python 0 ['--lr', '1']"));
}

TEST_CASE("launch: a read-only working directory: the default ./log falls back to the temporary folder, named", "[launcher][integration][torchrun]") {
  TempDir td;
  const std::string ro = td.path + "/ro";
  REQUIRE(mkdir(ro.c_str(), 0555) == 0);
  const std::string tmp = td.path + "/tmp";
  REQUIRE(mkdir(tmp.c_str(), 0700) == 0);
  // Root writes anywhere a mode allows nothing: a read-only bind mount of its own then, in a
  // mount namespace of its own (unshare), so nothing outside sees it.
  std::vector<std::string> argv{kLaunch, "--devices", "cpu", "--nproc_per_node", "1", "sh", "-c", "echo hi"};
  if (geteuid() == 0) {
    std::string cmd = "mount --bind " + ro + " " + ro + " && mount -o remount,bind,ro " + ro + " && cd " + ro + " && exec";
    for (const auto& a : argv) cmd += " '" + a + "'";
    argv = {"/usr/bin/unshare", "-m", "--propagation", "private", "sh", "-c", cmd};
  }
  Proc p = start(argv, ro, {{"TMPDIR", tmp}}, "../ro-launch");
  Reaper guard(p.pid);
  const auto code = wait_exit(p.pid, 20);
  INFO(p.err());
  if (code == 1 && p.err().find("unshare") != std::string::npos) {
    WARN("not checked: cannot make a private mount namespace here");
    return;
  }
  REQUIRE(code == 0);
  CHECK_THAT(p.err(), Catch::Contains("cannot create log directory " + ro + "/log") &&
                          Catch::Contains("the logs go to " + tmp + "/launch-log-"));
  bool found = false;
  for (const auto& e : std::filesystem::directory_iterator(tmp))
    found = found || slurp(e.path().string() + "/workerlog.0") == "hi\n";
  CHECK(found);
}
