// Multi-node jobs over etcd with the real build/bin/launch (--rdzv-backend etcd, --master
// etcd://): launchers on 127.0.0.1 play the nodes, a real etcd (Debian's etcd-server) started by
// the test holds the rendezvous. The elastic scenario with train_resnet is tests/launcher/elastic.sh
// (launcher.etcd.elastic_loopback/_netns); here: the meeting itself, the bad inputs, and the loss
// of the store's node in a fixed-size job and of every node of a job.
#include <catch2/catch.hpp>

#include <algorithm>
#include <set>

#include "launcher/etcd/etcd_rendezvous.h"
#include "tests/launcher/etcd/etcd_fixture.h"
#include "tests/launcher/proc_helpers.h"

using namespace testutil;
namespace le = launch::etcd;

namespace {

const std::string kLaunch = LAUNCH_BIN;
const std::map<std::string, std::string> kToken = {{"LAUNCH_STORE_TOKEN", "0123456789abcdef0123456789abcdef-etcd"}};
// Short liveness: a lease of 2 s (etcd's minimum), heartbeats of 0.2 s.
const std::vector<std::string> kQuick = {"--rdzv-conf", "keep_alive_interval=0.2,heartbeat_timeout=1,last_call_timeout=0.5"};

std::string job_name() {
  std::string p = etcdtest::unique_prefix();
  return "launch" + p.substr(1, p.size() - 2);
}

// A launch of job `job` over the test's etcd, running `script`.
Proc etcd_node(const std::string& dir, const std::string& tag, const std::string& job, const std::string& nnodes,
               const std::string& script, std::vector<std::string> extra = {},
               const std::map<std::string, std::string>& env = kToken) {
  std::vector<std::string> argv{kLaunch, "--nnodes", nnodes, "--rdzv-backend", "etcd", "--rdzv-endpoint",
                                etcdtest::shared_etcd().endpoint(), "--job_id", job, "--host", "127.0.0.1",
                                "--devices", "cpu", "--log_dir", dir + "/log." + tag};
  if (std::find(extra.begin(), extra.end(), "--nproc_per_node") == extra.end()) extra.insert(extra.end(), {"--nproc_per_node", "1"});
  argv.insert(argv.end(), extra.begin(), extra.end());
  argv.insert(argv.end(), {"sh", "-c", script});
  return start(argv, dir, env, tag);
}

std::vector<std::string> node_ids(const std::string& job) {
  le::Client c(etcdtest::shared_etcd().options());
  std::vector<std::string> ids;
  for (const auto& n : le::membership_from(job, le::list_prefix(c, le::nodes_prefix(job))).nodes) ids.push_back(n.node_id);
  return ids;
}

int error_lines(const std::string& err) {
  int n = 0;
  for (const auto& l : lines_of(err)) n += l.rfind("launch: error: ", 0) == 0;
  return n;
}

}  // namespace

TEST_CASE("etcd: two launches meet at etcd without a rank or a store address; the first to claim serves the store", "[launcher][etcd]") {
  etcdtest::shared_etcd();
  TempDir td;
  const std::string& d = td.path;
  const std::string job = job_name();
  const std::string script = "env > " + d + "/env.$RANK; " + kLaunch + " kv barrier all --timeout 20";
  // torchrun's spelling, and paddle's environment (PADDLE_MASTER=etcd://, no rank).
  Proc a = etcd_node(d, "a", job, "2", script);
  std::map<std::string, std::string> paddle = kToken;
  paddle["PADDLE_MASTER"] = "etcd://" + etcdtest::shared_etcd().endpoint();
  paddle["PADDLE_NNODES"] = "2";
  paddle["PADDLE_JOB_ID"] = job;
  Proc b = start({kLaunch, "--host", "127.0.0.1", "--devices", "cpu", "--nproc_per_node", "1", "--log_dir", d + "/log.b",
                  "sh", "-c", script},
                 d, paddle, "b");
  Reaper ga(a.pid), gb(b.pid);
  REQUIRE(wait_exit(a.pid, 30) == 0);
  REQUIRE(wait_exit(b.pid, 30) == 0);
  std::set<std::string> ranks, stores;
  for (int r = 0; r < 2; ++r) {
    auto e = parse_env_file(d + "/env." + std::to_string(r));
    ranks.insert(e["RANK"]);
    stores.insert(e["LAUNCH_STORE_ADDR"]);
    CHECK(e["WORLD_SIZE"] == "2");
    CHECK(e["PADDLE_NNODES"] == "2");
  }
  CHECK(ranks == std::set<std::string>{"0", "1"});
  REQUIRE(stores.size() == 1);  // one store, the barrier across nodes went through it
  CHECK(*stores.begin() != etcdtest::shared_etcd().endpoint());
  const int serving = int(a.err().find("serving the job's store") != std::string::npos) +
                      int(b.err().find("serving the job's store") != std::string::npos);
  CHECK(serving == 1);
  // Gone with them: their node keys (their leases revoked); the ended job's records are on a
  // lease of their own, so that the job id can be used again.
  CHECK(node_ids(job).empty());
  le::Client c(etcdtest::shared_etcd().options());
  const auto rec = c.get(le::membership_key(job));
  REQUIRE(rec);
  CHECK_THAT(rec->value, Catch::Contains("\"phase\":\"finished\""));
  CHECK(rec->lease != 0);
  REQUIRE(c.get(le::job_key(job)));
  CHECK(c.get(le::job_key(job))->lease == rec->lease);
}

TEST_CASE("etcd: an endpoint that does not answer: one line, exit 1 at --elastic_timeout, nothing left", "[launcher][etcd]") {
  TempDir td;
  const std::string& d = td.path;
  // Nobody listens; and a listener that never answers.
  const std::string closed = free_loopback_address();
  int silent = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof sa;
  REQUIRE(bind(silent, reinterpret_cast<sockaddr*>(&sa), sizeof sa) == 0);
  REQUIRE(listen(silent, 16) == 0);
  getsockname(silent, reinterpret_cast<sockaddr*>(&sa), &len);
  const std::string quiet = "127.0.0.1:" + std::to_string(ntohs(sa.sin_port));
  for (const std::string& ep : {closed, quiet}) {
    INFO(ep);
    const double t0 = now_s();
    Proc p = start({kLaunch, "--nnodes", "2", "--rdzv-backend", "etcd", "--rdzv-endpoint", ep, "--elastic_timeout", "2",
                    "--devices", "cpu", "--log_dir", d + "/log", "sh", "-c", "touch " + d + "/ran"},
                   d, kToken, "p");
    Reaper g(p.pid);
    REQUIRE(wait_exit(p.pid, 15) == 1);
    const double took = now_s() - t0;
    CHECK(took >= 1.8);
    CHECK(took < 4.5);
    const std::string err = p.err();
    CHECK(error_lines(err) == 1);
    CHECK_THAT(err, Catch::Contains("rendezvous timed out after 2 s: etcd at " + ep) &&
                        Catch::Contains("start etcd there, or raise --elastic_timeout"));
    CHECK_FALSE(exists(d + "/ran"));
  }
  close(silent);
}

TEST_CASE("etcd: another job id, --nproc_per_node, MIN:MAX or token: one line, nothing left, the job undisturbed", "[launcher][etcd]") {
  etcdtest::shared_etcd();
  TempDir td;
  const std::string& d = td.path;
  const std::string job = job_name(), other = job_name();
  auto ran = [&](const std::string& tag) { return "echo ran > " + d + "/ran." + tag; };
  // The job: one node of 2:3, waiting for a second (it holds the store's claim).
  Proc j = etcd_node(d, "job", job, "2:3", ran("job"), {"--elastic_timeout", "30"});
  Reaper gj(j.pid);
  REQUIRE(wait_until([&] { return j.err().find("1 of 2:3 node(s) joined round 0") != std::string::npos; }, 15));
  struct Bad {
    std::string tag, job, nnodes;
    std::vector<std::string> extra;
    std::map<std::string, std::string> env;
    int code;
    std::string says;
  };
  const std::vector<Bad> cases = {
      {"nproc", job, "2:3", {"--nproc_per_node", "2"}, kToken, 2,
       "this node runs 2 worker process(es), the job's nodes 1 each"},
      {"range", job, "2:4", {}, kToken, 2, "runs --nnodes 2:3"},
      {"token", job, "2:3", {}, {{"LAUNCH_STORE_TOKEN", "9f2c4e71b8a05d3e6c1f7a2b9d4e8c03-other"}}, 2,
       "runs with another token than this node's"},
      // Job ids are etcd's namespaces: a node of another job waits for its own job's nodes, and
      // its timeout names the job it may have meant.
      {"job", other, "2:3", {"--elastic_timeout", "2"}, kToken, 1,
       "has node(s) of other job id(s): '" + job + "' (1)"},
  };
  for (const auto& c : cases) {
    INFO(c.tag);
    Proc bad = etcd_node(d, "bad-" + c.tag, c.job, c.nnodes, ran("bad-" + c.tag), c.extra, c.env);
    Reaper g(bad.pid);
    REQUIRE(wait_exit(bad.pid, 15) == c.code);
    const std::string err = bad.err();
    CHECK_THAT(err, Catch::Contains(c.says));
    CHECK(error_lines(err) == 1);
    CHECK_FALSE(exists(d + "/ran.bad-" + c.tag));
    CHECK(node_ids(job).size() == 1);  // the job's node alone: the bad one left nothing behind
    CHECK(node_ids(other).empty());
  }
  // The job was not disturbed: still one node, waiting; a good second node completes it.
  CHECK_THAT(j.err(), !Catch::Contains("round 1"));
  Proc good = etcd_node(d, "good", job, "2:3", ran("good"), kQuick);
  Reaper gg(good.pid);
  CHECK(wait_exit(good.pid, 20) == 0);
  CHECK(wait_exit(j.pid, 20) == 0);
  CHECK(exists(d + "/ran.job"));
  CHECK(exists(d + "/ran.good"));
}

TEST_CASE("etcd: a fixed-size job survives the loss of its store's node: a new node takes its place, a fresh store", "[launcher][etcd]") {
  etcdtest::shared_etcd();
  TempDir td;
  const std::string& d = td.path;
  const std::string job = job_name();
  // Round 0 runs until killed; round 1 (PADDLE_RESTART_COUNT=1) says where it is and ends.
  const std::string script = "if [ $PADDLE_RESTART_COUNT = 0 ]; then exec sleep 60; fi; "
                             "echo \"$RANK $WORLD_SIZE $LAUNCH_STORE_ADDR\" > " + d + "/round1.$RANK";
  std::vector<std::string> extra = kQuick;
  extra.insert(extra.end(), {"--max_restart", "1", "--restart-backoff", "0"});
  Proc a = etcd_node(d, "a", job, "2", script, extra);
  Reaper ga(a.pid);
  REQUIRE(wait_until([&] { return a.err().find("serving the job's store on") != std::string::npos; }, 15));
  Proc b = etcd_node(d, "b", job, "2", script, extra);
  Reaper gb(b.pid);
  REQUIRE(wait_until([&] { return b.err().find("round 0: this is node 1 of 2") != std::string::npos; }, 15));
  const std::string first_store = a.err().substr(a.err().find("serving the job's store on ") + 27, 15);

  kill(a.pid, SIGKILL);
  REQUIRE(wait_exit(a.pid, 10) == 128 + SIGKILL);
  // b names the lost node, re-forms, and waits for a second node (MIN = MAX = 2).
  REQUIRE(wait_until([&] { return b.err().find("1 of 2 node(s) joined round 1") != std::string::npos; }, 15));
  CHECK_THAT(b.err(), Catch::Contains("round 0 failed (node 0 (127.0.0.1): launcher stopped responding"));
  Proc c = etcd_node(d, "c", job, "2", script, extra);
  Reaper gc(c.pid);
  REQUIRE(wait_exit(b.pid, 30) == 0);
  REQUIRE(wait_exit(c.pid, 30) == 0);
  REQUIRE(all_written(d, "round1.", 2));
  const auto r0 = lines_of(slurp(d + "/round1.0")), r1 = lines_of(slurp(d + "/round1.1"));
  const std::string store0 = r0[0].substr(r0[0].rfind(' ') + 1), store1 = r1[0].substr(r1[0].rfind(' ') + 1);
  CHECK(store0 == store1);
  CHECK(store0.rfind(first_store, 0) != 0);  // a fresh store, not the lost node's
  // b served it (the only survivor when it was elected) and is node 0.
  CHECK_THAT(b.err(), Catch::Contains("serving the job's store on " + store0));
  CHECK_THAT(b.err(), Catch::Contains("round 1: this is node 0 of 2"));
}

TEST_CASE("etcd: a job whose every node was lost goes on with the nodes that come", "[launcher][etcd]") {
  etcdtest::shared_etcd();
  TempDir td;
  const std::string& d = td.path;
  const std::string job = job_name();
  const std::string script = "if [ $PADDLE_RESTART_COUNT = 0 ]; then exec sleep 60; fi; echo $PADDLE_RESTART_COUNT > " +
                             d + "/again.$RANK";
  // Both nodes in round 0: a last call long enough for a launch started at the same time as the
  // first to register even on a loaded machine (at 0.5 s the first formed round 0 alone at times).
  const std::vector<std::string> extra = {"--rdzv-conf", "keep_alive_interval=0.2,heartbeat_timeout=1,last_call_timeout=5",
                                          "--max_restart", "2"};
  Proc a = etcd_node(d, "a", job, "1:2", script, extra), b = etcd_node(d, "b", job, "1:2", script, extra);
  Reaper ga(a.pid), gb(b.pid);
  REQUIRE(wait_until([&] {
    return a.err().find("round 0: this is node") != std::string::npos && b.err().find("round 0: this is node") != std::string::npos;
  }, 15));
  REQUIRE(a.err().find("of 2, global") != std::string::npos);
  kill(a.pid, SIGKILL);
  kill(b.pid, SIGKILL);
  REQUIRE(wait_exit(a.pid, 10));
  REQUIRE(wait_exit(b.pid, 10));
  // A new node finds round 0 running with nobody left (once their leases end) and reopens it.
  Proc c = etcd_node(d, "c", job, "1:2", script, extra);
  Reaper gc(c.pid);
  REQUIRE(wait_exit(c.pid, 30) == 0);
  CHECK(slurp(d + "/again.0") == "1\n");
  CHECK_THAT(c.err(), Catch::Contains("round 1: this is node 0 of 1"));
}

TEST_CASE("etcd: --dry-run says where the nodes meet and leaves the store to the rendezvous, asking etcd nothing", "[launcher][etcd]") {
  TempDir td;
  // No etcd at this endpoint: a dry run does not need one.
  Proc p = start({kLaunch, "--dry-run", "--nnodes", "2", "--rank", "1", "--rdzv-backend", "etcd", "--rdzv-endpoint",
                  free_loopback_address(), "--devices", "cpu", "--nproc_per_node", "1", "true"},
                 td.path, kToken, "dry");
  Reaper g(p.pid);
  REQUIRE(wait_exit(p.pid, 10) == 0);
  const std::string out = p.out();
  CHECK_THAT(out, Catch::Contains("2 nodes meet at etcd at 127.0.0.1:") &&
                      Catch::Contains("the first node to claim the job's store there serves it"));
  CHECK_THAT(out, Catch::Contains("LAUNCH_STORE_ADDR=<decided at the rendezvous>"));
  CHECK_THAT(out, Catch::Contains("RANK=<decided at the rendezvous>"));
}
