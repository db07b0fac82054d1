// One node's launcher, reduced to the multi-node library: serves the store (node 0) or joins
// it, runs the rendezvous, then watches for failures -- optionally reporting one itself. Driven
// by scripts/test_multinode_netns.sh, one instance per network namespace. Prints one line per
// event ("store ADDR", "layout ...", "failure ...", "error ..."), times in epoch milliseconds
// so that the script can compare instants across processes.
#include <poll.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>

#include <CLI/CLI.hpp>

#include "launcher/multinode/monitor.h"
#include "launcher/multinode/rendezvous.h"
#include "launcher/multinode/token.h"
#include "store/store_server.h"

namespace mn = launch::multinode;
using std::chrono::milliseconds;

namespace {

long long epoch_ms() {
  return std::chrono::duration_cast<milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

struct Args {
  std::string serve;   // host to serve the store on (node 0), port picked by the kernel
  std::string master;  // ip:port of the store to join
  std::string host;
  int nnodes = 1;
  int rank = -1;
  int nproc = 1;
  int timeout_ms = 10000;
  std::string fail;    // "RANK:CODE": report a worker failure after the rendezvous
  int watch_ms = 5000;
  int heartbeat_timeout_ms = int(mn::kDefaultHeartbeatTimeout.count());
  std::optional<std::string> token_file;
};

int run(const Args& a) {
  const char* env_token = std::getenv("LAUNCH_STORE_TOKEN");
  std::string token = mn::resolve_job_token(a.token_file, env_token ? std::optional<std::string>(env_token) : std::nullopt);

  std::unique_ptr<store::StoreServer> server;
  std::string master = a.master;
  if (!a.serve.empty()) {
    store::StoreServerConfig sc;
    sc.host = a.serve;
    sc.job_id = "netns";
    sc.token = token;
    server = store::StoreServer::start(sc);
    master = server->address();
    std::cout << "store " << master << std::endl;
  }

  mn::RendezvousConfig rc;
  rc.store.address = master;
  rc.store.job_id = "netns";
  rc.store.token = token;
  rc.nnodes = a.nnodes;
  rc.timeout = milliseconds(a.timeout_ms);
  rc.self.host = a.host;
  rc.self.requested_rank = a.rank;
  rc.self.nproc = a.nproc;
  for (int i = 0; i < a.nproc; ++i) rc.self.endpoints.push_back(a.host + ":" + std::to_string(6170 + i));
  rc.self.master_endpoint = a.host + ":6169";
  mn::JobLayout l = mn::rendezvous(rc);
  std::cout << "layout node_rank=" << l.node_rank << " rank_offset=" << l.rank_offset << " world=" << l.world_size
            << " nnodes=" << l.nnodes << " master=" << l.framework_master << " endpoints=" << l.trainer_endpoints()
            << std::endl;

  mn::MonitorConfig mc;
  mc.store = rc.store;
  mc.layout = l;
  mc.heartbeat_timeout = milliseconds(a.heartbeat_timeout_ms);
  mn::JobMonitor monitor(mc);
  if (!a.fail.empty()) {
    int rank = std::stoi(a.fail.substr(0, a.fail.find(':')));
    int code = std::stoi(a.fail.substr(a.fail.find(':') + 1));
    std::cout << "reported at=" << epoch_ms() << " " << monitor.report_worker_exit(rank, code).describe() << std::endl;
  }
  pollfd p{monitor.event_fd(), POLLIN, 0};
  if (::poll(&p, 1, a.watch_ms) == 1) {
    std::cout << "failure at=" << epoch_ms() << " " << monitor.failure()->describe() << std::endl;
    if (server) {
      // As the supervisor would: fail the store's waiters, then keep the store up until every
      // node has read the record.
      server->report_failure(-1, monitor.failure()->describe());
      auto running = monitor.wait_all_finished(milliseconds(3000));
      if (!running.empty()) std::cout << "warning " << running.size() << " node(s) did not see the failure" << std::endl;
    }
    return 1;
  }
  monitor.finish();
  if (server) {
    auto running = monitor.wait_all_finished(milliseconds(a.watch_ms));
    if (!running.empty()) std::cout << "warning " << running.size() << " node(s) still running" << std::endl;
  }
  std::cout << "done" << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"multi-node library test node"};
  Args a;
  app.add_option("--serve", a.serve, "serve the store on this host address");
  app.add_option("--master", a.master, "join the store at ip:port");
  app.add_option("--host", a.host, "this node's address")->required();
  app.add_option("--nnodes", a.nnodes);
  app.add_option("--rank", a.rank);
  app.add_option("--nproc", a.nproc);
  app.add_option("--timeout-ms", a.timeout_ms);
  app.add_option("--fail", a.fail, "RANK:CODE");
  app.add_option("--watch-ms", a.watch_ms);
  app.add_option("--heartbeat-timeout-ms", a.heartbeat_timeout_ms);
  app.add_option("--token-file", a.token_file);
  CLI11_PARSE(app, argc, argv);
  try {
    return run(a);
  } catch (const std::exception& e) {
    std::cout << "error " << e.what() << std::endl;
    return 3;
  }
}
