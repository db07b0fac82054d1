// Multi-node jobs with the real build/bin/launch: two launchers on this machine play two nodes
// (--host 127.0.0.1), meeting in the store node 0 serves on --master.
#include <catch2/catch.hpp>

#include <netinet/in.h>
#include <sys/socket.h>

#include <set>

#include "proc_helpers.h"

using namespace testutil;

namespace {

const std::string kLaunch = LAUNCH_BIN;
const std::map<std::string, std::string> kToken = {{"LAUNCH_STORE_TOKEN", "0123456789abcdef0123456789abcdef-test"}};

Proc node(const std::string& dir, int rank, int nnodes, const std::string& master, const std::string& script,
          std::vector<std::string> extra = {}) {
  std::vector<std::string> argv{kLaunch, "--nnodes", std::to_string(nnodes), "--master", master,
                                "--rank", std::to_string(rank), "--host", "127.0.0.1", "--devices", "cpu",
                                "--nproc_per_node", "2", "--log_dir", dir + "/log"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  argv.insert(argv.end(), {"sh", "-c", script});
  return start(argv, dir, kToken, "node" + std::to_string(rank));
}

// Runs a launch that must refuse its input (exit 2 within 10 s) and returns what it said.
std::string refusal(const std::vector<std::string>& argv, const std::string& dir,
                    const std::map<std::string, std::string>& env) {
  Proc p = start(argv, dir, env, "refused");
  Reaper g(p.pid);
  REQUIRE(wait_exit(p.pid, 10) == 2);
  return p.err();
}

}  // namespace

// ---------------------------------------------------------------------------------------------

TEST_CASE("multinode: two nodes meet; global ranks, one endpoint list, a barrier across nodes", "[launcher][multinode]") {
  TempDir td;
  const std::string& d = td.path;
  const std::string master = free_loopback_address();
  const std::string script = "env > " + d + "/env.$RANK; " + kLaunch + " kv barrier all --timeout 20";
  Proc n0 = node(d, 0, 2, master, script), n1 = node(d, 1, 2, master, script);
  Reaper g0(n0.pid), g1(n1.pid);
  REQUIRE(wait_exit(n1.pid, 30) == 0);
  REQUIRE(wait_exit(n0.pid, 30) == 0);
  std::set<std::string> current;
  std::string endpoints;
  for (int r = 0; r < 4; ++r) {
    auto e = parse_env_file(d + "/env." + std::to_string(r));
    CHECK(e["RANK"] == std::to_string(r));
    CHECK(e["LOCAL_RANK"] == std::to_string(r % 2));
    CHECK(e["GROUP_RANK"] == std::to_string(r / 2));
    CHECK(e["WORLD_SIZE"] == "4");
    CHECK(e["PADDLE_NNODES"] == "2");
    CHECK(e["LAUNCH_STORE_ADDR"] == master);
    if (r > 0) CHECK(e["PADDLE_TRAINER_ENDPOINTS"] == endpoints);
    endpoints = e["PADDLE_TRAINER_ENDPOINTS"];
    current.insert(e["PADDLE_CURRENT_ENDPOINT"]);
    CHECK(exists(d + "/log/workerlog." + std::to_string(r)));  // named by global rank
  }
  CHECK(current.size() == 4);
}

TEST_CASE("multinode: a worker failing on node 1 stops node 0 within 2 s, naming the root cause", "[launcher][multinode]") {
  TempDir td;
  const std::string& d = td.path;
  const std::string master = free_loopback_address();
  // Every worker says it is up; rank 3 fails once all four are.
  const std::string script =
      "echo $$ > " + d + "/pid.$RANK; "
      "if [ $RANK = 3 ]; then while [ ! -s " + d + "/pid.0 ] || [ ! -s " + d + "/pid.1 ] || [ ! -s " + d +
      "/pid.2 ]; do sleep 0.01; done; date +%s.%N > " + d + "/t_fail; exit 3; fi; exec sleep 60";
  Proc n0 = node(d, 0, 2, master, script), n1 = node(d, 1, 2, master, script);
  Reaper g0(n0.pid), g1(n1.pid);
  REQUIRE(wait_exit(n1.pid, 30) == 3);
  auto code0 = wait_exit(n0.pid, 10);
  const double t_exit0 = now_s();
  REQUIRE(code0 == 3);
  CHECK(t_exit0 - std::stod(slurp(d + "/t_fail")) < 2.0);
  CHECK(process_gone(read_pid(d + "/pid.0")));
  CHECK_THAT(n0.err(), Catch::Contains("root cause, on another node: node 1 (127.0.0.1): rank 3 exited with code 3"));
  CHECK_THAT(n1.err(), Catch::Contains("root cause: rank 3 exited with code 3"));
}

TEST_CASE("multinode: --max_restart: both nodes stop, meet again as generation 1 and finish", "[launcher][multinode]") {
  TempDir td;
  const std::string& d = td.path;
  const std::string master = free_loopback_address();
  // Generation 0: rank 3 (node 1) fails once every worker is up. Generation 1: a barrier of all
  // four ranks through node 0's store, which must still answer after the failure.
  const std::string script =
      "touch " + d + "/ran.$RANK.$PADDLE_RESTART_COUNT; echo $$ > " + d + "/pid.$RANK.$PADDLE_RESTART_COUNT; "
      "if [ $PADDLE_RESTART_COUNT = 0 ]; then "
      "  if [ $RANK = 3 ]; then while [ ! -s " + d + "/pid.0.0 ] || [ ! -s " + d + "/pid.1.0 ] || [ ! -s " + d +
      "/pid.2.0 ]; do sleep 0.01; done; exit 3; fi; exec sleep 60; "
      "fi; " + kLaunch + " kv barrier gen1 --timeout 20";
  Proc n0 = node(d, 0, 2, master, script, {"--max_restart", "1"});
  Proc n1 = node(d, 1, 2, master, script, {"--max_restart", "1"});
  Reaper g0(n0.pid), g1(n1.pid);
  REQUIRE(wait_exit(n1.pid, 40) == 0);
  REQUIRE(wait_exit(n0.pid, 40) == 0);
  for (int r = 0; r < 4; ++r) {
    CHECK(exists(d + "/ran." + std::to_string(r) + ".0"));
    CHECK(exists(d + "/ran." + std::to_string(r) + ".1"));
    CHECK_FALSE(exists(d + "/ran." + std::to_string(r) + ".2"));
  }
  CHECK_THAT(n0.err(), Catch::Contains("node 1 (127.0.0.1): rank 3 exited with code 3"));
  CHECK_THAT(n0.err(), Catch::Contains("rendezvous: generation 1"));
  CHECK_THAT(n1.err(), Catch::Contains("restart 1 of 1"));
}

TEST_CASE("multinode: a node's launcher killed -> the other stops within 10 s", "[launcher][multinode]") {
  TempDir td;
  const std::string& d = td.path;
  const std::string master = free_loopback_address();
  const std::string script = "echo $$ > " + d + "/pid.$RANK; exec sleep 60";
  Proc n0 = node(d, 0, 2, master, script), n1 = node(d, 1, 2, master, script);
  Reaper g0(n0.pid), g1(n1.pid);
  REQUIRE(wait_until([&] { return all_written(d, "pid.", 4); }, 30));
  kill(n1.pid, SIGKILL);
  const double t_kill = now_s();
  REQUIRE(wait_exit(n1.pid, 5) == 128 + SIGKILL);
  auto code0 = wait_exit(n0.pid, 15);
  CHECK(now_s() - t_kill < 10.0);
  REQUIRE(code0.has_value());
  CHECK(*code0 != 0);
  CHECK_THAT(n0.err(), Catch::Contains("node 1"));
  CHECK(process_gone(read_pid(d + "/pid.0")));
}

TEST_CASE("multinode: a node that never arrives -> timeout naming it; SIGTERM while waiting; no token", "[launcher][multinode]") {
  TempDir td;
  const std::string& d = td.path;
  Proc n0 = node(d, 0, 2, free_loopback_address(), "true", {"--elastic_timeout", "1"});
  Reaper g0(n0.pid);
  REQUIRE(wait_exit(n0.pid, 15) == 1);
  CHECK_THAT(n0.err(), Catch::Contains("1 of 2 nodes did not arrive (missing node rank 1)"));
  CHECK_FALSE(exists(d + "/log/workerlog.0"));  // no worker started

  // Waiting for the other nodes can take minutes: SIGTERM (Ctrl-C, scancel) ends it at once.
  // Its output goes where n0's went (the same tag): gone first, so that n0's lines are not taken for its own.
  unlink((d + "/node0.err").c_str());
  Proc waiting = node(d, 0, 2, free_loopback_address(), "true", {"--elastic_timeout", "600"});
  Reaper g2(waiting.pid);
  REQUIRE(wait_until([&] { return waiting.err().find("rendezvous: waiting") != std::string::npos; }, 10));
  kill(waiting.pid, SIGTERM);
  CHECK(wait_exit(waiting.pid, 2) == 128 + SIGTERM);

  CHECK_THAT(refusal({kLaunch, "--nnodes", "2", "--master", "127.0.0.1:1", "true"}, d, {{"LAUNCH_STORE_TOKEN", ""}}),
             Catch::Contains("head -c 32 /dev/urandom"));
  CHECK_THAT(refusal({kLaunch, "--nnodes", "2", "--master", "10.0.0.1:port", "true"}, d, kToken),
             Catch::Contains("--master '10.0.0.1:port' must be HOST:PORT"));
}

// Issue 14, item 9: a node started without node 0 was told "check LAUNCH_STORE_ADDR".
TEST_CASE("multinode: a node without node 0 is told to check --master", "[launcher][multinode]") {
  TempDir td;
  Proc n1 = node(td.path, 1, 2, free_loopback_address(), "true", {"--elastic_timeout", "2"});
  Reaper g(n1.pid);
  REQUIRE(wait_exit(n1.pid, 20) == 1);
  CHECK_THAT(n1.err(), Catch::Contains("check --master"));
  CHECK_THAT(n1.err(), !Catch::Contains("LAUNCH_STORE_ADDR"));
}

// Issue 14, item 9: the rendezvous timeout listed node 0's own host as missing, because Slurm's
// host names were compared with gethostname(). Here Slurm calls node 0 "localhost" (its address
// is 127.0.0.1, as the node registered) and the other node never comes.
TEST_CASE("multinode: the timeout names only the hosts that did not arrive, whatever gethostname says", "[launcher][multinode]") {
  TempDir td;
  const std::string job = std::to_string(getpid());
  std::map<std::string, std::string> slurm = kToken;
  for (const auto& kv : std::map<std::string, std::string>{
           {"SLURM_JOB_ID", job}, {"SLURM_STEP_ID", "0"}, {"SLURM_STEP_NUM_NODES", "2"}, {"SLURM_NODEID", "0"},
           {"SLURM_STEP_NODELIST", "localhost,ghost-node.invalid"}, {"SLURM_STEP_NUM_TASKS", "2"},
           {"SLURM_STEP_TASKS_PER_NODE", "1(x2)"}, {"SLURM_PROCID", "0"}, {"SLURM_LOCALID", "0"},
           {"CUDA_VISIBLE_DEVICES", ""}})
    slurm.insert(kv);
  Proc n0 = start({kLaunch, "--master", free_loopback_address(), "--host", "127.0.0.1", "--elastic_timeout", "2", "--log_dir",
                   td.path + "/log", "true"},
                  td.path, slurm, "slurm0");
  Reaper g(n0.pid);
  REQUIRE(wait_exit(n0.pid, 30) == 1);
  CHECK_THAT(n0.err(), Catch::Contains("1 of 2 nodes did not arrive (missing hosts: ghost-node.invalid)"));
}

// Issue 14, item 9 and issue 10: a dry run of node 1 of a 3-node Slurm step with 2 processes per
// node showed 2 ranks 0-1, MASTER_ADDR and LAUNCH_STORE_ADDR 127.0.0.1, "as if it were node 0".
TEST_CASE("multinode: --dry-run shows this node's ranks of the job and node 0's store", "[launcher][multinode]") {
  TempDir td;
  std::map<std::string, std::string> slurm = kToken;
  for (const auto& kv : std::map<std::string, std::string>{
           {"SLURM_JOB_ID", "77"}, {"SLURM_STEP_ID", "0"}, {"SLURM_STEP_NUM_NODES", "3"}, {"SLURM_NODEID", "1"},
           {"SLURM_STEP_NODELIST", "gpu[07-09]"}, {"SLURM_STEP_NUM_TASKS", "3"}, {"SLURM_STEP_TASKS_PER_NODE", "1(x3)"},
           {"SLURM_PROCID", "1"}, {"SLURM_LOCALID", "0"}, {"CUDA_VISIBLE_DEVICES", ""}})
    slurm.insert(kv);
  Proc p = start({kLaunch, "--dry-run", "--master", "10.213.0.7:29400", "--host", "127.0.0.1", "--devices", "cpu",
                  "--nproc_per_node", "2", "--log_dir", td.path + "/log", "true"},
                 td.path, slurm, "dry");
  Reaper g(p.pid);
  REQUIRE(wait_exit(p.pid, 10) == 0);
  const std::string out = p.out();
  CHECK_THAT(out, Catch::Contains("rank 2 (cpu)") && Catch::Contains("rank 3 (cpu)"));
  CHECK_THAT(out, !Catch::Contains("rank 0 (cpu)"));
  CHECK_THAT(out, Catch::Contains("  WORLD_SIZE=6\n") && Catch::Contains("  PADDLE_TRAINERS_NUM=6\n"));
  CHECK_THAT(out, Catch::Contains("  GROUP_RANK=1\n") && Catch::Contains("  MASTER_ADDR=10.213.0.7\n"));
  CHECK_THAT(out, Catch::Contains("  MASTER_PORT=<decided at the rendezvous>\n"));
  CHECK_THAT(out, Catch::Contains("  LAUNCH_STORE_ADDR=10.213.0.7:29400"));
  CHECK_THAT(out, !Catch::Contains("LAUNCH_STORE_ADDR=127.0.0.1"));
  CHECK_THAT(out, Catch::Contains("log: " + td.path + "/log/workerlog.3"));
  CHECK_FALSE(exists(td.path + "/log"));
}

// --- Rendezvous without node ranks (issue 21, item 1) -------------------------------------------

namespace {

// A launcher of the c10d form: no rank, every node the same command line.
Proc c10d_node(const std::string& dir, int i, const std::vector<std::string>& rdzv, const std::string& script,
               const std::map<std::string, std::string>& env = kToken) {
  std::vector<std::string> argv{kLaunch, "--host", "127.0.0.1", "--devices", "cpu", "--nproc_per_node", "2",
                                "--log_dir", dir + "/log" + std::to_string(i)};
  argv.insert(argv.end(), rdzv.begin(), rdzv.end());
  argv.insert(argv.end(), {"sh", "-c", script});
  return start(argv, dir, env, "c10d" + std::to_string(i));
}

// Every rank's environment, written by the workers of `nodes` launchers of 2 processes.
void check_ranks(const std::string& d, int nodes, const std::string& master) {
  std::set<std::string> group_ranks, endpoints;
  for (int r = 0; r < 2 * nodes; ++r) {
    auto e = parse_env_file(d + "/env." + std::to_string(r));
    CHECK(e["RANK"] == std::to_string(r));
    CHECK(e["WORLD_SIZE"] == std::to_string(2 * nodes));
    CHECK(e["GROUP_RANK"] == std::to_string(r / 2));
    CHECK(e["LAUNCH_STORE_ADDR"] == master);
    group_ranks.insert(e["GROUP_RANK"]);
    endpoints.insert(e["PADDLE_CURRENT_ENDPOINT"]);
  }
  CHECK(int(group_ranks.size()) == nodes);
  CHECK(int(endpoints.size()) == 2 * nodes);
}

}  // namespace

TEST_CASE("c10d form without ranks: 3 launches on one host meet; the one that serves the store is node 0", "[launcher][multinode]") {
  TempDir td;
  const std::string& d = td.path;
  const std::string master = free_loopback_address();
  const std::string script = "env > " + d + "/env.$RANK; " + kLaunch + " kv barrier all --timeout 20";
  const std::vector<std::string> rdzv{"--nnodes", "3", "--rdzv-backend", "c10d", "--rdzv-endpoint", master};
  std::vector<Proc> nodes;
  for (int i = 0; i < 3; ++i) nodes.push_back(c10d_node(d, i, rdzv, script));
  Reaper g0(nodes[0].pid), g1(nodes[1].pid), g2(nodes[2].pid);
  int serving = 0;
  for (int i = 0; i < 3; ++i) {
    INFO(nodes[i].err());
    REQUIRE(wait_exit(nodes[i].pid, 30) == 0);
    CHECK_THAT(nodes[i].err(), !Catch::Contains("Address already in use"));
    if (nodes[i].err().find("serving the job's store on " + master) != std::string::npos) {
      ++serving;
      CHECK_THAT(nodes[i].err(), Catch::Contains("this is node 0 of 3"));
    } else {
      CHECK_THAT(nodes[i].err(), Catch::Contains("another launch serves the store there): joining it"));
    }
  }
  CHECK(serving == 1);
  check_ranks(d, 3, master);
}

TEST_CASE("paddle's form: PADDLE_MASTER and PADDLE_NNODES, no rank: 2 launches on one host meet", "[launcher][multinode]") {
  TempDir td;
  const std::string& d = td.path;
  const std::string master = free_loopback_address();
  std::map<std::string, std::string> env = kToken;
  env["PADDLE_MASTER"] = master;
  env["PADDLE_NNODES"] = "2";
  env["PADDLE_JOB_ID"] = "pj";
  const std::string script = "env > " + d + "/env.$RANK; " + kLaunch + " kv barrier all --timeout 20";
  Proc a = c10d_node(d, 0, {}, script, env), b = c10d_node(d, 1, {}, script, env);
  Reaper ga(a.pid), gb(b.pid);
  REQUIRE(wait_exit(a.pid, 30) == 0);
  REQUIRE(wait_exit(b.pid, 30) == 0);
  check_ranks(d, 2, master);
  CHECK(parse_env_file(d + "/env.3")["PADDLE_JOB_ID"] == "pj");
}

TEST_CASE("a --master name that does not resolve is retried, one line a second, until --elastic_timeout", "[launcher][multinode]") {
  TempDir td;
  const double t0 = now_s();
  Proc p = c10d_node(td.path, 0, {"--nnodes", "2", "--master", "launch-test-no-such-host.invalid:29400",
                                  "--elastic_timeout", "2"}, "true");
  Reaper g(p.pid);
  REQUIRE(wait_exit(p.pid, 20) == 1);
  const double took = now_s() - t0;
  CHECK(took > 1.5);
  CHECK(took < 8.0);
  const std::string err = p.err();
  const auto retries = lines_of(err);
  int said = 0;
  for (const auto& l : retries) said += l.find("does not resolve yet") != std::string::npos;
  CHECK(said >= 1);
  CHECK(said <= 3);
  CHECK_THAT(err, Catch::Contains("rendezvous timed out after 2 s: the host 'launch-test-no-such-host.invalid' of "
                                  "--master does not resolve"));
  CHECK_FALSE(exists(td.path + "/log0/workerlog.0"));
}

TEST_CASE("--rdzv-conf keep_alive_interval and heartbeat_timeout: a killed node's launcher is declared dead sooner", "[launcher][multinode][torchrun]") {
  TempDir td;
  const std::string& d = td.path;
  const std::string master = free_loopback_address();
  const std::string script = "echo $$ > " + d + "/pid.$RANK; exec sleep 60";
  const std::vector<std::string> conf{"--rdzv-conf", "keep_alive_interval=0.2,heartbeat_timeout=1"};
  Proc n0 = node(d, 0, 2, master, script, conf), n1 = node(d, 1, 2, master, script, conf);
  Reaper g0(n0.pid), g1(n1.pid);
  REQUIRE(wait_until([&] { return all_written(d, "pid.", 4); }, 30));
  kill(n1.pid, SIGKILL);
  const double t_kill = now_s();
  REQUIRE(wait_exit(n1.pid, 5) == 128 + SIGKILL);
  auto code0 = wait_exit(n0.pid, 15);
  const double took = now_s() - t_kill;
  REQUIRE(code0.has_value());
  CHECK(*code0 != 0);
  // 1 s without a beat, 0.2 s to notice, the workers' teardown; the dead node is not waited for.
  CHECK(took < 4.0);
  CHECK_THAT(n0.err(), Catch::Contains("node 1 (127.0.0.1): launcher stopped responding"));
}

// --- IPv6 (issue 22, item 11) --------------------------------------------------------------------

namespace {

// "[::1]:PORT" with a port nobody holds now; empty when this machine has no IPv6 loopback.
std::string free_ipv6_loopback_address() {
  int s = socket(AF_INET6, SOCK_STREAM, 0);
  if (s < 0) return "";
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_addr = in6addr_loopback;
  socklen_t len = sizeof a;
  const bool ok = bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
                  getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  close(s);
  return ok ? "[::1]:" + std::to_string(ntohs(a.sin6_port)) : "";
}

}  // namespace

TEST_CASE("IPv6: --host ::1 on one node: bracketed endpoints the workers bind, the store on [::1]", "[launcher][multinode][ipv6]") {
  if (free_ipv6_loopback_address().empty()) {
    WARN("not checked: no IPv6 loopback here");
    return;
  }
  TempDir td;
  const std::string& d = td.path;
  // Each rank binds its own endpoint over IPv6 and meets the others in the store.
  const std::string script =
      "env > " + d + "/env.$RANK && python3 -c \"import os, socket; h, p = os.environ['PADDLE_CURRENT_ENDPOINT']"
      ".rsplit(':', 1); s = socket.socket(socket.AF_INET6); s.bind((h.strip('[]'), int(p))); print('bound', h, p)\" && " +
      kLaunch + " kv barrier all --timeout 20";
  Proc p = start({kLaunch, "--host", "::1", "--devices", "cpu", "--nproc_per_node", "2", "--stream", "all", "--log_dir",
                  d + "/log", "sh", "-c", script},
                 d, {}, "v6");
  Reaper g(p.pid);
  REQUIRE(wait_exit(p.pid, 30) == 0);
  CHECK_THAT(p.out(), Catch::Contains("[rank 0] bound [::1]") && Catch::Contains("[rank 1] bound [::1]"));
  auto e = parse_env_file(d + "/env.1");
  CHECK(e["LAUNCH_STORE_ADDR"].rfind("[::1]:", 0) == 0);
  CHECK(e["PADDLE_CURRENT_ENDPOINT"].rfind("[::1]:", 0) == 0);
  CHECK(e["MASTER_ADDR"] == "::1");  // torch takes the bare address
  CHECK(e["PADDLE_MASTER"] == "[::1]:" + e["MASTER_PORT"]);
}

TEST_CASE("IPv6: --master [::1]:PORT and torchrun's --rdzv-endpoint [::1]: two launches meet", "[launcher][multinode][ipv6]") {
  const std::string master = free_ipv6_loopback_address();
  if (master.empty()) {
    WARN("not checked: no IPv6 loopback here");
    return;
  }
  TempDir td;
  const std::string& d = td.path;
  const std::string script = "env > " + d + "/env.$RANK; " + kLaunch + " kv barrier all --timeout 20";
  auto v6_node = [&](int i, std::vector<std::string> rdzv) {
    std::vector<std::string> argv{kLaunch, "--devices", "cpu", "--nproc_per_node", "1", "--log_dir", d + "/l" + std::to_string(i)};
    argv.insert(argv.end(), rdzv.begin(), rdzv.end());
    argv.insert(argv.end(), {"sh", "-c", script});
    return start(argv, d, kToken, "v6n" + std::to_string(i));
  };
  // One node in our spelling, the other in torchrun's (its host alone: port 29400 by default is
  // not this test's, so the port is given).
  Proc a = v6_node(0, {"--nnodes", "2", "--master", master});
  Proc b = v6_node(1, {"--nnodes", "2", "--master-addr", "[::1]", "--master-port", master.substr(master.rfind(':') + 1)});
  Reaper ga(a.pid), gb(b.pid);
  REQUIRE(wait_exit(a.pid, 30) == 0);
  REQUIRE(wait_exit(b.pid, 30) == 0);
  for (int r = 0; r < 2; ++r) {
    auto e = parse_env_file(d + "/env." + std::to_string(r));
    CHECK(e["LAUNCH_STORE_ADDR"] == master);
    CHECK(e["WORLD_SIZE"] == "2");
    CHECK(e["PADDLE_TRAINER_ENDPOINTS"].find("[::1]:") == 0);
  }
  CHECK_THAT(refusal({kLaunch, "--nnodes", "2", "--master", "::1:29400", "true"}, d, kToken),
             Catch::Contains("must be HOST:PORT, e.g. 10.0.0.1:29400 or [fd00::1]:29400"));
}

// --- Elastic membership: bad input (issue 21, item 2) ---------------------------------------------

TEST_CASE("elastic: another job id, another --nproc_per_node, another MIN:MAX, a wrong token: one line, exit 2, nothing left", "[launcher][multinode][elastic]") {
  TempDir td;
  const std::string& d = td.path;
  const std::string master = free_loopback_address();
  auto el_node = [&](const std::string& tag, std::vector<std::string> extra, const std::map<std::string, std::string>& env) {
    std::vector<std::string> argv{kLaunch, "--host", "127.0.0.1", "--devices", "cpu", "--rdzv-endpoint", master,
                                  "--log_dir", d + "/log." + tag, "--elastic_timeout", "20"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    argv.insert(argv.end(), {"sh", "-c", "echo ran > " + d + "/ran." + tag});
    return start(argv, d, env, tag);
  };
  // The job: one node of 2:3, waiting for a second (it serves the store).
  Proc job = el_node("job", {"--nnodes", "2:3", "--nproc_per_node", "1", "--job_id", "j1"}, kToken);
  Reaper gj(job.pid);
  REQUIRE(wait_until([&] { return job.err().find("1 of 2:3 node(s) joined round 0") != std::string::npos; }, 10));
  struct Bad {
    std::string tag;
    std::vector<std::string> args;
    std::map<std::string, std::string> env;
    std::string says;
  };
  const std::vector<Bad> cases = {
      {"job", {"--nnodes", "2:3", "--nproc_per_node", "1", "--job_id", "j2"}, kToken, "refused this node"},
      {"nproc", {"--nnodes", "2:3", "--nproc_per_node", "2", "--job_id", "j1"}, kToken,
       "this node runs 2 worker process(es), the job's nodes 1 each"},
      {"range", {"--nnodes", "2:4", "--nproc_per_node", "1", "--job_id", "j1"}, kToken, "runs --nnodes 2:3"},
      {"token", {"--nnodes", "2:3", "--nproc_per_node", "1", "--job_id", "j1"},
       {{"LAUNCH_STORE_TOKEN", "9f2c4e71b8a05d3e6c1f7a2b9d4e8c03-other"}}, "BAD_TOKEN"},
  };
  for (const auto& c : cases) {
    INFO(c.tag);
    Proc bad = el_node("bad-" + c.tag, c.args, c.env);
    Reaper g(bad.pid);
    REQUIRE(wait_exit(bad.pid, 15) == 2);
    const std::string err = bad.err();
    CHECK_THAT(err, Catch::Contains(c.says));
    CHECK(std::count(err.begin(), err.end(), '\n') >= 1);
    int errors = 0;
    for (const auto& l : lines_of(err)) errors += l.rfind("launch: error: ", 0) == 0;
    CHECK(errors == 1);
    CHECK_FALSE(exists(d + "/ran.bad-" + c.tag));
  }
  // The job was not disturbed: still one node, waiting; a good second node completes it.
  CHECK_THAT(job.err(), !Catch::Contains("round 1"));
  Proc good = el_node("good", {"--nnodes", "2:3", "--nproc_per_node", "1", "--job_id", "j1", "--rdzv-conf",
                               "last_call_timeout=0.5"},
                      kToken);
  Reaper gg(good.pid);
  CHECK(wait_exit(good.pid, 20) == 0);
  CHECK(wait_exit(job.pid, 20) == 0);
  CHECK(exists(d + "/ran.job"));
  CHECK(exists(d + "/ran.good"));
}
