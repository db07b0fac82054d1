// "A peer vanished": how a worker that gives up because another rank closed its connection or
// went silent tells the launcher which rank that was, so that the failure report names the rank
// at fault rather than the one that noticed (issue 14). The worker prints one line
//   LAUNCH_PEER_LOST rank=3: no progress for 30000 ms waiting for rank 3 (ring all-reduce)
// ("rank=?" when it cannot tell which) on stdout or stderr, and exits with kPeerLostExitCode.
// Both are needed: the code alone does not say which peer, and a line without the code is just
// output. Any program may follow this contract (docs/launch.md, "Supervision and exit codes").
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace proto {

// Chosen outside the codes shells (126, 127, 128+n) and sysexits.h (64-78) give meanings to.
inline constexpr int kPeerLostExitCode = 86;
inline constexpr std::string_view kPeerLostMarker = "LAUNCH_PEER_LOST rank=";

struct PeerLost {
  std::optional<int> peer;  // global rank; nullopt: the worker could not tell which
  std::string what;         // what it saw
};

// The line (without '\n'); control characters in `what` become '?', so it stays one line.
std::string format_peer_lost(const PeerLost& p);
// The record in a line of output, if the line holds one (anywhere in it).
std::optional<PeerLost> parse_peer_lost(std::string_view line);

}  // namespace proto
