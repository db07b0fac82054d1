// Store keys of the multi-node rendezvous. One namespace per generation, so a restarted job
// re-registers from scratch and never reads a record of the run before.
//
// Not under proto::kReservedPrefix ("__launch/"): those keys only the serving launcher may
// write, and here the launchers of the other nodes write as ordinary clients.
#pragma once

#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

namespace launch::multinode {

inline constexpr std::string_view kKeyPrefix = "__multinode/gen/";

inline std::string gen_prefix(int generation) {
  return std::string(kKeyPrefix) + std::to_string(generation) + "/";
}
// ADD counter: the order in which nodes arrived (1 for the first).
inline std::string arrivals_key(int g) { return gen_prefix(g) + "arrivals"; }
// The registration (JSON) of the node that arrived `arrival`-th (0-based).
inline std::string node_key(int g, int arrival) { return gen_prefix(g) + "node/" + std::to_string(arrival); }
// ADD counter bumped by node `node_rank`'s launcher every heartbeat period.
inline std::string heartbeat_key(int g, int node_rank) {
  return gen_prefix(g) + "heartbeat/" + std::to_string(node_rank);
}
// Set by node `node_rank`'s launcher once its workers all exited 0: its silence is no failure.
inline std::string done_key(int g, int node_rank) { return gen_prefix(g) + "done/" + std::to_string(node_rank); }
// The generation's first failure (JSON FailureRecord), written with COMPARE_SET: first wins.
inline std::string failed_key(int g) { return gen_prefix(g) + "failed"; }

// The client name a node's monitor gives in its HELLO: the launcher serving the store knows from
// it whose connection closed (presence.h). At most 64 bytes, as the store keeps them.
inline std::string monitor_client_name(int g, int node_rank) {
  return "node " + std::to_string(node_rank) + " monitor, generation " + std::to_string(g);
}
// (generation, node rank) of a monitor's client name; nullopt for any other client.
inline std::optional<std::pair<int, int>> parse_monitor_client_name(const std::string& name) {
  int node = -1, g = -1, end = 0;
  if (std::sscanf(name.c_str(), "node %d monitor, generation %d%n", &node, &g, &end) != 2 || node < 0 || g < 0 ||
      size_t(end) != name.size() || name != monitor_client_name(g, node))
    return std::nullopt;
  return std::make_pair(g, node);
}

}  // namespace launch::multinode
