// launch inside real Slurm job steps, on the one-node cluster of scripts/slurm/local_cluster.sh
// (started and stopped by the CTest fixture around this test). Exits 77 -- SKIPPED for CTest --
// when not root or when that cluster is not up, saying why.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <regex>
#include <set>

#include "../proc_helpers.h"

using namespace testutil;

namespace {

const std::string kLaunch = LAUNCH_BIN;
std::string g_srun;
std::map<std::string, std::string> g_env;  // SLURM_CONF

std::string run_capture(const std::string& cmd) {
  std::string out;
  if (FILE* f = popen(cmd.c_str(), "r")) {
    char buf[256];
    while (fgets(buf, sizeof buf, f)) out += buf;
    pclose(f);
  }
  return out;
}

bool all_lines(const std::string& path) { return slurp(path).find('\n') != std::string::npos; }

Proc srun(const std::string& dir, std::vector<std::string> srun_args, std::vector<std::string> launch_args,
          const std::string& script) {
  std::vector<std::string> argv{g_srun, "--kill-on-bad-exit=1"};
  argv.insert(argv.end(), srun_args.begin(), srun_args.end());
  argv.insert(argv.end(), {kLaunch, "--log_dir", dir + "/log"});
  argv.insert(argv.end(), launch_args.begin(), launch_args.end());
  argv.insert(argv.end(), {"sh", "-c", script});
  return start(argv, dir, g_env);
}

}  // namespace

// ---------------------------------------------------------------------------------------------

TEST_CASE("slurm: srun -n1 launch --nproc_per_node 2: one launcher, two workers", "[slurm][integration]") {
  TempDir td;
  const std::string& d = td.path;
  Proc p = srun(d, {"-n1"}, {"--devices", "cpu", "--nproc_per_node", "2"}, "env > " + d + "/env.$RANK");
  Reaper guard(p.pid);
  REQUIRE(wait_exit(p.pid, 60) == 0);
  for (int r = 0; r < 2; ++r) {
    auto e = parse_env_file(d + "/env." + std::to_string(r));
    CHECK(e["RANK"] == std::to_string(r));
    CHECK(e["WORLD_SIZE"] == "2");
    CHECK(e["PADDLE_NNODES"] == "1");
    CHECK(e["PADDLE_JOB_ID"] == "slurm-" + e["SLURM_JOB_ID"] + "." + e["SLURM_STEP_ID"]);
  }
}

TEST_CASE("slurm: srun -n2 launch: one worker per task, ranks from Slurm, met in task 0's store", "[slurm][integration]") {
  TempDir td;
  const std::string& d = td.path;
  // The workers use the store together (a barrier and a key), so the tasks really met.
  const std::string script = "env > " + d + "/env.$RANK; " + kLaunch + " kv set from/$RANK $SLURM_PROCID && " + kLaunch +
                             " kv barrier all --timeout 20 && " + kLaunch + " kv get from/$(( (RANK + 1) % 2 )) > " + d +
                             "/peer.$RANK";
  Proc p = srun(d, {"-n2"}, {}, script);
  Reaper guard(p.pid);
  REQUIRE(wait_exit(p.pid, 60) == 0);
  std::set<std::string> current;
  std::map<std::string, std::string> e[2];
  for (int r = 0; r < 2; ++r) {
    e[r] = parse_env_file(d + "/env." + std::to_string(r));
    CHECK(e[r]["RANK"] == std::to_string(r));
    CHECK(e[r]["SLURM_PROCID"] == std::to_string(r));
    CHECK(e[r]["LOCAL_RANK"] == std::to_string(r));
    CHECK(e[r]["WORLD_SIZE"] == "2");
    CHECK(e[r]["PADDLE_TRAINERS_NUM"] == "2");
    CHECK(e[r]["LOCAL_WORLD_SIZE"] == "2");
    current.insert(e[r]["PADDLE_CURRENT_ENDPOINT"]);
    CHECK(slurp(d + "/peer." + std::to_string(r)) == std::to_string(1 - r) + "\n");
    CHECK(exists(d + "/log/workerlog." + std::to_string(r)));
  }
  CHECK(current.size() == 2);
  CHECK(e[0]["PADDLE_TRAINER_ENDPOINTS"] == e[1]["PADDLE_TRAINER_ENDPOINTS"]);
  CHECK(e[0]["PADDLE_MASTER"] == e[1]["PADDLE_MASTER"]);
  CHECK(e[0]["LAUNCH_STORE_ADDR"] == e[1]["LAUNCH_STORE_ADDR"]);
  CHECK(e[0]["LAUNCH_STORE_TOKEN"] == e[1]["LAUNCH_STORE_TOKEN"]);
  // Task 0 removed the token file it handed to the others.
  CHECK(run_capture("ls /tmp/launch-0/ 2>/dev/null | grep -c 'slurm-" + e[0]["SLURM_JOB_ID"] + "\\.'") == "0\n");
}

TEST_CASE("slurm: --dry-run inside srun shows what came from Slurm", "[slurm][integration]") {
  TempDir td;
  const std::string& d = td.path;
  Proc p = srun(d, {"-n2", "--label"}, {"--dry-run"}, "true");
  Reaper guard(p.pid);
  REQUIRE(wait_exit(p.pid, 60) == 0);
  const std::string out = p.out();
  CHECK_THAT(out, Catch::Contains("0: # slurm: rank = 0 (from SLURM_PROCID=0)"));
  CHECK_THAT(out, Catch::Contains("1: # slurm: rank = 1 (from SLURM_PROCID=1)"));
  CHECK_THAT(out, Catch::Contains("# slurm: nnodes = 1 (from SLURM_STEP_NUM_NODES=1)"));
  CHECK_THAT(out, Catch::Contains("# slurm: world size = 2 (from SLURM_STEP_NUM_TASKS=2)"));
  CHECK_THAT(out, Catch::Contains("1:   RANK=1"));
  CHECK_FALSE(exists(d + "/log"));  // a dry run creates nothing
}

TEST_CASE("slurm: --max_restart inside a job step", "[slurm][integration]") {
  TempDir td;
  const std::string& d = td.path;
  const std::string script = "touch " + d + "/ran.$RANK.$PADDLE_RESTART_COUNT; "
                             "[ $RANK = 1 ] && [ $PADDLE_RESTART_COUNT = 0 ] && exit 3; exit 0";
  Proc p = srun(d, {"-n1"}, {"--devices", "cpu", "--nproc_per_node", "2", "--max_restart", "1"}, script);
  Reaper guard(p.pid);
  REQUIRE(wait_exit(p.pid, 60) == 0);
  CHECK(exists(d + "/ran.1.0"));
  CHECK(exists(d + "/ran.1.1"));
  CHECK(exists(d + "/ran.0.1"));
}

TEST_CASE("slurm: a failing task's exit code comes back through srun", "[slurm][integration]") {
  TempDir td;
  const std::string& d = td.path;
  Proc p = srun(d, {"-n2"}, {}, "[ $RANK = 1 ] && exit 3; exit 0");
  Reaper guard(p.pid);
  CHECK(wait_exit(p.pid, 60) == 3);
}

TEST_CASE("slurm: scancel --signal=USR2 reaches the workers as a checkpoint signal", "[slurm][integration]") {
  TempDir td;
  const std::string& d = td.path;
  // What sbatch --signal=USR2@120 does at the time limit. (With proctrack/linuxproc or cgroup,
  // Slurm signals every process of the step itself too: a worker may get it twice, harmlessly.)
  // The worker is a program with a handler (workers start with the checkpoint signal ignored,
  // which a POSIX shell's trap cannot undo; a program's own handler replaces it).
  { std::ofstream(d + "/worker.py") << "import os, signal, sys, time\n"
                                      "d, r = sys.argv[1], os.environ['RANK']\n"
                                      "got = []\n"
                                      "signal.signal(signal.SIGUSR2, lambda *a: got.append(1))\n"
                                      "open(d + '/job.' + r, 'w').write(os.environ['SLURM_JOB_ID'] + '\\n')\n"
                                      "while not got: time.sleep(0.05)\n"
                                      "open(d + '/saved.' + r, 'w').write(os.environ['LAUNCH_CHECKPOINT_SIGNAL'] + '\\n')\n"; }
  const std::string script = "exec /usr/bin/python3 " + d + "/worker.py " + d;
  Proc p = srun(d, {"-n1"}, {"--devices", "cpu", "--nproc_per_node", "2", "--checkpoint-signal", "USR2"}, script);
  Reaper guard(p.pid);
  REQUIRE(wait_until([&] { return all_lines(d + "/job.0") && all_lines(d + "/job.1"); }, 30));
  std::string job = slurp(d + "/job.0");
  job.pop_back();
  run_capture("SLURM_CONF=" + g_env["SLURM_CONF"] + " timeout 10 scancel --signal=USR2 " + job);
  REQUIRE(wait_exit(p.pid, 30) == 0);  // the job went on and ended normally
  CHECK(slurp(d + "/saved.0") == "SIGUSR2\n");
  CHECK(slurp(d + "/saved.1") == "SIGUSR2\n");
}

#ifdef TRAIN_BIN
TEST_CASE("slurm: a short CPU training, both forms, the same parameters as without Slurm", "[slurm][integration]") {
  TempDir td;
  const std::string& d = td.path;
  const std::vector<std::string> args{TRAIN_BIN, "--depth", "18", "--width", "8", "--image-size", "32", "--batch-size", "4",
                                      "--num-samples", "64", "--max-steps", "6", "--seed", "7"};
  auto checksum = [](const std::string& out) {
    std::smatch m;
    return std::regex_search(out, m, std::regex("params checksum fnv1a64=[0-9a-f]+")) ? m.str() : "none";
  };
  std::vector<std::string> plain{kLaunch, "--devices", "cpu", "--nproc_per_node", "2", "--log_dir", d + "/plain"};
  plain.insert(plain.end(), args.begin(), args.end());
  Proc p0 = start(plain, d, {}, "plain");
  Reaper g0(p0.pid);
  REQUIRE(wait_exit(p0.pid, 120) == 0);
  const std::string want = checksum(p0.out());
  REQUIRE(want != "none");

  for (const auto& form : std::vector<std::vector<std::string>>{{"-n1", "--devices", "cpu", "--nproc_per_node", "2"}, {"-n2"}}) {
    std::vector<std::string> argv{g_srun, "--kill-on-bad-exit=1", form[0], kLaunch, "--log_dir", d + "/log" + form[0]};
    argv.insert(argv.end(), form.begin() + 1, form.end());
    argv.insert(argv.end(), args.begin(), args.end());
    Proc p = start(argv, d, g_env, "srun" + form[0]);
    Reaper g(p.pid);
    const auto rc = wait_exit(p.pid, 120);
    INFO("srun " << form[0] << " output:\n" << p.out());
    REQUIRE(rc == 0);
    CHECK(checksum(p.out()) == want);
  }
}

// --- Slurm's own signals: a time limit, scancel, scancel --signal, a preemption -----------------
// A batch job of `launch [--requeue] train_resnet --save --resume auto` on 2 CPU ranks. Its
// --max-steps is read from a file when the batch script starts, so that a requeued run can be
// told where to end (the first run goes on until Slurm stops it).

namespace {

std::string squeue_field(const std::string& job, const std::string& field) {
  std::string v = run_capture("SLURM_CONF=" + g_env["SLURM_CONF"] + " timeout 10 squeue -h -j " + job + " -O '" +
                              field + ":|' 2>/dev/null");
  return v.substr(0, v.find('|'));
}

// scancels the job when the test ends, however it ends.
struct JobGuard {
  std::string id;
  ~JobGuard() {
    if (!id.empty()) run_capture("SLURM_CONF=" + g_env["SLURM_CONF"] + " timeout 10 scancel " + id + " 2>&1");
  }
};

const std::vector<std::string> kTrainArgs{"--depth", "18", "--width", "8", "--image-size", "32", "--batch-size", "4",
                                          "--num-samples", "64", "--epochs", "1000000", "--seed", "7",
                                          "--log-every", "1"};

std::string shell_words(const std::vector<std::string>& words) {
  std::string s;
  for (const auto& w : words) s += (s.empty() ? "" : " ") + w;
  return s;
}

// Submits the batch job; returns its id. `launch_args`: --requeue, --checkpoint-signal, ...
std::string submit_training(const std::string& d, const std::vector<std::string>& sbatch_args,
                            const std::vector<std::string>& launch_args, const std::string& max_steps,
                            int step_delay_ms = 0) {
  std::ofstream(d + "/steps") << max_steps << "\n";
  std::ofstream(d + "/job.sh") << "#!/bin/sh\n"
                               << "exec env WORKER_TEST_STEP_DELAY_MS=" << step_delay_ms << " " << kLaunch << " " << shell_words(launch_args)
                               << " --devices cpu --nproc_per_node 2 --log_dir " << d << "/log " << TRAIN_BIN << " "
                               << shell_words(kTrainArgs) << " --max-steps $(cat " << d << "/steps) --save " << d
                               << "/ck.safetensors --resume auto\n";
  std::string job = run_capture("cd " + d + " && SLURM_CONF=" + g_env["SLURM_CONF"] + " timeout 10 sbatch --parsable -o " +
                                d + "/batch.%j.out " + shell_words(sbatch_args) + " " + d + "/job.sh 2>&1");
  while (!job.empty() && job.back() == '\n') job.pop_back();
  INFO("sbatch said: " << job);
  REQUIRE(!job.empty());
  REQUIRE(job.find_first_not_of("0123456789") == std::string::npos);
  return job;
}

std::string checksum_of(const std::string& text) {
  std::smatch m;
  return std::regex_search(text, m, std::regex("params checksum fnv1a64=[0-9a-f]+")) ? m.str() : "none";
}

// The step rank 0 stopped at and saved ("Stopped by signal 15 at step N: saved ..."), or -1.
long stopped_at(const std::string& log) {
  std::smatch m;
  return std::regex_search(log, m, std::regex("Stopped by signal 15 at step ([0-9]+): saved")) ? std::stol(m[1]) : -1;
}

// The same training without Slurm, `steps` steps from scratch: the parameters to compare with.
std::string uninterrupted(const std::string& d, long steps) {
  std::vector<std::string> argv{kLaunch, "--devices", "cpu", "--nproc_per_node", "2", "--log_dir", d + "/plain", TRAIN_BIN};
  argv.insert(argv.end(), kTrainArgs.begin(), kTrainArgs.end());
  argv.insert(argv.end(), {"--max-steps", std::to_string(steps)});
  Proc p = start(argv, d, {}, "plain");
  Reaper g(p.pid);
  REQUIRE(wait_exit(p.pid, 120) == 0);
  return checksum_of(p.out());
}

bool logged(const std::string& path, const std::string& what) { return slurp(path).find(what) != std::string::npos; }

}  // namespace

TEST_CASE("slurm signals: at the time limit every rank saves, --requeue requeues, the next run resumes",
          "[slurm][signals]") {
  TempDir td;
  const std::string& d = td.path;
  // Slurm's time limits are whole minutes, checked every 30 s: the job is stopped 60-90 s after
  // it starts. Slowed steps keep what the uninterrupted run must repeat short.
  JobGuard job{submit_training(d, {"--time=1"}, {"--requeue"}, "1000000000", 100)};
  REQUIRE(wait_until([&] { return logged(d + "/log/workerlog.0", "Stopped by signal 15"); }, 120));
  REQUIRE(wait_until([&] { return squeue_field(job.id, "State") == "PENDING"; }, 30));
  const std::string batch = slurp(d + "/batch." + job.id + ".out");
  INFO("batch output:\n" << batch);
  CHECK_THAT(batch, Catch::Contains("--requeue: job " + job.id + " requeued after the time limit"));
  CHECK_THAT(batch, !Catch::Contains("killing every worker now"));
  CHECK_THAT(run_capture("SLURM_CONF=" + g_env["SLURM_CONF"] + " timeout 10 scontrol show job " + job.id),
             Catch::Contains("Restarts=1"));
  const long step = stopped_at(slurp(d + "/log/workerlog.0"));
  REQUIRE(step > 0);
  CHECK_THAT(slurp(d + "/log/workerlog.1"), !Catch::Contains("killed by"));

  // The next run: 3 steps past the checkpoint, as soon as Slurm lets it (a requeued job waits).
  std::ofstream(d + "/steps") << step + 3 << "\n";
  run_capture("SLURM_CONF=" + g_env["SLURM_CONF"] + " timeout 10 scontrol update JobId=" + job.id +
              " StartTime=now TimeLimit=5:00");
  REQUIRE(wait_until([&] { return squeue_field(job.id, "State").empty(); }, 90));
  const std::string second = slurp(d + "/batch." + job.id + ".out");
  INFO("the requeued run:\n" << second);
  CHECK_THAT(second, Catch::Contains("Resuming from " + d + "/ck.safetensors at step " + std::to_string(step)));
  CHECK(checksum_of(second) == uninterrupted(d, step + 3));
}

TEST_CASE("slurm signals: scancel signals every worker twice; both save and stop, nothing is requeued",
          "[slurm][signals]") {
  TempDir td;
  const std::string& d = td.path;
  JobGuard job{submit_training(d, {}, {"--requeue"}, "1000000000")};
  REQUIRE(wait_until([&] { return logged(d + "/log/workerlog.0", "Batch[5]"); }, 60));
  run_capture("SLURM_CONF=" + g_env["SLURM_CONF"] + " timeout 10 scancel " + job.id);
  REQUIRE(wait_until([&] { return squeue_field(job.id, "State").empty(); }, 30));
  const std::string batch = slurp(d + "/batch." + job.id + ".out");
  INFO("batch output:\n" << batch);
  CHECK_THAT(batch, Catch::Contains("not requeued: the job was cancelled (scancel)"));
  CHECK_THAT(batch, Catch::Contains("launch exits with 143"));
  CHECK_THAT(batch, !Catch::Contains("killed by SIGTERM"));  // neither rank died of the second SIGTERM
  const long step = stopped_at(slurp(d + "/log/workerlog.0"));
  REQUIRE(step > 0);
  // The checkpoint of the cancelled run resumes to what an uninterrupted run computes.
  std::vector<std::string> argv{kLaunch, "--devices", "cpu", "--nproc_per_node", "2", "--log_dir", d + "/again", TRAIN_BIN};
  argv.insert(argv.end(), kTrainArgs.begin(), kTrainArgs.end());
  argv.insert(argv.end(), {"--max-steps", std::to_string(step + 3), "--resume", d + "/ck.safetensors"});
  Proc p = start(argv, d, {}, "again");
  Reaper g(p.pid);
  REQUIRE(wait_exit(p.pid, 120) == 0);
  CHECK(checksum_of(p.out()) == uninterrupted(d, step + 3));
}

TEST_CASE("slurm signals: scancel --signal=USR1 saves a checkpoint and the job goes on", "[slurm][signals]") {
  TempDir td;
  const std::string& d = td.path;
  JobGuard job{submit_training(d, {}, {"--checkpoint-signal", "USR1"}, "400")};
  REQUIRE(wait_until([&] { return logged(d + "/log/workerlog.0", "Batch[5]"); }, 60));
  // --full: the batch step's processes too (launch and its workers are that step).
  run_capture("SLURM_CONF=" + g_env["SLURM_CONF"] + " timeout 10 scancel --full --signal=USR1 " + job.id);
  REQUIRE(wait_until([&] { return squeue_field(job.id, "State").empty(); }, 120));
  const std::string batch = slurp(d + "/batch." + job.id + ".out");
  INFO("batch output:\n" << batch);
  CHECK_THAT(batch, Catch::Contains("(checkpoint signal)"));
  CHECK_THAT(batch, Catch::Contains("all 2 worker(s) exited with code 0"));
  CHECK(checksum_of(batch) == uninterrupted(d, 400));
}

TEST_CASE("slurm signals: a preempted job saves and is requeued", "[slurm][signals]") {
  TempDir td;
  const std::string& d = td.path;
  JobGuard job{submit_training(d, {"--exclusive"}, {"--requeue"}, "1000000000")};
  REQUIRE(wait_until([&] { return logged(d + "/log/workerlog.0", "Batch[5]"); }, 60));
  // A job of the urgent partition (PriorityTier 2) that needs the whole node preempts ours.
  JobGuard urgent{run_capture("SLURM_CONF=" + g_env["SLURM_CONF"] +
                              " timeout 10 sbatch --parsable -p urgent --exclusive -o /dev/null --wrap true")};
  while (!urgent.id.empty() && urgent.id.back() == '\n') urgent.id.pop_back();
  REQUIRE(wait_until([&] { return logged(d + "/batch." + job.id + ".out", "--requeue: job"); }, 60));
  const std::string batch = slurp(d + "/batch." + job.id + ".out");
  INFO("batch output:\n" << batch);
  CHECK_THAT(batch, Catch::Contains("--requeue: job " + job.id + " requeued after preemption (at "));
  CHECK(stopped_at(slurp(d + "/log/workerlog.0")) > 0);
  REQUIRE(wait_until([&] { return squeue_field(job.id, "State") == "PENDING"; }, 30));
}
#endif

// ---------------------------------------------------------------------------------------------

int main(int argc, char* argv[]) {
  if (getuid() != 0) {
    std::printf("SKIPPED: the local Slurm cluster runs as root; run as root (CI does)\n");
    return 77;
  }
  const char* dir = std::getenv("SLURM_TEST_DIR");
  const std::string conf = std::string(dir ? dir : "/tmp/launch-slurm") + "/slurm.conf";
  g_srun = run_capture("command -v srun");
  while (!g_srun.empty() && g_srun.back() == '\n') g_srun.pop_back();
  const std::string state = run_capture("SLURM_CONF=" + conf + " timeout 10 sinfo -h -o %T 2>/dev/null");
  if (g_srun.empty() || state.find("idle") == std::string::npos) {
    std::printf("SKIPPED: no local Slurm cluster at %s (scripts/slurm/local_cluster.sh start)\n", conf.c_str());
    return 77;
  }
  g_env["SLURM_CONF"] = conf;
  return Catch::Session().run(argc, argv);
}
