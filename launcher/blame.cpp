#include "launcher/blame.h"

#include <set>
#include <stdexcept>

namespace launch {

namespace {

bool lost_a_peer(const RankView& v) { return v.end && exit_code_of(*v.end) == proto::kPeerLostExitCode; }

std::optional<size_t> index_of(const std::vector<RankView>& ranks, int rank) {
  for (size_t i = 0; i < ranks.size(); ++i)
    if (ranks[i].rank == rank) return i;
  return std::nullopt;
}

// A worker that ended with the peer-lost code, as the noticer: what it said it lost.
LostPeerReport noticed_by(const RankView& v) {
  LostPeerReport r;
  r.noticer = v.rank;
  r.end = *v.end;
  if (v.lost) {
    r.peer = v.lost->peer;
    r.what = v.lost->what;
  } else {
    r.what = "exited with code " + std::to_string(proto::kPeerLostExitCode) + " without a LAUNCH_PEER_LOST line";
  }
  return r;
}

}  // namespace

bool looks_stuck(char s) { return s == 'T' || s == 't' || s == 'D'; }

std::string describe_state(char s) {
  switch (s) {
    case 'T': return "is stopped: SIGSTOP or SIGTSTP";
    case 't': return "is stopped by a debugger";
    case 'D': return "is stuck in the kernel: uninterruptible sleep, e.g. in a driver or a file system";
    default: return "is alive but silent: hung, deadlocked or far behind";
  }
}

Blame blame(const std::vector<RankView>& ranks, const std::vector<size_t>& failed) {
  if (failed.empty()) throw std::logic_error("blame: no failure");
  Blame b;
  // 1. A failure of its own explains every lost peer.
  for (size_t i : failed)
    if (!lost_a_peer(ranks.at(i))) {
      b.own_failure = i;
      return b;
    }

  // 3. Follow the chain of reports from the first one.
  LostPeerReport& r = b.lost;
  size_t at = failed.front();
  std::set<int> seen{ranks[at].rank};
  while (true) {
    r = noticed_by(ranks[at]);
    if (!r.peer) {
      r.peer_is = LostPeerReport::Peer::Unknown;
      break;
    }
    const std::optional<size_t> p = index_of(ranks, *r.peer);
    if (!p) {
      r.peer_is = LostPeerReport::Peer::Remote;
      break;
    }
    const RankView& peer = ranks[*p];
    if (!peer.end) {
      r.peer_is = LostPeerReport::Peer::Alive;
      r.peer_state = describe_state(peer.state);
      break;
    }
    if (!lost_a_peer(peer)) {
      r.peer_is = LostPeerReport::Peer::Ended;  // a failure of its own was taken above
      break;
    }
    if (!seen.insert(peer.rank).second) {
      // A loop ("0 lost 3", "3 lost 0"): nobody in it can say who stopped first; the first to
      // report it is named.
      r = noticed_by(ranks[failed.front()]);
      r.peer.reset();
      r.peer_is = LostPeerReport::Peer::Unknown;
      break;
    }
    at = *p;  // it lost a peer too: ask it
  }

  // 2. A worker that cannot run beats wherever the chain led, unless the chain led to it.
  const auto chain_end = r.peer ? index_of(ranks, *r.peer) : std::nullopt;
  if (r.peer_is == LostPeerReport::Peer::Alive && chain_end && looks_stuck(ranks[*chain_end].state)) return b;
  // The one the reports name first (with its noticer); else the first in rank order, noticed
  // by the first report: a rank in 'D' for a moment (reading a file) must not take the place of
  // the stopped one a report names.
  auto stuck = [&](size_t i) { return !ranks[i].end && looks_stuck(ranks[i].state); };
  std::optional<size_t> culprit;
  size_t noticer = failed.front();
  for (size_t i : failed) {
    if (!ranks[i].lost || !ranks[i].lost->peer) continue;
    const std::optional<size_t> p = index_of(ranks, *ranks[i].lost->peer);
    if (p && stuck(*p)) {
      culprit = p;
      noticer = i;
      break;
    }
  }
  for (size_t i = 0; !culprit && i < ranks.size(); ++i)
    if (stuck(i)) culprit = i;
  if (culprit) {
    r = noticed_by(ranks[noticer]);
    r.named = r.peer == ranks[*culprit].rank;
    r.peer = ranks[*culprit].rank;
    r.peer_is = LostPeerReport::Peer::Alive;
    r.peer_state = describe_state(ranks[*culprit].state);
  }
  return b;
}

}  // namespace launch
