// Issue 14 on the real binaries: the failure report names the rank at fault (item 7), and a
// console nobody reads never delays failure handling or signals (item 3, ENOSPC of item 9).
#include <catch2/catch.hpp>

#include <dirent.h>

#include <nlohmann/json.hpp>

#include "proc_helpers.h"

using namespace testutil;

namespace {

const std::string kLaunch = LAUNCH_BIN;
const std::string kTrain = TRAIN_BIN;

// The launcher's worker of this rank (host PID: found through the launcher's children and their
// environment, whatever PID namespace the worker sees itself in).
pid_t worker_pid(pid_t launcher, int rank) {
  DIR* d = opendir(("/proc/" + std::to_string(launcher) + "/task").c_str());
  if (!d) return -1;
  pid_t found = -1;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::stringstream kids(slurp("/proc/" + std::to_string(launcher) + "/task/" + e->d_name + "/children"));
    pid_t k;
    while (kids >> k) {
      const std::string env = slurp("/proc/" + std::to_string(k) + "/environ");
      if (env.find(std::string(1, '\0') + "RANK=" + std::to_string(rank) + '\0') != std::string::npos ||
          env.rfind("RANK=" + std::to_string(rank) + '\0', 0) == 0)
        found = k;
    }
  }
  closedir(d);
  return found;
}

// The state letter of /proc/PID/stat ('T' once a SIGSTOP has taken effect); 0 when gone.
char proc_state(pid_t pid) {
  const std::string stat = slurp("/proc/" + std::to_string(pid) + "/stat");
  const size_t paren = stat.rfind(')');
  return paren != std::string::npos && paren + 2 < stat.size() ? stat[paren + 2] : 0;
}

// SIGSTOP takes effect asynchronously: wait until the kernel shows it stopped.
void stop_and_wait(pid_t pid) {
  REQUIRE(kill(pid, SIGSTOP) == 0);
  REQUIRE(wait_until([&] { return proc_state(pid) == 'T'; }, 10));
}

size_t count_lines(const std::string& path) {
  const std::string s = slurp(path);
  return static_cast<size_t>(std::count(s.begin(), s.end(), '\n'));
}

}  // namespace

// --- item 7: the root cause is the rank at fault ----------------------------------------------

TEST_CASE("root cause: a worker that lost a stopped peer puts that peer first, everywhere", "[launcher][root_cause]") {
  TempDir td;
  const std::string& d = td.path;
  // Rank 0 gives up on rank 1 as a communicator does (the LAUNCH_PEER_LOST line, exit 86);
  // rank 2 waits in the store and must learn the same root cause from it.
  const std::string script =
      "case $RANK in "
      "0) while [ ! -e " + d + "/go ]; do sleep 0.01; done; "
      "   echo 'LAUNCH_PEER_LOST rank=1: no progress for 2000 ms waiting for rank 1 (emulated)' >&2; exit 86;; "
      "1) exec sleep 60;; "
      "2) trap '' TERM; " + kLaunch + " kv get never --timeout 30;; esac";  // hears the store, not our SIGTERM
  Proc p = start({kLaunch, "--log_dir", d + "/log", "--devices", "cpu", "--nproc_per_node", "3", "--grace", "5",
                  "--summary", d + "/summary.json", "sh", "-c", script},
                 d);
  Reaper guard(p.pid);
  pid_t rank1 = -1;
  REQUIRE(wait_until([&] { return (rank1 = worker_pid(p.pid, 1)) > 0; }, 20));
  REQUIRE(wait_until([&] { return slurp("/proc/" + std::to_string(rank1) + "/cmdline").rfind("sleep", 0) == 0; }, 20));
  stop_and_wait(rank1);
  { std::ofstream(d + "/go") << "1"; }
  const double t0 = now_s();
  REQUIRE(wait_exit(p.pid, 20) == 86);
  CHECK(now_s() - t0 < 4.0);  // the stopped rank got SIGTERM and SIGCONT: no waiting for the grace
  const std::string err = p.err();
  INFO(err);
  CHECK_THAT(err, Catch::Contains("root cause: rank 1 stopped responding (its process is stopped: SIGSTOP or SIGTSTP); "
                                  "rank 0 lost it: no progress for 2000 ms waiting for rank 1"));
  CHECK_THAT(err, !Catch::Contains("root cause: rank 0"));
  auto j = nlohmann::json::parse(slurp(d + "/summary.json"));
  CHECK(j["root_cause"]["rank"] == 1);
  CHECK(j["exit_code"] == 86);
  // The store recorded it, and the survivor blocked there heard it from the store.
  CHECK_THAT(err, Catch::Contains("store: job failed (rank 1: stopped responding"));
  CHECK_THAT(slurp(d + "/log/workerlog.2"), Catch::Contains("rank 1: stopped responding"));
}

TEST_CASE("root cause: SIGSTOP of one train_resnet rank names that rank (--comm-timeout)", "[launcher][root_cause][train]") {
  // With 4 ranks in a ring, several healthy ranks give up too, each naming the neighbour it
  // waited for (some of them healthy): the verdict must still be the stopped rank.
  const auto [nproc, stopped] = GENERATE(std::pair<int, int>{2, 1}, std::pair<int, int>{4, 2});
  INFO(nproc << " ranks, rank " << stopped << " stopped");
  TempDir td;
  const std::string& d = td.path;
  Proc p = start({kLaunch, "--log_dir", d + "/log", "--devices", "cpu", "--nproc_per_node", std::to_string(nproc),
                  "--grace", "5", "--summary", d + "/summary.json", kTrain, "--device", "cpu", "--depth", "18",
                  "--width", "8", "--image-size", "32", "--num-classes", "10", "--data", "learnable", "--batch-size",
                  "8", "--num-samples", "100000", "--epochs", "1", "--log-every", "1", "--comm-timeout", "4"},
                 d);
  Reaper guard(p.pid);
  REQUIRE(wait_until([&] { return slurp(d + "/log/workerlog.0").find("Epoch[0], Batch[2]") != std::string::npos; }, 60));
  const pid_t victim = worker_pid(p.pid, stopped);
  REQUIRE(victim > 0);
  stop_and_wait(victim);
  const double t0 = now_s();
  REQUIRE(wait_exit(p.pid, 40) == 86);
  const double took = now_s() - t0;
  const std::string err = p.err();
  INFO(err << "\ntook " << took << " s");
  CHECK(took < 20.0);  // the 4 s silence limit, not the 300 s default
  const std::string r = "rank " + std::to_string(stopped);
  CHECK_THAT(err, Catch::Contains("root cause: " + r + " stopped responding (its process is stopped"));
  CHECK_THAT(err, Catch::Contains("lost it") && Catch::Contains("no progress for 4000 ms waiting for " + r));
  for (int k = 0; k < nproc; ++k)
    if (k != stopped) CHECK_THAT(err, !Catch::Contains("root cause: rank " + std::to_string(k)));
  CHECK(nlohmann::json::parse(slurp(d + "/summary.json"))["root_cause"]["rank"] == stopped);
  bool named = false;  // a worker's own LAUNCH_PEER_LOST line named it
  for (int k = 0; k < nproc; ++k)
    named = named || slurp(d + "/log/workerlog." + std::to_string(k)).find("LAUNCH_PEER_LOST rank=" + std::to_string(stopped) + ": ") != std::string::npos;
  CHECK(named);
}

namespace {

struct NodeKilled {
  std::optional<int> code;  // the other node's launcher's
  double took = 0;          // from the worker's report to that exit
  std::string err;          // its stderr
};

// Two launchers on 127.0.0.1 as nodes 0 and 1, one worker each. Node `victim`'s launcher is
// SIGKILLed; then the other node's worker says it lost its ring neighbour on the victim -- as
// train_resnet's ring does 0.1 s after a node died -- long before a heartbeat could tell. The
// other node must then be out within 1.5 s, with code 1 (a launcher that stopped responding has
// no exit code of its own).
NodeKilled kill_node(const std::string& d, int victim) {
  const int other = 1 - victim;
  const std::string master = free_loopback_address();
  const std::map<std::string, std::string> token = {{"LAUNCH_STORE_TOKEN", "0123456789abcdef0123456789abcdef-test"}};
  const std::string script =
      "touch " + d + "/up.$RANK; if [ $RANK = " + std::to_string(other) + " ]; then while [ ! -e " + d +
      "/go ]; do sleep 0.01; done; echo 'LAUNCH_PEER_LOST rank=" + std::to_string(victim) + ": rank " +
      std::to_string(victim) + " closed the connection (emulated)' >&2; exit 86; fi; exec sleep 60";
  std::vector<Proc> nodes;
  for (int rank : {0, 1})
    nodes.push_back(start({kLaunch, "--nnodes", "2", "--master", master, "--rank", std::to_string(rank), "--host",
                           "127.0.0.1", "--devices", "cpu", "--nproc_per_node", "1", "--log_dir", d + "/log", "sh", "-c",
                           script},
                          d, token, "node" + std::to_string(rank)));
  Reaper g0(nodes[0].pid), g1(nodes[1].pid);
  REQUIRE(wait_until([&] { return exists(d + "/up.0") && exists(d + "/up.1"); }, 30));
  kill(nodes[size_t(victim)].pid, SIGKILL);
  REQUIRE(wait_exit(nodes[size_t(victim)].pid, 5) == 128 + SIGKILL);
  const double t_report = now_s();
  { std::ofstream(d + "/go") << "1"; }
  NodeKilled r;
  r.code = wait_exit(nodes[size_t(other)].pid, 20);
  r.took = now_s() - t_report;
  r.err = nodes[size_t(other)].err();
  INFO(r.err);
  CHECK(r.took < 1.5);
  WARN("worker's report -> node " << other << "'s exit: " << int(r.took * 1000) << " ms");
  CHECK(r.code == 1);
  return r;
}

}  // namespace

TEST_CASE("root cause: one node's launcher killed; the other node names that node within 1 s of its worker's report",
          "[launcher][root_cause][multinode]") {
  // Issue 22, item 4: the verdict came 8.5-8.7 s after the kill although the ring noticed in 0.1 s.
  TempDir td;
  const NodeKilled k = kill_node(td.path, 1);
  INFO(k.err);
  // The verdict asks node 0's store whether node 1's connection closed (with its launcher); then
  // node 0 stops its workers (SIGTERM) and exits.
  CHECK_THAT(k.err, Catch::Contains("after losing rank 1, which runs on another node"));
  CHECK_THAT(k.err, Catch::Contains("root cause, on another node: node 1 (127.0.0.1): launcher stopped responding "
                                    "(its connection to the store closed"));
  CHECK_THAT(k.err, !Catch::Contains("root cause: rank 0"));
  CHECK_THAT(k.err, !Catch::Contains("closing the store while node(s)"));  // the dead node is not waited for
}

TEST_CASE("root cause: node 0's launcher killed, both nodes on one address: node 1 names node 0, not itself",
          "[launcher][root_cause][multinode]") {
  // Issue 22, item 4: node 1 named itself ("node 1 (127.0.0.1): launcher stopped responding: its
  // store ... is unreachable"), the store's address being its own too.
  TempDir td;
  const NodeKilled k = kill_node(td.path, 0);
  INFO(k.err);
  CHECK_THAT(k.err, Catch::Contains("root cause, on another node: node 0 (127.0.0.1): launcher stopped responding: "
                                    "its store at ") &&
                        Catch::Contains("no answer to a PING within 0.5 s"));
  CHECK_THAT(k.err, !Catch::Contains("node 1 (127.0.0.1): launcher stopped"));
}

// --- item 3: a console nobody reads -----------------------------------------------------------

namespace {

// rank 0 writes `lines` lines (more than the console buffer and the pipe hold), then signals
// done and waits; rank 1 waits for that and exits 5.
std::string flood_script(const std::string& d, int lines, bool rank1_fails) {
  return "if [ $RANK = 1 ]; then " +
         std::string(rank1_fails ? "while [ ! -e " + d + "/done ]; do sleep 0.01; done; exit 5; " : "exec sleep 60; ") +
         "fi; seq 1 " + std::to_string(lines) + "; touch " + d + "/done; exec sleep 60";
}

}  // namespace

TEST_CASE("console: a stalled stdout never delays failure handling; the logs are complete", "[launcher][console]") {
  // 2>&1 too: then the launcher's own messages (the failure path's first log line, the store's
  // thread) meet the same stalled pipe and must not wait for it either.
  const bool merged = GENERATE(false, true);
  INFO((merged ? "stdout and stderr: one pipe nobody reads" : "stdout: a pipe nobody reads"));
  TempDir td;
  const std::string& d = td.path;
  int fds[2];
  REQUIRE(pipe(fds) == 0);  // nobody ever reads fds[0]
  const int lines = 1000000;  // 6.9 MB: more than the pipe (64 KiB) and the console's buffer (4 MiB)
  Proc p = start({kLaunch, "--log_dir", d + "/log", "--devices", "cpu", "--nproc_per_node", "2", "--grace", "2",
                  "--summary", d + "/summary.json", "sh", "-c", flood_script(d, lines, true)},
                 d, {}, "launch", fds[1], merged ? fds[1] : -1);
  close(fds[1]);
  Reaper guard(p.pid);
  REQUIRE(wait_until([&] { return exists(d + "/done"); }, 60));
  const double t0 = now_s();
  auto code = wait_exit(p.pid, 20);
  const double took = now_s() - t0;
  close(fds[0]);
  const std::string err = p.err();
  INFO(err << "\nexit after " << took << " s");
  REQUIRE(code == 5);
  CHECK(took < 5.0);
  auto j = nlohmann::json::parse(slurp(d + "/summary.json"));
  CHECK(j["root_cause"]["description"] == "rank 1 exited with code 5");
  if (!merged) {
    CHECK_THAT(err, Catch::Contains("root cause: rank 1 exited with code 5"));
    CHECK_THAT(err, Catch::Contains("did not reach the console"));
  }
  CHECK(count_lines(d + "/log/workerlog.0") == size_t(lines));
}

TEST_CASE("console: SIGTERM is acted on at once with a stalled stdout", "[launcher][console]") {
  const bool merged = GENERATE(false, true);
  INFO((merged ? "stdout and stderr: one pipe nobody reads" : "stdout: a pipe nobody reads"));
  TempDir td;
  const std::string& d = td.path;
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  Proc p = start({kLaunch, "--log_dir", d + "/log", "--devices", "cpu", "--nproc_per_node", "2", "--grace", "5",
                  "--summary", d + "/summary.json", "sh", "-c", flood_script(d, 1000000, false)},
                 d, {}, "launch", fds[1], merged ? fds[1] : -1);
  close(fds[1]);
  Reaper guard(p.pid);
  REQUIRE(wait_until([&] { return exists(d + "/done"); }, 60));
  const double t0 = now_s();
  kill(p.pid, SIGTERM);
  auto code = wait_exit(p.pid, 20);
  const double took = now_s() - t0;
  close(fds[0]);
  INFO(p.err() << "\nexit after " << took << " s");
  REQUIRE(code == 128 + SIGTERM);
  CHECK(took < 3.0);
  CHECK(nlohmann::json::parse(slurp(d + "/summary.json"))["launcher_signal"] == "SIGTERM");
  if (!merged) CHECK_THAT(p.err(), Catch::Contains("job stopped by SIGTERM"));
}

TEST_CASE("console: ENOSPC on stdout is said once; the logs are complete", "[launcher][console]") {
  TempDir td;
  const std::string& d = td.path;
  const int full = open("/dev/full", O_WRONLY);
  REQUIRE(full >= 0);
  Proc p = start({kLaunch, "--log_dir", d + "/log", "--devices", "cpu", "--nproc_per_node", "1", "--stream", "all",
                  "sh", "-c", "i=0; while [ $i -lt 300 ]; do echo line $i; i=$((i+1)); done"},
                 d, {}, "launch", full);
  close(full);
  Reaper guard(p.pid);
  REQUIRE(wait_exit(p.pid, 20) == 0);
  const std::string err = p.err();
  INFO(err);
  size_t said = 0;
  for (size_t at = err.find("cannot write stdout: No space left on device"); at != std::string::npos;
       at = err.find("cannot write stdout: No space left on device", at + 1))
    ++said;
  CHECK(said == 1);
  CHECK_THAT(err, Catch::Contains("did not reach the console"));
  CHECK(count_lines(d + "/log/workerlog.0") == 300);
}

TEST_CASE("logs: ENOSPC on a worker's log is said once and counted; the job and the console go on", "[launcher][console]") {
  TempDir td;
  const std::string& d = td.path;
  REQUIRE(mkdir((d + "/log").c_str(), 0755) == 0);
  REQUIRE(symlink("/dev/full", (d + "/log/workerlog.0").c_str()) == 0);  // every write: ENOSPC
  Proc p = start({kLaunch, "--log_dir", d + "/log", "--devices", "cpu", "--nproc_per_node", "1", "sh", "-c", "seq 1 5000"}, d);
  Reaper guard(p.pid);
  REQUIRE(wait_exit(p.pid, 20) == 0);
  const std::string err = p.err();
  INFO(err);
  size_t said = 0;
  for (size_t at = err.find("cannot write " + d + "/log/workerlog.0"); at != std::string::npos;
       at = err.find("cannot write " + d + "/log/workerlog.0", at + 1))
    ++said;
  CHECK(said == 1);
  CHECK_THAT(err, Catch::Contains("misses 23893 bytes of output (No space left on device)"));  // seq 1 5000
  CHECK(count_lines(p.out_path) == 5000);
}
