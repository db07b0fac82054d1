#include "proto/peer_lost.h"

namespace proto {

std::string format_peer_lost(const PeerLost& p) {
  std::string out(kPeerLostMarker);
  out += p.peer ? std::to_string(*p.peer) : "?";
  out += ": ";
  for (char c : p.what) out += static_cast<unsigned char>(c) < 0x20 || c == 0x7f ? '?' : c;
  return out;
}

std::optional<PeerLost> parse_peer_lost(std::string_view line) {
  const size_t at = line.find(kPeerLostMarker);
  if (at == std::string_view::npos) return std::nullopt;
  std::string_view rest = line.substr(at + kPeerLostMarker.size());
  PeerLost p;
  size_t i = 0;
  if (!rest.empty() && rest[0] == '?') {
    i = 1;
  } else {
    long long v = 0;
    while (i < rest.size() && i < 10 && rest[i] >= '0' && rest[i] <= '9') v = v * 10 + (rest[i++] - '0');
    if (i == 0 || v > 0x7fffffff) return std::nullopt;
    p.peer = static_cast<int>(v);
  }
  if (rest.substr(i, 2) != ": ") return std::nullopt;
  p.what = std::string(rest.substr(i + 2));
  return p;
}

}  // namespace proto
