#include "launcher/dry_run.h"

#include <iostream>
#include <set>

#include "launcher/net_address.h"
#include "launcher/ports.h"
#include "launcher/program.h"
#include "proto/address.h"

namespace launch {

namespace {

using namespace proto::env;

// What this launcher can tell before it meets anybody.
struct Preview {
  RankLayout layout;
  std::set<std::string> undecided;  // variables whose value the meeting decides
  std::string marker;               // what to print for them
  bool ranks_known = true;
  std::string note;
};

const std::set<std::string> kRankVars = {kPaddleTrainerId, kPaddleGlobalRank, kRank, kRoleRank, kTorchErrorFile};
const std::set<std::string> kWorldVars = {kPaddleTrainersNum, kPaddleGlobalSize, kWorldSize, kRoleWorldSize};

Preview preview(const Plan& p) {
  Preview v;
  RankLayout& l = v.layout;
  const Options& opt = p.opt;
  const int n = p.n();
  if (p.task) {
    // One Slurm task per worker: Slurm numbers the ranks; the ports are exchanged at the meeting.
    const SlurmTaskForm& f = *p.task;
    l = f.ranks;
    l.endpoints.assign(static_cast<size_t>(l.world_size), opt.host + ":0");
    l.master = opt.host + ":0";
    l.store_addr = opt.host + ":" + std::to_string(f.store_port) + " (served by task 0)";
    v.undecided = {kPaddleTrainerEndpoints, kPaddleCurrentEndpoint, kPaddleMaster, kMasterPort};
    v.marker = "<exchanged when the Slurm tasks meet>";
    v.note = "# slurm: endpoints and the master port are exchanged through task 0's store at run time\n";
  } else if (p.multinode) {
    // Several nodes: the ranks are known when this node's rank is and every node runs as many
    // workers (Slurm's one launcher per node, or --nproc_per_node on every node).
    // A master name that does not resolve yet is the rendezvous' to wait for: shown as it is.
    const std::string master_host = proto::split_host_port(p.master)->host;
    const std::optional<std::string> master_ip = resolve_host(master_host);
    const std::string host = opt.host_given ? opt.host : master_ip ? route_source_address(*master_ip) : "127.0.0.1";
    l.nnodes = opt.nnodes;
    l.local_size = n;
    v.ranks_known = !p.elastic && !p.etcd && opt.rank >= 0 && (opt.nproc_per_node.has_value() || !p.slurm_notes.empty());
    l.node_rank = std::max(opt.rank, 0);
    l.world_size = opt.nnodes * n;
    l.first_rank = l.node_rank * n;
    l.endpoints.assign(static_cast<size_t>(l.world_size), proto::join_host_port(host, 0));
    PortReservation ports = reserve_ports(host, n, std::nullopt, "");
    for (int i = 0; i < n; ++i) l.endpoints[size_t(l.first_rank + i)] = proto::join_host_port(host, ports.ports()[size_t(i)]);
    l.master = proto::join_host_port(master_ip.value_or(master_host), 0);
    l.store_addr = p.master + " (the job's store, at " + p.master_origin + ")";
    l.store_token = "<redacted>";
    v.undecided = {kPaddleTrainerEndpoints, kPaddleMaster, kMasterPort};
    if (!v.ranks_known) {
      v.undecided.insert(kRankVars.begin(), kRankVars.end());
      v.undecided.insert(kWorldVars.begin(), kWorldVars.end());
      v.undecided.insert({kGroupRank, kPaddleCurrentEndpoint, kPodName});
    }
    if (p.elastic) v.undecided.insert({kGroupWorldSize, kPaddleNnodes, kPaddleRestartCount, kTorchRestartCount});
    // Over etcd the store is served by the node that holds etcd's claim, at its own port.
    if (p.etcd) v.undecided.insert({kStoreAddr, kMasterAddr, kPaddleRestartCount, kTorchRestartCount});
    v.marker = "<decided at the rendezvous>";
    v.note = "# multi-node: " + (p.elastic ? std::to_string(opt.nnodes_min) + " to " : std::string()) +
             std::to_string(opt.nnodes) + " nodes meet at " +
             (p.etcd ? "etcd at " + p.master + " (the first node to claim the job's store there serves it); "
                     : p.master + " (the launch that binds it serves the store there); ") +
             (v.ranks_known ? "this is node " + std::to_string(opt.rank) + " of " + std::to_string(opt.nnodes) +
                                  " with " + std::to_string(n) + " worker(s) per node"
                            : std::string(p.elastic || p.etcd ? "every round of the job gives this node its rank and the job's size"
                                                    : "this node's rank is given in arrival order")) +
             "; values marked " + v.marker + " are the rendezvous'; ports are examples\n";
  } else {
    PortReservation ports = reserve_ports(opt.host, n + 1, opt.start_port, "");
    for (int i = 0; i < n; ++i) l.endpoints.push_back(proto::join_host_port(opt.host, ports.ports()[size_t(i)]));
    l.master = proto::join_host_port(opt.host, static_cast<uint16_t>(opt.framework_port.value_or(ports.ports()[size_t(n)])));
    l.world_size = l.local_size = n;
    l.store_addr = opt.host + ":<port chosen at launch>";
  }
  l.store_token = "<redacted>";
  return v;
}

}  // namespace

int dry_run(const Plan& p) {
  const Preview v = preview(p);
  std::cout << "# dry run: nothing is started; ports are examples, a real launch picks its own\n";
  for (const auto& note : p.slurm_notes) std::cout << "# slurm: " << note << "\n";
  std::cout << v.note;
  if (p.opt.max_restart > 0)
    std::cout << "# restarts: up to " << p.opt.max_restart << " (PADDLE_RESTART_COUNT=1.." << p.opt.max_restart << ")\n";
  for (int i = 0; i < p.n(); ++i) {
    const WorkerEnv env = build_worker_env(p.job, v.layout, i, 0, p.parent);
    const std::string rank = v.ranks_known ? std::to_string(v.layout.first_rank + i) : "<rank>";
    std::cout << "rank " << rank << " (" << describe(p.job.devices[size_t(i)]) << "): " << join_command(p.command) << "\n";
    for (const auto& [k, val] : env.set) std::cout << "  " << k << "=" << (v.undecided.count(k) ? v.marker : val) << "\n";
    for (const auto& u : env.unset) std::cout << "  unset " << u << "\n";
    std::cout << "  log: " << (v.ranks_known ? worker_log_path(p.job.log_dir, v.layout.first_rank + i)
                                            : p.job.log_dir + "/workerlog.<global rank>")
              << "\n";
  }
  return 0;
}

}  // namespace launch
