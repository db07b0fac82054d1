#include "launcher/multinode/presence.h"

#include "launcher/multinode/keys.h"

namespace launch::multinode {

void Presence::on_client(const std::string& client_name, bool open, Clock::time_point now) {
  const auto who = parse_monitor_client_name(client_name);
  if (!who) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (open) {
    ++seen_[*who].open;
    return;
  }
  auto it = seen_.find(*who);  // the end of a connection we never saw open: none of our business
  if (it != seen_.end() && it->second.open > 0 && --it->second.open == 0) it->second.closed = now;
}

std::optional<Presence::Clock::time_point> Presence::gone_since(int g, int node_rank) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = seen_.find({g, node_rank});
  if (it == seen_.end() || it->second.open > 0) return std::nullopt;
  return it->second.closed;
}

}  // namespace launch::multinode
