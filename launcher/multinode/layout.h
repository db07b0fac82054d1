// Multi-node layout: from the nodes' registrations to every node's place in the job. Pure: no
// store, no sockets, no clocks -- all nodes compute the same layout from the same records.
#pragma once

#include <stdexcept>
#include <string>
#include <vector>

namespace launch::multinode {

// Inconsistent registrations (duplicate or out-of-range --rank, too many nodes, a malformed
// record): every node refuses the job with this message.
class LayoutError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// What one node's launcher tells the others (stored as JSON, see encode_registration).
struct NodeRegistration {
  std::string host;                    // address its workers are reached at (--host)
  int requested_rank = -1;             // --rank, or -1: assigned in arrival order
  int nproc = 0;                       // worker processes on this node
  std::vector<std::string> devices;    // device ids, one per process; empty on CPU
  std::vector<std::string> endpoints;  // "ip:port" per local process, in local rank order
  std::string master_endpoint;         // free "ip:port" for the framework's own store; node 0's is used
  std::string hostname;                // gethostname(), for messages and matching Slurm's hostlist
  std::string id;                      // unique per launcher run: a node recognises its own record
  bool serves_store = false;           // its launcher serves the job's store (it won the bind on --master)

  bool operator==(const NodeRegistration& o) const;
};

struct NodeInfo {
  int node_rank = 0;
  int arrival = 0;      // 0-based order of ADD on the arrival counter
  std::string host;
  std::string hostname;
  int nproc = 0;
  int rank_offset = 0;  // global rank of its local rank 0
  std::vector<std::string> devices;
  bool serves_store = false;  // its launcher serves the job's store
};

// This node's view of the job: what the environment builder needs for its workers.
struct JobLayout {
  int generation = 0;        // 0 for the first run, +1 per restart
  int nnodes = 1;
  int node_rank = 0;
  int rank_offset = 0;       // global rank = rank_offset + local rank
  int local_size = 0;
  int world_size = 0;
  std::vector<std::string> endpoints;  // PADDLE_TRAINER_ENDPOINTS, global rank order
  std::string framework_master;        // PADDLE_MASTER / MASTER_ADDR:MASTER_PORT (node 0's)
  std::string store_address;           // LAUNCH_STORE_ADDR (filled in by the rendezvous)
  std::vector<NodeInfo> nodes;         // by node rank

  // PADDLE_RESTART_COUNT / TORCHELASTIC_RESTART_COUNT
  int restart_count() const { return generation; }
  int global_rank(int local_rank) const { return rank_offset + local_rank; }
  std::string trainer_endpoints() const;  // comma-joined endpoints
};

// Node ranks and rank offsets for `nnodes` registrations given in arrival order. Explicit ranks
// are kept; then the node that serves the store takes the lowest free rank (node 0 unless a
// node asked for 0), and the others the lowest free ranks in arrival order. Throws LayoutError for a
// count other than nnodes, a rank outside [0, nnodes), two nodes asking for the same rank
// (naming both hosts), or a record that is inconsistent (nproc vs endpoints/devices).
std::vector<NodeInfo> assign_node_ranks(const std::vector<NodeRegistration>& by_arrival, int nnodes);

// The layout seen by the node whose record is by_arrival[self_arrival].
JobLayout compute_layout(const std::vector<NodeRegistration>& by_arrival, int nnodes,
                         size_t self_arrival, int generation = 0);

// Checks one record before it is published, so a bad --rank fails on the node that gave it.
void validate_registration(const NodeRegistration& r, int nnodes);

// A host the job expects (Slurm's node list), with the IPv4 addresses its name resolves to.
struct ExpectedHost {
  std::string name;                    // as Slurm spells it: "gpu07" or "gpu07.cluster.example"
  std::vector<std::string> addresses;  // empty when it does not resolve
};

// Whether the node that registered `r` is `h`: one of h's addresses is r's, or the names agree
// up to case and domain ("gpu07" and "GPU07.cluster.example"; gethostname may return either).
bool same_host(const ExpectedHost& h, const NodeRegistration& r);

// The rendezvous timeout message: which node ranks (or, when the expected hosts are known, e.g.
// from Slurm, which hosts) did not arrive, and which did. `arrived` are the records present, in
// arrival order.
std::string describe_missing(int nnodes, const std::vector<NodeRegistration>& arrived,
                             const std::vector<ExpectedHost>& expected_hosts, double waited_s);

// --- Records on the wire (JSON) ---
std::string encode_registration(const NodeRegistration& r);
// Throws LayoutError naming the field that is missing or of the wrong type.
NodeRegistration decode_registration(const std::string& json);

}  // namespace launch::multinode
