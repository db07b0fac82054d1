// Which nodes' launchers are connected to the store that this launcher (node 0) serves. A node's
// launcher that dies -- SIGKILL, the OOM killer, a crash -- has its connections closed by the
// kernel at once, and the store sees it within milliseconds; its heartbeat would tell only after
// the heartbeat timeout (5 s). So the node serving the store declares a node whose monitor's
// connection closed, and was not made again within a short grace, as stopped: within a second
// of its death instead of 8.5 s (issue 22). A launcher that is stopped or cut off keeps its
// connection, and is found by the heartbeat as before.
//
// Fed by the store's thread (store::StoreServerConfig::on_client) with the client names the monitors
// give (keys.h: monitor_client_name); read by the monitor's thread. Pure but for a mutex: the
// caller passes the time.
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace launch::multinode {

class Presence {
 public:
  using Clock = std::chrono::steady_clock;

  // A connection with this client name was accepted (open) or ended. Other clients are ignored.
  void on_client(const std::string& client_name, bool open, Clock::time_point now);
  // Since when node `node_rank`'s monitor of generation `g` has had no connection, after having
  // had one; nullopt while it is connected, or when it never was.
  std::optional<Clock::time_point> gone_since(int g, int node_rank) const;

 private:
  struct Seen {
    int open = 0;  // connections now (a reconnect may overlap the old one's end)
    Clock::time_point closed;
  };
  mutable std::mutex mu_;
  std::map<std::pair<int, int>, Seen> seen_;  // by (generation, node rank)
};

}  // namespace launch::multinode
