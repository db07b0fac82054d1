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

Proc task(const std::string& dir, int procid, const std::string& job, const std::string& script) {
  return start({kLaunch, "--log_dir", dir + "/log", "sh", "-c", script}, dir, task_env(procid, job),
               "task" + std::to_string(procid));
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
  CHECK_THAT(t1.err(), Catch::Contains("stopped by SIGTERM before any worker started"));
  CHECK_FALSE(exists(d + "/log/workerlog.1"));
}
