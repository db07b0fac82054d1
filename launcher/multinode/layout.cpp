#include "launcher/multinode/layout.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "launcher/multinode/json_record.h"

namespace launch::multinode {
namespace {

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i ? sep : "") + v[i];
  return out;
}

// "gpu01 (10.0.0.1)" or just the address when the host name is unknown or the same.
std::string who(const NodeRegistration& r) {
  if (r.hostname.empty() || r.hostname == r.host) return r.host;
  return r.hostname + " (" + r.host + ")";
}

}  // namespace

bool NodeRegistration::operator==(const NodeRegistration& o) const {
  return host == o.host && requested_rank == o.requested_rank && nproc == o.nproc &&
         devices == o.devices && endpoints == o.endpoints && master_endpoint == o.master_endpoint &&
         hostname == o.hostname && id == o.id && serves_store == o.serves_store;
}

std::string JobLayout::trainer_endpoints() const { return join(endpoints, ","); }

// --- Validation and rank assignment ---

void validate_registration(const NodeRegistration& r, int nnodes) {
  if (nnodes < 1) throw LayoutError("--nnodes " + std::to_string(nnodes) + " must be at least 1");
  if (r.host.empty()) throw LayoutError("a node registered without a host address (give --host)");
  if (r.requested_rank < -1 || r.requested_rank >= nnodes)
    throw LayoutError("node " + who(r) + ": --rank " + std::to_string(r.requested_rank) +
                      " is out of range for --nnodes " + std::to_string(nnodes) + " (use 0.." +
                      std::to_string(nnodes - 1) + ", or -1 for arrival order)");
  if (r.nproc < 1)
    throw LayoutError("node " + who(r) + " registered " + std::to_string(r.nproc) +
                      " processes (needs at least 1)");
  if (r.endpoints.size() != size_t(r.nproc))
    throw LayoutError("node " + who(r) + " registered " + std::to_string(r.nproc) + " processes but " +
                      std::to_string(r.endpoints.size()) + " endpoints");
  if (!r.devices.empty() && r.devices.size() != size_t(r.nproc))
    throw LayoutError("node " + who(r) + " registered " + std::to_string(r.nproc) + " processes but " +
                      std::to_string(r.devices.size()) + " devices");
}

std::vector<NodeInfo> assign_node_ranks(const std::vector<NodeRegistration>& by_arrival, int nnodes) {
  if (nnodes < 1) throw LayoutError("--nnodes " + std::to_string(nnodes) + " must be at least 1");
  if (by_arrival.size() != size_t(nnodes))
    throw LayoutError(std::to_string(by_arrival.size()) + " nodes registered but --nnodes is " +
                      std::to_string(nnodes) + " (every node must give the same --nnodes)");
  for (const auto& r : by_arrival) validate_registration(r, nnodes);

  std::vector<int> rank_of(by_arrival.size(), -1);
  std::map<int, size_t> claimed;  // explicit node rank -> arrival
  for (size_t a = 0; a < by_arrival.size(); ++a) {
    int want = by_arrival[a].requested_rank;
    if (want < 0) continue;
    auto [it, fresh] = claimed.emplace(want, a);
    if (!fresh)
      throw LayoutError("node rank " + std::to_string(want) + " requested by both " +
                        who(by_arrival[it->second]) + " and " + who(by_arrival[a]) +
                        ": give each node a distinct --rank (or -1 for arrival order)");
    rank_of[a] = want;
  }
  // Nodes without --rank take the lowest free ranks: the store's host first, then first come
  // first served. Deterministic, since every node reads the same records in the same order.
  int next = 0;
  auto take_next = [&](size_t a) {
    while (claimed.count(next)) ++next;
    rank_of[a] = next;
    claimed.emplace(next, a);
  };
  for (size_t a = 0; a < by_arrival.size(); ++a)
    if (rank_of[a] < 0 && by_arrival[a].serves_store) take_next(a);
  for (size_t a = 0; a < by_arrival.size(); ++a)
    if (rank_of[a] < 0) take_next(a);

  std::vector<NodeInfo> nodes(by_arrival.size());
  for (size_t a = 0; a < by_arrival.size(); ++a) {
    NodeInfo& n = nodes[size_t(rank_of[a])];
    const NodeRegistration& r = by_arrival[a];
    n.node_rank = rank_of[a];
    n.arrival = int(a);
    n.host = r.host;
    n.hostname = r.hostname;
    n.nproc = r.nproc;
    n.devices = r.devices;
    n.serves_store = r.serves_store;
  }
  int offset = 0;
  for (auto& n : nodes) {
    n.rank_offset = offset;
    offset += n.nproc;
  }

  // Two workers on one endpoint would fail much later, inside the framework: refuse now.
  std::map<std::string, size_t> owner;
  for (size_t a = 0; a < by_arrival.size(); ++a)
    for (const auto& ep : by_arrival[a].endpoints) {
      auto [it, fresh] = owner.emplace(ep, a);
      if (!fresh)
        throw LayoutError("endpoint " + ep + " registered by both " + who(by_arrival[it->second]) +
                          " and " + who(by_arrival[a]) + ": give each node its own --host or ports");
    }
  return nodes;
}

JobLayout compute_layout(const std::vector<NodeRegistration>& by_arrival, int nnodes,
                         size_t self_arrival, int generation) {
  if (self_arrival >= by_arrival.size())
    throw LayoutError("this node's record (arrival " + std::to_string(self_arrival) +
                      ") is not among the " + std::to_string(by_arrival.size()) + " registrations");
  JobLayout l;
  l.generation = generation;
  l.nnodes = nnodes;
  l.nodes = assign_node_ranks(by_arrival, nnodes);
  for (const auto& n : l.nodes) {
    const auto& eps = by_arrival[size_t(n.arrival)].endpoints;
    l.endpoints.insert(l.endpoints.end(), eps.begin(), eps.end());
    if (size_t(n.arrival) == self_arrival) {
      l.node_rank = n.node_rank;
      l.rank_offset = n.rank_offset;
      l.local_size = n.nproc;
    }
  }
  l.world_size = int(l.endpoints.size());
  const NodeRegistration& first = by_arrival[size_t(l.nodes[0].arrival)];
  // Without a master endpoint from node 0, its rank 0 endpoint is the natural rendezvous point.
  l.framework_master = first.master_endpoint.empty() ? first.endpoints[0] : first.master_endpoint;
  return l;
}

// --- Timeout message ---

namespace {

// "GPU07.cluster.example" -> "gpu07"
std::string short_name(const std::string& name) {
  std::string s = name.substr(0, name.find('.'));
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

bool is_address(const std::string& s) { return !s.empty() && s.find_first_not_of("0123456789.") == std::string::npos; }

}  // namespace

bool same_host(const ExpectedHost& h, const NodeRegistration& r) {
  for (const auto& a : h.addresses)
    if (a == r.host) return true;
  if (is_address(h.name) || r.hostname.empty()) return h.name == r.host;
  return short_name(h.name) == short_name(r.hostname);
}

std::string describe_missing(int nnodes, const std::vector<NodeRegistration>& arrived,
                             const std::vector<ExpectedHost>& expected_hosts, double waited_s) {
  int missing = nnodes - int(arrived.size());
  char waited[32];
  std::snprintf(waited, sizeof waited, waited_s < 10 ? "%.1f" : "%.0f", waited_s);
  std::string msg = "rendezvous timed out after " + std::string(waited) + " s: " +
                    std::to_string(std::max(missing, 0)) + " of " + std::to_string(nnodes) +
                    " nodes did not arrive";

  std::vector<std::string> details;
  if (!expected_hosts.empty()) {
    for (const auto& h : expected_hosts)
      if (std::none_of(arrived.begin(), arrived.end(), [&](const NodeRegistration& r) { return same_host(h, r); }))
        details.push_back(h.name);
    if (!details.empty()) msg += " (missing hosts: " + join(details, ", ") + ")";
  } else {
    // Node ranks can be named only when every arrived node claimed one explicitly.
    bool all_explicit = std::all_of(arrived.begin(), arrived.end(),
                                    [](const NodeRegistration& r) { return r.requested_rank >= 0; });
    if (all_explicit && missing > 0) {
      std::set<int> claimed;
      for (const auto& r : arrived) claimed.insert(r.requested_rank);
      for (int k = 0; k < nnodes; ++k)
        if (!claimed.count(k)) details.push_back(std::to_string(k));
      msg += std::string(" (missing node rank") + (details.size() > 1 ? "s " : " ") + join(details, ", ") + ")";
    }
  }

  std::vector<std::string> here;
  for (const auto& r : arrived)
    here.push_back(who(r) + (r.requested_rank >= 0 ? " rank " + std::to_string(r.requested_rank) : ""));
  msg += "; arrived: " + (here.empty() ? std::string("none") : join(here, ", "));
  msg += ". Start the missing node(s) with the same --nnodes, --master, --job_id and token, or raise "
         "--elastic_timeout";
  return msg;
}

// --- Records on the wire ---

std::string encode_registration(const NodeRegistration& r) {
  nlohmann::json j = {{"host", r.host},         {"hostname", r.hostname},
                      {"rank", r.requested_rank}, {"nproc", r.nproc},
                      {"devices", r.devices},   {"endpoints", r.endpoints},
                      {"master", r.master_endpoint}, {"id", r.id},
                      {"store", r.serves_store}};
  return j.dump();
}

NodeRegistration decode_registration(const std::string& text) {
  const std::string what = "the node record in the store";
  const nlohmann::json j = parse_record<LayoutError>(text, what);
  NodeRegistration r;
  auto field = [&](const char* name, auto& out) { record_field<LayoutError>(j, name, out, what); };
  field("host", r.host);
  field("hostname", r.hostname);
  field("rank", r.requested_rank);
  field("nproc", r.nproc);
  field("devices", r.devices);
  field("endpoints", r.endpoints);
  field("master", r.master_endpoint);
  field("id", r.id);
  field("store", r.serves_store);
  return r;
}

}  // namespace launch::multinode
