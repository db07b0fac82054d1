#include <catch2/catch.hpp>

#include <csignal>

#include "launcher/blame.h"

using namespace launch;

namespace {

const Termination lost_code{Termination::How::Exited, proto::kPeerLostExitCode};

RankView alive(int rank, char state = 'S') { return {rank, std::nullopt, std::nullopt, state}; }
RankView ended(int rank, Termination t) { return {rank, t, std::nullopt, 0}; }
RankView lost(int rank, std::optional<int> peer) {
  const std::string who = peer ? "rank " + std::to_string(*peer) : std::string("a peer");
  return {rank, lost_code, proto::PeerLost{peer, "no progress for 3000 ms waiting for " + who}, 0};
}

}  // namespace

TEST_CASE("blame: a failure of its own beats every lost peer, whenever it came", "[launcher][blame]") {
  // Ring of 4: ranks 3 and 0 gave up first; rank 2's SIGSEGV arrived after them.
  const std::vector<RankView> v = {lost(0, 3), alive(1), ended(2, {Termination::How::Signaled, SIGSEGV}), lost(3, 2)};
  const Blame b = blame(v, {0, 3, 2});
  REQUIRE(b.own_failure);
  CHECK(*b.own_failure == 2);
  // A plain non-zero exit counts as its own failure as well.
  const Blame c = blame({lost(0, 1), ended(1, {Termination::How::Exited, 3})}, {0, 1});
  REQUIRE(c.own_failure);
  CHECK(*c.own_failure == 1);
}

TEST_CASE("blame: the chain of lost peers leads to the rank at fault", "[launcher][blame]") {
  // Rank 2 hangs (running, not stopped); rank 3 lost it, rank 0 lost rank 3 and reported first.
  const std::vector<RankView> v = {lost(0, 3), alive(1), alive(2, 'R'), lost(3, 2)};
  const Blame b = blame(v, {0, 3});
  REQUIRE_FALSE(b.own_failure);
  CHECK(b.lost.peer == 2);
  CHECK(b.lost.peer_is == LostPeerReport::Peer::Alive);
  CHECK(b.lost.noticer == 3);  // the one that lost rank 2 itself
  CHECK(b.lost.what == "no progress for 3000 ms waiting for rank 2");
  CHECK(b.lost.peer_state == "is alive but silent: hung, deadlocked or far behind");
  // The chain ends at a rank that ended cleanly, or on another node.
  const Blame e = blame({lost(0, 3), ended(1, {}), lost(3, 1)}, {0, 2});
  CHECK(e.lost.peer == 1);
  CHECK(e.lost.noticer == 3);
  CHECK(e.lost.peer_is == LostPeerReport::Peer::Ended);
  const Blame r = blame({lost(4, 5), lost(5, 7)}, {0, 1});  // ranks 6 and 7 run elsewhere
  CHECK(r.lost.peer == 7);
  CHECK(r.lost.noticer == 5);
  CHECK(r.lost.peer_is == LostPeerReport::Peer::Remote);
}

TEST_CASE("blame: a stopped or stuck worker beats wherever the chain led", "[launcher][blame]") {
  // Rank 0 reported first, naming rank 3, which is still alive (about to give up on rank 2);
  // rank 2 is SIGSTOPped: it is the culprit, and rank 1, which named it, the noticer.
  const std::vector<RankView> v = {lost(0, 3), lost(1, 2), alive(2, 'T'), alive(3, 'S')};
  const Blame b = blame(v, {0, 1});
  REQUIRE_FALSE(b.own_failure);
  CHECK(b.lost.peer == 2);
  CHECK(b.lost.peer_is == LostPeerReport::Peer::Alive);
  CHECK(b.lost.peer_state == "is stopped: SIGSTOP or SIGTSTP");
  CHECK(b.lost.noticer == 1);
  CHECK(b.lost.named);
  // Nobody named it: the first report is the noticer (which did not lose it: "gave up"); 'D'
  // counts as stuck too.
  const Blame d = blame({lost(0, 3), alive(1), alive(2, 'D'), alive(3)}, {0});
  CHECK(d.lost.peer == 2);
  CHECK(d.lost.noticer == 0);
  CHECK_FALSE(d.lost.named);
  CHECK_THAT(d.lost.peer_state, Catch::StartsWith("is stuck in the kernel"));
  // ... and it beats a lost peer on another node, or one nobody could name.
  CHECK(blame({lost(0, 9), alive(1, 't')}, {0}).lost.peer == 1);
  CHECK(blame({lost(0, std::nullopt), alive(1, 'T')}, {0}).lost.peer == 1);
  // Of two stuck ranks, the one a report names: rank 3 is SIGSTOPped and rank 4 lost it; rank 1
  // sits in 'D' for a moment (a healthy rank reading a file), named by nobody.
  const Blame n = blame({lost(0, 2), alive(1, 'D'), alive(2), alive(3, 'T'), lost(4, 3)}, {0, 4});
  CHECK(n.lost.peer == 3);
  CHECK(n.lost.noticer == 4);
  CHECK(n.lost.what == "no progress for 3000 ms waiting for rank 3");
  CHECK(n.lost.peer_state == "is stopped: SIGSTOP or SIGTSTP");
  // A stuck rank the chain reached is kept with its own noticer.
  const Blame k = blame({lost(0, 1), alive(1, 'T'), alive(2, 'D')}, {0});
  CHECK(k.lost.peer == 1);
  CHECK(k.lost.noticer == 0);
}

TEST_CASE("blame: a chain that loops or ends in an unnamed peer leaves the last noticer", "[launcher][blame]") {
  const Blame loop = blame({lost(0, 1), lost(1, 0), alive(2)}, {1, 0});
  CHECK(loop.lost.noticer == 1);
  CHECK_FALSE(loop.lost.peer);
  CHECK(loop.lost.peer_is == LostPeerReport::Peer::Unknown);
  const Blame unnamed = blame({lost(0, 1), lost(1, std::nullopt)}, {0, 1});
  CHECK(unnamed.lost.noticer == 1);
  CHECK(unnamed.lost.peer_is == LostPeerReport::Peer::Unknown);
  // An 86 without the line names nobody either.
  const Blame bare = blame({ended(0, lost_code), alive(1)}, {0});
  CHECK(bare.lost.noticer == 0);
  CHECK(bare.lost.peer_is == LostPeerReport::Peer::Unknown);
  CHECK_THAT(bare.lost.what, Catch::Contains("without a LAUNCH_PEER_LOST line"));
}
