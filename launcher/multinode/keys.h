// Store keys of the multi-node rendezvous. One namespace per generation, so a restarted job
// re-registers from scratch and never reads a record of the run before.
//
// Not under proto::kReservedPrefix ("__launch/"): those keys only the serving launcher may
// write, and here the launchers of the other nodes write as ordinary clients.
#pragma once

#include <string>
#include <string_view>

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

}  // namespace launch::multinode
