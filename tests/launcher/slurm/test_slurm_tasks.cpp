// The one-task-per-worker form without a Slurm cluster: two launchers started with the
// environment srun gives two tasks of one step (recorded from `srun -n2 env`), so the meeting in
// task 0's store runs everywhere, root or not.
#include <catch2/catch.hpp>

#include <set>

#include "../proc_helpers.h"

using namespace testutil;

namespace {

const std::string kLaunch = LAUNCH_BIN;

// A job id of our own per run: the derived store port and the token file name differ from any
// real step's and from a concurrent run's.
std::map<std::string, std::string> task_env(int procid, const std::string& job) {
  return {{"SLURM_JOB_ID", job},          {"SLURM_STEP_ID", "0"},           {"SLURM_NNODES", "1"},
          {"SLURM_STEP_NUM_NODES", "1"},  {"SLURM_NODEID", "0"},            {"SLURM_JOB_NODELIST", "vm"},
          {"SLURM_STEP_NODELIST", "vm"},  {"SLURM_NTASKS", "2"},            {"SLURM_STEP_NUM_TASKS", "2"},
          {"SLURM_STEP_TASKS_PER_NODE", "2"}, {"SLURM_TASKS_PER_NODE", "2"},
          {"SLURM_PROCID", std::to_string(procid)}, {"SLURM_LOCALID", std::to_string(procid)},
          {"SLURM_STEP_LAUNCHER_PORT", std::to_string(getpid())}, {"CUDA_VISIBLE_DEVICES", ""}};
}

Proc task(const std::string& dir, int procid, const std::string& job, const std::string& script,
          std::vector<std::string> options = {}) {
  std::vector<std::string> argv = {kLaunch, "--log_dir", dir + "/log"};
  argv.insert(argv.end(), options.begin(), options.end());
  for (const char* a : {"sh", "-c"}) argv.push_back(a);
  argv.push_back(script);
  return start(argv, dir, task_env(procid, job), "task" + std::to_string(procid));
}

std::string token_file(const std::string& job) {
  return "/tmp/launch-" + std::to_string(getuid()) + "/slurm-" + job + ".0-" + std::to_string(getpid()) + ".token";
}

}  // namespace

TEST_CASE("slurm tasks: two launchers of one step meet in task 0's store", "[slurm][tasks]") {
  TempDir td;
  const std::string& d = td.path;
  const std::string job = "t" + std::to_string(getpid());
  const std::string script = "env > " + d + "/env.$RANK; " + kLaunch + " kv set from/$RANK x$RANK && " + kLaunch +
                             " kv barrier b --timeout 20 && " + kLaunch + " kv get from/$(( (RANK + 1) % 2 )) > " +
                             d + "/peer.$RANK";
  // Task 1 first: it must wait for task 0's token file, not fail.
  Proc t1 = task(d, 1, job, script);
  Reaper g1(t1.pid);
  Proc t0 = task(d, 0, job, script);
  Reaper g0(t0.pid);
  REQUIRE(wait_exit(t1.pid, 30) == 0);
  REQUIRE(wait_exit(t0.pid, 30) == 0);
  std::set<std::string> current;
  std::map<std::string, std::string> e[2];
  for (int r = 0; r < 2; ++r) {
    e[r] = parse_env_file(d + "/env." + std::to_string(r));
    CHECK(e[r]["RANK"] == std::to_string(r));
    CHECK(e[r]["LOCAL_RANK"] == std::to_string(r));
    CHECK(e[r]["WORLD_SIZE"] == "2");
    CHECK(e[r]["PADDLE_JOB_ID"] == "slurm-" + job + ".0");
    current.insert(e[r]["PADDLE_CURRENT_ENDPOINT"]);
    CHECK(slurp(d + "/peer." + std::to_string(r)) == "x" + std::to_string(1 - r) + "\n");
  }
  CHECK(current.size() == 2);
  CHECK(e[0]["PADDLE_TRAINER_ENDPOINTS"] == e[1]["PADDLE_TRAINER_ENDPOINTS"]);
  CHECK(e[0]["PADDLE_MASTER"] == e[1]["PADDLE_MASTER"]);
  CHECK(e[0]["LAUNCH_STORE_ADDR"] == e[1]["LAUNCH_STORE_ADDR"]);
  CHECK(exists(d + "/log/workerlog.1"));
  // Task 0 removed the token file it handed out.
  CHECK_FALSE(exists("/tmp/launch-" + std::to_string(getuid()) + "/slurm-" + job + ".0-" + std::to_string(getpid()) +
                     ".token"));
}

TEST_CASE("slurm tasks: a task waiting for task 0 ends at once on SIGTERM", "[slurm][tasks]") {
  TempDir td;
  const std::string& d = td.path;
  Proc t1 = task(d, 1, "w" + std::to_string(getpid()), "true");
  Reaper g1(t1.pid);
  // It waits for task 0's token file, which never comes (bounded at 120 s otherwise).
  REQUIRE(wait_until([&] { return t1.err().find("waiting for task 0") != std::string::npos; }, 10));
  kill(t1.pid, SIGTERM);
  CHECK(wait_exit(t1.pid, 3) == 128 + SIGTERM);
  CHECK_THAT(t1.err(), Catch::Contains("stopped by SIGTERM while waiting for Slurm task 0"));
  CHECK_FALSE(exists(d + "/log/workerlog.1"));
}

// Issue 14, item 8: the meeting waited a fixed 120 s whatever --elastic_timeout said.
TEST_CASE("slurm tasks: a task without task 0 gives up after --elastic_timeout", "[slurm][tasks]") {
  TempDir td;
  const double t0 = now_s();
  Proc t1 = task(td.path, 1, "e" + std::to_string(getpid()), "true", {"--elastic_timeout", "2"});
  Reaper g1(t1.pid);
  CHECK(wait_exit(t1.pid, 20) == 1);
  const double took = now_s() - t0;
  CHECK(took >= 1.9);
  CHECK(took < 15);
  CHECK_THAT(t1.err(), Catch::Contains("waited 2 s for task 0") && Catch::Contains("--elastic_timeout"));
}

// Issue 14, item 9: a task 0 killed by SIGKILL left its token file in /tmp/launch-<uid>/, and a
// later task read the dead store's address from it.
TEST_CASE("slurm tasks: the token file of a SIGKILLed task 0 is removed, and a stale one is never used", "[slurm][tasks]") {
  TempDir td;
  const std::string& d = td.path;
  const std::string job = "k" + std::to_string(getpid());
  Proc t0 = task(d, 0, job, "sleep 60");
  Reaper g0(t0.pid);
  Proc t1 = task(d, 1, job, "sleep 2");
  Reaper g1(t1.pid);
  REQUIRE(wait_until([&] { return t1.err().find("met the other tasks") != std::string::npos; }, 20));
  REQUIRE(exists(token_file(job)));
  kill(t0.pid, SIGKILL);
  CHECK(wait_exit(t0.pid, 5) == 128 + SIGKILL);
  CHECK(exists(token_file(job)));  // nobody could remove it at the moment of the kill
  // Task 1's worker ends by itself; its launcher finds the file stale and removes it.
  CHECK(wait_exit(t1.pid, 30) == 0);
  CHECK_FALSE(exists(token_file(job)));

  // A stale file (its writer gone, so nobody holds its lock) pointing at a dead store: a new
  // task 1 neither connects there nor keeps the file; it waits for a live task 0 (bounded).
  const std::string stale = token_file(job);
  { std::ofstream(stale) << "127.0.0.1:9\n" << std::string(64, 'a') << "\n"; }
  chmod(stale.c_str(), 0600);
  Proc again = task(d, 1, job, "true", {"--elastic_timeout", "3"});
  Reaper g2(again.pid);
  CHECK(wait_exit(again.pid, 20) == 1);
  CHECK_THAT(again.err(), Catch::Contains("left by a Slurm task 0 that is gone"));
  CHECK_THAT(again.err(), Catch::Contains("waited 3 s for task 0"));
  CHECK_THAT(again.err(), !Catch::Contains("127.0.0.1:9"));
  CHECK_FALSE(exists(stale));
}
